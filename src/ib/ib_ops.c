/*
 * The ib backend's entry points: the ferry_ib_ops table, the checks every
 * data-path entry makes on its comm and memory handles (a closed comm, the
 * wrong kind, a buffer outside its registration are named in a WARN),
 * memory registration through the device half's MR cache, test(), close,
 * and the ring ops the engine calls back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_comm.h"

ferry_config_t ferry_ib_core_cfg;

const ferry_px_ring_ops_t ferry_ib_send_ring_ops = {
    .unit      = "WRs",
    .poll      = ferry_ib_poll,
    .stall_why = ferry_ib_stall_why,
    .state     = ferry_ib_state_words,
    .dump      = ferry_ib_dump,
};

const ferry_px_ring_ops_t ferry_ib_recv_ring_ops = {
    .unit      = "WRs",
    .poll      = ferry_ib_poll,
    .stall_why = ferry_ib_stall_why,
    .state     = ferry_ib_state_words,
    .dump      = ferry_ib_dump,
};

static void ferry_ib_format_config(char *buf, size_t len)
{
    ferry_ib_config_format(&ferry_ib_state.cfg, buf, len);
}

static ferry_status_t ferry_ib_ops_init(const ferry_config_t *cfg)
{
    ferry_ib_core_cfg = *cfg;
    return ferry_ib_init(cfg);
}

static const char *ferry_ib_magic_words(uint64_t magic)
{
    switch (magic) {
    case FERRY_IB_SEND_MAGIC:   return "a send comm";
    case FERRY_IB_RECV_MAGIC:   return "a receive comm";
    case FERRY_IB_LISTEN_MAGIC: return "a listen comm";
    case FERRY_IB_DEAD_MAGIC:   return "a closed comm";
    default:                    return "not a ferry ib comm";
    }
}

/*
 * A handle registered on a send comm (local access only) is used for a
 * receive: register its range for remote writes now, once (regIsGlobal lets
 * NCCL share handles between comms of a device).
 */
static ferry_status_t ferry_ib_mh_allow_remote(const ferry_ib_comm_t *c, ferry_ib_mh_t *mh,
                                               const char *fn)
{
    char err[320];
    ferry_status_t status;

    status = ferry_ib_mr_get(mh->hca, (void *)mh->base, mh->size,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0, &mh->mr_remote,
                             err, sizeof(err));
    if (status != FERRY_OK) {
        FERRY_WARN("%s on comm to %s (%s): buffer %p + %zu bytes was registered on a send comm; "
                   "registering it for the peer's writes failed: %s", fn, c->conn.peer,
                   ferry_ib_comm_where(c), (void *)mh->base, mh->size, err);
        mh->mr_remote = NULL;
        return status;
    }
    FERRY_INFO(FERRY_LOG_NET, "%s on comm to %s: buffer %p + %zu bytes, registered on a send "
               "comm, now also takes the peer's writes", fn, c->conn.peer, (void *)mh->base,
               mh->size);
    return FERRY_OK;
}

/* The comm if it is a live one of kind magic; else WARN naming fn and NULL. */
static ferry_ib_comm_t *ferry_ib_comm_check(void *comm, uint64_t magic, const char *fn)
{
    ferry_ib_comm_t *c = comm;

    if (c != NULL && c->magic == magic)
        return c;
    FERRY_WARN("%s(%p): expected a live ferry ib %s comm, got %s", fn, comm,
               magic == FERRY_IB_SEND_MAGIC ? "send" : "receive",
               c == NULL ? "NULL" : ferry_ib_magic_words(c->magic));
    return NULL;
}

/* A buffer NCCL passes must lie inside the handle it passes with it. */
static ferry_status_t ferry_ib_mh_check(const ferry_ib_comm_t *c, const void *mhandle,
                                        const void *data, size_t size, const char *fn)
{
    const ferry_ib_mh_t *mh = mhandle;
    uintptr_t p = (uintptr_t)data;

    if (size == 0 && (mh == NULL || mh->magic == FERRY_IB_MH_MAGIC))
        return FERRY_OK;
    if (mh == NULL || mh->magic != FERRY_IB_MH_MAGIC) {
        FERRY_WARN("%s on comm to %s: memory handle %p is not a live ferry ib registration%s",
                   fn, c->conn.peer, mhandle,
                   mh != NULL && mh->magic == FERRY_IB_DEAD_MAGIC ? " (deregistered)" : "");
        return FERRY_ERR_INVALID;
    }
    if (p < mh->base || size > mh->size || p - mh->base > mh->size - size) {
        FERRY_WARN("%s on comm to %s: buffer %p + %zu bytes lies outside its registration "
                   "%p + %zu bytes", fn, c->conn.peer, data, size, (void *)mh->base, mh->size);
        return FERRY_ERR_INVALID;
    }
    if (mh->hca != c->conn.dev->hca) {
        FERRY_WARN("%s on comm to %s: buffer %p was registered on another device (%s), this "
                   "comm runs on %s", fn, c->conn.peer, data, mh->hca->name,
                   ferry_ib_comm_where(c));
        return FERRY_ERR_INVALID;
    }
    if (c->ring.kind == FERRY_PX_RECV && mh->mr_remote == NULL && mh->size > 0)
        return ferry_ib_mh_allow_remote(c, (ferry_ib_mh_t *)mhandle, fn);
    return FERRY_OK;
}

static ferry_status_t ferry_ib_reg_mr(void *comm, void *data, size_t size, int type,
                                      void **mhandle_p)
{
    ferry_ib_comm_t *c = comm;
    ferry_ib_mh_t *mh;
    ferry_status_t status;
    char err[320];
    int access;

    *mhandle_p = NULL;
    if (c == NULL || (c->magic != FERRY_IB_SEND_MAGIC && c->magic != FERRY_IB_RECV_MAGIC)) {
        FERRY_WARN("regMr(%p): expected a live ferry ib send or receive comm, got %s", comm,
                   c == NULL ? "NULL" : ferry_ib_magic_words(c->magic));
        return FERRY_ERR_INVALID;
    }
    if (type != FERRY_PTR_HOST) {
        FERRY_WARN("regMr(%p, %zu bytes, type %d) on comm to %s: the ib backend takes host "
                   "memory only for now (GPU buffers are not supported yet); set "
                   "NCCL_NET_GDR_LEVEL=LOC or use NCCL_FERRY_BACKEND=socket", data, size, type,
                   c->conn.peer);
        return FERRY_ERR_UNSUPPORTED;
    }
    mh = calloc(1, sizeof(*mh));
    if (mh == NULL)
        return FERRY_ERR_NO_MEMORY;
    /* Receive buffers take the peer's writes; send buffers are only read by our NIC. */
    access = c->ring.kind == FERRY_PX_RECV ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
    if (size > 0) {
        status = ferry_ib_mr_get(c->conn.dev->hca, data, size, access, 0, &mh->mr, err,
                                 sizeof(err));
        if (status != FERRY_OK) {
            FERRY_WARN("regMr(%p, %zu bytes) on %s comm to %s (%s): %s", data, size,
                       c->ring.kind == FERRY_PX_RECV ? "receive" : "send", c->conn.peer,
                       ferry_ib_comm_where(c), err);
            free(mh);
            return status;
        }
    }
    mh->magic = FERRY_IB_MH_MAGIC;
    mh->hca = c->conn.dev->hca;
    mh->base = (uintptr_t)data;
    mh->size = size;
    mh->kind = c->ring.kind;
    mh->mr_remote = c->ring.kind == FERRY_PX_RECV ? mh->mr : NULL;
    if (ferry_live_add(mh, FERRY_LIVE_MR) != FERRY_OK) {
        if (mh->mr != NULL)
            ferry_ib_mr_put(mh->hca, mh->mr);
        free(mh);
        return FERRY_ERR_NO_MEMORY;
    }
    *mhandle_p = mh;
    return FERRY_OK;
}

static ferry_status_t ferry_ib_dereg_mr(void *comm, void *mhandle)
{
    ferry_ib_mh_t *mh = mhandle;

    if (mh == NULL)
        return FERRY_OK;
    if (!ferry_live_take(mh, FERRY_LIVE_MR)) {
        FERRY_WARN("deregMr(comm %p, %p): not a live ferry ib memory handle (deregistered "
                   "twice?)", comm, mhandle);
        return FERRY_ERR_INVALID;
    }
    if (mh->mr_remote != NULL && mh->mr_remote != mh->mr)
        ferry_ib_mr_put(mh->hca, mh->mr_remote);
    if (mh->mr != NULL)
        ferry_ib_mr_put(mh->hca, mh->mr);
    ferry_ib_magic_clear(&mh->magic);
    free(mh);
    return FERRY_OK;
}

static ferry_status_t ferry_ib_ops_isend(void *send_comm, void *data, size_t size, int tag,
                                         void *mhandle, void **request_p)
{
    ferry_ib_comm_t *c = ferry_ib_comm_check(send_comm, FERRY_IB_SEND_MAGIC, "isend");
    ferry_status_t status;

    *request_p = NULL;
    if (c == NULL)
        return FERRY_ERR_INVALID;
    status = ferry_ib_mh_check(c, mhandle, data, size, "isend");
    if (status != FERRY_OK)
        return status;
    return ferry_ib_isend(send_comm, data, size, tag, mhandle, request_p);
}

static ferry_status_t ferry_ib_ops_irecv(void *recv_comm, int n, void **data, size_t *sizes,
                                         int *tags, void **mhandles, void **request_p)
{
    ferry_ib_comm_t *c = ferry_ib_comm_check(recv_comm, FERRY_IB_RECV_MAGIC, "irecv");
    ferry_status_t status;
    int i;

    *request_p = NULL;
    if (c == NULL)
        return FERRY_ERR_INVALID;
    if (n < 1 || n > FERRY_IB_MAX_RECVS) {
        FERRY_WARN("irecv on comm from %s: %d buffers; the ib backend takes 1..%d (maxRecvs)",
                   c->conn.peer, n, FERRY_IB_MAX_RECVS);
        return FERRY_ERR_INVALID;
    }
    for (i = 0; i < n; i++) {
        status = ferry_ib_mh_check(c, mhandles != NULL ? mhandles[i] : NULL, data[i], sizes[i],
                                   "irecv");
        if (status != FERRY_OK)
            return status;
    }
    return ferry_ib_irecv(recv_comm, n, data, sizes, tags, mhandles, request_p);
}

static ferry_status_t ferry_ib_test(void *request, int *done_p, int *sizes)
{
    ferry_px_req_t *req = request;
    ferry_ib_comm_t *c;

    *done_p = 0;
    c = req != NULL ? (ferry_ib_comm_t *)req->ring : NULL;
    if (c == NULL || (c->magic != FERRY_IB_SEND_MAGIC && c->magic != FERRY_IB_RECV_MAGIC) ||
        req < c->ring.reqs || req >= c->ring.reqs + FERRY_MAX_REQUESTS) {
        FERRY_WARN("test(%p): not a request of a live ferry ib comm%s", request,
                   c != NULL && c->magic == FERRY_IB_DEAD_MAGIC ? " (its comm is closed)" : "");
        return FERRY_ERR_INVALID;
    }
    return ferry_px_ring_test(&c->ring, req, done_p, sizes);
}

static ferry_status_t ferry_ib_close(void *comm, uint64_t magic, const char *fn)
{
    ferry_ib_comm_t *c;

    if (comm == NULL)
        return FERRY_OK;
    /* Taken out of the live set before anything is read: a second close touches nothing. */
    if (!ferry_live_take(comm, magic == FERRY_IB_SEND_MAGIC ? FERRY_LIVE_SEND : FERRY_LIVE_RECV)) {
        int other = ferry_live_has(comm, magic == FERRY_IB_SEND_MAGIC ? FERRY_LIVE_RECV
                                                                      : FERRY_LIVE_SEND);

        FERRY_WARN("%s(%p): not a live ferry ib %s comm (%s)", fn, comm,
                   magic == FERRY_IB_SEND_MAGIC ? "send" : "recv",
                   !other ? "closed already?"
                   : magic == FERRY_IB_SEND_MAGIC ? "it is a live recv comm: left open"
                                                  : "it is a live send comm: left open");
        return FERRY_ERR_INVALID;
    }
    c = comm;
    FERRY_INFO(FERRY_LOG_NET, "ib %s comm #%u with %s on %s closed", fn + 5, c->ring.serial,
               c->conn.peer, ferry_ib_comm_where(c));
    ferry_ib_comm_destroy(c);
    return FERRY_OK;
}

static ferry_status_t ferry_ib_close_send(void *send_comm)
{
    return ferry_ib_close(send_comm, FERRY_IB_SEND_MAGIC, "closeSend");
}

static ferry_status_t ferry_ib_close_recv(void *recv_comm)
{
    return ferry_ib_close(recv_comm, FERRY_IB_RECV_MAGIC, "closeRecv");
}

static ferry_status_t ferry_ib_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                             uint64_t offset, int fd, void **mhandle_p)
{
    *mhandle_p = NULL;
    FERRY_WARN("regMrDmaBuf(%p, %zu bytes, fd %d): the ib backend takes host memory only for "
               "now (DMA-BUF GPU buffers are not supported yet)", data, size, fd);
    return FERRY_ERR_UNSUPPORTED;
}

const ferry_backend_ops_t ferry_ib_ops = {
    .name           = "ib",
    .host_staged    = 0,
    .usable         = ferry_ib_usable,
    .format_config  = ferry_ib_format_config,
    .init           = ferry_ib_ops_init,
    .fini           = ferry_ib_fini,
    .devices        = ferry_ib_devices,
    .get_properties = ferry_ib_get_properties,
    .listen         = ferry_ib_listen,
    .connect        = ferry_ib_connect,
    .accept         = ferry_ib_accept,
    .reg_mr         = ferry_ib_reg_mr,
    .reg_mr_dmabuf  = ferry_ib_reg_mr_dmabuf,
    .dereg_mr       = ferry_ib_dereg_mr,
    .isend          = ferry_ib_ops_isend,
    .irecv          = ferry_ib_ops_irecv,
    .iflush         = ferry_no_iflush,
    .test           = ferry_ib_test,
    .close_send     = ferry_ib_close_send,
    .close_recv     = ferry_ib_close_recv,
    .close_listen   = ferry_ib_close_listen,
};
