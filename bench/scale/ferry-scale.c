/*
 * ferry-scale: what one more connection costs, at a thousand of them.
 *
 * Two processes (fork) load the plugin as NCCL does (dlopen, ncclNetPlugin_v11)
 * and build N comm pairs between them (--pairs, default 1,024): pair i is,
 * in each process, a send comm to the other and a recv comm from it, as a
 * ring neighbour holds. Each process listens N times, the handles cross a
 * pipe, then each calls connect() and accept() round robin over all of them
 * until every comm exists (non-blocking, as NCCL's proxy does). Then every
 * pair moves one 4 KiB message each way, checked byte for byte, --rounds
 * times (default 1), test() sweeping every request in turn as NCCL's proxy
 * sweeps its operations.
 *
 * Reported per process, one CSV row each (after a header line):
 *   backend, role, pairs, connect+accept seconds (handles crossed -> last
 *   comm), threads of the process before and after (/proc/self/task; the
 *   ferry-* and fakeibv-* ones apart), RSS growth per pair in KiB (after
 *   minus before, / N), fds per pair, and on fakeibv the verbs objects per
 *   pair (QPs, CQs, MRs through fakeibv_objects(), and the CQs' entries through
 *   fakeibv_cq_entries(); "na" on any other
 *   libibverbs or on the socket backend), the rounds, their wall seconds (the
 *   slower side's) and the process' user and system CPU milliseconds per
 *   round (getrusage: the emulator's threads included), and whether the data
 *   was right.
 * The backend is NCCL_FERRY_BACKEND's (socket, or ib with LD_LIBRARY_PATH
 * naming fakeibv's folder); --backend sets it. Exit 0 only when every
 * comm came up and every byte arrived right.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define SCALE_MSG     4096
#define SCALE_MAX     8192
#define SCALE_SECONDS 120.0

typedef struct snap {
    int    threads, ferry_threads, fake_threads, fds;
    long   rss_kb;
    int    have_objs;
    uint64_t qps, cqs, mrs, cqes;
} snap_t;

/* fakeibv_objects of the libibverbs the plugin loaded, if it is fakeibv. */
struct fake_objs {
    uint64_t qps, cqs, mrs, pds, contexts;
};

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* The directory's own fd. */
}

static void take_snap(snap_t *s)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    void (*objs)(struct fake_objs *) = NULL;
    uint64_t (*cqes)(void) = NULL;

    memset(s, 0, sizeof(*s));
    s->threads = fit_count_threads("", NULL, 0);
    s->ferry_threads = fit_count_threads("ferry-", NULL, 0);
    s->fake_threads = fit_count_threads("fakeibv-", NULL, 0);
    s->fds = count_fds();
    s->rss_kb = fit_rss_kb();
    if (h != NULL) {
        objs = (void (*)(struct fake_objs *))dlvsym(h, "fakeibv_objects", "FAKEIBV_1.0");
        if (objs != NULL) {
            struct fake_objs o;

            objs(&o);
            s->have_objs = 1;
            s->qps = o.qps;
            s->cqs = o.cqs;
            s->mrs = o.mrs;
        }
        cqes = (uint64_t (*)(void))dlvsym(h, "fakeibv_cq_entries", "FAKEIBV_1.0");
        if (cqes != NULL)
            s->cqes = cqes();
        dlclose(h);
    }
}

static void io_all(int fd, void *buf, size_t len, int out)
{
    char *p = buf;
    fit_bound_t b;

    fit_bound_init(&b, "handle pipe", SCALE_SECONDS, 1L << 30);
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        FIT_CHECK(n > 0, "pipe %s: %s", out ? "write" : "read",
                  n == 0 ? "the other process is gone" : strerror(errno));
        p += n;
        len -= (size_t)n;
        fit_bound_step(&b);
    }
}

static double cpu_ms(const struct timeval *tv)
{
    return (double)tv->tv_sec * 1e3 + (double)tv->tv_usec / 1e3;
}

static double per(uint64_t after, uint64_t before, int n)
{
    return ((double)after - (double)before) / n;
}

/* One side: n pairs with the process behind (rfd, wfd). */
static int run_side(const char *plugin, const char *role, int n, int rounds, int rfd, int wfd,
                    int header)
{
    fit_plugin_t p;
    void *ctx, **lc, **sc, **rc, **smh, **rmh, **req;
    ncclNetDeviceHandle_v11_t *devh = NULL;
    char *posted;
    char (*mine)[NCCL_NET_HANDLE_MAXSIZE], (*theirs)[NCCL_NET_HANDLE_MAXSIZE];
    unsigned char *sbuf, *rbuf;
    int dev, i, nsend = 0, nrecv = 0, done_n = 0, bad = 0;
    snap_t before, after, end;
    double t0, t_conn, t_other, t_data, t_data_other;
    struct rusage ru0, ru1;
    int round;
    fit_bound_t b;
    const char *backend = getenv("NCCL_FERRY_BACKEND");
    char objs[96];

    fit_set_role(role);
    /* Not "ferry-scale": the main thread must not count as one of ferry's. */
    prctl(PR_SET_NAME, role[0] == 'A' ? "scale-A" : "scale-B", 0, 0, 0);
    lc = calloc((size_t)n, sizeof(*lc));
    sc = calloc((size_t)n, sizeof(*sc));
    rc = calloc((size_t)n, sizeof(*rc));
    smh = calloc((size_t)n, sizeof(*smh));
    rmh = calloc((size_t)n, sizeof(*rmh));
    req = calloc((size_t)2 * n, sizeof(*req));
    posted = calloc((size_t)2 * n, 1);
    mine = aligned_alloc(8, (size_t)n * NCCL_NET_HANDLE_MAXSIZE);
    theirs = aligned_alloc(8, (size_t)n * NCCL_NET_HANDLE_MAXSIZE);
    sbuf = aligned_alloc(4096, (size_t)n * SCALE_MSG);
    rbuf = aligned_alloc(4096, (size_t)n * SCALE_MSG);
    FIT_CHECK(lc && sc && rc && smh && rmh && req && posted && mine && theirs && sbuf && rbuf,
              "out of memory for %d pairs", n);
    fit_plugin_open(&p, plugin);
    ctx = fit_plugin_init(&p, 0x5ca1e);
    dev = fit_device(&p);
    take_snap(&before);
    for (i = 0; i < n; i++)
        lc[i] = fit_listen(&p, ctx, dev, mine[i]);
    /* Both sides listen before either connects; then the clock runs. */
    /* A writes first, B reads first: N handles can outgrow a pipe's buffer. */
    if (header) {
        io_all(wfd, mine, (size_t)n * NCCL_NET_HANDLE_MAXSIZE, 1);
        io_all(rfd, theirs, (size_t)n * NCCL_NET_HANDLE_MAXSIZE, 0);
    } else {
        io_all(rfd, theirs, (size_t)n * NCCL_NET_HANDLE_MAXSIZE, 0);
        io_all(wfd, mine, (size_t)n * NCCL_NET_HANDLE_MAXSIZE, 1);
    }
    t0 = fit_now();
    fit_bound_init(&b, "connect+accept of every pair", SCALE_SECONDS, 1L << 40);
    while (nsend < n || nrecv < n) {
        for (i = 0; i < n; i++) {
            if (sc[i] == NULL) {
                FIT_NCCL(p.net->connect(ctx, dev, theirs[i], &sc[i], &devh));
                nsend += sc[i] != NULL;
            }
            if (rc[i] == NULL) {
                FIT_NCCL(p.net->accept(lc[i], &rc[i], &devh));
                nrecv += rc[i] != NULL;
            }
        }
        fit_bound_step(&b);
    }
    t_conn = fit_now() - t0;
    take_snap(&after);
    /* Every pair, both ways: 4 KiB each, byte i a function of the pair and the sender. */
    for (i = 0; i < n; i++) {
        fit_fill(sbuf + (size_t)i * SCALE_MSG, SCALE_MSG, ((uint64_t)i << 1) | (role[0] == 'A'));
        memset(rbuf + (size_t)i * SCALE_MSG, FIT_POISON, SCALE_MSG);
        FIT_NCCL(p.net->regMr(sc[i], sbuf + (size_t)i * SCALE_MSG, SCALE_MSG, NCCL_PTR_HOST,
                              &smh[i]));
        FIT_NCCL(p.net->regMr(rc[i], rbuf + (size_t)i * SCALE_MSG, SCALE_MSG, NCCL_PTR_HOST,
                              &rmh[i]));
    }
    getrusage(RUSAGE_SELF, &ru0);
    t0 = fit_now();
    for (round = 0; round < rounds; round++) {
        if (round > 0) {
            memset(posted, 0, (size_t)2 * n);
            memset(req, 0, (size_t)2 * n * sizeof(*req));
            memset(rbuf, FIT_POISON, (size_t)n * SCALE_MSG);
            done_n = 0;
        }
        fit_bound_init(&b, "4 KiB both ways on every pair", SCALE_SECONDS, 1L << 40);
        while (done_n < 2 * n) {
            for (i = 0; i < n; i++) {
                if (!posted[2 * i]) {
                    void *data = rbuf + (size_t)i * SCALE_MSG;
                    size_t size = SCALE_MSG;
                    int tag = 7;

                    FIT_NCCL(p.net->irecv(rc[i], 1, &data, &size, &tag, &rmh[i], NULL,
                                          &req[2 * i]));
                    posted[2 * i] = req[2 * i] != NULL;
                }
                if (!posted[2 * i + 1]) {
                    FIT_NCCL(p.net->isend(sc[i], sbuf + (size_t)i * SCALE_MSG, SCALE_MSG, 7, smh[i],
                                          NULL, &req[2 * i + 1]));
                    posted[2 * i + 1] = req[2 * i + 1] != NULL;
                }
            }
            for (i = 0; i < 2 * n; i++) {
                int done = 0, size = 0;

                if (req[i] == NULL || req[i] == (void *)1)
                    continue;
                FIT_NCCL(p.net->test(req[i], &done, &size));
                if (done) {
                    FIT_CHECK(size == SCALE_MSG, "pair %d %s: %d bytes, %d expected", i / 2,
                              i % 2 ? "send" : "receive", size, SCALE_MSG);
                    req[i] = (void *)1;
                    done_n++;
                }
            }
            fit_bound_step(&b);
        }
        for (i = 0; i < n; i++) {
            size_t off = 0;

            if (fit_verify(rbuf + (size_t)i * SCALE_MSG, SCALE_MSG,
                           ((uint64_t)i << 1) | (role[0] != 'A'), &off) != 0) {
                if (bad++ < 5)
                    fprintf(stderr, "ferry-scale %s: pair %d: byte %zu of the 4 KiB received is "
                            "wrong\n", role, i, off);
            }
        }
    }
    t_data = fit_now() - t0;
    getrusage(RUSAGE_SELF, &ru1);
    take_snap(&end);
    /* The time of the slower side is the job's. */
    io_all(wfd, &t_conn, sizeof(t_conn), 1);
    io_all(rfd, &t_other, sizeof(t_other), 0);
    io_all(wfd, &t_data, sizeof(t_data), 1);
    io_all(rfd, &t_data_other, sizeof(t_data_other), 0);
    if (after.have_objs)
        snprintf(objs, sizeof(objs), "%.2f,%.2f,%.2f,%.1f", per(after.qps, before.qps, n),
                 per(after.cqs, before.cqs, n), per(after.mrs, before.mrs, n),
                 per(after.cqes, before.cqes, n));
    else
        snprintf(objs, sizeof(objs), "na,na,na,na");
    /* A's header and row first, then B's. */
    if (!header)
        io_all(rfd, &t_other, 1, 0);
    if (header)
        printf("backend,role,pairs,connect_accept_s,threads_before,threads_after,"
               "ferry_threads,fakeibv_threads,rss_kib_per_pair,fds_per_pair,"
               "qps_per_pair,cqs_per_pair,mrs_per_pair,cq_entries_per_pair,rounds,data_s,"
               "user_ms_per_round,sys_ms_per_round,data\n");
    printf("%s,%s,%d,%.3f,%d,%d,%d,%d,%.1f,%.2f,%s,%d,%.3f,%.2f,%.2f,%s\n",
           backend ? backend : "default", role, n,
           t_conn > t_other ? t_conn : t_other, before.threads,
           end.threads > after.threads ? end.threads : after.threads,
           end.ferry_threads > after.ferry_threads ? end.ferry_threads : after.ferry_threads,
           end.fake_threads > after.fake_threads ? end.fake_threads : after.fake_threads,
           per((uint64_t)after.rss_kb, (uint64_t)before.rss_kb, n),
           per((uint64_t)after.fds, (uint64_t)before.fds, n), objs, rounds,
           t_data > t_data_other ? t_data : t_data_other,
           (cpu_ms(&ru1.ru_utime) - cpu_ms(&ru0.ru_utime)) / rounds,
           (cpu_ms(&ru1.ru_stime) - cpu_ms(&ru0.ru_stime)) / rounds, bad ? "BAD" : "ok");
    fflush(stdout);
    io_all(wfd, &t_conn, 1, 1);
    /* Both sides done with the data before either closes. */
    if (header)
        io_all(rfd, &t_other, 1, 0);
    for (i = 0; i < n; i++) {
        FIT_NCCL(p.net->deregMr(sc[i], smh[i]));
        FIT_NCCL(p.net->deregMr(rc[i], rmh[i]));
        FIT_NCCL(p.net->closeSend(sc[i]));
        FIT_NCCL(p.net->closeRecv(rc[i]));
        FIT_NCCL(p.net->closeListen(lc[i]));
    }
    FIT_NCCL(p.net->finalize(ctx));
    free(lc);
    free(sc);
    free(rc);
    free(smh);
    free(rmh);
    free(req);
    free(posted);
    free(mine);
    free(theirs);
    free(sbuf);
    free(rbuf);
    return bad ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: ferry-scale [--plugin PATH] [--pairs N] [--backend socket|ib] "
                    "[--rounds R]\n"
                    "  N comm pairs (default 1024, at most %d) between two processes, R rounds\n"
                    "  of 4 KiB each way on every pair (default 1);\n"
                    "  one CSV row per process (bench/scale/README.md)\n",
            SCALE_MAX);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *plugin = fit_plugin_path(&argc, argv);
    int n = 1024, rounds = 1, a2b[2], b2a[2], st = 0, rc, i;
    struct rlimit rl;
    pid_t child;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            setenv("NCCL_FERRY_BACKEND", argv[++i], 1);
        else
            usage();
    }
    if (n < 1 || n > SCALE_MAX || rounds < 1 || rounds > 100000)
        usage();
    /* Sockets and listeners: a few fds per pair; ask for what the hard limit allows. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (pipe(a2b) != 0 || pipe(b2a) != 0)
        return 2;
    fflush(stdout);
    child = fork();
    if (child < 0)
        return 2;
    if (child == 0) {
        close(a2b[1]);
        close(b2a[0]);
        fit_child_exit(run_side(plugin, "B", n, rounds, a2b[0], b2a[1], 0));
    }
    close(a2b[0]);
    close(b2a[1]);
    rc = run_side(plugin, "A", n, rounds, b2a[0], a2b[1], 1);
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "ferry-scale: process B failed (status 0x%x)\n", st);
        rc = 1;
    }
    return rc;
}
