/*
 * librdmacm, loaded at run time (dlopen) like libibverbs (ib_verbs.h), and
 * only when NCCL_FERRY_IB_CM=rdmacm asks for it: the connection manager
 * entry points the rdmacm connection mode calls (ib_cm*.c), nothing else.
 * The structs are ferry/rdma_cm_abi.h's (no librdmacm-dev needed).
 */
#ifndef FERRY_IB_CM_VERBS_H
#define FERRY_IB_CM_VERBS_H

#include <stddef.h>

#include "ferry/rdma_cm_abi.h"

#include "core/status.h"

typedef struct ferry_rdmacm_fns {
    struct rdma_event_channel *(*create_event_channel)(void);
    void (*destroy_event_channel)(struct rdma_event_channel *channel);
    int (*create_id)(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
                     enum rdma_port_space ps);
    int (*destroy_id)(struct rdma_cm_id *id);
    int (*migrate_id)(struct rdma_cm_id *id, struct rdma_event_channel *channel);
    int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
    int (*listen)(struct rdma_cm_id *id, int backlog);
    int (*resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
                        int timeout_ms);
    int (*resolve_route)(struct rdma_cm_id *id, int timeout_ms);
    int (*create_qp)(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    void (*destroy_qp)(struct rdma_cm_id *id);
    int (*connect)(struct rdma_cm_id *id, struct rdma_conn_param *param);
    int (*accept)(struct rdma_cm_id *id, struct rdma_conn_param *param);
    int (*reject)(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len);
    int (*disconnect)(struct rdma_cm_id *id);
    int (*get_cm_event)(struct rdma_event_channel *channel, struct rdma_cm_event **event);
    int (*ack_cm_event)(struct rdma_cm_event *event);
    const char *(*event_str)(enum rdma_cm_event_type event);
    struct ibv_context **(*get_devices)(int *num_devices);
    void (*free_devices)(struct ibv_context **list);
} ferry_rdmacm_fns_t;

/* Filled by ferry_rdmacm_load; all NULL before. */
extern ferry_rdmacm_fns_t ferry_rdmacm;

/*
 * Load librdmacm once per process: path (NCCL_FERRY_RDMACM_LIB) when set,
 * else librdmacm.so.1. On failure a sentence in err naming what was tried,
 * dlerror() and the fallback NCCL_FERRY_IB_CM=oob. Idempotent.
 */
ferry_status_t ferry_rdmacm_load(const char *path, char *err, size_t len);

#endif
