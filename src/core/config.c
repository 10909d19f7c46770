#include <errno.h>
#include <sched.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/config.h"
#include "core/config_table.h"
#include "core/log.h"

#define FERRY_DEFAULT_STREAMS 4
#define FERRY_MAX_STREAMS     64
#define FERRY_MAX_THREADS     16

/* Designated, so rows may name the optional members that follow help. */
#define FERRY_CFG_FIELD(_f) .offset = offsetof(ferry_config_t, _f), \
                            .width = sizeof(((ferry_config_t *)0)->_f)

static const ferry_cfg_choice_t ferry_cfg_backends[] = {
    {"auto", FERRY_BACKEND_AUTO}, {"socket", FERRY_BACKEND_SOCKET}, {"ib", FERRY_BACKEND_IB},
    {NULL, 0},
};

static const ferry_cfg_choice_t ferry_cfg_families[] = {
    {"AF_INET", AF_INET}, {"AF_INET6", AF_INET6}, {NULL, 0},
};

static const ferry_cfg_var_t ferry_cfg_vars[FERRY_CFG_COUNT] = {
    [FERRY_CFG_BACKEND]          = {"NCCL_FERRY_BACKEND", FERRY_CFG_KIND_CHOICE,
                                    FERRY_CFG_FIELD(backend), FERRY_BACKEND_AUTO, 0, 0,
                                    "auto, socket or ib", .choices = ferry_cfg_backends},
    [FERRY_CFG_SOCKET_IFNAME]    = {"NCCL_SOCKET_IFNAME", FERRY_CFG_KIND_TEXT,
                                    FERRY_CFG_FIELD(socket_ifname), 0, 0, 0,
                                    "interface prefixes, ^ to exclude, = for exact names",
                                    /* NCCL treats a 1-character NCCL_SOCKET_IFNAME as unset; so do we. */
                                    .flags = FERRY_CFG_F_SHORT_UNSET},
    [FERRY_CFG_SOCKET_FAMILY]    = {"NCCL_SOCKET_FAMILY", FERRY_CFG_KIND_CHOICE,
                                    FERRY_CFG_FIELD(socket_family), AF_UNSPEC, 0, 0,
                                    "AF_INET or AF_INET6", .choices = ferry_cfg_families},
    [FERRY_CFG_SOCKET_NTHREADS]  = {"NCCL_SOCKET_NTHREADS", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(socket_nthreads), 0, 1, FERRY_MAX_THREADS,
                                    "helper threads per connection, 1..16"},
    [FERRY_CFG_NSOCKS_PERTHREAD] = {"NCCL_NSOCKS_PERTHREAD", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(nsocks_perthread), 0, 1, FERRY_MAX_STREAMS,
                                    "TCP streams per helper thread, 1..64"},
    [FERRY_CFG_STREAMS]          = {"NCCL_FERRY_STREAMS", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(streams), FERRY_DEFAULT_STREAMS, 1,
                                    FERRY_MAX_STREAMS, "TCP streams per connection, 1..64"},
    [FERRY_CFG_THREADS]          = {"NCCL_FERRY_THREADS", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(threads), -1, 0, FERRY_MAX_THREADS,
                                    "helper threads per connection, 0..16 (0: NCCL's thread moves the data)"},
    [FERRY_CFG_CHUNK_MIN]        = {"NCCL_SOCKET_MIN_TASKSIZE", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(chunk_min), 64 << 10, 4 << 10, 64 << 20,
                                    "smallest chunk per stream, 4K..64M"},
    [FERRY_CFG_CHUNK_MAX]        = {"NCCL_FERRY_CHUNK_SIZE", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(chunk_max), 1 << 20, 4 << 10, 64 << 20,
                                    "largest chunk per stream, 4K..64M"},
    [FERRY_CFG_SOCKET_SNDBUF]    = {"NCCL_SOCKET_SNDBUF", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(sndbuf), -1, -1, INT_MAX,
                                    "SO_SNDBUF bytes, -1 keeps the kernel default"},
    [FERRY_CFG_SOCKET_RCVBUF]    = {"NCCL_SOCKET_RCVBUF", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(rcvbuf), -1, -1, INT_MAX,
                                    "SO_RCVBUF bytes, -1 keeps the kernel default"},
    [FERRY_CFG_RETRY_CNT]        = {"NCCL_SOCKET_RETRY_CNT", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(retry_cnt), 34, 0, 1000000,
                                    "connect retries, 0..1000000"},
    [FERRY_CFG_RETRY_SLEEP_MS]   = {"NCCL_SOCKET_RETRY_SLEEP_MSEC", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(retry_sleep_ms), 100, 0, 60000,
                                    "connect back-off step in ms, 0..60000"},
    [FERRY_CFG_HELLO_TIMEOUT_MS] = {"NCCL_FERRY_HELLO_TIMEOUT_MS", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(hello_timeout_ms), 10000, 10, 3600000,
                                    "ms an inbound stream may take to say hello"},
    [FERRY_CFG_DUMP_SIGNAL]      = {"NCCL_FERRY_DUMP_SIGNAL", FERRY_CFG_KIND_CUSTOM,
                                    FERRY_CFG_FIELD(dump_signal), 0, 0, 0,
                                    "signal name or number that dumps all comms, off by default",
                                    .parse = ferry_config_parse_signal},
    [FERRY_CFG_SPIN_US]          = {"NCCL_FERRY_SPIN_US", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(spin_us), -1, -1, 1000000,
                                    "us helper threads keep polling before they sleep, -1 auto (0)"},
    [FERRY_CFG_INJECT_DELAY_US]  = {"NCCL_FERRY_INJECT_DELAY_US", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(inject_delay_us), 0, 0, 1000000,
                                    "test knob: us added to every chunk completion"},
    [FERRY_CFG_SPEED_MBPS]       = {"NCCL_FERRY_SPEED_MBPS", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(speed_mbps), -1, -1, 100000000,
                                    "device speed reported to NCCL in Mbps, -1 auto"},
    [FERRY_CFG_INLINE_MAX]       = {"NCCL_FERRY_INLINE_MAX", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(inline_max), 32 << 10, 0, 64 << 20,
                                    "isends up to this size are sent by NCCL's own thread, 0..64M"},
    [FERRY_CFG_NOTSENT_LOWAT]    = {"NCCL_FERRY_NOTSENT_LOWAT", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(notsent_lowat), 0, 0, 64 << 20,
                                    "TCP_NOTSENT_LOWAT bytes on data streams, 0 keeps the kernel's"},
    [FERRY_CFG_ASSIST_MAX]       = {"NCCL_FERRY_ASSIST_MAX", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(assist_max), -1, -1, 64 << 20,
                                    "-1 (follow NCCL_FERRY_INLINE_MAX) or a size up to 64M (messages NCCL's "
                                    "thread moves on stream 0 inside test())"},
    [FERRY_CFG_ZEROCOPY]         = {"NCCL_FERRY_ZEROCOPY", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(zerocopy), 0, 0, 2,
                                    "0, 1 or 2 (1: large chunks are sent with MSG_ZEROCOPY, "
                                    "falling back to copies where the kernel copies anyway; 2: "
                                    "never fall back, for tests)"},
    [FERRY_CFG_ZEROCOPY_MIN]     = {"NCCL_FERRY_ZEROCOPY_MIN", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(zerocopy_min), 64 << 10, 4 << 10, 64 << 20,
                                    "4K..64M (smallest chunk sent with MSG_ZEROCOPY)"},
    [FERRY_CFG_TUNER]            = {"NCCL_FERRY_TUNER", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(tuner), 1, 0, 1,
                                    "0 or 1 (1: ferry's bundled tuner corrects NCCL's cost model)"},
    [FERRY_CFG_TUNER_LL_BW]      = {"NCCL_FERRY_TUNER_LL_BW", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(tuner_ll_bw), 1000, 1, 1000000,
                                    "1..1000000 (MB/s of bus bandwidth NCCL's LL protocols reach over ferry)"},
    [FERRY_CFG_TUNER_CHANNEL_BYTES] = {"NCCL_FERRY_TUNER_CHANNEL_BYTES", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(tuner_channel_bytes), 2 << 20, 0, 1LL << 40,
                                    "a size up to 1T (collective bytes per NCCL channel; 0 leaves channels to NCCL)"},
    [FERRY_CFG_SOLO_MAX]         = {"NCCL_FERRY_SOLO_MAX", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(solo_max), 64 << 10, 0, 64 << 20,
                                    "0..64M (while one comm is all that sends or receives in the "
                                    "process, NCCL's thread moves messages up to this itself; 0: off)"},
    [FERRY_CFG_STALL_WARN_S]     = {"NCCL_FERRY_STALL_WARN_S", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(stall_warn_s), 60, 0, 86400,
                                    "0..86400 (s a request may go without progress before test() "
                                    "warns about it once; 0: never)"},
    [FERRY_CFG_GPU_STAGING]      = {"NCCL_FERRY_GPU_STAGING", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(gpu_staging), 0, 0, 1,
                                    "0 or 1 (1: the socket backend takes GPU buffers, staged "
                                    "through pinned host memory by the GPU's copy engines)"},
    [FERRY_CFG_EPOLL]            = {"NCCL_FERRY_EPOLL", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(epoll), 0, 0, 1,
                                    "0 or 1 (1: helper threads wait in epoll, their streams "
                                    "registered once, instead of poll)"},
    [FERRY_CFG_SOCKET_TIMEOUT_S] = {"NCCL_FERRY_SOCKET_TIMEOUT_S", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(socket_timeout_s), 30, 0, 3600,
                                    "0..3600 (s a peer may stay silent or leave sent bytes "
                                    "unacknowledged before its stream fails: TCP keepalive and "
                                    "TCP_USER_TIMEOUT on every data stream; 0: kernel defaults)"},
};

static const struct {
    const char *name;
    int         signo;
} ferry_cfg_signals[] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"QUIT", SIGQUIT},
    {"URG", SIGURG},   {"PWR", SIGPWR},   {"WINCH", SIGWINCH},
};

int ferry_config_parse_signal(const char *text)
{
    char *end;
    long n;
    size_t i;

    if (text == NULL || *text == '\0' || strcasecmp(text, "off") == 0)
        return 0;
    if (strncasecmp(text, "SIG", 3) == 0)
        text += 3;
    for (i = 0; i < sizeof(ferry_cfg_signals) / sizeof(ferry_cfg_signals[0]); i++)
        if (strcasecmp(text, ferry_cfg_signals[i].name) == 0)
            return ferry_cfg_signals[i].signo;
    errno = 0;
    n = strtol(text, &end, 10);
    /* SIGKILL/SIGSTOP cannot be caught; SIGSEGV and friends must stay fatal. */
    if (errno != 0 || *end != '\0' || n < 0 || n >= NSIG || n == SIGKILL ||
        n == SIGSTOP || n == SIGSEGV || n == SIGBUS || n == SIGFPE || n == SIGILL ||
        n == SIGABRT)
        return -1;
    return (int)n;
}

long long ferry_config_parse_size(const char *text)
{
    char *end;
    long long n;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    n = strtoll(text, &end, 10);
    if (errno != 0 || end == text)
        return -1;
    switch (*end) {
    case 'k': case 'K': n *= 1LL << 10; end++; break;
    case 'm': case 'M': n *= 1LL << 20; end++; break;
    case 'g': case 'G': n *= 1LL << 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    return *end == '\0' ? n : -1;
}

/*
 * Streams and threads: ferry's own variables win; otherwise NCCL's
 * NTHREADS x NSOCKS_PERTHREAD are honoured as NCCL would (product capped at 64
 * by cutting streams per thread); otherwise ferry's default.
 */
static void ferry_cfg_derive_lanes(ferry_config_t *cfg)
{
    int nt = cfg->socket_nthreads, ns = cfg->nsocks_perthread;
    cpu_set_t set;
    int one_cpu = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1;

    if (cfg->src[FERRY_CFG_STREAMS] == FERRY_CFG_DEFAULT && (nt > 0 || ns > 0)) {
        if (nt == 0)
            nt = cfg->threads > 0 ? cfg->threads : FERRY_DEFAULT_STREAMS;
        if (ns == 0)
            ns = 1;
        if (nt * ns > FERRY_MAX_STREAMS)
            ns = FERRY_MAX_STREAMS / nt;
        cfg->streams = nt * ns;
        /* NCCL_NSOCKS_PERTHREAD alone asks for sockets, not for helpers on a lone CPU. */
        if (cfg->src[FERRY_CFG_THREADS] == FERRY_CFG_DEFAULT &&
            !(one_cpu && cfg->socket_nthreads == 0)) {
            cfg->threads = nt;
            cfg->src[FERRY_CFG_THREADS] = FERRY_CFG_DERIVED;
        }
        cfg->src[FERRY_CFG_STREAMS] = FERRY_CFG_DERIVED;
    }
    if (cfg->threads < 0) {
        /*
         * A process bound to one CPU (mpirun binds each rank to a core by
         * default) has no core for helper threads: NCCL's own thread then
         * moves every stream, as NCCL's socket transport does. Helpers on
         * that core took turns with it: 0.75-0.94x at every size under
         * mpirun (bench/results/2026-11-29-gpu-onecore, run1).
         */
        if (one_cpu)
            cfg->threads = 0;
        else
            cfg->threads = cfg->streams < FERRY_MAX_THREADS ? cfg->streams : FERRY_MAX_THREADS;
        cfg->src[FERRY_CFG_THREADS] = FERRY_CFG_DERIVED;
    }
    /*
     * NCCL's thread moving every stream itself gains nothing from several:
     * each is one more socket to poll per call and one more buffer to keep
     * warm. nccl-tests under mpirun (one core per rank, 2 channels): one
     * stream 1.00-1.12x four at every size, 1.06-1.10x from 4 MiB up
     * (bench/results/2026-11-29-gpu-onecore, run2).
     */
    if (cfg->threads == 0 && cfg->src[FERRY_CFG_STREAMS] == FERRY_CFG_DEFAULT) {
        cfg->streams = 1;
        cfg->src[FERRY_CFG_STREAMS] = FERRY_CFG_DERIVED;
    }
    if (cfg->threads > cfg->streams)
        cfg->threads = cfg->streams;
    if (one_cpu && cfg->threads > 0)
        FERRY_WARN("%d helper threads per connection (%s) in a process bound to one CPU: they "
                   "take turns with NCCL's own thread for that CPU (0.75-0.94x measured under "
                   "mpirun); unset it, or give each rank more CPUs (mpirun --bind-to none, or "
                   "--map-by slot:PE=N)", cfg->threads,
                   cfg->src[FERRY_CFG_THREADS] == FERRY_CFG_ENV ? "NCCL_FERRY_THREADS"
                                                                : "NCCL_SOCKET_NTHREADS");
}

/*
 * Spinning before sleeping was measured on the GPU machine (bench/results/
 * 2026-11-29-gpu-tuning, runs 2-8): once NCCL's thread sends small messages
 * itself and reads them inside test(), a spinning worker saves nothing at
 * 4 KiB and costs 9-19 % at 256 KiB-1 MiB, where NCCL opens many comms and
 * the spinners take the cores the copies need. Off unless asked for.
 */
static void ferry_cfg_derive_spin(ferry_config_t *cfg)
{
    if (cfg->spin_us >= 0)
        return;
    cfg->spin_us = 0;
    cfg->src[FERRY_CFG_SPIN_US] = FERRY_CFG_DERIVED;
}

ferry_status_t ferry_config_load(ferry_config_t *cfg)
{
    ferry_status_t status;

    memset(cfg, 0, sizeof(*cfg));
    status = ferry_cfg_table_load(ferry_cfg_vars, FERRY_CFG_COUNT, cfg, cfg->src);
    if (status != FERRY_OK)
        return status;
    if (cfg->chunk_min > cfg->chunk_max) {
        FERRY_WARN("NCCL_SOCKET_MIN_TASKSIZE=%zu is larger than NCCL_FERRY_CHUNK_SIZE=%zu; "
                   "make the minimum no larger than the maximum", cfg->chunk_min, cfg->chunk_max);
        return FERRY_ERR_USAGE;
    }
    ferry_cfg_derive_lanes(cfg);
    ferry_cfg_derive_spin(cfg);
    return FERRY_OK;
}

const char *ferry_config_backend_name(ferry_backend_kind_t kind)
{
    static const char *const names[] = {"auto", "socket", "ib"};

    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

void ferry_config_format(const ferry_config_t *cfg, char *buf, size_t len)
{
    const char *family = cfg->socket_family == AF_INET    ? "AF_INET"
                         : cfg->socket_family == AF_INET6 ? "AF_INET6"
                                                          : "any";
    snprintf(buf, len,
             "backend=%s(%s) ifname=%s(%s) family=%s(%s) streams=%d(%s) threads=%d(%s) "
             "chunk=%zu..%zu(%s) sndbuf=%d(%s) rcvbuf=%d(%s) retry=%dx%dms(%s) "
             "hello_timeout=%dms(%s) dump_signal=%d(%s) spin=%dus(%s) inject_delay=%dus(%s) "
             "speed=%dMbps(%s) inline_max=%zu(%s) assist_max=%lld(%s) notsent_lowat=%d(%s) zerocopy=%d/%zu(%s) tuner=%d(%s) "
             "tuner_ll_bw=%dMB/s(%s) tuner_channel_bytes=%zu(%s) solo_max=%zu(%s) stall_warn=%ds(%s) gpu_staging=%d(%s) epoll=%d(%s) "
             "socket_timeout=%ds(%s)",
             ferry_config_backend_name(cfg->backend), ferry_cfg_src_name(cfg->src[FERRY_CFG_BACKEND]),
             cfg->socket_ifname[0] ? cfg->socket_ifname : "<nccl order>",
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SOCKET_IFNAME]), family,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SOCKET_FAMILY]), cfg->streams,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_STREAMS]), cfg->threads,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_THREADS]), cfg->chunk_min, cfg->chunk_max,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_CHUNK_MAX] != FERRY_CFG_DEFAULT
                                    ? cfg->src[FERRY_CFG_CHUNK_MAX]
                                    : cfg->src[FERRY_CFG_CHUNK_MIN]),
             cfg->sndbuf, ferry_cfg_src_name(cfg->src[FERRY_CFG_SOCKET_SNDBUF]), cfg->rcvbuf,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SOCKET_RCVBUF]), cfg->retry_cnt,
             cfg->retry_sleep_ms, ferry_cfg_src_name(cfg->src[FERRY_CFG_RETRY_CNT]),
             cfg->hello_timeout_ms, ferry_cfg_src_name(cfg->src[FERRY_CFG_HELLO_TIMEOUT_MS]),
             cfg->dump_signal, ferry_cfg_src_name(cfg->src[FERRY_CFG_DUMP_SIGNAL]),
             cfg->spin_us, ferry_cfg_src_name(cfg->src[FERRY_CFG_SPIN_US]), cfg->inject_delay_us,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_INJECT_DELAY_US]), cfg->speed_mbps,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SPEED_MBPS]), cfg->inline_max,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_INLINE_MAX]), cfg->assist_max,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_ASSIST_MAX]), cfg->notsent_lowat,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_NOTSENT_LOWAT]), cfg->zerocopy, cfg->zerocopy_min,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_ZEROCOPY]), cfg->tuner,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_TUNER]), cfg->tuner_ll_bw,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_TUNER_LL_BW]), cfg->tuner_channel_bytes,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_TUNER_CHANNEL_BYTES]), cfg->solo_max,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SOLO_MAX]), cfg->stall_warn_s,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_STALL_WARN_S]), cfg->gpu_staging,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_GPU_STAGING]), cfg->epoll,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_EPOLL]), cfg->socket_timeout_s,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SOCKET_TIMEOUT_S]));
}
