/*
 * integ_faults: the fault matrix. One table of cases, each run in a fresh
 * pair of processes (the acceptor/receiver and the connector/sender, each
 * with its own plugin, as two NCCL ranks), for whichever backend
 * NCCL_FERRY_BACKEND names. One process is the victim: it kills itself with
 * SIGKILL at the case's moment, or the supervisor freezes it with SIGSTOP and
 * resumes it with SIGCONT. The other, the survivor, checks what it got:
 *
 *   killed cases: an ncclRemoteError from the call named in the table, within
 *     FAULT_ERROR_BOUND_S of the victim's death, and a WARN naming the peer's
 *     address. Where no comm exists yet (the connector died before its
 *     connection was whole, socket backend) accept() returns no comm and the
 *     listener drops the connection after NCCL_FERRY_HELLO_TIMEOUT_MS with a
 *     WARN naming it: the listener must go on serving other ranks.
 *   frozen cases: no error, exactly one stall WARN carrying the stuck
 *     request's counters, and after SIGCONT every message arrives intact.
 *
 * After each case the survivor has the fds and threads it had before it
 * opened the plugin (ASan builds check its memory too). Each case prints one
 * "FAULT case=... backend=... outcome=... seconds=..." line, which
 * tests/RELIABILITY.md quotes.
 *
 *   integ_faults [--plugin PATH] [--case NAME]
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"

#define FAULT_ERROR_BOUND_S 5.0  /* Death to ncclRemoteError. */
#define FAULT_CASE_S        60.0 /* Whole case, supervisor's deadline. */
#define FAULT_MSG_SIZE      ((size_t)4 << 20)
#define FAULT_STOP_AFTER    3    /* Messages done before the victim dies or is frozen. */
#define FAULT_STOP_MSGS     24   /* Messages of a frozen case (all must arrive). */

/* When the victim goes. */
typedef enum fault_phase {
    FAULT_CONNECT, /* Connector: after its first connect() call. Acceptor: before accept(). */
    FAULT_ACCEPT,  /* Acceptor: after its first accept() call. Connector: with its comm, before
                    * the acceptor accepted. */
    FAULT_DATA,    /* After FAULT_STOP_AFTER messages, 8 more in flight. */
    FAULT_FREEZE,  /* SIGSTOP after FAULT_STOP_AFTER messages, SIGCONT after the stall WARN. */
} fault_phase_t;

typedef struct fault_case {
    const char   *name;
    fault_phase_t phase;
    fit_role_t    victim; /* FIT_SEND: the connector/sender; FIT_RECV: the acceptor/receiver. */
    const char   *expect; /* What the survivor must see, for the log. */
} fault_case_t;

static const fault_case_t fault_cases[] = {
    { "connector-dies-in-connect", FAULT_CONNECT, FIT_SEND,
      "acceptor: accept -> ncclRemoteError, or the listener drops the half connection (WARN)" },
    { "acceptor-dies-before-accept", FAULT_CONNECT, FIT_RECV,
      "connector: connect or the first isend -> ncclRemoteError" },
    { "acceptor-dies-in-accept", FAULT_ACCEPT, FIT_RECV,
      "connector: connect or isend -> ncclRemoteError" },
    { "connector-dies-before-accepted", FAULT_ACCEPT, FIT_SEND,
      "acceptor: accept, irecv or test -> ncclRemoteError" },
    { "sender-dies-in-send", FAULT_DATA, FIT_SEND, "receiver: test -> ncclRemoteError" },
    { "receiver-dies-in-recv", FAULT_DATA, FIT_RECV, "sender: isend or test -> ncclRemoteError" },
    { "sender-frozen", FAULT_FREEZE, FIT_SEND,
      "receiver: one stall WARN, then every message intact" },
    { "receiver-frozen", FAULT_FREEZE, FIT_RECV,
      "sender: one stall WARN, then every message intact" },
};
#define FAULT_NCASES ((int)(sizeof(fault_cases) / sizeof(fault_cases[0])))

/* Shared between the supervisor and both children (MAP_SHARED). */
typedef struct fault_shared {
    volatile double t_death;   /* fit_now() of the victim just before SIGKILL, or of SIGSTOP. */
    volatile double t_cont;    /* fit_now() of SIGCONT. */
    volatile int    in_flight; /* The victim reached its moment (FREEZE: supervisor stops it). */
} fault_shared_t;

typedef struct fault_env {
    const fault_case_t *c;
    fault_shared_t     *sh;
    fit_role_t          role;
    fit_plugin_t        plugin;
    void               *ctx;
    void               *listen_comm;
    void               *comm;
    char                handle[NCCL_NET_HANDLE_MAXSIZE];
    int                 hfd; /* Pipe for the handle. */
    const char         *backend;
    double              hello_timeout;
} fault_env_t;

static const char *fault_role_str(fit_role_t r)
{
    return r == FIT_SEND ? "connector" : "acceptor";
}

static void fault_die(fault_env_t *e, const char *where)
{
    printf("  %s pid %d: SIGKILL self %s\n", fault_role_str(e->role), (int)getpid(), where);
    fflush(stdout);
    e->sh->t_death = fit_now();
    raise(SIGKILL);
}

static void fault_handle_io(fault_env_t *e)
{
    size_t got = 0;
    fit_bound_t b;

    if (e->role == FIT_RECV) {
        FIT_CHECK(write(e->hfd, e->handle, sizeof(e->handle)) == (ssize_t)sizeof(e->handle),
                  "write handle: %s", strerror(errno));
        return;
    }
    fit_bound_init(&b, "the acceptor's handle", 20.0, 1000000L);
    while (got < sizeof(e->handle)) {
        struct pollfd pfd = { .fd = e->hfd, .events = POLLIN };
        ssize_t n;

        fit_bound_step(&b);
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        n = read(e->hfd, e->handle + got, sizeof(e->handle) - got);
        FIT_CHECK(n > 0, "read handle: %s", n == 0 ? "EOF" : strerror(errno));
        got += (size_t)n;
    }
}

/* on_done: the victim's moment (die, or tell the supervisor to freeze it). */
static void fault_on_done(fit_role_t role, int i, void *arg)
{
    fault_env_t *e = arg;

    if (role != e->c->victim || i + 1 != FAULT_STOP_AFTER)
        return;
    if (e->c->phase == FAULT_DATA)
        fault_die(e, "with 8 requests in flight");
    e->sh->in_flight = 1;
}

/* Stall WARNs since line from (every kind ends naming the variable that sets the delay). */
static int fault_stall_warns(int from)
{
    int n = 0, i = from;

    while ((i = fit_log_find(i, NCCL_LOG_WARN, "NCCL_FERRY_STALL_WARN_S", NULL, NULL, NULL,
                             0)) >= 0) {
        n++;
        i++;
    }
    return n;
}

static void fault_open(fault_env_t *e)
{
    fit_plugin_open(&e->plugin, getenv("FAULT_PLUGIN"));
    e->ctx = fit_plugin_init(&e->plugin, e->role == FIT_RECV ? 0x1111 : 0x2222);
}

/* The victim's side of every case. Never returns. */
static void fault_victim(fault_env_t *e)
{
    ncclNetDeviceHandle_v11_t *dh = NULL;
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;

    fault_open(e);
    fit_log_allow_warns(1);
    if (e->role == FIT_RECV) {
        e->listen_comm = fit_listen(&e->plugin, e->ctx, 0, e->handle);
        fault_handle_io(e);
        if (e->c->phase == FAULT_CONNECT)
            fault_die(e, "before accept()");
        if (e->c->phase == FAULT_ACCEPT) {
            usleep(300000); /* The connector's hello is in: accept() takes it. */
            FIT_NCCL(e->plugin.net->accept(e->listen_comm, &e->comm, &dh));
            fault_die(e, "after one accept() call");
        }
        e->comm = fit_accept_loop(&e->plugin, e->listen_comm);
    } else {
        fault_handle_io(e);
        if (e->c->phase == FAULT_CONNECT) {
            FIT_NCCL(e->plugin.net->connect(e->ctx, 0, e->handle, &e->comm, &dh));
            fault_die(e, e->comm != NULL ? "after one connect() call (comm returned)"
                                         : "after one connect() call (no comm yet)");
        }
        e->comm = fit_connect_loop(&e->plugin, e->ctx, 0, e->handle);
        if (e->c->phase == FAULT_ACCEPT)
            fault_die(e, "with its send comm, before the acceptor's accept()");
    }
    o.nmsgs        = e->c->phase == FAULT_FREEZE ? FAULT_STOP_MSGS : -1;
    o.endless_size = FAULT_MSG_SIZE;
    o.sizes        = NULL;
    o.depth        = 8;
    o.seed         = 900;
    o.seconds      = FAULT_CASE_S - 10.0;
    o.tag          = 9;
    o.on_done      = fault_on_done;
    o.on_done_arg  = e;
    if (e->c->phase == FAULT_FREEZE) {
        static size_t sizes[FAULT_STOP_MSGS];
        int i;

        for (i = 0; i < FAULT_STOP_MSGS; i++)
            sizes[i] = FAULT_MSG_SIZE;
        o.sizes = sizes;
    }
    fit_xfer_side(&e->plugin, e->role, e->comm, &o, &r);
    fit_xfer_expect_ok(&r, "the frozen victim's sequence after SIGCONT");
    fit_pass("%s resumed: %d messages of %zu bytes done", fault_role_str(e->role), r.done[e->role],
             FAULT_MSG_SIZE);
    if (e->role == FIT_RECV) {
        FIT_NCCL(e->plugin.net->closeRecv(e->comm));
        FIT_NCCL(e->plugin.net->closeListen(e->listen_comm));
    } else {
        FIT_NCCL(e->plugin.net->closeSend(e->comm));
    }
    FIT_NCCL(e->plugin.net->finalize(e->ctx));
    fit_plugin_close(&e->plugin);
    fit_child_exit(0);
}

/* How the survivor's case ended. */
typedef struct fault_outcome {
    ncclResult_t rc;
    const char  *call;     /* "connect", "accept", "isend", "irecv", "test", "expired". */
    double       seconds;  /* From the victim's death. */
} fault_outcome_t;

/* accept() until a comm, an error, or (socket) the listener dropped the dead connection. */
static int fault_survive_accept(fault_env_t *e, int from, fault_outcome_t *out)
{
    ncclNetDeviceHandle_v11_t *dh = NULL;
    fit_bound_t b;
    ncclResult_t rc;

    fit_bound_init(&b, "accept facing a dead connector", e->hello_timeout + 15.0, 2000000000L);
    while ((rc = e->plugin.net->accept(e->listen_comm, &e->comm, &dh)) == ncclSuccess &&
           e->comm == NULL) {
        if (e->sh->t_death > 0 &&
            fit_log_find(from, NCCL_LOG_WARN, "listener", "127.0.0.1", "streams", NULL, 0) >= 0) {
            out->rc = ncclRemoteError; /* Nothing to fail: the listener serves other ranks. */
            out->call = "expired";
            out->seconds = fit_now() - e->sh->t_death;
            return 1;
        }
        fit_bound_step(&b);
    }
    if (rc != ncclSuccess) {
        out->rc = rc;
        out->call = "accept";
        out->seconds = fit_now() - e->sh->t_death;
        return 1;
    }
    return 0;
}

static int fault_survive_connect(fault_env_t *e, fault_outcome_t *out)
{
    ncclNetDeviceHandle_v11_t *dh = NULL;
    fit_bound_t b;
    ncclResult_t rc;

    fit_bound_init(&b, "connect facing a dead acceptor", 30.0, 2000000000L);
    while ((rc = e->plugin.net->connect(e->ctx, 0, e->handle, &e->comm, &dh)) == ncclSuccess &&
           e->comm == NULL)
        fit_bound_step(&b);
    if (rc == ncclSuccess)
        return 0;
    out->rc = rc;
    out->call = "connect";
    out->seconds = fit_now() - e->sh->t_death;
    return 1;
}

/* The survivor of a killed case. */
static void fault_survive_kill(fault_env_t *e, int from)
{
    const fault_case_t *c = e->c;
    fault_outcome_t out = { ncclSuccess, "(nothing)", 0 };
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    char line[4096];
    int done;

    if (e->role == FIT_RECV) {
        done = fault_survive_accept(e, from, &out);
    } else {
        if (c->phase == FAULT_CONNECT || c->phase == FAULT_ACCEPT)
            usleep(100000); /* The acceptor is gone before we start, most of the time. */
        done = fault_survive_connect(e, &out);
    }
    if (!done) {
        o.nmsgs        = -1;
        o.endless_size = FAULT_MSG_SIZE;
        o.depth        = 8;
        o.seed         = 900;
        o.seconds      = 30.0;
        o.tag          = 9;
        fit_xfer_side(&e->plugin, e->role, e->comm, &o, &r);
        out.rc = r.rc;
        out.call = r.err_call != NULL ? r.err_call : "(nothing failed)";
        out.seconds = fit_now() - e->sh->t_death;
    }
    FIT_CHECK(e->sh->t_death > 0, "the survivor finished (%s -> %s) before the victim died",
              out.call, fit_result_str(out.rc));
    FIT_CHECK(out.rc == ncclRemoteError, "%s: expected ncclRemoteError, got %s -> %d (%s)",
              c->name, out.call, (int)out.rc, fit_result_str(out.rc));
    FIT_CHECK(out.seconds <= FAULT_ERROR_BOUND_S + (strcmp(out.call, "expired") == 0 ?
                                                    e->hello_timeout : 0.0),
              "%s: %s failed %.2f s after the peer died (bound %.1f s)", c->name, out.call,
              out.seconds, FAULT_ERROR_BOUND_S);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "127.0.0.1", NULL, NULL, line, sizeof(line)) >= 0,
              "%s: no WARN names the peer's address 127.0.0.1", c->name);
    printf("  WARN: %s\n", line);
    printf("FAULT case=%s backend=%s outcome=%s:%s seconds=%.3f\n", c->name, e->backend,
           out.call, strcmp(out.call, "expired") == 0 ? "dropped" : "ncclRemoteError",
           out.seconds);
    if (e->comm != NULL) {
        if (e->role == FIT_RECV)
            FIT_NCCL(e->plugin.net->closeRecv(e->comm));
        else
            FIT_NCCL(e->plugin.net->closeSend(e->comm));
    }
}

/* on_done of a frozen case's survivor: the longest gap between two completions. */
static void fault_gap(fit_role_t role, int i, void *arg)
{
    double *g = arg, now = fit_now();

    if (g[0] > 0 && now - g[0] > g[1])
        g[1] = now - g[0];
    g[0] = now;
}

/* The survivor of a frozen case: one stall WARN, then everything intact. */
static void fault_survive_freeze(fault_env_t *e, int from)
{
    static size_t sizes[FAULT_STOP_MSGS];
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    char line[4096];
    double gap[2] = { 0, 0 };
    int i, n;

    if (e->role == FIT_RECV)
        e->comm = fit_accept_loop(&e->plugin, e->listen_comm);
    else
        e->comm = fit_connect_loop(&e->plugin, e->ctx, 0, e->handle);
    for (i = 0; i < FAULT_STOP_MSGS; i++)
        sizes[i] = FAULT_MSG_SIZE;
    o.sizes   = sizes;
    o.nmsgs   = FAULT_STOP_MSGS;
    o.depth   = 8;
    o.seed    = 900;
    o.seconds = FAULT_CASE_S - 10.0;
    o.tag     = 9;
    o.on_done = fault_gap;
    o.on_done_arg = gap;
    fit_log_expect("NCCL_FERRY_STALL_WARN_S");
    fit_xfer_side(&e->plugin, e->role, e->comm, &o, &r);
    fit_xfer_expect_ok(&r, "the survivor's sequence across the freeze");
    n = fault_stall_warns(from);
    printf("  longest gap between two completions: %.3f s\n", gap[1]);
    FIT_CHECK(e->sh->t_cont > 0, "%s: the sequence ended before the victim was resumed",
              e->c->name);
    FIT_CHECK(n == 1, "%s: %d stall WARNs, expected exactly one", e->c->name, n);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "NCCL_FERRY_STALL_WARN_S", NULL, NULL, line,
                           sizeof(line)) >= 0, "no stall WARN");
    FIT_CHECK(strstr(line, "posted") != NULL || strstr(line, "clear-to-send") != NULL,
              "%s: the stall WARN carries no request counters: %s", e->c->name, line);
    printf("  WARN: %s\n", line);
    printf("FAULT case=%s backend=%s outcome=stall-warn-then-intact seconds=%.3f "
           "frozen=%.3f messages=%d\n", e->c->name, e->backend, e->sh->t_cont - e->sh->t_death,
           e->sh->t_cont - e->sh->t_death, r.done[e->role]);
    fit_log_expect_clear();
    if (e->role == FIT_RECV)
        FIT_NCCL(e->plugin.net->closeRecv(e->comm));
    else
        FIT_NCCL(e->plugin.net->closeSend(e->comm));
}

/*
 * One connection in this process and back, before the baseline is counted:
 * what stays for the process's life by design (libibverbs is never
 * unloaded, as NCCL keeps it; the emulator's fabric socket and lock file)
 * is then in the baseline, and what a case leaves is not.
 */
static void fault_warmup(fault_env_t *e)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc, *sc, *rc;

    fault_open(e);
    lc = fit_listen(&e->plugin, e->ctx, 0, handle);
    fit_connect_accept(&e->plugin, e->ctx, 0, handle, lc, &sc, &rc, NULL);
    FIT_NCCL(e->plugin.net->closeSend(sc));
    FIT_NCCL(e->plugin.net->closeRecv(rc));
    FIT_NCCL(e->plugin.net->closeListen(lc));
    FIT_NCCL(e->plugin.net->finalize(e->ctx));
    fit_plugin_close(&e->plugin);
}

static void fault_survivor(fault_env_t *e)
{
    fit_leaks_t before;
    int from;

    fault_warmup(e);
    fit_leaks_snap(&before);
    fault_open(e);
    if (e->role == FIT_RECV) {
        e->listen_comm = fit_listen(&e->plugin, e->ctx, 0, e->handle);
        fault_handle_io(e);
    } else {
        fault_handle_io(e);
    }
    from = fit_log_lines();
    if (e->c->phase == FAULT_FREEZE) {
        fault_survive_freeze(e, from);
    } else {
        fit_log_allow_warns(1); /* Any wording; the one naming the peer is required. */
        fault_survive_kill(e, from);
    }
    if (e->listen_comm != NULL)
        FIT_NCCL(e->plugin.net->closeListen(e->listen_comm));
    FIT_NCCL(e->plugin.net->finalize(e->ctx));
    fit_log_allow_warns(0);
    fit_log_check_clean("after finalize");
    fit_plugin_close(&e->plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
    fit_leaks_check(&before, "after the case");
    fit_pass("%s: %s", e->c->name, e->c->expect);
    fit_child_exit(0);
}

static pid_t fault_spawn(const fault_case_t *c, fault_shared_t *sh, fit_role_t role, int hfd,
                         int other_fd, double hello_timeout)
{
    pid_t pid;

    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        fault_env_t e;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(other_fd);
        memset(&e, 0, sizeof(e));
        e.c = c;
        e.sh = sh;
        e.role = role;
        e.hfd = hfd;
        e.backend = getenv("NCCL_FERRY_BACKEND") != NULL ? getenv("NCCL_FERRY_BACKEND")
                                                         : "socket";
        e.hello_timeout = hello_timeout;
        fit_set_role(role == c->victim ? "victim" : "survivor");
        alarm((unsigned)FAULT_CASE_S);
        if (role == c->victim)
            fault_victim(&e);
        fault_survivor(&e);
    }
    return pid;
}

/* SIGSTOP the victim at its moment, SIGCONT after 1.9 stall delays. */
static void fault_freeze(fault_shared_t *sh, pid_t victim, double stall_s)
{
    fit_bound_t b;

    fit_bound_init(&b, "the victim's messages before the freeze", 30.0, 100000000L);
    while (!sh->in_flight)
        fit_bound_step(&b);
    FIT_CHECK(kill(victim, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
    sh->t_death = fit_now();
    printf("  supervisor: SIGSTOP victim pid %d\n", (int)victim);
    /*
     * Frozen past the stall warning's delay, but less than twice it: the
     * kernel may still take a few bytes from the frozen peer's socket (a
     * request completes: the comm moved), and a second stall of a full delay
     * after that is a second WARN by design.
     */
    usleep((useconds_t)(stall_s * 1.9 * 1e6));
    FIT_CHECK(kill(victim, SIGCONT) == 0, "SIGCONT: %s", strerror(errno));
    sh->t_cont = fit_now();
    printf("  supervisor: SIGCONT victim after %.2f s\n", sh->t_cont - sh->t_death);
}

static int fault_run(const fault_case_t *c, double hello_timeout, double stall_s)
{
    fault_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int pfd[2], status[2] = { 0, 0 }, i, bad = 0;
    pid_t pids[2];
    double t0 = fit_now();

    FIT_CHECK(sh != MAP_FAILED, "mmap: %s", strerror(errno));
    memset((void *)sh, 0, sizeof(*sh));
    FIT_CHECK(pipe(pfd) == 0, "pipe: %s", strerror(errno));
    pids[FIT_RECV] = fault_spawn(c, sh, FIT_RECV, pfd[1], pfd[0], hello_timeout);
    pids[FIT_SEND] = fault_spawn(c, sh, FIT_SEND, pfd[0], pfd[1], hello_timeout);
    close(pfd[0]);
    close(pfd[1]);
    if (c->phase == FAULT_FREEZE)
        fault_freeze(sh, pids[c->victim], stall_s);
    for (i = 0; i < 2; i++) {
        fit_bound_t b;
        int rc;

        fit_bound_init(&b, "the case's processes", FAULT_CASE_S + 5.0 - (fit_now() - t0),
                       100000000L);
        while ((rc = (int)waitpid(pids[i], &status[i], WNOHANG)) == 0 && fit_bound_try_step(&b))
            usleep(10000);
        if (rc == 0) {
            fprintf(stderr, "FAIL case %s: pid %d still running, killing it\n", c->name,
                    (int)pids[i]);
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status[i], 0);
            bad = 1;
        }
    }
    for (i = 0; i < 2; i++) {
        int killed = c->phase != FAULT_FREEZE && (fit_role_t)i == c->victim;
        int ok = killed ? WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL
                        : WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0;

        if (!ok) {
            fprintf(stderr, "FAIL case %s: %s (%s) ended with status 0x%x, expected %s\n",
                    c->name, fault_role_str((fit_role_t)i),
                    (fit_role_t)i == c->victim ? "victim" : "survivor", status[i],
                    killed ? "its own SIGKILL" : "exit 0");
            bad = 1;
        }
    }
    munmap(sh, sizeof(*sh));
    return bad;
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *only = argc == 3 && strcmp(argv[1], "--case") == 0 ? argv[2] : NULL;
    const char *tmo = getenv("NCCL_FERRY_HELLO_TIMEOUT_MS");
    const char *stall = getenv("NCCL_FERRY_STALL_WARN_S");
    int i, ran = 0, failed = 0;

    FIT_CHECK(argc == 1 || only != NULL, "usage: integ_faults [--plugin PATH] [--case NAME]");
    FIT_CHECK(stall != NULL && atoi(stall) > 0, "set NCCL_FERRY_STALL_WARN_S (the frozen cases "
              "wait past it)");
    /*
     * Under a sanitizer's time scale the stall delay stretches too (and the
     * freeze, 1.9 delays, with it): the frozen side's catch-up after SIGCONT
     * must take less than one delay, or a second stall WARN is right.
     */
    if (fit_time_scale() > 1.0) {
        char v[16];

        snprintf(v, sizeof(v), "%d", (int)(atoi(stall) * fit_time_scale() + 0.5));
        setenv("NCCL_FERRY_STALL_WARN_S", v, 1);
        stall = getenv("NCCL_FERRY_STALL_WARN_S");
    }
    setenv("FAULT_PLUGIN", path, 1);
    /* Few, short connect retries toward a dead acceptor (the default takes a minute, as NCCL's). */
    setenv("NCCL_SOCKET_RETRY_CNT", "5", 0);
    setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "20", 0);
    fit_set_role("supervisor");
    for (i = 0; i < FAULT_NCASES; i++) {
        double t0 = fit_now();
        int bad;

        if (only != NULL && strcmp(only, fault_cases[i].name) != 0)
            continue;
        printf("case %s (expect %s)\n", fault_cases[i].name, fault_cases[i].expect);
        bad = fault_run(&fault_cases[i], (tmo ? atof(tmo) : 10000.0) / 1000.0, atof(stall));
        printf("%s case %s in %.2f s\n", bad ? "FAILED" : "passed", fault_cases[i].name,
               fit_now() - t0);
        failed += bad;
        ran++;
    }
    FIT_CHECK(ran > 0, "no case named %s", only);
    printf("integ_faults: %d case(s), %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
