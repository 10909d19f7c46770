/*
 * One rank: a process of its own, forked by the parent before any CUDA call.
 * Rank 0 creates the ncclUniqueId and publishes it in the shared page; every
 * rank then runs each (op, size) test the same way:
 *
 *   fill send from the host pattern, fill recv with NaN (0xff bytes), so an
 *   element NCCL never wrote cannot pass; warmup; barrier; time `iters`
 *   launches up to cudaStreamSynchronize; copy recv back and count wrong
 *   elements; publish time and count; barrier; rank 0 prints the row.
 *
 * Out-of-place collectives give the same output on every iteration, so the
 * buffer checked after the timed loop is the result of the last iteration.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fnb.h"
#include "fnb_report.h"

#define FNB_PRINT_WRONG 5 /* Mismatches printed per test and rank. */

typedef struct fnb_rank {
    const fnb_opts_t *o;
    fnb_shared_t     *sh;
    int               rank;
    double            deadline;  /* The parent kills us later anyway; this ends our own waits. */
    ncclComm_t        comm;
    cudaStream_t      stream;
    float            *send;      /* Device, buf_bytes. */
    float            *recv;      /* Device, buf_bytes. */
    float            *host;      /* Pinned staging for fill and check, buf_bytes. */
    size_t            buf_bytes;
    fnb_report_t      report;    /* Rank 0 only. */
} fnb_rank_t;

static int fnb_cuda_ok(const fnb_rank_t *rk, cudaError_t err, const char *what)
{
    if (err == cudaSuccess) {
        return 1;
    }
    fprintf(stderr, "ferry_nccl_bench rank %d: %s: %s\n", rk->rank, what,
            cudaGetErrorString(err));
    return 0;
}

static int fnb_nccl_ok(const fnb_rank_t *rk, ncclResult_t res, const char *what)
{
    if (res == ncclSuccess) {
        return 1;
    }
    fprintf(stderr, "ferry_nccl_bench rank %d: %s: %s (%s)\n", rk->rank, what,
            ncclGetErrorString(res), ncclGetLastError(rk->comm));
    return 0;
}

#define FNB_CUDA(_rk, _call)                       \
    do {                                           \
        if (!fnb_cuda_ok((_rk), (_call), #_call)) { \
            return -1;                             \
        }                                          \
    } while (0)

#define FNB_NCCL(_rk, _call)                       \
    do {                                           \
        if (!fnb_nccl_ok((_rk), (_call), #_call)) { \
            return -1;                             \
        }                                          \
    } while (0)

int fnb_probe_gpus(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);

    if (err != cudaSuccess) {
        fprintf(stderr, "ferry_nccl_bench: cudaGetDeviceCount: %s\n", cudaGetErrorString(err));
        return -1;
    }
    return n;
}

static void fnb_pause_short(void)
{
    nanosleep(&(struct timespec){.tv_nsec = 20 * 1000}, NULL);
}

/* Waits for all ranks; -1 when a rank gave up or the deadline passed. */
static int fnb_barrier(fnb_rank_t *rk)
{
    fnb_shared_t *sh = rk->sh;
    unsigned gen = atomic_load_explicit(&sh->bar_gen, memory_order_acquire);

    if (atomic_fetch_add(&sh->bar_count, 1) + 1 == (unsigned)rk->o->nranks) {
        /* Nobody re-enters before bar_gen moves, so the reset cannot race. */
        atomic_store(&sh->bar_count, 0);
        atomic_fetch_add_explicit(&sh->bar_gen, 1, memory_order_release);
        return 0;
    }
    while (atomic_load_explicit(&sh->bar_gen, memory_order_acquire) == gen) {
        if (atomic_load(&sh->abort) || fnb_now() > rk->deadline) {
            fprintf(stderr, "ferry_nccl_bench rank %d: barrier abandoned\n", rk->rank);
            return -1;
        }
        fnb_pause_short();
    }
    return 0;
}

/* Rank 0 makes the id; the others wait for it in the shared page, bounded. */
static int fnb_unique_id_share(fnb_rank_t *rk, ncclUniqueId *id_p)
{
    fnb_shared_t *sh = rk->sh;

    if (rk->rank == 0) {
        FNB_NCCL(rk, ncclGetUniqueId(id_p));
        memcpy(&sh->unique_id, id_p, sizeof(*id_p));
        atomic_store_explicit(&sh->id_ready, 1, memory_order_release);
        return 0;
    }
    while (!atomic_load_explicit(&sh->id_ready, memory_order_acquire)) {
        if (atomic_load(&sh->abort) || fnb_now() > rk->deadline) {
            fprintf(stderr, "ferry_nccl_bench rank %d: no ncclUniqueId from rank 0\n", rk->rank);
            return -1;
        }
        nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL);
    }
    memcpy(id_p, &sh->unique_id, sizeof(*id_p));
    return 0;
}

static size_t fnb_max_size(const fnb_opts_t *o)
{
    size_t max = 0;

    for (int s = 0; s < o->nsizes; s++) {
        if (o->sizes[s] > max) {
            max = o->sizes[s];
        }
    }
    return max;
}

static int fnb_rank_setup(fnb_rank_t *rk)
{
    ncclUniqueId id;
    char host_id[32];

    /* Before any NCCL call: NCCL reads NCCL_HOSTID once, for the host hash. */
    if (rk->sh->split_hosts) {
        snprintf(host_id, sizeof(host_id), "host%d", rk->rank);
        setenv("NCCL_HOSTID", host_id, 1);
    }
    FNB_CUDA(rk, cudaSetDevice(rk->rank % rk->sh->ngpus));
    rk->buf_bytes = fnb_max_size(rk->o);
    FNB_CUDA(rk, cudaMalloc((void **)&rk->send, rk->buf_bytes));
    FNB_CUDA(rk, cudaMalloc((void **)&rk->recv, rk->buf_bytes));
    FNB_CUDA(rk, cudaMallocHost((void **)&rk->host, rk->buf_bytes));
    /* Non-blocking like nccl-tests: copies go on this stream too, so nothing
     * relies on the legacy default stream's implicit ordering. */
    FNB_CUDA(rk, cudaStreamCreateWithFlags(&rk->stream, cudaStreamNonBlocking));
    if (fnb_unique_id_share(rk, &id) != 0) {
        return -1;
    }
    FNB_NCCL(rk, ncclCommInitRank(&rk->comm, rk->o->nranks, id, rk->rank));
    return 0;
}

static void fnb_iters_for(const fnb_opts_t *o, size_t size_bytes, int *iters_p, int *warm_p)
{
    int iters = o->iters, warm = o->warmup;

    if (o->iter_bytes > 0 && size_bytes > 0) {
        size_t fit = o->iter_bytes / size_bytes;

        if (fit < FNB_MIN_CAPPED_ITERS) {
            fit = FNB_MIN_CAPPED_ITERS;
        }
        if (fit < (size_t)iters) {
            iters = (int)fit;
            /* One warmup already absorbs the lazy connection setup. */
            if (warm > iters / 4) {
                warm = iters / 4 > 0 ? iters / 4 : 1;
            }
        }
    }
    *iters_p = iters;
    *warm_p = warm;
}

static uint64_t fnb_check(fnb_rank_t *rk, const fnb_op_t *op, size_t count, size_t elems,
                          uint32_t salt)
{
    uint64_t wrong = 0;

    for (size_t i = 0; i < elems; i++) {
        float want = op->expect(i, count, rk->rank, rk->o->nranks, salt);

        /* != also catches the NaN sentinel of an element never written. */
        if (rk->host[i] != want) {
            if (wrong < FNB_PRINT_WRONG) {
                fprintf(stderr, "ferry_nccl_bench rank %d: %s count %zu: element %zu is %g, "
                        "expected %g\n", rk->rank, op->name, count, i, (double)rk->host[i],
                        (double)want);
            }
            wrong++;
        }
    }
    return wrong;
}

static int fnb_launch_n(fnb_rank_t *rk, const fnb_op_t *op, size_t count, int n)
{
    for (int i = 0; i < n; i++) {
        FNB_NCCL(rk, op->launch(rk->send, rk->recv, count, rk->rank, rk->o->nranks, rk->comm,
                                rk->stream));
    }
    FNB_CUDA(rk, cudaStreamSynchronize(rk->stream));
    return 0;
}

/* One (op, size) test on this rank; rank 0 also reports it. */
static int fnb_test_run(fnb_rank_t *rk, const fnb_op_t *op, size_t bytes, uint32_t salt)
{
    size_t count, send_elems, recv_elems, size_bytes;
    fnb_row_t row = {.op = op->name};
    double t0;

    op->counts(bytes, rk->o->nranks, &count, &send_elems, &recv_elems, &size_bytes);
    if (count == 0) {
        return 0;
    }
    fnb_iters_for(rk->o, size_bytes, &row.iters, &row.warmup);
    for (size_t j = 0; j < send_elems; j++) {
        rk->host[j] = fnb_value(rk->rank, j, salt);
    }
    FNB_CUDA(rk, cudaMemcpyAsync(rk->send, rk->host, send_elems * sizeof(float),
                                 cudaMemcpyHostToDevice, rk->stream));
    FNB_CUDA(rk, cudaMemsetAsync(rk->recv, 0xff, recv_elems * sizeof(float), rk->stream));
    /* fnb_launch_n ends in a stream sync (also for 0 warmups): host is free again after. */
    if (fnb_launch_n(rk, op, count, row.warmup) != 0 || fnb_barrier(rk) != 0) {
        return -1;
    }
    t0 = fnb_now();
    if (fnb_launch_n(rk, op, count, row.iters) != 0) {
        return -1;
    }
    rk->sh->slot[rk->rank].time_us = (fnb_now() - t0) * 1e6 / row.iters;
    FNB_CUDA(rk, cudaMemcpyAsync(rk->host, rk->recv, recv_elems * sizeof(float),
                                 cudaMemcpyDeviceToHost, rk->stream));
    FNB_CUDA(rk, cudaStreamSynchronize(rk->stream));
    rk->sh->slot[rk->rank].wrong = fnb_check(rk, op, count, recv_elems, salt);
    if (fnb_barrier(rk) != 0) {
        return -1;
    }
    if (rk->rank == 0) {
        /* Averaged over ranks like nccl-tests' default (-a 1). */
        for (int r = 0; r < rk->o->nranks; r++) {
            row.time_us += rk->sh->slot[r].time_us / rk->o->nranks;
            row.wrong += rk->sh->slot[r].wrong;
        }
        row.size_bytes = size_bytes;
        row.count = count;
        row.algbw = (double)size_bytes / (row.time_us * 1e-6) / 1e9;
        row.busbw = row.algbw * op->bus_factor(rk->o->nranks);
        fnb_report_row(&rk->report, &row);
    }
    return rk->sh->slot[rk->rank].wrong == 0 ? 0 : 1;
}

/* The path of the libnccl this process really loaded, for the record. */
static const char *fnb_nccl_path(void)
{
    void *dl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    struct link_map *map = NULL;

    if (dl == NULL || dlinfo(dl, RTLD_DI_LINKMAP, &map) != 0 || map == NULL) {
        return "?";
    }
    /* Still referenced by the executable after dlclose, so the name stays valid. */
    dlclose(dl);
    return map->l_name;
}

static int fnb_tests_run(fnb_rank_t *rk)
{
    int rc = 0;

    for (int id = 0; id < FNB_OP_LAST; id++) {
        if (!(rk->o->ops_mask & (1u << id))) {
            continue;
        }
        for (int s = 0; s < rk->o->nsizes; s++) {
            int r = fnb_test_run(rk, fnb_op_get((fnb_op_id_t)id), rk->o->sizes[s],
                                 (uint32_t)(id * 1000003 + s));

            if (r < 0) {
                return FNB_EXIT_ERROR;
            }
            if (r > 0) {
                rc = FNB_EXIT_WRONG;
            }
        }
    }
    return rc;
}

int fnb_rank_main(const fnb_opts_t *o, fnb_shared_t *sh, int rank)
{
    fnb_rank_t rk = {.o = o, .sh = sh, .rank = rank, .deadline = fnb_now() + o->timeout_s};
    int version = 0, rc;

    /* Rows must reach a pipe as they are made, not when a killed rank exits. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (fnb_rank_setup(&rk) != 0) {
        return FNB_EXIT_ERROR;
    }
    if (rank == 0) {
        ncclGetVersion(&version);
        if (fnb_report_open(&rk.report, o, sh, version, fnb_nccl_path()) != 0) {
            return FNB_EXIT_ERROR;
        }
    }
    rc = fnb_tests_run(&rk);
    if (rc == FNB_EXIT_ERROR) {
        /* Peers may be stuck in NCCL: no collective teardown, the parent stops them. */
        return rc;
    }
    if (!fnb_nccl_ok(&rk, ncclCommFinalize(rk.comm), "ncclCommFinalize") ||
        !fnb_nccl_ok(&rk, ncclCommDestroy(rk.comm), "ncclCommDestroy")) {
        return FNB_EXIT_ERROR;
    }
    if (rank == 0 && fnb_report_close(&rk.report) != 0) {
        return FNB_EXIT_ERROR;
    }
    cudaStreamDestroy(rk.stream);
    cudaFree(rk.send);
    cudaFree(rk.recv);
    cudaFreeHost(rk.host);
    return rc;
}
