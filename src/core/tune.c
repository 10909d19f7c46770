/*
 * The bundled tuner's policy (why: core/tune.h). Pure arithmetic on NCCL's
 * cost table, so unit tests drive it with tables of their own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/api.h"
#include "core/tune.h"

/* NCCL's boolean variables: set to a non-zero number. */
static int ferry_tune_env_on(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && atoi(v) != 0;
}

void ferry_tune_setup(ferry_tune_t *t, size_t nranks, size_t nnodes)
{
    ferry_api_tuning_t s;
    const char *net = getenv("NCCL_NET");

    memset(t, 0, sizeof(*t));
    t->nranks = nranks;
    t->nnodes = nnodes;
    if (!ferry_api_tuning(&s)) {
        snprintf(t->why, sizeof(t->why), "off: ferry's net is not initialized in this process");
        return;
    }
    t->ll_bytes_per_us = (double)s.ll_bw_mbs;
    t->channel_bytes = s.channel_bytes;
    t->step_bytes = s.step_bytes;
    /*
     * The user's own channel settings win over ferry's per-size count, unless
     * the user also set ferry's (NCCL_MIN_NCHANNELS=8 to have NCCL open 8
     * channels, NCCL_FERRY_TUNER_CHANNEL_BYTES to still use few of them for
     * mid sizes).
     */
    if ((getenv("NCCL_MIN_NCHANNELS") != NULL || getenv("NCCL_MAX_NCHANNELS") != NULL) &&
        !s.channel_bytes_set)
        t->channel_bytes = 0;
    if (!s.enabled)
        snprintf(t->why, sizeof(t->why), "off: NCCL_FERRY_TUNER=0");
    else if (net != NULL && *net != '\0' && strcasecmp(net, "ferry") != 0)
        snprintf(t->why, sizeof(t->why), "off: NCCL_NET=%.64s selects another net", net);
    else if (!s.has_device)
        snprintf(t->why, sizeof(t->why), "off: ferry found no network device, NCCL uses another");
    else if (!s.host_staged)
        snprintf(t->why, sizeof(t->why),
                 "off: ferry's backend moves GPU memory directly, NCCL's model holds");
    else if (nnodes < 2 && !(ferry_tune_env_on("NCCL_P2P_DISABLE") &&
                             ferry_tune_env_on("NCCL_SHM_DISABLE")))
        snprintf(t->why, sizeof(t->why),
                 "off: all %zu ranks on one node, ferry carries none of this traffic", nranks);
    else {
        size_t off;

        t->active = 1;
        off = (size_t)snprintf(t->why, sizeof(t->why),
                               "on: LL/LL128 held to %d MB/s bus bandwidth; Simple gets one "
                               "channel per %zu bytes (at least %d)%s", s.ll_bw_mbs,
                               t->channel_bytes, FERRY_TUNE_MIN_CHANNELS,
                               t->channel_bytes != 0 ? ""
                               : s.channel_bytes != 0 ? " (off: NCCL_*_NCHANNELS set)"
                                                      : " (off: NCCL_FERRY_TUNER_CHANNEL_BYTES=0)");
        if (t->step_bytes != 0 && off < sizeof(t->why))
            snprintf(t->why + off, sizeof(t->why) - off, "; a ring whose step on %d channels "
                     "moves under %zu bytes gets one (NCCL_FERRY_TUNER_STEP_BYTES)",
                     FERRY_TUNE_MIN_CHANNELS, t->step_bytes);
    }
}

/* Bytes each rank moves per byte of the collective, as NCCL's busbw counts it. */
static double ferry_tune_bus_factor(int coll, size_t nranks)
{
    double n = (double)nranks;

    if (nranks < 2)
        return 0;
    switch (coll) {
    case FERRY_TUNE_ALL_REDUCE:     return 2.0 * (n - 1) / n;
    case FERRY_TUNE_ALL_GATHER:
    case FERRY_TUNE_REDUCE_SCATTER: return (n - 1) / n;
    case FERRY_TUNE_BROADCAST:
    case FERRY_TUNE_REDUCE:         return 1.0;
    default:                        return 0; /* Not a collective the model covers. */
    }
}

int ferry_tune_coll(const ferry_tune_t *t, int coll, size_t nbytes, float *table, int nalgo,
                    int nproto, int *nchannels)
{
    static const int algos[] = {FERRY_TUNE_ALGO_TREE, FERRY_TUNE_ALGO_RING};
    static const int ll[] = {FERRY_TUNE_PROTO_LL, FERRY_TUNE_PROTO_LL128};
    double factor, floor_us;
    float best = -1.0f;
    int best_a = -1, best_p = -1, changed = 0;
    size_t i, j;
    int a, p;

    if (t == NULL || !t->active || table == NULL || t->ll_bytes_per_us <= 0)
        return 0;
    factor = ferry_tune_bus_factor(coll, t->nranks);
    if (factor <= 0)
        return 0;
    floor_us = (double)nbytes * factor / t->ll_bytes_per_us;
    for (i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
        for (j = 0; j < sizeof(ll) / sizeof(ll[0]); j++) {
            float *cost;

            if (algos[i] >= nalgo || ll[j] >= nproto)
                continue;
            cost = &table[algos[i] * nproto + ll[j]];
            /* Negative: NCCL will not use it (NCCL_PROTO, NCCL_ALGO, unsupported). */
            if (*cost >= 0 && *cost < floor_us) {
                *cost = (float)floor_us;
                changed = 1;
            }
        }
    }
    for (a = 0; a < nalgo; a++) {
        for (p = 0; p < nproto; p++) {
            float cost = table[a * nproto + p];

            if (cost >= 0 && (best < 0 || cost < best)) {
                best = cost;
                best_a = a;
                best_p = p;
            }
        }
    }
    if (nchannels == NULL || *nchannels != 0 ||
        (best_a != FERRY_TUNE_ALGO_RING && best_a != FERRY_TUNE_ALGO_TREE))
        return changed;
    if (best_p == FERRY_TUNE_PROTO_SIMPLE && best_a == FERRY_TUNE_ALGO_RING &&
        t->step_bytes != 0 && nbytes >= (size_t)FERRY_TUNE_SIMPLE_CHANNEL_BYTES *
        FERRY_TUNE_MIN_CHANNELS && nbytes / (t->nranks * FERRY_TUNE_MIN_CHANNELS) < t->step_bytes) {
        /*
         * A ring's steps are a chain: each waits for the one before it on
         * the neighbour. Where one thread carries every channel's messages
         * (a rank with few CPUs), a second channel halves each message but
         * adds a message per step to that thread, and small steps cost
         * that thread per message, not per byte.
         */
        *nchannels = 1;
        return 1;
    }
    if (t->channel_bytes == 0)
        return changed;
    if (best_p == FERRY_TUNE_PROTO_SIMPLE) {
        size_t nc = nbytes / t->channel_bytes;

        /*
         * A small collective on more channels than NCCL gives it splits each
         * step into more, smaller messages: each one costs the network its
         * per-message work and the size no bandwidth.
         */
        if (nbytes < (size_t)FERRY_TUNE_SIMPLE_CHANNEL_BYTES * FERRY_TUNE_MIN_CHANNELS)
            return changed;
        if (nc < FERRY_TUNE_MIN_CHANNELS)
            nc = FERRY_TUNE_MIN_CHANNELS;
        if (nc < FERRY_TUNE_MAX_CHANNELS) {
            *nchannels = (int)nc;
            changed = 1;
        }
    } else if (nbytes >= FERRY_TUNE_LL_CHANNEL_BYTES * t->nranks * FERRY_TUNE_MIN_CHANNELS) {
        /*
         * LL's ceiling is the path's, not a channel's (2 and 4 channels both
         * stop at it), so more channels only add messages and slow a small
         * all_reduce down. Below this size NCCL itself uses fewer channels;
         * it keeps that choice.
         */
        *nchannels = FERRY_TUNE_MIN_CHANNELS;
        changed = 1;
    }
    return changed;
}
