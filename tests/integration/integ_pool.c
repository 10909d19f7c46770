/*
 * The process' one pool of helper threads (src/proxy/pool.h), through the
 * plugin as NCCL drives it, over loopback:
 *
 *  --case bound: 256 send/recv comm pairs with helpers forced on
 *    (NCCL_FERRY_POOL_THREADS=4, NCCL_FERRY_THREADS=4, 4 streams). The
 *    ferry-* threads of the process are the pool's and stay as many from 1
 *    pair to 256; every pair then moves data byte for byte, and no message
 *    waited for a pool thread's safety sweep (the dump's count of sweeps
 *    that found work no wake-up had announced stays 0: no wake-up was
 *    lost); the last close stops the pool. Threads per comm grew with the
 *    pairs (8 per pair).
 *  --case fair: a pool of one thread (NCCL_FERRY_POOL_THREADS=1) serves
 *    comm A, which streams 64 MiB messages without pause, and comm B, a
 *    4 KiB ping-pong; NCCL's thread moves nothing itself
 *    (NCCL_FERRY_INLINE_MAX=0, NCCL_FERRY_ASSIST_MAX=0,
 *    NCCL_FERRY_SOLO_MAX=0, NCCL_FERRY_RESCUE_US=0), so every byte of both goes through that one
 *    thread. B's p99 round trip stays under 100 ms (times the sanitizer's
 *    FIT_TIME_SCALE): a bulk stream does not starve a ping-pong.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"

#define POOL_PAIRS     256
#define POOL_PAIR_SLOW 5.0 /* Seconds one pair's messages may take, before fit_time_scale(). */
#define FAIR_RTTS_MIN  1000  /* Round trips B makes at least... */
#define FAIR_RTTS_MAX  50000 /* ...and at most, */
#define FAIR_SECONDS   2.0   /* ...for at least this long (times FIT_TIME_SCALE). */
#define FAIR_BIG       ((size_t)64 << 20)
#define FAIR_PING      4096
#define FAIR_P99_BOUND 0.100 /* Seconds, before fit_time_scale(). */

typedef struct pool_pair {
    void *send_comm, *recv_comm;
} pool_pair_t;

static void pool_pair_open(const fit_plugin_t *p, void *ctx_l, void *ctx_c, pool_pair_t *pr)
{
    char handle[128];
    void *listen_comm;

    memset(handle, 0, sizeof(handle));
    listen_comm = fit_listen(p, ctx_l, fit_device(p), handle);
    fit_connect_accept(p, ctx_c, fit_device(p), handle, listen_comm, &pr->send_comm,
                       &pr->recv_comm, NULL);
    FIT_NCCL(p->net->closeListen(listen_comm));
}

static void pool_pair_close(const fit_plugin_t *p, pool_pair_t *pr)
{
    FIT_NCCL(p->net->closeSend(pr->send_comm));
    FIT_NCCL(p->net->closeRecv(pr->recv_comm));
}

/*
 * Raise the dump signal (CMake sets NCCL_FERRY_DUMP_SIGNAL=USR1) and sum,
 * over the pool's threads, the safety-timeout sweeps that found work that no
 * kick or fd had announced: each is a message that waited up to a second
 * for a lost wake-up. Returns the number of pool threads the dump listed.
 */
static int pool_rescues(uint64_t *rescues_p)
{
    char line[512];
    int from = fit_log_lines(), at, nthreads = 0;
    fit_bound_t b;

    *rescues_p = 0;
    FIT_CHECK(kill(getpid(), SIGUSR1) == 0, "kill(SIGUSR1)");
    fit_bound_init(&b, "the dump's helper pool lines", 10.0 * fit_time_scale(), 100000000L);
    /* The pool's lines close the dump: wait for its last thread's. */
    while (fit_log_find(from, -1, "ferry-pool-", "over every unit", NULL, NULL, 0) < 0 ||
           fit_log_lines() - fit_log_find(from, -1, "helper pool:", NULL, NULL, NULL, 0) <
               atoi(getenv("NCCL_FERRY_POOL_THREADS")) + 1)
        fit_bound_step(&b);
    for (at = from; (at = fit_log_find(at, -1, "ferry-pool-", "over every unit", NULL, line,
                                       sizeof(line))) >= 0; at++) {
        uint64_t sweeps, idle, full, rescues;
        int index, units;

        FIT_CHECK(sscanf(strstr(line, "ferry-pool-"), "ferry-pool-%d: %d unit(s), %" SCNu64
                         " sweeps (%" SCNu64 " found nothing, %" SCNu64 " over every unit, %"
                         SCNu64 " of those", &index, &units, &sweeps, &idle, &full,
                         &rescues) == 6, "a dump line of the pool not in the expected form: %s",
                  line);
        printf("  ferry-pool-%d: %" PRIu64 " sweeps, %" PRIu64 " over every unit (a detach or the "
               "safety timeout), %" PRIu64 " found work no wake-up announced\n", index, sweeps,
               full, rescues);
        *rescues_p += rescues;
        nthreads++;
    }
    return nthreads;
}

/* 256 pairs of 4 streams each hold 2,048 sockets: more than a 1,024 soft limit. */
static void pool_raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void pool_bound(const fit_plugin_t *p, void *ctx_l, void *ctx_c)
{
    static const size_t sizes[] = {0, 1, 4097, 200003};
    pool_pair_t *pairs = calloc(POOL_PAIRS, sizeof(*pairs));
    int want = atoi(getenv("NCCL_FERRY_POOL_THREADS") != NULL ? getenv("NCCL_FERRY_POOL_THREADS")
                                                              : "0");
    int i, nall = 0, first_all = -1, npool = 0, slowest_pair = -1;
    char names[1024];
    double t0, slowest = 0;
    uint64_t rescues;
    fit_bound_t b;

    FIT_CHECK(pairs != NULL, "calloc");
    FIT_CHECK(want > 0, "--case bound needs NCCL_FERRY_POOL_THREADS set (CMake sets 4)");
    pool_raise_nofile();
    t0 = fit_now();
    for (i = 0; i < POOL_PAIRS; i++) {
        pool_pair_open(p, ctx_l, ctx_c, &pairs[i]);
        if (i + 1 != 1 && i + 1 != 16 && i + 1 != 64 && i + 1 != POOL_PAIRS)
            continue;
        nall = fit_count_threads("ferry-", names, sizeof(names));
        npool = fit_count_threads("ferry-pool-", NULL, 0);
        printf("  %d comm pairs: %d ferry-* threads, %d of them ferry-pool-*\n", i + 1, nall,
               npool);
        if (first_all < 0) {
            first_all = nall;
            continue; /* The pool's count is checked from 16 pairs on, beside the growth. */
        }
        FIT_CHECK(nall == first_all, "%d comm pairs: %d ferry-* threads, %d with 1 pair: helper "
                  "threads grow with the comms [%s]", i + 1, nall, first_all, names);
        /* Checked after the growth: threads per comm show as growth, the clearer failure. */
        FIT_CHECK(npool == want, "%d comm pairs: %d ferry-pool-* threads, NCCL_FERRY_POOL_THREADS="
                  "%d [%s]", i + 1, npool, want, names);
    }
    fit_pass("%d comm pairs opened in %.2f s: %d ferry-pool-* threads from the first pair to the "
             "last (%d ferry-* threads in all)", POOL_PAIRS, fit_now() - t0, npool, nall);

    t0 = fit_now();
    for (i = 0; i < POOL_PAIRS; i++) {
        fit_xfer_opts_t o = {0};
        fit_xfer_result_t r;
        double t1 = fit_now();

        o.sizes   = sizes;
        o.nmsgs   = (int)(sizeof(sizes) / sizeof(sizes[0]));
        o.depth   = 4;
        o.seed    = 7000 + (uint64_t)i * 100;
        o.seconds = 30.0 * fit_time_scale();
        o.tag     = i;
        fit_xfer_inproc(p, pairs[i].send_comm, pairs[i].recv_comm, &o, &r);
        fit_xfer_expect_ok(&r, "a pair on the shared pool");
        if (fit_now() - t1 > slowest) {
            slowest = fit_now() - t1;
            slowest_pair = i;
        }
    }
    /* A backstop only: a starved machine stretches every pair; the count below is the check. */
    FIT_CHECK(slowest < POOL_PAIR_SLOW * fit_time_scale(), "pair %d took %.3f s for %d small "
              "messages", slowest_pair, slowest, (int)(sizeof(sizes) / sizeof(sizes[0])));
    fit_pass("%d pairs x %d messages (0 B..195 KiB) moved byte for byte over the pool in %.2f s, "
             "the slowest pair in %.3f s", POOL_PAIRS, (int)(sizeof(sizes) / sizeof(sizes[0])),
             fit_now() - t0, slowest);

    /* One pair stays open: the pool, and its threads' counts, live until the last close. */
    for (i = 1; i < POOL_PAIRS; i++)
        pool_pair_close(p, &pairs[i]);
    FIT_CHECK(pool_rescues(&rescues) == want, "the dump listed another number of pool threads "
              "than NCCL_FERRY_POOL_THREADS=%d", want);
    /*
     * A message that only a safety sweep found waited up to a second: a lane
     * parked, or a post not seen, with its thread asleep (a lost wake-up).
     */
    FIT_CHECK(rescues == 0, "%" PRIu64 " of the pool's safety-timeout sweeps found work that no "
              "kick or fd had announced: a lost wake-up", rescues);
    fit_pass("no lost wake-up: no safety-timeout sweep of the pool's %d threads found work",
             want);
    pool_pair_close(p, &pairs[0]);
    free(pairs);
    /* The last comm's close stops the pool (joined; the kernel may list it a moment longer). */
    fit_bound_init(&b, "the pool's threads to go after the last close", 2.0, 100000L);
    while ((npool = fit_count_threads("ferry-pool-", names, sizeof(names))) > 0 &&
           fit_bound_try_step(&b))
        ;
    FIT_CHECK(npool == 0, "after every comm closed: %d ferry-pool-* threads [%s]", npool, names);
    fit_pass("every comm closed: the pool stopped");
}

/*
 * Comm A: 64 MiB messages back to back until told to stop, each received
 * into a poisoned buffer and compared with what was sent. The pattern is
 * written once: filling 64 MiB per message would make the harness, not
 * the pool, set A's pace.
 */
typedef struct fair_bulk {
    const fit_plugin_t *p;
    pool_pair_t        *pair;
    _Atomic int         stop;
    _Atomic uint64_t    msgs;
    double              seconds;
} fair_bulk_t;

static void fair_wait(const fit_plugin_t *p, void *req, const char *what);

static void *fair_bulk_main(void *arg)
{
    fair_bulk_t *a = arg;
    char *sbuf = malloc(FAIR_BIG), *rbuf = malloc(FAIR_BIG);
    void *smh, *rmh, *sreq, *rreq, *data;
    double t0;
    size_t rsize;
    int tag;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc 2 x 64 MiB");
    fit_fill(sbuf, FAIR_BIG, 90001);
    FIT_NCCL(a->p->net->regMr(a->pair->send_comm, sbuf, FAIR_BIG, NCCL_PTR_HOST, &smh));
    FIT_NCCL(a->p->net->regMr(a->pair->recv_comm, rbuf, FAIR_BIG, NCCL_PTR_HOST, &rmh));
    t0 = fit_now();
    while (!atomic_load(&a->stop)) {
        memset(rbuf, FIT_POISON, FAIR_BIG);
        data = rbuf;
        rsize = FAIR_BIG;
        tag = 9;
        rreq = NULL;
        FIT_NCCL(a->p->net->irecv(a->pair->recv_comm, 1, &data, &rsize, &tag, &rmh, NULL, &rreq));
        sreq = NULL;
        FIT_NCCL(a->p->net->isend(a->pair->send_comm, sbuf, FAIR_BIG, 9, smh, NULL, &sreq));
        FIT_CHECK(rreq != NULL && sreq != NULL, "comm A: a 64 MiB isend/irecv returned no request");
        fair_wait(a->p, rreq, "comm A's 64 MiB irecv");
        fair_wait(a->p, sreq, "comm A's 64 MiB isend");
        FIT_CHECK(memcmp(rbuf, sbuf, FAIR_BIG) == 0, "comm A: message %llu arrived with other "
                  "bytes than were sent", (unsigned long long)atomic_load(&a->msgs));
        atomic_fetch_add(&a->msgs, 1);
    }
    a->seconds = fit_now() - t0;
    FIT_NCCL(a->p->net->deregMr(a->pair->send_comm, smh));
    FIT_NCCL(a->p->net->deregMr(a->pair->recv_comm, rmh));
    free(sbuf);
    free(rbuf);
    return NULL;
}

static int fair_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return a < b ? -1 : a > b;
}

/* Post, then test until done (bounded), failing on an error. */
static void fair_wait(const fit_plugin_t *p, void *req, const char *what)
{
    double took;
    ncclResult_t rc = fit_wait(p, req, 10.0 * fit_time_scale(), &took);

    FIT_CHECK(rc == ncclSuccess, "%s: test returned %s", what, fit_result_str(rc));
}

/* B's ping-pong while A streams; returns the round trips made, each timed into rtt. */
static int fair_ping(const fit_plugin_t *p, pool_pair_t *fwd, pool_pair_t *back, double *rtt,
                     fair_bulk_t *bulk)
{
    static char sbuf[2][FAIR_PING], rbuf[2][FAIR_PING];
    void *smh[2], *rmh[2], *sreq, *rreq, *data;
    size_t rsize;
    int i, k, tag;
    pool_pair_t *dir[2] = {fwd, back};

    for (k = 0; k < 2; k++) {
        FIT_NCCL(p->net->regMr(dir[k]->send_comm, sbuf[k], FAIR_PING, NCCL_PTR_HOST, &smh[k]));
        FIT_NCCL(p->net->regMr(dir[k]->recv_comm, rbuf[k], FAIR_PING, NCCL_PTR_HOST, &rmh[k]));
    }
    double start = fit_now(), window = FAIR_SECONDS * fit_time_scale();

    for (i = 0; i < FAIR_RTTS_MAX && (i < FAIR_RTTS_MIN || fit_now() - start < window ||
                                      atomic_load(&bulk->msgs) < 1); i++) {
        double t0 = fit_now();

        for (k = 0; k < 2; k++) {
            fit_fill(sbuf[k], FAIR_PING, 500000 + (uint64_t)i * 2 + (uint64_t)k);
            memset(rbuf[k], FIT_POISON, FAIR_PING);
            data = rbuf[k];
            rsize = FAIR_PING;
            tag = 5;
            rreq = NULL;
            FIT_NCCL(p->net->irecv(dir[k]->recv_comm, 1, &data, &rsize, &tag, &rmh[k], NULL,
                                   &rreq));
            FIT_CHECK(rreq != NULL, "irecv of ping %d returned no request", i);
            sreq = NULL;
            FIT_NCCL(p->net->isend(dir[k]->send_comm, sbuf[k], FAIR_PING, 5, smh[k], NULL, &sreq));
            FIT_CHECK(sreq != NULL, "isend of ping %d returned no request", i);
            fair_wait(p, rreq, k == 0 ? "ping irecv" : "pong irecv");
            fair_wait(p, sreq, k == 0 ? "ping isend" : "pong isend");
            fit_check_pattern(rbuf[k], FAIR_PING, 500000 + (uint64_t)i * 2 + (uint64_t)k,
                              k == 0 ? "ping" : "pong");
        }
        rtt[i] = fit_now() - t0;
    }
    for (k = 0; k < 2; k++) {
        FIT_NCCL(p->net->deregMr(dir[k]->send_comm, smh[k]));
        FIT_NCCL(p->net->deregMr(dir[k]->recv_comm, rmh[k]));
    }
    return i;
}

static void pool_fair(const fit_plugin_t *p, void *ctx_l, void *ctx_c)
{
    double *rtt = calloc(FAIR_RTTS_MAX, sizeof(*rtt)), bound = FAIR_P99_BOUND * fit_time_scale();
    double p50, p99, mibs;
    pool_pair_t a, fwd, back;
    fair_bulk_t bulk;
    pthread_t tid;
    char names[256];
    int npool, n;
    uint64_t msgs;

    FIT_CHECK(rtt != NULL, "calloc");
    pool_pair_open(p, ctx_l, ctx_c, &a);
    pool_pair_open(p, ctx_l, ctx_c, &fwd);
    pool_pair_open(p, ctx_c, ctx_l, &back);
    npool = fit_count_threads("ferry-pool-", names, sizeof(names));
    FIT_CHECK(npool == 1, "NCCL_FERRY_POOL_THREADS=1 but %d ferry-pool-* threads [%s]", npool,
              names);
    memset(&bulk, 0, sizeof(bulk));
    bulk.p = p;
    bulk.pair = &a;
    FIT_CHECK(pthread_create(&tid, NULL, fair_bulk_main, &bulk) == 0, "pthread_create");
    /* Let A's stream get going (a 64 MiB message in flight) before B starts. */
    {
        fit_bound_t b;

        fit_bound_init(&b, "comm A's first bytes", 0.3, 1000000L);
        while (fit_bound_try_step(&b))
            ;
    }
    n = fair_ping(p, &fwd, &back, rtt, &bulk);
    atomic_store(&bulk.stop, 1);
    FIT_CHECK(pthread_join(tid, NULL) == 0, "pthread_join");
    msgs = atomic_load(&bulk.msgs);
    qsort(rtt, (size_t)n, sizeof(*rtt), fair_cmp);
    p50 = rtt[n / 2];
    p99 = rtt[n * 99 / 100];
    mibs = bulk.seconds > 0 ? (double)msgs * (FAIR_BIG >> 20) / bulk.seconds : 0.0;
    printf("  B: %d round trips of 4 KiB: p50 %.3f ms, p99 %.3f ms, max %.3f ms; A: %llu x 64 MiB "
           "in %.2f s, %.1f MiB/s\n", n, p50 * 1e3, p99 * 1e3, rtt[n - 1] * 1e3,
           (unsigned long long)msgs, bulk.seconds, mibs);
    FIT_CHECK(msgs >= 1, "comm A moved %llu messages of 64 MiB while B ran",
              (unsigned long long)msgs);
    FIT_CHECK(p99 < bound, "B's p99 round trip %.3f ms is over %.0f ms: the bulk stream on the "
              "same pool thread starves the ping-pong", p99 * 1e3, bound * 1e3);
    fit_pass("one pool thread: B's 4 KiB ping-pong p50 %.3f ms, p99 %.3f ms (bound %.0f ms) over "
             "%d round trips, beside A's 64 MiB stream at %.1f MiB/s", p50 * 1e3, p99 * 1e3,
             bound * 1e3, n, mibs);
    pool_pair_close(p, &a);
    pool_pair_close(p, &fwd);
    pool_pair_close(p, &back);
    free(rtt);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    fit_plugin_t plugin;
    void *ctx_l, *ctx_c;
    const char *which;

    FIT_CHECK(argc == 3 && strcmp(argv[1], "--case") == 0 &&
                  (strcmp(argv[2], "bound") == 0 || strcmp(argv[2], "fair") == 0),
              "usage: integ_pool [--plugin PATH] --case bound|fair");
    which = argv[2];
    fit_set_role("pool");
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    fit_plugin_open(&plugin, path);
    ctx_l = fit_plugin_init(&plugin, 0x3131);
    ctx_c = fit_plugin_init(&plugin, 0x3232);
    if (strcmp(which, "bound") == 0)
        pool_bound(&plugin, ctx_l, ctx_c);
    else
        pool_fair(&plugin, ctx_l, ctx_c);
    FIT_NCCL(plugin.net->finalize(ctx_l));
    FIT_NCCL(plugin.net->finalize(ctx_c));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
    printf("integ_pool --case %s: all checks passed\n", which);
    return 0;
}
