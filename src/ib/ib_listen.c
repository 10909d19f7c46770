/*
 * listen() and closeListen(): a non-blocking TCP listener on the OOB
 * address (port 0: the kernel picks one), or in rdmacm mode an rdma_cm
 * listener (ib_cm.c), and the handle that tells the peer where it is and
 * which random token its hello (or its CM private data) must carry.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib_comm.h"

/* The OOB listener: a non-blocking TCP socket on addr (port 0), which gets the port. */
static ferry_status_t ferry_ib_listen_oob(ferry_ib_listen_comm_t *lc,
                                          struct sockaddr_storage *addr, socklen_t *len_p)
{
    int one = 1, dev = lc->dev;

    lc->fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lc->fd < 0) {
        FERRY_WARN("listen(dev=%d, %s): socket() on the OOB address %s (%s) failed: %s",
                   dev, ferry_ib_dev_name(dev), ferry_ib_state.oob_addr,
                   ferry_ib_state.oob_ifname, strerror(errno));
        return FERRY_ERR_IO;
    }
    setsockopt(lc->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lc->fd, (struct sockaddr *)addr, *len_p) != 0 || listen(lc->fd, 16384) != 0 ||
        getsockname(lc->fd, (struct sockaddr *)addr, len_p) != 0) {
        FERRY_WARN("listen(dev=%d, %s): bind/listen on the OOB address %s (%s) failed: %s; "
                   "check NCCL_SOCKET_IFNAME", dev, ferry_ib_dev_name(dev),
                   ferry_ib_state.oob_addr, ferry_ib_state.oob_ifname, strerror(errno));
        close(lc->fd);
        lc->fd = -1;
        return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

static void ferry_ib_listen_release(ferry_ib_listen_comm_t *lc)
{
    if (lc->cm != NULL)
        ferry_ib_cm_listen_close(lc);
    if (lc->fd >= 0)
        close(lc->fd);
    lc->fd = -1;
}

ferry_status_t ferry_ib_listen(ferry_ctx_t *ctx, int dev, void *handle, void **listen_comm_p)
{
    ferry_ib_handle_t *h = handle;
    ferry_ib_listen_comm_t *lc;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    ferry_status_t status;

    *listen_comm_p = NULL;
    if (ferry_ib_vdev_get(dev, "listen") == NULL)
        return FERRY_ERR_INVALID;
    lc = calloc(1, sizeof(*lc));
    if (lc == NULL)
        return FERRY_ERR_NO_MEMORY;
    addr = ferry_ib_state.oob_sa;
    addr_len = ferry_ib_state.oob_sa_len;
    ferry_sockaddr_any_port(&addr);
    lc->dev = dev;
    lc->fd = -1;
    status = ferry_ib_state.cfg.cm == FERRY_IB_CM_RDMACM
                 ? ferry_ib_cm_listen(lc, &addr, &addr_len)
                 : ferry_ib_listen_oob(lc, &addr, &addr_len);
    if (status != FERRY_OK) {
        free(lc);
        return status;
    }
    if (ferry_live_add(lc, FERRY_LIVE_LISTEN) != FERRY_OK) {
        ferry_ib_listen_release(lc);
        free(lc);
        return FERRY_ERR_NO_MEMORY;
    }
    lc->magic = FERRY_IB_LISTEN_MAGIC;
    lc->token = ferry_ib_random64();
    ferry_ib_addr_str((struct sockaddr *)&addr, lc->addr_str, sizeof(lc->addr_str));

    memset(h, 0, sizeof(*h));
    h->magic = FERRY_IB_MAGIC;
    h->version = FERRY_IB_WIRE_VERSION;
    h->nlanes = 1;
    h->family = addr.ss_family;
    h->token = lc->token;
    ferry_sockaddr_to_wire(&addr, &h->family, &h->port, h->addr, &h->scope_id);
    FERRY_INFO(FERRY_LOG_NET, "ib listening on %s (%s%s) for %s", lc->addr_str,
               lc->cm != NULL ? "rdmacm, " : "", ferry_ib_state.oob_ifname,
               ferry_ib_dev_name(dev));
    *listen_comm_p = lc;
    return FERRY_OK;
}

ferry_status_t ferry_ib_close_listen(void *listen_comm)
{
    ferry_ib_listen_comm_t *lc = listen_comm;

    if (lc == NULL)
        return FERRY_OK;
    if (!ferry_live_take(lc, FERRY_LIVE_LISTEN)) {
        FERRY_WARN("closeListen(%p): not a live ferry ib listen comm (closed twice?)",
                   listen_comm);
        return FERRY_ERR_INVALID;
    }
    while (lc->npending > 0)
        ferry_ib_pending_drop(lc, 0);
    ferry_ib_listen_release(lc);
    ferry_ib_magic_clear(&lc->magic);
    free(lc);
    return FERRY_OK;
}
