/*
 * ferry_nccl_bench (fnb): NCCL collectives between N local processes, checked
 * element by element and timed like nccl-tests, to measure a net plugin.
 *
 * The parent process never calls CUDA or NCCL: a CUDA context does not
 * survive fork(), so the parent only parses options, starts MPS, forks the
 * ranks and watches them. Ranks talk to each other only through NCCL and
 * through one anonymous shared mapping (fnb_shared_t) that the parent creates
 * before fork: the ncclUniqueId, a barrier and per-rank results live there.
 */
#ifndef FNB_H
#define FNB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define FNB_MAX_RANKS 64
#define FNB_MAX_SIZES 64
#define FNB_MIN_CAPPED_ITERS 5 /* --iter-bytes never cuts a size below this. */

/* Exit statuses of a rank and of the whole run. */
#define FNB_EXIT_WRONG 1 /* Ran to the end, some element was wrong. */
#define FNB_EXIT_ERROR 2 /* Anything else: setup, NCCL or CUDA error, timeout. */

/* Cross-process atomics in a MAP_SHARED page are only sound when lock-free. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "int atomics must be lock-free");
_Static_assert(sizeof(ncclUniqueId) <= 256, "unique id larger than expected");

typedef enum fnb_op_id {
    FNB_OP_ALL_REDUCE,
    FNB_OP_ALL_GATHER,
    FNB_OP_REDUCE_SCATTER,
    FNB_OP_BROADCAST,
    FNB_OP_SENDRECV,
    FNB_OP_LAST
} fnb_op_id_t;

typedef struct fnb_opts {
    size_t      sizes[FNB_MAX_SIZES]; /* Total bytes per test, nccl-tests meaning. */
    int         nsizes;
    int         iters;        /* Timed iterations per size (-n). */
    int         warmup;       /* Untimed iterations per size (-w). */
    size_t      iter_bytes;   /* --iter-bytes: cap iters*size; 0 = off. */
    unsigned    ops_mask;     /* Bit per fnb_op_id_t. */
    const char *csv;          /* Appended to; header only when the file is empty. */
    const char *label;        /* Free text copied into every CSV row. */
    int         nranks;
    int         use_mps;      /* Start MPS when ranks share a GPU (--no-mps clears). */
    int         split_hosts;  /* NCCL_HOSTID per rank even without GPU sharing. */
    int         timeout_s;    /* Whole run, parent kills the ranks after it. */
} fnb_opts_t;

/* One rank's result for the test in progress; written by that rank only. */
typedef struct fnb_slot {
    double   time_us;   /* Mean time per iteration on this rank. */
    uint64_t wrong;     /* Mismatching elements in this rank's output. */
} fnb_slot_t;

typedef struct fnb_shared {
    _Atomic int      id_ready;    /* Rank 0 sets it after writing unique_id. */
    _Atomic int      abort;       /* Any rank or the parent: stop waiting. */
    _Atomic unsigned bar_count;   /* Ranks arrived at the current barrier. */
    _Atomic unsigned bar_gen;     /* Bumped by the last rank to arrive. */
    int              ngpus;       /* Written by the parent before fork. */
    int              split_hosts; /* Ranks run with NCCL_HOSTID=host<rank>; parent, before fork. */
    const char      *mps;         /* "off", "started", "already running"; parent, before fork. */
    ncclUniqueId     unique_id;
    fnb_slot_t       slot[FNB_MAX_RANKS];
} fnb_shared_t;

/* One collective: sizes, launch and the expected value of every output element. */
typedef struct fnb_op {
    const char *name;
    /* From total bytes: per-rank count (nccl-tests "count"), buffer elements, bytes. */
    void (*counts)(size_t bytes, int nranks, size_t *count_p, size_t *send_elems_p,
                   size_t *recv_elems_p, size_t *size_bytes_p);
    ncclResult_t (*launch)(const float *send, float *recv, size_t count, int rank,
                           int nranks, ncclComm_t comm, cudaStream_t stream);
    float (*expect)(size_t i, size_t count, int rank, int nranks, uint32_t salt);
    double (*bus_factor)(int nranks);
} fnb_op_t;

/* fnb_ops.c */
const fnb_op_t *fnb_op_get(fnb_op_id_t id);
int fnb_op_parse(const char *name);
float fnb_value(int rank, size_t j, uint32_t salt);

/* fnb_launch.c: parent side, no CUDA. */
int fnb_launch(const fnb_opts_t *o);

/* fnb_mps.c: parent side. */
int fnb_mps_running(void);
int fnb_mps_start(void);
void fnb_mps_stop(void);
void fnb_mps_env_defaults(void);

/* fnb_rank.c: child side. */
int fnb_rank_main(const fnb_opts_t *o, fnb_shared_t *sh, int rank);
int fnb_probe_gpus(void);

double fnb_now(void);

#endif /* FNB_H */
