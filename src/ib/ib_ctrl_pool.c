/*
 * ib control-block pool. Every comm has a small control block that its peer
 * writes with RDMA (CTS FIFO on the send side, sizes FIFO on the receive
 * side). Registered one by one, a thousand comms pin and key a thousand
 * regions per HCA; a NIC's MR table and its translation cache are finite.
 * Here blocks come from chunks of FERRY_IB_CTRL_PER_CHUNK, and each comm
 * takes a reference on one registration of its whole chunk (the MR cache of
 * ib_mr.c finds it by range), so a chunk's comms share one MR per HCA.
 *
 * A block is never handed out twice from one chunk: a peer that still holds
 * the key and address of a closed comm's block must not be able to write
 * into a new comm's FIFO. A chunk is freed once its last block is, by which
 * time every comm on it has put its registration, so the region is
 * deregistered (its key dead) before the memory can come back in a new
 * chunk under a new key.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ib/ib_ctrl_pool.h"

#define FERRY_IB_CTRL_PER_CHUNK 64

typedef struct ferry_ib_ctrl_chunk {
    struct ferry_ib_ctrl_chunk *next;
    char                       *base;
    size_t                      block;    /* Bytes per block. */
    size_t                      len;      /* block * FERRY_IB_CTRL_PER_CHUNK. */
    int                         handed;   /* Blocks handed out so far (never again). */
    int                         live;     /* Handed out and not yet given back. */
} ferry_ib_ctrl_chunk_t;

static pthread_mutex_t ferry_ib_ctrl_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_ib_ctrl_chunk_t *ferry_ib_ctrl_chunks;

static ferry_ib_ctrl_chunk_t *ferry_ib_ctrl_chunk_of(const void *ctrl)
{
    ferry_ib_ctrl_chunk_t *c;

    for (c = ferry_ib_ctrl_chunks; c != NULL; c = c->next)
        if ((const char *)ctrl >= c->base && (const char *)ctrl < c->base + c->len)
            return c;
    return NULL;
}

void *ferry_ib_ctrl_alloc(size_t len)
{
    ferry_ib_ctrl_chunk_t *c;
    void *block = NULL;

    pthread_mutex_lock(&ferry_ib_ctrl_lock);
    for (c = ferry_ib_ctrl_chunks; c != NULL; c = c->next)
        if (c->block == len && c->handed < FERRY_IB_CTRL_PER_CHUNK)
            break;
    if (c == NULL) {
        c = calloc(1, sizeof(*c));
        if (c == NULL)
            goto out;
        c->block = len;
        c->len = len * FERRY_IB_CTRL_PER_CHUNK;
        /* Fresh anonymous pages: zero, and resident only once a comm touches its block. */
        c->base = mmap(NULL, c->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c->base == MAP_FAILED) {
            free(c);
            goto out;
        }
        c->next = ferry_ib_ctrl_chunks;
        ferry_ib_ctrl_chunks = c;
    }
    block = c->base + (size_t)c->handed * len;
    c->handed++;
    c->live++;
out:
    pthread_mutex_unlock(&ferry_ib_ctrl_lock);
    return block;
}

void ferry_ib_ctrl_free(void *ctrl)
{
    ferry_ib_ctrl_chunk_t *c, **pp;

    if (ctrl == NULL)
        return;
    pthread_mutex_lock(&ferry_ib_ctrl_lock);
    c = ferry_ib_ctrl_chunk_of(ctrl);
    if (c != NULL && --c->live == 0) {
        for (pp = &ferry_ib_ctrl_chunks; *pp != c; pp = &(*pp)->next)
            ;
        *pp = c->next;
        munmap(c->base, c->len);
        free(c);
    }
    pthread_mutex_unlock(&ferry_ib_ctrl_lock);
}

ferry_status_t ferry_ib_ctrl_mr_get(ferry_ib_hca_t *hca, void *ctrl, struct ibv_mr **mr_p,
                                    char *err, size_t len)
{
    ferry_ib_ctrl_chunk_t *c;
    char *base;
    size_t size;

    pthread_mutex_lock(&ferry_ib_ctrl_lock);
    c = ferry_ib_ctrl_chunk_of(ctrl);
    base = c != NULL ? c->base : NULL;
    size = c != NULL ? c->len : 0;
    pthread_mutex_unlock(&ferry_ib_ctrl_lock);
    if (base == NULL) {
        snprintf(err, len, "control block %p is not from the pool", ctrl);
        return FERRY_ERR_INTERNAL;
    }
    /* The chunk stays: the caller's block is live in it. */
    return ferry_ib_mr_get(hca, base, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 1,
                           mr_p, err, len);
}
