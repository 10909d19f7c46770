/*
 * integ_flush_prof LIB: the flush- and step-timing profiler
 * (bench/nccl/flush_profiler.c) loaded as NCCL loads it (dlopen, dlsym
 * "ncclProfiler_v5") and driven with synthetic events in the v5 layout: two
 * comms, several receive steps (flushed, one without a flush state, one that
 * received nothing, states out of order, one with a repeated state and an
 * unknown state id), send steps (one skipping SendPeerWait, one repeating it
 * around an unknown id), a non-SIMPLE collective, a proxy op without a
 * collective, and a step pool run dry. A fake clock
 * (ferry_flush_prof_set_clock) makes every duration known, so the printed
 * counts and percentiles of the flush_prof lines and of the step_prof lines
 * (the phases, the last one closed by stop_event) are checked exactly. Then
 * the reservoir's bound and exact totals past it.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flush_prof_abi.h"
#include "flush_prof_stats.h"
#include "soft_check.h"

static uint64_t fake_now;

static uint64_t fake_clock(void)
{
    return fake_now;
}

static const fp_profiler_v5_t *prof;

static void *coll(void *ctx, size_t count, const char *dtype, const char *proto)
{
    fp_event_descr_t d;
    void *h = NULL;

    memset(&d, 0, sizeof(d));
    d.type = FP_EVENT_COLL;
    d.coll.count = count;
    d.coll.datatype = dtype;
    d.coll.proto = proto;
    d.coll.func = "AllReduce";
    CHECK(prof->start_event(ctx, &h, &d) == 0, "coll start");
    return h;
}

static void *event(void *ctx, uint64_t type, void *parent)
{
    fp_event_descr_t d;
    void *h = NULL;

    memset(&d, 0, sizeof(d));
    d.type = type;
    d.parent = parent;
    CHECK(prof->start_event(ctx, &h, &d) == 0, "start type %llu", (unsigned long long)type);
    return h;
}

static void state(void *h, int st, uint64_t at, size_t trans)
{
    fp_state_args_t a;

    memset(&a, 0, sizeof(a));
    a.proxy_step.trans_size = trans;
    fake_now = at;
    CHECK(prof->record_state(h, st, &a) == 0, "record state %d", st);
}

static void stop_at(void *h, uint64_t at)
{
    fake_now = at;
    CHECK(prof->stop_event(h) == 0, "step stop");
}

/* One receive step under op: receive wait 10 ns before t0, flush wait at t0, GPU wait at t1
 * (t1 0: none), then stopped 100 ns after its last state. */
static void step(void *ctx, void *op, uint64_t t0, uint64_t t1, size_t trans)
{
    void *h = event(ctx, FP_EVENT_PROXY_STEP, op);

    CHECK(h != NULL, "a step handle");
    state(h, FP_STATE_RECV_WAIT, t0 > 10 ? t0 - 10 : 0, 0);
    state(h, FP_STATE_RECV_FLUSH_WAIT, t0, trans);
    if (t1 != 0)
        state(h, FP_STATE_RECV_GPU_WAIT, t1, trans);
    stop_at(h, fake_now + 100);
}

static void comm_a(void *a)
{
    void *k1 = coll(a, 262144, "ncclFloat32", "SIMPLE"); /* 1 MiB */
    void *op = event(a, FP_EVENT_PROXY_OP, k1), *h;
    void *ll, *llop, *p2pop;

    CHECK(k1 != NULL && op != NULL, "collective and proxy op handles must not be NULL");
    step(a, op, 1000, 3000, 4096);   /* 2 us */
    step(a, op, 10000, 15000, 4096); /* 5 us */
    step(a, op, 20000, 21000, 4096); /* 1 us */
    step(a, op, 25000, 0, 4096);     /* stopped before its flush completed: nothing */
    step(a, op, 26000, 29000, 0);    /* nothing received, nothing flushed */
    /* No flush state at all: a GPU wait alone gives nothing. */
    h = event(a, FP_EVENT_PROXY_STEP, op);
    state(h, FP_STATE_RECV_WAIT, 27000, 0);
    state(h, FP_STATE_RECV_GPU_WAIT, 28000, 4096);
    prof->stop_event(h);
    /* Out of order: GPU wait, flush wait, GPU wait twice: one sample (3 us). */
    h = event(a, FP_EVENT_PROXY_STEP, op);
    state(h, FP_STATE_RECV_GPU_WAIT, 29000, 4096);
    state(h, FP_STATE_RECV_FLUSH_WAIT, 30000, 4096);
    state(h, FP_STATE_RECV_GPU_WAIT, 33000, 4096);
    state(h, FP_STATE_RECV_GPU_WAIT, 39000, 4096);
    prof->stop_event(h);
    step(a, op, 40000, 44000, 4096); /* 4 us */
    prof->stop_event(op);
    prof->stop_event(k1);
    /* The same size again finds the same key. */
    CHECK(coll(a, 262144, "ncclFloat32", "SIMPLE") == k1, "one key per size and protocol");
    /* LL: not flushed by NCCL, printed as a baseline. */
    ll = coll(a, 1024, "ncclFloat32", "LL");
    llop = event(a, FP_EVENT_PROXY_OP, ll);
    step(a, llop, 50000, 50500, 64);
    /* A proxy op without a collective (p2p) still gets a handle. */
    p2pop = event(a, FP_EVENT_PROXY_OP, NULL);
    CHECK(p2pop != NULL, "a proxy op without a parent still needs a handle");
    step(a, p2pop, 60000, 60700, 64);
    /* Events nobody asked for get no handle and break nothing. */
    CHECK(event(a, FP_EVENT_GROUP, NULL) == NULL, "no group handle");
    CHECK(prof->stop_event(NULL) == 0, "stop NULL");
    CHECK(prof->record_state(NULL, FP_STATE_RECV_GPU_WAIT, NULL) == 0, "record on NULL");
}

/* Send steps of a 4 KiB collective: no flush state, so no flush_prof line, only phases. */
static void comm_b_send(void *b)
{
    void *op = event(b, FP_EVENT_PROXY_OP, coll(b, 1024, "ncclFloat32", "SIMPLE"));
    void *h = event(b, FP_EVENT_PROXY_STEP, op);

    state(h, FP_STATE_SEND_GPU_WAIT, 50000, 0);
    state(h, FP_STATE_SEND_PEER_WAIT, 52000, 0); /* GPU wait 2 us */
    state(h, FP_STATE_SEND_PEER_WAIT, 52500, 0); /* peer wait 0.5 us */
    state(h, 7, 53000, 0);                       /* unknown: the peer wait goes on */
    state(h, FP_STATE_SEND_WAIT, 53500, 0);      /* peer wait 1 us */
    stop_at(h, 56500);                           /* send wait 3 us */
    /* No peer wait at all. */
    h = event(b, FP_EVENT_PROXY_STEP, op);
    state(h, FP_STATE_SEND_GPU_WAIT, 60000, 0);
    state(h, FP_STATE_SEND_WAIT, 61000, 0); /* GPU wait 1 us */
    stop_at(h, 62000);                      /* send wait 1 us */
}

static void comm_b(void *b)
{
    void *k = coll(b, 4096, "ncclBfloat16", "SIMPLE"); /* 8 KiB */
    void *op = event(b, FP_EVENT_PROXY_OP, k), *h;
    static void *held[4097];
    int i, nulls = 0;

    step(b, op, 1000, 8000, 8192);  /* 7 us */
    step(b, op, 10000, 19000, 8192); /* 9 us */
    step(b, op, 20000, 28000, 8192); /* 8 us */
    /* The pool holds 4096 steps: the 4097th gets no handle and is counted. */
    for (i = 0; i < 4097; i++) {
        held[i] = event(b, FP_EVENT_PROXY_STEP, op);
        nulls += held[i] == NULL;
    }
    CHECK(nulls == 1, "one step past the pool gets NULL (got %d)", nulls);
    for (i = 0; i < 4097; i++)
        prof->stop_event(held[i]);
    /* Slots come back: a step started now is timed again (10 us). Its receive wait is
     * repeated around an unknown state id: 600 + 400 ns, not 500 + 100 + 400. */
    h = event(b, FP_EVENT_PROXY_STEP, op);
    state(h, FP_STATE_RECV_WAIT, 29000, 0);
    state(h, 99, 29500, 0);
    state(h, FP_STATE_RECV_WAIT, 29600, 0);
    state(h, FP_STATE_RECV_FLUSH_WAIT, 30000, 8192);
    state(h, FP_STATE_RECV_GPU_WAIT, 40000, 8192);
    stop_at(h, 41500); /* GPU wait 1.5 us */
    comm_b_send(b);
}

static int expect_line(const char *text, const char *line)
{
    if (strstr(text, line) != NULL)
        return 1;
    fprintf(stderr, "FAIL: no line containing\n  %s\nin:\n%s", line, text);
    failures++;
    return 0;
}

/* Both are in text, first before second. */
static void expect_order(const char *text, const char *first, const char *second)
{
    const char *a = strstr(text, first), *b = strstr(text, second);

    CHECK(a != NULL && b != NULL && a < b, "'%s' before '%s'", first, second);
}

static size_t count_lines(const char *text, const char *prefix)
{
    size_t n = 0;

    for (const char *p = text; (p = strstr(p, prefix)) != NULL; p++)
        n++;
    return n;
}

/* The phases: every median, percentile and count is known from the fake clock. */
static void check_steps(const char *text)
{
    static const char *const want[] = {
        /* Comm b's send steps: a repeated peer wait is two samples, stop ends the send wait. */
        "comm=000000000000000b rank=1 nranks=2 bytes=4096 proto=SIMPLE phase=SendGPUWait "
        "steps=2 median_us=1.500 p10_us=1.000 p90_us=2.000 mean_us=1.500 max_us=2.000\n",
        "comm=000000000000000b rank=1 nranks=2 bytes=4096 proto=SIMPLE phase=SendPeerWait "
        "steps=2 median_us=0.750 p10_us=0.500 p90_us=1.000 mean_us=0.750 max_us=1.000\n",
        "comm=000000000000000b rank=1 nranks=2 bytes=4096 proto=SIMPLE phase=SendWait "
        "steps=2 median_us=2.000 p10_us=1.000 p90_us=3.000 mean_us=2.000 max_us=3.000\n",
        /* Comm b's receive steps: 3 x 10 ns, then 600 + 400 around the unknown id. */
        "comm=000000000000000b rank=1 nranks=2 bytes=8192 proto=SIMPLE phase=RecvWait "
        "steps=5 median_us=0.010 p10_us=0.010 p90_us=0.600 mean_us=0.206 max_us=0.600\n",
        "comm=000000000000000b rank=1 nranks=2 bytes=8192 proto=SIMPLE phase=RecvFlushWait "
        "steps=4 median_us=8.500 p10_us=7.000 p90_us=10.000 mean_us=8.500 max_us=10.000\n",
        "comm=000000000000000b rank=1 nranks=2 bytes=8192 proto=SIMPLE phase=RecvGPUWait "
        "steps=4 median_us=0.100 p10_us=0.100 p90_us=1.500 mean_us=0.450 max_us=1.500\n",
        /* Comm a, 1 MiB: flush waits include one closed by stop (0.1) and two that
         * flushed nothing (3 each); GPU waits include the repeated ones (1, 6, 0, 0). */
        "comm=000000000000000a rank=0 nranks=2 bytes=1048576 proto=SIMPLE phase=RecvFlushWait "
        "steps=7 median_us=3.000 p10_us=0.100 p90_us=5.000 mean_us=2.586 max_us=5.000\n",
        "comm=000000000000000a rank=0 nranks=2 bytes=1048576 proto=SIMPLE phase=RecvGPUWait "
        "steps=9 median_us=0.100 p10_us=0.000 p90_us=6.000 mean_us=0.833 max_us=6.000\n",
        "comm=000000000000000a rank=0 nranks=2 bytes=unknown proto=unknown phase=RecvFlushWait "
        "steps=1 median_us=0.700 p10_us=0.700 p90_us=0.700 mean_us=0.700 max_us=0.700\n",
    };
    size_t i;

    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        expect_line(text, want[i]);
    /* Comm a: 3 phases for each of LL, 1 MiB, unknown; comm b: 3 send, 3 receive. */
    CHECK(count_lines(text, "step_prof: ") == 15, "15 step_prof lines:\n%s", text);
    /* After the flush lines; ascending size, keys[0] last; phases in step order. */
    expect_order(text, "bytes=all proto=SIMPLE flushes=5", "step_prof: ");
    expect_order(text, "bytes=4096 proto=LL phase=RecvWait", "bytes=1048576 proto=SIMPLE phase=");
    expect_order(text, "bytes=1048576 proto=SIMPLE phase=RecvGPUWait",
                 "bytes=unknown proto=unknown phase=");
    expect_order(text, "bytes=4096 proto=SIMPLE phase=SendWait", "bytes=8192 proto=SIMPLE phase=");
    expect_order(text, "phase=SendGPUWait", "phase=SendPeerWait");
    expect_order(text, "phase=RecvWait", "phase=RecvFlushWait");
}

static void check_output(const char *path)
{
    static char text[32768];
    FILE *f = fopen(path, "r");
    size_t n;

    CHECK(f != NULL, "no output file %s", path);
    if (f == NULL)
        return;
    n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    expect_line(text, "comm=000000000000000a rank=0 nranks=2 bytes=4096 proto=LL "
                "noflush_steps=1 median_us=0.500 p10_us=0.500 p90_us=0.500 mean_us=0.500 "
                "max_us=0.500\n");
    expect_line(text, "comm=000000000000000a rank=0 nranks=2 bytes=1048576 proto=SIMPLE "
                "flushes=5 median_us=3.000 p10_us=1.000 p90_us=5.000 mean_us=3.000 "
                "max_us=5.000\n");
    expect_line(text, "comm=000000000000000a rank=0 nranks=2 bytes=unknown proto=unknown "
                "steps=1 median_us=0.700 ");
    expect_line(text, "comm=000000000000000a rank=0 nranks=2 bytes=all proto=SIMPLE "
                "flushes=5 median_us=3.000 p10_us=1.000 p90_us=5.000 mean_us=3.000 "
                "max_us=5.000 untimed_steps=0\n");
    expect_line(text, "comm=000000000000000b rank=1 nranks=2 bytes=8192 proto=SIMPLE "
                "flushes=4 median_us=8.500 p10_us=7.000 p90_us=10.000 mean_us=8.500 "
                "max_us=10.000\n");
    expect_line(text, "comm=000000000000000b rank=1 nranks=2 bytes=all proto=SIMPLE "
                "flushes=4 median_us=8.500 p10_us=7.000 p90_us=10.000 mean_us=8.500 "
                "max_us=10.000 untimed_steps=1\n");
    /* Comm a: LL, 1 MiB, unknown, all; comm b: 8 KiB, all. */
    n = count_lines(text, "flush_prof: ");
    CHECK(n == 6, "6 lines, got %zu:\n%s", n, text);
    check_steps(text);
}

/* Past FP_RESERVOIR samples: exact count, mean and max; the held samples stay bounded. */
static void check_reservoir(void)
{
    static fp_stats_t s;
    fp_summary_t sum;
    uint64_t i;

    fp_stats_init(&s);
    for (i = 1; i <= 100000; i++)
        fp_stats_add(&s, i * 1000);
    fp_stats_summary(&s, &sum);
    CHECK(s.n == FP_RESERVOIR, "reservoir holds %u", s.n);
    CHECK(sum.count == 100000, "count %llu", (unsigned long long)sum.count);
    CHECK(sum.mean_us > 50000.49 && sum.mean_us < 50000.51, "mean %.3f", sum.mean_us);
    CHECK(sum.max_us == 100000.0, "max %.3f", sum.max_us);
    /* A uniform sample of 1..100000 us: its median lies near 50000 (5 sigma is ~4000). */
    CHECK(sum.median_us > 45000 && sum.median_us < 55000, "median %.3f", sum.median_us);
    CHECK(sum.p10_us > 7000 && sum.p10_us < 13000, "p10 %.3f", sum.p10_us);
}

int main(int argc, char **argv)
{
    void (*set_clock)(uint64_t (*)(void));
    char tmpl[] = "/tmp/integ_flush_prof.XXXXXX", out[256], path[300];
    void *lib, *a = NULL, *b = NULL;
    int mask = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: integ_flush_prof LIBFERRY_FLUSH_PROF.so\n");
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "FAIL: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    prof = dlsym(lib, "ncclProfiler_v5");
    *(void **)&set_clock = dlsym(lib, "ferry_flush_prof_set_clock");
    if (prof == NULL || set_clock == NULL || mkdtemp(tmpl) == NULL) {
        fprintf(stderr, "FAIL: ncclProfiler_v5 %p, ferry_flush_prof_set_clock %p, mkdtemp\n",
                (const void *)prof, *(void **)&set_clock);
        return 1;
    }
    CHECK(prof->name != NULL && strcmp(prof->name, "ferry-flush-prof") == 0, "name");
    snprintf(out, sizeof(out), "%s/fp.%%p.txt", tmpl);
    snprintf(path, sizeof(path), "%s/fp.%ld.txt", tmpl, (long)getpid());
    setenv("FERRY_FLUSH_PROF_OUT", out, 1);
    set_clock(fake_clock);
    CHECK(prof->init(&a, 0xa, &mask, "a", 1, 2, 0, NULL) == 0 && a != NULL, "init a");
    CHECK(mask == FP_EVENT_PROXY_STEP, "activation mask 0x%x", mask);
    CHECK(prof->init(&b, 0xb, &mask, "b", 1, 2, 1, NULL) == 0 && b != NULL, "init b");
    comm_a(a);
    comm_b(b);
    CHECK(prof->finalize(a) == 0, "finalize a");
    CHECK(prof->finalize(b) == 0, "finalize b");
    set_clock(NULL);
    check_output(path);
    check_reservoir();
    unlink(path);
    rmdir(tmpl);
    dlclose(lib);
    if (failures != 0) {
        fprintf(stderr, "integ_flush_prof: %d failures\n", failures);
        return 1;
    }
    printf("integ_flush_prof: PASS\n");
    return 0;
}
