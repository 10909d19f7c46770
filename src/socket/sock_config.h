/*
 * The socket backend's variables: TCP streams and helper threads per
 * connection (ferry's NCCL_FERRY_STREAMS/THREADS, or NCCL's
 * NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD), chunking, socket options and
 * the data path's knobs. Parsed once by the socket backend's init
 * (sock_config.c; the CPU-based choice of streams and threads in
 * sock_config_cpus.c), with the source of every value for the effective-config
 * line. What both backends read (interface, family, connect retries, hello
 * timeout, dump signal, stall warning, tuner) stays in core/config.h.
 */
#ifndef FERRY_SOCK_CONFIG_H
#define FERRY_SOCK_CONFIG_H

#include <stddef.h>

#include "core/config.h"
#include "core/cpu_quota.h"
#include "core/cpu_share.h"

#define FERRY_SOCK_DEFAULT_STREAMS 4
#define FERRY_SOCK_MAX_STREAMS     64
#define FERRY_SOCK_MAX_THREADS     16
/*
 * Streams the process' connections share before each is cut below the
 * default: by the comms already open at listen (sock_config_streams.c), or
 * by NCCL's flows x peers with NCCL_FERRY_NET_HINTS=1 (sock_hints.c).
 */
#define FERRY_SOCK_STREAM_BUDGET   FERRY_SOCK_MAX_STREAMS

typedef struct ferry_sock_config {
    int    socket_nthreads;        /* NCCL_SOCKET_NTHREADS as given, 0 = unset. */
    int    nsocks_perthread;       /* NCCL_NSOCKS_PERTHREAD as given, 0 = unset. */
    int    streams;                /* Effective TCP streams per connection (1..64). */
    int    threads;                /* Effective helper threads per comm (0..streams). */
    size_t chunk_min;              /* Smallest chunk a message is cut into. */
    size_t chunk_max;              /* Largest chunk. */
    int    sndbuf;                 /* SO_SNDBUF, -1 = kernel default. */
    int    rcvbuf;                 /* SO_RCVBUF, -1 = kernel default. */
    int    spin_us;                /* Helper threads poll this long before sleeping; -1 = auto. */
    int    inject_delay_us;        /* Test knob: delay every chunk completion by this much. */
    int    caller_recv_burst;      /* Chunks NCCL's thread reads per receive-lane call. */
    int    speed_mbps;             /* Reported device speed; -1: sysfs, or a default per kind. */
    size_t inline_max;             /* isends up to this size leave from NCCL's thread itself. */
    int    notsent_lowat;          /* TCP_NOTSENT_LOWAT on data streams, 0 = kernel default. */
    long long assist_max;          /* test() moves lane 0 for messages up to this; -1: inline_max. */
    /* 1: chunks of zerocopy_min bytes or more go MSG_ZEROCOPY; 2: even where the kernel copies. */
    int    zerocopy;
    size_t zerocopy_min;
    size_t solo_max;               /* A comm alone in the process: NCCL's thread moves up to this. */
    int    rescue_us;              /* test() moves a small send no helper took this long; 0 off. */
    int    gpu_staging;            /* 1: the socket backend takes GPU buffers (socket/sock_gpu.h). */
    int    epoll;                  /* Accepted, no effect: the helper pool always waits in epoll. */
    /* Keepalive + TCP_USER_TIMEOUT on data streams: a silent peer fails after this; 0 off. */
    int    socket_timeout_s;
    int    ignore_cpu_affinity;    /* NCCL_IGNORE_CPU_AFFINITY: non-zero counts every online CPU. */
    int    send_threads;           /* Effective helper threads per send comm (0..streams). */
    int    recv_threads;           /* Effective helper threads per receive comm (0..streams). */
    int    helper_place;           /* FERRY_SOCK_PLACE_*: where helper threads may run. */
    int    pool_threads;           /* Helper threads of the process' pool (sock_config_pool.c). */
    int    ncpus;                  /* CPUs the defaults were chosen for: the rank's share. */
    int    ncpus_mask;             /* CPUs in the process' affinity mask, 0 when unread. */
    /*
     * The cgroup CPU quota over the process, if any (quota_us 0: none). Where
     * the whole CPUs it pays for are fewer than the mask (or the online
     * CPUs) holds, they are the budget: ncpus.
     */
    ferry_cpu_quota_t quota;
    int    ncpus_given;            /* The mask's (or online) count before the quota capped it. */
    /*
     * 1 when the mask holds fewer CPUs than the host has online: a launcher
     * (mpirun, Slurm, taskset) gave the process these CPUs, and no other
     * local rank of the job runs on them (cpu_sharers 1). 0 when they are
     * the whole host's, shared with every other process on it, when local
     * ranks share them, or when a cgroup CPU limit caps them (time, not
     * cores of its own).
     */
    int    cpus_bound;
    int    local_ranks_env;        /* NCCL_FERRY_LOCAL_RANKS as given, 0 = unset (launchers say). */
    int    local_ranks;            /* Ranks of the job on this node, 0 when no launcher said. */
    const char *local_ranks_src;   /* The variable that said (static), NULL when none. */
    int    ncpus_online;           /* CPUs online on the node, 0 when not known (tests). */
    /*
     * Local ranks estimated to run on this rank's CPUs (core/cpu_share.h),
     * or counted from their masks (cpu_sharers_known), itself included:
     * ncpus is the CPUs (the mask's, or the quota's where fewer) divided by
     * them. 1: the rank's own.
     */
    int    cpu_sharers;
    /*
     * Input of the derivation: the local ranks whose affinity masks were
     * compared on the job's board (core/mask_board.h, socket/sock_board.h)
     * and overlap this rank's, itself included; 0 while cpu_sharers is the
     * estimate.
     */
    int    cpu_sharers_known;
    int    local_index;            /* This rank's place among the local ranks, -1 when unknown. */
    ferry_cfg_src_t src[32];       /* Source of each value, indexed as the table in sock_config.c. */
} ferry_sock_config_t;

/* NCCL_FERRY_HELPER_PLACE. */
enum {
    FERRY_SOCK_PLACE_MASK, /* Anywhere in the process' mask (near the NIC where it can). */
    FERRY_SOCK_PLACE_AWAY  /* The same, but off the CPU NCCL's thread posts from. */
};

/* Index of each variable in sock_config.c's table; also indexes ferry_sock_config_t.src. */
typedef enum ferry_sock_cfg_id {
    FERRY_SOCK_CFG_SOCKET_NTHREADS,
    FERRY_SOCK_CFG_NSOCKS_PERTHREAD,
    FERRY_SOCK_CFG_STREAMS,
    FERRY_SOCK_CFG_THREADS,
    FERRY_SOCK_CFG_CHUNK_MIN,
    FERRY_SOCK_CFG_CHUNK_MAX,
    FERRY_SOCK_CFG_SOCKET_SNDBUF,
    FERRY_SOCK_CFG_SOCKET_RCVBUF,
    FERRY_SOCK_CFG_SPIN_US,
    FERRY_SOCK_CFG_INJECT_DELAY_US,
    FERRY_SOCK_CFG_SPEED_MBPS,
    FERRY_SOCK_CFG_INLINE_MAX,
    FERRY_SOCK_CFG_NOTSENT_LOWAT,
    FERRY_SOCK_CFG_ASSIST_MAX,
    FERRY_SOCK_CFG_ZEROCOPY,
    FERRY_SOCK_CFG_ZEROCOPY_MIN,
    FERRY_SOCK_CFG_SOLO_MAX,
    FERRY_SOCK_CFG_RESCUE_US,
    FERRY_SOCK_CFG_GPU_STAGING,
    FERRY_SOCK_CFG_EPOLL,
    FERRY_SOCK_CFG_SOCKET_TIMEOUT_S,
    FERRY_SOCK_CFG_IGNORE_CPU_AFFINITY,
    FERRY_SOCK_CFG_SEND_THREADS,
    FERRY_SOCK_CFG_RECV_THREADS,
    FERRY_SOCK_CFG_HELPER_PLACE,
    FERRY_SOCK_CFG_POOL_THREADS,
    FERRY_SOCK_CFG_LOCAL_RANKS,
    FERRY_SOCK_CFG_CALLER_RECV_BURST,
    FERRY_SOCK_CFG_COUNT
} ferry_sock_cfg_id_t;

/*
 * Parse the environment and derive streams, threads and spinning. On bad
 * input: WARN naming variable, value and what is accepted, FERRY_ERR_USAGE.
 * Only the socket backend's init calls it (and ferry-bench, for its raw TCP
 * side): with the ib backend these variables are never parsed.
 */
ferry_status_t ferry_sock_config_load(ferry_sock_config_t *cfg);
/*
 * The same with the CPU count injected (tests; > 0), instead of the
 * affinity mask (or every online CPU with NCCL_IGNORE_CPU_AFFINITY=1): a
 * mask of ncpus CPUs on a larger host (cpus_bound).
 */
ferry_status_t ferry_sock_config_load_ncpus(ferry_sock_config_t *cfg, int ncpus);
/* The same for a mask that holds all of a host's ncpus CPUs (not bound). */
ferry_status_t ferry_sock_config_load_host_cpus(ferry_sock_config_t *cfg, int ncpus);
/*
 * The same for a mask of ncpus CPUs (bound or not as said) under a cgroup
 * CPU quota (tests). ncpus 0 reads the mask, quota NULL the process' own
 * quota: ferry_sock_config_load() is (0, 0, NULL).
 */
ferry_status_t ferry_sock_config_load_quota(ferry_sock_config_t *cfg, int ncpus, int bound,
                                            const ferry_cpu_quota_t *quota);
/*
 * The same for a mask of mask CPUs on a node of online CPUs (tests; both > 0),
 * the local ranks read from the environment as always: what a rank of an
 * 8-rank job derives, bound or not.
 */
ferry_status_t ferry_sock_config_load_shape(ferry_sock_config_t *cfg, int mask, int online,
                                            const ferry_cpu_quota_t *quota);
/*
 * The two halves of ferry_sock_config_load: the variables, CPUs, local ranks
 * and quota as read (nothing derived yet: the board's check derives again
 * from them, socket/sock_board.h), then the budget, streams, threads, pool
 * and spinning derived from them (cfg->cpu_sharers_known as the caller set
 * it).
 */
ferry_status_t ferry_sock_config_load_raw(ferry_sock_config_t *cfg);
void ferry_sock_config_derive(ferry_sock_config_t *cfg);
/*
 * The CPUs the process may run on: the affinity mask, or with ignore_mask
 * every online CPU (NCCL_IGNORE_CPU_AFFINITY=1). *mask_p gets the mask's
 * count (0 when it cannot be read), *bound_p whether the mask holds fewer
 * CPUs than are online (always 0 with ignore_mask).
 */
int ferry_sock_config_cpus(int ignore_mask, int *mask_p, int *bound_p);
/*
 * The CPU budget from the mask's count (cfg->ncpus on entry, ncpus_online,
 * cpus_bound as the mask gave them), a cgroup CPU quota (quota_us 0: none)
 * and the local ranks (cfg->local_ranks): fewer whole CPUs of time than the
 * mask holds cap it (time shared by every thread, not cores of the process'
 * own: cpus_bound 0), and the local ranks that run on the same CPUs divide
 * it (core/cpu_share.h; cpus_bound 1 only where the masks are disjoint).
 */
void ferry_sock_config_apply_quota(ferry_sock_config_t *cfg, const ferry_cpu_quota_t *quota);
/*
 * Streams per connection for a listen() while live_conns socket comms and
 * listen comms are open in the process (sock_config_streams.c): an explicit
 * NCCL_FERRY_STREAMS, or NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, wins;
 * otherwise cfg->streams for the first few connections and fewer for many,
 * so that the sockets a process holds grow no faster than its connections.
 */
int ferry_sock_config_streams_for(const ferry_sock_config_t *cfg, int live_conns);
/*
 * The one INFO line saying what streams and threads were chosen and why:
 * the CPU count and where it came from, the CPU-based default, and which
 * explicit variable overrode it.
 */
void ferry_sock_config_lanes_line(const ferry_sock_config_t *cfg, char *buf, size_t len);
/*
 * The INFO hint for a rank that a launcher bound to 2 CPUs beside other
 * local ranks: the tuner setting that runs small rings on one channel there
 * (NCCL_FERRY_TUNER_STEP_BYTES), which ferry cannot switch on by itself
 * because every rank of a collective must choose its channel count alike.
 * Returns 1 with the line in buf, or 0 and an empty buf where it does not
 * apply: another budget, no other local rank, the tuner not consulted
 * (tuner_on 0), or the setting given (to any value, 0 included).
 */
int ferry_sock_config_step_hint(const ferry_sock_config_t *cfg, const ferry_config_t *core,
                                int tuner_on, char *buf, size_t len);
/*
 * Streams, threads per side and helper placement from the variables and the
 * CPU budget in cfg (ncpus, cpus_bound): sock_config_cpus.c, called by the
 * loads above once the table is parsed.
 */
void ferry_sock_config_derive_lanes(ferry_sock_config_t *cfg);
/* The helper pool's size from NCCL_FERRY_POOL_THREADS, the per-connection settings or the budget. */
void ferry_sock_config_derive_pool(ferry_sock_config_t *cfg);
/* "; a pool of 3 helper threads serves every connection (...)" appended to the lanes line. */
void ferry_sock_config_pool_words(const ferry_sock_config_t *cfg, char *buf, size_t len);
/* " streams=4(default) threads=4(derived) ..." appended to the effective-config line. */
void ferry_sock_config_format(const ferry_sock_config_t *cfg, char *buf, size_t len);

#endif
