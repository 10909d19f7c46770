/*
 * What every case of test_rma_socket uses (test_rma.h): NCCL's two RMA
 * ABI versions behind one set of calls, the barrier and the byte checks,
 * and a rank's setup (listen, connect, context, the three collective
 * registrations) and teardown.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_rma.h"

ncclResult_t rma_init(void **ctx)
{
    return use_v13 ? v13->init(ctx, 0xfe44, fit_logger) : v14->init(ctx, 0xfe44, fit_logger);
}

ncclResult_t rma_create(void *coll, void **ctx)
{
    if (use_v13) {
        ncclGinConfig_v13_t cfg = { .nContexts = 1, .trafficClass = -1 };
        ncclNetDeviceHandle_v11_t *dev = (void *)1;
        ncclResult_t rc = v13->createContext(coll, &cfg, ctx, &dev);

        FIT_CHECK(rc != ncclSuccess || dev == NULL, "v13 createContext left a device handle");
        return rc;
    }
    ncclRmaConfig_v14_t cfg = { .nContexts = 1, .trafficClass = -1, .rankStride = 1 };
    return v14->createContext(coll, &cfg, ctx);
}

ncclResult_t rma_reg(void *coll, void *data, size_t size, uint64_t flags, void **mh)
{
    if (use_v13) {
        void *gin = NULL;
        ncclResult_t rc = v13->regMrSym(coll, data, size, NCCL_PTR_HOST, flags, mh, &gin);

        FIT_CHECK(rc != ncclSuccess || gin != NULL, "v13 regMrSym gave no GIN handle");
        return rc;
    }
    return v14->regMrSym(coll, data, size, NCCL_PTR_HOST, flags, mh);
}

ncclResult_t rma_iput(uint64_t soff, void *smh, size_t size, uint64_t doff, void *dmh,
                             uint32_t rank, void **req)
{
    return use_v13 ? v13->iput(rctx, 0, soff, smh, size, doff, dmh, rank, req)
                   : v14->iput(rctx, 0, soff, smh, size, doff, dmh, rank, req);
}

ncclResult_t rma_iput_signal(uint64_t soff, void *smh, size_t size, uint64_t doff,
                                    void *dmh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                    uint64_t value, uint32_t op, void **req)
{
    return use_v13 ? v13->iputSignal(rctx, 0, soff, smh, size, doff, dmh, rank, sig_off, sig_mh,
                                     value, op, req)
                   : v14->iputSignal(rctx, 0, soff, smh, size, doff, dmh, rank, sig_off, sig_mh,
                                     value, op, true, req);
}

ncclResult_t rma_iget(uint64_t roff, void *rmh, size_t size, uint64_t loff, void *lmh,
                             uint32_t rank, void **req)
{
    return use_v13 ? v13->iget(rctx, 0, roff, rmh, size, loff, lmh, rank, req)
                   : v14->iget(rctx, 0, roff, rmh, size, loff, lmh, rank, req);
}

ncclResult_t rma_iflush(void *mh, uint32_t rank, void **req)
{
    return use_v13 ? v13->iflush(rctx, 0, mh, rank, req) : v14->iflush(rctx, 0, mh, rank, req);
}

ncclResult_t rma_test(void *coll, void *req, int *done)
{
    return use_v13 ? v13->test(coll, req, done) : v14->test(coll, req, done);
}

void rma_progress(void)
{
    if (rctx != NULL)
        FIT_NCCL(use_v13 ? v13->ginProgress(rctx) : v14->rmaProgress(rctx));
}

int rma_has_error(void)
{
    bool err = false;

    FIT_NCCL(use_v13 ? v13->queryLastError(rctx, &err) : v14->queryLastError(rctx, &err));
    return err;
}

void barrier(int k)
{
    double end = fit_now() + WAIT_S * fit_time_scale();

    atomic_fetch_add(&sh->arrived[k], 1);
    while (atomic_load(&sh->arrived[k]) < NRANKS) {
        FIT_CHECK(fit_now() < end, "barrier %d: %d of %d ranks in %.0f s", k,
                  atomic_load(&sh->arrived[k]), NRANKS, WAIT_S);
        rma_progress();
        usleep(100);
    }
}

unsigned char pat(int src, int round, size_t i)
{
    return (unsigned char)(i * 131u + (size_t)src * 17u + (size_t)round * 29u + 7u);
}

void fill(unsigned char *buf, size_t n, int src, int round)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = pat(src, round, i);
}

void check_bytes(const unsigned char *buf, size_t n, int src, int round, const char *what)
{
    unsigned char *want = malloc(n > 0 ? n : 1);
    size_t first = 0;

    /*
     * One memcmp first: on ib an emulated NIC thread wrote buf, which TSan
     * reports (suppressed, tests/tsan.supp) once per access; byte by byte
     * that took minutes. The loop below only finds the first bad byte.
     */
    FIT_CHECK(want != NULL, "allocation");
    fill(want, n, src, round);
    if (memcmp(buf, want, n) == 0) {
        free(want);
        return;
    }
    /* The first 4 KiB that differ, then its first bad byte. */
    for (size_t off = 0; off < n; off += 4096) {
        size_t len = n - off < 4096 ? n - off : 4096;

        if (memcmp(buf + off, want + off, len) != 0) {
            first = off;
            break;
        }
    }
    free(want);
    for (size_t i = first; i < n; i++)
        FIT_CHECK(buf[i] == pat(src, round, i), "%s: byte %zu of %zu is 0x%02x, expected 0x%02x "
                  "(source rank %d, round %d)", what, i, n, buf[i], pat(src, round, i), src,
                  round);
}

ncclResult_t wait_req(void *coll, void *req, const char *what)
{
    double end = fit_now() + WAIT_S * fit_time_scale();
    int done = 0;

    FIT_CHECK(req != NULL, "%s: no request", what);
    for (long i = 0; !done; i++) {
        ncclResult_t rc = rma_test(coll, req, &done);

        if (rc != ncclSuccess)
            return rc;
        FIT_CHECK(fit_now() < end, "%s: not done after %.0f s", what, WAIT_S);
        if (!done && i % 64 == 63)
            usleep(50);
    }
    return ncclSuccess;
}

void wait_word(volatile uint64_t *w, uint64_t want, const char *what)
{
    double end = fit_now() + WAIT_S * fit_time_scale();

    while (__atomic_load_n(w, __ATOMIC_ACQUIRE) != want) {
        FIT_CHECK(fit_now() < end, "%s: signal word is %llu, want %llu after %.0f s", what,
                  (unsigned long long)*w, (unsigned long long)want, WAIT_S);
        rma_progress();
    }
}

void rank_setup(rank_state_t *s, int step0)
{
    void *lc;
    void *handles[NRANKS];
    ncclNetProperties_v12_t props;
    int ndev = 0;

    FIT_NCCL(rma_init(&s->ctx));
    FIT_NCCL(use_v13 ? v13->devices(&ndev) : v14->devices(&ndev));
    FIT_CHECK(ndev >= 1, "devices() = %d", ndev);
    FIT_NCCL(use_v13 ? v13->getProperties(0, &props) : v14->getProperties(0, &props));
    FIT_CHECK(props.netDeviceType == NCCL_NET_DEVICE_GIN_PROXY, "netDeviceType %d",
              (int)props.netDeviceType);
    FIT_CHECK(props.ptrSupport == NCCL_PTR_HOST && props.maxRecvs == 1,
              "ptrSupport %d maxRecvs %d", props.ptrSupport, props.maxRecvs);
    FIT_NCCL(use_v13 ? v13->listen(s->ctx, 0, sh->handles[my_rank], &lc)
                     : v14->listen(s->ctx, 0, sh->handles[my_rank], &lc));
    barrier(step0);
    for (int r = 0; r < NRANKS; r++)
        handles[r] = sh->handles[r];
    if (wait_strangers) {
        double end = fit_now() + WAIT_S;

        while (!atomic_load(&sh->strangers_done))
            FIT_CHECK(fit_now() < end && usleep(1000) == 0, "the strangers never came");
    }
    FIT_NCCL(use_v13 ? v13->connect(s->ctx, handles, NRANKS, my_rank, lc, &s->coll)
                     : v14->connect(s->ctx, handles, NRANKS, my_rank, lc, &s->coll));
    FIT_NCCL(use_v13 ? v13->closeListen(lc) : v14->closeListen(lc));
    FIT_NCCL(rma_create(s->coll, &rctx));
    s->src = malloc(MAX_SIZE);
    s->win = malloc(WIN_SIZE + GUARD);
    s->sig = calloc(NSIG_WORDS, sizeof(uint64_t));
    FIT_CHECK(s->src != NULL && s->win != NULL && s->sig != NULL, "allocation");
    memset(s->win, 0xee, WIN_SIZE + GUARD);
    /* Collective, same order everywhere: source, window, signals. */
    FIT_NCCL(rma_reg(s->coll, s->src, MAX_SIZE, 0, &s->src_mh));
    FIT_NCCL(rma_reg(s->coll, s->win, WIN_SIZE, 0, &s->win_mh));
    FIT_NCCL(rma_reg(s->coll, s->sig, NSIG_WORDS * sizeof(uint64_t),
                     NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET, &s->sig_mh));
}

void rank_teardown(rank_state_t *s)
{
    const int dereg_first = my_rank != 0; /* Close order differs across ranks on purpose. */

    if (dereg_first) {
        FIT_NCCL(use_v13 ? v13->deregMrSym(s->coll, s->src_mh) : v14->deregMrSym(s->coll, s->src_mh));
        if (s->win_mh != NULL) /* NULL: the test deregistered it already. */
            FIT_NCCL(use_v13 ? v13->deregMrSym(s->coll, s->win_mh)
                             : v14->deregMrSym(s->coll, s->win_mh));
        FIT_NCCL(use_v13 ? v13->deregMrSym(s->coll, s->sig_mh) : v14->deregMrSym(s->coll, s->sig_mh));
    }
    FIT_NCCL(use_v13 ? v13->destroyContext(rctx) : v14->destroyContext(rctx));
    rctx = NULL;
    FIT_NCCL(use_v13 ? v13->closeColl(s->coll) : v14->closeColl(s->coll));
    FIT_NCCL(use_v13 ? v13->finalize(s->ctx) : v14->finalize(s->ctx));
    free(s->src);
    free(s->win);
    free(s->sig);
}
