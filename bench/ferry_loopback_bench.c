/*
 * ferry_loopback_bench: point-to-point bandwidth of libnccl-net-ferry.so over
 * loopback, through the plugin API exactly as NCCL's proxy uses it.
 *
 * Two processes (fork): the child receives, the parent sends. Each dlopens
 * the plugin like NCCL does and calls init/listen/connect/accept on its own.
 * The sender keeps up to --depth isends in flight (NCCL_STEPS = 8, like the
 * proxy), the receiver keeps as many irecvs posted, and both test the oldest
 * request first. Per size: a short calibration round sets the iteration count
 * so the timed round takes about --time seconds; the timed round ends when
 * the receiver reports (through a pipe) that its last message completed.
 *
 *   ferry_loopback_bench [--plugin PATH] [--min SIZE] [--max SIZE] [--depth N]
 *                        [--time SECONDS] [--csv FILE]
 *
 * Sizes accept K/M/G suffixes (powers of 1024) and go up by x4 from --min.
 * NCCL_SOCKET_IFNAME defaults to lo here unless the caller set it.
 */
#include <dlfcn.h>
#include <sched.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "nccl/net.h"

#ifndef FERRY_BENCH_DEFAULT_PLUGIN
#define FERRY_BENCH_DEFAULT_PLUGIN "libnccl-net-ferry.so"
#endif

#define BENCH_MAX_DEPTH   32
#define BENCH_ARENA_CAP   ((size_t)256 << 20) /* Buffer bytes per side at most. */
#define BENCH_MIN_ITERS   8
#define BENCH_MAX_ITERS   10000000UL
#define BENCH_CONNECT_S   30.0

typedef struct bench_opts {
    const char *plugin;
    size_t      min_size;
    size_t      max_size;
    int         depth;
    double      target_s;   /* Timed round length per size. */
    const char *csv;
} bench_opts_t;

/* One round, sender -> receiver over the control pipe. size UINT64_MAX ends the run. */
typedef struct bench_round {
    uint64_t size;
    uint64_t iters;
} bench_round_t;

/* Per-process plugin state. */
typedef struct bench_side {
    void                *dl;
    const ncclNet_v11_t *net;
    void                *ctx;
    void                *comm;
    uint8_t             *buf;
    size_t               buf_len;
    void                *mh;
    const char          *who;
} bench_side_t;

static void bench_die(const bench_side_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

static void bench_die(const bench_side_t *s, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "ferry_loopback_bench %s: ", s != NULL ? s->who : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(NULL);
    _exit(1);
}

static double bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bench_logger(ncclDebugLogLevel level, unsigned long flags, const char *file,
                         int line, const char *fmt, ...)
{
    const char *dbg = getenv("NCCL_DEBUG");
    va_list ap;

    if (level != NCCL_LOG_WARN && (dbg == NULL || strcasecmp(dbg, "INFO") != 0))
        return;
    fprintf(stderr, "[bench %d] %s ", (int)getpid(), level == NCCL_LOG_WARN ? "WARN" : "INFO");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

static ncclResult_t bench_profiler(void **ehandle, int type, void *phandle, int64_t plugin_id,
                                   void *ext)
{
    if (ehandle != NULL)
        *ehandle = NULL;
    return ncclSuccess;
}

#define BENCH_NCCL(_s, _call)                                                           \
    do {                                                                                \
        ncclResult_t _rc = (_call);                                                     \
        if (_rc != ncclSuccess)                                                         \
            bench_die((_s), "%s returned %d", #_call, (int)_rc);                        \
    } while (0)

static void bench_write_all(const bench_side_t *s, int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            bench_die(s, "pipe write: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* Returns 0 on EOF before any byte (peer gone), 1 when len bytes were read. */
static int bench_read_all(const bench_side_t *s, int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;

    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 && got == 0)
            return 0;
        if (n <= 0)
            bench_die(s, "pipe read: %s", n == 0 ? "early EOF" : strerror(errno));
        got += (size_t)n;
    }
    return 1;
}

static uint8_t bench_byte(size_t off)
{
    return (uint8_t)(off * 31 + 7);
}

static void bench_open(bench_side_t *s, const bench_opts_t *o, const char *who)
{
    ncclNetCommConfig_v11_t cfg = { .trafficClass = -1 };
    int ndev = 0;

    memset(s, 0, sizeof(*s));
    s->who = who;
    s->dl  = dlopen(o->plugin, RTLD_NOW | RTLD_LOCAL);
    if (s->dl == NULL)
        bench_die(s, "dlopen %s: %s", o->plugin, dlerror());
    s->net = dlsym(s->dl, "ncclNetPlugin_v11");
    if (s->net == NULL)
        bench_die(s, "%s has no ncclNetPlugin_v11", o->plugin);
    BENCH_NCCL(s, s->net->init(&s->ctx, 0xbe7c, &cfg, bench_logger, bench_profiler));
    BENCH_NCCL(s, s->net->devices(&ndev));
    if (ndev < 1)
        bench_die(s, "the plugin found no device (NCCL_SOCKET_IFNAME=%s)",
                  getenv("NCCL_SOCKET_IFNAME"));
}

static void bench_register(bench_side_t *s, const bench_opts_t *o)
{
    size_t slots = BENCH_ARENA_CAP / o->max_size, i;

    if (slots > (size_t)o->depth)
        slots = (size_t)o->depth;
    if (slots < 1)
        slots = 1;
    s->buf_len = slots * o->max_size;
    s->buf     = aligned_alloc(4096, (s->buf_len + 4095) & ~(size_t)4095);
    if (s->buf == NULL)
        bench_die(s, "cannot allocate %zu bytes", s->buf_len);
    /* Every slot holds the same bytes, so any message can be spot-checked. */
    for (i = 0; i < s->buf_len; i++)
        s->buf[i] = bench_byte(i % o->max_size);
    BENCH_NCCL(s, s->net->regMr(s->comm, s->buf, s->buf_len, NCCL_PTR_HOST, &s->mh));
}

static uint8_t *bench_slot(const bench_side_t *s, const bench_opts_t *o, uint64_t i)
{
    size_t nslots = s->buf_len / o->max_size;

    return s->buf + (size_t)(i % nslots) * o->max_size;
}

static void bench_close(bench_side_t *s, int is_send)
{
    BENCH_NCCL(s, s->net->deregMr(s->comm, s->mh));
    if (is_send)
        BENCH_NCCL(s, s->net->closeSend(s->comm));
    else
        BENCH_NCCL(s, s->net->closeRecv(s->comm));
    BENCH_NCCL(s, s->net->finalize(s->ctx));
    dlclose(s->dl);
    free(s->buf);
}

/*
 * One round on one side: keep depth requests in flight, test oldest first.
 * Returns when iters messages completed; dies if nothing completes for 30 s.
 */
static void bench_round_run(bench_side_t *s, const bench_opts_t *o, int is_send, size_t size,
                            uint64_t iters)
{
    void *reqs[BENCH_MAX_DEPTH];
    uint64_t posted = 0, done = 0;
    double last_progress = bench_now();
    unsigned long spins = 0;

    while (done < iters) {
        while (posted < iters && posted - done < (uint64_t)o->depth) {
            void *data = bench_slot(s, o, posted);
            void *req = NULL;

            if (is_send) {
                BENCH_NCCL(s, s->net->isend(s->comm, data, size, 0, s->mh, NULL, &req));
            } else {
                size_t cap = size;
                int tag = 0;
                void *mh = s->mh;

                req = (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION;
                BENCH_NCCL(s, s->net->irecv(s->comm, 1, &data, &cap, &tag, &mh, NULL, &req));
                if (req == (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION)
                    bench_die(s, "irecv left the optional-completion hint in *request");
            }
            if (req == NULL)
                break;
            reqs[posted % (uint64_t)o->depth] = req;
            posted++;
        }
        if (done < posted) {
            int flag = 0, got = -1;

            BENCH_NCCL(s, s->net->test(reqs[done % (uint64_t)o->depth], &flag, &got));
            if (flag) {
                if ((size_t)got != size)
                    bench_die(s, "message %llu: test reported %d bytes, expected %zu",
                              (unsigned long long)done, got, size);
                if (!is_send && size > 0) {
                    const uint8_t *d = bench_slot(s, o, done);

                    if (d[0] != bench_byte(0) || d[size - 1] != bench_byte(size - 1))
                        bench_die(s, "message %llu of %zu bytes arrived corrupted",
                                  (unsigned long long)done, size);
                }
                done++;
                last_progress = bench_now();
                continue;
            }
        }
        /* Nothing completed: yield like NCCL's idle proxy thread, so helper threads run. */
        sched_yield();
        if ((++spins & 1023) == 0 && bench_now() - last_progress > 30.0)
            bench_die(s, "no progress for 30 s at %zu bytes (%llu/%llu done)", size,
                      (unsigned long long)done, (unsigned long long)iters);
    }
}

static void *bench_connect_loop(bench_side_t *s, void *handle, int accepting, void *listen_comm)
{
    ncclNetDeviceHandle_v11_t *dev = NULL;
    double deadline = bench_now() + BENCH_CONNECT_S;
    void *comm = NULL;

    while (comm == NULL) {
        if (accepting)
            BENCH_NCCL(s, s->net->accept(listen_comm, &comm, &dev));
        else
            BENCH_NCCL(s, s->net->connect(s->ctx, 0, handle, &comm, &dev));
        if (comm == NULL && bench_now() > deadline)
            bench_die(s, "%s did not complete in %.0f s", accepting ? "accept" : "connect",
                      BENCH_CONNECT_S);
    }
    return comm;
}

static int bench_receiver(const bench_opts_t *o, int handle_fd, int ctrl_fd, int ack_fd)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    bench_round_t round;
    void *listen_comm = NULL;
    bench_side_t s;

    bench_open(&s, o, "receiver");
    memset(handle, 0, sizeof(handle));
    BENCH_NCCL(&s, s.net->listen(s.ctx, 0, handle, &listen_comm));
    bench_write_all(&s, handle_fd, handle, sizeof(handle));
    s.comm = bench_connect_loop(&s, NULL, 1, listen_comm);
    BENCH_NCCL(&s, s.net->closeListen(listen_comm));
    bench_register(&s, o);
    while (bench_read_all(&s, ctrl_fd, &round, sizeof(round)) && round.size != UINT64_MAX) {
        char ack = 'k';

        bench_round_run(&s, o, 0, (size_t)round.size, round.iters);
        bench_write_all(&s, ack_fd, &ack, 1);
    }
    bench_close(&s, 0);
    return 0;
}

static double bench_timed_round(bench_side_t *s, const bench_opts_t *o, int ctrl_fd, int ack_fd,
                                size_t size, uint64_t iters)
{
    bench_round_t round = { .size = size, .iters = iters };
    double t0;
    char ack;

    bench_write_all(s, ctrl_fd, &round, sizeof(round));
    t0 = bench_now();
    bench_round_run(s, o, 1, size, iters);
    if (!bench_read_all(s, ack_fd, &ack, 1))
        bench_die(s, "the receiver exited during the %zu-byte round", size);
    return bench_now() - t0;
}

static int bench_sender(const bench_opts_t *o, int handle_fd, int ctrl_fd, int ack_fd)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    bench_round_t stop = { .size = UINT64_MAX, .iters = 0 };
    FILE *csv = NULL;
    bench_side_t s;
    size_t size;

    bench_open(&s, o, "sender");
    if (!bench_read_all(&s, handle_fd, handle, sizeof(handle)))
        bench_die(&s, "the receiver exited before sending its handle");
    s.comm = bench_connect_loop(&s, handle, 0, NULL);
    bench_register(&s, o);
    if (o->csv != NULL) {
        csv = fopen(o->csv, "w");
        if (csv == NULL)
            bench_die(&s, "cannot write %s: %s", o->csv, strerror(errno));
        fprintf(csv, "size_bytes,iterations,usec_per_msg,gbytes_per_s\n");
    }
    printf("%12s %10s %14s %10s\n", "size", "iters", "us/msg", "GB/s");
    for (size = o->min_size; size <= o->max_size; size *= 4) {
        uint64_t cal = (uint64_t)((16u << 20) / (size ? size : 1));
        double t, per_msg, gbps;
        uint64_t iters;
        int attempt;

        /* Calibration round (also the warm-up): about 16 MiB, 8..1000 messages. */
        cal = cal < BENCH_MIN_ITERS ? BENCH_MIN_ITERS : cal > 1000 ? 1000 : cal;
        t = bench_timed_round(&s, o, ctrl_fd, ack_fd, size, cal);
        iters = cal;
        /* Rescale until the timed round lasts at least 60% of the target (3 tries). */
        for (attempt = 0; attempt < 3; attempt++) {
            double want = (double)iters * o->target_s / (t > 1e-6 ? t : 1e-6);

            iters = want < BENCH_MIN_ITERS ? BENCH_MIN_ITERS
                  : want > BENCH_MAX_ITERS ? BENCH_MAX_ITERS : (uint64_t)want;
            t = bench_timed_round(&s, o, ctrl_fd, ack_fd, size, iters);
            if (t >= 0.6 * o->target_s || iters == BENCH_MAX_ITERS)
                break;
        }
        per_msg = t / (double)iters * 1e6;
        gbps = (double)size * (double)iters / t / 1e9;
        printf("%12zu %10llu %14.2f %10.3f\n", size, (unsigned long long)iters, per_msg, gbps);
        fflush(stdout);
        if (csv != NULL)
            fprintf(csv, "%zu,%llu,%.3f,%.4f\n", size, (unsigned long long)iters, per_msg, gbps);
        if (size > o->max_size / 4)
            break;
    }
    bench_write_all(&s, ctrl_fd, &stop, sizeof(stop));
    if (csv != NULL && fclose(csv) != 0)
        bench_die(&s, "writing %s failed", o->csv);
    bench_close(&s, 1);
    return 0;
}

static size_t bench_parse_size(const char *text)
{
    char *end = NULL;
    double v = strtod(text, &end);
    size_t mult = 1;

    if (end == text || v < 0)
        bench_die(NULL, "bad size '%s'", text);
    switch (*end) {
    case 'k': case 'K': mult = (size_t)1 << 10; end++; break;
    case 'm': case 'M': mult = (size_t)1 << 20; end++; break;
    case 'g': case 'G': mult = (size_t)1 << 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end != '\0')
        bench_die(NULL, "bad size '%s'", text);
    return (size_t)(v * (double)mult);
}

static void bench_usage(void)
{
    printf("usage: ferry_loopback_bench [--plugin PATH] [--min SIZE] [--max SIZE] [--depth N]\n"
           "                            [--time SECONDS] [--csv FILE]\n"
           "  --plugin PATH   plugin to dlopen (default %s)\n"
           "  --min/--max     message sizes, x4 steps (default 4K..64M; K/M/G suffixes)\n"
           "  --depth N       isends in flight, 1..32 (default 8, like NCCL's proxy)\n"
           "  --time SECONDS  target length of each timed size (default 0.3)\n"
           "  --csv FILE      also write size_bytes,iterations,usec_per_msg,gbytes_per_s\n"
           "NCCL_SOCKET_IFNAME defaults to lo; NCCL_FERRY_STREAMS etc. are passed through.\n",
           FERRY_BENCH_DEFAULT_PLUGIN);
}

static void bench_parse(bench_opts_t *o, int argc, char **argv)
{
    int i;

    o->plugin   = getenv("FERRY_PLUGIN") ? getenv("FERRY_PLUGIN") : FERRY_BENCH_DEFAULT_PLUGIN;
    o->min_size = (size_t)4 << 10;
    o->max_size = (size_t)64 << 20;
    o->depth    = 8;
    o->target_s = 0.3;
    o->csv      = NULL;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bench_usage();
            exit(0);
        }
        if (v == NULL)
            bench_die(NULL, "%s needs a value (see --help)", a);
        if (strcmp(a, "--plugin") == 0)
            o->plugin = v;
        else if (strcmp(a, "--min") == 0)
            o->min_size = bench_parse_size(v);
        else if (strcmp(a, "--max") == 0)
            o->max_size = bench_parse_size(v);
        else if (strcmp(a, "--depth") == 0)
            o->depth = atoi(v);
        else if (strcmp(a, "--time") == 0)
            o->target_s = atof(v);
        else if (strcmp(a, "--csv") == 0)
            o->csv = v;
        else
            bench_die(NULL, "unknown option %s (see --help)", a);
        i++;
    }
    if (o->depth < 1 || o->depth > BENCH_MAX_DEPTH)
        bench_die(NULL, "--depth must be 1..%d", BENCH_MAX_DEPTH);
    if (o->min_size < 1 || o->max_size < o->min_size || o->max_size > ((size_t)1 << 30))
        bench_die(NULL, "need 1 <= --min <= --max <= 1G");
    if (o->target_s <= 0 || o->target_s > 60)
        bench_die(NULL, "--time must be in (0, 60]");
}

int main(int argc, char **argv)
{
    int handle_pipe[2], ctrl_pipe[2], ack_pipe[2], status = 0, rc;
    bench_opts_t o;
    pid_t child;

    bench_parse(&o, argc, argv);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    printf("ferry_loopback_bench: plugin %s\n", o.plugin);
    printf("  NCCL_SOCKET_IFNAME=%s NCCL_FERRY_STREAMS=%s NCCL_FERRY_THREADS=%s depth %d\n",
           getenv("NCCL_SOCKET_IFNAME"),
           getenv("NCCL_FERRY_STREAMS") ? getenv("NCCL_FERRY_STREAMS") : "(default)",
           getenv("NCCL_FERRY_THREADS") ? getenv("NCCL_FERRY_THREADS") : "(default)", o.depth);
    fflush(stdout);
    if (pipe(handle_pipe) != 0 || pipe(ctrl_pipe) != 0 || pipe(ack_pipe) != 0)
        bench_die(NULL, "pipe: %s", strerror(errno));
    child = fork();
    if (child < 0)
        bench_die(NULL, "fork: %s", strerror(errno));
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(handle_pipe[0]);
        close(ctrl_pipe[1]);
        close(ack_pipe[0]);
        rc = bench_receiver(&o, handle_pipe[1], ctrl_pipe[0], ack_pipe[1]);
        fflush(NULL);
        _exit(rc);
    }
    close(handle_pipe[1]);
    close(ctrl_pipe[0]);
    close(ack_pipe[1]);
    rc = bench_sender(&o, handle_pipe[0], ctrl_pipe[1], ack_pipe[0]);
    close(ctrl_pipe[1]);
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "ferry_loopback_bench: receiver ended with status 0x%x\n", status);
        rc = 1;
    }
    return rc;
}
