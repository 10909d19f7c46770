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
    oc_stream_wait(c->stream, c->comm, what, size, iter, c->o->timeout_s, c->peer,
                   "NCCL's log (NCCL_DEBUG=INFO) tells whether the RMA plugin connected", 0);
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
    oc_check_prepare(c->rank, dir, c->host, c->send_buf, c->recv_buf, c->win_bytes, size, iter);
    /* The receiver's buffer is reset before the put may land in it. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank == dir) {
        rc_put(c, size);
        rc_wait(c, "ncclPutSignal (check)", size, iter);
        return 0;
    }
    rc_wait_signal(c);
    rc_wait(c, "ncclWaitSignal (check)", size, iter);
    return oc_check_compare(dir, c->host, c->recv_buf, c->win_bytes, size, iter);
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

/* The shared sweep's view of this program's check and timing. */
static size_t rc_check_cb(void *c, size_t size, int iter, int who)
{
    return rc_check_one((rc_ctx_t *)c, size, iter, who);
}

static void rc_time_cb(void *c, size_t size)
{
    rc_time_size((rc_ctx_t *)c, size);
}

int main(int argc, char **argv)
{
    oc_opts_t o;
    rc_ctx_t c = { 0 };
    oc_sweep_t sweep;

    (void)oc_start(&argc, &argv, &o, &c.rank, &c.stream, &c.comm);
    c.o = &o;
    c.peer = 1 - c.rank;

    oc_windows(c.comm, o.max_size, &c.send_buf, &c.recv_buf, &c.send_win, &c.recv_win, &c.win_bytes,
               &c.host);

    oc_sweep(&o, c.rank, &c, rc_check_cb, rc_time_cb, &sweep);

    oc_windows_free(c.comm, c.send_buf, c.recv_buf, c.send_win, c.recv_win, c.host);
    CK_NCCL(NULL, ncclCommDestroy(c.comm));
    CK_CUDA(cudaStreamDestroy(c.stream));
    return oc_finish(c.rank, &sweep);
}
