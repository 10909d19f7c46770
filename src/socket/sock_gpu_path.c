/*
 * GPU buffers in the socket backend's data path (NCCL_FERRY_GPU_STAGING, the
 * copies themselves: sock_gpu.c). A send from GPU memory is posted gated and
 * opened once its copy to the shadow is done; a receive into GPU memory is
 * copied there once complete and held back from test() until then. The
 * registered GPU regions are listed with their comm for deregMr.
 */
#include <pthread.h>
#include <stdio.h>

#include "core/log.h"
#include "socket/sock.h"

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

void ferry_sock_mr_gpu_link(ferry_sock_mr_t *mr, ferry_sock_comm_t *comm)
{
    pthread_mutex_lock(&ferry_sock_gpu_mrs_lock);
    mr->gpu_comm = comm;
    mr->gpu_next = ferry_sock_gpu_mrs;
    ferry_sock_gpu_mrs = mr;
    pthread_mutex_unlock(&ferry_sock_gpu_mrs_lock);
}

void ferry_sock_mr_gpu_unlink(ferry_sock_mr_t *mr)
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

/* A GPU copy failed: say everything known, fail the comm. */
static ferry_status_t ferry_sock_gpu_failed(ferry_sock_comm_t *c, const ferry_sock_mr_t *mr,
                                            const char *what, const char *err)
{
    char desc[160];

    ferry_px_ring_describe(&c->px.ring, desc, sizeof(desc));
    FERRY_WARN("%s: %s GPU %d memory failed: %s. The GPU may have faulted (check dmesg for Xid "
               "errors and nvidia-smi), or set NCCL_FERRY_GPU_STAGING=0 to keep NCCL's buffers "
               "in host memory", desc, what, mr != NULL ? mr->gpu.ordinal : -1, err);
    ferry_px_ring_fail(&c->px.ring, FERRY_ERR_CUDA, "%s GPU memory failed: %s", what, err);
    return FERRY_ERR_CUDA;
}

/*
 * isend from GPU memory: posted gated, with its copy into the shadow queued;
 * test() opens the gate when the copy is done. NCCL gets its request at once
 * and posts the next sends, whose copies then overlap this one's streams.
 */
ferry_status_t ferry_sock_isend_gpu(ferry_sock_comm_t *c, void *data, size_t size,
                                           ferry_sock_mr_t *mr, void **request_p)
{
    char *host = mr->gpu.shadow + ((char *)data - mr->base), err[256], what[160];
    ferry_px_req_t *req = ferry_sock_stream_post(&c->px, host, size, mr, 1);

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
ferry_status_t ferry_sock_gpu_open_sends(ferry_sock_comm_t *c)
{
    char err[256], what[200];
    int r;

    /* Only the last 32 messages can still be gated (host sends may have come before). */
    if (c->px.ring.next_seq - c->gpu_next > FERRY_MAX_REQUESTS)
        c->gpu_next = c->px.ring.next_seq - FERRY_MAX_REQUESTS;
    while (c->gpu_next != c->px.ring.next_seq) {
        ferry_px_req_t *req = &c->px.ring.reqs[c->gpu_next % FERRY_MAX_REQUESTS];

        if (atomic_load_explicit(&req->gated, memory_order_relaxed)) {
            r = ferry_sock_gpu_queue_poll(&c->gpu, (int)(req->seq % FERRY_SOCK_GPU_SLOTS), err,
                                          sizeof(err));
            if (r == 0)
                break; /* Copies finish in order: the later ones are not done either. */
            if (r < 0) {
                snprintf(what, sizeof(what), "copying message seq %u (%zu bytes, request %s, "
                         "gated: none of it sent) from", req->seq, req->sub[0].capacity,
                         ferry_px_req_state_str(atomic_load(&req->state)));
                return ferry_sock_gpu_failed(c, req->sub[0].mem, what, err);
            }
            ferry_sock_stream_open(&c->px, req);
        }
        c->gpu_next++;
    }
    return FERRY_OK;
}

/*
 * Post a checked receive. One into GPU memory lands in the shadow; req->sub[0].mem
 * has it copied to the GPU before test() reports it.
 */
ferry_px_req_t *ferry_sock_post_recv(ferry_sock_comm_t *c, void *data, size_t size,
                                            void *mhandle)
{
    ferry_sock_mr_t *mr = mhandle;

    if (mr == NULL || mr->gpu.shadow == NULL || size == 0)
        return ferry_sock_stream_post(&c->px, data, size, NULL, 0);
    return ferry_sock_stream_post(&c->px, mr->gpu.shadow + ((char *)data - mr->base), size, mr,
                                  0);
}

/* Queue the copy of a complete receive from its shadow to the GPU. */
static ferry_status_t ferry_sock_gpu_copy_recv(ferry_sock_comm_t *c, ferry_px_req_t *req)
{
    const ferry_sock_mr_t *mr = req->sub[0].mem;
    uint64_t size = atomic_load_explicit(&req->sub[0].size, memory_order_relaxed);
    int slot = (int)(req->seq % FERRY_SOCK_GPU_SLOTS);
    char err[256], what[200];

    if (ferry_sock_gpu_queue_copy(&c->gpu, slot, 1, req->sub[0].buf, ferry_sock_mr_dev(mr, req->sub[0].buf),
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
ferry_status_t ferry_sock_gpu_start_recvs(ferry_sock_comm_t *c, const ferry_px_req_t *oldest)
{
    uint32_t seq;

    for (seq = oldest->seq; seq != c->px.ring.next_seq; seq++) {
        ferry_px_req_t *req = &c->px.ring.reqs[seq % FERRY_MAX_REQUESTS];
        ferry_status_t status;

        if (req->sub[0].mem == NULL || c->gpu_copying[seq % FERRY_SOCK_GPU_SLOTS] ||
            atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_DONE ||
            atomic_load_explicit(&req->sub[0].size, memory_order_relaxed) == 0)
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
ferry_status_t ferry_sock_recv_finish(ferry_px_ring_t *ring, ferry_px_req_t *req, int *ready)
{
    ferry_sock_comm_t *c = (ferry_sock_comm_t *)ring; /* ring -> px -> comm, first members. */
    int slot = (int)(req->seq % FERRY_SOCK_GPU_SLOTS), r;
    char err[256], what[200];
    ferry_status_t status;

    *ready = 1;
    if (req->sub[0].mem == NULL || atomic_load_explicit(&req->sub[0].size, memory_order_relaxed) == 0)
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
                 (unsigned long long)atomic_load(&req->sub[0].size));
        return ferry_sock_gpu_failed(c, req->sub[0].mem, what, err);
    }
    *ready = r;
    if (r == 1)
        c->gpu_copying[slot] = 0;
    return FERRY_OK;
}

