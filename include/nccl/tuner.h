/*
 * NCCL's tuner plugin ABI, versions 3-5: the structs NCCL looks up as
 * ncclTunerPlugin_vN. NCCL (2.19+) loads the tuner from the net plugin's own
 * library when NCCL_TUNER_PLUGIN is unset and no libnccl-tuner.so exists, so
 * shipping one next to the net plugin is how a net plugin tells NCCL's cost
 * model what its transport really does (aws-ofi-nccl ships one too).
 *
 * The cost table is NCCL's float[numAlgo][numProto] of predicted times in
 * microseconds, passed as float**; -1.0 marks a combination NCCL will not use
 * (disabled by NCCL_ALGO/NCCL_PROTO or unsupported). NCCL picks the smallest
 * non-negative entry after getCollInfo returns. nChannels = 0 leaves NCCL's
 * channel count; a positive value caps the channels the collective uses.
 */
#ifndef FERRY_NCCL_TUNER_H
#define FERRY_NCCL_TUNER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Collective kinds (ncclFunc_t), stable since the tuner ABI exists. */
typedef enum {
    ncclFuncBroadcast     = 0,
    ncclFuncReduce        = 1,
    ncclFuncAllGather     = 2,
    ncclFuncReduceScatter = 3,
    ncclFuncAllReduce     = 4,
    ncclFuncSendRecv      = 5,
    ncclFuncSend          = 6,
    ncclFuncRecv          = 7,
    ncclNumFuncs          = 8  /* Newer NCCLs add more; the tuner ignores unknown ones. */
} ncclFunc_t;
FERRY_ABI_SIZE(ncclFunc_t, 4);

/* Cost-table indices. */
#define NCCL_ALGO_TREE           0
#define NCCL_ALGO_RING           1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN  3
#define NCCL_ALGO_NVLS           4
#define NCCL_ALGO_NVLS_TREE      5
#define NCCL_ALGO_PAT            6
#define NCCL_PROTO_LL            0
#define NCCL_PROTO_LL128         1
#define NCCL_PROTO_SIMPLE        2
#define NCCL_ALGO_PROTO_IGNORE   (-1.0f)

/* v5 dimensions of the constants block. */
#define NCCL_NUM_ALGORITHMS_V5      7
#define NCCL_NUM_PROTOCOLS_V5       3
#define NCCL_NUM_HW_LINKS_V5        3
#define NCCL_NUM_COMPCAPS_V5        4
#define NCCL_NUM_TUNING_SCALES_V5   3

typedef struct {
    int nNvlDomains;          /* NVLink domains in the communicator. */
    int minRanksPerNvlDomain;
    int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;
FERRY_ABI_SIZE(ncclNvlDomainInfo_v5_t, 12);

/* NCCL's model constants, in/out at init (v5): a tuner may rewrite them. */
typedef struct {
    double baseLatencies[NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
    double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
    double llMaxBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v5_t;
FERRY_ABI_SIZE(ncclTunerConstants_v5_t, 8 * (21 + 63 + 5 * 12));
FERRY_ABI_OFFSET(ncclTunerConstants_v5_t, hwLatencies, 8 * 21);
FERRY_ABI_OFFSET(ncclTunerConstants_v5_t, llMaxBws, 8 * (21 + 63));

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                         ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                         ncclTunerConstants_v5_t *constants);
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                                int numPipeOps, float **collCostTable, int numAlgo,
                                int numProto, int regBuff, int *nChannels);
    ncclResult_t (*finalize)(void *context);
} ncclTuner_v5_t;
FERRY_ABI_SIZE(ncclTuner_v5_t, 4 * sizeof(void *));
FERRY_ABI_SLOT(ncclTuner_v5_t, init, 1);
FERRY_ABI_SLOT(ncclTuner_v5_t, getCollInfo, 2);
FERRY_ABI_SLOT(ncclTuner_v5_t, finalize, 3);

/* v4: v3 plus regBuff (whether the user buffers are registered). */
typedef struct {
    const char *name;
    ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                         void **context);
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                                int numPipeOps, float **collCostTable, int numAlgo,
                                int numProto, int regBuff, int *nChannels);
    ncclResult_t (*destroy)(void *context);
} ncclTuner_v4_t;
FERRY_ABI_SIZE(ncclTuner_v4_t, 4 * sizeof(void *));
FERRY_ABI_SLOT(ncclTuner_v4_t, getCollInfo, 2);
FERRY_ABI_SLOT(ncclTuner_v4_t, destroy, 3);

/* v3: the first version with the cost table. */
typedef struct {
    const char *name;
    ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                         void **context);
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                                int numPipeOps, float **collCostTable, int numAlgo,
                                int numProto, int *nChannels);
    ncclResult_t (*destroy)(void *context);
} ncclTuner_v3_t;
FERRY_ABI_SIZE(ncclTuner_v3_t, 4 * sizeof(void *));
FERRY_ABI_SLOT(ncclTuner_v3_t, getCollInfo, 2);
FERRY_ABI_SLOT(ncclTuner_v3_t, destroy, 3);

#endif
