/*
 * ferry's RMA plugin (ncclRmaPlugin_v14 / _v13) over the socket backend,
 * driven as NCCL's RMA proxy drives it: forked ranks, listen handles
 * all-gathered through shared memory, connect(handles[], nranks, rank),
 * createContext, collective regMrSym, then one-sided operations checked
 * byte for byte, with the targets moving only through rmaProgress/test.
 *
 * Cases (--case):
 *   data      v14, 3 ranks: iputSignal (ADD and signal-only INC) to the next
 *             rank, data checked the moment the signal is seen; iget from the
 *             next rank; iput + iflush to the rank after, checked after the
 *             flush; 8 B .. 64 MiB; test() of a finished request; then one
 *             rank closes first and the others see no error.
 *   v13       the same over ncclRmaPlugin_v13 (GIN v13 layout), smaller sizes.
 *   threads   the data case up to 1 MiB with a second thread per rank calling
 *             rmaProgress and queryLastError all along, as NCCL's RMA progress
 *             thread does while another thread posts, tests and registers
 *             (for TSan).
 *   misuse    strangers knock on rank 2's listener before the group connects
 *             (junk bytes, a hello cut short): closed and WARNed, the group
 *             connects anyway; rank out of range, a put beyond the target's region refused at
 *             the source (return code and text), a bad signal op, a foreign
 *             handle to test(); then with the source check off (test knob
 *             FERRY_TEST_RMA_NO_SOURCE_CHECK) the target refuses it: the
 *             request fails, both sides WARN, nothing is written, and the
 *             group keeps working.
 *   stall     rank 1 stops progressing while rank 0's put waits for its answer:
 *             the stall WARN (NCCL_FERRY_STALL_WARN_S=1) and the signal dump
 *             (NCCL_FERRY_DUMP_SIGNAL=USR1) both show the RMA request with its
 *             counters; then rank 1 resumes and the put completes.
 *   gpu       NCCL_FERRY_GPU_STAGING=1 on tests/fakecuda: the window and the
 *             signal words in GPU memory (regMrSym type NCCL_PTR_CUDA): a put
 *             with signal from host memory into it, a get out of it, a put
 *             from it, each checked byte for byte through the driver.
 *   gpu-dmabuf  (ib) the same with the windows registered through
 *             regMrSymDmaBuf, on a host with DMA-BUF and no peer-memory module.
 *   killed    rank 2 is SIGKILLed: ranks 0 and 1 see queryLastError report it
 *             within a bound, and a put to it fails instead of hanging.
 *
 * With NCCL_FERRY_BACKEND=ib (fakeibv) the same cases run over verbs
 * (src/ib/ib_rma_*.c): the puts are RDMA WRITEs, the signals atomic
 * fetch-and-adds, gets and flushes RDMA READs, answered by the target's
 * HCA without its CPU. Where the backends differ: a range beyond the
 * target's region is refused at the source with ncclInvalidArgument (the
 * WARN also names the QP), and there is no target-side refusal to test
 * (an HCA refuses a bad rkey range by failing the QP); in the killed case
 * rank 2 is stopped (SIGSTOP) before the survivors post their puts, so
 * they are in flight when it dies (its HCA would answer them otherwise).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "harness_cuda.h"
#include "nccl/rma.h"
#include "socket/sock_rma.h" /* The listen handle's layout, for the strangers. */

#define NRANKS      3
#define MAX_SIZE    (64u << 20)
#define PLAIN_OFF   MAX_SIZE           /* Where plain iput + iflush land in the window. */
#define PLAIN_SIZE  (1u << 20)
#define WIN_SIZE    (MAX_SIZE + PLAIN_SIZE)
#define GUARD       4096               /* Bytes after the window that nothing may touch. */
#define NSIG_WORDS  (2 * NRANKS)       /* ADD words by source, then INC words by source. */
#define WAIT_S      15.0

/* Shared between the forked ranks: handles and a barrier per step. */
typedef struct shared {
    char        handles[NRANKS][NCCL_NET_HANDLE_MAXSIZE];
    _Atomic int arrived[64];
    _Atomic int ready_to_die;
    _Atomic int strangers_done; /* misuse: the parent's junk reached rank 2's listener. */
    _Atomic int stopped_pid;    /* ib stall: rank 1, about to stop itself (SIGSTOP). */
} shared_t;

static shared_t *sh;
static int my_rank;
static int wait_strangers; /* misuse: connect only after the strangers knocked. */
static int use_v13;
static const ncclRma_v14_t *v14;
static const ncclRma_v13_t *v13;
static void *rctx; /* RMA context, once created: barrier waits move it. */
static int with_thread;     /* threads case: a progress thread per rank. */
static int on_ib;           /* NCCL_FERRY_BACKEND=ib: RMA over verbs (fakeibv). */
static _Atomic int thread_stop;

/* ---- the two ABI versions behind one set of calls ---------------------------------- */

static ncclResult_t rma_init(void **ctx)
{
    return use_v13 ? v13->init(ctx, 0xfe44, fit_logger) : v14->init(ctx, 0xfe44, fit_logger);
}

static ncclResult_t rma_create(void *coll, void **ctx)
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

static ncclResult_t rma_reg(void *coll, void *data, size_t size, uint64_t flags, void **mh)
{
    if (use_v13) {
        void *gin = NULL;
        ncclResult_t rc = v13->regMrSym(coll, data, size, NCCL_PTR_HOST, flags, mh, &gin);

        FIT_CHECK(rc != ncclSuccess || gin != NULL, "v13 regMrSym gave no GIN handle");
        return rc;
    }
    return v14->regMrSym(coll, data, size, NCCL_PTR_HOST, flags, mh);
}

static ncclResult_t rma_iput(uint64_t soff, void *smh, size_t size, uint64_t doff, void *dmh,
                             uint32_t rank, void **req)
{
    return use_v13 ? v13->iput(rctx, 0, soff, smh, size, doff, dmh, rank, req)
                   : v14->iput(rctx, 0, soff, smh, size, doff, dmh, rank, req);
}

static ncclResult_t rma_iput_signal(uint64_t soff, void *smh, size_t size, uint64_t doff,
                                    void *dmh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                    uint64_t value, uint32_t op, void **req)
{
    return use_v13 ? v13->iputSignal(rctx, 0, soff, smh, size, doff, dmh, rank, sig_off, sig_mh,
                                     value, op, req)
                   : v14->iputSignal(rctx, 0, soff, smh, size, doff, dmh, rank, sig_off, sig_mh,
                                     value, op, true, req);
}

static ncclResult_t rma_iget(uint64_t roff, void *rmh, size_t size, uint64_t loff, void *lmh,
                             uint32_t rank, void **req)
{
    return use_v13 ? v13->iget(rctx, 0, roff, rmh, size, loff, lmh, rank, req)
                   : v14->iget(rctx, 0, roff, rmh, size, loff, lmh, rank, req);
}

static ncclResult_t rma_iflush(void *mh, uint32_t rank, void **req)
{
    return use_v13 ? v13->iflush(rctx, 0, mh, rank, req) : v14->iflush(rctx, 0, mh, rank, req);
}

static ncclResult_t rma_test(void *coll, void *req, int *done)
{
    return use_v13 ? v13->test(coll, req, done) : v14->test(coll, req, done);
}

static void rma_progress(void)
{
    if (rctx != NULL)
        FIT_NCCL(use_v13 ? v13->ginProgress(rctx) : v14->rmaProgress(rctx));
}

static int rma_has_error(void)
{
    bool err = false;

    FIT_NCCL(use_v13 ? v13->queryLastError(rctx, &err) : v14->queryLastError(rctx, &err));
    return err;
}

/* ---- helpers ---------------------------------------------------------------------- */

/* All ranks reach step k; the waiting keeps this rank's RMA moving (peers may need answers). */
static void barrier(int k)
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

static unsigned char pat(int src, int round, size_t i)
{
    return (unsigned char)(i * 131u + (size_t)src * 17u + (size_t)round * 29u + 7u);
}

static void fill(unsigned char *buf, size_t n, int src, int round)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = pat(src, round, i);
}

static void check_bytes(const unsigned char *buf, size_t n, int src, int round, const char *what)
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

/* test() until done; returns its last result (success expected unless want_err). */
static ncclResult_t wait_req(void *coll, void *req, const char *what)
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

static void wait_word(volatile uint64_t *w, uint64_t want, const char *what)
{
    double end = fit_now() + WAIT_S * fit_time_scale();

    while (__atomic_load_n(w, __ATOMIC_ACQUIRE) != want) {
        FIT_CHECK(fit_now() < end, "%s: signal word is %llu, want %llu after %.0f s", what,
                  (unsigned long long)*w, (unsigned long long)want, WAIT_S);
        rma_progress();
    }
}

/* ---- one rank ------------------------------------------------------------------------ */

typedef struct rank_state {
    void          *ctx, *coll;
    unsigned char *src, *win;
    uint64_t      *sig;
    void          *src_mh, *win_mh, *sig_mh;
} rank_state_t;

static void rank_setup(rank_state_t *s, int step0)
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

static void rank_teardown(rank_state_t *s)
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

static void round_trip(rank_state_t *s, int round, size_t size, int step)
{
    int next = (my_rank + 1) % NRANKS, prev = (my_rank + NRANKS - 1) % NRANKS;
    int far = (my_rank + 2) % NRANKS, from_far = (my_rank + NRANKS - 2) % NRANKS;
    size_t plain = size < PLAIN_SIZE ? size : PLAIN_SIZE;
    uint64_t add = (uint64_t)(round + 1) * 1000u + (uint64_t)my_rank;
    uint64_t want_add = 0;
    void *req = NULL;
    double t0, t_put, t_get;
    int done = 0;

    for (int k = 0; k <= round; k++)
        want_add += (uint64_t)(k + 1) * 1000u + (uint64_t)prev;
    fill(s->src, size, my_rank, round);
    /* Put with ADD signal to the next rank; its data must be there once the signal is. */
    t0 = fit_now();
    FIT_NCCL(rma_iput_signal(0, s->src_mh, size, 0, s->win_mh, (uint32_t)next,
                             8u * (uint64_t)my_rank, s->sig_mh, add, NCCL_NET_SIGNAL_OP_ADD,
                             &req));
    FIT_NCCL(wait_req(s->coll, req, "iputSignal"));
    if (round == 0) {
        /* A finished request is no request any more. */
        fit_log_expect("must be tested until it reports done");
        FIT_CHECK(rma_test(s->coll, req, &done) == ncclInvalidUsage && !done,
                  "test() of a finished request did not say ncclInvalidUsage");
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "RMA test(", "must be tested until it "
                               "reports done", NULL, NULL, 0) >= 0, "no WARN for the finished "
                  "request");
    }
    wait_word(&s->sig[prev], want_add, "ADD signal");
    check_bytes(s->win, size, prev, round, "iputSignal payload at the signal");
    t_put = fit_now() - t0;
    /* Signal only (no payload), INC: the word counts rounds. */
    FIT_NCCL(rma_iput_signal(0, NULL, 0, 0, NULL, (uint32_t)next,
                             8u * (uint64_t)(NRANKS + my_rank), s->sig_mh, 12345,
                             NCCL_NET_SIGNAL_OP_INC, &req));
    FIT_NCCL(wait_req(s->coll, req, "signal-only iputSignal"));
    wait_word(&s->sig[NRANKS + prev], (uint64_t)round + 1, "INC signal");
    barrier(step);
    /* Get back from the next rank what we put there. */
    memset(s->src, 0, size);
    t0 = fit_now();
    FIT_NCCL(rma_iget(0, s->win_mh, size, 0, s->src_mh, (uint32_t)next, &req));
    FIT_NCCL(wait_req(s->coll, req, "iget"));
    t_get = fit_now() - t0;
    check_bytes(s->src, size, my_rank, round, "iget");
    /* Plain put to the rank after next, then a flush: applied once the flush is done. */
    fill(s->src, plain, my_rank, round + 100);
    FIT_NCCL(rma_iput(0, s->src_mh, plain, PLAIN_OFF, s->win_mh, (uint32_t)far, &req));
    FIT_NCCL(wait_req(s->coll, req, "iput"));
    FIT_NCCL(rma_iflush(s->win_mh, (uint32_t)far, &req));
    FIT_NCCL(wait_req(s->coll, req, "iflush"));
    barrier(step + 1);
    check_bytes(s->win + PLAIN_OFF, plain, from_far, round + 100, "iput after iflush");
    for (size_t i = 0; i < GUARD; i++)
        FIT_CHECK(s->win[WIN_SIZE + i] == 0xee, "guard byte %zu after the window written", i);
    if (my_rank == 0)
        printf("rank 0: %zu B: iputSignal+check %.4f s, iget %.4f s\n", size, t_put, t_get);
    barrier(step + 2);
}

/* What NCCL's RMA progress thread does while other threads post and test. */
static void *progress_thread(void *arg)
{
    (void)arg;
    for (long i = 0; i < 100000000L && !atomic_load(&thread_stop); i++) {
        rma_progress();
        FIT_CHECK(!rma_has_error(), "queryLastError in the progress thread");
        usleep(20);
    }
    return NULL;
}

static void case_data(void)
{
    static const size_t sizes[] = { 8, 4096, (1u << 20) + 3, MAX_SIZE };
    /*
     * ib threads (TSan): 8 B and 4 KiB; every byte an emulated NIC thread wrote
     * is a (suppressed) TSan report, which at 1 MiB outlasts the barriers.
     */
    const int nsizes = use_v13 || with_thread ? (with_thread ? (on_ib ? 2 : 3) : 2) : 4;
    pthread_t th;
    rank_state_t s;

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    if (with_thread)
        FIT_CHECK(pthread_create(&th, NULL, progress_thread, NULL) == 0, "pthread_create");
    for (int i = 0; i < nsizes; i++)
        round_trip(&s, i, sizes[i + (use_v13 ? 1 : 0)], 1 + 3 * i);
    if (my_rank == 0) {
        /* Beyond the size rank 1 registered: refused here, before anything leaves. */
        void *req = (void *)0x1;
        char text[512];

        fit_log_expect("registered as region");
        FIT_CHECK(rma_iput(0, s.src_mh, 8192, WIN_SIZE - 4096, s.win_mh, 1, &req) ==
                  (on_ib ? ncclInvalidArgument : ncclInvalidUsage) && req == NULL,
                  "an iput beyond rank 1's window was not refused with %s",
                  on_ib ? "ncclInvalidArgument" : "ncclInvalidUsage");
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "offset 68153344 + size 8192 is beyond the "
                               "68157440 bytes rank 1", "registered as region 1",
                               "nothing was sent", text, sizeof(text)) >= 0,
                  "no WARN naming the refused range");
        FIT_CHECK(!on_ib || (strstr(text, ", QP 0x") != NULL && strstr(text, "127.0.0.1:") !=
                             NULL), "the ib WARN names no peer address and QP: %s", text);
        printf("rank 0: source check said: %s\n", text);
    }
    if (with_thread) {
        /* A registration while the progress thread runs, then it stops before the close. */
        void *extra;
        char *buf = calloc(1, 4096);

        FIT_NCCL(rma_reg(s.coll, buf, 4096, 0, &extra));
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, extra) : v14->deregMrSym(s.coll, extra));
        free(buf);
        barrier(30);
        atomic_store(&thread_stop, 1);
        pthread_join(th, NULL);
    }
    /* Close order: rank 0 leaves first; the others keep progressing and see no error. */
    if (my_rank == 0) {
        rank_teardown(&s);
        atomic_fetch_add(&sh->arrived[40], 1);
    } else {
        double end = fit_now() + WAIT_S;

        while (atomic_load(&sh->arrived[40]) == 0) {
            FIT_CHECK(fit_now() < end, "rank 0 did not close");
            rma_progress();
            usleep(100);
        }
        for (int i = 0; i < 200; i++) {
            rma_progress();
            usleep(500);
        }
        FIT_CHECK(!rma_has_error(), "queryLastError reports an error after rank 0 closed in "
                  "order");
        /* Ranks 1 and 2 leave together (rank 0 is gone: no barrier of three). */
        atomic_fetch_add(&sh->arrived[41], 1);
        end = fit_now() + WAIT_S;
        while (atomic_load(&sh->arrived[41]) < NRANKS - 1) {
            FIT_CHECK(fit_now() < end, "ranks 1 and 2 did not both reach the close");
            rma_progress();
            usleep(100);
        }
        rank_teardown(&s);
    }
    fit_log_check_clean("data case");
}

static void case_misuse(void)
{
    rank_state_t s;
    void *req = (void *)0x1;
    int done = 0, line;
    char text[512];

    /* The target's own check is what the second half is about. */
    setenv("FERRY_TEST_RMA_NO_SOURCE_CHECK", "1", 1);
    memset(&s, 0, sizeof(s));
    if (my_rank == 2)
        fit_log_expect("closed a connection from");
    if (my_rank == 1) /* Its progress may meet rank 0's bad put while it still registers. */
        fit_log_expect("refused PUT");
    wait_strangers = 1;
    rank_setup(&s, 0);
    unsetenv("FERRY_TEST_RMA_NO_SOURCE_CHECK");
    if (my_rank == 2) {
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "closed a connection from", "wrong magic",
                               "still waiting for the group's ranks", text, sizeof(text)) >= 0,
                  "no WARN for the junk stranger");
        printf("rank 2: junk stranger: %s\n", text);
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "closed a connection from",
                               "no complete hello (it hung up", NULL, NULL, 0) >= 0,
                  "no WARN for the stranger that hung up");
    }
    if (my_rank == 0) {
        fit_log_expect("is out of range");
        FIT_CHECK(rma_iput(0, s.src_mh, 8, 0, s.win_mh, NRANKS, &req) == ncclInvalidArgument &&
                  req == NULL, "iput to rank %d was not refused as ncclInvalidArgument", NRANKS);
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "RMA iput", "rank 3 is out of range",
                               "ranks 0..2", NULL, 0) >= 0, "no WARN naming the bad rank");
        fit_log_expect("is none NCCL defines");
        FIT_CHECK(rma_iput_signal(0, s.src_mh, 8, 0, s.win_mh, 1, 0, s.sig_mh, 1, 7, &req) ==
                  ncclInvalidArgument, "signal op 7 accepted");
        fit_log_expect("test(");
        FIT_CHECK(rma_test(s.coll, (void *)0x12345, &done) == ncclInvalidUsage && !done,
                  "test() of a foreign handle accepted");
    }
    if (my_rank == 0 && on_ib) {
        /* ib: refused at the source (an HCA would fail the QP on a bad range). */
        fit_log_expect("registered as region");
        FIT_CHECK(rma_iput(0, s.src_mh, 8192, WIN_SIZE - 4096, s.win_mh, 1, &req) ==
                  ncclInvalidArgument && req == NULL, "the out-of-bounds put was not refused "
                  "with ncclInvalidArgument");
        FIT_CHECK(rma_iget(WIN_SIZE, s.win_mh, 1, 0, s.src_mh, 1, &req) == ncclInvalidArgument &&
                  req == NULL, "an iget one byte beyond rank 1's window was not refused");
        fit_log_expect("64-bit aligned word");
        FIT_CHECK(rma_iput_signal(0, NULL, 0, 0, NULL, 1, 4, s.sig_mh, 1,
                                  NCCL_NET_SIGNAL_OP_INC, &req) == ncclInvalidArgument &&
                  req == NULL, "a signal at offset 4 was not refused");
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "RMA iput", "offset 68153344 + size 8192 is "
                               "beyond the 68157440 bytes rank 1 (127.0.0.1:",
                               "registered as region 1; nothing was sent", text,
                               sizeof(text)) >= 0 && strstr(text, ", QP 0x") != NULL,
                  "no source WARN naming rank, region, offset, size, address and QP");
        printf("rank 0: source check said: %s\n", text);
        fill(s.src, 4096, 0, 7);
        FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iput after the refusal"));
        FIT_NCCL(rma_iflush(s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iflush after the refusal"));
        FIT_CHECK(!rma_has_error(), "queryLastError reports an error after refusals");
    } else if (my_rank == 0) {
        /* Beyond the target's window: refused by the target, which writes nothing. */
        fit_log_expect("was refused by the target");
        line = fit_log_lines();
        FIT_NCCL(rma_iput(0, s.src_mh, 8192, WIN_SIZE - 4096, s.win_mh, 1, &req));
        FIT_CHECK(wait_req(s.coll, req, "out-of-bounds iput") == ncclInvalidUsage,
                  "the out-of-bounds put did not end with ncclInvalidUsage");
        FIT_CHECK(fit_log_find(line, NCCL_LOG_WARN, "PUT to rank 1", "refused by the target",
                               "offset 68153344, size 8192", text, sizeof(text)) >= 0,
                  "no initiator WARN naming the put");
        printf("rank 0: initiator said: %s\n", text);
        /* The group still works afterwards. */
        fill(s.src, 4096, 0, 7);
        FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iput after the refusal"));
        FIT_NCCL(rma_iflush(s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iflush after the refusal"));
    }
    barrier(1);
    if (my_rank == 1 && on_ib) {
        for (size_t i = 0; i < 4096; i++)
            FIT_CHECK(s.win[WIN_SIZE - 4096 + i] == 0xee && s.win[WIN_SIZE + i] == 0xee,
                      "the refused put wrote byte %zu", i);
        check_bytes(s.win, 4096, 0, 7, "put after the refusal");
        for (int i = 0; i < NSIG_WORDS; i++)
            FIT_CHECK(s.sig[i] == 0, "signal word %d is %llu after refused signals", i,
                      (unsigned long long)s.sig[i]);
    } else if (my_rank == 1) {
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "refused PUT seq", "from rank 0",
                               "offset 68153344 + size 8192 is beyond region 1", text,
                               sizeof(text)) >= 0, "no target WARN naming the refused put");
        printf("rank 1: target said: %s\n", text);
        for (size_t i = 0; i < 4096; i++)
            FIT_CHECK(s.win[WIN_SIZE - 4096 + i] == 0xee && s.win[WIN_SIZE + i] == 0xee,
                      "the refused put wrote byte %zu", i);
        check_bytes(s.win, 4096, 0, 7, "put after the refusal");
    }
    barrier(2);
    if (on_ib) {
        /* A failed QP: rank 1 drops its window's registration, rank 0's put to it fails. */
        if (my_rank == 1) {
            /* Its QP to rank 0 takes the access error too (an async event). */
            fit_log_expect("async event");
            fit_log_expect("IBV_EVENT_QP_ACCESS_ERR");
            FIT_NCCL(v14->deregMrSym(s.coll, s.win_mh));
            s.win_mh = NULL;
        }
        barrier(3);
        if (my_rank == 0) {
            fit_log_expect("completed with");
            fit_log_expect("RMA rank 1 (");
            fill(s.src, 4096, 0, 8);
            FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
            FIT_CHECK(wait_req(s.coll, req, "iput to a dropped registration") == ncclRemoteError,
                      "a put the target's HCA refused did not end with ncclRemoteError");
            FIT_CHECK(rma_has_error(), "queryLastError silent after a failed QP");
            FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "rank 1 (127.0.0.1:", "completed with "
                                   "remote access error", "the target refused the rkey or "
                                   "range", text, sizeof(text)) >= 0 &&
                      strstr(text, "QP 0x") != NULL && strstr(text, "region 1, offset 0") != NULL,
                      "no WARN naming the failed QP, the peer and the operation");
            printf("rank 0: failed QP: %s\n", text);
            fit_log_expect("failed earlier");
            FIT_CHECK(rma_iput(0, s.src_mh, 8, 0, s.win_mh, 1, &req) == ncclRemoteError &&
                      req == NULL, "a put to the failed peer was not refused");
            /* Rank 2 is unaffected. */
            FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 2, &req));
            FIT_NCCL(wait_req(s.coll, req, "iput to rank 2 after rank 1's QP failed"));
        }
        barrier(4);
        if (my_rank == 2)
            check_bytes(s.win, 4096, 0, 8, "put to rank 2 after rank 1's QP failed");
        if (my_rank == 1) {
            double end = fit_now() + WAIT_S;

            while (!rma_has_error())
                FIT_CHECK(fit_now() < end && usleep(1000) == 0, "queryLastError on rank 1 "
                          "silent after its QP to rank 0 took an access error");
            FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "rank 0 (127.0.0.1:", "IBV_EVENT_QP_ACCESS_ERR",
                                   "queryLastError reports it", text, sizeof(text)) >= 0,
                      "no WARN on rank 1 naming its failed QP");
            printf("rank 1: failed QP: %s\n", text);
        }
        barrier(5);
    }
    rank_teardown(&s);
    fit_log_check_clean("misuse case");
}

/* Bounded wait for a log line with both needles from line `from` on; its index or -1. */
static int wait_log(int from, const char *n1, const char *n2, double seconds, void *coll,
                    void *req, int *done)
{
    double end = fit_now() + seconds;
    int line;

    while ((line = fit_log_find(from, -1, n1, n2, NULL, NULL, 0)) < 0 && fit_now() < end) {
        if (req != NULL && !*done)
            FIT_NCCL(rma_test(coll, req, done));
        usleep(1000);
    }
    return line;
}

/* ib stall: rank 1 has stopped itself (state T in /proc), bounded. */
static void wait_stopped(void)
{
    double end = fit_now() + WAIT_S;
    char path[64], buf[256];

    for (;;) {
        int pid = atomic_load(&sh->stopped_pid);
        FILE *f;

        FIT_CHECK(fit_now() < end, "rank 1 did not stop");
        if (pid != 0) {
            snprintf(path, sizeof(path), "/proc/%d/stat", pid);
            f = fopen(path, "r");
            if (f != NULL) {
                char *paren = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;

                fclose(f);
                if (paren != NULL && paren[1] == ' ' && paren[2] == 'T')
                    return;
            }
        }
        usleep(1000);
    }
}

static void case_stall(void)
{
    rank_state_t s;
    void *req = NULL;
    int done = 0, line;
    char text[1024];

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    barrier(1);
    if (my_rank == 1) {
        /* No progress here until rank 0 has seen the stall and the dump. */
        double end = fit_now() + WAIT_S;

        if (on_ib) {
            /* Our HCA answers without us: stop the whole process (rank 0 resumes it). */
            atomic_store(&sh->stopped_pid, (int)getpid());
            raise(SIGSTOP);
        }
        while (atomic_load(&sh->ready_to_die) == 0 && fit_now() < end)
            usleep(1000);
    } else if (my_rank == 0) {
        fit_log_expect("has made no progress");
        if (on_ib)
            wait_stopped();
        fill(s.src, 4096, 0, 9);
        FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
        line = wait_log(0, "rma rank 0->1", "has made no progress", 5.0, s.coll, req, &done);
        FIT_CHECK(line >= 0 && !done, "no stall WARN for the unanswered put (done %d)", done);
        fit_log_find(line, -1, "rma rank 0->1", NULL, NULL, text, sizeof(text));
        FIT_CHECK(on_ib ? strstr(text, "no completion yet") != NULL &&
                              strstr(text, "work requests posted 1") != NULL &&
                              strstr(text, "(region 1, offset 0, 4096 bytes at the target)") != NULL
                        : strstr(text, "Its frame left, no answer yet") != NULL &&
                              strstr(text, "frames posted 1") != NULL,
                  "stall WARN: %s", text);
        printf("rank 0: stall WARN: %s\n", text);
        line = fit_log_lines();
        raise(SIGUSR1);
        line = wait_log(line, "rma rank 0->1", "messages posted 1", 5.0, NULL, NULL, NULL);
        FIT_CHECK(line >= 0, "the dump shows no RMA ring towards rank 1");
        fit_log_find(line, -1, "rma rank 0->1", NULL, NULL, text, sizeof(text));
        printf("rank 0: dump: %s\n", text);
        FIT_CHECK(fit_log_find(line, -1, on_ib ? "work requests posted 1" : "frames posted 1",
                               NULL, NULL, NULL, 0) >= 0,
                  "the dump does not show the put's counters");
        atomic_store(&sh->ready_to_die, 1);
        if (on_ib)
            kill((pid_t)atomic_load(&sh->stopped_pid), SIGCONT);
        FIT_NCCL(wait_req(s.coll, req, "the put once rank 1 progresses"));
    }
    barrier(2);
    if (my_rank == 1)
        check_bytes(s.win, 4096, 0, 9, "the put after the stall");
    barrier(3);
    rank_teardown(&s);
    fit_log_check_clean("stall case");
}

/* GPU memory through the stand-in driver: window and signals on the "device". */
#define GPU_WIN   (4u << 20)
#define GPU_PLAIN (2u << 20)

static uint64_t gpu_word(fit_cu_t *cu, unsigned long long sig, int i)
{
    uint64_t v = 0;

    FIT_CHECK(cu->dtoh(&v, sig + 8u * (unsigned)i, 8) == 0, "cuMemcpyDtoH of a signal word");
    return v;
}

static void gpu_check(fit_cu_t *cu, unsigned long long dev, size_t n, int src, int round,
                      const char *what)
{
    unsigned char *host = malloc(n);

    FIT_CHECK(host != NULL && cu->dtoh(host, dev, n) == 0, "cuMemcpyDtoH of %zu bytes", n);
    check_bytes(host, n, src, round, what);
    free(host);
}

/*
 * gpu-dmabuf (ib only, no GPUDirect setting and no peer-memory module): the
 * properties say DMA-BUF instead of CUDA, as NCCL's own IB does; regMrSym of
 * GPU memory is refused with a WARN that points at DMA-BUF, and the windows
 * are registered through regMrSymDmaBuf with the fd the driver exports.
 */
static int gpu_dmabuf;

typedef int (*fit_cu_range_handle_fn)(void *, unsigned long long, size_t, int, unsigned long long);

static void *gpu_reg(void *coll, fit_cu_range_handle_fn handle_fn, unsigned long long dev,
                     size_t size)
{
    void *mh = NULL;
    int fd = -1;

    if (!gpu_dmabuf) {
        FIT_NCCL(v14->regMrSym(coll, (void *)(uintptr_t)dev, size, NCCL_PTR_CUDA, 0, &mh));
        return mh;
    }
    /* 1: CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD. */
    FIT_CHECK(handle_fn(&fd, dev, size, 1, 0) == 0 && fd >= 0, "DMA-BUF fd of %zu bytes", size);
    FIT_NCCL(v14->regMrSymDmaBuf(coll, (void *)(uintptr_t)dev, size, NCCL_PTR_CUDA, 0, fd, 0,
                                 &mh));
    close(fd); /* NCCL closes it right after the call: the registration must not need it. */
    return mh;
}

static void case_gpu(void)
{
    static const size_t sizes[] = { 8, (1u << 20) + 3 };
    int next = (my_rank + 1) % NRANKS, prev = (my_rank + NRANKS - 1) % NRANKS;
    int far = (my_rank + 2) % NRANKS, from_far = (my_rank + NRANKS - 2) % NRANKS;
    unsigned long long win = 0, sig = 0;
    void *lc, *handles[NRANKS], *ctx, *coll, *src_mh, *win_mh, *sig_mh, *req;
    ncclNetProperties_v12_t props;
    unsigned char *src = malloc(GPU_WIN);
    uint64_t want = 0;
    fit_cu_t cu;

    int want_ptr = !on_ib ? NCCL_PTR_HOST | NCCL_PTR_CUDA
                   : gpu_dmabuf ? NCCL_PTR_HOST | NCCL_PTR_DMABUF
                                : NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF;
    fit_cu_range_handle_fn handle_fn;
    void *bad_mh = NULL;

    FIT_NCCL(rma_init(&ctx));
    FIT_NCCL(v14->getProperties(0, &props));
    FIT_CHECK(props.ptrSupport == want_ptr, "ptrSupport %d, want %d (%s)", props.ptrSupport,
              want_ptr, !on_ib ? "socket, GPU staging" : gpu_dmabuf ? "ib, DMA-BUF only"
                                                                     : "ib, GPUDirect and DMA-BUF");
    fit_cu_open(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), &cu);
    handle_fn = (fit_cu_range_handle_fn)fit_cu_sym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD),
                                                   "cuMemGetHandleForAddressRange");
    FIT_CHECK(src != NULL && cu.alloc(&win, GPU_WIN) == 0 && cu.alloc(&sig, 8 * NSIG_WORDS) == 0,
              "allocations");
    FIT_CHECK(cu.htod(sig, (uint64_t[NSIG_WORDS]){ 0 }, 8 * NSIG_WORDS) == 0, "zero signals");
    FIT_NCCL(v14->listen(ctx, 0, sh->handles[my_rank], &lc));
    barrier(0);
    for (int r = 0; r < NRANKS; r++)
        handles[r] = sh->handles[r];
    FIT_NCCL(v14->connect(ctx, handles, NRANKS, my_rank, lc, &coll));
    FIT_NCCL(v14->closeListen(lc));
    FIT_NCCL(rma_create(coll, &rctx));
    FIT_NCCL(v14->regMrSym(coll, src, GPU_WIN, NCCL_PTR_HOST, 0, &src_mh));
    if (gpu_dmabuf) {
        /* Every rank alike: a refused registration still takes its number everywhere. */
        int from = fit_log_lines();

        fit_log_expect("GPU memory is not registered on this host");
        fit_log_expect("RMA regMrSym: GPU memory:");
        FIT_CHECK(v14->regMrSym(coll, (void *)(uintptr_t)win, GPU_WIN, NCCL_PTR_CUDA, 0, &bad_mh)
                      != ncclSuccess && bad_mh == NULL,
                  "regMrSym of GPU memory without GPUDirect refused");
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "no peer-memory module",
                               "DMA-BUF is available", "regMrSymDmaBuf", NULL, 0) >= 0,
                  "the refusal names DMA-BUF as the way");
        /* Host memory has no DMA-BUF: refused by type, with the way to register it. */
        fit_log_expect("a DMA-BUF names GPU memory");
        FIT_CHECK(v14->regMrSymDmaBuf(coll, src, GPU_WIN, NCCL_PTR_HOST, 0, 0, 0, &bad_mh)
                      != ncclSuccess && bad_mh == NULL, "regMrSymDmaBuf of host memory refused");
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "regMrSymDmaBuf", "type must be NCCL_PTR_CUDA",
                               "host memory goes through regMrSym", NULL, 0) >= 0,
                  "the host-memory refusal says why");
    }
    win_mh = gpu_reg(coll, handle_fn, win, GPU_WIN);
    sig_mh = gpu_reg(coll, handle_fn, sig, 8 * NSIG_WORDS);
    for (int round = 0; round < 2; round++) {
        size_t size = sizes[round];
        double end = fit_now() + WAIT_S;

        fill(src, size, my_rank, round);
        FIT_NCCL(rma_iput_signal(0, src_mh, size, 0, win_mh, (uint32_t)next, 8u * (unsigned)my_rank,
                                 sig_mh, 5, NCCL_NET_SIGNAL_OP_ADD, &req));
        FIT_NCCL(wait_req(coll, req, "iputSignal into GPU memory"));
        want += 5;
        while (gpu_word(&cu, sig, prev) != want) {
            FIT_CHECK(fit_now() < end, "GPU signal word %llu, want %llu",
                      (unsigned long long)gpu_word(&cu, sig, prev), (unsigned long long)want);
            rma_progress();
        }
        gpu_check(&cu, win, size, prev, round, "iputSignal payload in GPU memory");
        barrier(1 + 3 * round);
        memset(src, 0, size);
        FIT_NCCL(rma_iget(0, win_mh, size, 0, src_mh, (uint32_t)next, &req));
        FIT_NCCL(wait_req(coll, req, "iget from GPU memory"));
        check_bytes(src, size, my_rank, round, "iget from GPU memory");
        /* From GPU memory (holding prev's data) to the rank after next. */
        FIT_NCCL(rma_iput(0, win_mh, size, GPU_PLAIN, win_mh, (uint32_t)far, &req));
        FIT_NCCL(wait_req(coll, req, "iput from GPU memory"));
        FIT_NCCL(rma_iflush(win_mh, (uint32_t)far, &req));
        FIT_NCCL(wait_req(coll, req, "iflush"));
        barrier(2 + 3 * round);
        gpu_check(&cu, win + GPU_PLAIN, size, (from_far + NRANKS - 1) % NRANKS, round,
                  "iput from GPU memory into GPU memory");
        if (my_rank == 0)
            printf("rank 0: GPU window, %zu B: put+signal, get, put from GPU checked\n", size);
        barrier(3 + 3 * round);
    }
    FIT_NCCL(v14->deregMrSym(coll, src_mh));
    FIT_NCCL(v14->deregMrSym(coll, win_mh));
    FIT_NCCL(v14->deregMrSym(coll, sig_mh));
    FIT_NCCL(v14->destroyContext(rctx));
    rctx = NULL;
    barrier(10);
    FIT_NCCL(v14->closeColl(coll));
    FIT_NCCL(v14->finalize(ctx));
    cu.free_(win);
    cu.free_(sig);
    free(src);
    fit_log_check_clean("gpu case");
}

static void case_killed(void)
{
    rank_state_t s;
    void *req = NULL;
    double t0, seen;
    ncclResult_t rc;

    void *inflight = NULL;
    int done = 0;

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    barrier(1);
    if (my_rank == 2) {
        /* No progress here any more: the survivors' puts stay unanswered until we die. */
        double end = fit_now() + WAIT_S;

        while (!on_ib && atomic_load(&sh->arrived[51]) < 2 && fit_now() < end)
            usleep(1000);
        /* ib: the parent stops us first (our HCA would answer the puts otherwise). */
        atomic_store(&sh->ready_to_die, 1);
        for (;;)
            pause(); /* The parent kills us. */
    }
    while (on_ib && atomic_load(&sh->ready_to_die) != 3)
        usleep(1000);
    fill(s.src, 1 << 20, my_rank, 5);
    FIT_NCCL(rma_iput(0, s.src_mh, 1 << 20, 0, s.win_mh, 2, &inflight));
    atomic_fetch_add(&sh->arrived[51], 1);
    while (atomic_load(&sh->ready_to_die) != 2)
        usleep(1000);
    fit_log_expect("the connection to rank 2");
    fit_log_expect("failed earlier");
    fit_log_expect("connection to rank 2");
    fit_log_expect("rank 2 (");
    fit_log_expect("RMA rank 2 (");
    /* The put in flight when rank 2 died ends with an error, within a bound. */
    t0 = fit_now();
    for (rc = ncclSuccess; rc == ncclSuccess && !done;) {
        FIT_CHECK(fit_now() - t0 < 10.0, "the put in flight to the killed rank still pending "
                  "after 10 s");
        rc = rma_test(s.coll, inflight, &done);
    }
    FIT_CHECK(rc == ncclRemoteError && !done, "the put in flight to the killed rank gave %d "
              "(done %d), not ncclRemoteError", (int)rc, done);
    printf("rank %d: rank 2 killed: its put in flight failed after %.3f s\n", my_rank,
           fit_now() - t0);
    t0 = fit_now();
    while (!rma_has_error()) {
        FIT_CHECK(fit_now() - t0 < 10.0, "queryLastError silent 10 s after rank 2 was killed");
        usleep(200);
    }
    seen = fit_now() - t0;
    if (on_ib)
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "rank 2 (127.0.0.1:", "failed: ",
                               "queryLastError reports it", NULL, 0) >= 0,
                  "no WARN naming the dead rank");
    else
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "the connection to rank 2", "failed",
                               "check that rank 2 is alive", NULL, 0) >= 0,
                  "no WARN naming the dead rank");
    rc = rma_iput(0, s.src_mh, 64, 0, s.win_mh, 2, &req);
    if (rc == ncclSuccess)
        rc = wait_req(s.coll, req, "iput to the dead rank");
    FIT_CHECK(rc == ncclRemoteError, "a put to the dead rank gave %d, not ncclRemoteError",
              (int)rc);
    printf("rank %d: rank 2 killed: queryLastError reported it after %.3f s\n", my_rank, seen);
    /* The survivors still talk to each other. */
    fill(s.src, 4096, my_rank, 3);
    FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, (uint32_t)(1 - my_rank), &req));
    FIT_NCCL(wait_req(s.coll, req, "iput between survivors"));
    FIT_NCCL(rma_iflush(s.win_mh, (uint32_t)(1 - my_rank), &req));
    FIT_NCCL(wait_req(s.coll, req, "iflush between survivors"));
    {
        double end = fit_now() + WAIT_S;

        atomic_fetch_add(&sh->arrived[50], 1);
        while (atomic_load(&sh->arrived[50]) < 2) {
            FIT_CHECK(fit_now() < end, "survivor barrier");
            rma_progress();
            usleep(100);
        }
    }
    check_bytes(s.win, 4096, 1 - my_rank, 3, "survivor put");
    rank_teardown(&s);
}

/*
 * deregMrSym while operations on the region are still moving, the memory
 * unmapped right after (so a late write would crash the rank):
 *  A. rank 1's window leaves while rank 0's 8 MiB put into it is arriving:
 *     the rest is dropped, rank 1 writes nothing more, rank 0's put fails;
 *  B. rank 1's source leaves while its own 8 MiB put from it is queued and
 *     partly sent: the put still completes, rank 0 gets every byte.
 * Rank 2 only takes part in the collective calls.
 */
#define DEREG_SIZE (8u << 20)

static void *map_region(void)
{
    void *m = mmap(NULL, DEREG_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    FIT_CHECK(m != MAP_FAILED, "mmap %u bytes", DEREG_SIZE);
    return m;
}

static void wait_flag(int k, int want)
{
    double end = fit_now() + WAIT_S * fit_time_scale();

    while (atomic_load(&sh->arrived[k]) < want) { /* No progress here, on purpose. */
        FIT_CHECK(fit_now() < end, "flag %d: %d of %d after %.0f s", k,
                  atomic_load(&sh->arrived[k]), want, WAIT_S);
        usleep(200);
    }
}

static void case_dereg(void)
{
    rank_state_t s;
    unsigned char *mwin, *msrc;
    void *mwin_mh, *msrc_mh, *req = NULL;
    ncclResult_t rc;
    double end;

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    mwin = map_region();
    msrc = map_region();
    memset(mwin, 0xee, DEREG_SIZE);
    FIT_NCCL(rma_reg(s.coll, mwin, DEREG_SIZE, 0, &mwin_mh));
    FIT_NCCL(rma_reg(s.coll, msrc, DEREG_SIZE, 0, &msrc_mh));
    barrier(1);

    /* A: the target's window leaves mid-payload. */
    if (my_rank == 0) {
        fill(msrc, DEREG_SIZE, 0, 11);
        fit_log_expect("was refused by the target");
        FIT_NCCL(rma_iput(0, msrc_mh, DEREG_SIZE, 0, mwin_mh, 1, &req));
        atomic_fetch_add(&sh->arrived[40], 1);
        rc = wait_req(s.coll, req, "put into a window deregistered under it");
        FIT_CHECK(rc != ncclSuccess, "the put into a window deregistered while its payload "
                  "arrived reported success");
        printf("rank 0: the put into the window rank 1 deregistered mid-payload ended with %d\n",
               (int)rc);
    } else if (my_rank == 1) {
        wait_flag(40, 1);
        fit_log_expect("was deregistered while the payload of rank 0's");
        /* One progress call reads at most 4 MiB: once the first byte landed, more is to come. */
        end = fit_now() + WAIT_S * fit_time_scale();
        while (mwin[0] == 0xee) {
            FIT_CHECK(fit_now() < end, "rank 0's put never started landing");
            rma_progress();
        }
        FIT_CHECK(mwin[DEREG_SIZE - 1] == 0xee, "the whole 8 MiB landed in one progress call");
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, mwin_mh) : v14->deregMrSym(s.coll, mwin_mh));
        FIT_CHECK(munmap(mwin, DEREG_SIZE) == 0, "munmap");
        mwin = NULL;
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "was deregistered while the payload of rank 0's",
                               "the rest is dropped", NULL, NULL, 0) >= 0,
                  "no WARN about the put cut short");
    }
    barrier(2);
    if (mwin != NULL) { /* Ranks 0 and 2: the collective deregistration. */
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, mwin_mh) : v14->deregMrSym(s.coll, mwin_mh));
        munmap(mwin, DEREG_SIZE);
    }
    barrier(3);

    /* B: the source leaves while its put is queued and partly sent. */
    if (my_rank == 1) {
        fill(msrc, DEREG_SIZE, 1, 12);
        FIT_NCCL(rma_iput(0, msrc_mh, DEREG_SIZE, 0, s.win_mh, 0, &req));
        rma_progress(); /* Some of it leaves; rank 0 reads nothing yet. */
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, msrc_mh) : v14->deregMrSym(s.coll, msrc_mh));
        FIT_CHECK(munmap(msrc, DEREG_SIZE) == 0, "munmap");
        msrc = NULL;
        atomic_fetch_add(&sh->arrived[41], 1);
        FIT_NCCL(wait_req(s.coll, req, "put from a source deregistered while queued"));
        printf("rank 1: the put from a source deregistered while queued completed\n");
    } else if (my_rank == 0) {
        wait_flag(41, 1);
    }
    barrier(4);
    if (my_rank == 0) {
        check_bytes(s.win, DEREG_SIZE, 1, 12, "put from a deregistered source");
        printf("rank 0: all %u bytes of rank 1's put arrived intact\n", DEREG_SIZE);
    }
    if (msrc != NULL) {
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, msrc_mh) : v14->deregMrSym(s.coll, msrc_mh));
        munmap(msrc, DEREG_SIZE);
    }
    barrier(5);
    fit_log_check_clean("dereg case");
    rank_teardown(&s);
}

/* Two strangers at rank 2's listener: 64 junk bytes, and 10 bytes then a hang-up. */
static void knock_on_rank2(void)
{
    const ferry_sock_rma_handle_t *h = (const void *)sh->handles[2];
    double end = fit_now() + WAIT_S;
    struct sockaddr_in sa;
    char junk[64];

    while (atomic_load(&sh->arrived[0]) < NRANKS)
        FIT_CHECK(fit_now() < end && usleep(1000) == 0, "the ranks never listened");
    FIT_CHECK(h->family == AF_INET, "rank 2 listens on family %d, not IPv4", h->family);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = h->port;
    memcpy(&sa.sin_addr, h->addr, 4);
    memset(junk, 'J', sizeof(junk));
    for (int i = 0; i < 2; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        FIT_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
                  "stranger %d could not connect", i);
        FIT_CHECK(send(fd, junk, i == 0 ? sizeof(junk) : 10, MSG_NOSIGNAL) > 0, "send");
        usleep(100000); /* Rank 2 reads it while the connection is still up. */
        close(fd);
    }
    atomic_store(&sh->strangers_done, 1);
}

static void run_rank(int rank, void (*fn)(void))
{
    char role[16];

    my_rank = rank;
    snprintf(role, sizeof(role), "rank%d", rank);
    fit_set_role(role);
    fn();
    fit_child_exit(0);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *which = argc >= 3 && strcmp(argv[1], "--case") == 0 ? argv[2] : "data";
    void (*fn)(void) = NULL;
    pid_t pids[NRANKS];
    int fails = 0, nprocs = NRANKS;
    double t0 = fit_now();
    void *lib;

    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    FIT_CHECK(lib != NULL, "dlopen %s: %s", path, dlerror());
    v14 = dlsym(lib, "ncclRmaPlugin_v14");
    v13 = dlsym(lib, "ncclRmaPlugin_v13");
    FIT_CHECK(v14 != NULL && v13 != NULL, "ncclRmaPlugin_v14/_v13 not exported");
    FIT_CHECK(strcmp(v14->name, "ferry") == 0 && strcmp(v13->name, "ferry") == 0, "name %s",
              v14->name);
    /* NCCL calls every member it finds without a NULL check (rmaProgress aside): all set. */
    for (size_t i = 1; i < sizeof(*v14) / sizeof(void *); i++)
        FIT_CHECK(((void *const *)(const void *)v14)[i] != NULL &&
                  ((void *const *)(const void *)v13)[i] != NULL, "member %zu is NULL", i);
    on_ib = getenv("NCCL_FERRY_BACKEND") != NULL && strcmp(getenv("NCCL_FERRY_BACKEND"), "ib") == 0;
    if (strcmp(which, "data") == 0)
        fn = case_data;
    else if (strcmp(which, "v13") == 0)
        fn = case_data, use_v13 = 1;
    else if (strcmp(which, "threads") == 0)
        fn = case_data, with_thread = 1;
    else if (strcmp(which, "misuse") == 0)
        fn = case_misuse;
    else if (strcmp(which, "killed") == 0)
        fn = case_killed;
    else if (strcmp(which, "stall") == 0)
        fn = case_stall;
    else if (strcmp(which, "gpu") == 0)
        fn = case_gpu;
    else if (strcmp(which, "gpu-dmabuf") == 0) {
        gpu_dmabuf = 1;
        fn = case_gpu;
    }
    else if (strcmp(which, "dereg") == 0)
        fn = case_dereg;
    FIT_CHECK(fn != NULL, "unknown case %s (data, v13, threads, misuse, stall, gpu, gpu-dmabuf, killed, dereg)", which);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    FIT_CHECK(sh != MAP_FAILED, "mmap");
    memset(sh, 0, sizeof(*sh));
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        FIT_CHECK(pids[r] >= 0, "fork");
        if (pids[r] == 0)
            run_rank(r, fn);
    }
    if (fn == case_misuse)
        knock_on_rank2();
    if (fn == case_killed) {
        double end = fit_now() + WAIT_S;

        while (atomic_load(&sh->ready_to_die) != 1 && fit_now() < end)
            usleep(1000);
        if (on_ib) {
            /* Stopped, its HCA answers nothing: the survivors' puts stay in flight. */
            kill(pids[2], SIGSTOP);
            atomic_store(&sh->ready_to_die, 3);
            while (atomic_load(&sh->arrived[51]) < 2 && fit_now() < end)
                usleep(1000);
            usleep(50000);
        }
        kill(pids[2], SIGKILL);
        waitpid(pids[2], NULL, 0);
        atomic_store(&sh->ready_to_die, 2);
        nprocs = 2;
    }
    for (int r = 0; r < nprocs; r++) {
        double end = fit_now() + 60.0 * fit_time_scale();
        int status = 0;
        pid_t got;

        while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 && fit_now() < end)
            usleep(10000);
        if (got != pids[r]) {
            fprintf(stderr, "rank %d did not finish in 60 s: killed\n", r);
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status, 0);
            fails++;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d failed (status 0x%x)\n", r, status);
            fails++;
        }
    }
    if (fails == 0)
        printf("ok - rma %s case %s: %d ranks in %.2f s\n", on_ib ? "ib" : "socket", which, NRANKS,
               fit_now() - t0);
    return fails == 0 ? 0 : 1;
}
