/*
 * integ_ib_gpu's shared helpers (declared in integ_ib_gpu.h): fakecuda's
 * driver calls and fakeibv's QP counters and fault injection, looked up once
 * the plugin loaded them; GPU and host buffers registered with a comm; the
 * connected comm pair; and one message sent, checked byte for byte and
 * flushed, its flush READs counted. Kept apart so every mode, in
 * integ_ib_gpu.c and integ_ib_gpu_flush_auto.c, runs on one copy; what each
 * mode expects is in integ_ib_gpu.c.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "integ_ib_gpu.h"

gg_cu_t gg_cu;
int (*gg_inject)(struct ibv_context *, enum fakeibv_fault_kind, uint32_t, unsigned, unsigned,
                 int);
int gg_reads_flush = 1;

static int (*gg_qp_stats)(uint32_t, struct fakeibv_qp_stats *);

/* After init: the plugin loaded libcuda.so.1 (its DMA-BUF question) and libibverbs.so.1. */
void gg_libs_open(void)
{
    void *cu = dlopen("libcuda.so.1", RTLD_NOW), *ibv;

    FIT_CHECK(cu != NULL, "no libcuda.so.1: %s", dlerror());
    fit_cu_open(cu, &gg_cu.drv);
    *(void **)&gg_cu.dmabuf_fd = fit_cu_sym(cu, "cuMemGetHandleForAddressRange");
    *(void **)&gg_cu.flushes = fit_cu_sym(cu, "fakecuda_flushes");
    *(void **)&gg_cu.fail_flush = fit_cu_sym(cu, "fakecuda_fail_next_flush");
    ibv = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    FIT_CHECK(ibv != NULL, "the plugin did not load libibverbs.so.1");
    *(void **)&gg_qp_stats = dlvsym(ibv, "fakeibv_qp_stats", "FAKEIBV_1.0");
    *(void **)&gg_inject = dlvsym(ibv, "fakeibv_inject", "FAKEIBV_1.0");
    FIT_CHECK(gg_qp_stats != NULL && gg_inject != NULL, "libibverbs.so.1 is not fakeibv");
}

char *gg_addr(const gg_buf_t *b, size_t off)
{
    return b->gpu ? (char *)(uintptr_t)(b->dev + off) : b->host + off;
}

void gg_buf_open(const fit_plugin_t *p, gg_buf_t *b, void *comm, int gpu, size_t size)
{
    memset(b, 0, sizeof(*b));
    b->gpu = gpu;
    b->comm = comm;
    b->size = size;
    if (gpu)
        FIT_CHECK(gg_cu.drv.alloc(&b->dev, size) == 0, "cuMemAlloc of %zu bytes", size);
    else
        FIT_CHECK((b->host = aligned_alloc(4096, size)) != NULL, "malloc");
    FIT_NCCL(p->net->regMr(comm, gg_addr(b, 0), size, gpu ? NCCL_PTR_CUDA : NCCL_PTR_HOST,
                           &b->mh));
    FIT_CHECK(b->mh != NULL, "regMr returned no handle");
}

void gg_buf_free(gg_buf_t *b)
{
    if (b->gpu)
        FIT_CHECK(gg_cu.drv.free_(b->dev) == 0, "cuMemFree");
    else
        free(b->host);
}

void gg_write(gg_buf_t *b, size_t off, const void *src, size_t len)
{
    if (b->gpu)
        FIT_CHECK(gg_cu.drv.htod(b->dev + off, src, len) == 0, "cuMemcpyHtoD %zu bytes", len);
    else
        memcpy(b->host + off, src, len);
}

void gg_read(gg_buf_t *b, size_t off, void *dst, size_t len)
{
    if (b->gpu)
        FIT_CHECK(gg_cu.drv.dtoh(dst, b->dev + off, len) == 0, "cuMemcpyDtoH %zu bytes", len);
    else
        memcpy(dst, b->host + off, len);
}

void gg_open(gg_env_t *e, const char *path, int need_cuda)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc;

    memset(e, 0, sizeof(*e));
    fit_plugin_open(&e->plugin, path);
    e->ctx = fit_plugin_init(&e->plugin, 0x6770);
    if (need_cuda)
        gg_libs_open();
    lc = fit_listen(&e->plugin, e->ctx, fit_device(&e->plugin), handle);
    fit_connect_accept(&e->plugin, e->ctx, fit_device(&e->plugin), handle, lc, &e->send_comm,
                       &e->recv_comm, NULL);
    FIT_NCCL(e->plugin.net->closeListen(lc));
}

void gg_close_comms(gg_env_t *e)
{
    FIT_NCCL(e->plugin.net->closeSend(e->send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(e->recv_comm));
}

ncclResult_t gg_wait(gg_env_t *e, void *req, int *size_p, const char *what)
{
    fit_bound_t b;
    ncclResult_t rc;
    int done = 0;

    fit_bound_init(&b, what, 30.0, 50000000L);
    for (;;) {
        rc = e->plugin.net->test(req, &done, size_p);
        if (rc != ncclSuccess || done)
            return rc;
        fit_bound_step(&b);
    }
}

/*
 * The number of flush QP k (one per HCA of the device, in the order their
 * INFO lines came) of the last comm that made them; 0 if there is none.
 */
static uint32_t gg_flush_qpn_k(int k)
{
    char line[1024];
    const char *p;
    unsigned qpn = 0;
    int at = 0, i;

    for (i = 0; i <= k; i++, at++) {
        at = fit_log_find(at, -1, "GDR flush QP 0x", "connected to itself", NULL, line,
                          sizeof(line));
        if (at < 0)
            return 0;
    }
    p = strstr(line, "GDR flush QP 0x");
    FIT_CHECK(sscanf(p, "GDR flush QP 0x%x", &qpn) == 1, "cannot read the QP from '%s'", line);
    return qpn;
}

uint32_t gg_flush_qpn(void)
{
    return gg_flush_qpn_k(0);
}

uint64_t gg_reads(uint32_t qpn, uint64_t *bytes_p)
{
    struct fakeibv_qp_stats st;

    if (qpn == 0) {
        if (bytes_p != NULL)
            *bytes_p = 0;
        return 0;
    }
    FIT_CHECK(gg_qp_stats(qpn, &st) == 0, "fakeibv_qp_stats(0x%x) failed", qpn);
    if (bytes_p != NULL)
        *bytes_p = st.read_bytes;
    return st.reads;
}

/*
 * iflush of what a receive got. Returns the request's rc; *req_made says if
 * a request came back (NULL: nothing to flush).
 */
ncclResult_t gg_flush(gg_env_t *e, int n, void **data, int *sizes, void **mhs,
                      int *req_made)
{
    void *req = (void *)0x1; /* iflush must overwrite whatever is there. */
    ncclResult_t rc = e->plugin.net->iflush(e->recv_comm, n, data, sizes, mhs, &req);

    *req_made = req != NULL;
    if (rc != ncclSuccess || req == NULL)
        return rc;
    return gg_wait(e, req, NULL, "iflush test");
}

/* One message src -> dst of size bytes, checked in dst byte for byte; then flushed. */
void gg_one(gg_env_t *e, gg_buf_t *src, gg_buf_t *dst, size_t size, uint64_t seed,
            const char *what)
{
    static unsigned char pattern[GG_SLOT], back[GG_SLOT], poison[GG_SLOT];
    size_t cap = size + GG_EXTRA, bad;
    void *sreq = NULL, *rreq = NULL, *rdata = gg_addr(dst, 0);
    int tag = 7, got = -1, sgot = -1, isize = (int)size, made;
    uint32_t qpn;
    uint64_t reads0, bytes0, bytes1;
    fit_bound_t b;

    memset(poison, GG_POISON, cap);
    gg_write(dst, 0, poison, cap);
    fit_fill(pattern, size, seed);
    gg_write(src, 0, pattern, size);
    FIT_NCCL(e->plugin.net->irecv(e->recv_comm, 1, &rdata, &cap, &tag, &dst->mh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv returned no request");
    fit_bound_init(&b, "isend", 10.0, 100000000L);
    while (sreq == NULL) {
        FIT_NCCL(e->plugin.net->isend(e->send_comm, gg_addr(src, 0), size, tag, src->mh, NULL,
                                      &sreq));
        if (sreq == NULL)
            fit_bound_step(&b);
    }
    FIT_NCCL(gg_wait(e, sreq, &sgot, "send test"));
    FIT_NCCL(gg_wait(e, rreq, &got, "recv test"));
    FIT_CHECK(got == (int)size && sgot == (int)size, "%s %zu bytes: recv reported %d, send %d",
              what, size, got, sgot);
    gg_read(dst, 0, back, cap);
    FIT_CHECK(fit_verify(back, size, seed, &bad) == 0, "%s %zu bytes: byte %zu differs", what,
              size, bad);
    FIT_CHECK(memcmp(back + size, poison, GG_EXTRA) == 0, "%s %zu bytes: bytes past the message "
              "were written", what, size);
    qpn = gg_flush_qpn();
    reads0 = gg_reads(qpn, &bytes0);
    FIT_NCCL(gg_flush(e, 1, &rdata, &isize, &dst->mh, &made));
    FIT_CHECK(made == (dst->gpu && size > 0), "%s %zu bytes: iflush %s a request", what, size,
              made ? "returned" : "did not return");
    if (qpn == 0)
        qpn = gg_flush_qpn();
    if (gg_reads_flush < 0)
        return; /* autoflush counts the READs itself. */
    made &= gg_reads_flush;
    FIT_CHECK(gg_reads(qpn, &bytes1) == reads0 + (uint64_t)made && bytes1 == bytes0 + (uint64_t)made,
              "%s %zu bytes: flush QP 0x%x shows %llu READs (%llu bytes), expected %llu", what,
              size, qpn, (unsigned long long)gg_reads(qpn, NULL), (unsigned long long)bytes1,
              (unsigned long long)(reads0 + (uint64_t)made));
    /* A merged device over two HCAs (FIT_MERGE): the other HCA's flush QP read too. */
    if (getenv("FIT_MERGE") != NULL && made) {
        uint32_t qpn2 = gg_flush_qpn_k(1);

        FIT_CHECK(qpn2 != 0 && qpn2 != qpn && gg_reads(qpn2, NULL) == gg_reads(qpn, NULL),
                  "%s %zu bytes: the second HCA's flush QP 0x%x shows %llu READs, the first "
                  "%llu", what, size, qpn2, (unsigned long long)gg_reads(qpn2, NULL),
                  (unsigned long long)gg_reads(qpn, NULL));
    }
}

int gg_sizes(size_t *s)
{
    static const size_t sizes[] = {0, 1, 2, 3, 127, 128, 129, 4095, 4096, 4097, 65535, 65536,
                                   65537, 1 << 20, (1 << 20) + 3, 4 << 20, (8 << 20) - 1, 8 << 20};
    int i, n = (int)(sizeof(sizes) / sizeof(sizes[0]));

    for (i = 0; i < n; i++)
        s[i] = sizes[i];
    return n;
}

void gg_check_props(gg_env_t *e, int want, int want_force, const char *line_words)
{
    ncclNetProperties_v11_t props;

    FIT_NCCL(e->plugin.net->getProperties(0, &props));
    FIT_CHECK(props.ptrSupport == want, "ptrSupport is 0x%x, expected 0x%x", props.ptrSupport,
              want);
    FIT_CHECK(props.forceFlush == want_force, "forceFlush is %d, expected %d", props.forceFlush,
              want_force);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "ib backend GPU memory: ", line_words, NULL, NULL, 0)
              >= 0, "no init line 'ib backend GPU memory: ...%s'", line_words);
}

/* After the comms closed: deregister and free a GPU buffer pair, finalize, no stray WARN. */
void gg_finish(gg_env_t *e, gg_buf_t *sg, gg_buf_t *rg, const char *mode)
{
    FIT_NCCL(e->plugin.net->deregMr(e->send_comm, sg->mh));
    FIT_NCCL(e->plugin.net->deregMr(e->recv_comm, rg->mh));
    gg_buf_free(sg);
    gg_buf_free(rg);
    FIT_NCCL(e->plugin.net->finalize(e->ctx));
    fit_log_check_clean(mode);
    fit_plugin_close(&e->plugin);
}
