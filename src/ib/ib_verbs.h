/*
 * libibverbs, loaded at run time (dlopen) so that ferry loads on hosts
 * without rdma-core. Exported verbs are called through ferry_ibv; the
 * data-path verbs that verbs.h defines inline (ibv_post_send, ibv_post_recv,
 * ibv_poll_cq, ibv_req_notify_cq) jump through the context's ops table and
 * need no symbol, so they are called directly.
 */
#ifndef FERRY_IB_VERBS_H
#define FERRY_IB_VERBS_H

#include <stddef.h>

#include "ferry/verbs_abi.h"

#include "core/status.h"

typedef struct ferry_ibv_fns {
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
    int (*query_pkey)(struct ibv_context *context, uint8_t port, int index, __be16 *pkey);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    /* NULL when the library predates IBVERBS_1.8 (no relaxed ordering). */
    struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                   unsigned int access);
    /* NULL when the library predates IBVERBS_1.12 (no DMA-BUF). */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                    struct ibv_qp_init_attr *init_attr);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*get_async_event)(struct ibv_context *context, struct ibv_async_event *event);
    void (*ack_async_event)(struct ibv_async_event *event);
    const char *(*event_type_str)(enum ibv_event_type event);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    int (*fork_init)(void);
    /* Added by the device half: completion-channel events, port state in words, GID types. */
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    const char *(*port_state_str)(enum ibv_port_state port_state);
    /* _ibv_query_gid_ex (IBVERBS_1.11), NULL before; use ferry_ibv_query_gid_type. */
    int (*query_gid_ex_sym)(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                            struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
} ferry_ibv_fns_t;

/* Filled by ferry_ibv_load; all NULL before. */
extern ferry_ibv_fns_t ferry_ibv;

/*
 * Load libibverbs once per process: path (NCCL_FERRY_IBVERBS_LIB) when set,
 * else libibverbs.so.1, then libibverbs.so (the dev symlink). On failure a
 * sentence in err naming what was tried and dlerror(). Idempotent.
 */
ferry_status_t ferry_ibv_load(const char *path, char *err, size_t len);
/* The file that was loaded ("" before). */
const char *ferry_ibv_loaded_path(void);

/*
 * ibv_query_port with the whole struct filled (the provider's extended
 * query when it has one, as the verbs.h macro does; ferry_ibv.query_port
 * does the same) plus active_speed_ex of rdma-core 50+, 0 when unknown.
 */
int ferry_ibv_query_port_ex(struct ibv_context *context, uint8_t port,
                            struct ibv_port_attr *attr, uint32_t *active_speed_ex_p);
/* IBV_GID_TYPE_IB/ROCE_V1/ROCE_V2 of a GID from ibv_query_gid_ex; -1 when unknown. */
int ferry_ibv_query_gid_type(struct ibv_context *context, uint8_t port, int index);

#endif
