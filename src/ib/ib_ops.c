/*
 * The ib backend's entry points: the ferry_ib_ops table, the checks every
 * data-path entry makes on its comm and memory handles (a closed comm, the
 * wrong kind, a buffer outside its registration are named in a WARN),
 * memory registration (host, CUDA pointers, DMA-BUF) through the device
 * half's MR cache, iflush's checks (ib_flush.c flushes), test(), close, and
 * the ring ops the engine calls back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_comm.h"
#include "ib/ib_reg_check.h"

_Static_assert(FERRY_IB_MAX_RECVS <= FERRY_PX_MAX_SUBS, "a grouped receive fits a ring slot");

ferry_config_t ferry_ib_core_cfg;

const ferry_px_ring_ops_t ferry_ib_send_ring_ops = {
    .unit      = "WRs",
    .poll      = ferry_ib_poll,
    .stall_why = ferry_ib_stall_why,
    .state     = ferry_ib_state_words,
    .dump      = ferry_ib_dump,
    .wait_why  = ferry_ib_send_wait_why,
};

const ferry_px_ring_ops_t ferry_ib_recv_ring_ops = {
    .unit      = "WRs",
    .poll      = ferry_ib_poll,
    .stall_why = ferry_ib_stall_why,
    .state     = ferry_ib_state_words,
    .dump      = ferry_ib_dump,
    .max_subs  = FERRY_IB_MAX_RECVS, /* maxRecvs: NCCL groups receives. */
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
 * receive: register its range for remote writes now, once per member
 * (regIsGlobal lets NCCL share handles between comms of a device).
 */
static ferry_status_t ferry_ib_mh_allow_remote(const ferry_ib_comm_t *c, ferry_ib_mh_t *mh,
                                               const char *fn)
{
    char err[320];
    ferry_status_t status;
    int m;

    for (m = 0; m < mh->nmem; m++) {
        status = ferry_ib_mr_get(mh->hca[m], (void *)mh->base, mh->size,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0,
                                 &mh->mr_remote[m], err, sizeof(err));
        if (status != FERRY_OK) {
            FERRY_WARN("%s on comm to %s (%s): buffer %p + %zu bytes was registered on a send "
                       "comm; registering it for the peer's writes on %s failed: %s", fn,
                       c->conn.peer, ferry_ib_comm_where(c), (void *)mh->base, mh->size,
                       c->conn.mem[m].dev->name, err);
            while (m-- > 0) {
                ferry_ib_mr_put(mh->hca[m], mh->mr_remote[m]);
                mh->mr_remote[m] = NULL;
            }
            return status;
        }
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

    /*
     * The ring's ops tell the kind as the magic does, and lie on the line
     * isend and irecv read anyway; the magic names what it is instead.
     */
    if (c != NULL && c->ring.ops == (magic == FERRY_IB_SEND_MAGIC ? &ferry_ib_send_ring_ops
                                                                  : &ferry_ib_recv_ring_ops))
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
    if (mh->devidx != c->conn.devidx) {
        FERRY_WARN("%s on comm to %s: buffer %p was registered on another device (%s), this "
                   "comm runs on %s", fn, c->conn.peer, data, ferry_ib_dev_name(mh->devidx),
                   ferry_ib_comm_where(c));
        return FERRY_ERR_INVALID;
    }
    if (c->ring.kind == FERRY_PX_RECV && mh->mr_remote[0] == NULL && mh->size > 0)
        return ferry_ib_mh_allow_remote(c, (ferry_ib_mh_t *)mhandle, fn);
    return FERRY_OK;
}

/* Drop every reference mh holds. */
static void ferry_ib_mh_put(ferry_ib_mh_t *mh)
{
    int m;

    for (m = 0; m < mh->nmem; m++) {
        if (mh->mr_remote[m] != NULL && mh->mr_remote[m] != mh->mr[m])
            ferry_ib_mr_put(mh->hca[m], mh->mr_remote[m]);
        if (mh->mr[m] != NULL)
            ferry_ib_mr_put(mh->hca[m], mh->mr[m]);
    }
}

static const char *ferry_ib_ptr_words(int type)
{
    switch (type) {
    case FERRY_PTR_HOST:   return "host memory";
    case FERRY_PTR_CUDA:   return "GPU memory (CUDA pointer)";
    case FERRY_PTR_DMABUF: return "GPU memory (DMA-BUF)";
    default:               return "an unknown pointer type";
    }
}

/* The comm regMr/regMrDmaBuf name, if it is a live send or receive comm; else WARN and NULL. */
static ferry_ib_comm_t *ferry_ib_reg_comm(void *comm, const char *fn)
{
    ferry_ib_comm_t *c = comm;

    if (c != NULL && (c->magic == FERRY_IB_SEND_MAGIC || c->magic == FERRY_IB_RECV_MAGIC))
        return c;
    FERRY_WARN("%s(%p): expected a live ferry ib send or receive comm, got %s", fn, comm,
               c == NULL ? "NULL" : ferry_ib_magic_words(c->magic));
    return NULL;
}

/*
 * Register rq for comm c as pointer kind type and wrap it in a handle.
 * GPU memory is registered for the peer's writes and for reads (the flush
 * READs it) whatever the comm's kind, as NCCL's IB registers everything: a
 * DMA-BUF cannot be registered again later, its fd is closed by then.
 */
static ferry_status_t ferry_ib_reg(ferry_ib_comm_t *c, ferry_ib_mr_req_t *rq, int type,
                                   const char *fn, void **mhandle_p)
{
    const char *side = c->ring.kind == FERRY_PX_RECV ? "receive" : "send";
    ferry_ib_mh_t *mh;
    ferry_status_t status = FERRY_OK;
    char err[1024];
    int m;

    mh = calloc(1, sizeof(*mh));
    if (mh == NULL)
        return FERRY_ERR_NO_MEMORY;
    rq->gpu = type != FERRY_PTR_HOST;
    /* Receive buffers take the peer's writes; host send buffers are only read by our NIC. */
    if (rq->gpu)
        rq->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    else
        rq->access = c->ring.kind == FERRY_PX_RECV
                         ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
    mh->nmem = c->conn.nmem;
    for (m = 0; m < mh->nmem; m++) {
        mh->hca[m] = c->conn.mem[m].dev->hca;
        if (rq->size == 0)
            continue;
        status = ferry_ib_mr_get_ex(mh->hca[m], rq, &mh->mr[m], err, sizeof(err));
        if (status != FERRY_OK) {
            FERRY_WARN("%s(%p, %zu bytes, %s) on %s comm to %s (device %s): %s", fn, rq->addr,
                       rq->size, ferry_ib_ptr_words(type), side, c->conn.peer,
                       c->conn.mem[m].dev->name, err);
            ferry_ib_mh_put(mh);
            free(mh);
            return status;
        }
        mh->mr_remote[m] = c->ring.kind == FERRY_PX_RECV || rq->gpu ? mh->mr[m] : NULL;
    }
    mh->magic = FERRY_IB_MH_MAGIC;
    mh->devidx = c->conn.devidx;
    mh->base = (uintptr_t)rq->addr;
    mh->size = rq->size;
    mh->kind = c->ring.kind;
    mh->type = type;
    if (ferry_live_add(mh, FERRY_LIVE_MR) != FERRY_OK) {
        ferry_ib_mh_put(mh);
        free(mh);
        return FERRY_ERR_NO_MEMORY;
    }
    if (rq->gpu)
        FERRY_INFO(FERRY_LOG_NET, "%s on %s comm to %s (device %s): %s %p + %zu bytes, lkey "
                   "0x%x rkey 0x%x", fn, side, c->conn.peer, ferry_ib_comm_where(c),
                   ferry_ib_ptr_words(type), rq->addr, rq->size,
                   mh->mr[0] != NULL ? mh->mr[0]->lkey : 0, mh->mr[0] != NULL ? mh->mr[0]->rkey : 0);
    *mhandle_p = mh;
    return FERRY_OK;
}

static ferry_status_t ferry_ib_reg_mr(void *comm, void *data, size_t size, int type,
                                      void **mhandle_p)
{
    ferry_ib_comm_t *c = ferry_ib_reg_comm(comm, "regMr");
    ferry_ib_mr_req_t rq = {data, size, 0, 0, -1, 0, 0};

    *mhandle_p = NULL;
    if (c == NULL)
        return FERRY_ERR_INVALID;
    if (type == FERRY_PTR_CUDA && !ferry_ib_state.gdr) {
        FERRY_WARN("regMr(%p, %zu bytes, GPU memory (CUDA pointer)) on comm to %s (device %s): "
                   "the ib backend takes no GPU pointers here: %s; or keep NCCL's buffers in "
                   "host memory (NCCL_NET_GDR_LEVEL=LOC)", data, size, c->conn.peer,
                   ferry_ib_comm_where(c), ferry_ib_state.gdr_why);
        return FERRY_ERR_UNSUPPORTED;
    }
    if (type != FERRY_PTR_HOST && type != FERRY_PTR_CUDA) {
        FERRY_WARN("regMr(%p, %zu bytes, type %d) on comm to %s: the ib backend takes "
                   "NCCL_PTR_HOST (1) or NCCL_PTR_CUDA (2) here; DMA-BUF comes through "
                   "regMrDmaBuf", data, size, type, c->conn.peer);
        return FERRY_ERR_INVALID;
    }
    if (ferry_ib_reg_check_range(c, "regMr", data, size) != FERRY_OK)
        return FERRY_ERR_ARGUMENT;
    return ferry_ib_reg(c, &rq, type, "regMr", mhandle_p);
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
    ferry_ib_mh_put(mh);
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
    void *hint = *request_p; /* NCCL_NET_OPTIONAL_RECV_COMPLETION, for ferry_ib_irecv. */
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
    *request_p = hint;
    return ferry_ib_irecv(recv_comm, n, data, sizes, tags, mhandles, request_p);
}

static ferry_status_t ferry_ib_ops_iflush(void *recv_comm, int n, void **data, int *sizes,
                                          void **mhandles, void **request_p)
{
    ferry_ib_comm_t *c = ferry_ib_comm_check(recv_comm, FERRY_IB_RECV_MAGIC, "iflush");
    ferry_status_t status;
    int i;

    *request_p = NULL;
    if (c == NULL)
        return FERRY_ERR_INVALID;
    if (n < 1 || n > FERRY_IB_MAX_RECVS || sizes == NULL || data == NULL) {
        FERRY_WARN("iflush on comm from %s: %d buffers%s; the ib backend takes 1..%d with their "
                   "sizes", c->conn.peer, n, sizes == NULL || data == NULL ? " and no sizes" : "",
                   FERRY_IB_MAX_RECVS);
        return FERRY_ERR_INVALID;
    }
    for (i = 0; i < n; i++) {
        if (sizes[i] < 0) {
            FERRY_WARN("iflush on comm from %s: buffer %d has size %d", c->conn.peer, i,
                       sizes[i]);
            return FERRY_ERR_INVALID;
        }
        status = ferry_ib_mh_check(c, mhandles != NULL ? mhandles[i] : NULL, data[i],
                                   (size_t)sizes[i], "iflush");
        if (status != FERRY_OK)
            return status;
    }
    return ferry_ib_iflush((ferry_ib_recv_comm_t *)c, n, data, sizes, mhandles, request_p);
}

static ferry_status_t ferry_ib_test(void *request, int *done_p, int *sizes)
{
    ferry_px_req_t *req = request;
    ferry_ib_comm_t *c;

    *done_p = 0;
    c = req != NULL ? (ferry_ib_comm_t *)req->ring : NULL;
    /* The ring's ops, not the comm's magic: they share the cache line test() reads anyway. */
    if (c == NULL ||
        (c->ring.ops != &ferry_ib_send_ring_ops && c->ring.ops != &ferry_ib_recv_ring_ops) ||
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
    if (magic == FERRY_IB_RECV_MAGIC)
        ferry_ib_flush_close_info((ferry_ib_recv_comm_t *)c);
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

/* NCCL closes fd right after this returns: the MR is registered now, the fd never kept. */
static ferry_status_t ferry_ib_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                             uint64_t offset, int fd, void **mhandle_p)
{
    ferry_ib_comm_t *c = ferry_ib_reg_comm(comm, "regMrDmaBuf");
    ferry_ib_mr_req_t rq = {data, size, 0, 0, fd, offset, 1};

    *mhandle_p = NULL;
    if (c == NULL)
        return FERRY_ERR_INVALID;
    if (!(ferry_ib_gdr_ptr_support(c->conn.dev) & FERRY_PTR_DMABUF)) {
        FERRY_WARN("regMrDmaBuf(%p, %zu bytes, fd %d, offset %llu) on comm to %s (device %s): "
                   "the ib backend does not advertise DMA-BUF here (%s); NCCL only calls this "
                   "when ptrSupport has NCCL_PTR_DMABUF (check NCCL_DMABUF_ENABLE and the "
                   "init line 'ib backend GPU memory')", data, size, fd,
                   (unsigned long long)offset, c->conn.peer, ferry_ib_comm_where(c),
                   !c->conn.dev->hca->dmabuf ? "this HCA refuses dma-buf MRs"
                   : ferry_ib_state.cfg.gdr == 0 ? "NCCL_FERRY_IB_GDR=0"
                                                 : "the CUDA driver exports no DMA-BUF");
        return FERRY_ERR_UNSUPPORTED;
    }
    if (ferry_ib_reg_check_range(c, "regMrDmaBuf", data, size) != FERRY_OK ||
        ferry_ib_reg_check_dmabuf(c, data, size, type, offset, fd) != FERRY_OK)
        return FERRY_ERR_ARGUMENT;
    return ferry_ib_reg(c, &rq, FERRY_PTR_DMABUF, "regMrDmaBuf", mhandle_p);
}

const ferry_backend_ops_t ferry_ib_ops = {
    .name           = "ib",
    .host_staged    = 0,
    /*
     * 1 MiB per channel: the NIC moves the bytes, so a channel costs ferry-ib
     * a QP's work requests rather than a copying thread, and mid-size
     * all_reduce gains from spreading over more channels sooner than the
     * core's default of 2 MiB allows; larger sizes fill every channel either
     * way.
     */
    .tuner_channel_bytes = (size_t)1 << 20,
    .usable         = ferry_ib_usable,
    .format_config  = ferry_ib_format_config,
    .init           = ferry_ib_ops_init,
    .fini           = ferry_ib_fini,
    .devices        = ferry_ib_devices,
    .get_properties = ferry_ib_get_properties,
    .make_vdevice   = ferry_ib_make_vdevice,
    .listen         = ferry_ib_listen,
    .connect        = ferry_ib_connect,
    .accept         = ferry_ib_accept,
    .reg_mr         = ferry_ib_reg_mr,
    .reg_mr_dmabuf  = ferry_ib_reg_mr_dmabuf,
    .dereg_mr       = ferry_ib_dereg_mr,
    .isend          = ferry_ib_ops_isend,
    .irecv          = ferry_ib_ops_irecv,
    .iflush         = ferry_ib_ops_iflush,
    .test           = ferry_ib_test,
    .close_send     = ferry_ib_close_send,
    .close_recv     = ferry_ib_close_recv,
    .close_listen   = ferry_ib_close_listen,
};
