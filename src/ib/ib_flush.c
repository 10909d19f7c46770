/*
 * The GDR flush (NCCL's ncclIbIflush): after the NIC wrote a receive into
 * GPU memory, NCCL must not read it before every PCIe write has landed.
 * iflush makes that so in one of two ways (NCCL_FERRY_IB_FLUSH):
 *  - read (default, NCCL's): a 1-byte RDMA READ from the last non-empty GPU
 *    buffer into a registered host word, on an RC QP connected to itself;
 *    the READ completes only after the earlier writes into GPU memory;
 *  - cuda: cuFlushGPUDirectRDMAWrites on the calling thread's context.
 * Either way the flush is a request of the comm's ring (counted, tested,
 * stall-warned and dumped like a receive). NCCL_GDR_FLUSH_DISABLE=1, no
 * GPU buffer or no byte received: *request stays NULL (nothing to do).
 *
 * The flush QPs are the receive comm's own, as NCCL's IB has them, made on
 * the first READ flush: one per HCA of the device (a merged device may span
 * several, and each HCA orders only its own writes), each READ a part of the
 * flush's request. Their completions arrive on the comm's own CQs and are
 * polled by the comm's own thread (docs/decisions.md says why not one per
 * device).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_driver.h"
#include "core/log.h"
#include "ib/ib_comm.h"

#define FERRY_IB_FLUSH_WORD 4096 /* One page, so the host word shares its MR with nothing. */

static const char *ferry_ib_flush_type(const ferry_ib_mh_t *mh)
{
    return mh->type == FERRY_PTR_DMABUF ? "GPU memory (DMA-BUF)" : "GPU memory (CUDA pointer)";
}

/* INIT -> RTR (to its own QP number, LID and GID) -> RTS on dev. Returns 0 or an errno. */
static int ferry_ib_flush_connect(struct ibv_qp *qp, const ferry_ib_dev_t *dev,
                                  const char **step_p)
{
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    struct ibv_qp_attr attr;
    int err;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = (uint16_t)cfg->pkey;
    attr.port_num = (uint8_t)dev->port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    *step_p = "ibv_modify_qp(INIT)";
    err = ferry_ibv.modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                             IBV_QP_ACCESS_FLAGS);
    if (err != 0)
        return err;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = dev->port_attr.active_mtu;
    attr.dest_qp_num = qp->qp_num;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = dev->port_attr.lid;
    attr.ah_attr.port_num = (uint8_t)dev->port;
    if (dev->link_layer == IBV_LINK_LAYER_ETHERNET) {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid = dev->gid;
        attr.ah_attr.grh.sgid_index = (uint8_t)dev->gid_index;
        attr.ah_attr.grh.hop_limit = 255;
    }
    *step_p = "ibv_modify_qp(RTR, to itself)";
    err = ferry_ibv.modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                             IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err != 0)
        return err;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = (uint8_t)cfg->timeout;
    attr.retry_cnt = (uint8_t)cfg->retry_cnt;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    *step_p = "ibv_modify_qp(RTS)";
    return ferry_ibv.modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                              IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                              IBV_QP_MAX_QP_RD_ATOMIC);
}

/* The flush QP of member m and its registration of the host word; errors in err. */
static ferry_status_t ferry_ib_flush_qp_setup(ferry_ib_recv_comm_t *rc, int m,
                                              ferry_ib_flush_qp_t *fq, const char **step_p,
                                              char *err, size_t len)
{
    const ferry_ib_member_t *mem = &rc->base.conn.mem[m];
    struct ibv_qp_init_attr ia;
    ferry_status_t status;
    int rc_err;

    fq->mem = m;
    *step_p = "registering the host word";
    /* Strict ordering: the READ's byte is the last thing in flight. */
    status = ferry_ib_mr_get(mem->dev->hca, rc->flush.word, FERRY_IB_FLUSH_WORD,
                             IBV_ACCESS_LOCAL_WRITE, 1, &fq->word_mr, err, len);
    if (status != FERRY_OK)
        return status;
    *step_p = "ibv_create_qp (RC, 32 send WRs)";
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = mem->cq;
    ia.recv_cq = mem->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = FERRY_MAX_REQUESTS;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    fq->qp = ferry_ibv.create_qp(mem->dev->hca->pd, &ia);
    if (fq->qp == NULL) {
        snprintf(err, len, "%s on %s; check the device's max_qp (ibv_devinfo -v)",
                 strerror(errno ? errno : ENOMEM), mem->dev->name);
        return FERRY_ERR_IO;
    }
    rc_err = ferry_ib_flush_connect(fq->qp, mem->dev, step_p);
    if (rc_err != 0) {
        snprintf(err, len, "%s on QP 0x%x (lid %u, port %s)", strerror(rc_err > 0 ? rc_err : errno),
                 fq->qp->qp_num, (unsigned)mem->dev->port_attr.lid, mem->dev->name);
        return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

/* The first n flush QPs and their registrations of the host word. */
static void ferry_ib_flush_qps_free(ferry_ib_recv_comm_t *rc, int n)
{
    ferry_ib_flush_t *f = &rc->flush;
    int k;

    for (k = 0; k < n; k++) {
        ferry_ib_flush_qp_t *fq = &f->qps[k];

        if (fq->qp != NULL && ferry_ibv.destroy_qp(fq->qp) != 0)
            FERRY_WARN("ib recv comm from %s on %s: ibv_destroy_qp(0x%x) of the GDR flush QP "
                       "failed: %s", rc->base.conn.peer, ferry_ib_comm_where(&rc->base),
                       fq->qp->qp_num, strerror(errno));
        fq->qp = NULL;
        if (fq->word_mr != NULL)
            ferry_ib_mr_put(rc->base.conn.mem[fq->mem].dev->hca, fq->word_mr);
        fq->word_mr = NULL;
    }
}

/* The flush QPs (one per HCA) and host word, made once; on failure nothing is left made. */
static ferry_status_t ferry_ib_flush_setup(ferry_ib_recv_comm_t *rc)
{
    ferry_ib_conn_t *conn = &rc->base.conn;
    ferry_ib_flush_t *f = &rc->flush;
    const char *step = "allocating the host word";
    char err[1024] = "out of memory";
    ferry_status_t status = FERRY_ERR_NO_MEMORY;
    int m, k, n = 0;

    if (posix_memalign(&f->word, FERRY_IB_FLUSH_WORD, FERRY_IB_FLUSH_WORD) != 0) {
        f->word = NULL;
        goto err_warn;
    }
    memset(f->word, 0, FERRY_IB_FLUSH_WORD);
    for (m = 0; m < conn->nmem; m++) {
        for (k = 0; k < n && conn->mem[f->qps[k].mem].dev->hca != conn->mem[m].dev->hca; k++)
            ;
        if (k < n)
            continue; /* One READ per HCA: this one has its QP already. */
        status = ferry_ib_flush_qp_setup(rc, m, &f->qps[n++], &step, err, sizeof(err));
        if (status != FERRY_OK)
            goto err_undo;
    }
    /* Release: the dump's thread reads qps[] once it sees nqps (ferry_ib_flush_words). */
    __atomic_store_n(&f->nqps, n, __ATOMIC_RELEASE);
    for (k = 0; k < n; k++)
        FERRY_INFO(FERRY_LOG_NET, "ib recv comm #%u from %s on %s: GDR flush QP 0x%x on %s "
                   "connected to itself, host word %p", rc->base.ring.serial, conn->peer,
                   ferry_ib_comm_where(&rc->base), f->qps[k].qp->qp_num,
                   conn->mem[f->qps[k].mem].dev->name, f->word);
    return FERRY_OK;

err_undo:
    ferry_ib_flush_qps_free(rc, n); /* Never published in nqps: the dump does not see them. */
err_warn:
    FERRY_WARN("ib recv comm #%u from %s on %s: setting up the GDR flush failed while %s: %s; "
               "GPU receives cannot be flushed: NCCL_FERRY_IB_FLUSH=cuda flushes without a QP, "
               "NCCL_GDR_FLUSH_DISABLE=1 not at all (only where the NIC's writes are ordered)",
               rc->base.ring.serial, conn->peer, ferry_ib_comm_where(&rc->base), step, err);
    free(f->word);
    f->word = NULL;
    return status;
}

void ferry_ib_flush_destroy(ferry_ib_recv_comm_t *rc)
{
    ferry_ib_flush_t *f = &rc->flush;

    ferry_ib_flush_qps_free(rc, f->nqps);
    f->nqps = 0;
    free(f->word);
    f->word = NULL;
}

/* The flush's ring request; NULL (after a WARN) when all 32 slots are busy. */
static ferry_px_req_t *ferry_ib_flush_post_req(ferry_ib_recv_comm_t *rc, void *buf, size_t size,
                                               void *mh, uint64_t word, int nparts)
{
    ferry_px_sub_t sub;
    ferry_px_req_t *req;

    memset(&sub, 0, sizeof(sub));
    sub.buf = buf;
    sub.capacity = size;
    sub.mem = mh;
    req = ferry_px_ring_post(&rc->base.ring, 1, &sub, 0, (uint32_t)nparts, 0);
    if (req == NULL) {
        /* NULL would tell NCCL "nothing to flush": say it instead of corrupting data. */
        FERRY_WARN("iflush on recv comm #%u from %s (device %s): all %d requests of the comm "
                   "are in flight, none left for the flush of %p; NCCL keeps fewer in flight, "
                   "so this is a ferry or caller bug", rc->base.ring.serial, rc->base.conn.peer,
                   ferry_ib_comm_where(&rc->base), FERRY_MAX_REQUESTS, buf);
        return NULL;
    }
    req->backend_word = FERRY_IB_WORD_FLUSH | word;
    return req;
}

/*
 * The CUDA driver's flush needs a current context: NCCL's thread has one,
 * else the primary context of the buffer's device is made current.
 */
static ferry_cu_result_t ferry_ib_flush_cuda_ctx(void *buf, const char **call_p)
{
    ferry_cu_ctx_t ctx = NULL;
    ferry_cu_device_t dev;
    ferry_cu_result_t r;
    int ordinal = 0;

    *call_p = "cuCtxGetCurrent";
    r = ferry_cu.ctx_get_current(&ctx);
    if (r != 0 || ctx != NULL)
        return r;
    *call_p = "cuPointerGetAttribute(DEVICE_ORDINAL)";
    r = ferry_cu.pointer_attr(&ordinal, FERRY_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                              (ferry_cu_ptr_t)(uintptr_t)buf);
    if (r == 0) {
        *call_p = "cuDeviceGet";
        r = ferry_cu.device_get(&dev, ordinal);
    }
    if (r == 0 && ferry_cu.primary_ctx_retain != NULL) {
        *call_p = "cuDevicePrimaryCtxRetain";
        r = ferry_cu.primary_ctx_retain(&ctx, dev);
    }
    if (r == 0) {
        *call_p = "cuCtxSetCurrent";
        r = ferry_cu.ctx_set_current(ctx);
    }
    return r;
}

/*
 * The CUDA driver's flush. Under NCCL_FERRY_IB_FLUSH=auto a driver that
 * cannot do it is no error: the comm turns to the READ (one INFO line) and
 * FERRY_ERR_UNSUPPORTED tells iflush to flush this one that way.
 */
static ferry_status_t ferry_ib_flush_cuda(ferry_ib_recv_comm_t *rc, void *buf, size_t size,
                                          const ferry_ib_mh_t *mh, void **request_p)
{
    const char *call = "cuFlushGPUDirectRDMAWrites", *why = NULL;
    int automatic = ferry_ib_state.cfg.flush == FERRY_IB_FLUSH_AUTO;
    uint64_t t0 = ferry_px_now_ns(), ns;
    ferry_px_req_t *req;
    ferry_cu_result_t r = 0;
    char words[320];

    if (!ferry_cu_load())
        why = ferry_cu_why_off();
    else if (ferry_cu.flush_gpudirect_rdma_writes == NULL)
        why = "libcuda.so.1 has no cuFlushGPUDirectRDMAWrites (a CUDA 11.3+ driver has it)";
    if (why != NULL && automatic) {
        ferry_ib_flush_cuda_unusable(rc, why);
        return FERRY_ERR_UNSUPPORTED;
    }
    if (why != NULL) {
        FERRY_WARN("iflush on recv comm #%u from %s (device %s) of %p (%zu bytes, %s): "
                   "NCCL_FERRY_IB_FLUSH=cuda cannot flush: %s; use NCCL_FERRY_IB_FLUSH=read",
                   rc->base.ring.serial, rc->base.conn.peer, ferry_ib_comm_where(&rc->base),
                   buf, size, ferry_ib_flush_type(mh), why);
        return FERRY_ERR_UNSUPPORTED;
    }
    r = ferry_ib_flush_cuda_ctx(buf, &call);
    if (r == 0) {
        call = "cuFlushGPUDirectRDMAWrites";
        r = ferry_cu.flush_gpudirect_rdma_writes(
            FERRY_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
            FERRY_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
    }
    if (r != 0) {
        ferry_cu_err(words, sizeof(words), call, r);
        if (automatic) {
            ferry_ib_flush_cuda_unusable(rc, words);
            return FERRY_ERR_UNSUPPORTED;
        }
        FERRY_WARN("iflush on recv comm #%u from %s (device %s) of %p (%zu bytes, %s) failed: "
                   "%s; check the GPU (nvidia-smi, Xid errors in dmesg), or flush with "
                   "NCCL_FERRY_IB_FLUSH=read", rc->base.ring.serial, rc->base.conn.peer,
                   ferry_ib_comm_where(&rc->base), buf, size, ferry_ib_flush_type(mh), words);
        return FERRY_ERR_IO;
    }
    req = ferry_ib_flush_post_req(rc, buf, size, (void *)mh, FERRY_IB_WORD_CUDA | rc->flush.cuda,
                                  1);
    if (req == NULL)
        return FERRY_ERR_INVALID;
    FERRY_IB_DIAG_ADD(rc->flush.cuda, 1);
    /* The driver call returned after the flush: the request is done at once. */
    ferry_px_req_parts_start(req, 1);
    ferry_px_req_parts_finish(req, 1, 0);
    ns = atomic_load_explicit(&req->done_ns, memory_order_relaxed) - t0;
    FERRY_IB_DIAG_ADD(rc->flush.cuda_ns, ns);
    if (ns > rc->flush.cuda_max_ns)
        FERRY_IB_DIAG_SET(rc->flush.cuda_max_ns, ns);
    ferry_ib_flush_timed(rc, FERRY_IB_FLUSH_CUDA, ns);
    *request_p = req;
    return FERRY_OK;
}

static ferry_status_t ferry_ib_flush_read(ferry_ib_recv_comm_t *rc, void *buf, size_t size,
                                          const ferry_ib_mh_t *mh, void **request_p)
{
    ferry_ib_flush_t *f = &rc->flush;
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_sge sge;
    ferry_px_req_t *req;
    ferry_status_t status;
    int err, k;

    if (f->nqps == 0) {
        status = ferry_ib_flush_setup(rc);
        if (status != FERRY_OK)
            return status;
    }
    req = ferry_ib_flush_post_req(rc, buf, size, (void *)mh, f->reads, f->nqps);
    if (req == NULL)
        return FERRY_ERR_INVALID;
    *request_p = req; /* A failed one reports its error through test(). */
    for (k = 0; k < f->nqps; k++) {
        const ferry_ib_flush_qp_t *fq = &f->qps[k];

        memset(&wr, 0, sizeof(wr));
        sge.addr = (uint64_t)(uintptr_t)f->word;
        sge.length = 1;
        sge.lkey = fq->word_mr->lkey;
        wr.wr_id = FERRY_IB_WR_ID(FERRY_IB_WR_FLUSH, k, (uint32_t)(req - rc->base.ring.reqs));
        wr.opcode = IBV_WR_RDMA_READ;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)buf;
        wr.wr.rdma.rkey = mh->mr[fq->mem]->rkey;
        err = ibv_post_send(fq->qp, &wr, &bad);
        if (err != 0) {
            FERRY_WARN("iflush on recv comm #%u from %s (device %s): ibv_post_send of the "
                       "1-byte RDMA READ from %p (%zu bytes, %s) on flush QP 0x%x (%s) failed: "
                       "%s; the QP is probably in the error state after an earlier failure",
                       rc->base.ring.serial, rc->base.conn.peer, ferry_ib_comm_where(&rc->base),
                       buf, size, ferry_ib_flush_type(mh), fq->qp->qp_num,
                       rc->base.conn.mem[fq->mem].dev->name, strerror(err));
            ferry_px_req_fail(req, FERRY_ERR_IO);
            return FERRY_OK;
        }
        FERRY_IB_DIAG_ADD(f->reads, 1);
    }
    ferry_px_req_parts_start(req, (uint32_t)f->nqps);
    return FERRY_OK;
}

ferry_status_t ferry_ib_iflush(ferry_ib_recv_comm_t *rc, int n, void **data, int *sizes,
                               void **mhandles, void **request_p)
{
    const ferry_ib_mh_t *mh = NULL;
    int i, failed, last = -1;

    *request_p = NULL;
    if (ferry_ib_state.cfg.gdr_flush_disable)
        return FERRY_OK;
    /* The last non-empty GPU buffer: its READ orders behind every write of the receive. */
    for (i = n - 1; i >= 0 && last < 0; i--) {
        const ferry_ib_mh_t *m = mhandles != NULL ? mhandles[i] : NULL;

        if (sizes[i] > 0 && m != NULL && m->type != FERRY_PTR_HOST && m->mr[0] != NULL) {
            last = i;
            mh = m;
        }
    }
    if (last < 0)
        return FERRY_OK; /* Nothing landed in GPU memory. */
    failed = atomic_load_explicit(&rc->base.ring.failed, memory_order_acquire);
    if (failed != 0)
        return (ferry_status_t)failed;
    if (ferry_ib_flush_method(rc) == FERRY_IB_FLUSH_CUDA) {
        ferry_status_t status = ferry_ib_flush_cuda(rc, data[last], (size_t)sizes[last], mh,
                                                    request_p);

        if (status != FERRY_ERR_UNSUPPORTED || ferry_ib_state.cfg.flush != FERRY_IB_FLUSH_AUTO)
            return status;
    }
    return ferry_ib_flush_read(rc, data[last], (size_t)sizes[last], mh, request_p);
}

/* The request a flush completion names, if it is a live READ flush; else NULL. */
static ferry_px_req_t *ferry_ib_flush_req(ferry_ib_recv_comm_t *rc, uint64_t wr_id)
{
    uint32_t idx = FERRY_IB_WR_SEQ(wr_id);
    ferry_px_req_t *req;

    if (idx >= FERRY_MAX_REQUESTS)
        return NULL;
    req = &rc->base.ring.reqs[idx];
    if ((req->backend_word & (FERRY_IB_WORD_FLUSH | FERRY_IB_WORD_CUDA)) != FERRY_IB_WORD_FLUSH ||
        atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_ACTIVE)
        return NULL;
    return req;
}

void ferry_ib_flush_completion(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc)
{
    ferry_px_req_t *req = ferry_ib_flush_req(rc, wc->wr_id);
    uint32_t idx = FERRY_IB_WR_SEQ(wc->wr_id);

    /* A READ of a flush that failed while its other READs were being posted: already told. */
    if (req == NULL && idx < FERRY_MAX_REQUESTS &&
        atomic_load_explicit(&rc->base.ring.reqs[idx].state, memory_order_acquire) ==
            FERRY_PX_REQ_ERROR)
        return;
    if (req == NULL || wc->opcode != IBV_WC_RDMA_READ) {
        FERRY_WARN("ib recv comm from %s: unexpected GDR flush completion wr_id 0x%llx opcode "
                   "%d on QP 0x%x; a ferry bug", rc->base.conn.peer,
                   (unsigned long long)wc->wr_id, (int)wc->opcode, wc->qp_num);
        ferry_px_ring_fail(&rc->base.ring, FERRY_ERR_INVALID, "unexpected flush completion 0x%llx",
                           (unsigned long long)wc->wr_id);
        return;
    }
    FERRY_IB_DIAG_ADD(rc->flush.reads_done, 1);
    ferry_px_req_parts_finish(req, 1, 0);
    if (atomic_load_explicit(&req->state, memory_order_acquire) == FERRY_PX_REQ_DONE) {
        /* The flush's whole cost as this side sees it (the engine stamped done_ns). */
        uint64_t wait = atomic_load_explicit(&req->done_ns, memory_order_relaxed) - req->post_ns;

        FERRY_IB_DIAG_ADD(rc->flush.done, 1);
        FERRY_IB_DIAG_ADD(rc->flush.wait_ns, wait);
        if (wait > rc->flush.wait_max_ns)
            FERRY_IB_DIAG_SET(rc->flush.wait_max_ns, wait);
        ferry_ib_flush_timed(rc, FERRY_IB_FLUSH_READ, wait);
    }
}

void ferry_ib_flush_wc_error(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc)
{
    const ferry_px_req_t *req = ferry_ib_flush_req(rc, wc->wr_id);
    const ferry_ib_mh_t *mh = req != NULL ? req->sub[0].mem : NULL;
    char desc[192];

    if (atomic_load(&rc->base.ring.failed) != 0)
        return; /* The comm failed already (one WARN said why); later flushes only follow. */
    ferry_px_ring_describe(&rc->base.ring, desc, sizeof(desc));
    FERRY_WARN("%s: the GDR flush (1-byte RDMA READ from %p, %zu bytes, %s, into host word %p "
               "on flush QP 0x%x, device %s) failed: %s (%d), vendor_err 0x%x; the NIC cannot "
               "read that GPU memory: check that nvidia-peermem is loaded (or NCCL_DMABUF_ENABLE=1 "
               "with a dma-buf capable kernel), that the buffer is still registered, and that "
               "the container sees /dev/infiniband; NCCL_FERRY_IB_FLUSH=cuda flushes without RDMA",
               desc, req != NULL ? req->sub[0].buf : NULL,
               req != NULL ? req->sub[0].capacity : (size_t)0,
               mh != NULL ? ferry_ib_flush_type(mh) : "GPU memory", rc->flush.word, wc->qp_num,
               ferry_ib_comm_where(&rc->base), ferry_ibv.wc_status_str(wc->status),
               (int)wc->status, wc->vendor_err);
    ferry_px_ring_fail(&rc->base.ring, FERRY_ERR_IO, "GDR flush READ failed: %s on QP 0x%x",
                       ferry_ibv.wc_status_str(wc->status), wc->qp_num);
}

void ferry_ib_flush_words(const ferry_ib_recv_comm_t *rc, char *buf, size_t len)
{
    const ferry_ib_flush_t *f = &rc->flush;
    /* Acquire: pairs with ferry_ib_flush_setup's store, so qps[] is filled in. */
    int nqps = __atomic_load_n(&f->nqps, __ATOMIC_ACQUIRE);
    uint64_t done = FERRY_IB_DIAG_GET(f->done), cuda = FERRY_IB_DIAG_GET(f->cuda);
    size_t off = 0;

    if (len > 0)
        buf[0] = '\0';
    if (nqps > 0)
        off += (size_t)snprintf(buf, len, "; GDR flush QP 0x%x (to itself)%s: READs posted "
                                "%llu, completed %llu; %llu flushes done in %.1f us on average "
                                "from iflush to the last READ's completion polled (longest "
                                "%.1f us)", f->qps[0].qp->qp_num,
                                nqps > 1 ? " and one per other HCA" : "",
                                (unsigned long long)FERRY_IB_DIAG_GET(f->reads),
                                (unsigned long long)FERRY_IB_DIAG_GET(f->reads_done),
                                (unsigned long long)done,
                                done ? (double)FERRY_IB_DIAG_GET(f->wait_ns) / (double)done / 1e3
                                     : 0.0,
                                (double)FERRY_IB_DIAG_GET(f->wait_max_ns) / 1e3);
    if (cuda > 0 && off < len)
        off += (size_t)snprintf(buf + off, len - off, "; GDR flushes by "
                                "cuFlushGPUDirectRDMAWrites %llu, %.1f us on average (longest "
                                "%.1f us)", (unsigned long long)cuda,
                                (double)FERRY_IB_DIAG_GET(f->cuda_ns) / (double)cuda / 1e3,
                                (double)FERRY_IB_DIAG_GET(f->cuda_max_ns) / 1e3);
    if (ferry_ib_state.cfg.flush != FERRY_IB_FLUSH_AUTO || (nqps == 0 && cuda == 0) || off >= len)
        return;
    /* Acquire: pairs with ferry_ib_flush_decide, so method and why are final. */
    if (__atomic_load_n(&f->choice.decided, __ATOMIC_ACQUIRE))
        snprintf(buf + off, len - off, "; flush method %s (%s)%s",
                 __atomic_load_n(&f->choice.method, __ATOMIC_RELAXED) == FERRY_IB_FLUSH_CUDA
                     ? "cuda" : "read", f->choice.why,
                 __atomic_load_n(&f->choice.cuda_off, __ATOMIC_RELAXED) &&
                         f->choice.median_ns[1] > 0
                     ? "; then the CUDA flush failed and the READ took over (INFO line)" : "");
    else
        snprintf(buf + off, len - off, "; flush method being chosen (NCCL_FERRY_IB_FLUSH=auto: "
                 "the first %d flushes take turns between READ and cuda)",
                 2 * FERRY_IB_FLUSH_TRIAL);
}

void ferry_ib_flush_stall_why(const ferry_ib_recv_comm_t *rc, const ferry_px_req_t *req,
                              char *buf, size_t len)
{
    snprintf(buf, len, "GDR flush %llu: its 1-byte RDMA READ from %p on flush QP 0x%x (connected "
             "to itself) has not completed: the HCA cannot finish reading GPU memory (is "
             "nvidia-peermem loaded? ibv_devinfo, port %s); NCCL_FERRY_IB_FLUSH=cuda flushes "
             "without RDMA", (unsigned long long)(req->backend_word & 0xffffffffULL),
             req->sub[0].buf, rc->flush.nqps > 0 ? rc->flush.qps[0].qp->qp_num : 0,
             ferry_ib_comm_where(&rc->base));
}

void ferry_ib_flush_close_info(const ferry_ib_recv_comm_t *rc)
{
    const ferry_ib_flush_t *f = &rc->flush;
    char words[1024];

    if (f->done == 0 && f->cuda == 0)
        return;
    ferry_ib_flush_words(rc, words, sizeof(words));
    FERRY_INFO(FERRY_LOG_NET, "ib recv comm #%u from %s on %s closed%s", rc->base.ring.serial,
               rc->base.conn.peer, ferry_ib_comm_where(&rc->base), words);
}
