#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/config_table.h"
#include "core/log.h"
#include "socket/sock_config.h"

#define FERRY_SOCK_DEFAULT_STREAMS 4
#define FERRY_SOCK_MAX_STREAMS     64
#define FERRY_SOCK_MAX_THREADS     16
/*
 * Up to this many CPUs, NCCL's own thread moves every stream: no helpers.
 * One core per rank: helpers on it 0.75-0.94x (bench/results/
 * 2026-11-29-gpu-onecore, run1). Two cores per rank: no helpers 1.00-1.27x
 * the helpers at every size (run7). Four: helpers ahead of Socket at every
 * size, no helpers 0.59-0.94x of them from 256 KiB up (run8).
 */
#define FERRY_SOCK_NOHELPER_CPUS   2
/*
 * With exactly this many CPUs NCCL's thread still moves every receive, and
 * each send comm gets one helper kept off NCCL's thread's CPU: it takes the
 * core the application's waiting main thread yields. nccl-tests under mpirun
 * with 2 cores per rank: 1.25-1.61x no helpers at 1-256 MiB, level below; at
 * 64 MiB the same helpers on the receive side gave 1.59x, unplaced helpers on
 * both sides 1.05x (bench/results/2026-12-04-gpu-cpu-place). With 4 cores the
 * per-stream helpers stay ahead (this mode 0.56-0.89x them from 1 MiB up).
 */
#define FERRY_SOCK_SENDHELPER_CPUS 2

/*
 * Only where a launcher gave the process its two CPUs: on a host that has
 * just two, every process shares them and there is no core for a helper to
 * take. ferry-bench on the 2-core VM (its two processes on the same two
 * CPUs): 0.45-0.80x raw TCP at 4 connections with the send helpers, 1.07-1.30x
 * without (bench/results/2026-12-04-vm-ferry-bench).
 */
static int ferry_sock_cfg_send_helper_mode(const ferry_sock_config_t *cfg)
{
    return cfg->ncpus == FERRY_SOCK_SENDHELPER_CPUS && cfg->cpus_bound;
}

_Static_assert(FERRY_SOCK_CFG_COUNT <= sizeof(((ferry_sock_config_t *)0)->src) /
                                           sizeof(((ferry_sock_config_t *)0)->src[0]),
               "ferry_sock_config_t.src holds a source per variable");

/* Designated, so rows may name the optional members that follow help. */
#define FERRY_SOCK_CFG_FIELD(_f) .offset = offsetof(ferry_sock_config_t, _f), \
                                 .width = sizeof(((ferry_sock_config_t *)0)->_f)

static const ferry_cfg_choice_t ferry_sock_cfg_places[] = {
    {"auto", -1},
    {"mask", FERRY_SOCK_PLACE_MASK},
    {"away", FERRY_SOCK_PLACE_AWAY},
    {NULL, 0},
};

static const ferry_cfg_var_t ferry_sock_cfg_vars[FERRY_SOCK_CFG_COUNT] = {
    [FERRY_SOCK_CFG_SOCKET_NTHREADS] = {"NCCL_SOCKET_NTHREADS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(socket_nthreads), 0, 1, FERRY_SOCK_MAX_THREADS,
        "helper threads per connection, 1..16"},
    [FERRY_SOCK_CFG_NSOCKS_PERTHREAD] = {"NCCL_NSOCKS_PERTHREAD", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(nsocks_perthread), 0, 1, FERRY_SOCK_MAX_STREAMS,
        "TCP streams per helper thread, 1..64"},
    [FERRY_SOCK_CFG_STREAMS] = {"NCCL_FERRY_STREAMS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(streams), FERRY_SOCK_DEFAULT_STREAMS, 1,
        FERRY_SOCK_MAX_STREAMS, "TCP streams per connection, 1..64"},
    [FERRY_SOCK_CFG_THREADS] = {"NCCL_FERRY_THREADS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(threads), -1, 0, FERRY_SOCK_MAX_THREADS,
        "helper threads per connection, 0..16 (0: NCCL's thread moves the data)"},
    [FERRY_SOCK_CFG_CHUNK_MIN] = {"NCCL_SOCKET_MIN_TASKSIZE", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(chunk_min), 64 << 10, 4 << 10, 64 << 20,
        "smallest chunk per stream, 4K..64M"},
    [FERRY_SOCK_CFG_CHUNK_MAX] = {"NCCL_FERRY_CHUNK_SIZE", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(chunk_max), 1 << 20, 4 << 10, 64 << 20,
        "largest chunk per stream, 4K..64M"},
    [FERRY_SOCK_CFG_SOCKET_SNDBUF] = {"NCCL_SOCKET_SNDBUF", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(sndbuf), -1, -1, INT_MAX,
        "SO_SNDBUF bytes, -1 keeps the kernel default"},
    [FERRY_SOCK_CFG_SOCKET_RCVBUF] = {"NCCL_SOCKET_RCVBUF", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(rcvbuf), -1, -1, INT_MAX,
        "SO_RCVBUF bytes, -1 keeps the kernel default"},
    [FERRY_SOCK_CFG_SPIN_US] = {"NCCL_FERRY_SPIN_US", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(spin_us), -1, -1, 1000000,
        "us helper threads keep polling before they sleep, -1 auto (0)"},
    [FERRY_SOCK_CFG_INJECT_DELAY_US] = {"NCCL_FERRY_INJECT_DELAY_US", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(inject_delay_us), 0, 0, 1000000,
        "test knob: us added to every chunk completion"},
    [FERRY_SOCK_CFG_SPEED_MBPS] = {"NCCL_FERRY_SPEED_MBPS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(speed_mbps), -1, -1, 100000000,
        "device speed reported to NCCL in Mbps, -1 auto"},
    [FERRY_SOCK_CFG_INLINE_MAX] = {"NCCL_FERRY_INLINE_MAX", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(inline_max), 32 << 10, 0, 64 << 20,
        "isends up to this size are sent by NCCL's own thread, 0..64M"},
    [FERRY_SOCK_CFG_NOTSENT_LOWAT] = {"NCCL_FERRY_NOTSENT_LOWAT", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(notsent_lowat), 0, 0, 64 << 20,
        "TCP_NOTSENT_LOWAT bytes on data streams, 0 keeps the kernel's"},
    [FERRY_SOCK_CFG_ASSIST_MAX] = {"NCCL_FERRY_ASSIST_MAX", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(assist_max), -1, -1, 64 << 20,
        "-1 (follow NCCL_FERRY_INLINE_MAX) or a size up to 64M (messages NCCL's "
        "thread moves on stream 0 inside test())"},
    [FERRY_SOCK_CFG_ZEROCOPY] = {"NCCL_FERRY_ZEROCOPY", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(zerocopy), 0, 0, 2,
        "0, 1 or 2 (1: large chunks are sent with MSG_ZEROCOPY, "
        "falling back to copies where the kernel copies anyway; 2: "
        "never fall back, for tests)"},
    [FERRY_SOCK_CFG_ZEROCOPY_MIN] = {"NCCL_FERRY_ZEROCOPY_MIN", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(zerocopy_min), 64 << 10, 4 << 10, 64 << 20,
        "4K..64M (smallest chunk sent with MSG_ZEROCOPY)"},
    [FERRY_SOCK_CFG_SOLO_MAX] = {"NCCL_FERRY_SOLO_MAX", FERRY_CFG_KIND_SIZE,
        FERRY_SOCK_CFG_FIELD(solo_max), 64 << 10, 0, 64 << 20,
        "0..64M (while one comm is all that sends or receives in the "
        "process, NCCL's thread moves messages up to this itself; 0: off)"},
    [FERRY_SOCK_CFG_GPU_STAGING] = {"NCCL_FERRY_GPU_STAGING", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(gpu_staging), 0, 0, 1,
        "0 or 1 (1: the socket backend takes GPU buffers, staged "
        "through pinned host memory by the GPU's copy engines)"},
    [FERRY_SOCK_CFG_EPOLL] = {"NCCL_FERRY_EPOLL", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(epoll), 0, 0, 1,
        "0 or 1 (1: helper threads wait in epoll, their streams "
        "registered once, instead of poll)"},
    [FERRY_SOCK_CFG_SOCKET_TIMEOUT_S] = {"NCCL_FERRY_SOCKET_TIMEOUT_S", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(socket_timeout_s), 30, 0, 3600,
        "0..3600 (s a peer may stay silent or leave sent bytes "
        "unacknowledged before its stream fails: TCP keepalive and "
        "TCP_USER_TIMEOUT on every data stream; 0: kernel defaults)"},
    [FERRY_SOCK_CFG_IGNORE_CPU_AFFINITY] = {"NCCL_IGNORE_CPU_AFFINITY", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(ignore_cpu_affinity), 0, INT_MIN, INT_MAX,
        "an integer (non-zero: streams and threads are chosen for every online CPU, not the "
        "process' affinity mask)"},
    [FERRY_SOCK_CFG_SEND_THREADS] = {"NCCL_FERRY_SEND_THREADS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(send_threads), -1, -1, FERRY_SOCK_MAX_THREADS,
        "-1 (as NCCL_FERRY_THREADS; 1 on 2 CPUs a launcher gave) or helper threads per send "
        "connection, 0..16"},
    [FERRY_SOCK_CFG_RECV_THREADS] = {"NCCL_FERRY_RECV_THREADS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(recv_threads), -1, -1, FERRY_SOCK_MAX_THREADS,
        "-1 (as NCCL_FERRY_THREADS) or helper threads per receive connection, 0..16"},
    [FERRY_SOCK_CFG_HELPER_PLACE] = {"NCCL_FERRY_HELPER_PLACE", FERRY_CFG_KIND_CHOICE,
        FERRY_SOCK_CFG_FIELD(helper_place), -1, 0, 0,
        "auto (away on 2 CPUs a launcher gave, mask otherwise), mask (helper threads run "
        "anywhere in the process' CPU mask, near the NIC where it can) or away (the same, but "
        "off the CPU NCCL's thread last posted from)",
        .choices = ferry_sock_cfg_places},
};

int ferry_sock_config_cpus(int ignore_mask, int *mask_p, int *bound_p)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    int mask = 0;

    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        mask = CPU_COUNT(&set);
    *mask_p = mask;
    if (online < 1)
        online = 1;
    *bound_p = 0;
    if (ignore_mask || mask == 0)
        return online > INT_MAX ? INT_MAX : (int)online;
    *bound_p = mask < online;
    return mask;
}

/* Helper threads per connection for a process on ncpus CPUs, when nobody said. */
static int ferry_sock_cfg_auto_threads(int ncpus, int streams)
{
    if (ncpus <= FERRY_SOCK_NOHELPER_CPUS)
        return 0;
    return streams < FERRY_SOCK_MAX_THREADS ? streams : FERRY_SOCK_MAX_THREADS;
}

/*
 * One side's helpers: NCCL_FERRY_SEND_THREADS / NCCL_FERRY_RECV_THREADS win for
 * their side, otherwise the side follows the threads chosen for both. Never
 * more than the streams.
 */
static void ferry_sock_cfg_derive_side(ferry_sock_config_t *cfg, int id, int *side)
{
    if (*side < 0) {
        *side = cfg->threads;
        /* Two CPUs and nobody chose the helpers: one per send comm (FERRY_SOCK_SENDHELPER_CPUS). */
        if (id == FERRY_SOCK_CFG_SEND_THREADS && ferry_sock_cfg_send_helper_mode(cfg) &&
            cfg->threads == 0 && cfg->src[FERRY_SOCK_CFG_THREADS] == FERRY_CFG_DERIVED)
            *side = 1;
        cfg->src[id] = FERRY_CFG_DERIVED;
    }
    if (*side > cfg->streams)
        *side = cfg->streams;
}

/*
 * Streams and threads: ferry's own variables win; otherwise NCCL's
 * NTHREADS x NSOCKS_PERTHREAD are honoured as NCCL would (product capped at 64
 * by cutting streams per thread); otherwise a default chosen from the CPUs
 * the process has (cfg->ncpus).
 */
static void ferry_sock_cfg_derive_lanes(ferry_sock_config_t *cfg)
{
    int nt = cfg->socket_nthreads, ns = cfg->nsocks_perthread;
    int few = cfg->ncpus <= FERRY_SOCK_NOHELPER_CPUS;

    if (cfg->src[FERRY_SOCK_CFG_STREAMS] == FERRY_CFG_DEFAULT && (nt > 0 || ns > 0)) {
        if (nt == 0)
            nt = cfg->threads > 0 ? cfg->threads : FERRY_SOCK_DEFAULT_STREAMS;
        if (ns == 0)
            ns = 1;
        if (nt * ns > FERRY_SOCK_MAX_STREAMS)
            ns = FERRY_SOCK_MAX_STREAMS / nt;
        cfg->streams = nt * ns;
        /* NCCL_NSOCKS_PERTHREAD alone asks for sockets, not for helpers on too few CPUs. */
        if (cfg->src[FERRY_SOCK_CFG_THREADS] == FERRY_CFG_DEFAULT &&
            !(few && cfg->socket_nthreads == 0)) {
            cfg->threads = nt;
            cfg->src[FERRY_SOCK_CFG_THREADS] = FERRY_CFG_DERIVED;
        }
        cfg->src[FERRY_SOCK_CFG_STREAMS] = FERRY_CFG_DERIVED;
    }
    if (cfg->threads < 0) {
        /*
         * A process on one or two CPUs (mpirun binds each rank to a core by
         * default, or to PE=N) has no core to spare for helper threads:
         * NCCL's own thread then moves every stream, as NCCL's socket
         * transport does (FERRY_SOCK_NOHELPER_CPUS for the measurements).
         */
        cfg->threads = ferry_sock_cfg_auto_threads(cfg->ncpus, cfg->streams);
        cfg->src[FERRY_SOCK_CFG_THREADS] = FERRY_CFG_DERIVED;
    }
    /*
     * NCCL's thread moving every stream itself gains nothing from several:
     * each is one more socket to poll per call and one more buffer to keep
     * warm. nccl-tests under mpirun (one core per rank, 2 channels): one
     * stream 1.00-1.12x four at every size, 1.06-1.10x from 4 MiB up
     * (bench/results/2026-11-29-gpu-onecore, run2). The same for one side's
     * single helper (NCCL_FERRY_SEND_THREADS / RECV_THREADS = 1): one thread
     * per side moves every stream of it.
     */
    if (cfg->threads == 0 && cfg->send_threads <= 1 && cfg->recv_threads <= 1 &&
        cfg->src[FERRY_SOCK_CFG_STREAMS] == FERRY_CFG_DEFAULT) {
        cfg->streams = 1;
        cfg->src[FERRY_SOCK_CFG_STREAMS] = FERRY_CFG_DERIVED;
    }
    if (cfg->threads > cfg->streams)
        cfg->threads = cfg->streams;
    ferry_sock_cfg_derive_side(cfg, FERRY_SOCK_CFG_SEND_THREADS, &cfg->send_threads);
    ferry_sock_cfg_derive_side(cfg, FERRY_SOCK_CFG_RECV_THREADS, &cfg->recv_threads);
    if (cfg->helper_place < 0) {
        cfg->helper_place = ferry_sock_cfg_send_helper_mode(cfg) ? FERRY_SOCK_PLACE_AWAY
                                                                  : FERRY_SOCK_PLACE_MASK;
        cfg->src[FERRY_SOCK_CFG_HELPER_PLACE] = FERRY_CFG_DERIVED;
    }
    if (cfg->ncpus == 1 && (cfg->send_threads > 0 || cfg->recv_threads > 0))
        FERRY_WARN("%d helper threads per connection (%s) in a process bound to one CPU: they "
                   "take turns with NCCL's own thread for that CPU (0.75-0.94x measured under "
                   "mpirun); unset it, or give each rank more CPUs (mpirun --bind-to none, or "
                   "--map-by slot:PE=N)",
                   cfg->send_threads > cfg->recv_threads ? cfg->send_threads : cfg->recv_threads,
                   cfg->src[FERRY_SOCK_CFG_THREADS] == FERRY_CFG_ENV ? "NCCL_FERRY_THREADS"
                   : cfg->src[FERRY_SOCK_CFG_SOCKET_NTHREADS] == FERRY_CFG_ENV
                       ? "NCCL_SOCKET_NTHREADS"
                   : cfg->src[FERRY_SOCK_CFG_SEND_THREADS] == FERRY_CFG_ENV
                       ? "NCCL_FERRY_SEND_THREADS"
                       : "NCCL_FERRY_RECV_THREADS");
}

/*
 * "1 stream, no helper threads (...)" / "4 streams, 4 helper threads" /
 * "1 stream, 1 helper thread for sends and 0 for receives".
 */
static void ferry_sock_cfg_lanes_words(int streams, int send, int recv, char *buf, size_t len)
{
    const char *s = streams == 1 ? "" : "s";

    if (send == 0 && recv == 0)
        snprintf(buf, len, "%d stream%s, no helper threads (NCCL's thread moves every byte)",
                 streams, s);
    else if (send == recv)
        snprintf(buf, len, "%d stream%s, %d helper thread%s", streams, s, send,
                 send == 1 ? "" : "s");
    else
        snprintf(buf, len, "%d stream%s, %d helper thread%s for sends and %d for receives",
                 streams, s, send, send == 1 ? "" : "s", recv);
}

/* Which variable set streams or threads, for the line; NULL when the CPUs chose both. */
static const char *ferry_sock_cfg_lanes_setter(const ferry_sock_config_t *cfg)
{
    int send = cfg->src[FERRY_SOCK_CFG_SEND_THREADS] == FERRY_CFG_ENV;
    int recv = cfg->src[FERRY_SOCK_CFG_RECV_THREADS] == FERRY_CFG_ENV;

    if (send || recv)
        return send && recv ? "NCCL_FERRY_SEND_THREADS and NCCL_FERRY_RECV_THREADS"
               : send       ? "NCCL_FERRY_SEND_THREADS"
                            : "NCCL_FERRY_RECV_THREADS";
    if (cfg->src[FERRY_SOCK_CFG_THREADS] == FERRY_CFG_ENV)
        return cfg->src[FERRY_SOCK_CFG_STREAMS] == FERRY_CFG_ENV
                   ? "NCCL_FERRY_STREAMS and NCCL_FERRY_THREADS"
                   : "NCCL_FERRY_THREADS";
    if (cfg->src[FERRY_SOCK_CFG_STREAMS] == FERRY_CFG_ENV)
        return "NCCL_FERRY_STREAMS";
    if (cfg->src[FERRY_SOCK_CFG_SOCKET_NTHREADS] == FERRY_CFG_ENV)
        return cfg->src[FERRY_SOCK_CFG_NSOCKS_PERTHREAD] == FERRY_CFG_ENV
                   ? "NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD"
                   : "NCCL_SOCKET_NTHREADS";
    if (cfg->src[FERRY_SOCK_CFG_NSOCKS_PERTHREAD] == FERRY_CFG_ENV)
        return "NCCL_NSOCKS_PERTHREAD";
    return NULL;
}

void ferry_sock_config_lanes_line(const ferry_sock_config_t *cfg, char *buf, size_t len)
{
    const char *setter = ferry_sock_cfg_lanes_setter(cfg);
    int auto_threads = ferry_sock_cfg_auto_threads(cfg->ncpus, FERRY_SOCK_DEFAULT_STREAMS);
    int auto_send = ferry_sock_cfg_send_helper_mode(cfg) ? 1 : auto_threads;
    const char *why;
    char chosen[112], dflt[112], where[96];

    if (cfg->ignore_cpu_affinity)
        snprintf(where, sizeof(where), "%d online CPUs (NCCL_IGNORE_CPU_AFFINITY=%d; the "
                 "affinity mask holds %d)", cfg->ncpus, cfg->ignore_cpu_affinity, cfg->ncpus_mask);
    else
        snprintf(where, sizeof(where), "%d CPU%s in the affinity mask", cfg->ncpus,
                 cfg->ncpus == 1 ? "" : "s");
    ferry_sock_cfg_lanes_words(cfg->streams, cfg->send_threads, cfg->recv_threads, chosen,
                               sizeof(chosen));
    ferry_sock_cfg_lanes_words(auto_threads == 0 ? 1 : FERRY_SOCK_DEFAULT_STREAMS, auto_send,
                               auto_threads, dflt, sizeof(dflt));
    if (setter != NULL) {
        snprintf(buf, len, "socket backend: %s per connection, set by %s (explicit settings win; "
                 "the default for %s would be %s)", chosen, setter, where, dflt);
        return;
    }
    if (ferry_sock_cfg_send_helper_mode(cfg))
        why = "2 CPUs given to this process: NCCL's thread moves the receives, and each send "
              "comm's helper runs off that thread's CPU, on the core the application's waiting "
              "thread yields";
    else if (cfg->ncpus == FERRY_SOCK_SENDHELPER_CPUS)
        why = "2 CPUs that are the whole host's, shared with its other processes: no core for "
              "helpers";
    else if (auto_threads == 0)
        why = "1 CPU leaves no core for helpers: measured faster without them under mpirun";
    else
        why = "from 3 CPUs, helpers copy beside NCCL's thread";
    snprintf(buf, len, "socket backend: %s per connection, chosen for %s (%s)", chosen, where, why);
}

/*
 * Spinning before sleeping was measured on the GPU machine (bench/results/
 * 2026-11-29-gpu-tuning, runs 2-8): once NCCL's thread sends small messages
 * itself and reads them inside test(), a spinning worker saves nothing at
 * 4 KiB and costs 9-19 % at 256 KiB-1 MiB, where NCCL opens many comms and
 * the spinners take the cores the copies need. Off unless asked for.
 */
static void ferry_sock_cfg_derive_spin(ferry_sock_config_t *cfg)
{
    if (cfg->spin_us >= 0)
        return;
    cfg->spin_us = 0;
    cfg->src[FERRY_SOCK_CFG_SPIN_US] = FERRY_CFG_DERIVED;
}

static ferry_status_t ferry_sock_config_load_cpus(ferry_sock_config_t *cfg, int ncpus, int bound);

ferry_status_t ferry_sock_config_load(ferry_sock_config_t *cfg)
{
    return ferry_sock_config_load_cpus(cfg, 0, 0);
}

ferry_status_t ferry_sock_config_load_ncpus(ferry_sock_config_t *cfg, int ncpus)
{
    return ferry_sock_config_load_cpus(cfg, ncpus, 1);
}

ferry_status_t ferry_sock_config_load_host_cpus(ferry_sock_config_t *cfg, int ncpus)
{
    return ferry_sock_config_load_cpus(cfg, ncpus, 0);
}

/* ncpus > 0: injected (tests), bound or not as said; 0: read from the process. */
static ferry_status_t ferry_sock_config_load_cpus(ferry_sock_config_t *cfg, int ncpus, int bound)
{
    ferry_status_t status;

    memset(cfg, 0, sizeof(*cfg));
    status = ferry_cfg_table_load(ferry_sock_cfg_vars, FERRY_SOCK_CFG_COUNT, cfg, cfg->src);
    if (status != FERRY_OK)
        return status;
    if (cfg->chunk_min > cfg->chunk_max) {
        FERRY_WARN("NCCL_SOCKET_MIN_TASKSIZE=%zu is larger than NCCL_FERRY_CHUNK_SIZE=%zu; "
                   "make the minimum no larger than the maximum", cfg->chunk_min, cfg->chunk_max);
        return FERRY_ERR_USAGE;
    }
    if (ncpus > 0) {
        cfg->ncpus = ncpus;
        cfg->ncpus_mask = ncpus;
        cfg->cpus_bound = bound;
    } else {
        cfg->ncpus = ferry_sock_config_cpus(cfg->ignore_cpu_affinity != 0, &cfg->ncpus_mask,
                                            &cfg->cpus_bound);
    }
    ferry_sock_cfg_derive_lanes(cfg);
    ferry_sock_cfg_derive_spin(cfg);
    return FERRY_OK;
}

/*
 * The words the effective-config line has always used for these variables
 * (streams=, chunk=min..max, ...), appended after the core's.
 * NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD show through what they
 * derive: streams and threads.
 */
void ferry_sock_config_format(const ferry_sock_config_t *cfg, char *buf, size_t len)
{
    size_t off = strlen(buf);

    if (off + 1 >= len)
        return;
    snprintf(buf + off, len - off,
             " streams=%d(%s) threads=%d(%s) chunk=%zu..%zu(%s) sndbuf=%d(%s) rcvbuf=%d(%s) "
             "spin=%dus(%s) inject_delay=%dus(%s) speed=%dMbps(%s) inline_max=%zu(%s) "
             "assist_max=%lld(%s) notsent_lowat=%d(%s) zerocopy=%d/%zu(%s) solo_max=%zu(%s) "
             "gpu_staging=%d(%s) epoll=%d(%s) socket_timeout=%ds(%s) ignore_cpu_affinity=%d(%s) "
             "send_threads=%d(%s) recv_threads=%d(%s) helper_place=%s(%s) cpus=%d(derived)",
             cfg->streams, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_STREAMS]), cfg->threads,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_THREADS]), cfg->chunk_min, cfg->chunk_max,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_CHUNK_MAX] != FERRY_CFG_DEFAULT
                                    ? cfg->src[FERRY_SOCK_CFG_CHUNK_MAX]
                                    : cfg->src[FERRY_SOCK_CFG_CHUNK_MIN]),
             cfg->sndbuf, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOCKET_SNDBUF]), cfg->rcvbuf,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOCKET_RCVBUF]), cfg->spin_us,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SPIN_US]), cfg->inject_delay_us,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_INJECT_DELAY_US]), cfg->speed_mbps,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SPEED_MBPS]), cfg->inline_max,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_INLINE_MAX]), cfg->assist_max,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_ASSIST_MAX]), cfg->notsent_lowat,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_NOTSENT_LOWAT]), cfg->zerocopy,
             cfg->zerocopy_min, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_ZEROCOPY]),
             cfg->solo_max, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOLO_MAX]),
             cfg->gpu_staging, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_GPU_STAGING]),
             cfg->epoll, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_EPOLL]),
             cfg->socket_timeout_s, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOCKET_TIMEOUT_S]),
             cfg->ignore_cpu_affinity,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_IGNORE_CPU_AFFINITY]), cfg->send_threads,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SEND_THREADS]), cfg->recv_threads,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_RECV_THREADS]),
             cfg->helper_place == FERRY_SOCK_PLACE_AWAY ? "away" : "mask",
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_HELPER_PLACE]), cfg->ncpus);
}
