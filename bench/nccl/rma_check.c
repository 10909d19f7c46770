/*
 * rma_check: NCCL's host one-sided API (NCCL >= 2.30) between 2 MPI ranks,
 * checked byte for byte and timed. Built and run by rma_check.sh; see there
 * for the environment that makes NCCL use ferry's RMA plugin.
 *
 *   mpirun -np 2 rma_check [-b 8] [-e 64M] [-f 4] [-c 2] [-m 0.2] [-t 60] [-w 3] [-n 100000]
 *
 * Both ranks allocate a send and a receive buffer with ncclMemAlloc and
 * register each as a symmetric window (ncclPutSignal takes its source from a
 * symmetric window and writes into the peer's). Per size, from -b to -e in
 * steps of x -f (and -e itself):
 *   check  -c iterations in each direction: the receiver fills its buffer and
 *          a guard beyond it with the complement of what it expects (so every
 *          byte must change), the sender fills its source with a pattern of
 *          size, iteration and direction, then ncclPutSignal / ncclWaitSignal,
 *          and the receiver copies the buffer back and compares every byte;
 *          the guard must be untouched;
 *   time   a ping-pong (0 puts to 1, 1 waits and puts back, 0 waits), each
 *          round trip timed on rank 0; enough round trips that the size runs
 *          -m seconds (at least 5, at most -n). One-way time is half the
 *          median round trip; GB/s is size over that.
 * Every stream wait is bounded by -t seconds and polls NCCL's async error:
 * a stuck operation fails naming what it waited for, instead of hanging.
 * Output lines (parsed by rma_check.sh):
 *   check size=S iters=K dirs=0->1,1->0 ok
 *   perf size=S iters=N median_rtt_us=.. min_rtt_us=.. oneway_us=.. gbps=..
 *   rma_check: PASS ... | rma_check: FAIL ...
 * Exit status 0 only when every byte of every check was right.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#define OC_PROG "rma_check"
#include "onesided_common.h"

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 23000
#error "rma_check needs NCCL 2.30 or later (ncclPutSignal, ncclWaitSignal, symmetric windows)"
#endif

typedef struct {
    int rank, peer;
    ncclComm_t comm;
    cudaStream_t stream;
    void *send_buf, *recv_buf;
    ncclWindow_t send_win, recv_win;
    size_t win_bytes;
    unsigned char *host;
    const oc_opts_t *o;
} rc_ctx_t;

/* Waits for everything queued on the context's stream, at most -t seconds. */
static void rc_wait(rc_ctx_t *c, const char *what, size_t size, int iter)
{
    double deadline = oc_now() + c->o->timeout_s;
    unsigned polls = 0;

    for (;;) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady)
            oc_die("%s, size %zu, iteration %d: the stream failed: %s", what, size, iter,
                   cudaGetErrorString(e));
        if ((++polls & 1023) == 0) {
            ncclResult_t async = ncclSuccess;
            ncclCommGetAsyncError(c->comm, &async);
            if (async != ncclSuccess && async != ncclInProgress)
                oc_die("%s, size %zu, iteration %d: NCCL reports %s: %s", what, size, iter,
                       ncclGetErrorString(async), ncclGetLastError(c->comm));
            if (oc_now() > deadline)
                oc_die("%s, size %zu, iteration %d: not done after %.0f s (peer rank %d); "
                       "NCCL's log (NCCL_DEBUG=INFO) tells whether the RMA plugin connected",
                       what, size, iter, c->o->timeout_s, c->peer);
        }
    }
}

static void rc_put(rc_ctx_t *c, size_t size)
{
    CK_NCCL(c->comm, ncclPutSignal(c->send_buf, size, ncclUint8, c->peer, c->recv_win, 0,
                             0 /* sigIdx */, 0 /* ctx */, 0 /* flags */, c->comm, c->stream));
}

static void rc_wait_signal(rc_ctx_t *c)
{
    ncclWaitSignalDesc_t d = { .opCnt = 1, .peer = c->peer, .sigIdx = 0, .ctx = 0 };

    CK_NCCL(c->comm, ncclWaitSignal(1, &d, c->comm, c->stream));
}

/* One checked transfer from rank DIR to the other rank. Returns the number of
 * wrong bytes (on the receiver; 0 on the sender), after printing the first. */
static size_t rc_check_one(rc_ctx_t *c, size_t size, int iter, int dir)
{
    int sender = dir == 0 ? 0 : 1;
    size_t guard = c->win_bytes - size < OC_GUARD ? c->win_bytes - size : OC_GUARD;
    size_t bad = 0, i;

    if (c->rank == sender) {
        for (i = 0; i < size; i++)
            c->host[i] = oc_pattern(i, size, iter, dir);
        CK_CUDA(cudaMemcpy(c->send_buf, c->host, size, cudaMemcpyHostToDevice));
    } else {
        for (i = 0; i < size + guard; i++)
            c->host[i] = (unsigned char)~oc_pattern(i, size, iter, dir);
        CK_CUDA(cudaMemcpy(c->recv_buf, c->host, size + guard, cudaMemcpyHostToDevice));
    }
    /* The receiver's buffer is reset before the put may land in it. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank == sender) {
        rc_put(c, size);
        rc_wait(c, "ncclPutSignal (check)", size, iter);
        return 0;
    }
    rc_wait_signal(c);
    rc_wait(c, "ncclWaitSignal (check)", size, iter);
    CK_CUDA(cudaMemcpy(c->host, c->recv_buf, size + guard, cudaMemcpyDeviceToHost));
    for (i = 0; i < size + guard; i++) {
        unsigned char want = i < size ? oc_pattern(i, size, iter, dir)
                                      : (unsigned char)~oc_pattern(i, size, iter, dir);
        if (c->host[i] == want)
            continue;
        if (bad++ == 0)
            fprintf(stderr,
                    "rma_check: MISMATCH size %zu direction %d->%d iteration %d offset %zu%s: "
                    "expected 0x%02x got 0x%02x\n",
                    size, sender, 1 - sender, iter, i,
                    i < size ? "" : " (past the end of the put: must stay untouched)", want,
                    c->host[i]);
    }
    if (bad)
        fprintf(stderr, "rma_check: size %zu direction %d->%d iteration %d: %zu of %zu bytes "
                "wrong\n", size, sender, 1 - sender, iter, bad, size + guard);
    return bad;
}

/* One ping-pong round trip of SIZE bytes; returns its time on rank 0. */
static double rc_round_trip(rc_ctx_t *c, size_t size, int iter)
{
    double t0 = oc_now();

    if (c->rank == 0) {
        rc_put(c, size);
        rc_wait_signal(c);
    } else {
        rc_wait_signal(c);
        rc_put(c, size);
    }
    rc_wait(c, "ping-pong (ncclPutSignal + ncclWaitSignal)", size, iter);
    return oc_now() - t0;
}

static int rc_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void rc_time_size(rc_ctx_t *c, size_t size)
{
    const oc_opts_t *o = c->o;
    double calib = 0, *t;
    int n, i;

    for (i = 0; i < o->warmup; i++)
        rc_round_trip(c, size, -1 - i);
    for (i = 0; i < 3; i++)
        calib += rc_round_trip(c, size, -100 - i);
    calib /= 3;
    n = (int)(o->min_time / (calib > 1e-7 ? calib : 1e-7)) + 1;
    if (n < 5)
        n = 5;
    if (n > o->max_iters)
        n = o->max_iters;
    /* Both ranks run the same number of round trips: rank 0 decides. */
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    t = calloc((size_t)n, sizeof(*t));
    if (t == NULL)
        oc_die("out of memory for %d timings", n);
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < n; i++)
        t[i] = rc_round_trip(c, size, i);
    if (c->rank == 0) {
        double med, oneway;
        qsort(t, (size_t)n, sizeof(*t), rc_cmp_double);
        med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
        oneway = med / 2;
        printf("perf size=%zu iters=%d median_rtt_us=%.2f min_rtt_us=%.2f oneway_us=%.2f "
               "gbps=%.6f\n", size, n, med * 1e6, t[0] * 1e6, oneway * 1e6,
               (double)size / oneway / 1e9);
        fflush(stdout);
    }
    free(t);
}

int main(int argc, char **argv)
{
    oc_opts_t o;
    rc_ctx_t c = { 0 };
    ncclUniqueId id;
    size_t sizes[OC_MAX_SIZES], checked = 0;
    uint64_t bad = 0, total_bad = 0;
    int nsizes, nranks, version = 0, dev, i, it, dir;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    oc_rank = c.rank;
    oc_parse(argc, argv, &o);
    c.o = &o;
    if (nranks != 2)
        oc_die("needs exactly 2 ranks (mpirun -np 2), got %d", nranks);
    c.peer = 1 - c.rank;
    dev = oc_device();
    CK_CUDA(cudaSetDevice(dev));
    CK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    ncclGetVersion(&version);
    if (c.rank == 0) {
        printf("rma_check: NCCL %d (built against %d), 2 ranks, device %d, %zu..%zu bytes x%d, "
               "%d checked iterations per direction, >= %.2f s timed per size, waits bounded "
               "by %.0f s\n", version, NCCL_VERSION_CODE, dev, o.min_size, o.max_size,
               o.factor, o.check_iters, o.min_time, o.timeout_s);
        fflush(stdout);
        CK_NCCL(NULL, ncclGetUniqueId(&id));
    }
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    CK_NCCL(c.comm, ncclCommInitRank(&c.comm, 2, id, c.rank));

    /* Room for the guard, rounded to the window alignment NCCL requires. */
    c.win_bytes = (o.max_size + OC_GUARD + NCCL_WIN_REQUIRED_ALIGNMENT - 1) /
                  NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
    CK_NCCL(c.comm, ncclMemAlloc(&c.send_buf, c.win_bytes));
    CK_NCCL(c.comm, ncclMemAlloc(&c.recv_buf, c.win_bytes));
    /* Collective: both ranks register the same buffers in the same order. */
    CK_NCCL(c.comm, ncclCommWindowRegister(c.comm, c.send_buf, c.win_bytes, &c.send_win,
                                       NCCL_WIN_COLL_SYMMETRIC));
    CK_NCCL(c.comm, ncclCommWindowRegister(c.comm, c.recv_buf, c.win_bytes, &c.recv_win,
                                       NCCL_WIN_COLL_SYMMETRIC));
    c.host = malloc(c.win_bytes);
    if (c.host == NULL)
        oc_die("out of memory for a %zu-byte host buffer", c.win_bytes);

    nsizes = oc_sizes(&o, sizes);
    for (i = 0; i < nsizes; i++) {
        size_t size = sizes[i];
        bad = 0;
        for (it = 0; it < o.check_iters; it++)
            for (dir = 0; dir < 2; dir++)
                bad += rc_check_one(&c, size, it, dir);
        MPI_Allreduce(&bad, &total_bad, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (total_bad) {
            if (c.rank == 0)
                printf("check size=%zu iters=%d dirs=0->1,1->0 FAILED: %" PRIu64 " wrong bytes\n",
                       size, o.check_iters, total_bad);
            break;
        }
        checked += 2 * (size_t)o.check_iters * size;
        if (c.rank == 0) {
            printf("check size=%zu iters=%d dirs=0->1,1->0 ok\n", size, o.check_iters);
            fflush(stdout);
        }
        rc_time_size(&c, size);
    }

    CK_NCCL(c.comm, ncclCommWindowDeregister(c.comm, c.recv_win));
    CK_NCCL(c.comm, ncclCommWindowDeregister(c.comm, c.send_win));
    CK_NCCL(c.comm, ncclMemFree(c.recv_buf));
    CK_NCCL(c.comm, ncclMemFree(c.send_buf));
    CK_NCCL(NULL, ncclCommDestroy(c.comm));
    CK_CUDA(cudaStreamDestroy(c.stream));
    free(c.host);
    if (c.rank == 0) {
        if (total_bad)
            printf("rma_check: FAIL: %" PRIu64 " wrong bytes at size %zu (first mismatch above, on "
                   "stderr)\n", total_bad, sizes[i]);
        else
            printf("rma_check: PASS: %d sizes, %zu bytes checked byte for byte, both "
                   "directions\n", nsizes, checked);
    }
    MPI_Finalize();
    return total_bad ? 1 : 0;
}
