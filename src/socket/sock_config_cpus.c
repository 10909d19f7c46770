/*
 * Streams and helper threads from the CPUs the process has (sock_config.h):
 * the CPU count and whether a launcher gave them, the defaults each budget
 * gets, the per-side helpers, and the INFO line that says what was chosen
 * and why. The measurements behind each choice are in the comments below and
 * in docs/tuning.md.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock_config.h"

/*
 * Up to this many CPUs, NCCL's own thread moves every stream: no helpers.
 * On one or two cores per rank a helper only takes turns on the cores that
 * NCCL's proxy thread and the application's main thread already keep busy,
 * and each hand-off adds a wake-up; from four, helpers get cores of their
 * own and copy in parallel with NCCL's thread.
 */
#define FERRY_SOCK_NOHELPER_CPUS   2
/*
 * With exactly this many CPUs NCCL's thread still moves every receive, and
 * each send comm gets one helper kept off NCCL's thread's CPU: it takes the
 * core the application's waiting main thread yields. One side only, since
 * with helpers on both every copy lands on the helpers' core while NCCL's
 * idles; the send side, so that NCCL's thread copies the receives while the
 * helpers send. Left unplaced, the scheduler wakes helpers beside NCCL's
 * thread. With 4 cores the per-stream helpers have cores enough and stay
 * ahead.
 */
#define FERRY_SOCK_SENDHELPER_CPUS 2

/*
 * Only where a launcher gave the process its two CPUs: on a host that has
 * just two, every process shares them and there is no core for a helper to
 * take: the helper then competes with the other process' threads for the
 * same two cores.
 */
static int ferry_sock_cfg_send_helper_mode(const ferry_sock_config_t *cfg)
{
    return cfg->ncpus == FERRY_SOCK_SENDHELPER_CPUS && cfg->cpus_bound;
}

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

/*
 * A container's CPU limit leaves the host's every CPU in the mask but lets
 * the threads together run only quota / period of them; past that the
 * kernel stops them all until the next period (a 100 ms period: stalls of
 * tens of ms). The defaults are then chosen for the CPUs the quota pays
 * for. NCCL_IGNORE_CPU_AFFINITY sets the mask aside, not the quota: the
 * time past it is not there to be had.
 *
 * Such CPUs are time, not cores of the process' own (cpus_bound 0): the
 * 2-CPU send helper lives on the core a waiting application thread yields
 * to it, but under a limit that thread spins on a core of its own and
 * spends the limit all the same, so a helper would push the rank past it.
 * Helpers sized for a large host's mask are throttled under a limit, not
 * helped: each stop costs the rest of the period.
 *
 * Then the local ranks that run on the same CPUs divide them
 * (core/cpu_share.h): a GPU node's eight ranks, unbound, each see every
 * CPU, and sized as if each owned them they would put eight times the
 * node's cores in busy threads. A launcher's mask stays the rank's own
 * (cpus_bound) only where no sibling's overlaps it.
 */
void ferry_sock_config_apply_quota(ferry_sock_config_t *cfg, const ferry_cpu_quota_t *quota)
{
    ferry_cpu_share_in_t in = {
        .mask = cfg->ncpus,
        .online = cfg->ncpus_online,
        .ignore_mask = cfg->ignore_cpu_affinity != 0,
        .quota_cpus = ferry_cpu_quota_cpus(quota),
        .local_ranks = cfg->local_ranks,
        .known_sharers = cfg->cpu_sharers_known,
    };
    ferry_cpu_share_t share;

    if (quota != &cfg->quota)
        cfg->quota = *quota;
    cfg->ncpus_given = cfg->ncpus;
    ferry_cpu_share_compute(&in, &share);
    cfg->ncpus = share.budget;
    cfg->cpu_sharers = share.sharers;
    /* A mask a launcher gave stays the rank's own only when no sibling shares it. */
    cfg->cpus_bound = cfg->cpus_bound && share.bound;
}

/* 1 when the quota, not the mask, set the CPUs before they were shared. */
static int ferry_sock_cfg_by_quota(const ferry_sock_config_t *cfg)
{
    int n = ferry_cpu_quota_cpus(&cfg->quota);

    return n > 0 && n < cfg->ncpus_given;
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

/* Helpers asked for where one CPU (a mask's or a limit's) is all there is. */
static void ferry_sock_cfg_warn_one_cpu(const ferry_sock_config_t *cfg)
{
    char where[320];

    if (cfg->cpu_sharers > 1)
        snprintf(where, sizeof(where), "with one CPU as its share of the CPUs %d local ranks "
                 "run on", cfg->cpu_sharers);
    else if (ferry_sock_cfg_by_quota(cfg))
        snprintf(where, sizeof(where), "with one CPU of time (the cgroup CPU quota in %s)",
                 cfg->quota.file);
    else
        snprintf(where, sizeof(where), "bound to one CPU");
    FERRY_WARN("%d helper threads per connection (%s) in a process %s: they take turns with "
               "NCCL's own thread for that CPU, which measured slower than no helpers; unset it, or "
               "give each rank more CPUs (%s)",
               cfg->send_threads > cfg->recv_threads ? cfg->send_threads : cfg->recv_threads,
               cfg->src[FERRY_SOCK_CFG_THREADS] == FERRY_CFG_ENV ? "NCCL_FERRY_THREADS"
               : cfg->src[FERRY_SOCK_CFG_SOCKET_NTHREADS] == FERRY_CFG_ENV
                   ? "NCCL_SOCKET_NTHREADS"
               : cfg->src[FERRY_SOCK_CFG_SEND_THREADS] == FERRY_CFG_ENV
                   ? "NCCL_FERRY_SEND_THREADS"
                   : "NCCL_FERRY_RECV_THREADS",
               where,
               cfg->cpu_sharers > 1 ? "fewer ranks per node, or a larger CPU allocation"
               : ferry_sock_cfg_by_quota(cfg) ? "a CPU limit of 2 or more for the container or job"
                                              : "mpirun --bind-to none, or --map-by slot:PE=N");
}

/*
 * Streams and threads: ferry's own variables win; otherwise NCCL's
 * NTHREADS x NSOCKS_PERTHREAD are honoured as NCCL would (product capped at 64
 * by cutting streams per thread); otherwise a default chosen from the CPUs
 * the process has (cfg->ncpus).
 */
void ferry_sock_config_derive_lanes(ferry_sock_config_t *cfg)
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
     * warm, and the one thread copies them one after another anyway. The
     * same for one side's single helper (NCCL_FERRY_SEND_THREADS /
     * RECV_THREADS = 1): one thread per side moves every stream of it.
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
    /*
     * A lone comm's sends would go back onto NCCL's thread (solo_max), the
     * copies the send helper is there to keep off it; its receives are
     * NCCL's thread's in this mode anyway.
     */
    if (cfg->src[FERRY_SOCK_CFG_SOLO_MAX] == FERRY_CFG_DEFAULT && cfg->send_threads > 0 &&
        ferry_sock_cfg_send_helper_mode(cfg)) {
        cfg->solo_max = 0;
        cfg->src[FERRY_SOCK_CFG_SOLO_MAX] = FERRY_CFG_DERIVED;
    }
    if (cfg->helper_place < 0) {
        cfg->helper_place = ferry_sock_cfg_send_helper_mode(cfg) ? FERRY_SOCK_PLACE_AWAY
                                                                  : FERRY_SOCK_PLACE_MASK;
        cfg->src[FERRY_SOCK_CFG_HELPER_PLACE] = FERRY_CFG_DERIVED;
    }
    if (cfg->ncpus == 1 && (cfg->send_threads > 0 || cfg->recv_threads > 0))
        ferry_sock_cfg_warn_one_cpu(cfg);
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

/*
 * The CPUs before local ranks share them: "2 CPUs in the affinity mask",
 * "16 online CPUs (NCCL_IGNORE_CPU_AFFINITY=1; ...)", or the quota that
 * capped either; n is the count to say.
 */
static void ferry_sock_cfg_given_words(const ferry_sock_config_t *cfg, int n, char *buf,
                                       size_t len)
{
    const char *s = n == 1 ? "" : "s";

    if (ferry_sock_cfg_by_quota(cfg))
        snprintf(buf, len, "%d CPU%s of time (the cgroup CPU quota, %lld us per %lld us in %s, "
                 "caps the %d %s)", n, s, cfg->quota.quota_us, cfg->quota.period_us,
                 cfg->quota.file, cfg->ncpus_given,
                 cfg->ignore_cpu_affinity ? "online CPUs NCCL_IGNORE_CPU_AFFINITY counts"
                                          : "CPUs of the affinity mask");
    else if (cfg->ignore_cpu_affinity)
        snprintf(buf, len, "%d online CPU%s (NCCL_IGNORE_CPU_AFFINITY=%d; the affinity mask "
                 "holds %d)", n, s, cfg->ignore_cpu_affinity, cfg->ncpus_mask);
    else
        snprintf(buf, len, "%d CPU%s in the affinity mask", n, s);
}

/* 1 when every local rank runs on this rank's CPUs: a mask of every online CPU, or set aside. */
static int ferry_sock_cfg_mask_whole(const ferry_sock_config_t *cfg)
{
    return cfg->ignore_cpu_affinity || (cfg->ncpus_online > 0 &&
                                        cfg->ncpus_mask >= cfg->ncpus_online);
}

/*
 * Where the CPU budget came from: the CPUs (ferry_sock_cfg_given_words),
 * and where local ranks share them, how many and who said: "2 CPUs: 16 in
 * the affinity mask shared by 8 local ranks (OMPI_COMM_WORLD_LOCAL_SIZE)".
 */
static void ferry_sock_cfg_budget_words(const ferry_sock_config_t *cfg, char *buf, size_t len)
{
    int given = ferry_sock_cfg_by_quota(cfg) ? ferry_cpu_quota_cpus(&cfg->quota)
                                             : cfg->ncpus_given;
    const char *src = cfg->local_ranks_src != NULL ? cfg->local_ranks_src : "?";
    char words[400];

    if (cfg->cpu_sharers <= 1) {
        ferry_sock_cfg_given_words(cfg, cfg->ncpus, buf, len);
        if (cfg->local_ranks > 1 && cfg->cpus_bound) {
            size_t off = strlen(buf);

            if (cfg->cpu_sharers_known > 0)
                snprintf(buf + off, len - off, ", this rank's own (none of the other %d local "
                         "ranks' (%s) masks holds them: compared)", cfg->local_ranks - 1, src);
            else
                snprintf(buf + off, len - off, ", this rank's own (%d local ranks (%s) split "
                         "the %d online CPUs)", cfg->local_ranks, src, cfg->ncpus_online);
        }
        return;
    }
    ferry_sock_cfg_given_words(cfg, given, words, sizeof(words));
    /* "16 CPUs in the affinity mask" reads "16 in the affinity mask" after "2 CPUs: ". */
    if (!ferry_sock_cfg_by_quota(cfg) && !cfg->ignore_cpu_affinity)
        snprintf(words, sizeof(words), "%d in the affinity mask", given);
    if (ferry_sock_cfg_mask_whole(cfg))
        snprintf(buf, len, "%d CPU%s: %s shared by %d local ranks (%s)", cfg->ncpus,
                 cfg->ncpus == 1 ? "" : "s", words, cfg->cpu_sharers, src);
    else if (cfg->cpu_sharers_known > 0)
        snprintf(buf, len, "%d CPU%s: %s shared by %d of the %d local ranks (%s; their masks "
                 "compared)", cfg->ncpus, cfg->ncpus == 1 ? "" : "s", words, cfg->cpu_sharers,
                 cfg->local_ranks, src);
    else
        snprintf(buf, len, "%d CPU%s: %s shared by an estimated %d of the %d local ranks (%s) "
                 "on %d online CPUs", cfg->ncpus, cfg->ncpus == 1 ? "" : "s", words,
                 cfg->cpu_sharers, cfg->local_ranks, src, cfg->ncpus_online);
}

void ferry_sock_config_lanes_line(const ferry_sock_config_t *cfg, char *buf, size_t len)
{
    const char *setter = ferry_sock_cfg_lanes_setter(cfg);
    int auto_threads = ferry_sock_cfg_auto_threads(cfg->ncpus, FERRY_SOCK_DEFAULT_STREAMS);
    int auto_send = ferry_sock_cfg_send_helper_mode(cfg) ? 1 : auto_threads;
    const char *why;
    char chosen[112], dflt[112], where[768];

    ferry_sock_cfg_budget_words(cfg, where, sizeof(where));
    ferry_sock_cfg_lanes_words(cfg->streams, cfg->send_threads, cfg->recv_threads, chosen,
                               sizeof(chosen));
    ferry_sock_cfg_lanes_words(auto_threads == 0 ? 1 : FERRY_SOCK_DEFAULT_STREAMS, auto_send,
                               auto_threads, dflt, sizeof(dflt));
    if (setter != NULL) {
        snprintf(buf, len, "socket backend: %s per connection, set by %s (explicit settings win; "
                 "the default for %s would be %s)", chosen, setter, where, dflt);
        ferry_sock_config_pool_words(cfg, buf, len);
        return;
    }
    if (ferry_sock_cfg_send_helper_mode(cfg))
        why = "2 CPUs given to this process: NCCL's thread moves the receives, and each send "
              "comm's helper runs off that thread's CPU, on the core the application's waiting "
              "thread yields";
    else if (cfg->ncpus == FERRY_SOCK_SENDHELPER_CPUS && cfg->cpu_sharers > 1)
        why = "2 CPUs as this rank's share of CPUs other local ranks run on too: no core for "
              "helpers";
    else if (cfg->ncpus == FERRY_SOCK_SENDHELPER_CPUS && ferry_sock_cfg_by_quota(cfg))
        why = "2 CPUs of time under a CPU limit: an application thread that waits by yielding "
              "spends the limit too, so a helper would push the process past it";
    else if (cfg->ncpus == FERRY_SOCK_SENDHELPER_CPUS)
        why = "2 CPUs that are the whole host's, shared with its other processes: no core for "
              "helpers";
    else if (auto_threads == 0)
        why = "1 CPU leaves no core for helpers: measured faster without them under mpirun";
    else
        why = "from 3 CPUs, helpers copy beside NCCL's thread";
    snprintf(buf, len, "socket backend: %s per connection, chosen for %s (%s)", chosen, where, why);
    ferry_sock_config_pool_words(cfg, buf, len);
}

int ferry_sock_config_step_hint(const ferry_sock_config_t *cfg, const ferry_config_t *core,
                                int tuner_on, char *buf, size_t len)
{
    if (len > 0)
        buf[0] = '\0';
    if (!ferry_sock_cfg_send_helper_mode(cfg) || cfg->local_ranks < 2 || !tuner_on ||
        core->src[FERRY_CFG_TUNER_STEP_BYTES] != FERRY_CFG_DEFAULT)
        return 0;
    snprintf(buf, len, "socket backend: this rank runs on 2 CPUs a launcher gave it, beside %d "
             "other local rank%s; if every rank of the job is bound alike, "
             "NCCL_FERRY_TUNER_STEP_BYTES=128K on all of them runs each ring whose step on 2 "
             "channels moves under 128 KiB on one channel, faster on 2 CPUs (docs/tuning.md, "
             "\"By CPU budget\"). ferry does not choose it itself: ranks that choose different "
             "channel counts for one collective wait for each other for ever",
             cfg->local_ranks - 1, cfg->local_ranks == 2 ? "" : "s");
    return 1;
}
