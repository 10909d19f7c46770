#include <assert.h>
#include <string.h>
#include <time.h>

#include "proxy/req.h"

static const char *const ferry_px_req_state_names[FERRY_PX_REQ_STATE_COUNT] = {
    [FERRY_PX_REQ_FREE]   = "FREE",
    [FERRY_PX_REQ_POSTED] = "POSTED",
    [FERRY_PX_REQ_ACTIVE] = "ACTIVE",
    [FERRY_PX_REQ_DONE]   = "DONE",
    [FERRY_PX_REQ_ERROR]  = "ERROR",
};

const char *ferry_px_req_state_str(int state)
{
    if (state < 0 || state >= FERRY_PX_REQ_STATE_COUNT)
        return "INVALID";
    return ferry_px_req_state_names[state];
}

const char *ferry_px_req_kind_str(ferry_px_req_kind_t kind)
{
    return kind == FERRY_PX_SEND ? "send" : kind == FERRY_PX_RECV ? "recv" : "flush";
}

ferry_px_chunk_plan_t ferry_px_chunk_plan(size_t size, int nlanes, size_t min_chunk,
                                          size_t max_chunk)
{
    ferry_px_chunk_plan_t plan;
    size_t per_lane, chunk;

    if (nlanes < 1)
        nlanes = 1;
    per_lane = (size + (size_t)nlanes - 1) / (size_t)nlanes;
    /* Page multiples keep payload copies aligned for the kernel. */
    chunk = (per_lane + 4095) & ~(size_t)4095;
    if (chunk < min_chunk)
        chunk = min_chunk;
    if (chunk > max_chunk)
        chunk = max_chunk;
    if (chunk == 0)
        chunk = 1;
    plan.chunk_size = chunk;
    plan.nchunks = size == 0 ? 1 : (uint32_t)((size + chunk - 1) / chunk);
    return plan;
}

void ferry_px_req_post(ferry_px_req_t *req, ferry_px_req_kind_t kind, uint32_t seq, int n,
                       const ferry_px_sub_t *subs, int gated, uint32_t nparts,
                       size_t part_size)
{
    int i;

    assert(atomic_load(&req->state) == FERRY_PX_REQ_FREE);
    assert(n >= 1 && n <= FERRY_PX_MAX_SUBS && req->sub != NULL);
    req->kind = kind;
    req->seq = seq;
    req->n = n;
    for (i = 0; i < n; i++) {
        req->sub[i].buf = subs[i].buf;
        req->sub[i].capacity = subs[i].capacity;
        req->sub[i].tag = subs[i].tag;
        req->sub[i].mem = subs[i].mem;
        /* A send reports what it sends; a receive learns its size from the peer. */
        atomic_store_explicit(&req->sub[i].size, kind == FERRY_PX_SEND ? subs[i].capacity : 0,
                              memory_order_relaxed);
    }
    atomic_store_explicit(&req->gated, gated, memory_order_relaxed);
    req->part_size = part_size;
    req->status = FERRY_OK;
    req->backend_word = 0;
    req->post_ns = ferry_px_now_ns();
    atomic_store_explicit(&req->last_ns, req->post_ns, memory_order_relaxed);
    atomic_store_explicit(&req->start_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&req->done_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&req->nparts, nparts, memory_order_relaxed);
    atomic_store_explicit(&req->posted, 0, memory_order_relaxed);
    atomic_store_explicit(&req->transmitted, 0, memory_order_relaxed);
    atomic_store_explicit(&req->received, 0, memory_order_relaxed);
    atomic_store_explicit(&req->done, 0, memory_order_relaxed);
    atomic_store_explicit(&req->bytes, 0, memory_order_relaxed);
    /* Publishes every field above to the threads that match or claim it. */
    atomic_store_explicit(&req->state, FERRY_PX_REQ_POSTED, memory_order_release);
}

void ferry_px_req_part_start(ferry_px_req_t *req)
{
    ferry_px_req_parts_start(req, 1);
}

void ferry_px_req_parts_start(ferry_px_req_t *req, uint32_t k)
{
    ferry_px_req_parts_start_at(req, k, 0);
}

void ferry_px_req_parts_start_at(ferry_px_req_t *req, uint32_t k, uint64_t now)
{
    int expected = FERRY_PX_REQ_POSTED;

    atomic_fetch_add_explicit(&req->posted, k, memory_order_relaxed);
    if (atomic_compare_exchange_strong(&req->state, &expected, FERRY_PX_REQ_ACTIVE)) {
        if (now == 0)
            now = ferry_px_now_ns();
        atomic_store_explicit(&req->start_ns, now, memory_order_relaxed);
        /* Its first header arrived (or a lane took it): progress, for the stall warning. */
        atomic_store_explicit(&req->last_ns, now, memory_order_relaxed);
    }
}

ferry_status_t ferry_px_req_learn(ferry_px_req_t *req, uint64_t msg_size, uint32_t nparts)
{
    uint32_t expected = 0;

    if (msg_size > req->sub[0].capacity)
        return FERRY_ERR_USAGE;
    if (nparts == 0)
        return FERRY_ERR_REMOTE;
    /* Every chunk carries the same size; the first lane to arrive records it. */
    atomic_store_explicit(&req->sub[0].size, msg_size, memory_order_relaxed);
    if (!atomic_compare_exchange_strong(&req->nparts, &expected, nparts) &&
        expected != nparts)
        return FERRY_ERR_REMOTE;
    return FERRY_OK;
}

/*
 * Bytes alone are not progress for the stall warning (last_ns): the kernel
 * of a stopped peer still takes a few bytes now and then (zero-window
 * probes), which kept a frozen receiver's sender quiet for good.
 */
void ferry_px_req_progress(ferry_px_req_t *req, size_t bytes)
{
    atomic_fetch_add_explicit(&req->bytes, bytes, memory_order_relaxed);
}

static void ferry_px_req_parts_moved(ferry_px_req_t *req, uint32_t k)
{
    if (req->kind == FERRY_PX_RECV)
        atomic_fetch_add_explicit(&req->received, k, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&req->transmitted, k, memory_order_relaxed);
}

void ferry_px_req_part_moved(ferry_px_req_t *req)
{
    ferry_px_req_parts_moved(req, 1);
}

static void ferry_px_req_parts_done(ferry_px_req_t *req, uint32_t k)
{
    uint32_t done;
    uint64_t now;

    /* acq_rel: the thread retiring the last part sees every other thread's copy. */
    done = atomic_fetch_add_explicit(&req->done, k, memory_order_acq_rel) + k;
    assert(done <= atomic_load(&req->nparts));
    /* One clock read per call: small messages complete at a rate where reads add up. */
    now = ferry_px_now_ns();
    atomic_store_explicit(&req->last_ns, now, memory_order_relaxed);
    if (done == atomic_load_explicit(&req->nparts, memory_order_relaxed)) {
        int expected = FERRY_PX_REQ_ACTIVE;

        /* Before the state: whoever sees DONE sees the time too. */
        atomic_store_explicit(&req->done_ns, now, memory_order_relaxed);
        atomic_compare_exchange_strong_explicit(&req->state, &expected, FERRY_PX_REQ_DONE,
                                                memory_order_acq_rel, memory_order_acquire);
    }
}

void ferry_px_req_part_done(ferry_px_req_t *req)
{
    ferry_px_req_parts_done(req, 1);
}

void ferry_px_req_part_finish(ferry_px_req_t *req, size_t bytes)
{
    ferry_px_req_parts_finish(req, 1, bytes);
}

void ferry_px_req_parts_finish(ferry_px_req_t *req, uint32_t k, size_t bytes)
{
    if (bytes > 0)
        ferry_px_req_progress(req, bytes);
    ferry_px_req_parts_moved(req, k);
    ferry_px_req_parts_done(req, k);
}

int ferry_px_req_all_moved(const ferry_px_req_t *req)
{
    uint32_t nparts = atomic_load(&req->nparts);

    return nparts != 0 &&
           atomic_load(&req->transmitted) + atomic_load(&req->received) == nparts;
}

void ferry_px_req_fail(ferry_px_req_t *req, ferry_status_t status)
{
    int state = atomic_load(&req->state);

    while (state == FERRY_PX_REQ_POSTED || state == FERRY_PX_REQ_ACTIVE) {
        req->status = status;
        if (atomic_compare_exchange_weak_explicit(&req->state, &state, FERRY_PX_REQ_ERROR,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
}

int ferry_px_req_check(const ferry_px_req_t *req)
{
    uint32_t nparts = atomic_load(&req->nparts);
    uint32_t posted = atomic_load(&req->posted);
    uint32_t moved = atomic_load(&req->transmitted) + atomic_load(&req->received);
    uint32_t done = atomic_load(&req->done);
    int state = atomic_load(&req->state);

    if (done > moved || moved > posted)
        return 0;
    if (nparts != 0 && posted > nparts)
        return 0;
    if (state == FERRY_PX_REQ_DONE && (nparts == 0 || done != nparts))
        return 0;
    return 1;
}
