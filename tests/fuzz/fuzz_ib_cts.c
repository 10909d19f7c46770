/*
 * libFuzzer target: the ib sender's consumer of the clear-to-send entries
 * the receiver RDMA-writes into its FIFO, driven through the real isend and
 * test (ferry_ib_isend, ferry_px_ring_test over ferry_ib_poll) of a send
 * comm whose verbs objects are stubs: ibv_post_send and ibv_poll_cq are
 * verbs.h inlines that jump through the context's ops, so the stub's
 * post_send records the chains ferry posts (and checks their WRs) and its
 * poll_cq hands back their completions.
 *
 * The input is a sequence of steps over several FIFO slots and messages,
 * each an opcode byte and its operands:
 *   0 recv   a whole receive as ferry's receiver writes it, for the message
 *            isend waits for or the one after: n buffers (1..8), sizes,
 *            tags, entries stamped last
 *   1 poke   one field of one entry of either slot set to a value (raw, or
 *            the old one nudged): a receiver that lies or rewrites
 *   2 isend  a tag and size; a request joins the pending ones
 *   3 test   one pending request (its completions come in with the poll)
 * Whatever the peer writes, the sender must never crash (a receive of 8
 * turned into 1 posted 7 NULL requests), only return ncclSuccess,
 * InvalidUsage or RemoteError; once RemoteError, the comm stays failed;
 * every posted chain's WRs stay inside the buffers ferry registered.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_BUF      8192 /* The send buffer; receive buffers are FZ_BUF apart. */
#define FZ_RADDR    0x7f0000000000ULL
#define FZ_RKEY     0x1234U
#define FZ_LKEY     0x5678U
#define FZ_CTRL_KEY 0x9abcU
#define FZ_PENDING  64
#define FZ_STEPS    512
#define FZ_CQ       1024

typedef struct fz_in {
    const uint8_t *p;
    size_t         left;
} fz_in_t;

static uint8_t fz_u8(fz_in_t *in)
{
    if (in->left == 0)
        return 0;
    in->left--;
    return *in->p++;
}

static uint64_t fz_u64(fz_in_t *in)
{
    uint64_t v = 0;
    int i;

    for (i = 0; i < 8; i++)
        v |= (uint64_t)fz_u8(in) << (8 * i);
    return v;
}

/* The stub NIC: signalled WRs become completions, handed out by poll_cq. */
static struct {
    struct ibv_wc wc[FZ_CQ];
    int           n;
    uint8_t      *sbuf;
    uint8_t      *sizes_src;
    size_t        sizes_len;
} fz_nic;

static int fz_in_range(uint64_t addr, uint32_t len, const uint8_t *base, size_t base_len)
{
    uintptr_t b = (uintptr_t)base;

    return addr >= b && addr - b <= base_len && len <= base_len - (addr - b);
}

static int fz_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    int k = 0, j;

    (void)bad;
    for (; wr != NULL; wr = wr->next, k++) {
        if (k > FERRY_IB_MAX_RECVS)
            abort(); /* A chain is at most one WRITE per buffer and the sizes write. */
        if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
            abort();
        for (j = 0; j < wr->num_sge; j++) {
            const struct ibv_sge *sg = &wr->sg_list[j];

            if (sg->lkey == FZ_LKEY ? !fz_in_range(sg->addr, sg->length, fz_nic.sbuf, FZ_BUF)
                : sg->lkey == FZ_CTRL_KEY
                    ? !fz_in_range(sg->addr, sg->length, fz_nic.sizes_src, fz_nic.sizes_len)
                    : 1)
                abort(); /* A WR outside what ferry registered. */
        }
        if ((wr->send_flags & IBV_SEND_SIGNALED) && fz_nic.n < FZ_CQ) {
            struct ibv_wc *wc = &fz_nic.wc[fz_nic.n++];

            memset(wc, 0, sizeof(*wc));
            wc->wr_id = wr->wr_id;
            wc->status = IBV_WC_SUCCESS;
            wc->opcode = IBV_WC_RDMA_WRITE;
            wc->qp_num = qp->qp_num;
        }
    }
    return 0;
}

static int fz_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    int n = num < fz_nic.n ? num : fz_nic.n;

    (void)cq;
    memcpy(wc, fz_nic.wc, sizeof(*wc) * (size_t)n);
    memmove(fz_nic.wc, fz_nic.wc + n, sizeof(*wc) * (size_t)(fz_nic.n - n));
    fz_nic.n -= n;
    return n;
}

static void fz_quiet(int level, unsigned long flags, const char *file, int line,
                     const char *fmt, ...)
{
    (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

/* A receive as ferry's receiver writes it: message msg, n buffers, stamped last. */
static void fz_recv(ferry_ib_send_comm_t *sc, fz_in_t *in)
{
    uint64_t msg = sc->fifo_head + (fz_u8(in) & 1);
    ferry_ib_cts_t *e = sc->fifo[msg % FERRY_IB_FIFO_SLOTS];
    int n = 1 + fz_u8(in) % FERRY_IB_MAX_RECVS, i;
    uint8_t sizes = fz_u8(in);

    for (i = 0; i < n; i++) {
        e[i].addr = FZ_RADDR + (uint64_t)i * FZ_BUF;
        e[i].size = (sizes >> (i % 8)) & 1 ? FZ_BUF : 1024;
        memset(e[i].rkeys, 0, sizeof(e[i].rkeys));
        e[i].rkeys[0] = FZ_RKEY;
        e[i].nreqs = (uint32_t)n;
        e[i].tag = i % 3;
    }
    for (i = 0; i < n; i++)
        __atomic_store_n(&e[i].idx, msg + 1, __ATOMIC_RELEASE);
}

/* One field of one entry of the current or the next slot: a receiver that lies. */
static void fz_poke(ferry_ib_send_comm_t *sc, fz_in_t *in)
{
    uint64_t msg = sc->fifo_head + (fz_u8(in) & 1);
    ferry_ib_cts_t *e = &sc->fifo[msg % FERRY_IB_FIFO_SLOTS][fz_u8(in) % FERRY_IB_MAX_RECVS];
    uint8_t field = fz_u8(in), how = fz_u8(in);
    uint64_t raw = (how & 0x80) ? fz_u64(in) : 0;
    int64_t nudge = (int8_t)(how << 1) / 2;

    switch (field % 6) {
    case 0: e->nreqs = (how & 0x80) ? (uint32_t)raw : (uint32_t)((int64_t)e->nreqs + nudge); break;
    case 1: e->idx = (how & 0x80) ? raw : (uint64_t)((int64_t)e->idx + nudge); break;
    case 2: e->tag = (how & 0x80) ? (int32_t)raw : (int32_t)(e->tag + nudge); break;
    case 3: e->size = (how & 0x80) ? raw : (uint64_t)((int64_t)e->size + nudge * 512); break;
    case 4: e->addr = (how & 0x80) ? raw : (uint64_t)((int64_t)e->addr + nudge * 64); break;
    default: e->rkeys[field / 6 % 4] = (uint32_t)raw; break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t fz_sizes[4] = { 0, 1, 1024, FZ_BUF };
    struct ibv_context ctx;
    struct ibv_qp qp;
    struct ibv_cq cq;
    struct ibv_mr ctrl_mr, data_mr;
    ferry_ib_dev_t dev;
    ferry_ib_mh_t mh;
    ferry_ib_send_comm_t *sc;
    ferry_ib_cts_t *fifo;
    ferry_px_req_t *pending[FZ_PENDING];
    uint8_t *sbuf;
    fz_in_t in = { data, size };
    int npending = 0, failed = 0, steps, i;

    ferry_log_set(fz_quiet);
    sc = calloc(1, sizeof(*sc));
    fifo = aligned_alloc(64, sizeof(ferry_ib_cts_t) * FERRY_IB_MAX_RECVS * FERRY_IB_FIFO_SLOTS);
    sbuf = calloc(1, FZ_BUF);
    fz_nic.sizes_len = sizeof(ferry_ib_sizes_slot_t) * FERRY_IB_FIFO_SLOTS;
    fz_nic.sizes_src = calloc(1, fz_nic.sizes_len);
    if (sc == NULL || fifo == NULL || sbuf == NULL || fz_nic.sizes_src == NULL)
        abort();
    memset(fifo, 0, sizeof(ferry_ib_cts_t) * FERRY_IB_MAX_RECVS * FERRY_IB_FIFO_SLOTS);
    fz_nic.sbuf = sbuf;
    fz_nic.n = 0;
    memset(&ctx, 0, sizeof(ctx));
    ctx.ops.post_send = fz_post_send;
    ctx.ops.poll_cq = fz_poll_cq;
    memset(&qp, 0, sizeof(qp));
    qp.context = &ctx;
    qp.qp_num = 0x42;
    memset(&cq, 0, sizeof(cq));
    cq.context = &ctx;
    memset(&ctrl_mr, 0, sizeof(ctrl_mr));
    ctrl_mr.lkey = FZ_CTRL_KEY;
    memset(&data_mr, 0, sizeof(data_mr));
    data_mr.lkey = FZ_LKEY;
    memset(&dev, 0, sizeof(dev));
    strcpy(dev.name, "fuzz0:1");
    memset(&mh, 0, sizeof(mh));
    mh.magic = FERRY_IB_MH_MAGIC;
    mh.nmem = 1;
    mh.mr[0] = &data_mr;
    mh.base = (uintptr_t)sbuf;
    mh.size = FZ_BUF;
    mh.kind = FERRY_PX_SEND;

    if (ferry_px_ring_init(&sc->base.ring, FERRY_PX_SEND, "ib", "10.0.0.2:4242",
                           &ferry_ib_send_ring_ops) != FERRY_OK)
        abort();
    sc->base.magic = FERRY_IB_SEND_MAGIC;
    sc->base.conn.dev = &dev;
    sc->base.conn.nmem = 1;
    sc->base.conn.mem[0].dev = &dev;
    sc->base.conn.mem[0].cq = &cq;
    sc->base.conn.mem[0].ctrl_mr = &ctrl_mr;
    sc->base.conn.nqps = 1;
    sc->base.conn.qps[0] = &qp;
    sc->base.conn.nchains = 1;
    sc->base.conn.remote.nmembers = 1;
    sc->base.conn.remote.sizes_addr = 0x7e0000000000ULL;
    sc->base.conn.remote.ports[0].ctrl_rkey = FZ_CTRL_KEY;
    sc->base.conn.oob_fd = -1;
    sc->base.conn.check_ns = UINT64_MAX; /* No liveness look: there is no socket. */
    strcpy(sc->base.conn.peer, "10.0.0.2:4242");
    sc->fifo = (ferry_ib_cts_t (*)[FERRY_IB_MAX_RECVS])fifo;
    sc->sizes_src = (ferry_ib_sizes_slot_t *)fz_nic.sizes_src;

    for (steps = 0; steps < FZ_STEPS && in.left > 0; steps++) {
        uint8_t op = fz_u8(&in);
        void *req = NULL;
        ferry_status_t st;
        int done = 0, sizes[FERRY_PX_MAX_SUBS];

        switch (op % 4) {
        case 0:
            fz_recv(sc, &in);
            break;
        case 1:
            fz_poke(sc, &in);
            break;
        case 2: {
            int tag = fz_u8(&in) % 3;
            size_t len = fz_sizes[fz_u8(&in) % 4];

            st = ferry_ib_isend(sc, sbuf, len, tag, &mh, &req);
            if (st != FERRY_OK && st != FERRY_ERR_USAGE && st != FERRY_ERR_REMOTE)
                abort();
            if (failed && st != FERRY_ERR_REMOTE)
                abort(); /* A failed comm stays failed. */
            if (st == FERRY_ERR_REMOTE)
                failed = 1;
            if (st != FERRY_OK && req != NULL)
                abort();
            if (req != NULL && npending < FZ_PENDING)
                pending[npending++] = req;
            break;
        }
        default:
            if (npending == 0)
                break;
            i = fz_u8(&in) % npending;
            st = ferry_px_ring_test(&sc->base.ring, pending[i], &done, sizes);
            if (st != FERRY_OK || done)
                pending[i] = pending[--npending];
            break;
        }
        /* What the posting relies on: a slot's chains all have their requests. */
        for (i = 0; i < FERRY_IB_FIFO_SLOTS; i++) {
            const ferry_ib_send_slot_t *slot = &sc->slots[i];
            int r;

            if (slot->nreqs < 0 || slot->nreqs > FERRY_IB_MAX_RECVS ||
                slot->matched > FERRY_IB_MAX_RECVS)
                abort();
            if (slot->chains > 0)
                for (r = 0; r < slot->nreqs; r++)
                    if (slot->reqs[r] == NULL)
                        abort();
        }
    }
    ferry_px_ring_fini(&sc->base.ring);
    free(fz_nic.sizes_src);
    free(sbuf);
    free(fifo);
    free(sc);
    return 0;
}
