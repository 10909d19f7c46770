/*
 * listen() and closeListen(): a non-blocking TCP listener on the OOB
 * address (port 0: the kernel picks one), and the handle that tells the
 * peer where it is and which random token its hello must carry.
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

ferry_status_t ferry_ib_listen(ferry_ctx_t *ctx, int dev, void *handle, void **listen_comm_p)
{
    ferry_ib_handle_t *h = handle;
    ferry_ib_listen_comm_t *lc;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int one = 1;

    *listen_comm_p = NULL;
    if (dev < 0 || dev >= ferry_ib_state.ndev) {
        FERRY_WARN("listen(dev=%d): the ib backend has %d device(s)", dev, ferry_ib_state.ndev);
        return FERRY_ERR_INVALID;
    }
    lc = calloc(1, sizeof(*lc));
    if (lc == NULL)
        return FERRY_ERR_NO_MEMORY;
    addr = ferry_ib_state.oob_sa;
    addr_len = ferry_ib_state.oob_sa_len;
    ferry_sock_addr_any_port(&addr);
    lc->fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lc->fd < 0) {
        FERRY_WARN("listen(dev=%d, %s): socket() on the OOB address %s (%s) failed: %s",
                   dev, ferry_ib_dev_name(dev), ferry_ib_state.oob_addr,
                   ferry_ib_state.oob_ifname, strerror(errno));
        free(lc);
        return FERRY_ERR_IO;
    }
    setsockopt(lc->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lc->fd, (struct sockaddr *)&addr, addr_len) != 0 || listen(lc->fd, 16384) != 0 ||
        getsockname(lc->fd, (struct sockaddr *)&addr, &addr_len) != 0) {
        FERRY_WARN("listen(dev=%d, %s): bind/listen on the OOB address %s (%s) failed: %s; "
                   "check NCCL_SOCKET_IFNAME", dev, ferry_ib_dev_name(dev),
                   ferry_ib_state.oob_addr, ferry_ib_state.oob_ifname, strerror(errno));
        close(lc->fd);
        free(lc);
        return FERRY_ERR_IO;
    }
    if (ferry_live_add(lc, FERRY_LIVE_LISTEN) != FERRY_OK) {
        close(lc->fd);
        free(lc);
        return FERRY_ERR_NO_MEMORY;
    }
    lc->magic = FERRY_IB_LISTEN_MAGIC;
    lc->dev = dev;
    lc->token = ferry_ib_random64();
    ferry_ib_addr_str((struct sockaddr *)&addr, lc->addr_str, sizeof(lc->addr_str));

    memset(h, 0, sizeof(*h));
    h->magic = FERRY_IB_MAGIC;
    h->version = FERRY_IB_WIRE_VERSION;
    h->nlanes = 1;
    h->family = addr.ss_family;
    h->token = lc->token;
    ferry_sock_addr_to_wire(&addr, &h->family, &h->port, h->addr, &h->scope_id);
    FERRY_INFO(FERRY_LOG_NET, "ib listening on %s (%s) for %s", lc->addr_str,
               ferry_ib_state.oob_ifname, ferry_ib_dev_name(dev));
    *listen_comm_p = lc;
    return FERRY_OK;
}

void ferry_ib_pending_drop(ferry_ib_listen_comm_t *lc, int i)
{
    ferry_ib_pending_t *p = &lc->pending[i];

    if (p->comm != NULL)
        ferry_ib_comm_destroy(&p->comm->base); /* Its fd is not the comm's yet. */
    if (p->fd >= 0)
        close(p->fd);
    /* Keep the table oldest first: eviction takes pending[0]. */
    memmove(p, p + 1, (size_t)(lc->npending - i - 1) * sizeof(*p));
    lc->npending--;
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
    close(lc->fd);
    ferry_ib_magic_clear(&lc->magic);
    free(lc);
    return FERRY_OK;
}
