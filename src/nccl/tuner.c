/*
 * ncclTunerPlugin_v3..v5: ferry's bundled tuner (policy: core/tune.h). NCCL
 * finds it in this library when NCCL_TUNER_PLUGIN is unset and no
 * libnccl-tuner.so is installed; NCCL_TUNER_PLUGIN=none or
 * NCCL_FERRY_TUNER=0 turns it off. One context per communicator.
 */
#include <stdlib.h>

#include "core/log.h"
#include "core/tune.h"
#include "nccl/plugin.h"
#include "nccl/tuner.h"

/* core/tune.h restates NCCL's indices so the core needs no NCCL header. */
FERRY_ABI_ASSERT(FERRY_TUNE_ALGO_TREE == NCCL_ALGO_TREE && FERRY_TUNE_ALGO_RING == NCCL_ALGO_RING,
                 "algorithm indices");
FERRY_ABI_ASSERT(FERRY_TUNE_PROTO_LL == NCCL_PROTO_LL && FERRY_TUNE_PROTO_LL128 == NCCL_PROTO_LL128 &&
                     FERRY_TUNE_PROTO_SIMPLE == NCCL_PROTO_SIMPLE,
                 "protocol indices");
FERRY_ABI_ASSERT(FERRY_TUNE_BROADCAST == ncclFuncBroadcast && FERRY_TUNE_REDUCE == ncclFuncReduce &&
                     FERRY_TUNE_ALL_GATHER == ncclFuncAllGather &&
                     FERRY_TUNE_REDUCE_SCATTER == ncclFuncReduceScatter &&
                     FERRY_TUNE_ALL_REDUCE == ncclFuncAllReduce,
                 "collective kinds");

static ncclResult_t ferry_tuner_open(size_t nranks, size_t nnodes, ncclDebugLogger_t log_fn,
                                     void **ctx_p)
{
    ferry_tune_t *t;

    if (ctx_p == NULL)
        return ncclInvalidArgument;
    *ctx_p = NULL;
    if (log_fn != NULL)
        ferry_log_set(ferry_nccl_log_fn(log_fn));
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        FERRY_WARN("tuner: out of memory for a %zu-rank communicator's context; NCCL falls "
                   "back to its own tuning", nranks);
        return ncclSystemError;
    }
    ferry_tune_setup(t, nranks, nnodes);
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_TUNING, "tuner for %zu ranks on %zu nodes: %s", nranks,
               nnodes, t->why);
    *ctx_p = t;
    return ncclSuccess;
}

static ncclResult_t ferry_tuner_coll(void *ctx, ncclFunc_t coll, size_t nbytes, int num_pipe_ops,
                                     float **cost_table, int nalgo, int nproto, int reg_buff,
                                     int *nchannels)
{
    (void)num_pipe_ops;
    (void)reg_buff;
    /* NCCL passes its float[nalgo][nproto] cast to float**. */
    ferry_tune_coll(ctx, (int)coll, nbytes, (float *)cost_table, nalgo, nproto, nchannels);
    return ncclSuccess;
}

static ncclResult_t ferry_tuner_close(void *ctx)
{
    free(ctx);
    return ncclSuccess;
}

static ncclResult_t ferry_tuner_v5_init(void **ctx_p, uint64_t comm_id, size_t nranks,
                                        size_t nnodes, ncclDebugLogger_t log_fn,
                                        ncclNvlDomainInfo_v5_t *nvl, ncclTunerConstants_v5_t *constants)
{
    /* NCCL's constants stay: the correction is per collective, in the cost table. */
    (void)comm_id;
    (void)nvl;
    (void)constants;
    return ferry_tuner_open(nranks, nnodes, log_fn, ctx_p);
}

static ncclResult_t ferry_tuner_v3_coll(void *ctx, ncclFunc_t coll, size_t nbytes,
                                        int num_pipe_ops, float **cost_table, int nalgo,
                                        int nproto, int *nchannels)
{
    return ferry_tuner_coll(ctx, coll, nbytes, num_pipe_ops, cost_table, nalgo, nproto, 0,
                            nchannels);
}

FERRY_NCCL_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name        = FERRY_NCCL_NAME,
    .init        = ferry_tuner_v5_init,
    .getCollInfo = ferry_tuner_coll,
    .finalize    = ferry_tuner_close,
};

FERRY_NCCL_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {
    .name        = FERRY_NCCL_NAME,
    .init        = ferry_tuner_open,
    .getCollInfo = ferry_tuner_coll,
    .destroy     = ferry_tuner_close,
};

FERRY_NCCL_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {
    .name        = FERRY_NCCL_NAME,
    .init        = ferry_tuner_open,
    .getCollInfo = ferry_tuner_v3_coll,
    .destroy     = ferry_tuner_close,
};
