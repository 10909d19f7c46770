/*
 * The socket backend's variables (sock_config.h): one table row per variable,
 * its parse with the source of every value, and the words the
 * effective-config line shows for them. Streams and threads are then derived
 * from the CPU budget in sock_config_cpus.c.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/config_table.h"
#include "core/local_ranks.h"
#include "core/log.h"
#include "proxy/pool.h"
#include "socket/sock_config.h"

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
    [FERRY_SOCK_CFG_RESCUE_US] = {"NCCL_FERRY_RESCUE_US", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(rescue_us), 100, 0, 1000000,
        "0..1000000 (test() moves a send of at most 256 KiB that no helper "
        "thread has taken this many us after its post; 0: off)"},
    [FERRY_SOCK_CFG_GPU_STAGING] = {"NCCL_FERRY_GPU_STAGING", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(gpu_staging), 0, 0, 1,
        "0 or 1 (1: the socket backend takes GPU buffers, staged "
        "through pinned host memory by the GPU's copy engines)"},
    [FERRY_SOCK_CFG_EPOLL] = {"NCCL_FERRY_EPOLL", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(epoll), 0, 0, 1,
        "0 or 1, no effect (kept so job scripts that set it still start): the helper pool "
        "always waits in epoll, each stream registered once"},
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
    [FERRY_SOCK_CFG_POOL_THREADS] = {"NCCL_FERRY_POOL_THREADS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(pool_threads), -1, -1, FERRY_PX_POOL_MAX_THREADS,
        "-1 (auto: the largest of NCCL_FERRY_THREADS, NCCL_SOCKET_NTHREADS, "
        "NCCL_FERRY_SEND_THREADS and NCCL_FERRY_RECV_THREADS where one is set, else from the CPU "
        "budget) or 1..64: helper threads of the process' one pool, which serves every "
        "connection's streams; the per-connection settings then say over how many of them one "
        "connection's streams spread"},
    [FERRY_SOCK_CFG_LOCAL_RANKS] = {"NCCL_FERRY_LOCAL_RANKS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(local_ranks_env), 0, 0, FERRY_LOCAL_RANKS_MAX,
        "0..4096 (ranks of the job on this node, sharing its CPUs; 0: as the launcher's "
        "variables say: OMPI_COMM_WORLD_LOCAL_SIZE, MV2_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, "
        "LOCAL_WORLD_SIZE, SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, "
        "SLURM_NTASKS_PER_NODE)"},
    [FERRY_SOCK_CFG_CALLER_RECV_BURST] = {"NCCL_FERRY_CALLER_RECV_CHUNKS", FERRY_CFG_KIND_INT,
        FERRY_SOCK_CFG_FIELD(caller_recv_burst), 1, 1, 16,
        "chunks NCCL's thread reads per call on a receive stream, 1..16"},
};

/*
 * Spinning before sleeping: once NCCL's thread sends small messages itself
 * and reads them inside test(), a spinning pool thread has no wake-up left to
 * save on small messages, and at mid sizes, where NCCL opens many comms, the
 * spinners take the cores the copies need. Off unless asked for.
 */
static void ferry_sock_cfg_derive_spin(ferry_sock_config_t *cfg)
{
    if (cfg->spin_us >= 0)
        return;
    cfg->spin_us = 0;
    cfg->src[FERRY_SOCK_CFG_SPIN_US] = FERRY_CFG_DERIVED;
}

static const ferry_cpu_quota_t ferry_sock_no_quota;

ferry_status_t ferry_sock_config_load(ferry_sock_config_t *cfg)
{
    return ferry_sock_config_load_quota(cfg, 0, 0, NULL);
}

ferry_status_t ferry_sock_config_load_ncpus(ferry_sock_config_t *cfg, int ncpus)
{
    return ferry_sock_config_load_quota(cfg, ncpus, 1, &ferry_sock_no_quota);
}

ferry_status_t ferry_sock_config_load_host_cpus(ferry_sock_config_t *cfg, int ncpus)
{
    return ferry_sock_config_load_quota(cfg, ncpus, 0, &ferry_sock_no_quota);
}

/*
 * ncpus > 0: injected (tests), bound or not as said; 0: the mask (or the
 * online CPUs) read from the process. quota NULL: the process' own.
 */
ferry_status_t ferry_sock_config_load_quota(ferry_sock_config_t *cfg, int ncpus, int bound,
                                            const ferry_cpu_quota_t *quota)
{
    /* A bound mask on a node of unknown size is the rank's own (online 0). */
    return ferry_sock_config_load_shape(cfg, ncpus, bound || ncpus <= 0 ? 0 : ncpus, quota);
}

static ferry_status_t ferry_sock_config_read_shape(ferry_sock_config_t *cfg, int ncpus,
                                                   int online, const ferry_cpu_quota_t *quota);

ferry_status_t ferry_sock_config_load_shape(ferry_sock_config_t *cfg, int ncpus, int online,
                                            const ferry_cpu_quota_t *quota)
{
    ferry_status_t status = ferry_sock_config_read_shape(cfg, ncpus, online, quota);

    if (status == FERRY_OK)
        ferry_sock_config_derive(cfg);
    return status;
}

ferry_status_t ferry_sock_config_load_raw(ferry_sock_config_t *cfg)
{
    return ferry_sock_config_read_shape(cfg, 0, 0, NULL);
}

void ferry_sock_config_derive(ferry_sock_config_t *cfg)
{
    ferry_sock_config_apply_quota(cfg, &cfg->quota);
    ferry_sock_config_derive_lanes(cfg);
    ferry_sock_config_derive_pool(cfg);
    ferry_sock_cfg_derive_spin(cfg);
}

/* The variables, the CPUs, the local ranks and the quota: what the derivation starts from. */
static ferry_status_t ferry_sock_config_read_shape(ferry_sock_config_t *cfg, int ncpus,
                                                   int online, const ferry_cpu_quota_t *quota)
{
    ferry_cpu_quota_t own;
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
        cfg->ncpus_online = online;
        cfg->cpus_bound = online == 0 || ncpus < online;
    } else {
        cfg->ncpus = ferry_sock_config_cpus(cfg->ignore_cpu_affinity != 0, &cfg->ncpus_mask,
                                            &cfg->cpus_bound);
        cfg->ncpus_online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    {
        ferry_local_ranks_t lr;

        (void)ferry_local_ranks_read(cfg->local_ranks_env, &lr);
        cfg->local_ranks = lr.count;
        cfg->local_ranks_src = lr.source;
        cfg->local_index = lr.index;
    }
    if (quota == NULL) {
        (void)ferry_cpu_quota_read("", &own);
        quota = &own;
    }
    cfg->quota = *quota;
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
             "spin=%dus(%s) inject_delay=%dus(%s) caller_recv_chunks=%d(%s) speed=%dMbps(%s) "
             "inline_max=%zu(%s) assist_max=%lld(%s) notsent_lowat=%d(%s) zerocopy=%d/%zu(%s) "
             "solo_max=%zu(%s) rescue=%dus(%s) gpu_staging=%d(%s) epoll=%d(%s) "
             "socket_timeout=%ds(%s) ignore_cpu_affinity=%d(%s) send_threads=%d(%s) "
             "recv_threads=%d(%s) helper_place=%s(%s) pool_threads=%d(%s) "
             "cpus=%d(derived) local_ranks=%d%s%s(%s)",
             cfg->streams, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_STREAMS]), cfg->threads,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_THREADS]), cfg->chunk_min, cfg->chunk_max,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_CHUNK_MAX] != FERRY_CFG_DEFAULT
                                    ? cfg->src[FERRY_SOCK_CFG_CHUNK_MAX]
                                    : cfg->src[FERRY_SOCK_CFG_CHUNK_MIN]),
             cfg->sndbuf, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOCKET_SNDBUF]), cfg->rcvbuf,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOCKET_RCVBUF]), cfg->spin_us,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SPIN_US]), cfg->inject_delay_us,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_INJECT_DELAY_US]), cfg->caller_recv_burst,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_CALLER_RECV_BURST]), cfg->speed_mbps,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SPEED_MBPS]), cfg->inline_max,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_INLINE_MAX]), cfg->assist_max,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_ASSIST_MAX]), cfg->notsent_lowat,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_NOTSENT_LOWAT]), cfg->zerocopy,
             cfg->zerocopy_min, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_ZEROCOPY]),
             cfg->solo_max, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOLO_MAX]),
             cfg->rescue_us, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_RESCUE_US]),
             cfg->gpu_staging, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_GPU_STAGING]),
             cfg->epoll, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_EPOLL]),
             cfg->socket_timeout_s, ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SOCKET_TIMEOUT_S]),
             cfg->ignore_cpu_affinity,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_IGNORE_CPU_AFFINITY]), cfg->send_threads,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_SEND_THREADS]), cfg->recv_threads,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_RECV_THREADS]),
             cfg->helper_place == FERRY_SOCK_PLACE_AWAY ? "away" : "mask",
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_HELPER_PLACE]), cfg->pool_threads,
             ferry_cfg_src_name(cfg->src[FERRY_SOCK_CFG_POOL_THREADS]), cfg->ncpus,
             cfg->local_ranks,
             /* A launcher's count names its variable: local_ranks=8:OMPI_COMM_WORLD_LOCAL_SIZE. */
             cfg->local_ranks_src != NULL && cfg->src[FERRY_SOCK_CFG_LOCAL_RANKS] != FERRY_CFG_ENV
                 ? ":" : "",
             cfg->local_ranks_src != NULL && cfg->src[FERRY_SOCK_CFG_LOCAL_RANKS] != FERRY_CFG_ENV
                 ? cfg->local_ranks_src : "",
             cfg->src[FERRY_SOCK_CFG_LOCAL_RANKS] == FERRY_CFG_ENV ? "env"
             : cfg->local_ranks_src != NULL                         ? "derived"
                                                                    : "default");
}
