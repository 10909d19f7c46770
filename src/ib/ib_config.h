/*
 * The ib backend's variables: NCCL's own NCCL_IB_* (same names, defaults and
 * meaning as NCCL 2.28's IB transport) and ferry's NCCL_FERRY_IB_*. Parsed
 * once at init (ib_config.c) from the environment, with the source of every
 * value for the effective-config line.
 */
#ifndef FERRY_IB_CONFIG_H
#define FERRY_IB_CONFIG_H

#include <stddef.h>

#include "core/config.h"

typedef struct ferry_ib_config {
    char   hca[512];          /* NCCL_IB_HCA: "[^][=]name[:port],..."; "" all. */
    int    disable;           /* NCCL_IB_DISABLE. */
    int    gid_index;         /* NCCL_IB_GID_INDEX, -1 = scan. */
    int    addr_family;       /* NCCL_IB_ADDR_FAMILY: AF_INET (default) or AF_INET6. */
    char   addr_range[64];    /* NCCL_IB_ADDR_RANGE: CIDR, "" none. */
    int    roce_version;      /* NCCL_IB_ROCE_VERSION_NUM, default 2. */
    int    routable_flid_gid_index; /* NCCL_IB_ROUTABLE_FLID_GID_INDEX, default 1. */
    int    tc;                /* NCCL_IB_TC, -1 = unset (0, or the comm's trafficClass). */
    int    fifo_tc;           /* NCCL_IB_FIFO_TC, -1 = same as tc. */
    int    sl;                /* NCCL_IB_SL, -1 = unset (0). */
    int    timeout;           /* NCCL_IB_TIMEOUT, default 20. */
    int    retry_cnt;         /* NCCL_IB_RETRY_CNT, default 7. */
    int    pkey;              /* NCCL_IB_PKEY, default 0. */
    int    use_inline;        /* NCCL_IB_USE_INLINE, default 0. */
    int    qps_per_conn;      /* NCCL_IB_QPS_PER_CONNECTION, default 1, 1..128. */
    int    split_data_on_qps; /* NCCL_IB_SPLIT_DATA_ON_QPS, default 0. */
    size_t ar_threshold;      /* NCCL_IB_AR_THRESHOLD, default 8192. */
    int    adaptive_routing;  /* NCCL_IB_ADAPTIVE_ROUTING, -2 = auto (IB on, RoCE off). */
    int    relaxed_ordering;  /* NCCL_IB_PCI_RELAXED_ORDERING, 2 = auto. */
    int    return_async_events; /* NCCL_IB_RETURN_ASYNC_EVENTS, default 1. */
    int    gdr_flush_disable; /* NCCL_GDR_FLUSH_DISABLE, default 0. */
    char   verbs_lib[256];    /* NCCL_FERRY_IBVERBS_LIB: path of libibverbs, "" default. */
    int    peer_timeout_s;    /* NCCL_FERRY_IB_PEER_TIMEOUT_S: a dead peer becomes an error this fast; 0 off. */
    ferry_cfg_src_t src[40];  /* Source of each value, indexed as the table in ib_config.c. */
    int    merge_vfs;         /* NCCL_IB_MERGE_VFS, default 1: VFs share their PF's pciPath. */
    int    merge_nics;        /* NCCL_IB_MERGE_NICS, default 1: makeVDevice merges ports. */
    size_t stripe_min;        /* NCCL_FERRY_IB_STRIPE_MIN: merged devices stripe messages this big. */
    /* GPU memory (ib_gdr.c, ib_flush.c). */
    int    gdr;               /* NCCL_FERRY_IB_GDR: -1 auto (peer-memory module), 0 off, 1 on. */
    int    flush;             /* NCCL_FERRY_IB_FLUSH: FERRY_IB_FLUSH_AUTO (default), _READ, _CUDA. */
    int    force_flush;       /* NCCL_FERRY_IB_FORCE_FLUSH: the forceFlush property, default 0. */
    char   sysfs_root[256];   /* NCCL_FERRY_IB_SYSFS_ROOT: where the peer-memory files are; "" /sys. */
    int    cm;                /* NCCL_FERRY_IB_CM: FERRY_IB_CM_OOB (default) or FERRY_IB_CM_RDMACM. */
    char   rdmacm_lib[256];   /* NCCL_FERRY_RDMACM_LIB: path of librdmacm, "" default. */
} ferry_ib_config_t;

/* NCCL_FERRY_IB_FLUSH: how iflush makes GPU receives visible. */
#define FERRY_IB_FLUSH_READ 0 /* A 1-byte RDMA READ on a QP connected to itself (NCCL's). */
#define FERRY_IB_FLUSH_CUDA 1 /* cuFlushGPUDirectRDMAWrites. */
#define FERRY_IB_FLUSH_AUTO 2 /* Per receive comm, the cheaper of the two (ib_flush_choice.c). */

/* How connections are set up (NCCL_FERRY_IB_CM). */
#define FERRY_IB_CM_OOB    0 /* Out of band over TCP (ib_connect.c, ib_accept.c). */
#define FERRY_IB_CM_RDMACM 1 /* librdmacm (ib_cm*.c). */

/* Index of each variable in ib_config.c's table; also indexes ferry_ib_config_t.src. */
typedef enum ferry_ib_cfg_id {
    FERRY_IB_CFG_HCA,
    FERRY_IB_CFG_DISABLE,
    FERRY_IB_CFG_GID_INDEX,
    FERRY_IB_CFG_ADDR_FAMILY,
    FERRY_IB_CFG_ADDR_RANGE,
    FERRY_IB_CFG_ROCE_VERSION,
    FERRY_IB_CFG_ROUTABLE_FLID_GID_INDEX,
    FERRY_IB_CFG_TC,
    FERRY_IB_CFG_FIFO_TC,
    FERRY_IB_CFG_SL,
    FERRY_IB_CFG_TIMEOUT,
    FERRY_IB_CFG_RETRY_CNT,
    FERRY_IB_CFG_PKEY,
    FERRY_IB_CFG_USE_INLINE,
    FERRY_IB_CFG_QPS_PER_CONN,
    FERRY_IB_CFG_SPLIT_DATA_ON_QPS,
    FERRY_IB_CFG_AR_THRESHOLD,
    FERRY_IB_CFG_ADAPTIVE_ROUTING,
    FERRY_IB_CFG_RELAXED_ORDERING,
    FERRY_IB_CFG_RETURN_ASYNC_EVENTS,
    FERRY_IB_CFG_GDR_FLUSH_DISABLE,
    FERRY_IB_CFG_VERBS_LIB,
    FERRY_IB_CFG_PEER_TIMEOUT_S,
    FERRY_IB_CFG_MERGE_VFS,
    FERRY_IB_CFG_MERGE_NICS,
    FERRY_IB_CFG_STRIPE_MIN,
    /* GPU memory. */
    FERRY_IB_CFG_GDR,
    FERRY_IB_CFG_FLUSH,
    FERRY_IB_CFG_FORCE_FLUSH,
    FERRY_IB_CFG_SYSFS_ROOT,
    FERRY_IB_CFG_CM,
    FERRY_IB_CFG_RDMACM_LIB,
    FERRY_IB_CFG_COUNT
} ferry_ib_cfg_id_t;

/* Parse the environment. On bad input: WARN naming variable, value and what is accepted. */
ferry_status_t ferry_ib_config_load(ferry_ib_config_t *cfg);
/* " NCCL_IB_HCA=mlx5(env) NCCL_IB_GID_INDEX=-1(default) ..." appended to the effective-config line. */
void ferry_ib_config_format(const ferry_ib_config_t *cfg, char *buf, size_t len);
/*
 * NCCL_IB_ADDR_RANGE as bytes in network order (4 for AF_INET, 16 for
 * AF_INET6) and its prefix length: 1 when it is set and of `family`, else
 * 0 (NCCL ignores a range of the other family, and so does ferry).
 */
int ferry_ib_config_addr_range(const ferry_ib_config_t *cfg, int family, unsigned char addr[16],
                               int *prefixlen_p);

#endif
