/*
 * integ_ib_gpu: the ib backend on GPU memory, through ncclNetPlugin_v11 in
 * one process, on fakeibv in GPU mode with tests/fakecuda as the one
 * libcuda.so.1 of the process (ferry and fakeibv both load it). fakecuda's
 * device memory is PROT_NONE to the CPU: ferry touching a GPU buffer
 * directly crashes the test; the bytes move only through fakeibv's CUDA
 * copies, and the test reads them back through the driver.
 *
 *   integ_ib_gpu [--plugin PATH] --mode gdr|cudaflush|autoflush|noflush|faults|stall|nodriver|peermem
 *
 * This file holds the modes and main(); autoflush is in
 * integ_ib_gpu_flush_auto.c, and the helpers every mode shares (buffers,
 * the comm pair, one checked and flushed message) in integ_ib_gpu_env.c,
 * declared in integ_ib_gpu.h.
 *
 * gdr:       (NCCL_FERRY_IB_GDR=1, NCCL_FERRY_IB_FLUSH=read) ptrSupport HOST|CUDA|DMABUF and the init line;
 *            GPU->GPU, GPU->host and host->GPU messages 0 B..8 MiB byte for
 *            byte (poison after each kept); after every non-empty GPU receive
 *            iflush returns a request that completes, seen as exactly one
 *            1-byte RDMA READ on the self-connected flush QP (fakeibv_qp_stats);
 *            iflush of host or empty receives returns NULL; grouped receives
 *            into GPU buffers, flushed once; a DMA-BUF registration (fd closed
 *            at once, as NCCL does) receives and flushes; the cache shares one
 *            MR between a CUDA and a DMA-BUF registration of one range;
 *            deregMr after the comms closed.
 * cudaflush: (NCCL_FERRY_IB_FLUSH=cuda) every flush is one
 *            cuFlushGPUDirectRDMAWrites (fakecuda counts them), no flush QP,
 *            also from a thread without a current context; a failing one:
 *            ncclSystemError and a WARN with the CUDA error in words.
 * autoflush: (NCCL_FERRY_IB_FLUSH=auto, FIT_AUTO_EXPECT=cuda|read|cudafail) the
 *            first 18 flushes take turns (9 READs, 9 CUDA flushes), then the
 *            method with the lower median alone, named in an INFO line with both
 *            medians; a failing CUDA flush turns the comm to READs, no WARN.
 * noflush:   (NCCL_GDR_FLUSH_DISABLE=1) iflush returns NULL, nothing flushed.
 * faults:    (NCCL_FERRY_IB_GDR=1) ibv_reg_mr and ibv_reg_dmabuf_mr failing on
 *            GPU memory: ncclSystemError and a WARN naming the buffer, type,
 *            device, errno and what to check; the flush QP losing its link:
 *            the flush's test() -> ncclSystemError with the flush's WARN.
 * stall:     (NCCL_FERRY_STALL_WARN_S=1, fakeibv's retry timer 2.5 s) a flush READ
 *            on a dropped flush QP: the stall WARN names the GDR flush, its
 *            buffer and the flush QP with its READ counts, before the error.
 * nodriver:  no libcuda.so.1, no peer memory: ptrSupport HOST, the init line
 *            says why, regMr(CUDA) is refused saying what to load, host
 *            messages still move. Skipped (77) where a real driver exists.
 * peermem:   NCCL_FERRY_IB_SYSFS_ROOT holding module/nvidia_peermem/version
 *            (made here): CUDA on, named in the init line; FAKECUDA_DMABUF=0:
 *            no DMABUF bit; NCCL_FERRY_IB_FORCE_FLUSH=1 reaches forceFlush.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakeibv.h"
#include "ib/ib_comm.h"
#include "integ_ib_gpu.h"

/* Three GPU buffers in one grouped receive (one empty), flushed by one READ. */
static void gg_grouped(gg_env_t *e, gg_buf_t *src, gg_buf_t *dst, uint32_t qpn)
{
    static unsigned char pattern[70000], back[70000 + GG_EXTRA];
    size_t caps[3] = {1000 + 64, 64, 70000 + 64}, sizes[3] = {1000, 0, 70000}, off[3];
    void *data[3], *mhs[3] = {dst->mh, dst->mh, dst->mh}, *rreq = NULL, *sreq[3] = {0};
    int tags[3] = {11, 12, 13}, got[3] = {-1, -1, -1}, isz[3], k, made;
    uint64_t reads0 = gg_reads(qpn, NULL);
    fit_bound_t b;

    for (k = 0; k < 3; k++) {
        off[k] = (size_t)k * (1 << 20);
        data[k] = gg_addr(dst, off[k]);
    }
    FIT_NCCL(e->plugin.net->irecv(e->recv_comm, 3, data, caps, tags, mhs, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "grouped irecv returned no request");
    for (k = 2; k >= 0; k--) { /* Another order than the buffers: tags pick them. */
        fit_fill(pattern, sizes[k], 900 + (uint64_t)k);
        gg_write(src, off[k], pattern, sizes[k]);
        fit_bound_init(&b, "grouped isend", 10.0, 100000000L);
        while (sreq[k] == NULL) {
            FIT_NCCL(e->plugin.net->isend(e->send_comm, gg_addr(src, off[k]), sizes[k], tags[k],
                                          src->mh, NULL, &sreq[k]));
            if (sreq[k] == NULL)
                fit_bound_step(&b);
        }
    }
    for (k = 0; k < 3; k++)
        FIT_NCCL(gg_wait(e, sreq[k], NULL, "grouped send test"));
    FIT_NCCL(gg_wait(e, rreq, got, "grouped recv test"));
    for (k = 0; k < 3; k++) {
        size_t bad;

        FIT_CHECK(got[k] == (int)sizes[k], "grouped buffer %d: %d bytes, sent %zu", k, got[k],
                  sizes[k]);
        gg_read(dst, off[k], back, sizes[k]);
        FIT_CHECK(fit_verify(back, sizes[k], 900 + (uint64_t)k, &bad) == 0,
                  "grouped buffer %d: byte %zu differs", k, bad);
        isz[k] = got[k];
    }
    FIT_NCCL(gg_flush(e, 3, data, isz, mhs, &made));
    FIT_CHECK(made && gg_reads(qpn, NULL) == reads0 + 1, "grouped flush: %s, READs %llu -> %llu",
              made ? "a request" : "no request", (unsigned long long)reads0,
              (unsigned long long)gg_reads(qpn, NULL));
}

static void gg_mode_gdr(const char *path)
{
    size_t sizes[32];
    gg_env_t e;
    gg_buf_t sg, sh, rg, rh, rd, rg2;
    ferry_ib_mh_t *a, *d;
    int n = gg_sizes(sizes), i, fd = -1;
    uint32_t qpn;
    char line[128], line2[64];

    gg_open(&e, path, 1);
    gg_check_props(&e, NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 0,
                   getenv("FIT_MERGE") != NULL
                       ? "GPUDirect RDMA on (NCCL_FERRY_IB_GDR=1); DMA-BUF on (fakeib0,fakeib1); "
                         "flush read"
                       : "GPUDirect RDMA on (NCCL_FERRY_IB_GDR=1); DMA-BUF on (fakeib0); flush read");
    gg_buf_open(&e.plugin, &sg, e.send_comm, 1, GG_SLOT);
    gg_buf_open(&e.plugin, &sh, e.send_comm, 0, GG_SLOT);
    gg_buf_open(&e.plugin, &rg, e.recv_comm, 1, GG_SLOT);
    gg_buf_open(&e.plugin, &rh, e.recv_comm, 0, GG_SLOT);
    FIT_CHECK(gg_flush_qpn() == 0, "a flush QP exists before the first flush");
    for (i = 0; i < n; i++) {
        gg_one(&e, &sg, &rg, sizes[i], 100 + (uint64_t)i, "GPU->GPU");
        gg_one(&e, &sg, &rh, sizes[i], 200 + (uint64_t)i, "GPU->host");
        gg_one(&e, &sh, &rg, sizes[i], 300 + (uint64_t)i, "host->GPU");
    }
    qpn = gg_flush_qpn();
    FIT_CHECK(qpn != 0 && gg_reads(qpn, NULL) == (uint64_t)(2 * (n - 1)),
              "flush QP 0x%x: %llu READs after %d non-empty GPU receives", qpn,
              (unsigned long long)gg_reads(qpn, NULL), 2 * (n - 1));
    fit_pass("GPU->GPU, GPU->host, host->GPU, %d sizes 0..8 MiB byte for byte; one 1-byte "
             "READ on flush QP 0x%x per non-empty GPU receive, none otherwise", n, qpn);
    gg_grouped(&e, &sh, &rg, qpn);
    fit_pass("grouped receive into 3 GPU buffers (one empty), one flush READ");

    /* DMA-BUF: the fd is closed right after regMrDmaBuf, as NCCL does. */
    FIT_CHECK(gg_cu.dmabuf_fd(&fd, rg.dev, GG_SLOT, 1, 0) == 0 && fd >= 0,
              "cuMemGetHandleForAddressRange");
    rd = rg;
    rd.mh = NULL;
    FIT_NCCL(e.plugin.net->regMrDmaBuf(e.recv_comm, gg_addr(&rg, 0), GG_SLOT, NCCL_PTR_CUDA, 0,
                                       fd, &rd.mh));
    close(fd);
    a = rg.mh;
    d = rd.mh;
    FIT_CHECK(d != NULL && d->type == NCCL_PTR_DMABUF && d->mr[0] == a->mr[0],
              "the DMA-BUF registration of the CUDA-registered range shares its MR (%p vs %p)",
              d != NULL ? (void *)d->mr[0] : NULL, (void *)a->mr[0]);
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rg.mh)); /* The DMA-BUF handle keeps the MR. */
    rg.mh = rd.mh;
    gg_one(&e, &sh, &rg, (1 << 20) + 5, 400, "host->GPU (DMA-BUF)");
    gg_one(&e, &sg, &rg, 4097, 401, "GPU->GPU (DMA-BUF)");
    /* A second CUDA registration of a range inside the first hits the cache. */
    rg2 = rg;
    FIT_NCCL(e.plugin.net->regMr(e.recv_comm, gg_addr(&rg, 8192), 65536, NCCL_PTR_CUDA, &rg2.mh));
    FIT_CHECK(((ferry_ib_mh_t *)rg2.mh)->mr[0] == d->mr[0], "a CUDA range inside a registered one got "
              "an MR of its own");
    fit_pass("regMrDmaBuf (fd closed at once) receives and flushes; one MR per range in the "
             "cache across CUDA and DMA-BUF registrations");

    /* Deregistration after the comms closed. */
    gg_close_comms(&e);
    /* The loop's non-empty GPU receives, the grouped one and the two into the DMA-BUF range. */
    snprintf(line, sizeof(line), "closed; GDR flush QP 0x%x (to itself)", qpn);
    snprintf(line2, sizeof(line2), "; %d flushes done in ", 2 * (n - 1) + 3);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, line, line2, "us on average from iflush to the "
                           "last READ's completion polled (longest", NULL, 0) >= 0,
              "closeRecv did not log the flushes' count and time (%s)", line);
    fit_pass("closeRecv logs how many flushes the comm made and how long they took");
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rg2.mh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rg.mh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rh.mh));
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, sg.mh));
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, sh.mh));
    gg_buf_free(&sg);
    gg_buf_free(&sh);
    gg_buf_free(&rg);
    gg_buf_free(&rh);
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_log_check_clean("gdr");
    fit_plugin_close(&e.plugin);
    fit_pass("deregMr after closeSend/closeRecv; no unexpected WARN");
}

static void gg_mode_cudaflush(const char *path)
{
    gg_env_t e;
    gg_buf_t sg, rg;
    void *rdata;
    int i, made, isize = 4096;
    long f0;
    ncclResult_t rc;
    char needle[128];

    gg_reads_flush = 0;
    gg_open(&e, path, 1);
    gg_check_props(&e, NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 0,
                   "flush cuda (cuFlushGPUDirectRDMAWrites)");
    gg_buf_open(&e.plugin, &sg, e.send_comm, 1, GG_SLOT);
    gg_buf_open(&e.plugin, &rg, e.recv_comm, 1, GG_SLOT);
    f0 = gg_cu.flushes();
    for (i = 0; i < 6; i++)
        gg_one(&e, &sg, &rg, (size_t)1 << (3 * i), 500 + (uint64_t)i, "GPU->GPU (cuda flush)");
    FIT_CHECK(gg_cu.flushes() == f0 + 6, "%ld cuFlushGPUDirectRDMAWrites calls, expected 6",
              gg_cu.flushes() - f0);
    FIT_CHECK(gg_flush_qpn() == 0, "NCCL_FERRY_IB_FLUSH=cuda made a flush QP");
    /* A thread without a current context: ferry makes the buffer's primary context current. */
    FIT_CHECK(gg_cu.drv.set_current(NULL) == 0, "cuCtxSetCurrent(NULL)");
    rdata = gg_addr(&rg, 0);
    FIT_NCCL(gg_flush(&e, 1, &rdata, &isize, &rg.mh, &made));
    FIT_CHECK(made && gg_cu.flushes() == f0 + 7, "flush without a current context: %s, %ld calls",
              made ? "request" : "no request", gg_cu.flushes() - f0);
    fit_pass("NCCL_FERRY_IB_FLUSH=cuda: one cuFlushGPUDirectRDMAWrites per GPU receive, no "
             "flush QP, a context made current where the thread had none");

    snprintf(needle, sizeof(needle), "of %p (4096 bytes, GPU memory (CUDA pointer)) failed",
             rdata);
    fit_log_expect("cuFlushGPUDirectRDMAWrites: CUDA_ERROR_ILLEGAL_ADDRESS (700)");
    gg_cu.fail_flush(700);
    {
        void *req = NULL;

        rc = e.plugin.net->iflush(e.recv_comm, 1, &rdata, &isize, &rg.mh, &req);
        FIT_CHECK(rc == ncclSystemError && req == NULL, "failing flush: rc %d (%s), request %p",
                  (int)rc, fit_result_str(rc), req);
    }
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, needle, "device fakeib0:1", "cuFlushGPUDirectRDMAWrites: "
                           "CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was "
                           "encountered; check the GPU (nvidia-smi", NULL, 0) >= 0,
              "no WARN naming the buffer, the device and the CUDA error");
    FIT_NCCL(gg_flush(&e, 1, &rdata, &isize, &rg.mh, &made));
    FIT_CHECK(made, "the flush after a failed one returned no request");
    fit_pass("a failing cuFlushGPUDirectRDMAWrites: ncclSystemError, WARN with buffer, device "
             "and the CUDA error in words; the next flush works");
    gg_close_comms(&e);
    gg_finish(&e, &sg, &rg, "cudaflush");
}

static void gg_mode_noflush(const char *path)
{
    gg_env_t e;
    gg_buf_t sg, rg;
    long f0;

    gg_open(&e, path, 1);
    gg_check_props(&e, NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 0,
                   "flush disabled (NCCL_GDR_FLUSH_DISABLE=1)");
    gg_buf_open(&e.plugin, &sg, e.send_comm, 1, GG_SLOT);
    gg_buf_open(&e.plugin, &rg, e.recv_comm, 1, GG_SLOT);
    f0 = gg_cu.flushes();
    {
        void *rdata = gg_addr(&rg, 0), *req = (void *)0x1;
        int isize = 4096;

        gg_one(&e, &sg, &rg, 0, 600, "GPU->GPU (flush disabled, empty)");
        FIT_NCCL(e.plugin.net->iflush(e.recv_comm, 1, &rdata, &isize, &rg.mh, &req));
        FIT_CHECK(req == NULL, "NCCL_GDR_FLUSH_DISABLE=1: iflush returned a request");
    }
    FIT_CHECK(gg_flush_qpn() == 0 && gg_cu.flushes() == f0, "something was flushed");
    fit_pass("NCCL_GDR_FLUSH_DISABLE=1: iflush returns NULL, no READ, no CUDA flush");
    gg_close_comms(&e);
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, sg.mh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rg.mh));
    gg_buf_free(&sg);
    gg_buf_free(&rg);
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_log_check_clean("noflush");
    fit_plugin_close(&e.plugin);
}

static void gg_mode_faults(const char *path)
{
    gg_env_t e;
    gg_buf_t sg, rg;
    unsigned long long dev;
    void *mh = NULL, *rdata, *req = NULL;
    ferry_ib_recv_comm_t *rc_comm;
    int fd = -1, isize = 4096, made;
    char needle[160];
    ncclResult_t rc;

    gg_open(&e, path, 1);
    FIT_CHECK(gg_cu.drv.alloc(&dev, 1 << 20) == 0, "cuMemAlloc");
    fit_log_allow_warns(1);
    FIT_CHECK(gg_inject(NULL, FAKEIBV_FAULT_REG_MR, 0, 0, 1, 0) == 0, "inject");
    rc = e.plugin.net->regMr(e.recv_comm, (void *)(uintptr_t)dev, 1 << 20, NCCL_PTR_CUDA, &mh);
    FIT_CHECK(rc == ncclSystemError && mh == NULL, "regMr(CUDA) with ibv_reg_mr failing: %d", rc);
    snprintf(needle, sizeof(needle), "regMr(%p, 1048576 bytes, GPU memory (CUDA pointer)) on "
             "receive comm to 127.0.0.1:", (void *)(uintptr_t)dev);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, needle, "(device fakeib0:1): ib fakeib0: ibv_reg_mr",
                           "failed: Cannot allocate memory (ENOMEM); check that nvidia-peermem is "
                           "loaded", NULL, 0) >= 0, "no WARN naming the GPU buffer and the cause");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, needle, "/dev/infiniband", NULL, NULL, 0) >= 0,
              "the WARN does not mention the container's /dev/infiniband");
    FIT_CHECK(gg_cu.dmabuf_fd(&fd, dev, 1 << 20, 1, 0) == 0, "cuMemGetHandleForAddressRange");
    /* EIO, a driver failure: EINVAL and EBADF name the fd (no dma-buf), integ_misuse's case. */
    FIT_CHECK(gg_inject(NULL, FAKEIBV_FAULT_REG_MR, 0, 0, 1, EIO) == 0, "inject");
    rc = e.plugin.net->regMrDmaBuf(e.recv_comm, (void *)(uintptr_t)dev, 1 << 20, NCCL_PTR_CUDA, 0,
                                   fd, &mh);
    close(fd);
    FIT_CHECK(rc == ncclSystemError && mh == NULL, "regMrDmaBuf with the verb failing: %d", rc);
    snprintf(needle, sizeof(needle), "regMrDmaBuf(%p, 1048576 bytes, GPU memory (DMA-BUF))",
             (void *)(uintptr_t)dev);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, needle, "ibv_reg_dmabuf_mr of", "DMA-BUF fd",
                           NULL, 0) >= 0 &&
              fit_log_find(0, NCCL_LOG_WARN, needle, "Input/output error (EIO)",
                           "NCCL_DMABUF_ENABLE", NULL, 0) >= 0,
              "no WARN naming the DMA-BUF buffer, fd, errno and NCCL_DMABUF_ENABLE");
    FIT_CHECK(gg_cu.drv.free_(dev) == 0, "cuMemFree");
    fit_pass("registration faults on GPU memory (reg_mr, reg_dmabuf_mr): ncclSystemError, WARN "
             "with buffer, type, device, errno and what to check");

    /* The flush QP loses its link: the flush READ ends in RETRY_EXC_ERR. */
    gg_buf_open(&e.plugin, &sg, e.send_comm, 1, GG_SLOT);
    gg_buf_open(&e.plugin, &rg, e.recv_comm, 1, GG_SLOT);
    gg_one(&e, &sg, &rg, 4096, 700, "GPU->GPU before the fault");
    rc_comm = e.recv_comm; /* Same build: the comm's layout (ib/ib_comm.h). */
    FIT_CHECK(rc_comm->flush.nqps == 1, "%d flush QPs after a flush on one HCA", rc_comm->flush.nqps);
    FIT_CHECK(gg_inject(rc_comm->base.conn.dev->hca->ctx, FAKEIBV_FAULT_QP_DROP,
                        rc_comm->flush.qps[0].qp->qp_num, 0, 1, 0) == 0, "inject QP_DROP");
    rdata = gg_addr(&rg, 0);
    FIT_NCCL(e.plugin.net->iflush(e.recv_comm, 1, &rdata, &isize, &rg.mh, &req));
    FIT_CHECK(req != NULL, "iflush returned no request");
    rc = gg_wait(&e, req, NULL, "failing flush");
    FIT_CHECK(rc == ncclSystemError, "the flush's test returned %d (%s), expected "
              "ncclSystemError", (int)rc, fit_result_str(rc));
    snprintf(needle, sizeof(needle), "the GDR flush (1-byte RDMA READ from %p, 4096 bytes, GPU "
             "memory (CUDA pointer), into host word", rdata);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, needle, "device fakeib0:1) failed: transport retry "
                           "counter exceeded", "check that nvidia-peermem is loaded", NULL, 0) >= 0,
              "no WARN naming the flush, its buffer, QP, status and what to check");
    (void)made;
    fit_pass("flush READ failing (QP drop): test() -> ncclSystemError with the flush's WARN");
    gg_close_comms(&e);
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, sg.mh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rg.mh));
    gg_buf_free(&sg);
    gg_buf_free(&rg);
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_plugin_close(&e.plugin);
}

static void gg_mode_stall(const char *path)
{
    gg_env_t e;
    gg_buf_t sg, rg;
    void *rdata, *req = NULL;
    ferry_ib_recv_comm_t *rc_comm;
    int isize = 65536;
    uint32_t qpn;
    ncclResult_t rc;
    char needle[160], counts[128];

    gg_open(&e, path, 1);
    gg_buf_open(&e.plugin, &sg, e.send_comm, 1, GG_SLOT);
    gg_buf_open(&e.plugin, &rg, e.recv_comm, 1, GG_SLOT);
    gg_one(&e, &sg, &rg, 65536, 800, "GPU->GPU before the stall");
    rc_comm = e.recv_comm; /* Same build: the comm's layout (ib/ib_comm.h). */
    qpn = rc_comm->flush.qps[0].qp->qp_num;
    FIT_CHECK(gg_inject(rc_comm->base.conn.dev->hca->ctx, FAKEIBV_FAULT_QP_DROP, qpn, 0, 1, 0) == 0,
              "inject QP_DROP");
    fit_log_allow_warns(1);
    rdata = gg_addr(&rg, 0);
    FIT_NCCL(e.plugin.net->iflush(e.recv_comm, 1, &rdata, &isize, &rg.mh, &req));
    FIT_CHECK(req != NULL, "iflush returned no request");
    rc = gg_wait(&e, req, NULL, "stalled flush");
    FIT_CHECK(rc == ncclSystemError, "the stalled flush ended with %d (%s)", (int)rc,
              fit_result_str(rc));
    snprintf(needle, sizeof(needle), "GDR flush 1: its 1-byte RDMA READ from %p on flush QP 0x%x "
             "(connected to itself) has not completed", rdata, qpn);
    snprintf(counts, sizeof(counts), "GDR flush QP 0x%x (to itself): READs posted 2, completed 1",
             qpn);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "has made no progress for 1 s", needle, counts, NULL,
                           0) >= 0, "no stall WARN naming the flush, its buffer and its QP");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "has made no progress", "recv request seq 2",
                           NULL, NULL, 0) >= 0, "the stall WARN does not name the request");
    fit_pass("a flush READ that does not complete: the stall WARN names the GDR flush, its "
             "buffer and the flush QP's READ counts; then ncclSystemError");
    gg_close_comms(&e);
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, sg.mh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rg.mh));
    gg_buf_free(&sg);
    gg_buf_free(&rg);
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_plugin_close(&e.plugin);
}

static void gg_mode_nodriver(const char *path)
{
    static char buf[65536];
    size_t sizes[] = {0, 1, 4097, 65536 - 7};
    fit_xfer_opts_t o;
    fit_xfer_result_t r;
    gg_env_t e;
    void *mh = NULL;
    ncclResult_t rc;

    if (dlopen("libcuda.so.1", RTLD_NOW) != NULL) {
        printf("SKIP: a libcuda.so.1 is installed here; this case needs a host without one\n");
        exit(77);
    }
    gg_open(&e, path, 0);
    gg_check_props(&e, NCCL_PTR_HOST, 0, "GPUDirect RDMA off (no peer-memory module");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "DMA-BUF off (no CUDA driver: dlopen(libcuda.so.1) "
                           "failed", NULL, NULL, NULL, 0) >= 0, "the init line does not say "
              "that the CUDA driver is missing");
    fit_log_expect("the ib backend takes no GPU pointers here");
    rc = e.plugin.net->regMr(e.recv_comm, buf, sizeof(buf), NCCL_PTR_CUDA, &mh);
    FIT_CHECK(rc == ncclInternalError && mh == NULL, "regMr(CUDA) without GPUDirect: %d", rc);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "takes no GPU pointers here: no peer-memory module",
                           "modprobe nvidia-peermem", "NCCL_FERRY_IB_GDR=1", NULL, 0) >= 0,
              "the WARN does not say what to load or set");
    memset(&o, 0, sizeof(o));
    o.sizes = sizes;
    o.nmsgs = 4;
    o.depth = 2;
    o.seed = 77;
    o.seconds = 30.0;
    o.tag = 3;
    fit_xfer_inproc(&e.plugin, e.send_comm, e.recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, "host memory without a CUDA driver");
    gg_close_comms(&e);
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_log_check_clean("nodriver");
    fit_plugin_close(&e.plugin);
    fit_pass("no libcuda.so.1: ptrSupport HOST, the init line says why, regMr(CUDA) refused "
             "saying what to load, host messages byte for byte");
}

static void gg_mode_peermem(const char *path)
{
    char root[256], dir[320], file[400];
    gg_env_t e;
    FILE *f;

    snprintf(root, sizeof(root), "/tmp/ferry-peermem-%d", (int)getpid());
    snprintf(dir, sizeof(dir), "%s/module", root);
    mkdir(root, 0755);
    mkdir(dir, 0755);
    snprintf(dir, sizeof(dir), "%s/module/nvidia_peermem", root);
    mkdir(dir, 0755);
    snprintf(file, sizeof(file), "%s/version", dir);
    f = fopen(file, "w");
    FIT_CHECK(f != NULL, "cannot write %s", file);
    fputs("535.0\n", f);
    fclose(f);
    setenv("NCCL_FERRY_IB_SYSFS_ROOT", root, 1);
    gg_open(&e, path, 1);
    {
        char words[512];

        snprintf(words, sizeof(words), "GPUDirect RDMA on (peer memory: %s); DMA-BUF off (the "
                 "CUDA driver does not export DMA-BUF", file);
        gg_check_props(&e, NCCL_PTR_HOST | NCCL_PTR_CUDA, 1, words);
    }
    gg_close_comms(&e);
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_log_check_clean("peermem");
    fit_plugin_close(&e.plugin);
    unlink(file);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/module", root);
    rmdir(dir);
    rmdir(root);
    fit_pass("a peer-memory module file under NCCL_FERRY_IB_SYSFS_ROOT: CUDA on, named; no "
             "DMA-BUF from the driver: no DMABUF bit; forceFlush 1");
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *mode = argc >= 3 && strcmp(argv[1], "--mode") == 0 ? argv[2] : "gdr";

    fit_set_role(mode);
    if (strcmp(mode, "gdr") == 0)
        gg_mode_gdr(path);
    else if (strcmp(mode, "cudaflush") == 0)
        gg_mode_cudaflush(path);
    else if (strcmp(mode, "autoflush") == 0)
        gg_mode_autoflush(path);
    else if (strcmp(mode, "noflush") == 0)
        gg_mode_noflush(path);
    else if (strcmp(mode, "faults") == 0)
        gg_mode_faults(path);
    else if (strcmp(mode, "stall") == 0)
        gg_mode_stall(path);
    else if (strcmp(mode, "nodriver") == 0)
        gg_mode_nodriver(path);
    else if (strcmp(mode, "peermem") == 0)
        gg_mode_peermem(path);
    else
        FIT_FAIL("unknown --mode %s (gdr|cudaflush|autoflush|noflush|faults|stall|nodriver|"
                 "peermem)", mode);
    return 0;
}
