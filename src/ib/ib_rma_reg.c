/*
 * regMrSym / deregMrSym of an ib RMA group. Registration is collective, in
 * the same order on every rank, so a region is named by its number in that
 * order: each rank registers its range with the HCA (the ib backend's MR
 * cache) for remote write, read and atomics, then tells every peer the
 * range's address, rkey and size in one exchange, and keeps what each peer
 * told it: puts and gets address (region, offset) at the target from that,
 * and are checked against its size before anything is posted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api.h"
#include "core/log.h"
#include "ib/ib_comm.h"
#include "ib/ib_rma.h"

#define FERRY_IB_RMA_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

ferry_ib_rma_mr_t *ferry_ib_rma_region(ferry_ib_rma_group_t *g, uint32_t index)
{
    return index < g->nregs ? g->regs[index] : NULL;
}

static ferry_ib_rma_group_t *ferry_ib_rma_reg_group(void *group, const char *op)
{
    ferry_ib_rma_group_t *g = group;

    if (g == NULL || g->magic != FERRY_IB_RMA_GROUP_MAGIC) {
        FERRY_WARN("RMA %s(%p): not an open RMA group of ferry's ib backend (closed already?)",
                   op, group);
        return NULL;
    }
    return g;
}

/*
 * Register with the HCA; NULL with a WARN. dmabuf: GPU memory named by the
 * DMA-BUF fd (the path of a host without a peer-memory module), registered
 * now: the caller closes fd when this returns.
 */
static ferry_ib_rma_mr_t *ferry_ib_rma_mr_new(ferry_ib_rma_group_t *g, void *data, size_t size,
                                              int type, int dmabuf, int fd, uint64_t offset)
{
    ferry_ib_mr_req_t rq = { data, size, FERRY_IB_RMA_ACCESS, 1, dmabuf ? fd : -1, offset,
                             type != FERRY_PTR_HOST };
    const char *op = dmabuf ? "regMrSymDmaBuf" : "regMrSym";
    ferry_ib_rma_mr_t *mr;
    char who[256], err[1024];

    ferry_ib_rma_describe(g, who, sizeof(who));
    if (dmabuf && fd < 0) {
        FERRY_WARN("RMA %s(%p, %zu bytes, type %d, fd %d): %s: no DMA-BUF fd; register with "
                   "regMrSym, or pass the fd cuMemGetHandleForAddressRange gave", op, data, size,
                   type, fd, who);
        return NULL;
    }
    if (dmabuf && !(ferry_ib_gdr_ptr_support(g->port) & FERRY_PTR_DMABUF)) {
        FERRY_WARN("RMA %s(%p, %zu bytes, type %d, fd %d): %s: DMA-BUF is not available here "
                   "(the init line 'ib backend GPU memory' says why); register with regMrSym",
                   op, data, size, type, fd, who);
        return NULL;
    }
    if (dmabuf && type != FERRY_PTR_CUDA && type != FERRY_PTR_DMABUF) {
        FERRY_WARN("RMA %s(%p, %zu bytes, type %d, fd %d): %s: a DMA-BUF names GPU memory: type "
                   "must be NCCL_PTR_CUDA (2) or NCCL_PTR_DMABUF (4); host memory goes through "
                   "regMrSym", op, data, size, type, fd, who);
        return NULL;
    }
    if (!dmabuf && type != FERRY_PTR_HOST && (type != FERRY_PTR_CUDA || !ferry_ib_state.gdr)) {
        FERRY_WARN("RMA regMrSym(%p, %zu bytes, type %d): %s: %s", data, size, type, who,
                   type == FERRY_PTR_CUDA ? "GPU memory is not registered on this host"
                                          : "only host (NCCL_PTR_HOST) or CUDA (NCCL_PTR_CUDA) "
                                            "memory is taken");
        if (type == FERRY_PTR_CUDA)
            FERRY_WARN("RMA regMrSym: GPU memory: %s%s", ferry_ib_state.gdr_why,
                       ferry_ib_gdr_ptr_support(g->port) & FERRY_PTR_DMABUF
                           ? " (DMA-BUF is available: NCCL registers through regMrSymDmaBuf "
                             "unless NCCL_DMABUF_ENABLE=0)"
                           : "");
        return NULL;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return NULL;
    if (size > 0 && ferry_ib_mr_get_ex(g->port->hca, &rq, &mr->mr, err, sizeof(err)) != FERRY_OK) {
        FERRY_WARN("RMA %s(%p, %zu bytes, type %d): %s: %s", op, data, size, type, who, err);
        free(mr);
        return NULL;
    }
    mr->magic = FERRY_IB_RMA_MR_MAGIC;
    mr->base = data;
    mr->size = size;
    mr->type = type;
    return mr;
}

/*
 * Collective: a registration refused here (bad input, no DMA-BUF) still
 * takes its number on every rank, so the peers' exchange completes and
 * their numbering stays in step.
 */
static ferry_status_t ferry_ib_rma_reg_any(void *group, void *data, size_t size, int type,
                                           int dmabuf, int fd, uint64_t offset, void **mr_p)
{
    ferry_ib_rma_group_t *g = ferry_ib_rma_reg_group(group, dmabuf ? "regMrSymDmaBuf"
                                                                    : "regMrSym");
    ferry_ib_rma_wire_t *out = NULL, *in = NULL;
    ferry_ib_rma_mr_t *mr;
    ferry_status_t st;
    uint32_t index;

    *mr_p = NULL;
    if (g == NULL)
        return FERRY_ERR_INVALID;
    if (data == NULL && size > 0) {
        FERRY_WARN("RMA regMrSym(NULL, %zu bytes): no memory to register", size);
        return FERRY_ERR_ARGUMENT;
    }
    pthread_mutex_lock(&g->lock);
    index = g->nregs;
    if (index >= FERRY_IB_RMA_MAX_REGS) {
        pthread_mutex_unlock(&g->lock);
        FERRY_WARN("RMA regMrSym: rank %d: the group registered %d regions already, the most "
                   "one group takes in its life; deregister and reuse larger regions", g->rank,
                   FERRY_IB_RMA_MAX_REGS);
        return FERRY_ERR_USAGE;
    }
    mr = ferry_ib_rma_mr_new(g, data, size, type, dmabuf, fd, offset);
    out = calloc((size_t)g->nranks, sizeof(*out));
    in = calloc((size_t)g->nranks, sizeof(*in));
    /* A region that failed here still takes part (size 0): the peers' numbering stays in step. */
    st = mr == NULL ? FERRY_ERR_IO : out == NULL || in == NULL ? FERRY_ERR_NO_MEMORY : FERRY_OK;
    if (out != NULL && in != NULL) {
        for (int r = 0; r < g->nranks; r++) {
            out[r].kind = FERRY_IB_RMA_REG;
            out[r].a = index;
            out[r].addr = (uint64_t)(uintptr_t)data;
            out[r].size = mr != NULL ? size : 0;
            out[r].rkey = mr != NULL && mr->mr != NULL ? mr->mr->rkey : 0;
        }
        if (ferry_ib_rma_exchange(g, "RMA regMrSym", out, in, FERRY_IB_RMA_REG) != FERRY_OK)
            st = FERRY_ERR_REMOTE;
    }
    for (int r = 0; st == FERRY_OK && r < g->nranks; r++) {
        if (r != g->rank && in[r].a != index) {
            FERRY_WARN("RMA regMrSym: rank %d: rank %d (%s) registered its region %u when we "
                       "registered region %u; every rank must register in the same order",
                       g->rank, r, g->peers[r].addr, in[r].a, index);
            st = FERRY_ERR_REMOTE;
        }
    }
    if (out != NULL && in != NULL) {
        for (int r = 0; r < g->nranks; r++) {
            const ferry_ib_rma_wire_t *w = r == g->rank ? &out[r] : &in[r];
            ferry_ib_rma_remote_t *e = ferry_rma_regs_slot(&g->peers[r].regs, index, sizeof(*e));

            if (e == NULL) {
                /* That peer's entry stays size 0: operations on the region are refused. */
                FERRY_WARN_LIMITED("RMA regMrSym: rank %d: no memory for what rank %d (%s) "
                                   "registered as region %u; the registration fails", g->rank, r,
                                   g->peers[r].addr, index);
                st = FERRY_ERR_NO_MEMORY;
                continue;
            }
            e->addr = w->addr;
            e->size = w->size;
            e->rkey = w->rkey;
        }
    }
    if (st == FERRY_OK) {
        mr->index = index;
        g->regs[index] = mr;
    } else if (mr != NULL) {
        if (mr->mr != NULL)
            ferry_ib_mr_put(g->port->hca, mr->mr);
        free(mr);
    }
    g->nregs = index + 1; /* A failed one still took its number everywhere. */
    pthread_mutex_unlock(&g->lock);
    free(out);
    free(in);
    if (st == FERRY_OK)
        *mr_p = g->regs[index];
    return st;
}

ferry_status_t ferry_ib_rma_reg(void *group, void *data, size_t size, int type, void **mr_p)
{
    return ferry_ib_rma_reg_any(group, data, size, type, 0, -1, 0, mr_p);
}

ferry_status_t ferry_ib_rma_reg_dmabuf(void *group, void *data, size_t size, int type,
                                       uint64_t offset, int fd, void **mr_p)
{
    return ferry_ib_rma_reg_any(group, data, size, type, 1, fd, offset, mr_p);
}

ferry_status_t ferry_ib_rma_dereg(void *group, void *mhandle)
{
    ferry_ib_rma_group_t *g = ferry_ib_rma_reg_group(group, "deregMrSym");
    ferry_ib_rma_mr_t *mr = mhandle;

    if (g == NULL)
        return FERRY_ERR_INVALID;
    pthread_mutex_lock(&g->lock);
    if (mr == NULL || mr->magic != FERRY_IB_RMA_MR_MAGIC || ferry_ib_rma_region(g, mr->index) != mr) {
        pthread_mutex_unlock(&g->lock);
        FERRY_WARN("RMA deregMrSym(%p): not a live region of this RMA group (rank %d of %d); "
                   "pass a handle regMrSym returned for it, once", mhandle, g->rank, g->nranks);
        return FERRY_ERR_USAGE;
    }
    g->regs[mr->index] = NULL;
    pthread_mutex_unlock(&g->lock);
    if (mr->mr != NULL)
        ferry_ib_mr_put(g->port->hca, mr->mr);
    ferry_ib_magic_clear(&mr->magic);
    free(mr);
    return FERRY_OK;
}
