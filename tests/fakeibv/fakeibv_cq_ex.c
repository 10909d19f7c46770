/*
 * fakeibv extended CQs: ibv_create_cq_ex and the ibv_start_poll /
 * ibv_next_poll / ibv_end_poll / ibv_wc_read_* API, which verbs.h inlines
 * through function pointers in struct ibv_cq_ex.
 *
 * The CQ is the same object as a plain one (struct fakeibv_cq); the lock is
 * held from start_poll to end_poll, as rdma-core providers do unless the CQ
 * is single-threaded.
 */
#include <errno.h>
#include <string.h>

#include "fakeibv_internal.h"

/* Fields the fake can report; timestamps, VLAN, flow tag and TM are not. */
#define FAKEIBV_WC_EX_SUPPORTED ((uint64_t)IBV_WC_STANDARD_FLAGS)

static struct fakeibv_cq *fakeibv_cqx(struct ibv_cq_ex *cqx)
{
    return (struct fakeibv_cq *)cqx;
}

static void fakeibv_cqx_load(struct fakeibv_cq *cq)
{
    cq->cqx.status = cq->cur.status;
    cq->cqx.wr_id = cq->cur.wr_id;
}

static int fakeibv_start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
    struct fakeibv_cq *cq = fakeibv_cqx(cqx);

    if (attr != NULL && attr->comp_mask != 0)
        return EINVAL;
    if (fakeibv_cq_looks_empty(cq))
        return ENOENT;
    pthread_mutex_lock(&cq->lock);
    if (!fakeibv_cq_pop_locked(cq, &cq->cur)) {
        /* Empty: the caller must not call end_poll, so unlock here. */
        pthread_mutex_unlock(&cq->lock);
        return ENOENT;
    }
    fakeibv_cqx_load(cq);
    return 0;
}

static int fakeibv_next_poll(struct ibv_cq_ex *cqx)
{
    struct fakeibv_cq *cq = fakeibv_cqx(cqx);

    if (!fakeibv_cq_pop_locked(cq, &cq->cur))
        return ENOENT;
    fakeibv_cqx_load(cq);
    return 0;
}

static void fakeibv_end_poll(struct ibv_cq_ex *cqx)
{
    pthread_mutex_unlock(&fakeibv_cqx(cqx)->lock);
}

static enum ibv_wc_opcode fakeibv_read_opcode(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.opcode;
}

static uint32_t fakeibv_read_vendor_err(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.vendor_err;
}

static uint32_t fakeibv_read_byte_len(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.byte_len;
}

static __be32 fakeibv_read_imm_data(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.imm_data;
}

static uint32_t fakeibv_read_qp_num(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.qp_num;
}

static uint32_t fakeibv_read_src_qp(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.src_qp;
}

static unsigned int fakeibv_read_wc_flags(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.wc_flags;
}

static uint32_t fakeibv_read_slid(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.slid;
}

static uint8_t fakeibv_read_sl(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.sl;
}

static uint8_t fakeibv_read_dlid_path_bits(struct ibv_cq_ex *cqx)
{
    return fakeibv_cqx(cqx)->cur.dlid_path_bits;
}

struct ibv_cq_ex *fakeibv_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *a)
{
    struct fakeibv_cq *cq;
    int rc = fakeibv_fault_check(FAKEIBV_FAULT_CREATE_CQ);

    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    if ((a->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 ||
        ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
         (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0) ||
        a->cqe > (uint32_t)0x7fffffff) {
        errno = EINVAL;
        return NULL;
    }
    if (a->wc_flags & ~FAKEIBV_WC_EX_SUPPORTED) {
        errno = EOPNOTSUPP; /* e.g. completion timestamps: no clock to report. */
        return NULL;
    }
    cq = fakeibv_cq_create(c, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector);
    if (cq == NULL)
        return NULL;
    cq->cqx.comp_mask = 0;
    cq->cqx.start_poll = fakeibv_start_poll;
    cq->cqx.next_poll = fakeibv_next_poll;
    cq->cqx.end_poll = fakeibv_end_poll;
    cq->cqx.read_opcode = fakeibv_read_opcode;
    cq->cqx.read_vendor_err = fakeibv_read_vendor_err;
    cq->cqx.read_byte_len = fakeibv_read_byte_len;
    cq->cqx.read_imm_data = fakeibv_read_imm_data;
    cq->cqx.read_qp_num = fakeibv_read_qp_num;
    cq->cqx.read_src_qp = fakeibv_read_src_qp;
    cq->cqx.read_wc_flags = fakeibv_read_wc_flags;
    cq->cqx.read_slid = fakeibv_read_slid;
    cq->cqx.read_sl = fakeibv_read_sl;
    cq->cqx.read_dlid_path_bits = fakeibv_read_dlid_path_bits;
    return &cq->cqx;
}
