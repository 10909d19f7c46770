/*
 * libferry-flush-prof.so: an NCCL profiler plugin (ABI v5, flush_prof_abi.h)
 * that times, as NCCL's proxy sees them and for any net transport, the GDR
 * flush and every phase of every proxy step: ferry's ib backend and NCCL's
 * own IB alike, so the two are measured with one instrument.
 *
 * Flushes: NCCL's recvProxyProgress records a receive step's
 * RecvFlushWait state when the step's irecv test() completes and calls
 * iflush right after; it records RecvGPUWait when that flush's test()
 * completes. One flush = the time between the two records of one step.
 *
 * NCCL flushes only SIMPLE-protocol steps that received bytes (and only with
 * GPU buffers and a flush needed: NCCL_NET_FORCE_FLUSH=1 on Hopper), so the
 * steps are kept apart by their collective's size and protocol: each
 * collective event's handle is a per-comm key (bytes, protocol), which NCCL
 * hands back as the parent of its proxy ops, whose handle is that key again,
 * the parent of their steps. Steps of other protocols are printed too, as a
 * baseline of the same interval without a flush.
 *
 * Step phases: a phase is the time a step spends in one state, from that
 * state's record to the step's next record of any of the six step states
 * (SendGPUWait, SendPeerWait, SendWait; RecvWait, RecvFlushWait, RecvGPUWait)
 * or to its stop_event. So a step's phases add up to its life from its first
 * state to its stop, and ferry and NCCL's IB can be compared phase by phase.
 * A repeated state closes and reopens its own phase (two samples); unknown
 * state ids neither open nor close one.
 *
 * At finalize, one flush_prof line per (comm, size, protocol) and one for all
 * SIMPLE flushes of the comm, then one step_prof line per (comm, size,
 * protocol, phase) with samples, go to $FERRY_FLUSH_PROF_OUT ("%p" is the
 * pid; lines appended) or stderr. Memory is fixed per comm (no allocation per
 * event); each comm's state has its own lock (NCCL's proxy thread and the
 * application thread both call in). Events in an unexpected order add no
 * flush: a step without a flush state gives no flush sample. step_prof's
 * steps=N counts phase samples: a step that repeats a state counts twice.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "flush_prof_abi.h"
#include "flush_prof_stats.h"
#include "pc_sampler.h"

#define FP_EXPORT __attribute__((visibility("default")))

#define FP_MAGIC_KEY  0x59454b46u /* "FKEY" */
#define FP_MAGIC_STEP 0x50545346u /* "FSTP" */
#define FP_MAX_KEYS   16          /* keys[0] holds whatever has no key of its own. */
#define FP_MAX_STEPS  4096        /* Steps in flight per comm: channels x peers x 8 is far less. */
#define FP_NPHASES    6           /* fp_phases[]. */

typedef struct fp_ctx fp_ctx_t;

/* The steps of collectives of one size and protocol. */
typedef struct {
    uint32_t magic;    /* FP_MAGIC_KEY: what stop_event and a child's parent look at. */
    int used;
    uint64_t bytes;    /* Of the collective (count x datatype size). */
    int simple;        /* 1: SIMPLE, flushed; 0: another protocol; -1: not known. */
    char proto[8];
    fp_stats_t stats;
} fp_key_t;

typedef struct {
    uint32_t magic;    /* FP_MAGIC_STEP while started, 0 while free. */
    fp_ctx_t *ctx;
    fp_key_t *key;
    uint64_t flush_ns; /* When RecvFlushWait was recorded; 0: not (yet), or nothing received. */
    uint64_t phase_ns; /* When the open phase began. */
    int phase;         /* The open phase (fp_phases[] index); -1: none yet. */
    int32_t next_free;
} fp_step_t;

struct fp_ctx {
    pthread_mutex_t lock;
    uint64_t comm_id;
    int rank, nranks;
    fp_key_t keys[FP_MAX_KEYS];
    fp_stats_t all;    /* Every flush of a SIMPLE step. */
    /* [key index x FP_NPHASES + phase]; NULL: phases not timed (calloc failed).
     * Apart from keys: 1.5 MiB per comm, of which only the pages used get touched. */
    fp_stats_t *phase_stats;
    uint64_t dropped;  /* Steps not timed: all FP_MAX_STEPS in use. */
    int32_t free_head;
    fp_step_t steps[FP_MAX_STEPS];
};

typedef uint64_t (*fp_clock_fn)(void);

static uint64_t fp_clock_mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static _Atomic(fp_clock_fn) fp_clock = fp_clock_mono;

/* The step states timed as phases, in the order a step goes through them. */
static const struct {
    int state;
    const char *name;
} fp_phases[FP_NPHASES] = {
    { FP_STATE_SEND_GPU_WAIT, "SendGPUWait" },
    { FP_STATE_SEND_PEER_WAIT, "SendPeerWait" },
    { FP_STATE_SEND_WAIT, "SendWait" },
    { FP_STATE_RECV_WAIT, "RecvWait" },
    { FP_STATE_RECV_FLUSH_WAIT, "RecvFlushWait" },
    { FP_STATE_RECV_GPU_WAIT, "RecvGPUWait" },
};

/* Tests replace the clock (NULL restores it) to feed known times; NCCL never calls this. */
FP_EXPORT void ferry_flush_prof_set_clock(uint64_t (*fn)(void));
void ferry_flush_prof_set_clock(uint64_t (*fn)(void))
{
    atomic_store(&fp_clock, fn != NULL ? fn : fp_clock_mono);
}

static uint64_t fp_now(void)
{
    return atomic_load_explicit(&fp_clock, memory_order_relaxed)();
}

/* Bytes per element from NCCL's datatype name ("ncclFloat32", "ncclBfloat16", "ncclInt8"). */
static uint64_t fp_dtype_size(const char *name)
{
    size_t len = name != NULL ? strlen(name) : 0;

    if (len >= 2 && strcmp(name + len - 2, "64") == 0)
        return 8;
    if (len >= 2 && strcmp(name + len - 2, "32") == 0)
        return 4;
    if (len >= 2 && strcmp(name + len - 2, "16") == 0)
        return 2;
    return 1; /* Int8, Uint8, the Float8 kinds; unknown names count elements. */
}

/* The key of (bytes, proto), made if new; keys[0] when the table is full. Under ctx->lock. */
static fp_key_t *fp_key_get(fp_ctx_t *ctx, uint64_t bytes, const char *proto)
{
    const char *p = proto != NULL ? proto : "?";
    int i;

    for (i = 1; i < FP_MAX_KEYS && ctx->keys[i].used; i++)
        if (ctx->keys[i].bytes == bytes && strncmp(ctx->keys[i].proto, p, 7) == 0)
            return &ctx->keys[i];
    if (i == FP_MAX_KEYS)
        return &ctx->keys[0];
    ctx->keys[i].used = 1;
    ctx->keys[i].bytes = bytes;
    ctx->keys[i].simple = strcasecmp(p, "SIMPLE") == 0;
    snprintf(ctx->keys[i].proto, sizeof(ctx->keys[i].proto), "%s", p);
    return &ctx->keys[i];
}

/* parent as one of ctx's keys, else keys[0]: a handle from elsewhere is never read. */
static fp_key_t *fp_key_of(fp_ctx_t *ctx, const void *parent)
{
    uintptr_t p = (uintptr_t)parent, lo = (uintptr_t)&ctx->keys[0];

    if (p < lo || p >= (uintptr_t)&ctx->keys[FP_MAX_KEYS] || (p - lo) % sizeof(fp_key_t) != 0)
        return &ctx->keys[0];
    return (fp_key_t *)parent;
}

static fp_nccl_result_t fp_init(void **context, uint64_t comm_id, int *activation_mask,
                                const char *comm_name, int nnodes, int nranks, int rank,
                                fp_nccl_logger_t log)
{
    fp_ctx_t *ctx = calloc(1, sizeof(*ctx));
    int i;

    *context = ctx;
    if (ctx == NULL)
        return 0; /* Then every event of this comm is ignored (NULL context). */
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->comm_id = comm_id;
    ctx->rank = rank;
    ctx->nranks = nranks;
    ctx->keys[0].magic = FP_MAGIC_KEY;
    ctx->keys[0].used = 1;
    ctx->keys[0].simple = -1;
    snprintf(ctx->keys[0].proto, sizeof(ctx->keys[0].proto), "unknown");
    for (i = 0; i < FP_MAX_KEYS; i++) {
        ctx->keys[i].magic = FP_MAGIC_KEY;
        fp_stats_init(&ctx->keys[i].stats);
    }
    fp_stats_init(&ctx->all);
    /* Zeroed, not fp_stats_init'ed: that would touch every page (fp_phase_stats). */
    ctx->phase_stats = calloc((size_t)FP_MAX_KEYS * FP_NPHASES, sizeof(fp_stats_t));
    for (i = 0; i < FP_MAX_STEPS; i++)
        ctx->steps[i].next_free = i + 1 < FP_MAX_STEPS ? i + 1 : -1;
    ctx->free_head = 0;
    /* Proxy steps only. NCCL still starts the collective and proxy-op events above
     * them (their handles carry the key down) but records no states on those. */
    *activation_mask = FP_EVENT_PROXY_STEP;
    return 0;
}

static fp_step_t *fp_step_start(fp_ctx_t *ctx, const void *parent)
{
    fp_step_t *st = NULL;

    pthread_mutex_lock(&ctx->lock);
    if (ctx->free_head >= 0) {
        st = &ctx->steps[ctx->free_head];
        ctx->free_head = st->next_free;
        st->magic = FP_MAGIC_STEP;
        st->ctx = ctx;
        st->key = fp_key_of(ctx, parent);
        st->flush_ns = 0;
        st->phase = -1;
    } else {
        ctx->dropped++;
    }
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

static fp_nccl_result_t fp_start_event(void *context, void **handle, fp_event_descr_t *d)
{
    fp_ctx_t *ctx = context;

    *handle = NULL;
    if (ctx == NULL || d == NULL)
        return 0;
    switch (d->type) {
    case FP_EVENT_COLL:
        pthread_mutex_lock(&ctx->lock);
        *handle = fp_key_get(ctx, (uint64_t)d->coll.count * fp_dtype_size(d->coll.datatype),
                             d->coll.proto);
        pthread_mutex_unlock(&ctx->lock);
        break;
    case FP_EVENT_PROXY_OP:
        /* Not NULL: NCCL records a step's states only while its proxy op has a handle. */
        *handle = fp_key_of(ctx, d->parent);
        break;
    case FP_EVENT_PROXY_STEP:
        *handle = fp_step_start(ctx, d->parent);
        break;
    default:
        break; /* Groups, API events, p2p (its proxy ops then go to keys[0]). */
    }
    return 0;
}

/* The fp_phases[] index of a step state; -1 for an id we do not time. */
static int fp_phase_of(int state)
{
    int i;

    for (i = 0; i < FP_NPHASES; i++)
        if (fp_phases[i].state == state)
            return i;
    return -1;
}

/* The stats of key's phase, initialized on first use; NULL when phases are not timed. */
static fp_stats_t *fp_phase_stats(fp_ctx_t *ctx, const fp_key_t *key, int phase)
{
    fp_stats_t *s;

    if (ctx->phase_stats == NULL)
        return NULL;
    s = &ctx->phase_stats[(size_t)(key - ctx->keys) * FP_NPHASES + (size_t)phase];
    if (s->rng == 0) /* Once initialized rng is never 0 (xorshift): this is calloc's zeroes. */
        fp_stats_init(s);
    return s;
}

/* Ends the step's open phase at now (a sample for its key), if one is open. Under ctx->lock. */
static void fp_phase_close(fp_step_t *st, uint64_t now)
{
    fp_stats_t *s;

    if (st->phase < 0 || now < st->phase_ns)
        return;
    s = fp_phase_stats(st->ctx, st->key, st->phase);
    if (s != NULL)
        fp_stats_add(s, now - st->phase_ns);
    st->phase = -1;
}

static fp_nccl_result_t fp_stop_event(void *handle)
{
    fp_step_t *st = handle;
    fp_ctx_t *ctx;
    uint64_t now;

    if (st == NULL || st->magic != FP_MAGIC_STEP)
        return 0; /* Keys live as long as their comm. */
    ctx = st->ctx;
    now = fp_now();
    pthread_mutex_lock(&ctx->lock);
    fp_phase_close(st, now);
    st->magic = 0;
    st->next_free = ctx->free_head;
    ctx->free_head = (int32_t)(st - ctx->steps);
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

/* The flush: RecvFlushWait starts one, the next RecvGPUWait ends it. Under ctx->lock. */
static void fp_flush_record(fp_step_t *st, int state, const fp_state_args_t *args, uint64_t now)
{
    if (state == FP_STATE_RECV_FLUSH_WAIT) {
        /* Nothing received, nothing flushed: no sample (args NULL: assume bytes came). */
        st->flush_ns = args != NULL && args->proxy_step.trans_size == 0 ? 0 : now;
        return;
    }
    if (state != FP_STATE_RECV_GPU_WAIT || st->flush_ns == 0)
        return;
    if (now >= st->flush_ns) {
        fp_stats_add(&st->key->stats, now - st->flush_ns);
        if (st->key->simple == 1)
            fp_stats_add(&st->ctx->all, now - st->flush_ns);
    }
    st->flush_ns = 0;
}

static fp_nccl_result_t fp_record_state(void *handle, int state, fp_state_args_t *args)
{
    fp_step_t *st = handle;
    int phase = fp_phase_of(state);
    uint64_t now;

    if (st == NULL || st->magic != FP_MAGIC_STEP || phase < 0)
        return 0;
    fp_sampler_record();
    now = fp_now();
    pthread_mutex_lock(&st->ctx->lock);
    fp_phase_close(st, now);
    st->phase = phase;
    st->phase_ns = now;
    fp_flush_record(st, state, args, now);
    pthread_mutex_unlock(&st->ctx->lock);
    return 0;
}

/* $FERRY_FLUSH_PROF_OUT with every "%p" replaced by the pid, or NULL. */
static FILE *fp_open_out(void)
{
    const char *tmpl = getenv("FERRY_FLUSH_PROF_OUT");
    char path[4096];
    size_t o = 0;

    if (tmpl == NULL || tmpl[0] == '\0')
        return NULL;
    for (; *tmpl != '\0' && o + 24 < sizeof(path); tmpl++) {
        if (tmpl[0] == '%' && tmpl[1] == 'p') {
            o += (size_t)snprintf(path + o, sizeof(path) - o, "%ld", (long)getpid());
            tmpl++;
        } else {
            path[o++] = *tmpl;
        }
    }
    path[o] = '\0';
    return fopen(path, "a");
}

/* What one output line says besides its numbers. */
typedef struct {
    const char *prefix;     /* "flush_prof" or "step_prof". */
    const char *bytes;      /* Decimal, "unknown" or "all". */
    const char *proto;
    const char *phase;      /* step_prof: the phase's name; flush_prof: NULL. */
    const char *count_name; /* What the count counts: "flushes", "noflush_steps", "steps". */
    const char *extra;      /* Appended as is: "" or " untimed_steps=N". */
} fp_line_t;

static void fp_print(FILE *f, const fp_ctx_t *ctx, const fp_line_t *l, fp_stats_t *s)
{
    fp_summary_t sum;

    fp_stats_summary(s, &sum);
    fprintf(f, "%s: pid=%ld comm=%016" PRIx64 " rank=%d nranks=%d bytes=%s proto=%s%s%s "
            "%s=%" PRIu64 " median_us=%.3f p10_us=%.3f p90_us=%.3f mean_us=%.3f max_us=%.3f%s\n",
            l->prefix, (long)getpid(), ctx->comm_id, ctx->rank, ctx->nranks, l->bytes, l->proto,
            l->phase != NULL ? " phase=" : "", l->phase != NULL ? l->phase : "", l->count_name,
            sum.count, sum.median_us, sum.p10_us, sum.p90_us, sum.mean_us, sum.max_us, l->extra);
}

static int fp_key_before(const fp_key_t *a, const fp_key_t *b)
{
    return a->bytes < b->bytes || (a->bytes == b->bytes && strcmp(a->proto, b->proto) < 0);
}

/* ctx's sized keys (all but keys[0]) into order, ascending (bytes, proto); returns how many. */
static int fp_key_order(fp_ctx_t *ctx, fp_key_t **order)
{
    int n = 0, i, j;

    for (i = 1; i < FP_MAX_KEYS; i++) {
        fp_key_t *k = &ctx->keys[i];

        if (!k->used)
            continue;
        for (j = n; j > 0 && fp_key_before(k, order[j - 1]); j--)
            order[j] = order[j - 1];
        order[j] = k;
        n++;
    }
    return n;
}

/* The flush_prof lines: each key with samples, keys[0] (unknown) last, then all SIMPLE. */
static void fp_print_flushes(FILE *f, fp_ctx_t *ctx, fp_key_t **order, int n)
{
    fp_line_t l = { .prefix = "flush_prof", .extra = "" };
    char bytes[32], extra[64];
    int i;

    for (i = 0; i < n; i++) {
        if (order[i]->stats.count == 0)
            continue;
        snprintf(bytes, sizeof(bytes), "%" PRIu64, order[i]->bytes);
        l.bytes = bytes;
        l.proto = order[i]->proto;
        l.count_name = order[i]->simple == 1 ? "flushes" : "noflush_steps";
        fp_print(f, ctx, &l, &order[i]->stats);
    }
    if (ctx->keys[0].stats.count > 0) {
        l.bytes = l.proto = "unknown";
        l.count_name = "steps";
        fp_print(f, ctx, &l, &ctx->keys[0].stats);
    }
    snprintf(extra, sizeof(extra), " untimed_steps=%" PRIu64, ctx->dropped);
    l.bytes = "all";
    l.proto = "SIMPLE";
    l.count_name = "flushes";
    l.extra = extra;
    fp_print(f, ctx, &l, &ctx->all);
}

/* The step_prof lines of one key: each phase with samples, in fp_phases[] order. */
static void fp_print_key_phases(FILE *f, fp_ctx_t *ctx, fp_key_t *k)
{
    fp_line_t l = { .prefix = "step_prof", .proto = k->proto, .count_name = "steps", .extra = "" };
    size_t base = (size_t)(k - ctx->keys) * FP_NPHASES;
    char bytes[32] = "unknown"; /* keys[0]'s. */
    int p;

    if (k != &ctx->keys[0])
        snprintf(bytes, sizeof(bytes), "%" PRIu64, k->bytes);
    l.bytes = bytes;
    for (p = 0; p < FP_NPHASES; p++) {
        if (ctx->phase_stats[base + (size_t)p].count == 0)
            continue;
        l.phase = fp_phases[p].name;
        fp_print(f, ctx, &l, &ctx->phase_stats[base + (size_t)p]);
    }
}

static fp_nccl_result_t fp_finalize(void *context)
{
    fp_ctx_t *ctx = context;
    fp_key_t *order[FP_MAX_KEYS];
    FILE *out, *f;
    int n, i;

    if (ctx == NULL)
        return 0;
    out = fp_open_out();
    f = out != NULL ? out : stderr;
    pthread_mutex_lock(&ctx->lock);
    n = fp_key_order(ctx, order);
    fp_print_flushes(f, ctx, order, n);
    if (ctx->phase_stats != NULL) {
        for (i = 0; i < n; i++)
            fp_print_key_phases(f, ctx, order[i]);
        fp_print_key_phases(f, ctx, &ctx->keys[0]);
    }
    pthread_mutex_unlock(&ctx->lock);
    fp_sampler_report(f, ctx->rank);
    fflush(f);
    if (out != NULL)
        fclose(out);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx->phase_stats);
    free(ctx);
    return 0;
}

FP_EXPORT const fp_profiler_v5_t ncclProfiler_v5 = {
    .name = "ferry-flush-prof",
    .init = fp_init,
    .start_event = fp_start_event,
    .stop_event = fp_stop_event,
    .record_state = fp_record_state,
    .finalize = fp_finalize,
};
