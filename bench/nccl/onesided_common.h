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

#endif
