/*
 * ferry-bench: the plugin against plain TCP, two processes, NCCL's traffic shape.
 *
 * The parent process is the sender and the one that measures; the forked
 * child is the receiver (or echoer, in ping-pong). Each process may first
 * enter its own network namespace (--netns-send/--netns-recv). The parent
 * sends each round's description down the control pipe, runs its own side,
 * and the round ends when the child acknowledges on the ack pipe that its
 * last message completed.
 *
 * Two implementations of each test:
 *   ferry  the plugin, dlopened and driven through ncclNetPlugin_v11 by one
 *          proxy-like thread per side that loops over every connection.
 *   raw    plain TCP with the same streams and threads ferry would use (from
 *          ferry_sock_config_load(), so the derivation lives in one place): the
 *          ceiling the plugin is measured against.
 */
#ifndef FERRY_BENCH_FBENCH_H
#define FERRY_BENCH_FBENCH_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"

#define FB_MAX_CONNS      32
#define FB_MAX_CONN_LIST  8
#define FB_MAX_STREAMS    64                  /* As socket/sock_config.c's maximum. */
#define FB_MAX_DEPTH      FIT_MAX_DEPTH
#define FB_MAX_REPS       15
#define FB_ARENA_CAP      ((size_t)256 << 20) /* Message buffer bytes per side at most. */
#define FB_LAT_CAP        65536               /* Latency samples kept per connection and round. */
#define FB_STALL_S        30.0                /* A round that makes no progress this long dies. */

/* What a round measures. */
typedef enum fb_test {
    FB_TEST_STREAM,    /* One-way traffic, --depth messages in flight per connection. */
    FB_TEST_PINGPONG,  /* One message each way, one connection, round-trip time. */
    FB_TEST_COUNT
} fb_test_t;

/* Who moves the bytes. */
typedef enum fb_impl {
    FB_IMPL_FERRY,     /* The plugin. */
    FB_IMPL_RAW,       /* Plain TCP sockets, no plugin. */
    FB_IMPL_COUNT
} fb_impl_t;

/* Command line, read-only once parsed. */
typedef struct fb_opts {
    const char *plugin;                     /* Plugin path for dlopen. */
    int         run[FB_TEST_COUNT][FB_IMPL_COUNT]; /* Which (test, impl) pairs run. */
    size_t      min_size, max_size;         /* Stream sizes, x4 steps, max always included. */
    size_t      pp_min, pp_max;             /* Ping-pong sizes, x4 steps. */
    int         conns[FB_MAX_CONN_LIST];    /* Connection counts swept (stream test). */
    int         nconns;                     /* Entries in conns[]. */
    int         max_conns;                  /* Largest of conns[]. */
    int         depth;                      /* Requests in flight per connection. */
    int         slots;                      /* Buffers per connection (--slots; default depth):
                                               fewer than depth share buffers, unchecked. */
    int         reps;                       /* Repetitions of each point, A B A B. */
    double      target_s;                   /* Length of each timed round. */
    double      timeout_s;                  /* Whole run; the child is killed past it. */
    const char *csv;                        /* Per-measurement CSV, or NULL. */
    const char *png;                        /* gnuplot PNG, or NULL. */
    const char *replot;                     /* --replot: CSV to redraw instead of measuring. */
    int         streams;                    /* TCP streams per connection (ferry's config). */
    int         threads;                    /* Helper threads per connection (ferry's config). */
    int         raw_threads;                /* Raw TCP's threads per connection: threads, or 1
                                               when ferry has none (NCCL's thread moves all). */
    size_t      chunk_min;                  /* Raw: smallest part a message is cut into. */
    size_t      chunk_max;                  /* Raw: most bytes one send/recv call moves. */
    int         sndbuf, rcvbuf;             /* SO_SNDBUF/SO_RCVBUF for raw sockets, -1 default. */
    const char *netns[2];                   /* [0] receiver's, [1] sender's namespace, or NULL. */
    const char *ifname[2];                  /* NCCL_SOCKET_IFNAME per side, or NULL: inherit. */
    int         cpu[2];                     /* Bind each side to this CPU (as mpirun binds ranks), -1: no. */
    const char *cgroup[2];                  /* Run each side in this cgroup directory, or NULL. */
    int         proxy_sleep_us;             /* Idle proxy pass: 0 sched_yield (NCCL), else sleep this long. */
} fb_opts_t;

/* One round, parent -> child over the control pipe. */
typedef struct fb_round {
    uint32_t test;   /* fb_test_t; FB_TEST_COUNT ends the run. */
    uint32_t impl;   /* fb_impl_t. */
    uint32_t conns;  /* Connections used (the first conns of those set up). */
    uint32_t depth;  /* In flight per connection. */
    uint64_t size;   /* Bytes per message. */
    uint64_t iters;  /* Messages per connection (ping-pong: round trips). */
} fb_round_t;

/* Latency samples of one round, in microseconds. */
typedef struct fb_lat {
    double *us;
    size_t  n, cap;
} fb_lat_t;

/* One process's state: message arena plus whatever connections it set up. */
typedef struct fb_side {
    const fb_opts_t *o;
    int              is_send;      /* Parent: sends and measures. */
    int              ctrl_fd;      /* Parent writes, child reads. */
    int              ack_fd;       /* Child writes, parent reads. */
    uint8_t         *arena;
    size_t           arena_len;
    /* ferry */
    int              plugin_up;
    fit_plugin_t     plugin;
    void            *ctx;
    void            *comm[FB_MAX_CONNS];   /* Stream comms: send (parent) or recv (child). */
    void            *mh[FB_MAX_CONNS];
    void            *pp_send, *pp_recv;    /* Ping-pong comms, one each way. */
    void            *pp_send_mh, *pp_recv_mh;
    /* raw */
    int              raw_up;
    int              raw_fd[FB_MAX_CONNS][FB_MAX_STREAMS];
    int              raw_pp_fd;
} fb_side_t;

/* fbench_side.c: arena, control pipes, message stamps, latency samples. */
void     fb_side_init(fb_side_t *s, const fb_opts_t *o, int is_send, int ctrl_fd, int ack_fd);
void     fb_side_fini(fb_side_t *s);
uint8_t *fb_slot(const fb_side_t *s, size_t size, int conn, uint64_t i);
int      fb_slots_unique(const fb_side_t *s, size_t size, int conns, int depth);
void     fb_stamp(void *buf, size_t len, int conn, uint64_t i);
int      fb_stamp_ok(const void *buf, size_t len, int conn, uint64_t i);
void     fb_pipe_write(int fd, const void *buf, size_t len);
void     fb_pipe_read(int fd, void *buf, size_t len);
void     fb_lat_init(fb_lat_t *l, size_t cap);
void     fb_lat_add(fb_lat_t *l, double us);
double   fb_lat_pct(fb_lat_t *l, double pct);
void     fb_lat_free(fb_lat_t *l);
/* Bounded wait: dies after FB_STALL_S without progress. */
void     fb_stall_check(double last_progress, const char *what, uint64_t done, uint64_t want);

/* fbench_plugin.c: the plugin driven like NCCL's proxy. */
void fb_plugin_setup(fb_side_t *s);
void fb_plugin_stream(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat);
void fb_plugin_pingpong(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat);
void fb_plugin_teardown(fb_side_t *s);

/* fbench_raw.c: the TCP ceiling. */
void fb_raw_setup(fb_side_t *s);
void fb_raw_stream(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat);
void fb_raw_pingpong(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat);
void fb_raw_teardown(fb_side_t *s);

/* fbench_opts.c: the command line; a usage error prints the usage and exits 2. */
void fb_parse(fb_opts_t *o, int argc, char **argv);

/* fbench_report.c: progress line, table, CSV; fbench_plot.c: the gnuplot PNG. */
typedef struct fb_point {
    fb_test_t test;
    fb_impl_t impl;
    int       conns;
    size_t    size;
    int       nrep;
    double    gbps[FB_MAX_REPS];
    double    msgps[FB_MAX_REPS];
    double    p50[FB_MAX_REPS];
    double    p99[FB_MAX_REPS];
} fb_point_t;

const char *fb_size_str(size_t size, char *buf, size_t len);
double      fb_median(const double *v, int n);
void        fb_progress(const fb_opts_t *o, int step, int total, const fb_point_t *p, int rep);
void        fb_progress_done(void);
void        fb_csv_open(const fb_opts_t *o);
void        fb_csv_row(const fb_opts_t *o, const fb_point_t *p, int rep, uint64_t iters,
                       double seconds);
void        fb_csv_close(void);
void        fb_table(const fb_opts_t *o, const fb_point_t *pts, int npts);
/* The point of the other implementation at p's test, conns and size, or NULL. */
const fb_point_t *fb_peer(const fb_point_t *pts, int npts, const fb_point_t *p, fb_impl_t impl);
/*
 * --png: medians against size, ferry and raw TCP, the ratio, the round trip;
 * titles say what is compared, which way is better, and the host, commit and
 * date. FERRY_BENCH_GNUPLOT, when set, is the command the script is piped
 * to instead of gnuplot (the tests read the script with it).
 */
void        fb_plot(const fb_opts_t *o, const fb_point_t *pts, int npts);

/* fbench_replot.c: points from an earlier run's CSV; returns how many. */
int         fb_replot(fb_opts_t *o, const char *csv, fb_point_t *pts, int max);

#endif
