/*
 * integ_gpu_staging: GPU buffers through the socket backend
 * (NCCL_FERRY_GPU_STAGING, src/socket/sock_gpu.h), on tests/fakecuda.
 *
 *   integ_gpu_staging [--plugin PATH] --mode on|off|nodriver|stall
 *
 * on:       LD_LIBRARY_PATH selects fakecuda. Messages GPU->GPU, host->GPU
 *           and GPU->host, 0 B..4 MiB, 4 in flight, checked byte for byte in
 *           device memory (read back through the driver: fakecuda's device
 *           memory faults on any CPU access, so ferry touching it directly
 *           crashes the test). Bytes past each message keep their poison.
 *           Then the failures: a failed copy on either side, a pinned
 *           shadow that cannot be allocated, a host pointer registered as
 *           GPU memory; each by return code and message, and the plugin
 *           still works afterwards.
 * off:      staging not asked for: ptrSupport is HOST and a GPU
 *           registration says how to get one.
 * stall:    (NCCL_FERRY_STALL_WARN_S=1) copies that never complete: a send
 *           still gated and a receive held after all of it arrived each get
 *           the stall WARN saying so; released, both finish intact.
 * nodriver: staging asked for on a host without libcuda.so.1: a WARN at
 *           init that says so, ptrSupport HOST, and regMr names the cause.
 *           Skipped (77) where a real driver is installed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "harness.h"
#include "harness_cuda.h"

#define GS_SLOT      ((size_t)4 << 20)   /* One message's place in a region. */
#define GS_DEPTH     4
#define GS_REGION    (GS_SLOT * GS_DEPTH)
#define GS_EXTRA     4096                /* Receives are posted this much larger. */
#define GS_POISON    0x5c

static struct {
    void *dl;
    fit_cu_t drv;
    fakecuda_copies_fn copies;
    fakecuda_streams_fn streams, blocking;
    fakecuda_fail_copies_after_fn fail_copies_after;
    fakecuda_fail_next_host_alloc_fn fail_host_alloc;
    fakecuda_hold_copies_fn hold;
} gs_cu;

static void gs_cuda_open(void)
{
    gs_cu.dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    FIT_CHECK(gs_cu.dl != NULL, "the plugin did not load libcuda.so.1 (fakecuda) at init");
    fit_cu_open(gs_cu.dl, &gs_cu.drv);
    *(void **)&gs_cu.copies = fit_cu_sym(gs_cu.dl, "fakecuda_copies");
    *(void **)&gs_cu.streams = fit_cu_sym(gs_cu.dl, "fakecuda_streams");
    *(void **)&gs_cu.blocking = fit_cu_sym(gs_cu.dl, "fakecuda_blocking");
    *(void **)&gs_cu.fail_copies_after = fit_cu_sym(gs_cu.dl, "fakecuda_fail_copies_after");
    *(void **)&gs_cu.fail_host_alloc = fit_cu_sym(gs_cu.dl, "fakecuda_fail_next_host_alloc");
    *(void **)&gs_cu.hold = fit_cu_sym(gs_cu.dl, "fakecuda_hold_copies");
}

/* A registered buffer region: device memory (fakecuda) or host memory. */
typedef struct gs_region {
    int                gpu;
    unsigned long long dev;
    char              *host;
    void              *mh;
    void              *comm;
} gs_region_t;

static char *gs_region_addr(const gs_region_t *r, size_t off)
{
    return r->gpu ? (char *)(uintptr_t)(r->dev + off) : r->host + off;
}

static void gs_region_open(const fit_plugin_t *p, gs_region_t *r, void *comm, int gpu)
{
    memset(r, 0, sizeof(*r));
    r->gpu = gpu;
    r->comm = comm;
    if (gpu)
        FIT_CHECK(gs_cu.drv.alloc(&r->dev, GS_REGION) == 0, "cuMemAlloc of %zu bytes", GS_REGION);
    else
        FIT_CHECK((r->host = malloc(GS_REGION)) != NULL, "malloc");
    FIT_NCCL(p->net->regMr(comm, gs_region_addr(r, 0), GS_REGION,
                           gpu ? NCCL_PTR_CUDA : NCCL_PTR_HOST, &r->mh));
    FIT_CHECK(r->mh != NULL, "regMr returned no handle");
}

static void gs_region_close(const fit_plugin_t *p, gs_region_t *r)
{
    FIT_NCCL(p->net->deregMr(r->comm, r->mh));
    if (r->gpu)
        FIT_CHECK(gs_cu.drv.free_(r->dev) == 0, "cuMemFree");
    else
        free(r->host);
}

static void gs_region_write(gs_region_t *r, size_t off, const void *src, size_t len)
{
    if (r->gpu)
        FIT_CHECK(gs_cu.drv.htod(r->dev + off, src, len) == 0, "cuMemcpyHtoD %zu bytes", len);
    else
        memcpy(r->host + off, src, len);
}

static void gs_region_read(gs_region_t *r, size_t off, void *dst, size_t len)
{
    if (r->gpu)
        FIT_CHECK(gs_cu.drv.dtoh(dst, r->dev + off, len) == 0, "cuMemcpyDtoH %zu bytes", len);
    else
        memcpy(dst, r->host + off, len);
}

typedef struct gs_pair {
    void *send_comm, *recv_comm;
} gs_pair_t;

static void gs_pair_open(const fit_plugin_t *p, void *ctx, gs_pair_t *pr)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *listen_comm = fit_listen(p, ctx, 0, handle);

    fit_connect_accept(p, ctx, 0, handle, listen_comm, &pr->send_comm, &pr->recv_comm, NULL);
    FIT_NCCL(p->net->closeListen(listen_comm));
}

static void gs_pair_close(const fit_plugin_t *p, gs_pair_t *pr)
{
    FIT_NCCL(p->net->closeSend(pr->send_comm));
    FIT_NCCL(p->net->closeRecv(pr->recv_comm));
}

/* Test a request until done; returns what test() returned (the first error ends it). */
static ncclResult_t gs_wait(const fit_plugin_t *p, void *req, int *size_p, const char *what)
{
    fit_bound_t b;
    ncclResult_t rc;
    int done = 0, size = -1;

    fit_bound_init(&b, what, 30.0, 50000000L);
    for (;;) {
        rc = p->net->test(req, &done, &size);
        if (rc != ncclSuccess || done)
            break;
        fit_bound_step(&b);
    }
    if (size_p != NULL)
        *size_p = size;
    return rc;
}

/*
 * Messages of sizes[] from src to dst, GS_DEPTH in flight, each in its own
 * slot; every received slot is read back and checked, the bytes after the
 * message still poisoned.
 */
static void gs_run(const fit_plugin_t *p, const gs_pair_t *pr, gs_region_t *src, gs_region_t *dst,
                   const size_t *sizes, int n, uint64_t seed, const char *what)
{
    static unsigned char pattern[GS_SLOT], back[GS_SLOT], poison[GS_SLOT];
    void *sreq[GS_DEPTH], *rreq[GS_DEPTH];
    int i, k, got;
    long copies0 = gs_cu.copies();

    memset(poison, GS_POISON, sizeof(poison));
    for (i = 0; i < n; i += GS_DEPTH) {
        int batch = n - i < GS_DEPTH ? n - i : GS_DEPTH;

        for (k = 0; k < batch; k++) {
            size_t size = sizes[i + k], off = (size_t)k * GS_SLOT, cap = size + GS_EXTRA;
            void *rdata = gs_region_addr(dst, off);
            int tag = 1;
            fit_bound_t b;

            FIT_CHECK(cap <= GS_SLOT, "size %zu does not fit a slot", size);
            fit_fill(pattern, size, seed + (uint64_t)(i + k));
            gs_region_write(src, off, pattern, size);
            gs_region_write(dst, off, poison, cap);
            fit_bound_init(&b, "irecv slot", 10.0, 1000000L);
            do {
                rreq[k] = NULL;
                FIT_NCCL(p->net->irecv(pr->recv_comm, 1, &rdata, &cap, &tag, &dst->mh, NULL,
                                       &rreq[k]));
            } while (rreq[k] == NULL && fit_bound_try_step(&b));
            fit_bound_init(&b, "isend slot", 10.0, 1000000L);
            do {
                sreq[k] = NULL;
                FIT_NCCL(p->net->isend(pr->send_comm, gs_region_addr(src, off), size, tag,
                                       src->mh, NULL, &sreq[k]));
            } while (sreq[k] == NULL && fit_bound_try_step(&b));
            FIT_CHECK(sreq[k] != NULL && rreq[k] != NULL, "%s: no request slot", what);
        }
        for (k = 0; k < batch; k++) {
            size_t size = sizes[i + k], off = (size_t)k * GS_SLOT;
            char name[96];

            FIT_NCCL(gs_wait(p, sreq[k], &got, "isend done"));
            FIT_CHECK((size_t)got == size, "%s: send %d reported %d bytes, sent %zu", what,
                      i + k, got, size);
            FIT_NCCL(gs_wait(p, rreq[k], &got, "irecv done"));
            FIT_CHECK((size_t)got == size, "%s: receive %d reported %d bytes, sent %zu", what,
                      i + k, got, size);
            gs_region_read(dst, off, back, size + GS_EXTRA);
            snprintf(name, sizeof(name), "%s message %d (%zu bytes)", what, i + k, size);
            fit_check_pattern(back, size, seed + (uint64_t)(i + k), name);
            FIT_CHECK(memcmp(back + size, poison, GS_EXTRA) == 0,
                      "%s: bytes after the message were written", name);
        }
    }
    fit_pass("%s: %d messages checked byte for byte (%ld device copies)", what, n,
             gs_cu.copies() - copies0);
}

static const size_t gs_sizes[] = {
    0, 1, 7, 4095, 4096, 65535, 65536, 65537, 300000, (size_t)1 << 20, ((size_t)1 << 20) + 3,
    (size_t)3 << 20, ((size_t)4 << 20) - GS_EXTRA,
};
#define GS_NSIZES ((int)(sizeof(gs_sizes) / sizeof(gs_sizes[0])))

static void gs_data(const fit_plugin_t *p, void *ctx)
{
    gs_region_t sg, sh, rg, rh;
    gs_pair_t pr;

    gs_pair_open(p, ctx, &pr);
    gs_region_open(p, &sg, pr.send_comm, 1);
    gs_region_open(p, &sh, pr.send_comm, 0);
    gs_region_open(p, &rg, pr.recv_comm, 1);
    gs_region_open(p, &rh, pr.recv_comm, 0);
    gs_run(p, &pr, &sg, &rg, gs_sizes, GS_NSIZES, 100, "GPU -> GPU");
    gs_run(p, &pr, &sh, &rg, gs_sizes, GS_NSIZES, 200, "host -> GPU");
    gs_run(p, &pr, &sg, &rh, gs_sizes, GS_NSIZES, 300, "GPU -> host");
    gs_run(p, &pr, &sg, &rg, gs_sizes, GS_NSIZES, 400, "GPU -> GPU again");
    FIT_CHECK(gs_cu.blocking() == 0, "%ld CUDA stream(s) made without CU_STREAM_NON_BLOCKING: "
              "they would wait for NCCL's kernels", gs_cu.blocking());
    gs_region_close(p, &sg);
    gs_region_close(p, &sh);
    gs_region_close(p, &rg);
    gs_region_close(p, &rh);
    gs_pair_close(p, &pr);
    fit_log_check_clean("GPU data");
}

/* One message of len bytes from the start of src into the start of dst: receive posted first. */
static void gs_post_pair(const fit_plugin_t *p, const gs_pair_t *pr, gs_region_t *src,
                         gs_region_t *dst, size_t len, void **sreq_p, void **rreq_p)
{
    void *rdata = gs_region_addr(dst, 0);
    size_t cap = len;
    int tag = 1;

    *sreq_p = *rreq_p = NULL;
    FIT_NCCL(p->net->irecv(pr->recv_comm, 1, &rdata, &cap, &tag, &dst->mh, NULL, rreq_p));
    FIT_NCCL(p->net->isend(pr->send_comm, gs_region_addr(src, 0), len, tag, src->mh, NULL,
                           sreq_p));
    FIT_CHECK(*sreq_p != NULL && *rreq_p != NULL, "no request for a %zu-byte message", len);
}

/* 40 host messages first, then the comms' first GPU buffers: the gates still open in order. */
static void gs_late_gpu(const fit_plugin_t *p, void *ctx)
{
    size_t sizes[40];
    gs_region_t sh, rh, sg, rg;
    gs_pair_t pr;
    int i;

    for (i = 0; i < 40; i++)
        sizes[i] = (size_t)(i * 7919) % 200000 + 1;
    gs_pair_open(p, ctx, &pr);
    gs_region_open(p, &sh, pr.send_comm, 0);
    gs_region_open(p, &rh, pr.recv_comm, 0);
    gs_run(p, &pr, &sh, &rh, sizes, 40, 500, "40 host messages before any GPU buffer");
    gs_region_open(p, &sg, pr.send_comm, 1);
    gs_region_open(p, &rg, pr.recv_comm, 1);
    gs_run(p, &pr, &sg, &rg, gs_sizes, GS_NSIZES, 600, "then GPU -> GPU on the same comms");
    gs_region_close(p, &sh);
    gs_region_close(p, &rh);
    gs_region_close(p, &sg);
    gs_region_close(p, &rg);
    gs_pair_close(p, &pr);
}

/* A copy fails on the given side: test() says so by code and message; the peer then sees a close. */
static void gs_copy_fault(const fit_plugin_t *p, void *ctx, int send_side)
{
    static unsigned char pattern[1 << 20];
    gs_region_t src, dst;
    gs_pair_t pr;
    void *sreq = NULL, *rreq = NULL;
    int from = fit_log_lines();
    ncclResult_t rc;
    char line[1024];

    gs_pair_open(p, ctx, &pr);
    gs_region_open(p, &src, pr.send_comm, send_side);
    gs_region_open(p, &dst, pr.recv_comm, !send_side);
    fit_fill(pattern, sizeof(pattern), 7);
    gs_region_write(&src, 0, pattern, sizeof(pattern));
    fit_log_expect("CUDA_ERROR_ILLEGAL_ADDRESS");
    fit_log_expect("connection closed by peer");
    fit_log_expect("closed all");
    gs_cu.fail_copies_after(0);
    gs_post_pair(p, &pr, &src, &dst, sizeof(pattern), &sreq, &rreq);
    rc = gs_wait(p, send_side ? sreq : rreq, NULL, "failed copy reported");
    FIT_CHECK(rc == ncclUnhandledCudaError, "%s side: test() returned %d (%s), expected "
              "ncclUnhandledCudaError", send_side ? "send" : "receive", (int)rc,
              fit_result_str(rc));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "CUDA_ERROR_ILLEGAL_ADDRESS",
                           send_side ? "from GPU 0" : "to GPU 0", "peer 127.0.0.1", line,
                           sizeof(line)) >= 0,
              "no WARN names the CUDA error, the direction and the peer");
    FIT_CHECK(strstr(line, "message seq 0") != NULL &&
              strstr(line, send_side ? "gated: none of it sent" : "request DONE") != NULL &&
              strstr(line, "NCCL_FERRY_GPU_STAGING=0"),
              "the WARN lacks the message, its state or what to try: %s", line);
    gs_cu.fail_copies_after(-1);
    if (send_side) {
        /* The receiver learns it from the close, not from a hang. */
        FIT_NCCL(p->net->closeSend(pr.send_comm));
        rc = gs_wait(p, rreq, NULL, "receiver sees the close");
        FIT_CHECK(rc == ncclRemoteError, "receiver after the sender's failed copy: %d (%s)",
                  (int)rc, fit_result_str(rc));
        FIT_NCCL(p->net->closeRecv(pr.recv_comm));
    } else {
        FIT_NCCL(gs_wait(p, sreq, NULL, "sender done"));
        gs_pair_close(p, &pr);
    }
    gs_region_close(p, &src);
    gs_region_close(p, &dst);
    fit_log_expect_clear();
    fit_pass("a failed copy on the %s side: ncclUnhandledCudaError from test(), WARN with "
             "peer, message and its state", send_side ? "send" : "receive");
}

static void gs_reg_faults(const fit_plugin_t *p, void *ctx)
{
    gs_pair_t pr;
    void *mh = (void *)1;
    char host[4096], line[1024];
    unsigned long long dev;
    ncclResult_t rc;
    int from = fit_log_lines();

    gs_pair_open(p, ctx, &pr);
    fit_log_expect("cannot stage it");
    rc = p->net->regMr(pr.send_comm, host, sizeof(host), NCCL_PTR_CUDA, &mh);
    FIT_CHECK(rc == ncclInternalError && mh == NULL, "host memory registered as CUDA: %d (%s)",
              (int)rc, fit_result_str(rc));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "cannot stage it", "CUDA_ERROR_INVALID_VALUE",
                           NULL, NULL, 0) >= 0, "no WARN names cuPointerGetAttribute's error");
    FIT_CHECK(gs_cu.drv.alloc(&dev, 1 << 20) == 0, "cuMemAlloc");
    gs_cu.fail_host_alloc(1);
    mh = (void *)1;
    rc = p->net->regMr(pr.recv_comm, (void *)(uintptr_t)dev, 1 << 20, NCCL_PTR_CUDA, &mh);
    FIT_CHECK(rc == ncclSystemError && mh == NULL, "no pinned shadow: %d (%s)", (int)rc,
              fit_result_str(rc));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY",
                           NULL, line, sizeof(line)) >= 0, "no WARN names cuMemHostAlloc");
    FIT_CHECK(gs_cu.drv.free_(dev) == 0, "cuMemFree");
    gs_pair_close(p, &pr);
    fit_log_expect_clear();
    fit_pass("regMr: host memory as CUDA and a failed pinned allocation rejected: %s", line);
}

static void gs_mode_on(const fit_plugin_t *p, void *ctx)
{
    ncclNetProperties_v11_t props;
    long streams;

    memset(&props, 0, sizeof(props));
    FIT_NCCL(p->net->getProperties(0, &props));
    FIT_CHECK(props.ptrSupport == (NCCL_PTR_HOST | NCCL_PTR_CUDA),
              "NCCL_FERRY_GPU_STAGING=1 with a driver: ptrSupport 0x%x", props.ptrSupport);
    FIT_CHECK(fit_log_find(0, -1, "GPU buffers accepted", NULL, NULL, NULL, 0) >= 0,
              "init did not log that GPU buffers are taken");
    gs_cuda_open();
    gs_data(p, ctx);
    gs_late_gpu(p, ctx);
    gs_copy_fault(p, ctx, 1);
    gs_copy_fault(p, ctx, 0);
    gs_reg_faults(p, ctx);
    gs_data(p, ctx); /* Nothing of the faults stays behind. */
    /* Each comm's copy stream goes with the comm. */
    streams = gs_cu.streams();
    FIT_CHECK(streams == 0, "%ld CUDA streams left after every comm closed", streams);
    fit_pass("ptrSupport HOST|CUDA; %ld stream(s) left with all comms closed", streams);
}

/* Test req for seconds: it must stay not done (and error-free) all along. */
static void gs_spin_not_done(const fit_plugin_t *p, void *req, double seconds, const char *what)
{
    double end = fit_now() + seconds;
    int done = 0;

    while (fit_now() < end) {
        FIT_NCCL(p->net->test(req, &done, NULL));
        FIT_CHECK(!done, "%s: reported done while its copy cannot complete", what);
        usleep(1000);
    }
}

/*
 * A GPU that stops completing copies: the stall WARN (NCCL_FERRY_STALL_WARN_S=1)
 * must say the send is still gated and the receive is held after arriving,
 * and both finish intact once the copies complete.
 */
static void gs_mode_stall(const fit_plugin_t *p, void *ctx)
{
    static unsigned char pattern[1 << 20], back[1 << 20];
    gs_region_t sg, rg, sh, rh;
    gs_pair_t pr;
    void *sreq = NULL, *rreq = NULL;
    int from, got;

    gs_cuda_open();
    gs_pair_open(p, ctx, &pr);
    gs_region_open(p, &sg, pr.send_comm, 1);
    gs_region_open(p, &rg, pr.recv_comm, 1);
    gs_region_open(p, &sh, pr.send_comm, 0);
    gs_region_open(p, &rh, pr.recv_comm, 0);
    fit_fill(pattern, sizeof(pattern), 77);
    gs_region_write(&sg, 0, pattern, sizeof(pattern));
    gs_region_write(&sh, 0, pattern, sizeof(pattern));
    fit_log_expect("has made no progress");

    /* Send side: GPU -> host, the copy out of the GPU never completes. */
    from = fit_log_lines();
    gs_cu.hold(1);
    gs_post_pair(p, &pr, &sg, &rh, sizeof(pattern), &sreq, &rreq);
    gs_spin_not_done(p, sreq, 2.5, "gated send");
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "send request seq 0", "still gated",
                           "NCCL_FERRY_GPU_STAGING=0", NULL, 0) >= 0,
              "no stall WARN says the send is still gated");
    gs_cu.hold(0);
    FIT_NCCL(gs_wait(p, sreq, &got, "gated send after release"));
    FIT_NCCL(gs_wait(p, rreq, &got, "its receive"));
    gs_region_read(&rh, 0, back, sizeof(back));
    fit_check_pattern(back, sizeof(back), 77, "held send, released");

    /* Receive side: host -> GPU, all of it arrives, the copy into the GPU never completes. */
    from = fit_log_lines();
    gs_cu.hold(1);
    gs_post_pair(p, &pr, &sh, &rg, sizeof(pattern), &sreq, &rreq);
    FIT_NCCL(gs_wait(p, sreq, &got, "host send"));
    gs_spin_not_done(p, rreq, 2.5, "held receive");
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "recv request seq 1", "All of it arrived",
                           "NCCL_FERRY_GPU_STAGING=0", NULL, 0) >= 0,
              "no stall WARN says the receive arrived and is held");
    gs_cu.hold(0);
    FIT_NCCL(gs_wait(p, rreq, &got, "held receive after release"));
    gs_region_read(&rg, 0, back, sizeof(back));
    fit_check_pattern(back, sizeof(back), 77, "held receive, released");

    gs_region_close(p, &sg);
    gs_region_close(p, &rg);
    gs_region_close(p, &sh);
    gs_region_close(p, &rh);
    gs_pair_close(p, &pr);
    fit_log_expect_clear();
    fit_pass("copies that never complete: the stall WARN names a gated send and a held "
             "receive; released, both arrive intact");
}

static void gs_mode_host_only(const fit_plugin_t *p, void *ctx, const char *why)
{
    ncclNetProperties_v11_t props;
    gs_pair_t pr;
    void *mh = (void *)1;
    char buf[64];
    ncclResult_t rc;

    memset(&props, 0, sizeof(props));
    FIT_NCCL(p->net->getProperties(0, &props));
    FIT_CHECK(props.ptrSupport == NCCL_PTR_HOST, "ptrSupport 0x%x, expected HOST only",
              props.ptrSupport);
    gs_pair_open(p, ctx, &pr);
    fit_log_expect(why);
    rc = p->net->regMr(pr.send_comm, buf, sizeof(buf), NCCL_PTR_CUDA, &mh);
    FIT_CHECK(rc == ncclInternalError && mh == NULL, "regMr(CUDA) on a host-only plugin: %d",
              (int)rc);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "regMr", why, NULL, NULL, 0) >= 0,
              "regMr's WARN does not say '%s'", why);
    gs_pair_close(p, &pr);
    fit_log_expect_clear();
    fit_pass("ptrSupport HOST; regMr(CUDA) refused, saying '%s'", why);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv), *mode = NULL;
    fit_plugin_t p;
    void *ctx;
    int i;

    fit_set_role("gpu-staging");
    for (i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--mode") == 0)
            mode = argv[i + 1];
    FIT_CHECK(mode != NULL, "usage: integ_gpu_staging [--plugin PATH] --mode on|off|nodriver");
    if (strcmp(mode, "nodriver") == 0) {
        void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

        if (real != NULL) {
            printf("skip: this host has a libcuda.so.1\n");
            return 77;
        }
        fit_log_expect("no CUDA driver");
    }
    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 1);
    if (strcmp(mode, "on") == 0)
        gs_mode_on(&p, ctx);
    else if (strcmp(mode, "stall") == 0)
        gs_mode_stall(&p, ctx);
    else if (strcmp(mode, "off") == 0)
        gs_mode_host_only(&p, ctx, "NCCL_FERRY_GPU_STAGING=1");
    else if (strcmp(mode, "nodriver") == 0) {
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "NCCL_FERRY_GPU_STAGING=1", "dlopen(libcuda.so.1)",
                               NULL, NULL, 0) >= 0, "init did not WARN that the driver is missing");
        gs_mode_host_only(&p, ctx, "dlopen(libcuda.so.1)");
    } else
        FIT_FAIL("unknown --mode %s", mode);
    fit_log_check_clean(mode);
    FIT_NCCL(p.net->finalize(ctx));
    fit_plugin_close(&p);
    printf("PASS integ_gpu_staging --mode %s\n", mode);
    return 0;
}
