/*
 * The request-handle table (why and how: handle.h). Rings take and give
 * back blocks of FERRY_MAX_REQUESTS slots under one mutex, at comm creation
 * and close only; test() reads the table without it. Chunks are never
 * freed while the library is loaded (a stale handle may point into any of
 * them), only by its destructor. Also RMA test()'s check that a request
 * is one of the group's own rings (ferry_px_handle_group_req).
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/log.h"
#include "proxy/handle.h"

#define FERRY_PX_HANDLE_BLOCKS_PER_CHUNK (FERRY_PX_HANDLE_CHUNK_SLOTS / FERRY_MAX_REQUESTS)

_Atomic(ferry_px_handle_slot_t *) ferry_px_handle_chunks[FERRY_PX_HANDLE_CHUNKS];

/* All under ferry_px_handle_lock. */
static pthread_mutex_t ferry_px_handle_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t ferry_px_handle_blocks;   /* Blocks ever handed out (the high-water mark). */
static uint32_t *ferry_px_handle_free;    /* Blocks given back, to hand out again... */
static uint32_t ferry_px_handle_nfree, ferry_px_handle_free_cap; /* ...their count and room. */

/* A block never handed out: from the current chunk, or a new one. */
static int ferry_px_handle_new_block(uint32_t *block_p)
{
    uint32_t block = ferry_px_handle_blocks, c = block / FERRY_PX_HANDLE_BLOCKS_PER_CHUNK;

    if (c >= FERRY_PX_HANDLE_CHUNKS)
        return -1;
    if (atomic_load_explicit(&ferry_px_handle_chunks[c], memory_order_relaxed) == NULL) {
        ferry_px_handle_slot_t *chunk = calloc(FERRY_PX_HANDLE_CHUNK_SLOTS, sizeof(*chunk));

        if (chunk == NULL)
            return -1;
        /* Release: a reader that finds the chunk finds it zeroed. */
        atomic_store_explicit(&ferry_px_handle_chunks[c], chunk, memory_order_release);
    }
    ferry_px_handle_blocks++;
    *block_p = block;
    return 0;
}

ferry_status_t ferry_px_handles_attach(ferry_px_ring_t *ring)
{
    uint32_t block = 0, i;
    int ok = 1;

    pthread_mutex_lock(&ferry_px_handle_lock);
    if (ferry_px_handle_nfree > 0)
        block = ferry_px_handle_free[--ferry_px_handle_nfree];
    else
        ok = ferry_px_handle_new_block(&block) == 0;
    pthread_mutex_unlock(&ferry_px_handle_lock);
    if (!ok)
        return FERRY_ERR_NO_MEMORY;
    ring->handle_base = block * FERRY_MAX_REQUESTS;
    for (i = 0; i < FERRY_MAX_REQUESTS; i++)
        atomic_store_explicit(&ferry_px_handle_slot(ring->handle_base + i)->req, &ring->reqs[i],
                              memory_order_relaxed);
    return FERRY_OK;
}

void ferry_px_handles_detach(ferry_px_ring_t *ring)
{
    uint32_t i;

    for (i = 0; i < FERRY_MAX_REQUESTS; i++) {
        ferry_px_handle_slot_t *slot = ferry_px_handle_slot(ring->handle_base + i);
        uint32_t gen = atomic_load_explicit(&slot->gen, memory_order_relaxed);

        /* Even and past every handle given out: none of this ring's passes again. */
        atomic_store_explicit(&slot->gen, (gen | 1) + 1, memory_order_release);
        atomic_store_explicit(&slot->req, NULL, memory_order_relaxed);
    }
    pthread_mutex_lock(&ferry_px_handle_lock);
    if (ferry_px_handle_nfree == ferry_px_handle_free_cap) {
        uint32_t cap = ferry_px_handle_free_cap ? ferry_px_handle_free_cap * 2 : 64;
        uint32_t *grown = realloc(ferry_px_handle_free, cap * sizeof(*grown));

        if (grown == NULL) {
            pthread_mutex_unlock(&ferry_px_handle_lock);
            return; /* The block stays out of use; its slots refuse every handle. */
        }
        ferry_px_handle_free = grown;
        ferry_px_handle_free_cap = cap;
    }
    ferry_px_handle_free[ferry_px_handle_nfree++] = ring->handle_base / FERRY_MAX_REQUESTS;
    pthread_mutex_unlock(&ferry_px_handle_lock);
}

const char *ferry_px_handle_why(const void *handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;
    ferry_px_handle_slot_t *slot;

    if (handle == NULL)
        return "a NULL request";
    slot = (uint32_t)h != 0 ? ferry_px_handle_slot((uint32_t)h - 1) : NULL;
    if (slot == NULL || (h >> 32) == 0 || ((h >> 32) & 1) == 0 ||
        (uint32_t)(h >> 32) > atomic_load_explicit(&slot->gen, memory_order_relaxed))
        return "not a ferry request handle (garbage, or an address)";
    if (atomic_load_explicit(&slot->req, memory_order_relaxed) == NULL)
        return "a request of a comm already closed";
    return "a request test() already reported done or failed, or one of a comm already closed";
}

ferry_px_req_t *ferry_px_handle_group_req(const void *handle, const ferry_px_ring_ops_t *ops,
                                          const void *owner)
{
    ferry_px_req_t *req = ferry_px_handle_req(handle);

    if (req == NULL) {
        FERRY_WARN_LIMITED("RMA test(%p): %s; every request from iput/iputSignal/iget/iflush "
                           "must be tested until it reports done or an error, once, and never "
                           "after its group is closed", handle, ferry_px_handle_why(handle));
        return NULL;
    }
    if (req->ring->ops != ops || req->ring->owner != owner) {
        FERRY_WARN_LIMITED("RMA test(%p): the request belongs to another group or comm than "
                           "%p; test each request with the collComm it was posted on", handle,
                           owner);
        return NULL;
    }
    return req;
}

ferry_status_t ferry_px_handle_group_test(const void *handle, const ferry_px_ring_ops_t *ops,
                                          const void *owner, int *done_p)
{
    ferry_px_req_t *req = ferry_px_handle_group_req(handle, ops, owner);

    *done_p = 0;
    if (req == NULL)
        return FERRY_ERR_USAGE;
    return ferry_px_ring_test(req->ring, req, done_p, NULL);
}

/* The library unloads (dlclose or exit): nothing can hold a handle that matters any more. */
__attribute__((destructor)) static void ferry_px_handles_unload(void)
{
    int c;

    for (c = 0; c < FERRY_PX_HANDLE_CHUNKS; c++)
        free(atomic_exchange(&ferry_px_handle_chunks[c], NULL));
    free(ferry_px_handle_free);
    ferry_px_handle_free = NULL;
    ferry_px_handle_nfree = ferry_px_handle_free_cap = 0;
    ferry_px_handle_blocks = 0;
}
