/*
 * integ_net_hints_mixed: a listener and a connector in two processes with
 * different NCCL_FERRY_NET_HINTS, as ranks of a job that set it on some
 * hosts only (or run a ferry that predates it: such a connector ignores the
 * handle's TAKES_FEWER flag and opens the offer, exactly as one with the
 * variable off does; such a listener's handle has no flag, exactly as one
 * with the variable off). The connector has NCCL's hints of 8 flows x 8
 * peers on its context each time.
 *
 *   listener 1, connector 0: the connector opens the offer, the listener takes it
 *   listener 0, connector 1: the handle has no flag: the offer, "takes no fewer"
 *   listener 1, connector 1: 1 stream (64 / 64)
 *
 * Each: the streams on the listen port, both INFO lines, a size sweep byte for
 * byte from connector to listener.
 *
 * With --peer-plugin OLD (a ferry built before NCCL_FERRY_NET_HINTS, by hand:
 * CI has none), the same with a real older peer, both variables 1: an old
 * connector to a new listener, an old listener (no flag) to a new connector,
 * the offer both times.
 *
 *   integ_net_hints_mixed [--plugin PATH] [--peer-plugin OLD]
 *                         (ctest: NCCL_FERRY_THREADS=1, as integ_net_hints)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "socket/sock_wire.h"

/* The sweep's largest message; an eighth under a sanitizer (FIT_TIME_SCALE > 1). */
#define MIXED_MAX_SIZE (fit_time_scale() > 1.0 ? 512u << 10 : 4u << 20)
#define MIXED_SECONDS  60.0

static void mixed_opts(fit_xfer_opts_t *o, size_t *sizes, int max)
{
    memset(o, 0, sizeof(*o));
    o->sizes = sizes;
    o->nmsgs = fit_sweep_sizes(sizes, max, MIXED_MAX_SIZE);
    o->depth = 8;
    o->seed = 0x313;
    o->seconds = 40.0;
    o->tag = 4;
}

static void mixed_set_env(int hints)
{
    setenv("NCCL_FERRY_NET_HINTS", hints ? "1" : "0", 1);
}

/* The listener (old: a build that predates the flag): its handle to the pipe, then the connection and the data. */
static void mixed_listener(const char *path, int old, int hints, int expect, int fd)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], needle[128];
    const ferry_sock_handle_t *h = (const ferry_sock_handle_t *)handle;
    fit_plugin_t p;
    fit_xfer_opts_t o;
    fit_xfer_result_t r;
    size_t sizes[96];
    void *ctx, *listen_comm, *recv_comm;
    int est, from = fit_log_lines();

    fit_set_role("listener");
    mixed_set_env(hints);
    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 0x5100);
    listen_comm = fit_listen(&p, ctx, 0, handle);
    FIT_CHECK(h->flags == (hints && !old ? FERRY_SOCK_HANDLE_TAKES_FEWER : 0u), "handle flags "
              "0x%x with NCCL_FERRY_NET_HINTS=%d%s", h->flags, hints, old ? " (older build)" : "");
    FIT_CHECK(write(fd, handle, sizeof(handle)) == (ssize_t)sizeof(handle), "write handle: %s",
              strerror(errno));
    close(fd);
    recv_comm = fit_accept_loop(&p, listen_comm);
    est = fit_count_established_local(fit_handle_port(handle));
    FIT_CHECK(est == expect, "%d ESTABLISHED streams on the listen port, expected %d", est,
              expect);
    snprintf(needle, sizeof(needle), ": %d streams%s", expect,
             expect < h->nlanes ? " (the connector's choice" : ", recv comm");
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, "accepted connection from", needle, NULL, NULL,
                           0) >= 0, "no accept INFO line with '%s'", needle);
    FIT_NCCL(p.net->closeListen(listen_comm));
    mixed_opts(&o, sizes, 96);
    fit_xfer_side(&p, FIT_RECV, recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, "listener's receives");
    FIT_NCCL(p.net->closeRecv(recv_comm));
    FIT_NCCL(p.net->finalize(ctx));
    fit_log_check_clean("listener");
    fit_plugin_close(&p);
    fit_pass("listener (hints %d): %d stream(s) of %u offered, %d messages 0..%u B intact",
             hints, expect, (unsigned)h->nlanes, o.nmsgs, MIXED_MAX_SIZE);
    fit_child_exit(0);
}

/* The connector: NCCL's 8 x 8 hints on its context, then connect and send. */
static void mixed_connector(const char *path, int old, int hints, int expect, const char *words,
                            int fd)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], needle[64];
    ncclNetAttr_v11_t a = NCCL_NET_ATTR_INIT;
    fit_plugin_t p;
    fit_xfer_opts_t o;
    fit_xfer_result_t r;
    size_t sizes[96];
    void *ctx, *send_comm;
    ssize_t n;
    int from = fit_log_lines();

    fit_set_role("connector");
    mixed_set_env(hints);
    n = read(fd, handle, sizeof(handle));
    FIT_CHECK(n == (ssize_t)sizeof(handle), "read handle: %zd (%s)", n, strerror(errno));
    close(fd);
    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 0x5200);
    a.sendCommAttr.maxConcurrentPeers = a.recvCommAttr.maxConcurrentPeers = 8;
    a.sendCommAttr.minConcurrentPeers = a.recvCommAttr.minConcurrentPeers = 1;
    a.sendCommAttr.maxFlowsPerPeer = a.recvCommAttr.maxFlowsPerPeer = 8;
    a.sendCommAttr.minFlowsPerPeer = a.recvCommAttr.minFlowsPerPeer = 1;
    FIT_CHECK(old || (p.net->setNetAttr != NULL) == (hints != 0), "the v11 table's setNetAttr "
              "is %s after init with NCCL_FERRY_NET_HINTS=%d", p.net->setNetAttr ? "set" : "NULL",
              hints);
    if (p.net->setNetAttr != NULL) /* NCCL skips a NULL one. */
        FIT_NCCL(p.net->setNetAttr(ctx, &a));
    send_comm = fit_connect_loop(&p, ctx, 0, handle);
    snprintf(needle, sizeof(needle), ": %d streams", expect);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, "connected to", needle, words, NULL, 0) >= 0,
              "no connect INFO line with '%s' and '%s'", needle, words);
    mixed_opts(&o, sizes, 96);
    fit_xfer_side(&p, FIT_SEND, send_comm, &o, &r);
    fit_xfer_expect_ok(&r, "connector's sends");
    FIT_NCCL(p.net->closeSend(send_comm));
    FIT_NCCL(p.net->finalize(ctx));
    fit_log_check_clean("connector");
    fit_plugin_close(&p);
    fit_pass("connector (hints %d): %d stream(s): %s", hints, expect, words);
}

static pid_t mixed_spawn_listener(const char *path, int old, int hints, int expect, int fds[2])
{
    pid_t pid;

    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        mixed_listener(path, old, hints, expect, fds[1]);
    }
    close(fds[1]);
    return pid;
}

/* The listener's end within the case's time, or killed; 0 when it passed. */
static int mixed_reap(pid_t pid)
{
    double deadline = fit_now() + MIXED_SECONDS;
    int status = 0;

    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (fit_now() > deadline) {
            fprintf(stderr, "FAIL: the listener still runs after %.0f s; killing it\n",
                    MIXED_SECONDS);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 1;
        }
        usleep(20000);
    }
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv)
{
    typedef struct {
        int         listener, connector, expect;
        const char *words;
        int         old_listener, old_connector;
    } mixed_case_t;
    static const mixed_case_t cases[] = {
        { 1, 0, 4, ", send comm", 0, 0 },
        { 0, 1, 4, "it takes no fewer", 0, 0 },
        { 1, 1, 1, "NCCL's hints: 8 flows per peer x 8 peers", 0, 0 },
    };
    static const mixed_case_t old_cases[] = {
        { 1, 1, 4, ", send comm", 0, 1 },
        { 1, 1, 4, "it takes no fewer", 1, 0 },
    };
    const char *path = fit_plugin_path(&argc, argv), *old = NULL;
    const mixed_case_t *list = cases;
    size_t c, ncases = sizeof(cases) / sizeof(cases[0]);
    int bad = 0;

    if (argc == 3 && strcmp(argv[1], "--peer-plugin") == 0) {
        old = argv[2];
        list = old_cases;
        ncases = sizeof(old_cases) / sizeof(old_cases[0]);
    } else {
        FIT_CHECK(argc == 1, "usage: integ_net_hints_mixed [--plugin PATH] [--peer-plugin OLD]");
    }
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    for (c = 0; c < ncases; c++) {
        const mixed_case_t *k = &list[c];
        int fds[2];
        pid_t pid;

        printf("case: listener%s NCCL_FERRY_NET_HINTS=%d, connector%s %d\n",
               k->old_listener ? " (older build)" : "", k->listener,
               k->old_connector ? " (older build)" : "", k->connector);
        FIT_CHECK(pipe(fds) == 0, "pipe: %s", strerror(errno));
        pid = mixed_spawn_listener(k->old_listener ? old : path, k->old_listener, k->listener,
                                   k->expect, fds);
        mixed_connector(k->old_connector ? old : path, k->old_connector, k->connector,
                        k->expect, k->words, fds[0]);
        if (mixed_reap(pid) != 0) {
            fprintf(stderr, "FAIL: the listener of case %zu failed (above)\n", c);
            bad = 1;
        }
    }
    if (bad)
        return 1;
    fit_check_no_ferry_threads("after the cases");
    printf("integ_net_hints_mixed: all checks passed\n");
    return 0;
}
