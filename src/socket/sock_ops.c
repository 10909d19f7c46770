/* The socket backend's entry points for the data path and its ops table. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/mr_range.h"
#include "socket/sock.h"

/*
 * The data path's check: a magic and a kind, no lock. A closed comm's memory
 * is gone, so this only catches what is still mapped; close and regMr ask
 * the live list instead (sock_live.c).
 */
static ferry_sock_comm_t *ferry_sock_comm_check(void *comm, ferry_px_req_kind_t kind,
                                                const char *op)
{
    ferry_sock_comm_t *c = comm;

    if (c == NULL || c->magic != FERRY_SOCK_COMM_MAGIC || c->px.ring.kind != kind) {
        FERRY_WARN("%s(%p): not a live ferry socket %s comm (closed already?)", op, comm,
                   kind == FERRY_PX_SEND ? "send" : "recv");
        return NULL;
    }
    return c;
}

/* Undo reg_mr: the GPU region's list entry and shadow, then the handle. */
static void ferry_sock_mr_destroy(ferry_sock_mr_t *mr)
{
    ferry_sock_magic_clear(&mr->magic); /* isend/irecv's buffer check reads it without a lock. */
    if (mr->gpu.shadow != NULL)
        ferry_sock_mr_gpu_unlink(mr);
    ferry_sock_gpu_region_fini(&mr->gpu);
    free(mr);
}

/* A live send or recv comm of ours, asked of the live list (regMr is not on the data path). */
static int ferry_sock_comm_is_live(const void *comm)
{
    return ferry_live_has(comm, FERRY_LIVE_SEND) ||
           ferry_live_has(comm, FERRY_LIVE_RECV);
}

static ferry_status_t ferry_sock_reg_mr(void *comm, void *data, size_t size, int type,
                                        void **mhandle_p)
{
    ferry_sock_mr_t *mr;
    ferry_status_t status;
    char err[256];

    *mhandle_p = NULL;
    if (type != FERRY_PTR_HOST && !(type == FERRY_PTR_CUDA && ferry_sock_state.gpu)) {
        FERRY_WARN("regMr(comm %p, %p, %zu bytes): pointer type %d, but the socket backend "
                   "takes host memory only here (ptrSupport=HOST): %s", comm, data, size, type,
                   type != FERRY_PTR_CUDA ? "only host and CUDA pointers are supported"
                   : !ferry_sock_state.cfg.gpu_staging
                       ? "set NCCL_FERRY_GPU_STAGING=1 for GPU buffers"
                       : ferry_sock_gpu_why_off());
        return FERRY_ERR_INVALID;
    }
    /* isend/irecv's in-region check adds to base + size: a wrapped end passes anything. */
    if (ferry_mr_range_wraps(data, size, 0)) {
        int ours = ferry_sock_comm_is_live(comm);

        FERRY_WARN_LIMITED("regMr(comm %p%s%s, %p, %zu bytes): the range ends past the top of "
                           "the address space (address %p + size %zu wraps around to 0): no "
                           "buffer is there; pass the buffer's own address and size (a negative "
                           "size cast to size_t, or a stale pointer?)", comm,
                           ours ? " to " : "", ours ? ((ferry_sock_comm_t *)comm)->px.ring.peer
                                                    : "", data, size, data, size);
        return FERRY_ERR_ARGUMENT;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return FERRY_ERR_NO_MEMORY;
    mr->magic = FERRY_SOCK_MR_MAGIC;
    mr->base = data;
    mr->size = size;
    if (type == FERRY_PTR_CUDA) {
        /* A GPU region is copied on its comm's stream: the comm must be ours. */
        ferry_sock_comm_t *c = comm;
        int ours = ferry_sock_comm_is_live(c);

        status = FERRY_ERR_INVALID;
        if (!ours)
            snprintf(err, sizeof(err), "%p is not a live ferry socket comm", comm);
        else
            status = ferry_sock_gpu_region_init(&mr->gpu, data, size, err, sizeof(err));
        if (status == FERRY_OK)
            status = ferry_sock_gpu_queue_init(&c->gpu, &mr->gpu, err, sizeof(err));
        if (status != FERRY_OK) {
            ferry_sock_gpu_region_fini(&mr->gpu);
            FERRY_WARN("regMr(comm %p%s%s, GPU buffer %p, %zu bytes): cannot stage it through "
                       "host memory: %s; set NCCL_FERRY_GPU_STAGING=0 to have NCCL keep its "
                       "network buffers in host memory", comm,
                       ours ? ", peer " : "", ours ? c->px.ring.peer : "", data, size, err);
            free(mr);
            return status;
        }
        ferry_sock_mr_gpu_link(mr, c);
    }
    status = ferry_live_add(mr, FERRY_LIVE_MR);
    if (status != FERRY_OK) {
        FERRY_WARN("regMr(comm %p, %p, %zu bytes): no memory to list the handle as live",
                   comm, data, size);
        ferry_sock_mr_destroy(mr);
        return status;
    }
    *mhandle_p = mr;
    return FERRY_OK;
}

static ferry_status_t ferry_sock_dereg_mr(void *comm, void *mhandle)
{
    if (mhandle == NULL)
        return FERRY_OK;
    /* Taken from the live list first: a second deregMr never reads the freed handle. */
    if (!ferry_live_take(mhandle, FERRY_LIVE_MR)) {
        FERRY_WARN("deregMr(comm %p, %p): not a live ferry socket memory handle (deregistered "
                   "already?); NCCL must deregister each handle from regMr exactly once",
                   comm, mhandle);
        return FERRY_ERR_INVALID;
    }
    ferry_sock_mr_destroy(mhandle);
    return FERRY_OK;
}

/* A buffer must lie inside the region NCCL registered for it. */
static ferry_status_t ferry_sock_mr_covers(const ferry_sock_comm_t *c, void *mhandle, void *data,
                                           size_t size, const char *op)
{
    const ferry_sock_mr_t *mr = mhandle;

    if (mr == NULL || size == 0)
        return FERRY_OK;
    if (mr->magic != FERRY_SOCK_MR_MAGIC || (char *)data < mr->base ||
        (char *)data + size > mr->base + mr->size) {
        FERRY_WARN("%s on socket comm #%u peer %s: buffer %p+%zu is outside its memory handle "
                   "%p (%p+%zu)", op, c->px.ring.serial, c->px.ring.peer, data, size, mhandle,
                   mr->magic == FERRY_SOCK_MR_MAGIC ? (void *)mr->base : NULL,
                   mr->magic == FERRY_SOCK_MR_MAGIC ? mr->size : 0);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

static ferry_status_t ferry_sock_isend(void *send_comm, void *data, size_t size, int tag,
                                       void *mhandle, void **request_p)
{
    ferry_sock_comm_t *c = ferry_sock_comm_check(send_comm, FERRY_PX_SEND, "isend");
    ferry_status_t status;

    *request_p = NULL;
    if (c == NULL)
        return FERRY_ERR_INVALID;
    if (size > INT_MAX) {
        FERRY_WARN("isend on socket comm #%u peer %s: %zu bytes is over the %d-byte limit "
                   "(maxP2pBytes)", c->px.ring.serial, c->px.ring.peer, size, INT_MAX);
        return FERRY_ERR_USAGE;
    }
    status = ferry_sock_mr_covers(c, mhandle, data, size, "isend");
    if (status != FERRY_OK)
        return status;
    if (mhandle != NULL && ((ferry_sock_mr_t *)mhandle)->gpu.shadow != NULL && size > 0)
        return ferry_sock_isend_gpu(c, data, size, mhandle, request_p);
    *request_p = ferry_sock_stream_post(&c->px, data, size, NULL, 0);
    return FERRY_OK;
}

static ferry_status_t ferry_sock_irecv(void *recv_comm, int n, void **data, size_t *sizes,
                                       int *tags, void **mhandles, void **request_p)
{
    ferry_sock_comm_t *c = ferry_sock_comm_check(recv_comm, FERRY_PX_RECV, "irecv");
    ferry_status_t status;

    *request_p = NULL; /* Also clears NCCL's optional-completion hint. */
    if (c == NULL)
        return FERRY_ERR_INVALID;
    if (n != 1) {
        FERRY_WARN("irecv on socket comm #%u peer %s: %d grouped receives, but the socket "
                   "backend advertises maxRecvs=1; nothing was posted: post one buffer per "
                   "irecv, as NCCL does after getProperties", c->px.ring.serial,
                   c->px.ring.peer, n);
        return FERRY_ERR_INVALID;
    }
    status = ferry_sock_mr_covers(c, mhandles != NULL ? mhandles[0] : NULL, data[0], sizes[0],
                                  "irecv");
    if (status != FERRY_OK)
        return status;
    *request_p = ferry_sock_post_recv(c, data[0], sizes[0], mhandles != NULL ? mhandles[0] : NULL);
    return FERRY_OK;
}

static ferry_status_t ferry_sock_test(void *request, int *done_p, int *sizes)
{
    ferry_px_req_t *req = request;
    ferry_sock_comm_t *c;

    *done_p = 0;
    if (req == NULL || req->ring == NULL) {
        FERRY_WARN("test(%p): not a ferry request", request);
        return FERRY_ERR_INVALID;
    }
    c = (ferry_sock_comm_t *)req->ring; /* px is its first member. */
    if (c->gpu.stream != NULL) {
        ferry_status_t status = c->px.ring.kind == FERRY_PX_SEND ? ferry_sock_gpu_open_sends(c)
                                                            : ferry_sock_gpu_start_recvs(c, req);

        if (status != FERRY_OK)
            return status;
    }
    return ferry_px_ring_test(&c->px.ring, req, done_p, sizes);
}

static ferry_status_t ferry_sock_close_comm(void *comm, ferry_px_req_kind_t kind, const char *op)
{
    if (comm == NULL)
        return FERRY_OK;
    /*
     * Taken from the live list before anything is read: a second close (or
     * two racing ones) finds it gone and never touches the freed comm.
     */
    if (!ferry_live_take(comm, kind == FERRY_PX_SEND ? FERRY_LIVE_SEND
                                                          : FERRY_LIVE_RECV)) {
        int other = ferry_live_has(comm, kind == FERRY_PX_SEND ? FERRY_LIVE_RECV
                                                                    : FERRY_LIVE_SEND);

        FERRY_WARN("%s(%p): not a live ferry socket %s comm (%s); NCCL must close each comm "
                   "exactly once, with the call of its kind", op, comm,
                   kind == FERRY_PX_SEND ? "send" : "recv",
                   other ? (kind == FERRY_PX_SEND ? "it is a live recv comm: left open"
                                                  : "it is a live send comm: left open")
                         : "closed already?");
        return FERRY_ERR_INVALID;
    }
    ferry_sock_comm_destroy(comm);
    return FERRY_OK;
}

/* The socket backend's variables, parsed by its init, on the effective-config line. */
static void ferry_sock_format_config(char *buf, size_t len)
{
    ferry_sock_config_format(&ferry_sock_state.cfg, buf, len);
    ferry_sock_hints_format(&ferry_sock_state.hints, buf, len);
}

static ferry_status_t ferry_sock_close_send(void *send_comm)
{
    return ferry_sock_close_comm(send_comm, FERRY_PX_SEND, "closeSend");
}

static ferry_status_t ferry_sock_close_recv(void *recv_comm)
{
    return ferry_sock_close_comm(recv_comm, FERRY_PX_RECV, "closeRecv");
}

static int ferry_sock_takes_net_hints(void)
{
    return ferry_sock_state.hints.net_hints == 1;
}

const ferry_backend_ops_t ferry_sock_ops = {
    .name           = "socket",
    .host_staged    = 1, /* GPU buffers too cross TCP from their host shadows (sock_gpu.h). */
    .format_config  = ferry_sock_format_config,
    .init           = ferry_sock_init,
    .fini           = ferry_sock_fini,
    .devices        = ferry_sock_devices,
    .get_properties = ferry_sock_get_properties,
    .takes_net_hints = ferry_sock_takes_net_hints,
    .listen         = ferry_sock_listen,
    .connect        = ferry_sock_connect,
    .accept         = ferry_sock_accept,
    .reg_mr         = ferry_sock_reg_mr,
    .reg_mr_dmabuf  = ferry_no_reg_mr_dmabuf,
    .dereg_mr       = ferry_sock_dereg_mr,
    .isend          = ferry_sock_isend,
    .irecv          = ferry_sock_irecv,
    .iflush         = ferry_no_iflush,
    .test           = ferry_sock_test,
    .close_send     = ferry_sock_close_send,
    .close_recv     = ferry_sock_close_recv,
    .close_listen   = ferry_sock_close_listen,
};
