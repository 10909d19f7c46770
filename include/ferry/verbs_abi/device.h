/*
 * libibverbs ABI: GIDs, devices and ports.
 * Part of ferry/verbs_abi.h, which says what these declarations are and
 * where they are checked; include that header, not this one.
 */
#ifndef FERRY_VERBS_ABI_DEVICE_H
#define FERRY_VERBS_ABI_DEVICE_H

#ifndef FERRY_VERBS_ABI_H
#error "include ferry/verbs_abi.h"
#endif

/* ---- GIDs ---------------------------------------------------------------- */

union ibv_gid {
    uint8_t raw[16];
    struct {
        __be64 subnet_prefix;
        __be64 interface_id;
    } global;
};

enum ibv_gid_type {
    IBV_GID_TYPE_IB = 0,
    IBV_GID_TYPE_ROCE_V1 = 1,
    IBV_GID_TYPE_ROCE_V2 = 2,
};

/* What _ibv_query_gid_ex fills (IBVERBS_1.11). */
struct ibv_gid_entry {
    union ibv_gid gid;
    uint32_t gid_index;
    uint32_t port_num;
    uint32_t gid_type; /* enum ibv_gid_type */
    uint32_t ndev_ifindex;
};

/* ---- devices ------------------------------------------------------------- */

enum ibv_node_type {
    IBV_NODE_UNKNOWN = -1,
    IBV_NODE_CA = 1,
    IBV_NODE_SWITCH = 2,
    IBV_NODE_ROUTER = 3,
    IBV_NODE_RNIC = 4,
    IBV_NODE_USNIC = 5,
    IBV_NODE_USNIC_UDP = 6,
    IBV_NODE_UNSPECIFIED = 7,
};

enum ibv_transport_type {
    IBV_TRANSPORT_UNKNOWN = -1,
    IBV_TRANSPORT_IB = 0,
    IBV_TRANSPORT_IWARP = 1,
    IBV_TRANSPORT_USNIC = 2,
    IBV_TRANSPORT_USNIC_UDP = 3,
    IBV_TRANSPORT_UNSPECIFIED = 4,
};

/* ibv_device_attr.device_cap_flags bits ferry or fakeibv look at. */
enum ibv_device_cap_flags {
    IBV_DEVICE_CHANGE_PHY_PORT = 1 << 5,
    IBV_DEVICE_PORT_ACTIVE_EVENT = 1 << 10,
    IBV_DEVICE_SYS_IMAGE_GUID = 1 << 11,
    IBV_DEVICE_RC_RNR_NAK_GEN = 1 << 12,
};

enum ibv_fork_status {
    IBV_FORK_DISABLED = 0,
    IBV_FORK_ENABLED = 1,
    IBV_FORK_UNNEEDED = 2,
};

enum ibv_atomic_cap {
    IBV_ATOMIC_NONE = 0,
    IBV_ATOMIC_HCA = 1,
    IBV_ATOMIC_GLOB = 2,
};

enum {
    IBV_SYSFS_NAME_MAX = 64,
    IBV_SYSFS_PATH_MAX = 256,
};

/* Two slots libibverbs once used, kept for the layout. */
struct _ibv_device_ops {
    void *(*_reserved_alloc_context)(void);
    void (*_reserved_free_context)(void);
};

struct ibv_device {
    struct _ibv_device_ops _ops;
    enum ibv_node_type node_type;
    enum ibv_transport_type transport_type;
    char name[IBV_SYSFS_NAME_MAX];
    char dev_name[IBV_SYSFS_NAME_MAX];
    char dev_path[IBV_SYSFS_PATH_MAX];
    char ibdev_path[IBV_SYSFS_PATH_MAX];
};

struct ibv_device_attr {
    char fw_ver[64];
    __be64 node_guid;
    __be64 sys_image_guid;
    uint64_t max_mr_size;
    uint64_t page_size_cap;
    uint32_t vendor_id;
    uint32_t vendor_part_id;
    uint32_t hw_ver;
    int max_qp;
    int max_qp_wr;
    unsigned int device_cap_flags;
    int max_sge;
    int max_sge_rd;
    int max_cq;
    int max_cqe;
    int max_mr;
    int max_pd;
    int max_qp_rd_atom;
    int max_ee_rd_atom;
    int max_res_rd_atom;
    int max_qp_init_rd_atom;
    int max_ee_init_rd_atom;
    enum ibv_atomic_cap atomic_cap;
    int max_ee;
    int max_rdd;
    int max_mw;
    int max_raw_ipv6_qp;
    int max_raw_ethy_qp;
    int max_mcast_grp;
    int max_mcast_qp_attach;
    int max_total_mcast_qp_attach;
    int max_ah;
    int max_fmr;
    int max_map_per_fmr;
    int max_srq;
    int max_srq_wr;
    int max_srq_sge;
    uint16_t max_pkeys;
    uint8_t local_ca_ack_delay;
    uint8_t phys_port_cnt;
};

struct ibv_query_device_ex_input {
    uint32_t comp_mask;
};

/* The parts of ibv_device_attr_ex, in order. */
struct ibv_odp_caps {
    uint64_t general_caps;
    struct {
        uint32_t rc_odp_caps;
        uint32_t uc_odp_caps;
        uint32_t ud_odp_caps;
    } per_transport_caps;
};

struct ibv_tso_caps {
    uint32_t max_tso;
    uint32_t supported_qpts;
};

struct ibv_rss_caps {
    uint32_t supported_qpts;
    uint32_t max_rwq_indirection_tables;
    uint32_t max_rwq_indirection_table_size;
    uint64_t rx_hash_fields_mask;
    uint8_t rx_hash_function;
};

struct ibv_packet_pacing_caps {
    uint32_t qp_rate_limit_min;
    uint32_t qp_rate_limit_max;
    uint32_t supported_qpts;
};

struct ibv_tm_caps {
    uint32_t max_rndv_hdr_size;
    uint32_t max_num_tags;
    uint32_t flags;
    uint32_t max_ops;
    uint32_t max_sge;
};

struct ibv_cq_moderation_caps {
    uint16_t max_cq_count;
    uint16_t max_cq_period;
};

struct ibv_pci_atomic_caps {
    uint16_t fetch_add;
    uint16_t swap;
    uint16_t compare_swap;
};

struct ibv_device_attr_ex {
    struct ibv_device_attr orig_attr;
    uint32_t comp_mask;
    struct ibv_odp_caps odp_caps;
    uint64_t completion_timestamp_mask;
    uint64_t hca_core_clock;
    uint64_t device_cap_flags_ex;
    struct ibv_tso_caps tso_caps;
    struct ibv_rss_caps rss_caps;
    uint32_t max_wq_type_rq;
    struct ibv_packet_pacing_caps packet_pacing_caps;
    uint32_t raw_packet_caps;
    struct ibv_tm_caps tm_caps;
    struct ibv_cq_moderation_caps cq_mod_caps;
    uint64_t max_dm_size;
    struct ibv_pci_atomic_caps pci_atomic_caps;
    uint32_t xrc_odp_caps;
    uint32_t phys_port_cnt_ex;
};

/* ---- ports --------------------------------------------------------------- */

enum ibv_mtu {
    IBV_MTU_256 = 1,
    IBV_MTU_512 = 2,
    IBV_MTU_1024 = 3,
    IBV_MTU_2048 = 4,
    IBV_MTU_4096 = 5,
};

enum ibv_port_state {
    IBV_PORT_NOP = 0,
    IBV_PORT_DOWN = 1,
    IBV_PORT_INIT = 2,
    IBV_PORT_ARMED = 3,
    IBV_PORT_ACTIVE = 4,
    IBV_PORT_ACTIVE_DEFER = 5,
};

enum {
    IBV_LINK_LAYER_UNSPECIFIED = 0,
    IBV_LINK_LAYER_INFINIBAND = 1,
    IBV_LINK_LAYER_ETHERNET = 2,
};

/* ibv_port_attr.port_cap_flags bits ferry or fakeibv look at. */
enum ibv_port_cap_flags {
    IBV_PORT_CM_SUP = 1 << 16,
    IBV_PORT_IP_BASED_GIDS = 1 << 26,
};

/*
 * The layout of rdma-core 44. Releases from 50 on append active_speed_ex;
 * the size passed to verbs_context::query_port says which a caller has.
 */
struct ibv_port_attr {
    enum ibv_port_state state;
    enum ibv_mtu max_mtu;
    enum ibv_mtu active_mtu;
    int gid_tbl_len;
    uint32_t port_cap_flags;
    uint32_t max_msg_sz;
    uint32_t bad_pkey_cntr;
    uint32_t qkey_viol_cntr;
    uint16_t pkey_tbl_len;
    uint16_t lid;
    uint16_t sm_lid;
    uint8_t lmc;
    uint8_t max_vl_num;
    uint8_t sm_sl;
    uint8_t subnet_timeout;
    uint8_t init_type_reply;
    uint8_t active_width;
    uint8_t active_speed;
    uint8_t phys_state;
    uint8_t link_layer;
    uint8_t flags;
    uint16_t port_cap_flags2;
};

#endif /* FERRY_VERBS_ABI_DEVICE_H */
