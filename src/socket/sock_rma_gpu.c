/*
 * GPU regions of an RMA group (NCCL_FERRY_GPU_STAGING, sock_gpu.h). TCP
 * moves host memory only, so a region in GPU memory gets a pinned host
 * shadow of its size, and an operation copies the bytes it touches between
 * the two, synchronously, on the group's stream: a put's source and a get's
 * answer before they are sent, a put's payload and a get's result after
 * they arrived. A signal word in GPU memory is read, added to and written
 * back; only network operations write signals and they are applied one at
 * a time under the group's lock, so that stays one add per signal.
 */
#include <string.h>

#include "core/log.h"
#include "socket/sock.h"
#include "socket/sock_rma.h"

/* Polls of a synchronous copy after the stream synchronised: it is done by then. */
#define FERRY_SOCK_RMA_GPU_POLLS 1000

ferry_status_t ferry_sock_rma_gpu_reg(ferry_sock_rma_group_t *g, ferry_sock_rma_mr_t *mr)
{
    ferry_status_t st;
    char err[256], who[160];

    ferry_sock_rma_describe(g, who, sizeof(who));
    if (!ferry_sock_state.gpu) {
        FERRY_WARN("RMA regMrSym: %s: GPU memory at %p (%zu bytes) refused: the socket "
                   "backend takes GPU buffers only with NCCL_FERRY_GPU_STAGING=1 and a working "
                   "CUDA driver%s%s; register host memory, or set it", who, mr->base, mr->size,
                   ferry_sock_state.cfg.gpu_staging ? ": " : "",
                   ferry_sock_state.cfg.gpu_staging ? ferry_sock_gpu_why_off() : "");
        return FERRY_ERR_USAGE;
    }
    st = ferry_sock_gpu_region_init(&mr->gpu, mr->base, mr->size, err, sizeof(err));
    if (st == FERRY_OK)
        st = ferry_sock_gpu_queue_init(&g->gpu_q, &mr->gpu, err, sizeof(err));
    if (st != FERRY_OK) {
        ferry_sock_gpu_region_fini(&mr->gpu);
        FERRY_WARN("RMA regMrSym: %s: GPU region %p (%zu bytes) cannot be staged through host "
                   "memory: %s; register host memory, or set NCCL_FERRY_GPU_STAGING=0 so NCCL "
                   "does not ask for GPU regions", who, mr->base, mr->size, err);
        return st;
    }
    mr->is_gpu = 1;
    return FERRY_OK;
}

void ferry_sock_rma_gpu_dereg(ferry_sock_rma_mr_t *mr)
{
    if (mr->is_gpu)
        ferry_sock_gpu_region_fini(&mr->gpu);
    mr->is_gpu = 0;
}

ferry_status_t ferry_sock_rma_gpu_copy(ferry_sock_rma_group_t *g, ferry_sock_rma_mr_t *mr,
                                       uint64_t off, size_t len, int to_device)
{
    char err[256], who[160];
    int r = 0;

    if (!mr->is_gpu || len == 0)
        return FERRY_OK;
    if (ferry_sock_gpu_queue_copy(&g->gpu_q, 0, to_device, mr->gpu.shadow + off,
                                  mr->base + off, len, err, sizeof(err)) == 0) {
        ferry_sock_gpu_queue_sync(&g->gpu_q);
        for (int i = 0; i < FERRY_SOCK_RMA_GPU_POLLS && r == 0; i++)
            r = ferry_sock_gpu_queue_poll(&g->gpu_q, 0, err, sizeof(err));
        if (r == 0)
            snprintf(err, sizeof(err), "the copy did not complete after the stream synchronised");
    } else {
        r = -1;
    }
    if (r == 1)
        return FERRY_OK;
    ferry_sock_rma_describe(g, who, sizeof(who));
    FERRY_WARN_LIMITED("RMA: %s: copying %zu bytes at offset %llu of GPU region %u (GPU %d) %s "
                       "its host shadow failed: %s; the operation ends with an error; check the "
                       "GPU's health (nvidia-smi) and the application's CUDA errors", who, len,
                       (unsigned long long)off, mr->index, mr->gpu.ordinal,
                       to_device ? "from" : "to", err);
    return FERRY_ERR_CUDA;
}

ferry_status_t ferry_sock_rma_signal(ferry_sock_rma_group_t *g, ferry_sock_rma_mr_t *mr,
                                     uint64_t off, uint64_t add)
{
    ferry_status_t st;

    if (!mr->is_gpu) {
        /* Release: whoever reads the signal with acquire sees the payload written before it. */
        __atomic_fetch_add((uint64_t *)(void *)(mr->base + off), add, __ATOMIC_RELEASE);
        return FERRY_OK;
    }
    st = ferry_sock_rma_gpu_copy(g, mr, off, 8, 0);
    if (st == FERRY_OK) {
        uint64_t *word = (uint64_t *)(void *)(mr->gpu.shadow + off);

        *word += add;
        st = ferry_sock_rma_gpu_copy(g, mr, off, 8, 1);
    }
    return st;
}
