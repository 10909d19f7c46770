/*
 * What a rank knows of each peer's regions in an RMA group, by region
 * number: a two-level table whose chunks are made as numbers are handed out.
 * A group holds one table per peer, so a peer costs the regions the group
 * has registered, not the most it may (FERRY_RMA_MAX_REGS); that is what
 * lets a group span thousands of ranks. Both backends use it (the ib
 * backend's entries are address, size and rkey; the socket backend's a
 * size). Not thread-safe: the group's lock covers it.
 */
#ifndef FERRY_CORE_RMA_REGS_H
#define FERRY_CORE_RMA_REGS_H

#include <stddef.h>
#include <stdint.h>

#define FERRY_RMA_MAX_REGS   1024 /* Regions a group may register in its life. */
#define FERRY_RMA_REGS_CHUNK 32   /* Entries per chunk. */

typedef struct ferry_rma_regs {
    void *chunk[FERRY_RMA_MAX_REGS / FERRY_RMA_REGS_CHUNK];
} ferry_rma_regs_t;

/* Entry index (elem bytes each), its chunk made zeroed if new; NULL out of range or memory. */
void *ferry_rma_regs_slot(ferry_rma_regs_t *t, uint32_t index, size_t elem);
/* Entry index, or NULL where none was made (never registered, or out of range). */
const void *ferry_rma_regs_find(const ferry_rma_regs_t *t, uint32_t index, size_t elem);
/* Every chunk freed; the table is empty again. */
void ferry_rma_regs_free(ferry_rma_regs_t *t);

#endif
