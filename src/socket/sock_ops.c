/* The socket backend's entry points for the data path and its ops table. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "socket/sock.h"

static ferry_sock_comm_t *ferry_sock_comm_check(void *comm, ferry_px_req_kind_t kind,
                                                const char *op)
{
    ferry_sock_comm_t *c = comm;

    if (c == NULL || c->magic != FERRY_SOCK_COMM_MAGIC || c->px.kind != kind) {
        FERRY_WARN("%s(%p): not a live ferry socket %s comm (closed already?)", op, comm,
                   kind == FERRY_PX_SEND ? "send" : "recv");
        return NULL;
    }
    return c;
}

/*
 * Every registered GPU region, with the comm whose stream copies through its
 * shadow: deregMr must wait for those copies, and may come after the comm
 * was closed (and freed), so the comm is reached only through this list.
 */
static pthread_mutex_t ferry_sock_gpu_mrs_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_sock_mr_t *ferry_sock_gpu_mrs;

void ferry_sock_mr_forget_comm(ferry_sock_comm_t *comm)
{
    ferry_sock_mr_t *mr;

    pthread_mutex_lock(&ferry_sock_gpu_mrs_lock);
    for (mr = ferry_sock_gpu_mrs; mr != NULL; mr = mr->gpu_next)
        if (mr->gpu_comm == comm)
            mr->gpu_comm = NULL;
    pthread_mutex_unlock(&ferry_sock_gpu_mrs_lock);
}

/* Unlink a GPU region, after its comm's queued copies (if it is still open) are done. */
static void ferry_sock_mr_gpu_unlink(ferry_sock_mr_t *mr)
{
    ferry_sock_mr_t **pp;

    pthread_mutex_lock(&ferry_sock_gpu_mrs_lock);
    if (mr->gpu_comm != NULL)
        ferry_sock_gpu_queue_sync(&mr->gpu_comm->gpu); /* No copy lands after the free. */
    for (pp = &ferry_sock_gpu_mrs; *pp != NULL; pp = &(*pp)->gpu_next)
        if (*pp == mr) {
            *pp = mr->gpu_next;
            break;
        }
    pthread_mutex_unlock(&ferry_sock_gpu_mrs_lock);
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
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return FERRY_ERR_NO_MEMORY;
    mr->magic = FERRY_SOCK_MR_MAGIC;
    mr->base = data;
    mr->size = size;
    if (type == FERRY_PTR_CUDA) {
        ferry_sock_comm_t *c = comm;

        status = ferry_sock_gpu_region_init(&mr->gpu, data, size, err, sizeof(err));
        if (status == FERRY_OK && (c == NULL || c->magic != FERRY_SOCK_COMM_MAGIC)) {
            snprintf(err, sizeof(err), "%p is not a live ferry socket comm", comm);
            status = FERRY_ERR_INVALID;
        }
        if (status == FERRY_OK)
            status = ferry_sock_gpu_queue_init(&c->gpu, &mr->gpu, err, sizeof(err));
        if (status != FERRY_OK) {
            ferry_sock_gpu_region_fini(&mr->gpu);
            FERRY_WARN("regMr(comm %p, GPU buffer %p, %zu bytes): cannot stage it through host "
                       "memory: %s; set NCCL_FERRY_GPU_STAGING=0 to have NCCL keep its network "
                       "buffers in host memory", comm, data, size, err);
            free(mr);
            return status;
        }
        pthread_mutex_lock(&ferry_sock_gpu_mrs_lock);
        mr->gpu_comm = c;
        mr->gpu_next = ferry_sock_gpu_mrs;
        ferry_sock_gpu_mrs = mr;
        pthread_mutex_unlock(&ferry_sock_gpu_mrs_lock);
    }
    *mhandle_p = mr;
    return FERRY_OK;
}

static ferry_status_t ferry_sock_dereg_mr(void *comm, void *mhandle)
{
    ferry_sock_mr_t *mr = mhandle;

    if (mr == NULL)
        return FERRY_OK;
    if (mr->magic != FERRY_SOCK_MR_MAGIC) {
        FERRY_WARN("deregMr(comm %p, %p): not a ferry socket memory handle", comm, mhandle);
        return FERRY_ERR_INVALID;
    }
    mr->magic = 0;
    if (mr->gpu.shadow != NULL)
        ferry_sock_mr_gpu_unlink(mr);
    ferry_sock_gpu_region_fini(&mr->gpu);
    free(mr);
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
                   "%p (%p+%zu)", op, c->px.serial, c->px.peer, data, size, mhandle,
                   mr->magic == FERRY_SOCK_MR_MAGIC ? (void *)mr->base : NULL,
                   mr->magic == FERRY_SOCK_MR_MAGIC ? mr->size : 0);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

/* A GPU copy failed: say everything known, fail the comm. */
static ferry_status_t ferry_sock_gpu_failed(ferry_sock_comm_t *c, const ferry_sock_mr_t *mr,
                                            const char *what, const char *err)
{
    char desc[160];

    ferry_px_comm_describe(&c->px, desc, sizeof(desc));
    FERRY_WARN("%s: %s GPU %d memory failed: %s. The GPU may have faulted (check dmesg for Xid "
               "errors and nvidia-smi), or set NCCL_FERRY_GPU_STAGING=0 to keep NCCL's buffers "
               "in host memory", desc, what, mr != NULL ? mr->gpu.ordinal : -1, err);
    ferry_px_comm_fail(&c->px, FERRY_ERR_CUDA, "%s GPU memory failed: %s", what, err);
    return FERRY_ERR_CUDA;
}

/*
 * isend from GPU memory: posted gated, with its copy into the shadow queued;
 * test() opens the gate when the copy is done. NCCL gets its request at once
 * and posts the next sends, whose copies then overlap this one's streams.
 */
static ferry_status_t ferry_sock_isend_gpu(ferry_sock_comm_t *c, void *data, size_t size,
                                           ferry_sock_mr_t *mr, void **request_p)
{
    char *host = mr->gpu.shadow + ((char *)data - mr->base), err[256], what[160];
    ferry_px_req_t *req = ferry_px_comm_post_mem(&c->px, host, size, mr, 1);

    if (req == NULL)
        return FERRY_OK; /* All 32 slots busy: NCCL calls again. */
    if (ferry_sock_gpu_queue_copy(&c->gpu, (int)(req->seq % FERRY_SOCK_GPU_SLOTS), 0, host, data,
                                  size, err, sizeof(err)) != 0) {
        snprintf(what, sizeof(what), "queueing the copy of message seq %u (%zu bytes at %p) from",
                 req->seq, size, data);
        return ferry_sock_gpu_failed(c, mr, what, err);
    }
    *request_p = req;
    return FERRY_OK;
}

/* test() on a send comm with GPU buffers: open the gates of sends whose copy is done, in order. */
static ferry_status_t ferry_sock_gpu_open_sends(ferry_sock_comm_t *c)
{
    char err[256], what[200];
    int r;

    /* Only the last 32 messages can still be gated (host sends may have come before). */
    if (c->px.next_seq - c->gpu_next > FERRY_MAX_REQUESTS)
        c->gpu_next = c->px.next_seq - FERRY_MAX_REQUESTS;
    while (c->gpu_next != c->px.next_seq) {
        ferry_px_req_t *req = &c->px.reqs[c->gpu_next % FERRY_MAX_REQUESTS];

        if (atomic_load_explicit(&req->gated, memory_order_relaxed)) {
            r = ferry_sock_gpu_queue_poll(&c->gpu, (int)(req->seq % FERRY_SOCK_GPU_SLOTS), err,
                                          sizeof(err));
            if (r == 0)
                break; /* Copies finish in order: the later ones are not done either. */
            if (r < 0) {
                snprintf(what, sizeof(what), "copying message seq %u (%zu bytes, request %s, "
                         "gated: none of it sent) from", req->seq, req->capacity,
                         ferry_px_req_state_str(atomic_load(&req->state)));
                return ferry_sock_gpu_failed(c, req->mem, what, err);
            }
            ferry_px_comm_open(&c->px, req);
        }
        c->gpu_next++;
    }
    return FERRY_OK;
}

/*
 * Post a checked receive. One into GPU memory lands in the shadow; req->mem
 * has it copied to the GPU before test() reports it.
 */
static ferry_px_req_t *ferry_sock_post_recv(ferry_sock_comm_t *c, void *data, size_t size,
                                            void *mhandle)
{
    ferry_sock_mr_t *mr = mhandle;

    if (mr == NULL || mr->gpu.shadow == NULL || size == 0)
        return ferry_px_comm_post(&c->px, data, size);
    return ferry_px_comm_post_mem(&c->px, mr->gpu.shadow + ((char *)data - mr->base), size, mr,
                                  0);
}

/* Queue the copy of a complete receive from its shadow to the GPU. */
static ferry_status_t ferry_sock_gpu_copy_recv(ferry_sock_comm_t *c, ferry_px_req_t *req)
{
    const ferry_sock_mr_t *mr = req->mem;
    uint64_t size = atomic_load_explicit(&req->size, memory_order_relaxed);
    int slot = (int)(req->seq % FERRY_SOCK_GPU_SLOTS);
    char err[256], what[200];

    if (ferry_sock_gpu_queue_copy(&c->gpu, slot, 1, req->buf, ferry_sock_mr_dev(mr, req->buf),
                                  size, err, sizeof(err)) != 0) {
        snprintf(what, sizeof(what), "queueing the copy of received message seq %u (%llu bytes, "
                 "request DONE: all of it arrived) to", req->seq, (unsigned long long)size);
        return ferry_sock_gpu_failed(c, mr, what, err);
    }
    c->gpu_copying[slot] = 1;
    return FERRY_OK;
}

/*
 * test() on a receive comm with GPU buffers: NCCL tests the oldest receive
 * only, so copy every later one that is complete too, from here.
 */
static ferry_status_t ferry_sock_gpu_start_recvs(ferry_sock_comm_t *c, const ferry_px_req_t *oldest)
{
    uint32_t seq;

    for (seq = oldest->seq; seq != c->px.next_seq; seq++) {
        ferry_px_req_t *req = &c->px.reqs[seq % FERRY_MAX_REQUESTS];
        ferry_status_t status;

        if (req->mem == NULL || c->gpu_copying[seq % FERRY_SOCK_GPU_SLOTS] ||
            atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_DONE ||
            atomic_load_explicit(&req->size, memory_order_relaxed) == 0)
            continue;
        status = ferry_sock_gpu_copy_recv(c, req);
        if (status != FERRY_OK)
            return status;
    }
    return FERRY_OK;
}

/*
 * A receive is DONE (lane ops finish, called from test()): one into GPU
 * memory is reported (*ready = 1) once its copy there is complete.
 */
ferry_status_t ferry_sock_recv_finish(ferry_px_comm_t *px, ferry_px_req_t *req, int *ready)
{
    ferry_sock_comm_t *c = (ferry_sock_comm_t *)px;
    int slot = (int)(req->seq % FERRY_SOCK_GPU_SLOTS), r;
    char err[256], what[200];
    ferry_status_t status;

    *ready = 1;
    if (req->mem == NULL || atomic_load_explicit(&req->size, memory_order_relaxed) == 0)
        return FERRY_OK;
    if (!c->gpu_copying[slot]) {
        status = ferry_sock_gpu_copy_recv(c, req);
        if (status != FERRY_OK)
            return status;
    }
    r = ferry_sock_gpu_queue_poll(&c->gpu, slot, err, sizeof(err));
    if (r < 0) {
        c->gpu_copying[slot] = 0;
        snprintf(what, sizeof(what), "copying received message seq %u (%llu bytes, request "
                 "DONE: all of it arrived) to", req->seq,
                 (unsigned long long)atomic_load(&req->size));
        return ferry_sock_gpu_failed(c, req->mem, what, err);
    }
    *ready = r;
    if (r == 1)
        c->gpu_copying[slot] = 0;
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
                   "(maxP2pBytes)", c->px.serial, c->px.peer, size, INT_MAX);
        return FERRY_ERR_USAGE;
    }
    status = ferry_sock_mr_covers(c, mhandle, data, size, "isend");
    if (status != FERRY_OK)
        return status;
    if (mhandle != NULL && ((ferry_sock_mr_t *)mhandle)->gpu.shadow != NULL && size > 0)
        return ferry_sock_isend_gpu(c, data, size, mhandle, request_p);
    *request_p = ferry_px_comm_post(&c->px, data, size);
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
                   "backend advertises maxRecvs=1", c->px.serial, c->px.peer, n);
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

    *done_p = 0;
    if (req == NULL || req->comm == NULL) {
        FERRY_WARN("test(%p): not a ferry request", request);
        return FERRY_ERR_INVALID;
    }
    if (((ferry_sock_comm_t *)req->comm)->gpu.stream != NULL) {
        ferry_sock_comm_t *c = (ferry_sock_comm_t *)req->comm;
        ferry_status_t status = c->px.kind == FERRY_PX_SEND ? ferry_sock_gpu_open_sends(c)
                                                            : ferry_sock_gpu_start_recvs(c, req);

        if (status != FERRY_OK)
            return status;
    }
    return ferry_px_comm_test(req->comm, req, done_p, sizes);
}

static ferry_status_t ferry_sock_close_comm(void *comm, ferry_px_req_kind_t kind, const char *op)
{
    ferry_sock_comm_t *c;

    if (comm == NULL)
        return FERRY_OK;
    c = ferry_sock_comm_check(comm, kind, op);
    if (c == NULL)
        return FERRY_ERR_INVALID;
    ferry_sock_comm_destroy(c);
    return FERRY_OK;
}

static ferry_status_t ferry_sock_close_send(void *send_comm)
{
    return ferry_sock_close_comm(send_comm, FERRY_PX_SEND, "closeSend");
}

static ferry_status_t ferry_sock_close_recv(void *recv_comm)
{
    return ferry_sock_close_comm(recv_comm, FERRY_PX_RECV, "closeRecv");
}

const ferry_backend_ops_t ferry_sock_ops = {
    .name           = "socket",
    .init           = ferry_sock_init,
    .fini           = ferry_sock_fini,
    .devices        = ferry_sock_devices,
    .get_properties = ferry_sock_get_properties,
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
