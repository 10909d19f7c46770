/*
 * One-sided operations (NCCL's RMA plugin API) as a backend offers them:
 * a group of ranks connected to each other, regions registered on every
 * rank in the same order (a region is named on the wire by its number in
 * that order), and put / put-with-signal / get / flush requests towards
 * one rank. The layer above (src/nccl/rma*.c) translates NCCL's structs
 * into these calls; a backend without one-sided support has no table, and
 * that layer refuses it with a message saying so.
 *
 * Requests are NCCL handles of the request ring (proxy/handle.h): the
 * backend returns them ready to hand out, and test() takes them back.
 */
#ifndef FERRY_CORE_RMA_H
#define FERRY_CORE_RMA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* What a signal does to its 64-bit word at the target; NCCL's values. */
#define FERRY_RMA_SIGNAL_NONE 0
#define FERRY_RMA_SIGNAL_INC  1 /* Add 1. */
#define FERRY_RMA_SIGNAL_ADD  2 /* Add the signal's value. */

/* A put, with or without a signal (sig_op FERRY_RMA_SIGNAL_NONE: none). */
typedef struct ferry_rma_put {
    uint32_t rank;      /* Target rank in the group. */
    void    *src_mr;    /* The caller's region the bytes come from (NULL when size is 0). */
    uint64_t src_off;
    size_t   size;
    void    *dst_mr;    /* The same registration names the target's region (NULL: size 0). */
    uint64_t dst_off;
    void    *sig_mr;    /* Signal region (the caller's handle of it). */
    uint64_t sig_off;   /* Byte offset of the 64-bit word; a multiple of 8. */
    uint64_t sig_value;
    uint32_t sig_op;    /* FERRY_RMA_SIGNAL_*. */
} ferry_rma_put_t;

typedef struct ferry_rma_get {
    uint32_t rank;      /* Rank whose memory is read. */
    void    *remote_mr; /* The caller's handle of the registration read at the target. */
    uint64_t remote_off;
    size_t   size;
    void    *local_mr;  /* Where the bytes land here. */
    uint64_t local_off;
} ferry_rma_get_t;

typedef struct ferry_rma_ops {
    const char *backend; /* The backend's name, as NCCL_FERRY_BACKEND spells it. */
    /* handle: FERRY_HANDLE_SIZE bytes the caller all-gathers. */
    ferry_status_t (*listen)(int dev, void *handle, void **listen_p);
    ferry_status_t (*close_listen)(void *listen);
    /* Collective: every rank calls it with all ranks' listen handles. */
    ferry_status_t (*connect)(void *const *handles, int nranks, int rank, void *listen,
                              uint64_t comm_id, void **group_p);
    ferry_status_t (*close)(void *group);
    /* Collective, in the same order on every rank. */
    ferry_status_t (*reg)(void *group, void *data, size_t size, int type, void **mr_p);
    /*
     * The same, GPU memory named by a DMA-BUF fd (the caller closes fd after
     * the call). NULL: the backend takes none, and its properties leave
     * DMA-BUF out.
     */
    ferry_status_t (*reg_dmabuf)(void *group, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mr_p);
    ferry_status_t (*dereg)(void *group, void *mr);
    ferry_status_t (*test)(void *group, void *req, int *done_p);
    /*
     * The group's lock (posts, progress and registration take it), or NULL
     * with a WARN naming op when group is no open group of this backend.
     */
    pthread_mutex_t *(*lock)(void *group, const char *op);
    /* Posts, with the lock held. */
    ferry_status_t (*put_locked)(void *group, const ferry_rma_put_t *op, void **req_p);
    ferry_status_t (*get_locked)(void *group, const ferry_rma_get_t *op, void **req_p);
    /* Done once every earlier put to rank is applied there. */
    ferry_status_t (*flush_locked)(void *group, uint32_t rank, void **req_p);
    /* With the lock held: every peer a bounded step, non-blocking; < 0: a peer failed. */
    long (*progress_locked)(void *group);
    /* Nonzero once a peer failed (its reason was WARNed). */
    int (*failed)(void *group);
} ferry_rma_ops_t;

#endif
