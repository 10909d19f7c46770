/* The per-peer region table of an RMA group (why: rma_regs.h). */
#include <stdlib.h>
#include <string.h>

#include "core/rma_regs.h"

void *ferry_rma_regs_slot(ferry_rma_regs_t *t, uint32_t index, size_t elem)
{
    uint32_t c = index / FERRY_RMA_REGS_CHUNK;

    if (index >= FERRY_RMA_MAX_REGS || elem == 0)
        return NULL;
    if (t->chunk[c] == NULL && (t->chunk[c] = calloc(FERRY_RMA_REGS_CHUNK, elem)) == NULL)
        return NULL;
    return (char *)t->chunk[c] + (size_t)(index % FERRY_RMA_REGS_CHUNK) * elem;
}

const void *ferry_rma_regs_find(const ferry_rma_regs_t *t, uint32_t index, size_t elem)
{
    const char *chunk;

    if (index >= FERRY_RMA_MAX_REGS)
        return NULL;
    chunk = t->chunk[index / FERRY_RMA_REGS_CHUNK];
    return chunk != NULL ? chunk + (size_t)(index % FERRY_RMA_REGS_CHUNK) * elem : NULL;
}

void ferry_rma_regs_free(ferry_rma_regs_t *t)
{
    size_t c;

    for (c = 0; c < sizeof(t->chunk) / sizeof(t->chunk[0]); c++)
        free(t->chunk[c]);
    memset(t, 0, sizeof(*t));
}
