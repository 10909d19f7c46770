/*
 * Integration-test harness: drives libnccl-net-ferry.so through the exported
 * ncclNetPlugin_v11 exactly as NCCL does (dlopen, non-blocking
 * listen/connect/accept, oldest-first test), with a capturing logger and
 * seeded data patterns checked byte for byte.
 *
 * Every wait in here is bounded both by an iteration count and by a
 * wall-clock deadline; running out of either is a test failure, never a hang.
 * Failures print the reason plus the last plugin log lines and exit(1).
 */
#ifndef FERRY_TESTS_INTEGRATION_HARNESS_H
#define FERRY_TESTS_INTEGRATION_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "nccl/net.h"

/* ---- failure reporting ---------------------------------------------------- */

/* Print "FAIL file:line: msg", the recent plugin log, and exit(1). */
void fit_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define FIT_FAIL(_fmt, ...) fit_fail(__FILE__, __LINE__, _fmt, ##__VA_ARGS__)

#define FIT_CHECK(_cond, _fmt, ...)                                             \
    do {                                                                        \
        if (!(_cond))                                                           \
            fit_fail(__FILE__, __LINE__, "check '%s' failed: " _fmt, #_cond,    \
                     ##__VA_ARGS__);                                            \
    } while (0)

/* A plugin call that must return ncclSuccess. */
#define FIT_NCCL(_call)                                                         \
    do {                                                                        \
        ncclResult_t _fit_rc = (_call);                                         \
        if (_fit_rc != ncclSuccess)                                             \
            fit_fail(__FILE__, __LINE__, "%s returned %d (%s)", #_call,         \
                     (int)_fit_rc, fit_result_str(_fit_rc));                    \
    } while (0)

const char *fit_result_str(ncclResult_t rc);

/*
 * End a forked child: fflush, then (in sanitizer builds) run the leak check
 * that _exit would skip; a leak turns code 0 into 1.
 */
void fit_child_exit(int code) __attribute__((noreturn));

/* Name of this process in messages ("inproc", "sender", ...). */
void fit_set_role(const char *role);
/* "ok - <name>" progress line on stdout. */
void fit_pass(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- time and bounds ------------------------------------------------------ */

/* Monotonic seconds. */
double fit_now(void);
/* FIT_TIME_SCALE (1..20, default 1): how much a sanitizer build stretches the wait bounds. */
double fit_time_scale(void);

/* A wait limited by both a deadline and an iteration count. */
typedef struct fit_bound {
    const char *what;       /* Named in the failure message. */
    double      start;      /* fit_now() at init. */
    double      deadline;   /* fit_now() value that ends the wait. */
    long        iters;      /* Steps taken so far. */
    long        max_iters;  /* Steps allowed. */
} fit_bound_t;

void fit_bound_init(fit_bound_t *b, const char *what, double seconds, long max_iters);
/* One more step: fails the test when the bound is spent; yields the CPU. */
void fit_bound_step(fit_bound_t *b);
/* Same, but returns 0 instead of failing when the bound is spent. */
int fit_bound_try_step(fit_bound_t *b);
/* Fails the test: the bound is spent (what, steps and seconds, against the limits). */
void fit_bound_fail(const fit_bound_t *b) __attribute__((noreturn));

/* ---- the plugin ----------------------------------------------------------- */

typedef struct fit_plugin {
    void                *dl;   /* dlopen handle. */
    const ncclNet_v11_t *net;  /* ncclNetPlugin_v11 inside it. */
    char                 path[1024];
} fit_plugin_t;

/*
 * The plugin path: "--plugin PATH" from argv, else $FERRY_PLUGIN, else the
 * compiled-in FERRY_PLUGIN_DEFAULT. Removes "--plugin PATH" from argv.
 */
const char *fit_plugin_path(int *argc, char **argv);
/* dlopen(RTLD_NOW | RTLD_LOCAL) and look up ncclNetPlugin_v11, as NCCL does. */
void fit_plugin_open(fit_plugin_t *p, const char *path);
/* dlclose; p->net is invalid afterwards. */
void fit_plugin_close(fit_plugin_t *p);
/* init() with the capturing logger; returns the ctx. */
void *fit_plugin_init(const fit_plugin_t *p, uint64_t comm_id);

/* Threads of this process whose name starts with prefix (/proc/self/task/N/comm). */
int fit_count_threads(const char *prefix, char *names, size_t names_len);
/* Fails unless no "ferry-" thread is left (one already in exit gets 2 s to go). */
void fit_check_no_ferry_threads(const char *when);

/* What a case must give back, counted from /proc/self (harness_leaks.c). */
typedef struct fit_leaks {
    int  fds;      /* Entries of /proc/self/fd. */
    int  threads;  /* Entries of /proc/self/task. */
    long rss_kb;   /* Resident set (statm). */
} fit_leaks_t;

long fit_rss_kb(void);
void fit_leaks_snap(fit_leaks_t *s);
/* Fails unless fds and threads are back to *before within 5 s (lists what is left). */
void fit_leaks_check(const fit_leaks_t *before, const char *when);

/* ---- the capturing logger ------------------------------------------------- */

/* Pass as init()'s logFunction. Thread-safe. */
void fit_logger(ncclDebugLogLevel level, unsigned long flags, const char *file,
                int line, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* A WARN containing substr is expected from now on (each may match many lines). */
void fit_log_expect(const char *substr);
void fit_log_expect_clear(void);
/* While on, every WARN counts as expected (windows where the wording is not ours to fix). */
void fit_log_allow_warns(int on);
int fit_log_lines(void);       /* Lines logged so far, all levels. */
int fit_log_warns(void);       /* WARN lines so far. */
int fit_log_unexpected(void);  /* WARN lines that matched no expectation. */
/*
 * Index of the first line >= from whose level is level (or any level if
 * level < 0) and which contains every non-NULL needle; -1 if none. The line
 * is copied to out when out != NULL.
 */
int fit_log_find(int from, int level, const char *n1, const char *n2, const char *n3,
                 char *out, size_t out_len);
/* Append lines >= from into buf (newline-separated, truncated); returns length. */
size_t fit_log_text(int from, char *buf, size_t buf_len);
/* Fails if an unexpected WARN was logged. */
void fit_log_check_clean(const char *when);
/* Print the last n lines to stderr. */
void fit_log_dump_tail(int n);

/* ---- connection helpers --------------------------------------------------- */

#define FIT_CONNECT_SECONDS 20.0
#define FIT_CONNECT_ITERS   20000000L

/* listen(); fails on error or a NULL listenComm. handle must hold 128 bytes. */
/*
 * The device a test runs on: 0, or with FIT_MERGE="0+1" the device the
 * plugin's makeVDevice makes of those (after init; the same each call).
 */
int fit_device(const fit_plugin_t *p);
void *fit_listen(const fit_plugin_t *p, void *ctx, int dev, void *handle);
/*
 * In one process: alternate connect() and accept() (each may return a NULL
 * comm until ready) until both comms exist. Counts the NULL returns in
 * *nulls_p when not NULL. closeListen is the caller's.
 */
void fit_connect_accept(const fit_plugin_t *p, void *send_ctx, int dev, void *handle,
                        void *listen_comm, void **send_p, void **recv_p, long *nulls_p);
/* connect() until a comm comes back (other process accepts). */
void *fit_connect_loop(const fit_plugin_t *p, void *ctx, int dev, void *handle);
/* accept() until a comm comes back (other process connects). */
void *fit_accept_loop(const fit_plugin_t *p, void *listen_comm);

/* Printable "addr:port" of a ferry socket handle. */
void fit_handle_addr(const void *handle, char *buf, size_t len);
/* Listen port (host order) from a ferry socket handle. */
int fit_handle_port(const void *handle);
/* Open fds of this process whose /proc/self/fd link reads target ("anon_inode:[eventpoll]"). */
int fit_count_fds_to(const char *target);
/* ESTABLISHED TCP sockets (v4 and v6) whose local port is port. */
int fit_count_established_local(int port);

/* ---- data patterns -------------------------------------------------------- */

/* Byte i of the pattern depends on seed and i, so misplaced bytes are caught. */
void fit_fill(void *buf, size_t n, uint64_t seed);
/* 0 if buf holds the pattern; else 1 with the first bad offset in *bad_p. */
int fit_verify(const void *buf, size_t n, uint64_t seed, size_t *bad_p);
/* Expected byte at offset off. */
uint8_t fit_pattern_byte(uint64_t seed, size_t off);
/* Fails naming what, the offset and the expected/actual bytes. */
void fit_check_pattern(const void *buf, size_t n, uint64_t seed, const char *what);

#define FIT_POISON 0xa5

/* ---- the transfer engine -------------------------------------------------- */

#define FIT_MAX_DEPTH 32

/* One direction of a message sequence, sender or receiver side. */
typedef enum fit_role { FIT_SEND, FIT_RECV } fit_role_t;

typedef struct fit_xfer_opts {
    const size_t *sizes;        /* Bytes sent by message i. */
    const size_t *recv_sizes;   /* Posted receive size of message i; NULL: sizes[i] + recv_extra. */
    int           nmsgs;        /* Messages; < 0: endless (until error or stop_after). */
    int           depth;        /* Requests in flight per side (1..32). */
    size_t        recv_extra;   /* Added to the posted receive size when recv_sizes is NULL. */
    size_t        endless_size; /* Size of every message when nmsgs < 0. */
    int           use_hint;     /* Pass NCCL_NET_OPTIONAL_RECV_COMPLETION in *request to irecv
                                 * (1: every receive, 2: every other one, as NCCL mixing LL and
                                 * Simple): a receive may then complete before its data (size
                                 * 0); in one process its bytes are checked after the send's. */
    uint64_t      seed;         /* Message i carries fit pattern seed + i. */
    double        seconds;      /* Deadline for the whole sequence. */
    int           tag;          /* Tag on isend/irecv. */
    size_t        arena_cap;    /* Max buffer bytes per side (0: 256 MiB). */
    /* Called after message i completed (and, on the receiver, verified). */
    void        (*on_done)(fit_role_t role, int i, void *arg);
    void         *on_done_arg;
} fit_xfer_opts_t;

/* How a sequence ended. */
typedef struct fit_xfer_result {
    ncclResult_t rc;        /* ncclSuccess, or the first error any call returned. */
    fit_role_t   err_role;  /* Side that saw rc. */
    int          err_msg;   /* Message index that saw rc. */
    const char  *err_call;  /* "isend", "irecv" or "test". */
    int          done[2];   /* Messages completed per role. */
    int          retries[2];/* isend/irecv that returned a NULL request. */
    int          early;     /* Receives done before their data (hint, size 0; in one process). */
    int          sized;     /* Hinted receives of >= 1 byte tested with sizes (early's bound). */
    double       seconds;   /* Wall time of the sequence. */
} fit_xfer_result_t;

/* Both sides in this process, stepped alternately. */
void fit_xfer_inproc(const fit_plugin_t *p, void *send_comm, void *recv_comm,
                     const fit_xfer_opts_t *o, fit_xfer_result_t *r);
/* One side only (the peer runs elsewhere). */
void fit_xfer_side(const fit_plugin_t *p, fit_role_t role, void *comm,
                   const fit_xfer_opts_t *o, fit_xfer_result_t *r);
/* test() until done or an error (bounded by seconds); returns the rc, *took the seconds. */
ncclResult_t fit_wait(const fit_plugin_t *p, void *req, double seconds, double *took);

/* Fails unless r ended in success with every message done on the sides that ran. */
void fit_xfer_expect_ok(const fit_xfer_result_t *r, const char *what);

/* The size sweep the tests share: 0..64 MiB, powers of two, neighbours, odd sizes. */
int fit_sweep_sizes(size_t *sizes, int max, size_t max_size);

/* Keep ptr allocated until fit_plugin_close (the plugin may still write into it). */
void fit_graveyard_add(void *ptr);

#endif
