/*
 * A request without progress for stall_ns: say so, once per stall of the
 * comm (NCCL posts several requests per comm, and a slow peer stalls them
 * all), with what ferry knows and what to look at. NCCL itself waits
 * forever, and a rank that stopped or a network that silently drops packets
 * otherwise looks like a hang with nothing in the log. Not an error: a
 * straggler rank still computing also keeps a receive waiting. Every word
 * about the transport is the backend's (ring ops stall_why and state).
 * The same for a post the backend cannot take yet (ferry_px_ring_check_wait):
 * no request exists then, but NCCL waits as long.
 */
#include <stdio.h>

#include "core/log.h"
#include "proxy/ring.h"

/* Why, for a request the backend has not let go yet (gated send, held receive). */
static int ferry_px_ring_stall_held(const ferry_px_ring_t *ring, const ferry_px_req_t *req,
                                    int state, char *buf, size_t len)
{
    if (state == FERRY_PX_REQ_DONE)
        snprintf(buf, len, "All of it arrived, but the backend still holds it back (%s)",
                 ring->hold_hint != NULL ? ring->hold_hint : "see the backend's log");
    else if (req->kind == FERRY_PX_SEND && atomic_load(&req->gated) &&
             state == FERRY_PX_REQ_POSTED)
        snprintf(buf, len, "It is still gated: the backend has not finished filling its "
                 "buffer (%s)", ring->hold_hint != NULL ? ring->hold_hint : "see the backend's log");
    else
        return 0;
    return 1;
}

void ferry_px_ring_check_stall(ferry_px_ring_t *ring, ferry_px_req_t *req)
{
    /* NCCL calls test() in a tight loop: the cheap clock (seconds are what count here). */
    ferry_px_ring_check_stall_at(ring, req, ferry_px_coarse_ns());
}

void ferry_px_ring_check_stall_at(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now)
{
    char desc[192], words[224], why[640], state_words[256];
    uint64_t idle = ferry_px_ring_stall_idle(ring, req, now);
    int state;

    if (idle == 0)
        return;
    state = atomic_load(&req->state);
    if (!ferry_px_ring_stall_held(ring, req, state, why, sizeof(why))) {
        if (ring->ops->stall_why != NULL)
            ring->ops->stall_why(ring, req, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "The peer may be slower, stopped, or unreachable; "
                     "check that rank's log");
    }
    state_words[0] = '\0';
    if (ring->ops->state != NULL)
        ring->ops->state(ring, state_words, sizeof(state_words));
    ring->stall_quiet = 1;
    ferry_px_ring_describe(ring, desc, sizeof(desc));
    ferry_px_ring_req_counters(ring, req, words, sizeof(words));
    FERRY_WARN("%s: %s request seq %u has made no progress for %llu s (%s%s%s). %s. "
               "NCCL_FERRY_DUMP_SIGNAL dumps every comm; "
               "NCCL_FERRY_STALL_WARN_S sets this warning's delay (0: off)",
               desc, ferry_px_req_kind_str(req->kind), req->seq,
               (unsigned long long)(idle / 1000000000ULL), words,
               state_words[0] != '\0' ? "; " : "", state_words, why);
}

void ferry_px_ring_check_wait_slow(ferry_px_ring_t *ring, uint64_t msg, size_t size,
                                   uint64_t now)
{
    uint64_t key = msg + 1, since;
    char desc[192], why[384];

    if (ring->stall_ns == 0)
        return;
    if (atomic_load_explicit(&ring->wait_msg, memory_order_relaxed) != key) {
        /* The wait's start: the clock itself (now may be a few calls old). */
        atomic_store_explicit(&ring->wait_ns, ferry_px_coarse_ns(), memory_order_relaxed);
        atomic_store_explicit(&ring->wait_size, size, memory_order_relaxed);
        atomic_store_explicit(&ring->wait_msg, key, memory_order_relaxed);
        return;
    }
    /*
     * One WARN per stall of the comm, as for requests (the stall check may
     * have told it already); a message queued behind ones that test()
     * reported since waits from then.
     */
    since = atomic_load_explicit(&ring->wait_ns, memory_order_relaxed);
    if (ring->moved_ns > since)
        since = ring->moved_ns;
    if (ring->wait_warned == key || ring->stall_quiet || now < since + ring->stall_ns)
        return;
    ring->wait_warned = key;
    ring->stall_quiet = 1;
    if (ring->ops->wait_why != NULL)
        ring->ops->wait_why(ring, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "for the peer; check that rank's log");
    ferry_px_ring_describe(ring, desc, sizeof(desc));
    FERRY_WARN("%s: %s of message %llu (%zu bytes) has waited %llu s %s. "
               "NCCL_FERRY_DUMP_SIGNAL dumps every comm; NCCL_FERRY_STALL_WARN_S sets this "
               "warning's delay (0: off)", desc, ring->kind == FERRY_PX_SEND ? "isend" : "irecv",
               (unsigned long long)msg, size, (unsigned long long)((now - since) / 1000000000ULL),
               why);
}
