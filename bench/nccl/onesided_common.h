/*
 * onesided_common.h: what rma_check.c (NCCL's host one-sided API) and
 * gin_check.cu (its Device API's GIN) share: the options and the sizes they
 * give, the byte pattern both check, a bounded clock, and the failure path
 * that aborts both ranks. Define OC_PROG (the program's name, a string
 * literal) before including it. Header-only: one C and one CUDA C++ user.
 */
#ifndef FERRY_BENCH_NCCL_ONESIDED_COMMON_H
#define FERRY_BENCH_NCCL_ONESIDED_COMMON_H

#include <errno.h>
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

#ifndef OC_PROG
#error "define OC_PROG (the program's name) before including onesided_common.h"
#endif

/* Bytes past the transfer that must stay untouched. */
#define OC_GUARD 64
#define OC_MAX_SIZES 64

typedef struct {
    size_t min_size, max_size;
    int factor, check_iters, warmup, max_iters;
    double min_time, timeout_s;
} oc_opts_t;

static int oc_rank = -1;

static inline void oc_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void oc_die(const char *fmt, ...)
{
    va_list ap;
    char msg[512];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, OC_PROG ": FAIL rank %d: %s\n", oc_rank, msg);
    fflush(stderr);
    fflush(stdout);
    /* The peer may be blocked in NCCL, MPI or a kernel: only an abort ends both. */
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CK_CUDA(call)                                                                  \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess)                                                         \
            oc_die("%s failed: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__,   \
                   __LINE__);                                                          \
    } while (0)

#define CK_NCCL(comm, call)                                                             \
    do {                                                                               \
        ncclResult_t r_ = (call);                                                      \
        if (r_ != ncclSuccess)                                                         \
            oc_die("%s failed: %s; NCCL says: %s (%s:%d)", #call, ncclGetErrorString(r_), \
                   ncclGetLastError(comm), __FILE__, __LINE__);  \
    } while (0)

static inline double oc_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The byte at OFF of a transfer of SIZE bytes, iteration ITER, and WHO (a
 * direction or a sending rank): differs between neighbouring offsets, sizes,
 * iterations and senders, so a stale, shifted or misdirected byte shows. */
static inline unsigned char oc_pattern(size_t off, size_t size, int iter, int who)
{
    uint64_t x = (uint64_t)off * 0x9E3779B97F4A7C15ull;

    x ^= ((uint64_t)size << 17) ^ ((uint64_t)iter << 40) ^ ((uint64_t)who << 56);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (unsigned char)x;
}

static inline size_t oc_parse_size(const char *s, const char *opt)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        goto bad;
    switch (*end) {
    case 'K': case 'k': v <<= 10; end++; break;
    case 'M': case 'm': v <<= 20; end++; break;
    case 'G': case 'g': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end == '\0' && v > 0)
        return (size_t)v;
bad:
    fprintf(stderr, OC_PROG ": %s '%s': a size in bytes > 0, with K, M or G (e.g. 64M)\n",
            opt, s);
    exit(2);
}

static inline double oc_parse_num(const char *s, const char *opt, double lo, double hi)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, OC_PROG ": %s '%s': a number from %g to %g\n", opt, s, lo, hi);
        exit(2);
    }
    return v;
}

static inline void oc_parse(int argc, char **argv, oc_opts_t *o)
{
    int ch;

    memset(o, 0, sizeof(*o));
    o->min_size = 8;
    o->max_size = (size_t)64 << 20;
    o->factor = 4;
    o->check_iters = 2;
    o->warmup = 3;
    o->max_iters = 100000;
    o->min_time = 0.2;
    o->timeout_s = 60;
    while ((ch = getopt(argc, argv, "b:e:f:c:m:t:w:n:h")) != -1) {
        switch (ch) {
        case 'b': o->min_size = oc_parse_size(optarg, "-b"); break;
        case 'e': o->max_size = oc_parse_size(optarg, "-e"); break;
        case 'f': o->factor = (int)oc_parse_num(optarg, "-f", 2, 64); break;
        case 'c': o->check_iters = (int)oc_parse_num(optarg, "-c", 1, 1000); break;
        case 'm': o->min_time = oc_parse_num(optarg, "-m", 0, 60); break;
        case 't': o->timeout_s = oc_parse_num(optarg, "-t", 1, 3600); break;
        case 'w': o->warmup = (int)oc_parse_num(optarg, "-w", 0, 1000); break;
        case 'n': o->max_iters = (int)oc_parse_num(optarg, "-n", 5, 10000000); break;
        default:
            fprintf(stderr, "usage: " OC_PROG " [-b 8] [-e 64M] [-f 4] [-c 2] [-m 0.2] [-t 60] "
                    "[-w 3] [-n 100000]\n");
            exit(ch == 'h' ? 0 : 2);
        }
    }
    if (o->min_size > o->max_size) {
        fprintf(stderr, OC_PROG ": -b %zu is larger than -e %zu\n", o->min_size, o->max_size);
        exit(2);
    }
}

/* -b, -b*f, ... below -e, then -e itself. */
static inline int oc_sizes(const oc_opts_t *o, size_t *sizes)
{
    int n = 0;
    size_t s;

    for (s = o->min_size; s < o->max_size && n < OC_MAX_SIZES - 1; s *= (size_t)o->factor)
        sizes[n++] = s;
    sizes[n++] = o->max_size;
    return n;
}

static inline int oc_device(void)
{
    const char *v = getenv("RMA_CHECK_DEVICE");

    if (v == NULL)
        v = getenv("NCCL_TESTS_DEVICE");
    return v ? atoi(v) : 0;
}

/*
 * MPI, the options, the GPU (RMA_CHECK_DEVICE or NCCL_TESTS_DEVICE, else 0),
 * a non-blocking stream and a 2-rank NCCL communicator; rank 0 prints the
 * line the scripts check (the NCCL loaded and the one built against).
 * Returns the device.
 */
static inline int oc_start(int *argc, char ***argv, oc_opts_t *o, int *rank,
                           cudaStream_t *stream, ncclComm_t *comm)
{
    ncclUniqueId id;
    int nranks, version = 0, dev;

    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    oc_rank = *rank;
    oc_parse(*argc, *argv, o);
    if (nranks != 2)
        oc_die("needs exactly 2 ranks (mpirun -np 2), got %d", nranks);
    dev = oc_device();
    CK_CUDA(cudaSetDevice(dev));
    CK_CUDA(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking));
    ncclGetVersion(&version);
    if (*rank == 0) {
        printf(OC_PROG ": NCCL %d (built against %d), 2 ranks, device %d, %zu..%zu bytes x%d, "
               "%d checked iterations per direction, >= %.2f s timed per size, waits bounded "
               "by %.0f s\n", version, NCCL_VERSION_CODE, dev, o->min_size, o->max_size,
               o->factor, o->check_iters, o->min_time, o->timeout_s);
        fflush(stdout);
        CK_NCCL(NULL, ncclGetUniqueId(&id));
    }
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    CK_NCCL(*comm, ncclCommInitRank(comm, 2, id, *rank));
    return dev;
}

/*
 * Both windows: ncclMemAlloc'd, room for the guard rounded to the alignment
 * NCCL requires, registered symmetric (collective: both ranks, same order),
 * and a host buffer as large for the checks.
 */
static inline void oc_windows(ncclComm_t comm, size_t max_size, void **send_buf, void **recv_buf,
                              ncclWindow_t *send_win, ncclWindow_t *recv_win, size_t *win_bytes,
                              unsigned char **host)
{
    *win_bytes = (max_size + OC_GUARD + NCCL_WIN_REQUIRED_ALIGNMENT - 1) /
                 NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
    CK_NCCL(comm, ncclMemAlloc(send_buf, *win_bytes));
    CK_NCCL(comm, ncclMemAlloc(recv_buf, *win_bytes));
    CK_NCCL(comm, ncclCommWindowRegister(comm, *send_buf, *win_bytes, send_win,
                                         NCCL_WIN_COLL_SYMMETRIC));
    CK_NCCL(comm, ncclCommWindowRegister(comm, *recv_buf, *win_bytes, recv_win,
                                         NCCL_WIN_COLL_SYMMETRIC));
    *host = (unsigned char *)malloc(*win_bytes);
    if (*host == NULL)
        oc_die("out of memory for a %zu-byte host buffer", *win_bytes);
}

static inline void oc_windows_free(ncclComm_t comm, void *send_buf, void *recv_buf,
                                   ncclWindow_t send_win, ncclWindow_t recv_win,
                                   unsigned char *host)
{
    CK_NCCL(comm, ncclCommWindowDeregister(comm, recv_win));
    CK_NCCL(comm, ncclCommWindowDeregister(comm, send_win));
    CK_NCCL(comm, ncclMemFree(recv_buf));
    CK_NCCL(comm, ncclMemFree(send_buf));
    free(host);
}

/* One program's check of one size, iteration and direction (wrong bytes), and its timing. */
typedef size_t (*oc_check_fn)(void *ctx, size_t size, int iter, int who);
typedef void (*oc_time_fn)(void *ctx, size_t size);

typedef struct {
    int nsizes;
    size_t checked;      /* bytes checked byte for byte */
    uint64_t total_bad;  /* wrong bytes, both ranks */
    size_t bad_size;     /* the size they were found at */
} oc_sweep_t;

/*
 * Every size: -c checked iterations each way (both ranks agree on the count
 * of wrong bytes), then the timing; stops at the first size with a wrong byte.
 * Prints the "check size=" lines the scripts parse.
 */
static inline void oc_sweep(const oc_opts_t *o, int rank, void *ctx, oc_check_fn check,
                            oc_time_fn time_size, oc_sweep_t *r)
{
    size_t sizes[OC_MAX_SIZES];
    uint64_t bad;

    memset(r, 0, sizeof(*r));
    r->nsizes = oc_sizes(o, sizes);
    for (int i = 0; i < r->nsizes; i++) {
        size_t size = sizes[i];

        bad = 0;
        for (int it = 0; it < o->check_iters; it++)
            for (int who = 0; who < 2; who++)
                bad += check(ctx, size, it, who);
        MPI_Allreduce(&bad, &r->total_bad, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (r->total_bad) {
            r->bad_size = size;
            if (rank == 0)
                printf("check size=%zu iters=%d dirs=0->1,1->0 FAILED: %llu wrong bytes\n", size,
                       o->check_iters, (unsigned long long)r->total_bad);
            return;
        }
        r->checked += 2 * (size_t)o->check_iters * size;
        if (rank == 0) {
            printf("check size=%zu iters=%d dirs=0->1,1->0 ok\n", size, o->check_iters);
            fflush(stdout);
        }
        time_size(ctx, size);
    }
}

/* The last line the scripts read; MPI ends; the exit status. */
static inline int oc_finish(int rank, const oc_sweep_t *r)
{
    if (rank == 0) {
        if (r->total_bad)
            printf(OC_PROG ": FAIL: %llu wrong bytes at size %zu (first mismatch above, on "
                   "stderr)\n", (unsigned long long)r->total_bad, r->bad_size);
        else
            printf(OC_PROG ": PASS: %d sizes, %zu bytes checked byte for byte, both "
                   "directions\n", r->nsizes, r->checked);
    }
    MPI_Finalize();
    return r->total_bad ? 1 : 0;
}

/* The guard that fits after a transfer of SIZE in windows of WIN_BYTES. */
static inline size_t oc_guard(size_t win_bytes, size_t size)
{
    return win_bytes - size < OC_GUARD ? win_bytes - size : OC_GUARD;
}

/*
 * Before a checked transfer from rank WHO: the sender's source gets the
 * pattern, the receiver's window and guard its complement (every byte must
 * change, the guard must not). HOST is the rank's staging buffer.
 */
static inline void oc_check_prepare(int rank, int who, unsigned char *host, void *send_buf,
                                    void *recv_buf, size_t win_bytes, size_t size, int iter)
{
    size_t guard = oc_guard(win_bytes, size), i;

    if (rank == who) {
        for (i = 0; i < size; i++)
            host[i] = oc_pattern(i, size, iter, who);
        CK_CUDA(cudaMemcpy(send_buf, host, size, cudaMemcpyHostToDevice));
    } else {
        for (i = 0; i < size + guard; i++)
            host[i] = (unsigned char)~oc_pattern(i, size, iter, who);
        CK_CUDA(cudaMemcpy(recv_buf, host, size + guard, cudaMemcpyHostToDevice));
    }
}

/*
 * After it, on the receiver: the window and guard copied back and compared
 * byte for byte; the first mismatch and the count go to stderr. Returns the
 * number of wrong bytes.
 */
static inline size_t oc_check_compare(int who, unsigned char *host, void *recv_buf,
                                      size_t win_bytes, size_t size, int iter)
{
    size_t guard = oc_guard(win_bytes, size), bad = 0, i;

    CK_CUDA(cudaMemcpy(host, recv_buf, size + guard, cudaMemcpyDeviceToHost));
    for (i = 0; i < size + guard; i++) {
        unsigned char want = i < size ? oc_pattern(i, size, iter, who)
                                      : (unsigned char)~oc_pattern(i, size, iter, who);
        if (host[i] == want)
            continue;
        if (bad++ == 0)
            fprintf(stderr,
                    OC_PROG ": MISMATCH size %zu direction %d->%d iteration %d offset %zu%s: "
                    "expected 0x%02x got 0x%02x\n",
                    size, who, 1 - who, iter, i,
                    i < size ? "" : " (past the end of the put: must stay untouched)", want,
                    host[i]);
    }
    if (bad)
        fprintf(stderr, OC_PROG ": size %zu direction %d->%d iteration %d: %zu of %zu bytes "
                "wrong\n", size, who, 1 - who, iter, bad, size + guard);
    return bad;
}

/*
 * Waits for everything queued on STREAM, at most BOUND seconds, polling
 * NCCL's async error on the way; a failure names WHAT, the size, the
 * iteration, the peer, and STUCK (what a stream still busy at the bound
 * means). NAP: sleep 10 us every 64 polls (a spinning kernel shares the GPU
 * with this rank's copies; a host API wait does not).
 */
static inline void oc_stream_wait(cudaStream_t stream, ncclComm_t comm, const char *what,
                                  size_t size, int iter, double bound, int peer,
                                  const char *stuck, int nap)
{
    double deadline = oc_now() + bound;
    unsigned polls = 0;

    for (;;) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady)
            oc_die("%s, size %zu, iteration %d: the stream failed: %s", what, size, iter,
                   cudaGetErrorString(e));
        if ((++polls & 1023) == 0) {
            ncclResult_t async = ncclSuccess;
            ncclCommGetAsyncError(comm, &async);
            if (async != ncclSuccess && async != ncclInProgress)
                oc_die("%s, size %zu, iteration %d: NCCL reports %s: %s", what, size, iter,
                       ncclGetErrorString(async), ncclGetLastError(comm));
            if (oc_now() > deadline)
                oc_die("%s, size %zu, iteration %d: not done after %.0f s (peer rank %d): %s",
                       what, size, iter, bound, peer, stuck);
        }
        if (nap && (polls & 63) == 0)
            usleep(10);
    }
}

#endif
