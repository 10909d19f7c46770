/*
 * integ_config: how the plugin meets its environment and its life cycle.
 * Each case runs in a fresh child process (its own environment, its own
 * dlopen), the way each NCCL job starts.
 *
 *   backend-ib       NCCL_FERRY_BACKEND=ib: init fails (no IB backend yet) with
 *                    a WARN about the backend; finalize after the failed init
 *                    (NCCL calls it) and finalize(NULL) are safe
 *   backend-bogus    NCCL_FERRY_BACKEND=bogus: init fails, the WARN names the
 *                    variable and the value
 *   backend-socket   NCCL_FERRY_BACKEND=socket: init and devices work
 *   no-interface     NCCL_SOCKET_IFNAME names no interface: init fails or
 *                    devices() reports 0, so NCCL can fall back
 *   backend-socket   ... and the effective-config line holds the core's variables and
 *                    then the socket backend's, each with its source
 *   bad-streams      NCCL_FERRY_STREAMS=1000: the socket backend's init fails with the
 *                    WARN that names variable, value and what is accepted
 *   one-stream       NCCL_FERRY_STREAMS=1: data still flows, 1 TCP stream
 *   reinit-reload    every comm closed and finalized, then init again in the
 *                    same load (NCCL_NET_PLUGIN_REF_COUNT=1); then dlclose and
 *                    dlopen again (NCCL's unload/reload); data flows each time
 *                    and no ferry-* thread outlives a dlclose
 *   close-after-finalize  every context finalized while its comms are open;
 *                    the comms then close cleanly and dlclose leaves no thread
 *   many-comms       32 connections open at once, each carries 1 MiB intact
 *   stall-warn       NCCL_FERRY_STALL_WARN_S=1: a 64 MiB send nobody receives and
 *                    a receive nobody sends to each get one WARN naming the
 *                    request, its state, the peer and what to check (once per
 *                    stall, again after the comm moved); all complete intact
 *   ib-socket-vars   (fakeibv) the ib backend never parses the socket backend's
 *                    variables: a bad NCCL_FERRY_STREAMS does not fail its init,
 *                    and its config line has the core's and ib's variables only
 *   ib-auto-*        (fakeibv) auto choosing socket: a WARN with the cause and the
 *                    fix where ib was meant (NCCL_IB_HCA matching no port, an
 *                    NCCL_IB_* variable without a device), none where it was not
 *                    (no device and no variable, NCCL_IB_DISABLE=1); integ_config_auto.c
 *
 *   integ_config [--plugin PATH] [--case NAME]
 */
#include <errno.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "integ_config_auto.h"

#define CONFIG_WATCHDOG_SECS 100

typedef struct config_case {
    const char *name;
    const char *env[4];  /* "NAME=value" set in the child before dlopen. */
    void      (*run)(const char *path);
} config_case_t;

static int config_ci_contains(const char *hay, const char *needle)
{
    return strcasestr(hay, needle) != NULL;
}

/* init that must fail; returns the ctx it left (maybe NULL), prints the WARN. */
static void *config_init_must_fail(const fit_plugin_t *p, const char *what)
{
    ncclNetCommConfig_v11_t cfg = { .trafficClass = -1 };
    void *ctx = NULL;
    ncclResult_t rc = p->net->init(&ctx, 0x77, &cfg, fit_logger, NULL);

    FIT_CHECK(rc != ncclSuccess, "%s: init returned ncclSuccess", what);
    printf("  init -> %d (%s)\n", (int)rc, fit_result_str(rc));
    return ctx;
}

/* What NCCL does after a failed init: finalize(ctx) anyway; then also finalize(NULL). */
static void config_finalize_after_failure(const fit_plugin_t *p, void *ctx)
{
    ncclResult_t rc = p->net->finalize(ctx);

    printf("  finalize(%p) after the failed init -> %d\n", ctx, (int)rc);
    rc = p->net->finalize(NULL);
    printf("  finalize(NULL) -> %d\n", (int)rc);
}

static void config_close(fit_plugin_t *p)
{
    fit_plugin_close(p);
    fit_check_no_ferry_threads("after dlclose");
}

static void config_backend_ib(const char *path)
{
    fit_plugin_t p;
    char line[4096];
    void *ctx;

    fit_log_allow_warns(1);
    fit_plugin_open(&p, path);
    ctx = config_init_must_fail(&p, "NCCL_FERRY_BACKEND=ib");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, NULL, NULL, NULL, line, sizeof(line)) >= 0,
              "init failed without a WARN");
    printf("  WARN: %s\n", line);
    FIT_CHECK(config_ci_contains(line, "ib") &&
              (config_ci_contains(line, "backend") || strstr(line, "NCCL_FERRY_BACKEND")),
              "the WARN does not say the ib backend is the reason: %s", line);
    config_finalize_after_failure(&p, ctx);
    config_close(&p);
}

static void config_backend_bogus(const char *path)
{
    fit_plugin_t p;
    char line[4096];
    void *ctx;

    fit_log_allow_warns(1);
    fit_plugin_open(&p, path);
    ctx = config_init_must_fail(&p, "NCCL_FERRY_BACKEND=bogus");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "NCCL_FERRY_BACKEND", "bogus", NULL, line,
                           sizeof(line)) >= 0,
              "no WARN names NCCL_FERRY_BACKEND and 'bogus'");
    printf("  WARN: %s\n", line);
    config_finalize_after_failure(&p, ctx);
    config_close(&p);
}

static void config_backend_socket(const char *path)
{
    fit_plugin_t p;
    char line[4096];
    void *ctx;
    int ndev = 0;

    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 0x78);
    FIT_NCCL(p.net->devices(&ndev));
    FIT_CHECK(ndev >= 1, "devices() = %d", ndev);
    /* One line: the core's variables, then the socket backend's (its format_config). */
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "socket backend, config backend=socket(env) ",
                           " stall_warn=60s(default) rma=1(default) streams=", " socket_timeout=30s(default)",
                           line, sizeof(line)) >= 0,
              "no effective-config line with the core's and then the socket backend's variables");
    FIT_CHECK(strstr(line, " retry=34x100ms(default) ") != NULL &&
              strstr(line, " chunk=65536..1048576(default) ") != NULL &&
              strstr(line, " zerocopy=0/65536(default) ") != NULL,
              "the effective-config line lacks a variable: %s", line);
    FIT_NCCL(p.net->finalize(ctx));
    fit_log_check_clean("backend=socket");
    config_close(&p);
}

/*
 * Loopback's reported speed: 400 Gbps with ferry's tuner and helper threads,
 * 100 Gbps without either.
 */
static void config_lo_speed(const char *path, int want)
{
    ncclNetProperties_v11_t props;
    fit_plugin_t p;
    void *ctx;
    int ndev = 0;

    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 0x79);
    FIT_NCCL(p.net->devices(&ndev));
    FIT_CHECK(ndev >= 1, "devices() = %d", ndev);
    FIT_NCCL(p.net->getProperties(0, &props));
    FIT_CHECK(strcmp(props.name, "lo") == 0, "device 0 is %s, not lo", props.name);
    FIT_CHECK(props.speed == want, "lo reports %d Mbps, expected %d (NCCL_FERRY_TUNER=%s "
              "NCCL_TUNER_PLUGIN=%s NCCL_FERRY_SPEED_MBPS=%s)", props.speed, want,
              getenv("NCCL_FERRY_TUNER") ? getenv("NCCL_FERRY_TUNER") : "(unset)",
              getenv("NCCL_TUNER_PLUGIN") ? getenv("NCCL_TUNER_PLUGIN") : "(unset)",
              getenv("NCCL_FERRY_SPEED_MBPS") ? getenv("NCCL_FERRY_SPEED_MBPS") : "(unset)");
    FIT_NCCL(p.net->finalize(ctx));
    config_close(&p);
}

/* A runner on one or two CPUs derives no helper threads, and then 100 Gbps is right. */
static void config_lo_speed_tuner(const char *path)
{
    cpu_set_t set;
    int few_cpus = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) <= 2;

    config_lo_speed(path, few_cpus ? 100000 : 400000);
}
static void config_lo_speed_no_tuner(const char *path) { config_lo_speed(path, 100000); }
static void config_lo_speed_set(const char *path) { config_lo_speed(path, 25000); }

static void config_traffic(const fit_plugin_t *p, void *ctx_l, void *ctx_c, uint64_t seed,
                           int expect_streams);

/* NCCL_FERRY_ZEROCOPY=1 on loopback: the kernel copies, ferry notices and says so, data intact. */
static void config_zerocopy_fallback(const char *path)
{
    fit_plugin_t p;
    void *a, *b;
    char line[4096];

    fit_plugin_open(&p, path);
    a = fit_plugin_init(&p, 0x7c);
    b = fit_plugin_init(&p, 0x7d);
    config_traffic(&p, a, b, 0x2e80c0, 0);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "zerocopy=1/65536(env)", NULL, NULL, line,
                           sizeof(line)) >= 0, "the config line does not show zerocopy=1");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "copied zerocopy sends anyway", "stream", NULL, line,
                           sizeof(line)) >= 0,
              "no INFO line says loopback copied the zerocopy sends and ferry fell back");
    printf("  %s\n", line);
    FIT_NCCL(p.net->finalize(b));
    FIT_NCCL(p.net->finalize(a));
    fit_log_check_clean("zerocopy fallback");
    config_close(&p);
}

/* Call test() on req for `seconds` (it must not finish); bounded like every wait here. */
static void config_test_idle(const fit_plugin_t *p, void *req, double seconds, const char *what)
{
    double end = fit_now() + seconds;
    int done = 0, size = -1;

    while (fit_now() < end) {
        FIT_NCCL(p->net->test(req, &done, &size));
        FIT_CHECK(!done, "%s finished while nothing should have moved it", what);
        usleep(2000);
    }
}

static void config_test_done(const fit_plugin_t *p, void *req, size_t expect, const char *what)
{
    fit_bound_t b;
    int done = 0, size = -1;

    fit_bound_init(&b, what, 20.0, 100000000L);
    while (!done) {
        FIT_NCCL(p->net->test(req, &done, &size));
        if (!done)
            fit_bound_step(&b);
    }
    FIT_CHECK((size_t)size == expect, "%s: %d bytes reported, %zu expected", what, size, expect);
}

/*
 * test() a send and its receive in turn until both are done, as NCCL's proxy
 * does: without helper threads (a runner on one or two CPUs) each side moves
 * only inside its own test().
 */
static void config_test_pair(const fit_plugin_t *p, void *sreq, void *rreq, size_t expect,
                             const char *what)
{
    int sdone = 0, rdone = 0, ssize = -1, rsize = -1;
    fit_bound_t b;

    fit_bound_init(&b, what, 20.0, 100000000L);
    while (!sdone || !rdone) {
        if (!sdone)
            FIT_NCCL(p->net->test(sreq, &sdone, &ssize));
        if (!rdone)
            FIT_NCCL(p->net->test(rreq, &rdone, &rsize));
        if (!sdone || !rdone)
            fit_bound_step(&b);
    }
    FIT_CHECK((size_t)ssize == expect && (size_t)rsize == expect,
              "%s: %d bytes sent and %d received, %zu expected", what, ssize, rsize, expect);
}

/* Post a receive of cap bytes into buf and call test() on it, idle, for `seconds`. */
static void *config_idle_recv(const fit_plugin_t *p, void *recv_comm, void *rmh, void *buf,
                              size_t cap, double seconds)
{
    void *req = NULL;
    int tag = 7;

    FIT_NCCL(p->net->irecv(recv_comm, 1, &buf, &cap, &tag, &rmh, NULL, &req));
    FIT_CHECK(req != NULL, "irecv returned no request");
    config_test_idle(p, req, seconds, "a receive with no sender");
    return req;
}

/* Send n pattern bytes and see both requests through. */
static void config_send_now(const fit_plugin_t *p, void *send_comm, void *smh, char *sbuf,
                            void *rreq, char *rbuf, size_t n, uint64_t seed)
{
    void *sreq = NULL;

    fit_fill(sbuf, n, seed);
    FIT_NCCL(p->net->isend(send_comm, sbuf, n, 1, smh, NULL, &sreq));
    FIT_CHECK(sreq != NULL, "isend returned no request");
    config_test_done(p, sreq, n, "the late send");
    config_test_done(p, rreq, n, "the receive of the late send");
    fit_check_pattern(rbuf, n, seed, "the receive of the late send");
}

/*
 * NCCL_FERRY_STALL_WARN_S=1: a 64 MiB send nobody receives (more than the
 * socket buffers hold) and a receive nobody sends to each get one WARN that
 * names the request, its state, the peer and what to check; one WARN per
 * stall of a comm, and a new one once the comm has moved again; everything
 * then completes intact.
 */
static void config_stall_warn(const char *path)
{
    const size_t big = (size_t)64 << 20;
    char handle[NCCL_NET_HANDLE_MAXSIZE], line[4096];
    void *a, *b, *listen_comm, *send_comm, *recv_comm, *smh, *rmh, *rreq, *sreq;
    char *sbuf = malloc(big), *rbuf = malloc(big);
    size_t cap = big;
    int tag = 7, from, first;
    fit_plugin_t p;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc");
    fit_plugin_open(&p, path);
    a = fit_plugin_init(&p, 0x51);
    b = fit_plugin_init(&p, 0x52);
    listen_comm = fit_listen(&p, a, 0, handle);
    fit_connect_accept(&p, b, 0, handle, listen_comm, &send_comm, &recv_comm, NULL);
    FIT_NCCL(p.net->closeListen(listen_comm));
    FIT_NCCL(p.net->regMr(send_comm, sbuf, big, NCCL_PTR_HOST, &smh));
    FIT_NCCL(p.net->regMr(recv_comm, rbuf, big, NCCL_PTR_HOST, &rmh));
    fit_log_expect("has made no progress for");

    /* 1. A send larger than the socket buffers, no receive posted. */
    from = fit_log_lines();
    fit_fill(sbuf, big, 0x5a12);
    sreq = NULL;
    FIT_NCCL(p.net->isend(send_comm, sbuf, big, 1, smh, NULL, &sreq));
    FIT_CHECK(sreq != NULL, "isend returned no request");
    config_test_idle(&p, sreq, 2.5, "a 64 MiB send with no receive");
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "send request seq 0 has made no progress",
                           "127.0.0.1", "The peer is not reading", line, sizeof(line)) >= 0,
              "no WARN about the stalled send (peer, seq, what to check)");
    FIT_CHECK(strstr(line, "state ACTIVE") != NULL && strstr(line, "blocked") != NULL,
              "the stalled send's WARN lacks its state or its blocked streams: %s", line);
    printf("  %s\n", line);
    rreq = NULL;
    FIT_NCCL(p.net->irecv(recv_comm, 1, (void **)&rbuf, &cap, &tag, &rmh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv returned no request");
    config_test_pair(&p, sreq, rreq, big, "the stalled send and its receive");
    fit_check_pattern(rbuf, big, 0x5a12, "the receive of the stalled send");

    /* 2. A receive nobody sends to: one WARN however long it waits. */
    from = fit_log_lines();
    rreq = config_idle_recv(&p, recv_comm, rmh, rbuf, 4096, 2.6);
    first = fit_log_find(from, NCCL_LOG_WARN, "recv request seq 1 has made no progress for 1 s",
                         "127.0.0.1", "Nothing arrives from the peer", line, sizeof(line));
    FIT_CHECK(first >= 0, "no WARN about the idle receive (peer, seq, what to check)");
    FIT_CHECK(strstr(line, "state POSTED") != NULL && strstr(line, "buffer 4096") != NULL &&
              strstr(line, "NCCL_FERRY_STALL_WARN_S") != NULL,
              "the idle receive's WARN lacks its state, buffer or the knob: %s", line);
    printf("  %s\n", line);
    FIT_CHECK(fit_log_find(first + 1, NCCL_LOG_WARN, "has made no progress", NULL, NULL, NULL,
                           0) < 0, "the idle receive was reported more than once");
    config_send_now(&p, send_comm, smh, sbuf, rreq, rbuf, 4096, 0x5a11);

    /* 3. The comm moved since: its next stall gets its own WARN. */
    from = fit_log_lines();
    rreq = config_idle_recv(&p, recv_comm, rmh, rbuf, 4096, 1.6);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "recv request seq 2 has made no progress", NULL,
                           NULL, NULL, 0) >= 0, "a second stall after progress was not reported");
    config_send_now(&p, send_comm, smh, sbuf, rreq, rbuf, 100, 0x5a13);

    FIT_NCCL(p.net->deregMr(send_comm, smh));
    FIT_NCCL(p.net->deregMr(recv_comm, rmh));
    FIT_NCCL(p.net->closeSend(send_comm));
    FIT_NCCL(p.net->closeRecv(recv_comm));
    FIT_NCCL(p.net->finalize(a));
    FIT_NCCL(p.net->finalize(b));
    fit_log_check_clean("stall warnings");
    config_close(&p);
    free(sbuf);
    free(rbuf);
}

static void config_no_interface(const char *path)
{
    ncclNetCommConfig_v11_t cfg = { .trafficClass = -1 };
    fit_plugin_t p;
    void *ctx = NULL;
    ncclResult_t rc;
    int ndev = -1;

    fit_log_allow_warns(1);
    fit_plugin_open(&p, path);
    rc = p.net->init(&ctx, 0x79, &cfg, fit_logger, NULL);
    if (rc == ncclSuccess) {
        rc = p.net->devices(&ndev);
        FIT_CHECK(rc != ncclSuccess || ndev == 0,
                  "NCCL_SOCKET_IFNAME=%s matched nothing yet devices() = %d",
                  getenv("NCCL_SOCKET_IFNAME"), ndev);
    }
    printf("  init/devices -> %d (%s), ndev %d: NCCL would fall back\n", (int)rc,
           fit_result_str(rc), ndev);
    FIT_CHECK(fit_log_lines() > 0, "no log line says why no device was found");
    config_finalize_after_failure(&p, ctx);
    config_close(&p);
}

static void config_bad_streams(const char *path)
{
    ncclNetCommConfig_v11_t cfg = { .trafficClass = -1 };
    fit_plugin_t p;
    char line[4096];
    void *ctx = NULL;
    ncclResult_t rc;

    fit_log_allow_warns(1);
    fit_plugin_open(&p, path);
    rc = p.net->init(&ctx, 0x7a, &cfg, fit_logger, NULL);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "NCCL_FERRY_STREAMS='1000' is not valid: expected "
                           "TCP streams per connection, 1..64; unset it or fix the value", NULL,
                           NULL, line, sizeof(line)) >= 0, "no WARN names NCCL_FERRY_STREAMS=1000");
    printf("  init -> %d; WARN: %s\n", (int)rc, line);
    FIT_CHECK(rc != ncclSuccess, "init succeeded with NCCL_FERRY_STREAMS=1000");
    config_finalize_after_failure(&p, ctx);
    config_close(&p);
}

/*
 * The ib backend: the socket backend's variables are never parsed, so bad
 * ones neither fail init nor show; the line has the core's and ib's.
 */
static void config_ib_socket_vars(const char *path)
{
    fit_plugin_t p;
    char line[4096];
    void *ctx;
    int ndev = 0;

    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 0x7f);
    FIT_NCCL(p.net->devices(&ndev));
    FIT_CHECK(ndev >= 1, "devices() = %d", ndev);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "ib backend, config backend=ib(env) ",
                           " stall_warn=60s(default) rma=1(default) NCCL_IB_HCA=", NULL, line,
                           sizeof(line)) >= 0,
              "no effective-config line with the core's and then the ib backend's variables");
    FIT_CHECK(strstr(line, "streams=") == NULL && strstr(line, "socket_timeout=") == NULL,
              "the ib backend's config line shows socket variables: %s", line);
    FIT_NCCL(p.net->finalize(ctx));
    fit_log_check_clean("ib with bad socket variables");
    config_close(&p);
}

/* listen/connect/accept in one process and move a few sizes through. */
static void config_traffic(const fit_plugin_t *p, void *ctx_l, void *ctx_c, uint64_t seed,
                           int expect_streams)
{
    static const size_t sizes[] = { 0, 1, 4095, 65536, 1000003, (size_t)8 << 20 };
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *listen_comm, *send_comm, *recv_comm;
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    int port, streams;

    listen_comm = fit_listen(p, ctx_l, 0, handle);
    port = fit_handle_port(handle);
    fit_connect_accept(p, ctx_c, 0, handle, listen_comm, &send_comm, &recv_comm, NULL);
    FIT_NCCL(p->net->closeListen(listen_comm));
    o.sizes   = sizes;
    o.nmsgs   = (int)(sizeof(sizes) / sizeof(sizes[0]));
    o.depth   = 4;
    o.seed    = seed;
    o.seconds = 30.0;
    fit_xfer_inproc(p, send_comm, recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, "traffic");
    streams = fit_count_established_local(port);
    if (expect_streams > 0)
        FIT_CHECK(streams == expect_streams, "expected %d TCP stream(s), found %d",
                  expect_streams, streams);
    FIT_NCCL(p->net->closeSend(send_comm));
    FIT_NCCL(p->net->closeRecv(recv_comm));
}

static void config_one_stream(const char *path)
{
    fit_plugin_t p;
    void *a, *b;

    fit_plugin_open(&p, path);
    a = fit_plugin_init(&p, 0x7b);
    b = fit_plugin_init(&p, 0x7c);
    config_traffic(&p, a, b, 4242, 1);
    FIT_NCCL(p.net->finalize(a));
    FIT_NCCL(p.net->finalize(b));
    fit_log_check_clean("one stream");
    config_close(&p);
}

static void config_reinit_reload(const char *path)
{
    fit_plugin_t p;
    void *a, *b;
    int round;

    for (round = 0; round < 2; round++) {
        fit_plugin_open(&p, path);
        a = fit_plugin_init(&p, 0x100 + (uint64_t)round);
        b = fit_plugin_init(&p, 0x200 + (uint64_t)round);
        config_traffic(&p, a, b, 500 + (uint64_t)round, 0);
        /* Finalize in creation order, then start over within the same load. */
        FIT_NCCL(p.net->finalize(a));
        FIT_NCCL(p.net->finalize(b));
        a = fit_plugin_init(&p, 0x300 + (uint64_t)round);
        b = fit_plugin_init(&p, 0x400 + (uint64_t)round);
        config_traffic(&p, b, a, 600 + (uint64_t)round, 0);
        FIT_NCCL(p.net->finalize(b));
        FIT_NCCL(p.net->finalize(a));
        fit_log_check_clean("reinit");
        config_close(&p);
        printf("  load %d: init, traffic, finalize, re-init, traffic, finalize, dlclose\n",
               round + 1);
    }
}

/* NCCL may finalize a context before its proxy thread closes the comms made with it. */
static void config_close_after_finalize(const char *path)
{
    static const size_t sizes[] = { 1, 65536, (size_t)4 << 20 };
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *a, *b, *listen_comm, *send_comm, *recv_comm;
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    fit_plugin_t p;

    fit_plugin_open(&p, path);
    a = fit_plugin_init(&p, 0x7d);
    b = fit_plugin_init(&p, 0x7e);
    listen_comm = fit_listen(&p, a, 0, handle);
    fit_connect_accept(&p, b, 0, handle, listen_comm, &send_comm, &recv_comm, NULL);
    o.sizes   = sizes;
    o.nmsgs   = 3;
    o.depth   = 2;
    o.seed    = 77;
    o.seconds = 30.0;
    fit_xfer_inproc(&p, send_comm, recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, "before finalize");
    FIT_NCCL(p.net->finalize(a));
    FIT_NCCL(p.net->finalize(b));
    /* The comms outlive their contexts: they must still close cleanly. */
    FIT_NCCL(p.net->closeListen(listen_comm));
    FIT_NCCL(p.net->closeSend(send_comm));
    FIT_NCCL(p.net->closeRecv(recv_comm));
    fit_log_check_clean("close after finalize");
    config_close(&p);
}

#define CONFIG_MANY 32

/* Many comms at once, as NCCL opens per channel and peer: all connect, all carry data. */
static void config_many_comms(const char *path)
{
    static void *send_comm[CONFIG_MANY], *recv_comm[CONFIG_MANY];
    size_t size = (size_t)1 << 20;
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    char names[64];
    fit_plugin_t p;
    void *a, *b;
    int i, threads;

    fit_plugin_open(&p, path);
    a = fit_plugin_init(&p, 0x80);
    b = fit_plugin_init(&p, 0x81);
    for (i = 0; i < CONFIG_MANY; i++) {
        void *listen_comm = fit_listen(&p, a, 0, handle);

        fit_connect_accept(&p, b, 0, handle, listen_comm, &send_comm[i], &recv_comm[i], NULL);
        FIT_NCCL(p.net->closeListen(listen_comm));
    }
    threads = fit_count_threads("ferry-", names, sizeof(names));
    printf("  %d comm pairs open, %d ferry-* threads\n", CONFIG_MANY, threads);
    o.sizes   = &size;
    o.nmsgs   = 1;
    o.depth   = 1;
    o.seconds = 30.0;
    for (i = 0; i < CONFIG_MANY; i++) {
        o.seed = 900 + (uint64_t)i;
        fit_xfer_inproc(&p, send_comm[i], recv_comm[i], &o, &r);
        fit_xfer_expect_ok(&r, "many comms");
    }
    for (i = 0; i < CONFIG_MANY; i++) {
        FIT_NCCL(p.net->closeSend(send_comm[i]));
        FIT_NCCL(p.net->closeRecv(recv_comm[i]));
    }
    FIT_NCCL(p.net->finalize(a));
    FIT_NCCL(p.net->finalize(b));
    fit_log_check_clean("many comms");
    config_close(&p);
}

/* isend until the receiver-driven ib backend has the clear-to-send (bounded). */
static void *config_isend_ready(const fit_plugin_t *p, void *send_comm, void *smh, char *sbuf,
                                size_t n, int tag)
{
    fit_bound_t b;
    void *sreq = NULL;

    fit_bound_init(&b, "isend (waiting for the clear-to-send)", 20.0, 100000000L);
    for (;;) {
        FIT_NCCL(p->net->isend(send_comm, sbuf, n, tag, smh, NULL, &sreq));
        if (sreq != NULL)
            return sreq;
        fit_bound_step(&b);
    }
}

/*
 * The ib backend, NCCL_FERRY_STALL_WARN_S=1: an isend whose receiver never
 * posts returns NULL (receiver-driven, as NCCL's IB) and gets one WARN that
 * says it waits for the receiver's clear-to-send; a receive nobody sends to
 * gets the engine's WARN in ib words (clear-to-send written, waiting for the
 * sender's data). Both then complete intact.
 */
static void config_ib_stall_warn(const char *path)
{
    const size_t big = (size_t)4 << 20;
    char handle[NCCL_NET_HANDLE_MAXSIZE], line[4096];
    void *a, *b, *listen_comm, *send_comm, *recv_comm, *smh, *rmh, *rreq, *sreq;
    char *sbuf = malloc(big), *rbuf = malloc(big);
    size_t cap = big;
    int tag = 1, from, first;
    double end;
    fit_plugin_t p;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc");
    fit_plugin_open(&p, path);
    a = fit_plugin_init(&p, 0x61);
    b = fit_plugin_init(&p, 0x62);
    listen_comm = fit_listen(&p, a, 0, handle);
    fit_connect_accept(&p, b, 0, handle, listen_comm, &send_comm, &recv_comm, NULL);
    FIT_NCCL(p.net->closeListen(listen_comm));
    FIT_NCCL(p.net->regMr(send_comm, sbuf, big, NCCL_PTR_HOST, &smh));
    FIT_NCCL(p.net->regMr(recv_comm, rbuf, big, NCCL_PTR_HOST, &rmh));
    fit_log_expect("has waited");
    fit_log_expect("has made no progress for");

    /* 1. A send whose receiver has not posted: NULL requests, one WARN naming the wait. */
    from = fit_log_lines();
    fit_fill(sbuf, big, 0x6b01);
    for (end = fit_now() + 2.5; fit_now() < end; usleep(2000)) {
        sreq = NULL;
        FIT_NCCL(p.net->isend(send_comm, sbuf, big, 1, smh, NULL, &sreq));
        FIT_CHECK(sreq == NULL, "isend returned a request before the receiver posted");
    }
    first = fit_log_find(from, NCCL_LOG_WARN, "isend of message 0", "clear-to-send",
                         "has not posted the matching irecv", line, sizeof(line));
    FIT_CHECK(first >= 0, "no WARN about the send waiting for its clear-to-send");
    FIT_CHECK(strstr(line, "127.0.0.1") != NULL && strstr(line, "NCCL_FERRY_STALL_WARN_S"),
              "the clear-to-send WARN lacks the peer or the knob: %s", line);
    printf("  %s\n", line);
    FIT_CHECK(fit_log_find(first + 1, NCCL_LOG_WARN, "has waited", NULL, NULL, NULL, 0) < 0,
              "the clear-to-send wait was reported more than once");
    rreq = NULL;
    FIT_NCCL(p.net->irecv(recv_comm, 1, (void **)&rbuf, &cap, &tag, &rmh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv returned no request");
    sreq = config_isend_ready(&p, send_comm, smh, sbuf, big, 1);
    config_test_done(&p, sreq, big, "the send that waited");
    config_test_done(&p, rreq, big, "its receive");
    fit_check_pattern(rbuf, big, 0x6b01, "the send that waited");

    /* 2. A receive nobody sends to: the engine's WARN, the ib backend's words. */
    from = fit_log_lines();
    rreq = config_idle_recv(&p, recv_comm, rmh, rbuf, 4096, 2.6);
    first = fit_log_find(from, NCCL_LOG_WARN, "recv request seq 1 has made no progress for 1 s",
                         "Waiting for the sender's data", "127.0.0.1", line, sizeof(line));
    FIT_CHECK(first >= 0, "no WARN about the idle ib receive (peer, seq, what it waits for)");
    FIT_CHECK(strstr(line, "WRs posted") != NULL && strstr(line, "QP(s)") != NULL,
              "the idle receive's WARN lacks its WR counters or QPs: %s", line);
    printf("  %s\n", line);
    FIT_CHECK(fit_log_find(first + 1, NCCL_LOG_WARN, "has made no progress", NULL, NULL, NULL,
                           0) < 0, "the idle receive was reported more than once");
    fit_fill(sbuf, 4096, 0x6b02);
    sreq = config_isend_ready(&p, send_comm, smh, sbuf, 4096, 7); /* config_idle_recv's tag. */
    config_test_done(&p, sreq, 4096, "the late send");
    config_test_done(&p, rreq, 4096, "the receive of the late send");
    fit_check_pattern(rbuf, 4096, 0x6b02, "the receive of the late send");

    FIT_NCCL(p.net->deregMr(send_comm, smh));
    FIT_NCCL(p.net->deregMr(recv_comm, rmh));
    FIT_NCCL(p.net->closeSend(send_comm));
    FIT_NCCL(p.net->closeRecv(recv_comm));
    FIT_NCCL(p.net->finalize(a));
    FIT_NCCL(p.net->finalize(b));
    fit_log_check_clean("ib stall warnings");
    config_close(&p);
    free(sbuf);
    free(rbuf);
}

/*
 * NCCL_FERRY_BACKEND=auto picks ib where a port is usable (fakeibv loaded:
 * ctest's ib entries) and socket where none is, and says which and why.
 */
static void config_auto_backend(const char *path)
{
    const char *want = getenv("CONFIG_EXPECT_BACKEND");
    char line[4096], needle[64];
    fit_plugin_t p;
    void *ctx;
    int ndev = 0;

    FIT_CHECK(want != NULL, "CONFIG_EXPECT_BACKEND (ib or socket) is not set");
    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 0x79);
    FIT_NCCL(p.net->devices(&ndev));
    FIT_CHECK(ndev >= 1, "devices() = %d", ndev);
    snprintf(needle, sizeof(needle), "using the %s backend (NCCL_FERRY_BACKEND=auto", want);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, needle, NULL, NULL, line, sizeof(line)) >= 0,
              "no INFO line '%s...'", needle);
    printf("  %s\n", line);
    if (strcmp(want, "socket") == 0)
        FIT_CHECK(strstr(line, "ib not usable: ") != NULL,
                  "auto chose socket without saying why ib was not usable: %s", line);
    else
        FIT_CHECK(strstr(line, "fakeib0:1") != NULL,
                  "auto chose ib without naming the usable port: %s", line);
    FIT_NCCL(p.net->finalize(ctx));
    fit_log_check_clean("backend=auto");
    config_close(&p);
}

static const config_case_t config_cases[] = {
    { "backend-ib",     { "NCCL_FERRY_BACKEND=ib" },                config_backend_ib },
    { "backend-bogus",  { "NCCL_FERRY_BACKEND=bogus" },             config_backend_bogus },
    { "backend-socket", { "NCCL_FERRY_BACKEND=socket" },            config_backend_socket },
    { "no-interface",   { "NCCL_SOCKET_IFNAME=ferrynoif0" },        config_no_interface },
    { "lo-speed-tuner", { "NCCL_SOCKET_IFNAME=lo", "NCCL_FERRY_TUNER=", "NCCL_TUNER_PLUGIN=",
                          "NCCL_FERRY_THREADS=" },
                        config_lo_speed_tuner },
    /* NCCL's thread copies every byte: 2 channels serve it better than 4. */
    { "lo-speed-no-helpers", { "NCCL_SOCKET_IFNAME=lo", "NCCL_FERRY_TUNER=", "NCCL_TUNER_PLUGIN=",
                               "NCCL_FERRY_THREADS=0" },
                        config_lo_speed_no_tuner },
    { "lo-speed-tuner-off", { "NCCL_SOCKET_IFNAME=lo", "NCCL_FERRY_TUNER=0" },
                        config_lo_speed_no_tuner },
    { "lo-speed-other-tuner", { "NCCL_SOCKET_IFNAME=lo", "NCCL_TUNER_PLUGIN=none" },
                        config_lo_speed_no_tuner },
    { "zerocopy-fallback", { "NCCL_SOCKET_IFNAME=lo", "NCCL_FERRY_ZEROCOPY=1" },
                        config_zerocopy_fallback },
    { "lo-speed-set",   { "NCCL_SOCKET_IFNAME=lo", "NCCL_FERRY_SPEED_MBPS=25000" },
                        config_lo_speed_set },
    { "bad-streams",    { "NCCL_FERRY_BACKEND=socket", "NCCL_FERRY_STREAMS=1000" },
                        config_bad_streams },
    { "one-stream",     { "NCCL_FERRY_STREAMS=1", "NCCL_SOCKET_NTHREADS=", "NCCL_NSOCKS_PERTHREAD=" },
                        config_one_stream },
    { "reinit-reload",  { NULL },                                   config_reinit_reload },
    { "close-after-finalize", { NULL },                             config_close_after_finalize },
    { "many-comms",     { NULL },                                   config_many_comms },
    { "stall-warn",     { "NCCL_SOCKET_IFNAME=lo", "NCCL_FERRY_STALL_WARN_S=1" }, config_stall_warn },
    { "auto",           { "NCCL_FERRY_BACKEND=auto" },              config_auto_backend },
    /* "ib-" cases need fakeibv: ctest runs each with --case and the ib environment. */
    { "ib-stall-warn",  { "NCCL_FERRY_STALL_WARN_S=1" },            config_ib_stall_warn },
    { "ib-socket-vars", { "NCCL_FERRY_STREAMS=1000", "NCCL_SOCKET_MIN_TASKSIZE=4M",
                          "NCCL_FERRY_SOCKET_TIMEOUT_S=30s" },
                        config_ib_socket_vars },
    /* auto passing over ib (integ_config_auto.c): loud where ib was meant, else quiet. */
    { "ib-auto-hca-nosuch", { "NCCL_FERRY_BACKEND=auto", "NCCL_IB_HCA=nosuch", "FAKEIBV_NDEV=2" },
                        config_auto_hca_nosuch },
    { "ib-auto-vars-no-device", { "NCCL_FERRY_BACKEND=auto", "NCCL_IB_GID_INDEX=3",
                                  "FAKEIBV_NDEV=0" },
                        config_auto_vars_no_device },
    { "ib-auto-quiet",  { "NCCL_FERRY_BACKEND=auto", "FAKEIBV_NDEV=0" }, config_auto_quiet },
    { "ib-auto-disabled", { "NCCL_FERRY_BACKEND=auto", "NCCL_IB_DISABLE=1" },
                        config_auto_disabled },
};

static int config_run_case(const char *path, const config_case_t *c)
{
    int status = 0, i;
    double deadline = fit_now() + CONFIG_WATCHDOG_SECS + 10;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(CONFIG_WATCHDOG_SECS);
        fit_set_role(c->name);
        for (i = 0; i < 4 && c->env[i] != NULL; i++) {
            char name[128];
            const char *eq = strchr(c->env[i], '=');

            snprintf(name, sizeof(name), "%.*s", (int)(eq - c->env[i]), c->env[i]);
            if (eq[1] == '\0')
                unsetenv(name);
            else
                setenv(name, eq + 1, 1);
        }
        c->run(path);
        fit_child_exit(0);
    }
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (fit_now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(20000);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        printf("ok - case %s\n", c->name);
        return 0;
    }
    if (WIFSIGNALED(status))
        printf("FAIL - case %s: killed by signal %d (%s)%s\n", c->name, WTERMSIG(status),
               strsignal(WTERMSIG(status)),
               WTERMSIG(status) == SIGALRM ? " (watchdog: a call blocked)" : "");
    else
        printf("FAIL - case %s: exit %d\n", c->name, WEXITSTATUS(status));
    return 1;
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *only = NULL;
    int i, failed = 0, ran = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
            only = argv[++i];
        else
            FIT_FAIL("usage: integ_config [--plugin PATH] [--case NAME]");
    }
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    fit_set_role("config");
    for (i = 0; i < (int)(sizeof(config_cases) / sizeof(config_cases[0])); i++) {
        if (only != NULL ? strcmp(only, config_cases[i].name) != 0
                         : strncmp(config_cases[i].name, "ib-", 3) == 0)
            continue;
        failed += config_run_case(path, &config_cases[i]);
        ran++;
    }
    FIT_CHECK(ran > 0, "no case named %s", only ? only : "");
    printf("integ_config: %d case(s), %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
