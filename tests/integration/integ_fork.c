/*
 * integ_fork: a ferry connection between two processes, each of which loads
 * the plugin itself, as two NCCL ranks would.
 *
 *   integ_fork [--plugin PATH]
 *       Supervisor mode: runs every case below, each in a fresh pair of child
 *       processes (receiver and sender) that pass the 128-byte handle
 *       through a pipe. The supervisor only watches: a child that hangs is
 *       killed at the deadline, a child killed by a signal is reported.
 *         sweep          0 B..64 MiB, 8 in flight, checked byte for byte
 *         sender-dies    the sender SIGKILLs itself with sends in flight; the
 *                        receiver's test() must return ncclRemoteError and a
 *                        WARN must name the peer's address
 *         receiver-dies  the receiver SIGKILLs itself with receives posted;
 *                        the sender must get ncclRemoteError (not SIGPIPE)
 *         receiver-dies-before-accept
 *                        the receiver sends its handle and dies before
 *                        accept; the sender's connect must fail, or its
 *                        first sends must, within a bound (no hang)
 *   integ_fork [--plugin PATH] --role recv|send --handle-file FILE
 *       "Two hosts" mode for integ_netns: one side of the sweep case; the
 *       receiver writes the handle to FILE, the sender waits for it.
 *   --case NAME  run only that case (supervisor mode).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "harness.h"

#define FORK_MAX_SIZES     160
#define FORK_CASE_SECONDS  150.0
#define FORK_DEATH_SIZE    ((size_t)8 << 20)
#define FORK_DEATH_AFTER   3    /* The victim dies once this many messages completed. */
#define FORK_SURVIVE_SECS  20.0 /* The survivor must see the error within this. */
/* A child whose plugin call blocks is killed by SIGALRM after this. */
#define FORK_WATCHDOG_SECS 140

typedef enum fork_case {
    FORK_CASE_SWEEP,
    FORK_CASE_SENDER_DIES,
    FORK_CASE_RECEIVER_DIES,
    FORK_CASE_DIES_BEFORE_ACCEPT,
    FORK_CASE_COUNT
} fork_case_t;

static const char *const fork_case_names[FORK_CASE_COUNT] = {
    [FORK_CASE_SWEEP]         = "sweep",
    [FORK_CASE_SENDER_DIES]   = "sender-dies",
    [FORK_CASE_RECEIVER_DIES] = "receiver-dies",
    [FORK_CASE_DIES_BEFORE_ACCEPT] = "receiver-dies-before-accept",
};

/* Where the handle goes: a pipe (supervisor mode) or a file (two-hosts mode). */
typedef struct fork_chan {
    int         fd;   /* Pipe end, or -1. */
    const char *file; /* Handle file, or NULL. */
} fork_chan_t;

/* ---- handle passing ------------------------------------------------------- */

static void fork_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        FIT_CHECK(n > 0, "write handle: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

static void fork_handle_send(const fork_chan_t *ch, const void *handle)
{
    char tmp[1024];
    int fd;

    if (ch->file == NULL) {
        fork_write_all(ch->fd, handle, NCCL_NET_HANDLE_MAXSIZE);
        return;
    }
    /* Write then rename, so the peer never reads half a handle. */
    snprintf(tmp, sizeof(tmp), "%s.tmp", ch->file);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FIT_CHECK(fd >= 0, "open %s: %s", tmp, strerror(errno));
    fork_write_all(fd, handle, NCCL_NET_HANDLE_MAXSIZE);
    FIT_CHECK(close(fd) == 0, "close %s: %s", tmp, strerror(errno));
    FIT_CHECK(rename(tmp, ch->file) == 0, "rename %s: %s", tmp, strerror(errno));
}

static void fork_handle_recv(const fork_chan_t *ch, void *handle)
{
    size_t got = 0;
    fit_bound_t b;
    int fd = ch->fd;

    fit_bound_init(&b, "waiting for the peer's handle", 30.0, 1000000L);
    while (ch->file != NULL && fd < 0) {
        fd = open(ch->file, O_RDONLY);
        if (fd < 0) {
            fit_bound_step(&b);
            usleep(10000);
        }
    }
    while (got < NCCL_NET_HANDLE_MAXSIZE) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;

        fit_bound_step(&b);
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        n = read(fd, (char *)handle + got, NCCL_NET_HANDLE_MAXSIZE - got);
        if (n < 0 && errno == EINTR)
            continue;
        FIT_CHECK(n > 0, "read handle: %s after %zu bytes", n == 0 ? "EOF" : strerror(errno),
                  got);
        got += (size_t)n;
    }
    if (ch->file != NULL)
        close(fd);
}

/* ---- the two sides -------------------------------------------------------- */

typedef struct fork_side_env {
    fit_plugin_t plugin;
    void        *ctx;
    void        *comm;
    char         handle[NCCL_NET_HANDLE_MAXSIZE];
    char         peer_ip[80]; /* Listen IP, which the WARNs of either side should name. */
} fork_side_env_t;

static void fork_side_start(fork_side_env_t *e, const char *path, fit_role_t role,
                            const fork_chan_t *ch)
{
    char addr[80];
    char *colon;

    fit_check_no_ferry_threads("before dlopen");
    fit_plugin_open(&e->plugin, path);
    e->ctx = fit_plugin_init(&e->plugin, role == FIT_RECV ? 0xaaaa : 0xbbbb);
    if (role == FIT_RECV) {
        void *listen_comm = fit_listen(&e->plugin, e->ctx, fit_device(&e->plugin), e->handle);

        fit_handle_addr(e->handle, addr, sizeof(addr));
        printf("  receiver pid %d: listen address %s\n", (int)getpid(), addr);
        fflush(stdout);
        fork_handle_send(ch, e->handle);
        e->comm = fit_accept_loop(&e->plugin, listen_comm);
        FIT_NCCL(e->plugin.net->closeListen(listen_comm));
    } else {
        fork_handle_recv(ch, e->handle);
        fit_handle_addr(e->handle, addr, sizeof(addr));
        e->comm = fit_connect_loop(&e->plugin, e->ctx, fit_device(&e->plugin), e->handle);
    }
    /* "1.2.3.4:port" or "[::1]:port" -> the address part. */
    snprintf(e->peer_ip, sizeof(e->peer_ip), "%s", addr[0] == '[' ? addr + 1 : addr);
    colon = strrchr(e->peer_ip, addr[0] == '[' ? ']' : ':');
    if (colon != NULL)
        *colon = '\0';
}

static void fork_side_finish(fork_side_env_t *e, fit_role_t role)
{
    if (role == FIT_RECV)
        FIT_NCCL(e->plugin.net->closeRecv(e->comm));
    else
        FIT_NCCL(e->plugin.net->closeSend(e->comm));
    FIT_NCCL(e->plugin.net->finalize(e->ctx));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&e->plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
}

static void fork_sweep(const char *path, fit_role_t role, const fork_chan_t *ch)
{
    size_t sizes[FORK_MAX_SIZES];
    int n = fit_sweep_sizes(sizes, FORK_MAX_SIZES, (size_t)64 << 20);
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    fork_side_env_t e;
    int nsmall = 0, rep, repeat = getenv("FIT_FORK_REPEAT") ? atoi(getenv("FIT_FORK_REPEAT")) : 1;

    while (nsmall < n && sizes[nsmall] <= ((size_t)1 << 20))
        nsmall++;
    fork_side_start(&e, path, role, ch);
    o.depth   = 8;
    o.seconds = 90.0;
    o.tag     = 3;

    o.sizes = sizes;
    o.nmsgs = nsmall;
    o.seed  = 100;
    fit_xfer_side(&e.plugin, role, e.comm, &o, &r);
    fit_xfer_expect_ok(&r, "sweep 0 B..1 MiB");
    fit_pass("sweep 0 B..1 MiB: %d messages, 8 in flight, %.3f s", r.done[role], r.seconds);

    o.sizes      = sizes + nsmall;
    o.nmsgs      = n - nsmall;
    o.seed       = 200;
    o.recv_extra = 4096 + 7;
    /* FIT_FORK_REPEAT=N (integ_netns_flap): the large part N times, so a link can flap meanwhile. */
    for (rep = 0; rep < repeat; rep++) {
        fit_xfer_side(&e.plugin, role, e.comm, &o, &r);
        fit_xfer_expect_ok(&r, "sweep 1 MiB..64 MiB");
        fit_pass("sweep 1 MiB..64 MiB (receives 4103 B larger): %d messages, %.3f s",
                 r.done[role], r.seconds);
    }
    fork_side_finish(&e, role);
}

/* on_done of the victim: die with requests in flight. */
static void fork_die_hook(fit_role_t role, int i, void *arg)
{
    fit_role_t victim = *(const fit_role_t *)arg;

    if (role == victim && i + 1 == FORK_DEATH_AFTER) {
        printf("  %s pid %d: SIGKILL self after %d messages, requests in flight\n",
               role == FIT_SEND ? "sender" : "receiver", (int)getpid(), FORK_DEATH_AFTER);
        fflush(stdout);
        raise(SIGKILL);
    }
}

static void fork_death(const char *path, fit_role_t role, fit_role_t victim, const fork_chan_t *ch)
{
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    fork_side_env_t e;
    char line[4096];
    int from;

    fork_side_start(&e, path, role, ch);
    o.nmsgs        = -1;
    o.endless_size = FORK_DEATH_SIZE;
    o.depth        = 8;
    o.seed         = 300;
    o.seconds      = FORK_SURVIVE_SECS + 10.0;
    o.tag          = 5;
    o.on_done      = fork_die_hook;
    o.on_done_arg  = &victim;
    from = fit_log_lines();
    fit_log_allow_warns(1); /* Any wording; one WARN naming the peer is required below. */
    fit_xfer_side(&e.plugin, role, e.comm, &o, &r);
    FIT_CHECK(role != victim, "the victim outlived its own SIGKILL");
    FIT_CHECK(r.rc == ncclRemoteError,
              "peer killed: expected ncclRemoteError, got %s of message %d -> %d (%s) after %d "
              "good messages in %.2f s",
              r.err_call ? r.err_call : "(nothing failed)", r.err_msg, (int)r.rc,
              fit_result_str(r.rc), r.done[role], r.seconds);
    printf("  survivor: %s of message %d -> ncclRemoteError after %d intact messages, %.2f s\n",
           r.err_call, r.err_msg, r.done[role], r.seconds);
    if (role == FIT_RECV && strcmp(r.err_call, "test") != 0)
        printf("  note: the error came from %s, not test()\n", r.err_call);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, e.peer_ip, NULL, NULL, line, sizeof(line)) >= 0,
              "no WARN names the dead peer's address %s", e.peer_ip);
    printf("  WARN: %s\n", line);
    fork_side_finish(&e, role);
    fit_log_allow_warns(0);
    fit_pass("%s died mid-stream -> %s got ncclRemoteError + WARN naming %s",
             victim == FIT_SEND ? "sender" : "receiver", role == FIT_SEND ? "sender" : "receiver",
             e.peer_ip);
}

/* The receiver publishes its handle and dies; the sender must find out, not hang. */
static void fork_early_death(const char *path, fit_role_t role, const fork_chan_t *ch)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    fork_side_env_t e;
    void *comm = NULL;
    fit_bound_t b;
    ncclResult_t rc = ncclSuccess;
    double longest = 0;

    /* Few, short retries: the default (34, 100 ms linear) takes a minute, as NCCL's does. */
    setenv("NCCL_SOCKET_RETRY_CNT", "5", 1);
    setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "20", 1);
    fit_plugin_open(&e.plugin, path);
    e.ctx = fit_plugin_init(&e.plugin, 0xcccc);
    fit_log_allow_warns(1);
    if (role == FIT_RECV) {
        void *listen_comm = fit_listen(&e.plugin, e.ctx, 0, e.handle);

        (void)listen_comm;
        fork_handle_send(ch, e.handle);
        printf("  receiver pid %d: handle sent, SIGKILL self before accept\n", (int)getpid());
        fflush(stdout);
        raise(SIGKILL);
    }
    fork_handle_recv(ch, e.handle);
    usleep(100000); /* Let the receiver die first, most of the time. */
    fit_bound_init(&b, "connect to a dead receiver", FORK_SURVIVE_SECS, FIT_CONNECT_ITERS);
    while (comm == NULL) {
        double t0 = fit_now();

        rc = e.plugin.net->connect(e.ctx, 0, e.handle, &comm, &dev_handle);
        if (fit_now() - t0 > longest)
            longest = fit_now() - t0;
        if (rc != ncclSuccess)
            break;
        if (comm == NULL)
            fit_bound_step(&b);
    }
    /* connect runs on NCCL's service thread: a call that sleeps stalls every other setup. */
    FIT_CHECK(longest < 0.25, "a single connect() call blocked for %.3f s", longest);
    if (rc != ncclSuccess) {
        printf("  sender: connect -> %d (%s) after %.2f s; longest call %.1f ms\n", (int)rc,
               fit_result_str(rc), fit_now() - b.start, longest * 1e3);
    } else {
        o.nmsgs        = -1;
        o.endless_size = (size_t)1 << 20;
        o.depth        = 8;
        o.seed         = 400;
        o.seconds      = FORK_SURVIVE_SECS;
        fit_xfer_side(&e.plugin, FIT_SEND, comm, &o, &r);
        FIT_CHECK(r.rc == ncclRemoteError,
                  "connect to a dead receiver succeeded, then %s -> %d (%s); expected "
                  "ncclRemoteError", r.err_call ? r.err_call : "(nothing)", (int)r.rc,
                  fit_result_str(r.rc));
        printf("  sender: connect succeeded (backlog), then %s -> ncclRemoteError after %.2f s\n",
               r.err_call, r.seconds);
        FIT_NCCL(e.plugin.net->closeSend(comm));
    }
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_plugin_close(&e.plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
    fit_log_allow_warns(0);
    fit_pass("receiver died before accept: the sender found out without hanging");
}

static void fork_child_run(const char *path, fork_case_t c, fit_role_t role, const fork_chan_t *ch)
{
    fit_role_t victim = c == FORK_CASE_SENDER_DIES ? FIT_SEND : FIT_RECV;

    fit_set_role(role == FIT_SEND ? "sender" : "receiver");
    alarm(FORK_WATCHDOG_SECS);
    if (c == FORK_CASE_SWEEP)
        fork_sweep(path, role, ch);
    else if (c == FORK_CASE_DIES_BEFORE_ACCEPT)
        fork_early_death(path, role, ch);
    else
        fork_death(path, role, victim, ch);
}

/* ---- supervisor ----------------------------------------------------------- */

static pid_t fork_spawn(const char *path, fork_case_t c, fit_role_t role, int fd, int close_fd)
{
    pid_t pid;

    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        fork_chan_t ch = { .fd = fd, .file = NULL };

        /* Never outlive the supervisor (ctest kills it on TIMEOUT). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(close_fd);
        fork_child_run(path, c, role, &ch);
        fit_child_exit(0);
    }
    return pid;
}

static const char *fork_describe(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == SIGPIPE ? ": a send() to a dead peer raised SIGPIPE, "
                                               "the plugin must use MSG_NOSIGNAL"
                 : WTERMSIG(status) == SIGALRM ? ": watchdog, a plugin call blocked"
                                               : "");
    else
        snprintf(buf, len, "status 0x%x", status);
    return buf;
}

/* Runs one case; returns 0 when both children ended as the case expects. */
static int fork_case_run(const char *path, fork_case_t c)
{
    int pfd[2];
    pid_t pids[2];
    int status[2] = { 0, 0 }, alive = 2, i, bad = 0;
    double deadline = fit_now() + FORK_CASE_SECONDS;
    fit_role_t victim = c == FORK_CASE_SENDER_DIES ? FIT_SEND : FIT_RECV;

    printf("case %s\n", fork_case_names[c]);
    fflush(stdout);
    FIT_CHECK(pipe(pfd) == 0, "pipe: %s", strerror(errno));
    pids[FIT_RECV] = fork_spawn(path, c, FIT_RECV, pfd[1], pfd[0]);
    pids[FIT_SEND] = fork_spawn(path, c, FIT_SEND, pfd[0], pfd[1]);
    close(pfd[0]);
    close(pfd[1]);
    while (alive > 0) {
        for (i = 0; i < 2; i++) {
            if (pids[i] > 0 && waitpid(pids[i], &status[i], WNOHANG) == pids[i]) {
                pids[i] = -pids[i];
                alive--;
            }
        }
        if (alive > 0 && fit_now() > deadline) {
            fprintf(stderr, "FAIL case %s: children still running after %.0f s, killing them\n",
                    fork_case_names[c], FORK_CASE_SECONDS);
            for (i = 0; i < 2; i++)
                if (pids[i] > 0)
                    kill(pids[i], SIGKILL);
            bad = 1;
            deadline += 10.0;
        }
        if (alive > 0)
            usleep(20000);
    }
    for (i = 0; i < 2; i++) {
        int expect_kill = c != FORK_CASE_SWEEP && (fit_role_t)i == victim;
        int ok = expect_kill ? WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL
                             : WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0;
        char desc[200];

        if (!ok) {
            fprintf(stderr, "FAIL case %s: %s %s (expected %s)\n", fork_case_names[c],
                    i == FIT_SEND ? "sender" : "receiver",
                    fork_describe(status[i], desc, sizeof(desc)),
                    expect_kill ? "its own SIGKILL" : "exit 0");
            bad = 1;
        }
    }
    printf("case %s: %s\n", fork_case_names[c], bad ? "FAILED" : "passed");
    fflush(stdout);
    return bad;
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *role = "both", *file = NULL, *only = NULL;
    int i, failed = 0, ran = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--role") == 0 && i + 1 < argc)
            role = argv[++i];
        else if (strcmp(argv[i], "--handle-file") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
            only = argv[++i];
        else
            FIT_FAIL("usage: integ_fork [--plugin PATH] [--case NAME] "
                     "[--role recv|send --handle-file FILE] (got '%s')", argv[i]);
    }
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);

    if (strcmp(role, "both") != 0) {
        fork_chan_t ch = { .fd = -1, .file = file };

        FIT_CHECK(file != NULL, "--role needs --handle-file");
        FIT_CHECK(strcmp(role, "recv") == 0 || strcmp(role, "send") == 0, "bad --role %s", role);
        alarm(FORK_WATCHDOG_SECS);
        fit_set_role(role);
        fork_sweep(path, strcmp(role, "recv") == 0 ? FIT_RECV : FIT_SEND, &ch);
        printf("integ_fork %s: all checks passed\n", role);
        return 0;
    }
    fit_set_role("supervisor");
    for (i = 0; i < FORK_CASE_COUNT; i++) {
        if (only != NULL && strcmp(only, fork_case_names[i]) != 0)
            continue;
        failed += fork_case_run(path, (fork_case_t)i);
        ran++;
    }
    FIT_CHECK(ran > 0, "no case named %s", only);
    printf("integ_fork: %d case(s), %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
