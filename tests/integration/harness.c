#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "harness.h"
#include "socket/sock_wire.h"

#ifndef FERRY_PLUGIN_DEFAULT
#define FERRY_PLUGIN_DEFAULT "libnccl-net-ferry.so"
#endif

static const char *fit_role_name = "test";

/* ---- failure reporting ---------------------------------------------------- */

const char *fit_result_str(ncclResult_t rc)
{
    switch ((int)rc) {
    case 0: return "ncclSuccess";
    case 1: return "ncclUnhandledCudaError";
    case 2: return "ncclSystemError";
    case 3: return "ncclInternalError";
    case 4: return "ncclInvalidArgument";
    case 5: return "ncclInvalidUsage";
    case 6: return "ncclRemoteError";
    case 7: return "ncclInProgress";
    default: return "unknown ncclResult_t";
    }
}

void fit_set_role(const char *role)
{
    fit_role_name = role;
}

void fit_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fprintf(stderr, "FAIL [%s pid %d] %s:%d: ", fit_role_name, (int)getpid(), file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fit_log_dump_tail(40);
    fflush(NULL);
    /* _exit: the plugin's threads may still run; atexit handlers must not race them. */
    _exit(1);
}

/* Defined by LeakSanitizer (ASan builds); NULL otherwise. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

void fit_child_exit(int code)
{
    fflush(NULL);
    if (code == 0 && __lsan_do_recoverable_leak_check != NULL &&
        __lsan_do_recoverable_leak_check() != 0) {
        fprintf(stderr, "FAIL [%s pid %d]: LeakSanitizer found leaks (above)\n", fit_role_name,
                (int)getpid());
        code = 1;
    }
    fflush(NULL);
    _exit(code);
}

void fit_pass(const char *fmt, ...)
{
    va_list ap;

    printf("ok [%s] - ", fit_role_name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* ---- time and bounds ------------------------------------------------------ */

double fit_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * FIT_TIME_SCALE (1..20, default 1) stretches every wait bound: a sanitizer
 * build moves bytes several times slower (TSan instruments every copy), and
 * CI's sanitizer jobs set it. Tests that measure how soon something happens
 * keep their own limits.
 */
double fit_time_scale(void)
{
    const char *v = getenv("FIT_TIME_SCALE");
    double s = v != NULL ? strtod(v, NULL) : 1.0;

    return s >= 1.0 && s <= 20.0 ? s : 1.0;
}

void fit_bound_init(fit_bound_t *b, const char *what, double seconds, long max_iters)
{
    b->what      = what;
    b->start     = fit_now();
    b->deadline  = b->start + seconds * fit_time_scale();
    b->iters     = 0;
    b->max_iters = max_iters;
}

int fit_bound_try_step(fit_bound_t *b)
{
    b->iters++;
    /* The clock is read every 64 steps: cheap, and still well under a ms late. */
    if (b->iters >= b->max_iters)
        return 0;
    if ((b->iters & 63) == 0 && fit_now() > b->deadline)
        return 0;
    /* Give the plugin's helper threads the CPU: CI has two cores. */
    sched_yield();
    return 1;
}

void fit_bound_fail(const fit_bound_t *b)
{
    fit_fail(__FILE__, __LINE__, "%s: not done after %ld iterations / %.1f s (limit %ld / %.1f s)",
             b->what, b->iters, fit_now() - b->start, b->max_iters, b->deadline - b->start);
}

void fit_bound_step(fit_bound_t *b)
{
    if (!fit_bound_try_step(b))
        fit_bound_fail(b);
}

/* ---- the capturing logger ------------------------------------------------- */

#define FIT_LOG_MAX_LINES    200000
#define FIT_LOG_MAX_EXPECTED 32

typedef struct fit_log_line {
    int   level;  /* ncclDebugLogLevel. */
    char *text;   /* Formatted message, malloc'd. */
} fit_log_line_t;

/* All logger state; every field is protected by lock (helper threads log too). */
static struct {
    pthread_mutex_t lock;
    fit_log_line_t *lines;
    int             nlines;
    int             cap;
    int             warns;
    int             unexpected;
    int             allow_all;
    int             nexpected;
    char           *expected[FIT_LOG_MAX_EXPECTED];
} fit_log = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int fit_log_verbose(void)
{
    const char *v = getenv("FIT_VERBOSE");
    const char *d = getenv("NCCL_DEBUG");

    return (v != NULL && v[0] == '1') ||
           (d != NULL && (strcasecmp(d, "INFO") == 0 || strcasecmp(d, "TRACE") == 0));
}

static const char *fit_level_str(int level)
{
    switch (level) {
    case 2: return "WARN";
    case 3: return "INFO";
    case 4: return "ABORT";
    case 5: return "TRACE";
    default: return "LOG";
    }
}

/*
 * WARNs that say something true about how the test runner itself is set up,
 * not about the plugin: ferry warns when helper threads are asked for in a
 * process bound to one CPU, which is what a one-CPU runner (a small CI
 * container) makes of every test that sets NCCL_SOCKET_NTHREADS.
 */
static int fit_log_runner_expected(const char *msg)
{
    cpu_set_t set;

    return strstr(msg, "in a process bound to one CPU") != NULL &&
           sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1;
}

void fit_logger(ncclDebugLogLevel level, unsigned long flags, const char *file,
                int line, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    int expected = 0;
    int i;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&fit_log.lock);
    if (fit_log.nlines == fit_log.cap && fit_log.cap < FIT_LOG_MAX_LINES) {
        int ncap = fit_log.cap ? fit_log.cap * 2 : 1024;
        fit_log_line_t *n = realloc(fit_log.lines, sizeof(*n) * (size_t)ncap);

        if (n != NULL) {
            fit_log.lines = n;
            fit_log.cap   = ncap;
        }
    }
    if (fit_log.nlines < fit_log.cap) {
        fit_log.lines[fit_log.nlines].level = (int)level;
        fit_log.lines[fit_log.nlines].text  = strdup(msg);
        fit_log.nlines++;
    }
    if ((int)level == NCCL_LOG_WARN) {
        fit_log.warns++;
        expected = fit_log.allow_all || fit_log_runner_expected(msg);
        for (i = 0; i < fit_log.nexpected && !expected; i++)
            expected = strstr(msg, fit_log.expected[i]) != NULL;
        if (!expected)
            fit_log.unexpected++;
    }
    pthread_mutex_unlock(&fit_log.lock);

    if ((int)level == NCCL_LOG_WARN || fit_log_verbose())
        fprintf(stderr, "[%s %d] plugin %s%s %s:%d %s\n", fit_role_name, (int)getpid(),
                (int)level == NCCL_LOG_WARN && !expected ? "unexpected " : "",
                fit_level_str((int)level), file ? file : "?", line, msg);
}

void fit_log_expect(const char *substr)
{
    pthread_mutex_lock(&fit_log.lock);
    if (fit_log.nexpected < FIT_LOG_MAX_EXPECTED)
        fit_log.expected[fit_log.nexpected++] = strdup(substr);
    pthread_mutex_unlock(&fit_log.lock);
}

void fit_log_expect_clear(void)
{
    int i;

    pthread_mutex_lock(&fit_log.lock);
    for (i = 0; i < fit_log.nexpected; i++)
        free(fit_log.expected[i]);
    fit_log.nexpected = 0;
    pthread_mutex_unlock(&fit_log.lock);
}

void fit_log_allow_warns(int on)
{
    pthread_mutex_lock(&fit_log.lock);
    fit_log.allow_all = on;
    pthread_mutex_unlock(&fit_log.lock);
}

int fit_log_lines(void)
{
    int n;

    pthread_mutex_lock(&fit_log.lock);
    n = fit_log.nlines;
    pthread_mutex_unlock(&fit_log.lock);
    return n;
}

int fit_log_warns(void)
{
    int n;

    pthread_mutex_lock(&fit_log.lock);
    n = fit_log.warns;
    pthread_mutex_unlock(&fit_log.lock);
    return n;
}

int fit_log_unexpected(void)
{
    int n;

    pthread_mutex_lock(&fit_log.lock);
    n = fit_log.unexpected;
    pthread_mutex_unlock(&fit_log.lock);
    return n;
}

int fit_log_find(int from, int level, const char *n1, const char *n2, const char *n3,
                 char *out, size_t out_len)
{
    int found = -1;
    int i;

    pthread_mutex_lock(&fit_log.lock);
    for (i = from < 0 ? 0 : from; i < fit_log.nlines && found < 0; i++) {
        const fit_log_line_t *l = &fit_log.lines[i];

        if (l->text == NULL || (level >= 0 && l->level != level))
            continue;
        if ((n1 && !strstr(l->text, n1)) || (n2 && !strstr(l->text, n2)) ||
            (n3 && !strstr(l->text, n3)))
            continue;
        found = i;
        if (out != NULL && out_len > 0)
            snprintf(out, out_len, "%s", l->text);
    }
    pthread_mutex_unlock(&fit_log.lock);
    return found;
}

size_t fit_log_text(int from, char *buf, size_t buf_len)
{
    size_t len = 0;
    int i;

    if (buf_len == 0)
        return 0;
    buf[0] = '\0';
    pthread_mutex_lock(&fit_log.lock);
    for (i = from < 0 ? 0 : from; i < fit_log.nlines && len + 1 < buf_len; i++) {
        int n = snprintf(buf + len, buf_len - len, "%s\n",
                         fit_log.lines[i].text ? fit_log.lines[i].text : "");

        len += n < 0 ? 0 : (size_t)n;
    }
    pthread_mutex_unlock(&fit_log.lock);
    return len < buf_len ? len : buf_len - 1;
}

void fit_log_check_clean(const char *when)
{
    int unexpected = fit_log_unexpected();

    if (unexpected != 0)
        fit_fail(__FILE__, __LINE__, "%s: %d unexpected WARN line(s) from the plugin (see above)",
                 when, unexpected);
}

void fit_log_dump_tail(int n)
{
    int i;

    /* trylock: fit_fail may run while a helper thread is inside the logger. */
    if (pthread_mutex_trylock(&fit_log.lock) != 0)
        return;
    if (fit_log.nlines > 0)
        fprintf(stderr, "---- last %d plugin log lines (of %d) ----\n",
                fit_log.nlines < n ? fit_log.nlines : n, fit_log.nlines);
    for (i = fit_log.nlines > n ? fit_log.nlines - n : 0; i < fit_log.nlines; i++)
        fprintf(stderr, "  %s %s\n", fit_level_str(fit_log.lines[i].level),
                fit_log.lines[i].text ? fit_log.lines[i].text : "");
    pthread_mutex_unlock(&fit_log.lock);
}

/* ---- the plugin ----------------------------------------------------------- */

/* Buffers a failed transfer may still have handed to the plugin; freed after dlclose. */
#define FIT_GRAVEYARD_MAX 64
static void *fit_graveyard[FIT_GRAVEYARD_MAX];
static int   fit_graveyard_n;

void fit_graveyard_add(void *ptr)
{
    if (fit_graveyard_n < FIT_GRAVEYARD_MAX)
        fit_graveyard[fit_graveyard_n++] = ptr;
}

const char *fit_plugin_path(int *argc, char **argv)
{
    const char *path = NULL;
    int i, j;

    for (i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--plugin") == 0 && i + 1 < *argc) {
            path = argv[i + 1];
            for (j = i; j + 2 <= *argc; j++)
                argv[j] = argv[j + 2];
            *argc -= 2;
            break;
        }
    }
    if (path == NULL)
        path = getenv("FERRY_PLUGIN");
    if (path == NULL)
        path = FERRY_PLUGIN_DEFAULT;
    return path;
}

void fit_plugin_open(fit_plugin_t *p, const char *path)
{
    const ncclNet_v11_t *n;

    memset(p, 0, sizeof(*p));
    snprintf(p->path, sizeof(p->path), "%s", path);
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    FIT_CHECK(p->dl != NULL, "dlopen(%s): %s", path, dlerror());
    n = dlsym(p->dl, "ncclNetPlugin_v11");
    FIT_CHECK(n != NULL, "%s exports no ncclNetPlugin_v11: %s", path, dlerror());
    FIT_CHECK(n->name != NULL && strcmp(n->name, "ferry") == 0,
              "struct name is '%s', expected 'ferry'", n->name ? n->name : "(null)");
    /* The members NCCL 2.28.9 calls without a NULL check (reference §2.6). */
    FIT_CHECK(n->init && n->devices && n->getProperties && n->listen && n->connect &&
              n->accept && n->regMr && n->deregMr && n->isend && n->irecv && n->test &&
              n->closeSend && n->closeRecv && n->closeListen && n->finalize,
              "a mandatory ncclNet_v11_t member is NULL");
    p->net = n;
}

void fit_plugin_close(fit_plugin_t *p)
{
    int i;

    FIT_CHECK(dlclose(p->dl) == 0, "dlclose: %s", dlerror());
    p->dl  = NULL;
    p->net = NULL;
    for (i = 0; i < fit_graveyard_n; i++)
        free(fit_graveyard[i]);
    fit_graveyard_n = 0;
}

/* NCCL always passes a profiler callback; the plugin must never start an event on a NULL handle. */
static ncclResult_t fit_profiler(void **ehandle, int type, void *phandle, int64_t plugin_id,
                                 void *ext)
{
    if (type == 0 && phandle == NULL)
        fit_fail(__FILE__, __LINE__, "plugin called the profiler Start with a NULL pHandle");
    if (ehandle != NULL)
        *ehandle = NULL;
    return ncclSuccess;
}

void *fit_plugin_init(const fit_plugin_t *p, uint64_t comm_id)
{
    ncclNetCommConfig_v11_t cfg;
    void *ctx = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg.trafficClass = -1;
    FIT_NCCL(p->net->init(&ctx, comm_id, &cfg, fit_logger, fit_profiler));
    /* NCCL's config lives on its stack: scribble over ours so a kept pointer shows. */
    memset(&cfg, 0x5a, sizeof(cfg));
    return ctx;
}

/* PF_EXITING (linux/sched.h), in field 9 of /proc/PID/task/TID/stat: the thread is in do_exit. */
#define FIT_PF_EXITING 0x4u

/* 1 if thread tid is in the kernel's exit path, 0 if not, -1 if it is gone. */
static int fit_thread_exiting(const char *tid, char *state_p)
{
    char path[300], buf[1024], *p;
    unsigned flags = 0;
    FILE *f;
    int ok;

    snprintf(path, sizeof(path), "/proc/self/task/%s/stat", tid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    /* Opened, then gone before the read (the read fails with ESRCH): exited. */
    if (p == NULL)
        return -1;
    /* "tid (comm) state ppid pgrp session tty tpgid flags ...": comm may hold spaces. */
    p = strrchr(buf, ')');
    ok = p != NULL && sscanf(p + 1, " %c %*d %*d %*d %*d %*d %u", state_p, &flags) == 2;
    FIT_CHECK(ok, "cannot parse %s: %s", path, buf);
    return (flags & FIT_PF_EXITING) != 0;
}

/*
 * Threads named prefix*. With exiting_p, also how many of them are already
 * in the kernel's exit path, and names says "comm[tid state, exiting]".
 */
static int fit_scan_threads(const char *prefix, int *exiting_p, char *names, size_t names_len)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    size_t used = 0;
    int count = 0;

    FIT_CHECK(d != NULL, "opendir /proc/self/task: %s", strerror(errno));
    if (names != NULL && names_len > 0)
        names[0] = '\0';
    if (exiting_p != NULL)
        *exiting_p = 0;
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[64] = "", what[340];
        char state = '?';
        int exiting = 0;
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue; /* The thread exited meanwhile. */
        if (fgets(comm, sizeof(comm), f) == NULL)
            comm[0] = '\0';
        fclose(f);
        comm[strcspn(comm, "\n")] = '\0';
        if (strncmp(comm, prefix, strlen(prefix)) != 0)
            continue;
        if (exiting_p != NULL) {
            exiting = fit_thread_exiting(e->d_name, &state);
            if (exiting < 0)
                continue; /* Gone between the two reads. */
            *exiting_p += exiting;
            snprintf(what, sizeof(what), "%s[%s %c%s]", comm, e->d_name, state,
                     exiting ? ", exiting" : "");
        } else {
            snprintf(what, sizeof(what), "%s", comm);
        }
        count++;
        if (names != NULL && used + strlen(what) + 2 < names_len)
            used += (size_t)snprintf(names + used, names_len - used, "%s%s",
                                     used ? " " : "", what);
    }
    closedir(d);
    return count;
}

int fit_count_threads(const char *prefix, char *names, size_t names_len)
{
    return fit_scan_threads(prefix, NULL, names, names_len);
}

/*
 * No ferry-* thread may run once finalize (and dlclose) returned. A thread
 * ferry joined can still be listed for a moment: the kernel clears its tid,
 * which ends pthread_join, in exit_mm, before exit_notify takes it off
 * /proc/self/task; on two busy cores that moment can last. Such a thread
 * has PF_EXITING set and runs no more of ferry's code, so it gets up to
 * 2 s to go. A ferry-* thread not in exit was never stopped: it fails at once.
 */
void fit_check_no_ferry_threads(const char *when)
{
    char names[1024];
    fit_bound_t b;
    int n, exiting;

    fit_bound_init(&b, "ferry-* threads to finish exiting", 2.0, 100000L);
    for (;;) {
        n = fit_scan_threads("ferry-", &exiting, names, sizeof(names));
        FIT_CHECK(n == exiting, "%s: %d ferry-* thread(s) still alive, %d of them not exiting: %s",
                  when, n, n - exiting, names);
        if (n == 0)
            return;
        FIT_CHECK(fit_bound_try_step(&b), "%s: %d joined ferry-* thread(s) still in the kernel's "
                  "exit path after 2 s: %s", when, n, names);
        usleep(1000);
    }
}

/* ---- connection helpers --------------------------------------------------- */

int fit_device(const fit_plugin_t *p)
{
    const char *merge = getenv("FIT_MERGE"); /* "0+1" */
    ncclNetVDeviceProps_v11_t vp;
    char *end;
    int d = -1;

    if (merge == NULL || merge[0] == '\0')
        return 0;
    memset(&vp, 0, sizeof(vp));
    while (*merge != '\0' && vp.ndevs < NCCL_NET_MAX_DEVS_PER_NIC) {
        vp.devs[vp.ndevs++] = (int)strtol(merge, &end, 10);
        FIT_CHECK(end != merge, "FIT_MERGE='%s': devices joined by '+'", merge);
        merge = *end == '+' ? end + 1 : end;
    }
    FIT_CHECK(p->net->makeVDevice != NULL, "the plugin has no makeVDevice");
    FIT_NCCL(p->net->makeVDevice(&d, &vp));
    FIT_CHECK(d >= 0, "makeVDevice gave device %d", d);
    return d;
}

void *fit_listen(const fit_plugin_t *p, void *ctx, int dev, void *handle)
{
    void *listen_comm = NULL;

    memset(handle, 0xee, NCCL_NET_HANDLE_MAXSIZE); /* listen() must fill it, not rely on zeros. */
    FIT_NCCL(p->net->listen(ctx, dev, handle, &listen_comm));
    FIT_CHECK(listen_comm != NULL, "listen returned ncclSuccess with a NULL listenComm");
    return listen_comm;
}

void fit_connect_accept(const fit_plugin_t *p, void *send_ctx, int dev, void *handle,
                        void *listen_comm, void **send_p, void **recv_p, long *nulls_p)
{
    /* The peer's copy of the handle: NCCL hands connect() its own buffer, every retry the same. */
    char peer_handle[NCCL_NET_HANDLE_MAXSIZE];
    ncclNetDeviceHandle_v11_t *send_dev = NULL, *recv_dev = NULL;
    void *send_comm = NULL, *recv_comm = NULL;
    fit_bound_t b;
    long nulls = 0;

    memcpy(peer_handle, handle, sizeof(peer_handle));
    fit_bound_init(&b, "in-process connect/accept", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (send_comm == NULL || recv_comm == NULL) {
        if (send_comm == NULL) {
            FIT_NCCL(p->net->connect(send_ctx, dev, peer_handle, &send_comm, &send_dev));
            nulls += send_comm == NULL;
        }
        if (recv_comm == NULL) {
            FIT_NCCL(p->net->accept(listen_comm, &recv_comm, &recv_dev));
            nulls += recv_comm == NULL;
        }
        if (send_comm == NULL || recv_comm == NULL)
            fit_bound_step(&b);
    }
    *send_p = send_comm;
    *recv_p = recv_comm;
    if (nulls_p != NULL)
        *nulls_p = nulls;
}

void *fit_connect_loop(const fit_plugin_t *p, void *ctx, int dev, void *handle)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    void *send_comm = NULL;
    fit_bound_t b;

    fit_bound_init(&b, "connect", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    for (;;) {
        FIT_NCCL(p->net->connect(ctx, dev, handle, &send_comm, &dev_handle));
        if (send_comm != NULL)
            return send_comm;
        fit_bound_step(&b);
    }
}

void *fit_accept_loop(const fit_plugin_t *p, void *listen_comm)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    void *recv_comm = NULL;
    fit_bound_t b;

    fit_bound_init(&b, "accept", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    for (;;) {
        FIT_NCCL(p->net->accept(listen_comm, &recv_comm, &dev_handle));
        if (recv_comm != NULL)
            return recv_comm;
        fit_bound_step(&b);
    }
}

void fit_handle_addr(const void *handle, char *buf, size_t len)
{
    const ferry_sock_handle_t *h = handle;
    char ip[INET6_ADDRSTRLEN] = "?";

    if (h->family == AF_INET || h->family == AF_INET6)
        inet_ntop(h->family, h->addr, ip, sizeof(ip));
    if (h->family == AF_INET6 && h->scope_id != 0)
        snprintf(buf, len, "[%s%%%u]:%u", ip, (unsigned)h->scope_id, (unsigned)ntohs(h->port));
    else if (h->family == AF_INET6)
        snprintf(buf, len, "[%s]:%u", ip, (unsigned)ntohs(h->port));
    else
        snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(h->port));
}

int fit_handle_port(const void *handle)
{
    const ferry_sock_handle_t *h = handle;

    return ntohs(h->port);
}

/* Distinct "local remote" pairs of ESTABLISHED sockets on one local port. */
typedef struct fit_est_set {
    char pair[256][96]; /* tcp6 prints an address as 32 hex digits and its port. */
    int  n;
} fit_est_set_t;

static void fit_est_add(fit_est_set_t *set, const char *local, const char *remote)
{
    char key[96];
    int i;

    snprintf(key, sizeof(key), "%.47s %.47s", local, remote);
    for (i = 0; i < set->n; i++)
        if (strcmp(set->pair[i], key) == 0)
            return;
    if (set->n < (int)(sizeof(set->pair) / sizeof(set->pair[0])))
        memcpy(set->pair[set->n++], key, sizeof(key));
}

static void fit_established_in(const char *path, int port, fit_est_set_t *set)
{
    FILE *f = fopen(path, "r");
    char line[512];

    if (f == NULL)
        return;
    if (fgets(line, sizeof(line), f) == NULL) { /* Header. */
        fclose(f);
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char local[128], remote[128];
        unsigned st;
        char *colon;

        if (sscanf(line, " %*d: %127s %127s %x", local, remote, &st) != 3)
            continue;
        colon = strrchr(local, ':');
        if (colon != NULL && st == 0x01 && (int)strtol(colon + 1, NULL, 16) == port)
            fit_est_add(set, local, remote);
    }
    fclose(f);
}

int fit_count_fds_to(const char *target)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int count = 0;

    FIT_CHECK(d != NULL, "opendir /proc/self/fd: %s", strerror(errno));
    while ((e = readdir(d)) != NULL) {
        char path[300], link[256];
        ssize_t n;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        if (strcmp(link, target) == 0)
            count++;
    }
    closedir(d);
    return count;
}

/*
 * The kernel prints /proc/net/tcp a page at a time, walking its hash table
 * anew for each: a socket that other tests open or close meanwhile shifts
 * the walk, and a line is skipped or printed twice. So three reads, each
 * socket counted once over all of them.
 */
int fit_count_established_local(int port)
{
    fit_est_set_t set;
    int pass;

    set.n = 0;
    for (pass = 0; pass < 3; pass++) {
        fit_established_in("/proc/net/tcp", port, &set);
        fit_established_in("/proc/net/tcp6", port, &set);
    }
    return set.n;
}

/* ---- data patterns -------------------------------------------------------- */

static uint64_t fit_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t fit_word(uint64_t seed, size_t word)
{
    return fit_mix(seed * 0x2545f4914f6cdd1dULL ^ (uint64_t)word);
}

uint8_t fit_pattern_byte(uint64_t seed, size_t off)
{
    return (uint8_t)(fit_word(seed, off / 8) >> (8 * (off % 8)));
}

void fit_fill(void *buf, size_t n, uint64_t seed)
{
    uint8_t *b = buf;
    size_t w, nwords = n / 8, off;

    for (w = 0; w < nwords; w++) {
        uint64_t v = fit_word(seed, w);

        memcpy(b + w * 8, &v, 8); /* Little-endian hosts only; both ends are one build. */
    }
    for (off = nwords * 8; off < n; off++)
        b[off] = fit_pattern_byte(seed, off);
}

int fit_verify(const void *buf, size_t n, uint64_t seed, size_t *bad_p)
{
    const uint8_t *b = buf;
    size_t w, nwords = n / 8, off;

    for (w = 0; w < nwords; w++) {
        uint64_t v = fit_word(seed, w), got;

        memcpy(&got, b + w * 8, 8);
        if (got != v)
            break;
    }
    for (off = w * 8; off < n; off++) {
        if (b[off] != fit_pattern_byte(seed, off)) {
            if (bad_p != NULL)
                *bad_p = off;
            return 1;
        }
    }
    return 0;
}

void fit_check_pattern(const void *buf, size_t n, uint64_t seed, const char *what)
{
    size_t bad = 0, nbad = 0, i;
    const uint8_t *b = buf;

    if (!fit_verify(buf, n, seed, &bad))
        return;
    for (i = bad; i < n; i++)
        nbad += b[i] != fit_pattern_byte(seed, i);
    fit_fail(__FILE__, __LINE__,
             "%s: data mismatch at offset %zu of %zu: expected 0x%02x got 0x%02x "
             "(%zu bad bytes from there; 0x%02x is the receive poison)",
             what, bad, n, fit_pattern_byte(seed, bad), b[bad], nbad, FIT_POISON);
}
