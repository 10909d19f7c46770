/*
 * What ferry's bundled NCCL tuner changes, ABI-neutral (src/nccl/tuner.c
 * adapts it to each tuner version).
 *
 * NCCL's cost model assumes its LL protocols reach half the link's bandwidth.
 * Over a host-staged network (the GPU writes into host memory, the transport
 * copies it, the peer's GPU polls host memory) they top out at a bus
 * bandwidth set by that path, whatever the link (NCCL_FERRY_TUNER_LL_BW), so
 * on a fast link NCCL picks LL up to 1 MiB where Simple is several times
 * faster.
 * The tuner puts that ceiling into LL's predicted time. It also keeps a
 * Simple collective to the channels its size can fill, so the channels a
 * fast link earns for large messages do not cost small ones.
 */
#ifndef FERRY_CORE_TUNE_H
#define FERRY_CORE_TUNE_H

#include <stddef.h>

/* NCCL's cost-table indices and collective kinds (pinned in src/nccl/tuner.c). */
#define FERRY_TUNE_ALGO_TREE       0
#define FERRY_TUNE_ALGO_RING       1
#define FERRY_TUNE_PROTO_LL        0
#define FERRY_TUNE_PROTO_LL128     1
#define FERRY_TUNE_PROTO_SIMPLE    2
#define FERRY_TUNE_BROADCAST       0
#define FERRY_TUNE_REDUCE          1
#define FERRY_TUNE_ALL_GATHER      2
#define FERRY_TUNE_REDUCE_SCATTER  3
#define FERRY_TUNE_ALL_REDUCE      4
/* Simple never gets fewer channels than NCCL opens for one NIC (one ring, doubled),
 * unless NCCL itself would use fewer (FERRY_TUNE_SIMPLE_CHANNEL_BYTES). */
#define FERRY_TUNE_MIN_CHANNELS    2
/*
 * NCCL's Simple bytes per channel (512 threads x 64 bytes): below that per
 * channel it drops channels itself, down to one. A tuner's count overrides
 * that drop, so below FERRY_TUNE_MIN_CHANNELS of these the tuner leaves the
 * count to NCCL, which then opens fewer channels than the minimum.
 */
#define FERRY_TUNE_SIMPLE_CHANNEL_BYTES 32768
/* NCCL's LL bytes per channel and rank (512 threads x 8 bytes): it drops channels below that. */
#define FERRY_TUNE_LL_CHANNEL_BYTES 4096
/* At or above this many, the cap is left off (NCCL has at most 64). */
#define FERRY_TUNE_MAX_CHANNELS    64

typedef struct ferry_tune {
    int    active;          /* 0: NCCL's choices stay as they are. */
    size_t nranks;
    size_t nnodes;
    double ll_bytes_per_us; /* LL/LL128 bus bandwidth ceiling (1 MB/s = 1 byte/us). */
    size_t channel_bytes;   /* Simple: collective bytes per channel; 0 leaves channels alone. */
    size_t step_bytes;      /* Simple rings: one channel below this step on 2; 0: off. */
    char   why[288];        /* What decided active, for the log. */
} ferry_tune_t;

/*
 * Fill t for one communicator from ferry's configuration and state: active
 * only when ferry's net is up with a host-staged backend, NCCL_NET does not
 * name another net, NCCL_FERRY_TUNER=1 and ferry carries the communicator's
 * traffic: it spans nodes, or NCCL_P2P_DISABLE and NCCL_SHM_DISABLE force
 * even same-node peers onto the network.
 * Every input is the same on every rank of a job, so every rank decides alike.
 */
void ferry_tune_setup(ferry_tune_t *t, size_t nranks, size_t nnodes);

/*
 * Adjust NCCL's cost table (float[nalgo][nproto], microseconds, < 0 =
 * unusable) for one collective and maybe cap *nchannels. coll is NCCL's
 * ncclFunc_t value. Returns 1 when something changed.
 */
int ferry_tune_coll(const ferry_tune_t *t, int coll, size_t nbytes, float *table, int nalgo,
                    int nproto, int *nchannels);

#endif
