/*
 * The request ring: posting into the 32 slots, test() and its report, the
 * sticky failure. The stall warning is ring_stall.c's, the dump's text
 * ring_dump.c's; the backend is reached only through ring->ops.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "proxy/handle.h"
#include "proxy/registry.h"
#include "proxy/ring.h"

void *ferry_px_ring_alloc(size_t size)
{
    size_t rounded = (size + 63) / 64 * 64; /* aligned_alloc wants a multiple of the alignment. */
    void *p = aligned_alloc(64, rounded);

    if (p != NULL)
        memset(p, 0, rounded);
    return p;
}

ferry_status_t ferry_px_ring_init(ferry_px_ring_t *ring, ferry_px_req_kind_t kind,
                                  const char *backend, const char *peer,
                                  const ferry_px_ring_ops_t *ops)
{
    int i;

    if (ops == NULL || ops->poll == NULL || ops->unit == NULL || ops->max_subs < 0 ||
        ops->max_subs > FERRY_PX_MAX_SUBS)
        return FERRY_ERR_INVALID;
    memset(ring, 0, sizeof(*ring));
    ring->max_subs = ops->max_subs > 1 ? ops->max_subs : 1;
    if (ring->max_subs > 1) {
        ring->subs_grouped = calloc((size_t)FERRY_MAX_REQUESTS * (size_t)ring->max_subs,
                                    sizeof(*ring->subs_grouped));
        if (ring->subs_grouped == NULL)
            return FERRY_ERR_NO_MEMORY;
    }
    if (pthread_mutex_init(&ring->lock, NULL) != 0) {
        free(ring->subs_grouped);
        return FERRY_ERR_IO;
    }
    ring->kind = kind;
    ring->ops = ops;
    snprintf(ring->backend, sizeof(ring->backend), "%s", backend);
    snprintf(ring->peer, sizeof(ring->peer), "%s", peer);
    ring->create_ns = ferry_px_now_ns();
    for (i = 0; i < FERRY_MAX_REQUESTS; i++) {
        ring->reqs[i].ring = ring;
        ring->reqs[i].sub = ring->subs_grouped != NULL
                                ? &ring->subs_grouped[(size_t)i * (size_t)ring->max_subs]
                                : &ring->sub1[i];
    }
    if (ferry_px_handles_attach(ring) != FERRY_OK) {
        pthread_mutex_destroy(&ring->lock);
        free(ring->subs_grouped);
        return FERRY_ERR_NO_MEMORY;
    }
    return FERRY_OK;
}

void ferry_px_ring_register(ferry_px_ring_t *ring)
{
    ferry_px_registry_add(ring);
}

void ferry_px_ring_unregister(ferry_px_ring_t *ring)
{
    ferry_px_registry_remove(ring);
}

void ferry_px_ring_fini(ferry_px_ring_t *ring)
{
    ferry_px_handles_detach(ring);
    pthread_mutex_destroy(&ring->lock);
    free(ring->subs_grouped);
    ring->subs_grouped = NULL;
}

ferry_px_req_t *ferry_px_ring_slot_locked(ferry_px_ring_t *ring)
{
    ferry_px_req_t *req = &ring->reqs[ring->next_seq % FERRY_MAX_REQUESTS];

    if (atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_FREE)
        return NULL;
    return req;
}

void ferry_px_ring_post_locked(ferry_px_ring_t *ring, ferry_px_req_t *req, int n,
                               const ferry_px_sub_t *subs, int gated, uint32_t nparts,
                               size_t part_size)
{
    ferry_px_req_post(req, ring->kind, ring->next_seq, n, subs,
                      ring->kind == FERRY_PX_SEND && gated, nparts, part_size);
    ferry_px_handle_step(req); /* Its handle passes test() from now on. */
    /* Relaxed: the dump's thread reads it without the lock (ferry_px_ring_dump). */
    __atomic_store_n(&ring->next_seq, ring->next_seq + 1, __ATOMIC_RELAXED);
    /* A post the backend could not take before is taken: its wait is over. */
    if (atomic_load_explicit(&ring->wait_msg, memory_order_relaxed) != 0)
        atomic_store_explicit(&ring->wait_msg, 0, memory_order_relaxed);
}

ferry_px_req_t *ferry_px_ring_post(ferry_px_ring_t *ring, int n, const ferry_px_sub_t *subs,
                                   int gated, uint32_t nparts, size_t part_size)
{
    ferry_px_req_t *req;

    if (n < 1 || n > ring->max_subs)
        return NULL;
    pthread_mutex_lock(&ring->lock);
    req = ferry_px_ring_slot_locked(ring);
    if (req != NULL)
        ferry_px_ring_post_locked(ring, req, n, subs, gated, nparts, part_size);
    pthread_mutex_unlock(&ring->lock);
    return req;
}

ferry_px_req_t *ferry_px_ring_match(ferry_px_ring_t *ring, uint32_t seq)
{
    ferry_px_req_t *req = &ring->reqs[seq % FERRY_MAX_REQUESTS];
    int state = atomic_load_explicit(&req->state, memory_order_acquire);

    if ((state == FERRY_PX_REQ_POSTED || state == FERRY_PX_REQ_ACTIVE) && req->seq == seq)
        return req;
    return NULL;
}

void ferry_px_ring_vfail(ferry_px_ring_t *ring, ferry_status_t status, const char *fmt,
                         va_list ap)
{
    int expected = 0;

    pthread_mutex_lock(&ring->lock);
    if (atomic_load(&ring->failed) == 0) {
        vsnprintf(ring->fail_reason, sizeof(ring->fail_reason), fmt, ap);
        atomic_compare_exchange_strong(&ring->failed, &expected, (int)status);
    }
    pthread_mutex_unlock(&ring->lock);
    if (ring->ops->failed != NULL)
        ring->ops->failed(ring);
}

void ferry_px_ring_fail(ferry_px_ring_t *ring, ferry_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    ferry_px_ring_vfail(ring, status, fmt, ap);
    va_end(ap);
}

void ferry_px_ring_describe(const ferry_px_ring_t *ring, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s comm %p #%u%s%s peer %s", ring->backend,
             ring->kind == FERRY_PX_SEND ? "send" : "recv", (const void *)ring, ring->serial,
             ring->where[0] != '\0' ? " on " : "", ring->where, ring->peer);
}

void ferry_px_ring_req_counters(const ferry_px_ring_t *ring, const ferry_px_req_t *req,
                                char *buf, size_t len)
{
    uint64_t size = 0;
    size_t capacity = 0;
    int i;

    for (i = 0; i < req->n && i < ring->max_subs; i++) {
        size += atomic_load_explicit(&req->sub[i].size, memory_order_relaxed);
        capacity += req->sub[i].capacity;
    }
    snprintf(buf, len, "state %s, %s posted %u, done %u of %u, %llu of %llu bytes, buffer %zu%s, "
             "age %llu ms", ferry_px_req_state_str(atomic_load(&req->state)), ring->ops->unit,
             atomic_load(&req->posted), atomic_load(&req->done), atomic_load(&req->nparts),
             (unsigned long long)atomic_load(&req->bytes), (unsigned long long)size, capacity,
             req->n > 1 ? " in grouped buffers" : "",
             (unsigned long long)((ferry_px_now_ns() - req->post_ns) / 1000000));
}

void ferry_px_ring_req_words(const ferry_px_ring_t *ring, const ferry_px_req_t *req, char *buf,
                             size_t len)
{
    char counters[224];

    ferry_px_ring_req_counters(ring, req, counters, sizeof(counters));
    snprintf(buf, len, "%s request seq %u (%s)", ferry_px_req_kind_str(req->kind), req->seq,
             counters);
}

/* A request caught by a comm failure: say which one, in what state, and why. */
static ferry_status_t ferry_px_ring_test_failed(ferry_px_ring_t *ring, ferry_px_req_t *req,
                                                ferry_status_t status)
{
    char desc[192], words[256];

    ferry_px_ring_describe(ring, desc, sizeof(desc));
    ferry_px_ring_req_words(ring, req, words, sizeof(words));
    FERRY_WARN("%s: %s failed: %s", desc, words, ring->fail_reason);
    ferry_px_handle_step(req); /* Reported: its handle no longer passes. */
    atomic_store_explicit(&req->state, FERRY_PX_REQ_FREE, memory_order_release);
    return status;
}

/*
 * Add a finished request's timeline to the comm's sums (ferry_px_timing_t).
 * The thread that calls test() is their one writer: no locked adds.
 */
static void ferry_px_ring_time(ferry_px_ring_t *ring, const ferry_px_req_t *req, uint64_t now)
{
    ferry_px_timing_t *t = &ring->timing;
    uint64_t start = atomic_load_explicit(&req->start_ns, memory_order_relaxed);
    uint64_t done = atomic_load_explicit(&req->done_ns, memory_order_relaxed);
    uint64_t move;

    if (start < req->post_ns || done < start || now < done)
        return; /* Not every step was stamped (cannot happen for a DONE request). */
    move = done - start;
    ferry_px_stat_add(&t->msgs, 1);
    ferry_px_stat_add(&t->wait_ns, start - req->post_ns);
    ferry_px_stat_add(&t->move_ns, move);
    ferry_px_stat_add(&t->report_ns, now - done);
    if (move > atomic_load_explicit(&t->move_max_ns, memory_order_relaxed))
        atomic_store_explicit(&t->move_max_ns, move, memory_order_relaxed);
}

/* A finished request: hand its result to the caller and free its slot. */
static ferry_status_t ferry_px_ring_reap(ferry_px_ring_t *ring, ferry_px_req_t *req, int state,
                                         int *done_p, int *sizes)
{
    ferry_status_t status;
    uint64_t total = 0;
    int i;

    if (state == FERRY_PX_REQ_DONE) {
        uint64_t now = ferry_px_now_ns();

        assert(ferry_px_req_check(req));
        ferry_px_ring_time(ring, req, now);
        ring->stall_quiet = 0; /* The comm moves again: a new stall gets its own WARN. */
        /*
         * Reported now: done_ns may be long past. The timing's clock read serves:
         * the stall checks compare it with the coarse clock, which runs behind
         * (then the comm counts as not idle yet), as they do request stamps.
         */
        ring->moved_ns = now;
        for (i = 0; i < req->n; i++) {
            uint64_t size = atomic_load_explicit(&req->sub[i].size, memory_order_relaxed);

            if (sizes != NULL)
                sizes[i] = (int)size;
            total += size;
        }
        atomic_store_explicit(&ring->last_size, total, memory_order_relaxed);
        *done_p = 1;
        ferry_px_handle_step(req);
        atomic_store_explicit(&req->state, FERRY_PX_REQ_FREE, memory_order_release);
        return FERRY_OK;
    }
    /* FERRY_PX_REQ_ERROR: whoever failed it already logged the cause. */
    status = req->status;
    ferry_px_handle_step(req);
    atomic_store_explicit(&req->state, FERRY_PX_REQ_FREE, memory_order_release);
    return status;
}

/* A DONE or ERROR request: report it, unless the backend still holds a DONE one back. */
static ferry_status_t ferry_px_ring_report(ferry_px_ring_t *ring, ferry_px_req_t *req, int state,
                                           int *done_p, int *sizes)
{
    int ready = 1;

    if (state == FERRY_PX_REQ_DONE && ring->ops->finish != NULL) {
        ferry_status_t status = ring->ops->finish(ring, req, &ready);

        if (status == FERRY_OK && !ready)
            ferry_px_ring_check_stall(ring, req);
        if (status != FERRY_OK || !ready)
            return status;
    }
    return ferry_px_ring_reap(ring, req, state, done_p, sizes);
}

ferry_status_t ferry_px_ring_test(ferry_px_ring_t *ring, ferry_px_req_t *req, int *done_p,
                                  int *sizes)
{
    /*
     * Read the failure before the state: a comm fails only when no more data
     * can arrive, so a request not DONE after that point never will be.
     */
    int failed = atomic_load_explicit(&ring->failed, memory_order_acquire);
    int state = atomic_load_explicit(&req->state, memory_order_acquire);
    uint64_t now;
    long work;

    *done_p = 0;
    if (state == FERRY_PX_REQ_DONE || state == FERRY_PX_REQ_ERROR)
        return ferry_px_ring_report(ring, req, state, done_p, sizes);
    if (state == FERRY_PX_REQ_FREE)
        return FERRY_ERR_INVALID;
    /* All bytes are in; only the (delayed) completion is outstanding: not a failure. */
    if (failed != 0 && !ferry_px_req_all_moved(req))
        return ferry_px_ring_test_failed(ring, req, (ferry_status_t)failed);
    /* The stall check's and the backend's poll's clock: one read every few calls. */
    now = ferry_px_ring_clock(ring);
    if (ferry_px_ring_stall_idle(ring, req, now) != 0)
        ferry_px_ring_check_stall_at(ring, req, now);
    work = ring->ops->poll(ring, req, now);
    /*
     * What the poll finished is reported now, not on NCCL's next call: its
     * proxy thread yields the CPU after a round without progress, and on a
     * one-core rank the next call then waits for the rank's spinning main
     * thread to give the core back.
     */
    state = atomic_load_explicit(&req->state, memory_order_acquire);
    if (state == FERRY_PX_REQ_DONE || state == FERRY_PX_REQ_ERROR)
        return ferry_px_ring_report(ring, req, state, done_p, sizes);
    failed = atomic_load_explicit(&ring->failed, memory_order_acquire);
    if (work < 0 && failed != 0 && !ferry_px_req_all_moved(req))
        return ferry_px_ring_test_failed(ring, req, (ferry_status_t)failed);
    return FERRY_OK;
}
