/*
 * Request handles: what NCCL holds for a request, instead of its address.
 * NCCL may call test() with a request of a comm it closed, one test()
 * already reported, or garbage; the address alone cannot tell those from a
 * live request without reading memory that may be freed (or reused by a
 * later request of the same slot). A handle names a slot of a process-wide
 * table and the generation the slot had when the request was posted:
 *
 *   handle = generation << 32 | (slot index + 1)
 *
 * Each comm's ring owns FERRY_MAX_REQUESTS slots from its creation to its
 * fini; slot base + i stands for reqs[i]. A slot's generation is odd while
 * its request is NCCL's (posted, not yet reported) and even otherwise; each
 * post and each report steps it, and the ring's fini steps it past whatever
 * was handed out. The table only grows, in chunks that stay until the
 * library unloads, so test() checks a handle with three loads and no lock,
 * whatever the handle is. The generation is 32 bits: a handle kept across
 * 2^31 messages of its slot would pass again.
 */
#ifndef FERRY_PROXY_HANDLE_H
#define FERRY_PROXY_HANDLE_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/status.h"
#include "proxy/ring.h"

#define FERRY_PX_HANDLE_CHUNK_SLOTS 1024 /* Slots per chunk: 32 comms. */
#define FERRY_PX_HANDLE_CHUNKS      4096 /* Chunks at most: 131072 comms open at once. */

typedef struct ferry_px_handle_slot {
    _Atomic uint32_t         gen; /* Odd: its request is NCCL's. */
    _Atomic(ferry_px_req_t *) req; /* The ring slot it stands for; NULL when no comm owns it. */
} ferry_px_handle_slot_t;

extern _Atomic(ferry_px_handle_slot_t *) ferry_px_handle_chunks[FERRY_PX_HANDLE_CHUNKS];

/* A ring's block of slots (ring->handle_base); FERRY_ERR_NO_MEMORY when none is left. */
ferry_status_t ferry_px_handles_attach(ferry_px_ring_t *ring);
/* Give the block back; every handle of the ring stops passing. */
void ferry_px_handles_detach(ferry_px_ring_t *ring);

/* The slot at index idx, or NULL when no chunk holds it. */
static inline ferry_px_handle_slot_t *ferry_px_handle_slot(uint64_t idx)
{
    ferry_px_handle_slot_t *chunk;

    if (idx >= (uint64_t)FERRY_PX_HANDLE_CHUNKS * FERRY_PX_HANDLE_CHUNK_SLOTS)
        return NULL;
    chunk = atomic_load_explicit(&ferry_px_handle_chunks[idx / FERRY_PX_HANDLE_CHUNK_SLOTS],
                                 memory_order_acquire);
    return chunk != NULL ? &chunk[idx % FERRY_PX_HANDLE_CHUNK_SLOTS] : NULL;
}

static inline ferry_px_handle_slot_t *ferry_px_handle_slot_of(const ferry_px_req_t *req)
{
    const ferry_px_ring_t *ring = req->ring;

    return ferry_px_handle_slot((uint64_t)ring->handle_base + (uint64_t)(req - ring->reqs));
}

/*
 * A request was posted (odd) or reported (even): one step of its slot's
 * generation. Only the thread that owns the transition writes it (the
 * poster under the ring's lock, the reporter in test()).
 */
static inline void ferry_px_handle_step(const ferry_px_req_t *req)
{
    ferry_px_handle_slot_t *slot = ferry_px_handle_slot_of(req);

    if (slot != NULL)
        atomic_store_explicit(&slot->gen,
                              atomic_load_explicit(&slot->gen, memory_order_relaxed) + 1,
                              memory_order_release);
}

/* NCCL's handle for a posted request (NULL for NULL). */
static inline void *ferry_px_handle_of(const ferry_px_req_t *req)
{
    uint64_t idx;
    ferry_px_handle_slot_t *slot;

    if (req == NULL)
        return NULL;
    idx = (uint64_t)req->ring->handle_base + (uint64_t)(req - req->ring->reqs);
    slot = ferry_px_handle_slot(idx);
    if (slot == NULL)
        return (void *)(uintptr_t)(idx + 1); /* Cannot happen (rings attach at init): test() refuses it. */
    return (void *)(uintptr_t)((uint64_t)atomic_load_explicit(&slot->gen, memory_order_relaxed)
                               << 32 | (idx + 1));
}

/* The live request a handle stands for, or NULL (then ferry_px_handle_why says why). */
static inline ferry_px_req_t *ferry_px_handle_req(const void *handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;
    uint32_t gen = (uint32_t)(h >> 32);
    ferry_px_handle_slot_t *slot;

    if ((gen & 1) == 0 || (uint32_t)h == 0)
        return NULL;
    slot = ferry_px_handle_slot((uint32_t)h - 1);
    if (slot == NULL || atomic_load_explicit(&slot->gen, memory_order_acquire) != gen)
        return NULL;
    return atomic_load_explicit(&slot->req, memory_order_relaxed);
}

/* Why ferry_px_handle_req refused handle, in words for a WARN. */
const char *ferry_px_handle_why(const void *handle);

/*
 * An RMA test()'s check: the live request handle stands for, of a ring
 * with ring ops `ops` that `owner` holds (a group's peer rings); else NULL,
 * with a WARN saying why and what to try.
 */
ferry_px_req_t *ferry_px_handle_group_req(const void *handle, const ferry_px_ring_ops_t *ops,
                                          const void *owner);
/* test() of such a request: FERRY_ERR_USAGE (and that WARN) for one not owner's. */
ferry_status_t ferry_px_handle_group_test(const void *handle, const ferry_px_ring_ops_t *ops,
                                          const void *owner, int *done_p);

#endif
