/*
 * soak: a bounded random soak of whichever backend NCCL_FERRY_BACKEND names.
 * PAIRS connections between two contexts of this process, each used in both
 * directions (a send comm and a recv comm each way), one thread per
 * direction. Every round of a thread: a random number of messages (1..16)
 * of random sizes, 0 B..8 MiB (log-uniform, with 0 B and odd sizes), a
 * random in-flight depth (1..8), every byte checked (fit_xfer_inproc). The
 * seed is printed; --seed repeats a run.
 *
 * Flatness, sampled four times a second by the main thread: the median RSS
 * of the second half of the run may not exceed the first half's by more
 * than SOAK_RSS_SLACK_KB (one round's buffers, mapped or not at a sample),
 * and the fds and threads of this process stay what they were after the
 * first second. Buffers come from mmap (M_MMAP_THRESHOLD), so RSS shows
 * what is kept, not freed heap; leaks of small objects are LeakSanitizer's
 * (ASan builds), at the end. At the end: every comm closed, finalize,
 * dlclose, the fds and threads of before the plugin was opened.
 *
 *   soak [--plugin PATH] [--seconds S] [--seed N] [--pairs P]
 *
 * Prints one "SOAK backend=... seconds=... messages=... bytes=..." line.
 */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define SOAK_MAX_PAIRS    8
#define SOAK_MAX_MSGS     16
#define SOAK_MAX_SIZE     ((size_t)8 << 20)
#define SOAK_ARENA        ((size_t)24 << 20) /* Per side and thread: depth shrinks to fit. */
#define SOAK_RSS_SLACK_KB (24 * 1024) /* One round's buffers may be mapped or not. */
#define SOAK_MAX_SAMPLES  (4 * 24 * 3600)

typedef struct soak_dir {
    const fit_plugin_t *p;
    void               *send, *recv;
    int                 id;
    uint64_t            rng;
    double              until;
    long                msgs;     /* Written by its thread; read after the join. */
    unsigned long long  bytes;
    int                 rounds;
    pthread_t           thread;
} soak_dir_t;

static uint64_t soak_next(uint64_t *s)
{
    /* xorshift64*: fixed per seed, the same on every run. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/*
 * Workers of the emulated verbs device now (0 on the socket backend, where it
 * is not loaded): fakeibv's own count, which its engine raises under the
 * same lock hold that creates the thread. A name would not do: a worker
 * shows in /proc with its creator's name until the creator names it, and on
 * two loaded cores that can last two readings.
 */
static int soak_device_workers(void)
{
    static int (*engine_threads)(void);
    static int looked;
    int n;

    if (!looked) {
        void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);

        looked = 1;
        if (h != NULL) {
            engine_threads = (int (*)(void))dlvsym(h, "fakeibv_engine_threads", "FAKEIBV_1.0");
            dlclose(h);
        }
    }
    if (engine_threads == NULL)
        return 0;
    n = engine_threads(); /* Its poll thread and its workers; 0 when stopped. */
    return n > 0 ? n - 1 : 0;
}

/*
 * The process' threads that are not the emulated device's workers: a
 * reading of /proc between two equal counts of the device's workers (they
 * only grow while the device runs), so none was started during it.
 */
static int soak_own_threads(fit_leaks_t *snap, int *work_p)
{
    int k, before;

    for (k = 0; k < 50; k++) {
        before = soak_device_workers();
        fit_leaks_snap(snap);
        *work_p = soak_device_workers();
        if (*work_p == before)
            break;
        usleep(20000);
    }
    return snap->threads - *work_p;
}

/* 0 B..8 MiB: a power of two picked uniformly, then a point below it; 1 in 16 is 0 B. */
static size_t soak_size(uint64_t *s)
{
    uint64_t r = soak_next(s);
    int bits = (int)(r % 24); /* 2^0..2^23 = 8 MiB. */

    if ((r >> 8) % 16 == 0)
        return 0;
    return (size_t)1 + (size_t)((r >> 16) % ((uint64_t)1 << bits));
}

static int soak_cmp(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;

    return x < y ? -1 : x > y;
}

/* Median of n samples (sorts them); 0 for none. */
static long soak_median(long *v, int n)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof(*v), soak_cmp);
    return v[n / 2];
}

static void *soak_run(void *arg)
{
    soak_dir_t *d = arg;
    size_t sizes[SOAK_MAX_MSGS];
    char what[64];

    while (fit_now() < d->until) {
        fit_xfer_opts_t o = { 0 };
        fit_xfer_result_t r;
        int i, n = 1 + (int)(soak_next(&d->rng) % SOAK_MAX_MSGS);

        for (i = 0; i < n; i++) {
            sizes[i] = soak_size(&d->rng);
            if (sizes[i] > SOAK_MAX_SIZE)
                sizes[i] = SOAK_MAX_SIZE;
        }
        o.sizes     = sizes;
        o.nmsgs     = n;
        o.depth     = 1 + (int)(soak_next(&d->rng) % 8);
        o.seed      = soak_next(&d->rng);
        o.seconds   = 60.0;
        o.tag       = d->id;
        o.arena_cap = SOAK_ARENA;
        /* Every other round the receives are posted larger than the messages. */
        o.recv_extra = (d->rounds & 1) ? (size_t)(soak_next(&d->rng) % 4096) : 0;
        fit_xfer_inproc(d->p, d->send, d->recv, &o, &r);
        snprintf(what, sizeof(what), "soak direction %d round %d", d->id, d->rounds);
        fit_xfer_expect_ok(&r, what);
        d->msgs += n;
        for (i = 0; i < n; i++)
            d->bytes += sizes[i];
        d->rounds++;
    }
    return NULL;
}

#if defined(__SANITIZE_THREAD__)
static void *soak_nothing(void *arg)
{
    return arg;
}

static void soak_spawn_tsan_thread(void)
{
    pthread_t t;

    FIT_CHECK(pthread_create(&t, NULL, soak_nothing, NULL) == 0, "pthread_create");
    FIT_CHECK(pthread_join(t, NULL) == 0, "pthread_join");
}
#endif

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *backend = getenv("NCCL_FERRY_BACKEND") ? getenv("NCCL_FERRY_BACKEND") : "socket";
    double seconds = 20.0, t0, half;
    uint64_t seed = 20261202;
    int pairs = 2, i, ndir, samples = 0, work, steady_work, own, steady_own;
    soak_dir_t dirs[2 * SOAK_MAX_PAIRS];
    fit_leaks_t before, steady, now;
    static long rss_a[SOAK_MAX_SAMPLES], rss_b[SOAK_MAX_SAMPLES];
    long rss_first = 0, rss_second = 0, msgs = 0;
    int na = 0, nb = 0;
    unsigned long long bytes = 0;
    fit_plugin_t p;
    void *ctx[2];

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc)
            pairs = atoi(argv[++i]);
        else
            FIT_FAIL("usage: soak [--plugin PATH] [--seconds S] [--seed N] [--pairs P]");
    }
    FIT_CHECK(pairs >= 1 && pairs <= SOAK_MAX_PAIRS, "--pairs 1..%d", SOAK_MAX_PAIRS);
    FIT_CHECK(seconds > 0 && seconds < 24 * 3600.0, "--seconds");
    /*
     * Every buffer of a round (up to SOAK_ARENA) straight from mmap and back
     * when freed, so RSS shows what the plugin keeps, not glibc's growing
     * mmap threshold holding freed arenas in the heap.
     */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    fit_set_role("soak");
    printf("soak: backend %s, %d connection pair(s) in both directions, %.0f s, seed %llu\n",
           backend, pairs, seconds, (unsigned long long)seed);
    /*
     * One connection and back before the baseline: libibverbs stays loaded
     * once opened (as NCCL keeps it), with the emulator's fabric socket.
     */
    fit_plugin_open(&p, path);
    ctx[0] = fit_plugin_init(&p, 0x50a0);
    {
        char handle[NCCL_NET_HANDLE_MAXSIZE];
        void *lc = fit_listen(&p, ctx[0], 0, handle), *sc, *rc;

        fit_connect_accept(&p, ctx[0], 0, handle, lc, &sc, &rc, NULL);
        FIT_NCCL(p.net->closeSend(sc));
        FIT_NCCL(p.net->closeRecv(rc));
        FIT_NCCL(p.net->closeListen(lc));
    }
    FIT_NCCL(p.net->finalize(ctx[0]));
    fit_plugin_close(&p);
#if defined(__SANITIZE_THREAD__)
    /*
     * ThreadSanitizer starts a thread of its own at the process's first
     * pthread_create. On two CPUs the socket backend starts no helper, so the
     * warm-up may not have made one: make it now, or it is counted as a leak.
     */
    soak_spawn_tsan_thread();
#endif
    fit_leaks_snap(&before);
    fit_plugin_open(&p, path);
    ctx[0] = fit_plugin_init(&p, 0x50a1);
    ctx[1] = fit_plugin_init(&p, 0x50a2);
    ndir = 0;
    for (i = 0; i < pairs; i++) {
        char handle[NCCL_NET_HANDLE_MAXSIZE];
        int k;

        /* Two connections per pair: ctx 1 -> ctx 0 and ctx 0 -> ctx 1. */
        for (k = 0; k < 2; k++) {
            soak_dir_t *d = &dirs[ndir];
            void *lc = fit_listen(&p, ctx[k], 0, handle);

            memset(d, 0, sizeof(*d));
            fit_connect_accept(&p, ctx[1 - k], 0, handle, lc, &d->send, &d->recv, NULL);
            FIT_NCCL(p.net->closeListen(lc));
            d->p = &p;
            d->id = ndir;
            d->rng = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)ndir + 1;
            ndir++;
        }
    }
    t0 = fit_now();
    half = t0 + seconds / 2;
    for (i = 0; i < ndir; i++) {
        dirs[i].until = t0 + seconds;
        FIT_CHECK(pthread_create(&dirs[i].thread, NULL, soak_run, &dirs[i]) == 0,
                  "pthread_create");
    }
    /* Sample while the threads run: a second in, the steady fds and threads. */
    sleep(1);
    steady_own = soak_own_threads(&steady, &steady_work);
    while (fit_now() < t0 + seconds && samples < SOAK_MAX_SAMPLES) {
        own = soak_own_threads(&now, &work);
        if (fit_now() < half)
            rss_a[na++] = now.rss_kb;
        else
            rss_b[nb++] = now.rss_kb;
        samples++;
        FIT_CHECK(now.fds == steady.fds, "fds %d at %.0f s, %d a second in", now.fds,
                  fit_now() - t0, steady.fds);
        /*
         * The emulated verbs device starts and retires its workers with the
         * load (at most 16 of them, fakeibv_engine.c): they are the NIC's, not
         * ferry's, and are left out of the flat count.
         */
        FIT_CHECK(work <= 16, "the emulated device runs %d worker threads (at most 16)", work);
        FIT_CHECK(own == steady_own,
                  "threads %d at %.0f s (%d of them the emulated device's workers), %d a second "
                  "in (%d)", now.threads, fit_now() - t0, work, steady.threads, steady_work);
        usleep(250000);
    }
    rss_first = soak_median(rss_a, na);
    rss_second = soak_median(rss_b, nb);
    for (i = 0; i < ndir; i++) {
        pthread_join(dirs[i].thread, NULL);
        msgs += dirs[i].msgs;
        bytes += dirs[i].bytes;
    }
    printf("  rss median %ld KiB in the first half, %ld KiB in the second; fds %d, threads %d "
           "throughout (%d samples)\n", rss_first, rss_second, steady.fds, steady.threads,
           samples);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* The sanitizers' allocators keep freed memory (quarantine, history): RSS says nothing. */
    printf("  rss check off in a sanitizer build (LeakSanitizer checks memory at exit)\n");
#else
    FIT_CHECK(rss_second == 0 || rss_second <= rss_first + SOAK_RSS_SLACK_KB,
              "RSS grew from %ld KiB (first half) to %ld KiB (second half)", rss_first,
              rss_second);
#endif
    for (i = 0; i < ndir; i++) {
        FIT_NCCL(p.net->closeSend(dirs[i].send));
        FIT_NCCL(p.net->closeRecv(dirs[i].recv));
    }
    FIT_NCCL(p.net->finalize(ctx[0]));
    FIT_NCCL(p.net->finalize(ctx[1]));
    fit_log_check_clean("after the soak");
    fit_plugin_close(&p);
    fit_check_no_ferry_threads("after finalize + dlclose");
    fit_leaks_check(&before, "after the soak");
    printf("SOAK backend=%s seconds=%.1f seed=%llu directions=%d messages=%ld bytes=%llu "
           "corrupt=0 rss_kb_median_first_half=%ld rss_kb_median_second_half=%ld fds=%d "
           "threads=%d\n",
           backend, fit_now() - t0, (unsigned long long)seed, ndir, msgs, bytes, rss_first,
           rss_second, steady.fds, steady.threads);
    printf("soak: all checks passed\n");
    return 0;
}
