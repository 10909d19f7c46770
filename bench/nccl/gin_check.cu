/*
 * gin_check: NCCL's Device API GIN (GPU-initiated networking, NCCL >= 2.30)
 * between 2 MPI ranks, checked byte for byte and timed. A kernel puts from
 * its rank's window into the peer's window with a signal increment, and
 * waits on its own signal for the peer's put. Built and run by rma_check.sh,
 * which sets NCCL_GIN_TYPE=2: NCCL's GIN CPU proxy, which moves the bytes
 * through the RMA plugin (ferry's, for the ferry runs).
 *
 *   mpirun -np 2 gin_check [-b 8] [-e 64M] [-f 4] [-c 2] [-m 0.2] [-t 60] [-w 3] [-n 100000]
 *
 * Both ranks allocate a send and a receive buffer with ncclMemAlloc, register
 * each as a symmetric window, and create a device communicator with one GIN
 * context and one GIN signal (index 0). Per size, from -b to -e in steps of
 * x -f (and -e itself):
 *   check  -c iterations in each direction: the receiver fills its buffer and
 *          a guard beyond it with the complement of what it expects, the
 *          sender fills its source with a pattern of size, iteration and
 *          sending rank; the sender's kernel puts with a signal increment and
 *          flushes, the receiver's kernel waits until its signal reaches the
 *          count of puts it was sent; the receiver copies the buffer back and
 *          compares every byte; the guard must be untouched;
 *   time   a ping-pong inside one kernel per rank: rank 0 puts and waits for
 *          the reply, rank 1 waits and puts back; rank 0 times each round
 *          trip with the GPU's global timer. Enough round trips that the size
 *          runs -m seconds (at least 5, at most -n). One-way time is half the
 *          median round trip; GB/s is size over that.
 * Every wait is bounded: a kernel's signal wait gives up after -t seconds of
 * the GPU's global timer and reports it in a status word the host reads; the
 * host polls the stream (cudaStreamQuery) for at most -t seconds plus the
 * expected run time of the kernel, checking NCCL's async error meanwhile.
 * Output lines (parsed by rma_check.sh):
 *   gin_check: NCCL <code> (built against <code>), ...
 *   check size=S iters=K dirs=0->1,1->0 ok
 *   perf size=S iters=N median_rtt_us=.. min_rtt_us=.. oneway_us=.. gbps=..
 *   gin_check: PASS ... | gin_check: FAIL ...
 * Exit status 0 only when every byte of every check was right.
 */
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
/* The C API only: Open MPI's C++ bindings do not build warning-free. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
/* NCCL's device headers leave parameters unused and its initializer macros
 * leave fields to their defaults: their warnings, not ours. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <nccl.h>
#include <nccl_device.h>
#pragma GCC diagnostic pop

#define OC_PROG "gin_check"
#include "onesided_common.h"

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 23000
#error "gin_check needs NCCL 2.30 or later (the Device API's GIN)"
#endif

/* The one GIN context and the one signal this program asks for. */
#define GC_CONTEXT 0
#define GC_SIGNAL 0

/* What a kernel reports back; in device memory, read by the host after the
 * kernel ended. */
typedef struct {
    int done;                 /* iterations completed */
    int timed_out;            /* 1: a signal wait gave up after the bound */
    unsigned long long seen;  /* the signal's value when it gave up */
    unsigned long long want;  /* the value it waited for */
} gc_status_t;

/* One kernel's work: ITERS rounds of (put, wait) or (wait, put). */
typedef struct {
    ncclWindow_t send_win, recv_win;
    size_t size;
    int peer, iters;
    int do_put, do_wait, put_first;
    unsigned long long sig_base; /* the signal before this kernel's first wait */
    unsigned long long timeout_ns;
    unsigned long long *times;   /* per-round nanoseconds, or NULL */
    gc_status_t *status;
} gc_args_t;

typedef struct {
    int rank, peer;
    ncclComm_t comm;
    ncclDevComm dev_comm;
    cudaStream_t stream;
    void *send_buf, *recv_buf;
    ncclWindow_t send_win, recv_win;
    size_t win_bytes;
    unsigned char *host;
    gc_status_t *d_status;
    unsigned long long *d_times, *d_sig;
    int times_cap;
    /* The signal's value before any put, plus the puts received since. */
    unsigned long long sig_expect;
    const oc_opts_t *o;
} gc_ctx_t;

/* The GPU's global timer in nanoseconds: the same rate on every GPU clock. */
static __device__ __forceinline__ unsigned long long gc_gpu_ns(void)
{
    unsigned long long t;

    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Reads the signal's value into OUT: the base the host counts puts from. */
static __global__ void gc_read_signal_kernel(ncclDevComm dev_comm, unsigned long long *out)
{
    ncclGin gin(dev_comm, GC_CONTEXT);

    *out = gin.readSignal(GC_SIGNAL);
}

/* One thread: every GIN call here is a single-thread operation (the default
 * ncclCoopThread). A wait polls the signal instead of gin.waitSignal, which
 * spins without a bound. */
static __global__ void gc_kernel(ncclDevComm dev_comm, gc_args_t a)
{
    ncclGin gin(dev_comm, GC_CONTEXT);
    ncclTeam world = ncclTeamWorld(dev_comm);
    int i;

    a.status->timed_out = 0;
    for (i = 0; i < a.iters; i++) {
        unsigned long long t0 = gc_gpu_ns();

        if (a.do_put && a.put_first)
            gin.put(world, a.peer, a.recv_win, 0, a.send_win, 0, a.size,
                    ncclGin_WeakSignalInc{GC_SIGNAL});
        if (a.do_wait) {
            unsigned long long want = a.sig_base + (unsigned long long)i + 1, v;
            unsigned long long start = gc_gpu_ns();

            /* Rolling comparison, as NCCL's own waits do. */
            while ((long long)((v = gin.readSignal(GC_SIGNAL)) - want) < 0) {
                if (gc_gpu_ns() - start > a.timeout_ns) {
                    a.status->timed_out = 1;
                    a.status->seen = v;
                    a.status->want = want;
                    break;
                }
            }
            if (a.status->timed_out)
                break;
        }
        if (a.do_put && !a.put_first)
            gin.put(world, a.peer, a.recv_win, 0, a.send_win, 0, a.size,
                    ncclGin_WeakSignalInc{GC_SIGNAL});
        if (a.times != NULL)
            a.times[i] = gc_gpu_ns() - t0;
    }
    a.status->done = i;
    /* The host rewrites the source after this kernel: every put must have
     * consumed it (flush says so; it does not wait for the remote side). */
    if (a.do_put && !a.status->timed_out)
        gin.flush(ncclCoopThread());
}

/* Waits for the kernel on the stream, at most -t seconds plus EXPECTED_S,
 * then reads its status: a signal wait that gave up fails with what it saw. */
static void gc_wait(gc_ctx_t *c, const char *what, size_t size, int iter, double expected_s)
{
    double bound = c->o->timeout_s + expected_s + 5;
    gc_status_t st;

    oc_stream_wait(c->stream, c->comm, what, size, iter, bound, c->peer,
                   "the kernel is stuck in a GIN put or flush (the GIN proxy's queue does not "
                   "drain); NCCL's log (NCCL_DEBUG=INFO) tells which GIN plugin was assigned", 1);
    CK_CUDA(cudaMemcpy(&st, c->d_status, sizeof(st), cudaMemcpyDeviceToHost));
    if (st.timed_out)
        oc_die("%s, size %zu, iteration %d: GIN signal %d not reached after %.0f s: it is %llu, "
               "waited for %llu (the put from peer rank %d did not land; NCCL's log tells "
               "whether the GIN proxy connected)", what, size, iter + st.done, GC_SIGNAL,
               c->o->timeout_s, st.seen, st.want, c->peer);
}

/* Launches one kernel of ITERS rounds and waits for it. Returns the rounds'
 * GPU times in c->d_times when TIMED. */
static void gc_launch(gc_ctx_t *c, const char *what, size_t size, int iter, int iters, int do_put,
                      int do_wait, int put_first, int timed, double expected_s)
{
    gc_args_t a;

    memset(&a, 0, sizeof(a));
    a.send_win = c->send_win;
    a.recv_win = c->recv_win;
    a.size = size;
    a.peer = c->peer;
    a.iters = iters;
    a.do_put = do_put;
    a.do_wait = do_wait;
    a.put_first = put_first;
    a.sig_base = c->sig_expect;
    a.timeout_ns = (unsigned long long)(c->o->timeout_s * 1e9);
    a.times = timed ? c->d_times : NULL;
    a.status = c->d_status;
    gc_kernel<<<1, 1, 0, c->stream>>>(c->dev_comm, a);
    CK_CUDA(cudaGetLastError());
    gc_wait(c, what, size, iter, expected_s);
    if (do_wait)
        c->sig_expect += (unsigned long long)iters;
}

/* One checked transfer from rank FROM to the other rank. Returns the number
 * of wrong bytes (on the receiver; 0 on the sender), after printing the first. */
static size_t gc_check_one(gc_ctx_t *c, size_t size, int iter, int from)
{
    oc_check_prepare(c->rank, from, c->host, c->send_buf, c->recv_buf, c->win_bytes, size, iter);
    /* The receiver's buffer is reset before the put may land in it. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank == from) {
        gc_launch(c, "GIN put + signal + flush (check)", size, iter, 1, 1, 0, 1, 0, 0);
        return 0;
    }
    gc_launch(c, "GIN signal wait (check)", size, iter, 1, 0, 1, 0, 0, 0);
    return oc_check_compare(from, c->host, c->recv_buf, c->win_bytes, size, iter);
}

/* N ping-pong round trips in one kernel per rank; returns the host's wall
 * time for them (rank 0: put first; rank 1: wait first). */
static double gc_ping_pong(gc_ctx_t *c, size_t size, int n, int timed, double expected_s)
{
    double t0;

    /* Both kernels are launched before either can finish: no ordering needed,
     * the signal counts pair the rounds. */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = oc_now();
    gc_launch(c, "GIN ping-pong (put + signal, signal wait)", size, 0, n, 1, 1, c->rank == 0,
              timed, expected_s);
    return oc_now() - t0;
}

static int gc_cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;

    return (x > y) - (x < y);
}

static void gc_time_size(gc_ctx_t *c, size_t size)
{
    const oc_opts_t *o = c->o;
    double calib;
    unsigned long long *t;
    int n;

    if (o->warmup > 0)
        gc_ping_pong(c, size, o->warmup, 0, 0);
    calib = gc_ping_pong(c, size, 3, 0, 0) / 3;
    n = (int)(o->min_time / (calib > 1e-7 ? calib : 1e-7)) + 1;
    if (n < 5)
        n = 5;
    if (n > o->max_iters)
        n = o->max_iters;
    /* Both ranks run the same number of round trips: rank 0 decides. */
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    gc_ping_pong(c, size, n, 1, (double)n * calib * 4);
    if (c->rank == 0) {
        double med, oneway;
        t = (unsigned long long *)calloc((size_t)n, sizeof(*t));
        if (t == NULL)
            oc_die("out of memory for %d timings", n);
        CK_CUDA(cudaMemcpy(t, c->d_times, (size_t)n * sizeof(*t), cudaMemcpyDeviceToHost));
        qsort(t, (size_t)n, sizeof(*t), gc_cmp_u64);
        med = (n % 2 ? (double)t[n / 2] : ((double)t[n / 2 - 1] + (double)t[n / 2]) / 2) * 1e-9;
        oneway = med / 2;
        printf("perf size=%zu iters=%d median_rtt_us=%.2f min_rtt_us=%.2f oneway_us=%.2f "
               "gbps=%.6f\n", size, n, med * 1e6, (double)t[0] * 1e-3, oneway * 1e6,
               (double)size / oneway / 1e9);
        fflush(stdout);
        free(t);
    }
}

/* NCCL's initializer macros below leave fields to their defaults. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* The communicator must offer the Device API and a GIN: say which GIN. */
static void gc_check_props(gc_ctx_t *c)
{
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;

    CK_NCCL(c->comm, ncclCommQueryProperties(c->comm, &props));
    if (c->rank == 0) {
        printf("gin_check: deviceApiSupport=%d ginType=%d railedGinType=%d (2: NCCL's GIN proxy "
               "over the RMA plugin)\n", (int)props.deviceApiSupport, (int)props.ginType,
               (int)props.railedGinType);
        fflush(stdout);
    }
    if (!props.deviceApiSupport)
        oc_die("the communicator has no Device API support (ncclCommQueryProperties)");
    if (props.ginType == NCCL_GIN_TYPE_NONE)
        oc_die("the communicator has no GIN to every rank (ginType NONE, railedGinType %d): NCCL "
               "assigned no GIN plugin, or a rank's net device lacks crossNic; with "
               "NCCL_GIN_TYPE=2 the GIN is NCCL's proxy over the RMA plugin (NCCL_DEBUG=INFO "
               "shows the GIN/Plugin and RMA/Plugin lines)", (int)props.railedGinType);
}

static void gc_dev_comm(gc_ctx_t *c)
{
    ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;

    reqs.ginContextCount = 1;
    reqs.ginSignalCount = 1;
    reqs.ginConnectionType = NCCL_GIN_CONNECTION_FULL;
    CK_NCCL(c->comm, ncclDevCommCreate(c->comm, &reqs, &c->dev_comm));
    gc_read_signal_kernel<<<1, 1, 0, c->stream>>>(c->dev_comm, c->d_sig);
    CK_CUDA(cudaGetLastError());
    gc_wait(c, "reading the GIN signal", 0, 0, 0);
    CK_CUDA(cudaMemcpy(&c->sig_expect, c->d_sig, sizeof(c->sig_expect), cudaMemcpyDeviceToHost));
    /* No put may land before both ranks read their base. */
    MPI_Barrier(MPI_COMM_WORLD);
}

#pragma GCC diagnostic pop

/* The shared sweep's view of this program's check and timing. */
static size_t gc_check_cb(void *c, size_t size, int iter, int who)
{
    return gc_check_one((gc_ctx_t *)c, size, iter, who);
}

static void gc_time_cb(void *c, size_t size)
{
    gc_time_size((gc_ctx_t *)c, size);
}

int main(int argc, char **argv)
{
    oc_opts_t o;
    gc_ctx_t c;
    oc_sweep_t sweep;

    memset(&c, 0, sizeof(c));
    (void)oc_start(&argc, &argv, &o, &c.rank, &c.stream, &c.comm);
    c.o = &o;
    c.peer = 1 - c.rank;
    gc_check_props(&c);

    /* Both windows first: the device communicator registers them with its GIN. */
    oc_windows(c.comm, o.max_size, &c.send_buf, &c.recv_buf, &c.send_win, &c.recv_win, &c.win_bytes,
               &c.host);
    c.times_cap = o.max_iters;
    CK_CUDA(cudaMalloc((void **)&c.d_status, sizeof(*c.d_status)));
    CK_CUDA(cudaMalloc((void **)&c.d_sig, sizeof(*c.d_sig)));
    CK_CUDA(cudaMalloc((void **)&c.d_times, (size_t)c.times_cap * sizeof(*c.d_times)));
    CK_CUDA(cudaMemset(c.d_status, 0, sizeof(*c.d_status)));
    gc_dev_comm(&c);

    oc_sweep(&o, c.rank, &c, gc_check_cb, gc_time_cb, &sweep);

    /* Both ranks' kernels ended: no put is in flight to a window going away. */
    MPI_Barrier(MPI_COMM_WORLD);
    CK_NCCL(c.comm, ncclDevCommDestroy(c.comm, &c.dev_comm));
    oc_windows_free(c.comm, c.send_buf, c.recv_buf, c.send_win, c.recv_win, c.host);
    CK_NCCL(c.comm, ncclCommFinalize(c.comm));
    CK_NCCL(NULL, ncclCommDestroy(c.comm));
    CK_CUDA(cudaFree(c.d_times));
    CK_CUDA(cudaFree(c.d_sig));
    CK_CUDA(cudaFree(c.d_status));
    CK_CUDA(cudaStreamDestroy(c.stream));
    return oc_finish(c.rank, &sweep);
}
