/*
 * The part of NCCL's profiler plugin ABI, version 5, that the flush- and
 * step-timing profiler uses: written from the ABI facts (NCCL 2.28's profiler
 * headers describe the same layout), no NCCL header needed. Version 5 because
 * NCCL 2.28.3 and 2.28.9 both look for "ncclProfiler_v5" first (then v4..v1)
 * and their v5 layouts are the same. Every offset we read is pinned below.
 */
#ifndef FERRY_FLUSH_PROF_ABI_H
#define FERRY_FLUSH_PROF_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ncclResult_t: 0 is success; the profiler returns nothing else. */
typedef int fp_nccl_result_t;

/* ncclDebugLogger_t: NCCL's logger, passed to init. */
typedef void (*fp_nccl_logger_t)(int level, unsigned long flags, const char *file, int line,
                                 const char *fmt, ...);

/* Event types (the descriptor's type field and the activation mask's bits). */
#define FP_EVENT_GROUP      (1 << 0)
#define FP_EVENT_COLL       (1 << 1)
#define FP_EVENT_P2P        (1 << 2)
#define FP_EVENT_PROXY_OP   (1 << 3)
#define FP_EVENT_PROXY_STEP (1 << 4)

/* The proxy-step states a send step goes through (sendProxyProgress), in
 * order; a state may be skipped or repeated:
 * SEND_GPU_WAIT: waiting for the GPU to fill the step's buffer;
 * SEND_PEER_WAIT: data ready, isend returned no request yet - waiting for the
 *   receiver's clear-to-send;
 * SEND_WAIT: isend accepted, waiting for its test() to say done. */
#define FP_STATE_SEND_GPU_WAIT   8
#define FP_STATE_SEND_WAIT       9
#define FP_STATE_SEND_PEER_WAIT  20

/* The proxy-step states a receive step goes through (recvProxyProgress):
 * RECV_WAIT when irecv is posted, RECV_FLUSH_WAIT when its test() completes
 * (iflush is called right after), RECV_GPU_WAIT when the flush's test()
 * completes (or at once when nothing was flushed). */
#define FP_STATE_RECV_WAIT       10
#define FP_STATE_RECV_FLUSH_WAIT 11
#define FP_STATE_RECV_GPU_WAIT   12

/* The event descriptor (ncclProfilerEventDescr_v5_t). Only the members we read
 * are named; the rest are there for the layout. */
typedef struct {
    uint64_t type;      /* FP_EVENT_*. */
    void *parent;       /* The parent's handle, as this plugin returned it. */
    int rank;
    union {
        struct { bool graph_captured; int group_depth; } group_api;
        struct {
            const char *func; size_t count; const char *datatype; int root; void *stream;
            bool graph_captured;
        } coll_api;
        struct {
            const char *func; size_t count; const char *datatype; void *stream;
            bool graph_captured;
        } p2p_api;
        struct { void *stream; } kernel_launch;
        struct {
            uint64_t seq;
            const char *func;
            const void *sendbuf;
            void *recvbuf;
            size_t count;     /* Elements. */
            int root;
            const char *datatype; /* "ncclFloat32", ... */
            uint8_t nchannels;
            uint8_t nwarps;
            const char *algo;
            const char *proto;    /* "LL", "LL128", "SIMPLE". */
            void *parent_group;
        } coll;
        struct {
            const char *func; void *buf; const char *datatype; size_t count; int peer;
            uint8_t nchannels; void *parent_group;
        } p2p;
        struct {
            pid_t pid; uint8_t channel; int peer; int nsteps; int chunk_size; int is_send;
        } proxy_op;
        struct { int step; } proxy_step;
        struct { uint8_t channel; uint64_t ptimer; } kernel_ch;
        struct { int64_t id; void *data; } net_plugin;
    };
} fp_event_descr_t;

/* The state's argument (ncclProfilerEventStateArgs_v5_t); NCCL may pass NULL. */
typedef union {
    struct { size_t trans_size; } proxy_step; /* Bytes the step received. */
    struct { int appended; } proxy_ctrl;
    struct { void *data; } net_plugin;
    struct { uint64_t ptimer; } kernel_ch;
} fp_state_args_t;

/* The exported table (ncclProfiler_v5_t). */
typedef struct {
    const char *name;
    fp_nccl_result_t (*init)(void **context, uint64_t comm_id, int *activation_mask,
                             const char *comm_name, int nnodes, int nranks, int rank,
                             fp_nccl_logger_t log);
    fp_nccl_result_t (*start_event)(void *context, void **handle, fp_event_descr_t *descr);
    fp_nccl_result_t (*stop_event)(void *handle);
    fp_nccl_result_t (*record_state)(void *handle, int state, fp_state_args_t *args);
    fp_nccl_result_t (*finalize)(void *context);
} fp_profiler_v5_t;

_Static_assert(offsetof(fp_event_descr_t, type) == 0, "descr.type");
_Static_assert(offsetof(fp_event_descr_t, parent) == 8, "descr.parentObj");
_Static_assert(offsetof(fp_event_descr_t, rank) == 16, "descr.rank");
_Static_assert(offsetof(fp_event_descr_t, coll.count) == 56, "descr.coll.count");
_Static_assert(offsetof(fp_event_descr_t, coll.datatype) == 72, "descr.coll.datatype");
_Static_assert(offsetof(fp_event_descr_t, coll.proto) == 96, "descr.coll.proto");
_Static_assert(offsetof(fp_event_descr_t, proxy_step.step) == 24, "descr.proxyStep.step");
_Static_assert(sizeof(fp_event_descr_t) == 112, "ncclProfilerEventDescr_v5_t");
_Static_assert(sizeof(fp_state_args_t) == 8, "ncclProfilerEventStateArgs_v5_t");
_Static_assert(sizeof(fp_profiler_v5_t) == 48, "ncclProfiler_v5_t");

#endif
