/*
 * Symmetric registration. NCCL registers a region on every rank of the
 * group in the same order, so the n-th registration is region n on every
 * rank: operations name it by that number, and each rank tells the others
 * the size of its own region n (a REG frame) so that a put beyond it is
 * refused before it leaves. regMrSym returns once every peer's size for
 * the new region arrived.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/clock.h"
#include "socket/sock.h"
#include "socket/sock_rma.h"

#define FERRY_SOCK_RMA_REG_MS 60000 /* Every peer's size for a new region within this. */

ferry_sock_rma_mr_t *ferry_sock_rma_region(ferry_sock_rma_group_t *g, uint32_t index)
{
    return index < g->nregs ? g->regs[index] : NULL;
}

/* Progress until every live peer told its size of region index, or a peer failed. */
static ferry_status_t ferry_sock_rma_reg_wait(ferry_sock_rma_group_t *g, uint32_t index)
{
    uint64_t deadline = ferry_px_now_ns() + FERRY_SOCK_RMA_REG_MS * 1000000ULL;
    char who[160];

    for (;;) {
        int missing = -1;

        for (int r = 0; r < g->nranks && missing < 0; r++) {
            ferry_sock_rma_peer_t *p = &g->peers[r];

            if (r != g->rank && p->nregs <= index)
                missing = r;
        }
        if (missing < 0)
            return FERRY_OK;
        if (g->peers[missing].dead || g->peers[missing].bye) {
            ferry_sock_rma_describe(g, who, sizeof(who));
            FERRY_WARN("RMA regMrSym: %s: region %u: rank %d (%s) %s before telling its size; "
                       "every rank must register the same regions in the same order", who,
                       index, missing, g->peers[missing].addr,
                       g->peers[missing].dead ? "failed" : "closed its group");
            return FERRY_ERR_REMOTE;
        }
        if (ferry_px_now_ns() >= deadline) {
            ferry_sock_rma_describe(g, who, sizeof(who));
            FERRY_WARN("RMA regMrSym: %s: region %u: rank %d (%s) did not register its region "
                       "%u within %d ms; regMrSym is collective: every rank must call it, in "
                       "the same order", who, index, missing, g->peers[missing].addr, index,
                       FERRY_SOCK_RMA_REG_MS);
            return FERRY_ERR_REMOTE;
        }
        if (ferry_sock_rma_progress_locked(g) == 0)
            usleep(50);
    }
}

ferry_status_t ferry_sock_rma_reg(void *group, void *data, size_t size, int type, void **mr_p)
{
    ferry_sock_rma_group_t *g = group;
    ferry_sock_rma_frame_t reg;
    ferry_sock_rma_mr_t *mr;
    ferry_status_t st = FERRY_OK;
    uint64_t *own;
    char who[160];

    *mr_p = NULL;
    if (g == NULL || g->magic != FERRY_SOCK_RMA_GROUP_MAGIC) {
        FERRY_WARN("RMA regMrSym(%p): not an open RMA group of ferry's socket backend", group);
        return FERRY_ERR_INVALID;
    }
    ferry_sock_rma_describe(g, who, sizeof(who));
    if (type != FERRY_PTR_HOST && type != FERRY_PTR_CUDA) {
        FERRY_WARN("RMA regMrSym: %s: memory type %d at %p (%zu bytes) refused: ferry's socket "
                   "backend takes host memory (NCCL_PTR_HOST) and, with "
                   "NCCL_FERRY_GPU_STAGING=1, GPU memory (NCCL_PTR_CUDA)", who, type, data,
                   size);
        return FERRY_ERR_USAGE;
    }
    if (data == NULL && size > 0) {
        FERRY_WARN("RMA regMrSym: %s: NULL address with %zu bytes", who, size);
        return FERRY_ERR_ARGUMENT;
    }
    pthread_mutex_lock(&g->lock);
    if (g->nregs >= FERRY_SOCK_RMA_MAX_REGS) {
        FERRY_WARN("RMA regMrSym: %s: this group registered %d regions already, the most it "
                   "takes; deregistered numbers are not reused", who, FERRY_SOCK_RMA_MAX_REGS);
        pthread_mutex_unlock(&g->lock);
        return FERRY_ERR_USAGE;
    }
    mr = calloc(1, sizeof(*mr));
    own = ferry_rma_regs_slot(&g->peers[g->rank].reg_size, g->nregs, sizeof(*own));
    if (mr == NULL || own == NULL) {
        FERRY_WARN("RMA regMrSym: %s: no memory for region %u's record", who, g->nregs);
        free(mr);
        pthread_mutex_unlock(&g->lock);
        return FERRY_ERR_NO_MEMORY;
    }
    mr->magic = FERRY_SOCK_RMA_MR_MAGIC;
    mr->index = g->nregs;
    mr->base = data;
    mr->size = size;
    /* Before it takes a number: a region that cannot be staged is never announced. */
    if (type == FERRY_PTR_CUDA && (st = ferry_sock_rma_gpu_reg(g, mr)) != FERRY_OK) {
        free(mr);
        pthread_mutex_unlock(&g->lock);
        return st;
    }
    g->regs[g->nregs++] = mr;
    *own = size;
    g->peers[g->rank].nregs = g->nregs;
    memset(&reg, 0, sizeof(reg));
    reg.op = FERRY_SOCK_RMA_REG;
    reg.reg = mr->index;
    reg.size = size;
    ferry_sock_rma_seal(&reg);
    for (int r = 0; r < g->nranks && st == FERRY_OK; r++)
        if (r != g->rank && !g->peers[r].dead && !g->peers[r].bye)
            st = ferry_sock_rma_queue(&g->peers[r], &reg, NULL, 0, NULL);
    if (st == FERRY_OK)
        st = ferry_sock_rma_reg_wait(g, mr->index);
    if (st != FERRY_OK) {
        /* The number stays taken: peers may have counted it. */
        g->regs[mr->index] = NULL;
        ferry_sock_rma_gpu_dereg(mr);
        ferry_sock_magic_clear(&mr->magic);
        free(mr);
        pthread_mutex_unlock(&g->lock);
        return st;
    }
    pthread_mutex_unlock(&g->lock);
    *mr_p = mr;
    return FERRY_OK;
}

ferry_status_t ferry_sock_rma_dereg(void *group, void *mhandle)
{
    ferry_sock_rma_group_t *g = group;
    ferry_sock_rma_mr_t *mr = mhandle;

    if (g == NULL || g->magic != FERRY_SOCK_RMA_GROUP_MAGIC) {
        FERRY_WARN("RMA deregMrSym(%p, %p): not an open RMA group of ferry's socket backend",
                   group, mhandle);
        return FERRY_ERR_INVALID;
    }
    pthread_mutex_lock(&g->lock);
    if (mr == NULL || mr->magic != FERRY_SOCK_RMA_MR_MAGIC ||
        ferry_sock_rma_region(g, mr->index) != mr) {
        pthread_mutex_unlock(&g->lock);
        FERRY_WARN("RMA deregMrSym(%p): not a live region of this group (deregistered twice, "
                   "or from another group)", mhandle);
        return FERRY_ERR_INVALID;
    }
    /* Peers' later operations on this number are refused (sock_rma_progress.c). */
    g->regs[mr->index] = NULL;
    ferry_sock_rma_forget_region(g, mr);
    ferry_sock_rma_gpu_dereg(mr);
    pthread_mutex_unlock(&g->lock);
    ferry_sock_magic_clear(&mr->magic);
    free(mr);
    return FERRY_OK;
}
