/*
 * The five collectives: buffer sizes, launch, expected output, bus factor.
 *
 * Every rank fills its send buffer with fnb_value(rank, j, salt): small
 * integers (0..127) from a hash of the index, so float sums over any rank
 * count stay exact and a chunk landing at the wrong offset mismatches with
 * probability 127/128 per element (a periodic pattern would hide shifts by a
 * multiple of its period). Sizes and bus factors follow nccl-tests, so rows
 * compare with its output: "size" is the larger of the two buffers and
 * "count" the per-rank parameter NCCL gets.
 */
#include <string.h>

#include "fnb.h"

float fnb_value(int rank, size_t j, uint32_t salt)
{
    uint64_t x = (uint64_t)j * 0x9E3779B97F4A7C15ull + (uint64_t)rank * 0xC2B2AE3D27D4EB4Full + salt;

    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (float)(x & 127);
}

static float fnb_sum_over_ranks(size_t j, int nranks, uint32_t salt)
{
    float sum = 0.0f;

    for (int q = 0; q < nranks; q++) {
        sum += fnb_value(q, j, salt);
    }
    return sum;
}

/* all_reduce, broadcast, sendrecv: one buffer size on both sides. */
static void fnb_counts_flat(size_t bytes, int nranks, size_t *count_p, size_t *send_elems_p,
                            size_t *recv_elems_p, size_t *size_bytes_p)
{
    size_t count = bytes / sizeof(float);

    *count_p = count;
    *send_elems_p = count;
    *recv_elems_p = count;
    *size_bytes_p = count * sizeof(float);
}

static void fnb_counts_gather(size_t bytes, int nranks, size_t *count_p, size_t *send_elems_p,
                              size_t *recv_elems_p, size_t *size_bytes_p)
{
    size_t count = bytes / sizeof(float) / (size_t)nranks;

    *count_p = count;
    *send_elems_p = count;
    *recv_elems_p = count * (size_t)nranks;
    *size_bytes_p = count * (size_t)nranks * sizeof(float);
}

static void fnb_counts_scatter(size_t bytes, int nranks, size_t *count_p, size_t *send_elems_p,
                               size_t *recv_elems_p, size_t *size_bytes_p)
{
    size_t count = bytes / sizeof(float) / (size_t)nranks;

    *count_p = count;
    *send_elems_p = count * (size_t)nranks;
    *recv_elems_p = count;
    *size_bytes_p = count * (size_t)nranks * sizeof(float);
}

static ncclResult_t fnb_launch_all_reduce(const float *send, float *recv, size_t count, int rank,
                                          int nranks, ncclComm_t comm, cudaStream_t stream)
{
    return ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream);
}

static ncclResult_t fnb_launch_all_gather(const float *send, float *recv, size_t count, int rank,
                                          int nranks, ncclComm_t comm, cudaStream_t stream)
{
    return ncclAllGather(send, recv, count, ncclFloat, comm, stream);
}

static ncclResult_t fnb_launch_reduce_scatter(const float *send, float *recv, size_t count,
                                              int rank, int nranks, ncclComm_t comm,
                                              cudaStream_t stream)
{
    return ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm, stream);
}

static ncclResult_t fnb_launch_broadcast(const float *send, float *recv, size_t count, int rank,
                                         int nranks, ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(send, recv, count, ncclFloat, 0, comm, stream);
}

/* Ring neighbour exchange: every rank sends to rank+1 and receives from rank-1. */
static ncclResult_t fnb_launch_sendrecv(const float *send, float *recv, size_t count, int rank,
                                        int nranks, ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t res, end;

    res = ncclGroupStart();
    if (res != ncclSuccess) {
        return res;
    }
    res = ncclSend(send, count, ncclFloat, (rank + 1) % nranks, comm, stream);
    if (res == ncclSuccess) {
        res = ncclRecv(recv, count, ncclFloat, (rank + nranks - 1) % nranks, comm, stream);
    }
    /* The group must be closed even after a failed enqueue. */
    end = ncclGroupEnd();
    return res != ncclSuccess ? res : end;
}

static float fnb_expect_all_reduce(size_t i, size_t count, int rank, int nranks, uint32_t salt)
{
    return fnb_sum_over_ranks(i, nranks, salt);
}

static float fnb_expect_all_gather(size_t i, size_t count, int rank, int nranks, uint32_t salt)
{
    return fnb_value((int)(i / count), i % count, salt);
}

static float fnb_expect_reduce_scatter(size_t i, size_t count, int rank, int nranks,
                                       uint32_t salt)
{
    return fnb_sum_over_ranks((size_t)rank * count + i, nranks, salt);
}

static float fnb_expect_broadcast(size_t i, size_t count, int rank, int nranks, uint32_t salt)
{
    return fnb_value(0, i, salt);
}

static float fnb_expect_sendrecv(size_t i, size_t count, int rank, int nranks, uint32_t salt)
{
    return fnb_value((rank + nranks - 1) % nranks, i, salt);
}

/* nccl-tests' busBw factors: what each rank's link carries relative to algbw. */
static double fnb_bus_all_reduce(int nranks)
{
    return 2.0 * (nranks - 1) / nranks;
}

static double fnb_bus_gather_scatter(int nranks)
{
    return (double)(nranks - 1) / nranks;
}

static double fnb_bus_one(int nranks)
{
    return 1.0;
}

static const fnb_op_t fnb_ops[FNB_OP_LAST] = {
    [FNB_OP_ALL_REDUCE] = {
        .name       = "all_reduce",
        .counts     = fnb_counts_flat,
        .launch     = fnb_launch_all_reduce,
        .expect     = fnb_expect_all_reduce,
        .bus_factor = fnb_bus_all_reduce,
    },
    [FNB_OP_ALL_GATHER] = {
        .name       = "all_gather",
        .counts     = fnb_counts_gather,
        .launch     = fnb_launch_all_gather,
        .expect     = fnb_expect_all_gather,
        .bus_factor = fnb_bus_gather_scatter,
    },
    [FNB_OP_REDUCE_SCATTER] = {
        .name       = "reduce_scatter",
        .counts     = fnb_counts_scatter,
        .launch     = fnb_launch_reduce_scatter,
        .expect     = fnb_expect_reduce_scatter,
        .bus_factor = fnb_bus_gather_scatter,
    },
    [FNB_OP_BROADCAST] = {
        .name       = "broadcast",
        .counts     = fnb_counts_flat,
        .launch     = fnb_launch_broadcast,
        .expect     = fnb_expect_broadcast,
        .bus_factor = fnb_bus_one,
    },
    [FNB_OP_SENDRECV] = {
        .name       = "sendrecv",
        .counts     = fnb_counts_flat,
        .launch     = fnb_launch_sendrecv,
        .expect     = fnb_expect_sendrecv,
        .bus_factor = fnb_bus_one,
    },
};

const fnb_op_t *fnb_op_get(fnb_op_id_t id)
{
    return &fnb_ops[id];
}

/* Returns the op id, or -1. Accepts the nccl-tests binary names without _perf too. */
int fnb_op_parse(const char *name)
{
    static const struct {
        const char *alias;
        fnb_op_id_t id;
    } aliases[] = {
        {"allreduce", FNB_OP_ALL_REDUCE},
        {"allgather", FNB_OP_ALL_GATHER},
        {"reducescatter", FNB_OP_REDUCE_SCATTER},
        {"bcast", FNB_OP_BROADCAST},
        {"send_recv", FNB_OP_SENDRECV},
    };

    for (int id = 0; id < FNB_OP_LAST; id++) {
        if (strcmp(name, fnb_ops[id].name) == 0) {
            return id;
        }
    }
    for (size_t k = 0; k < sizeof(aliases) / sizeof(aliases[0]); k++) {
        if (strcmp(name, aliases[k].alias) == 0) {
            return (int)aliases[k].id;
        }
    }
    return -1;
}
