/*
 * The libibverbs ABI that ferry's ib backend (src/ib) and its emulator
 * (tests/fakeibv) use, declared here so that neither needs rdma-core's
 * development headers to build: a GPU node image often lacks
 * libibverbs-dev, and the library itself is dlopened at run time anyway.
 *
 * What is here is rdma-core's public, stable user-space ABI (layouts,
 * constant values, the entry points' signatures), written out for exactly
 * what ferry and fakeibv touch and nothing more. Structs are complete where
 * one of them reads, writes or embeds the struct; others stay incomplete.
 * Function-pointer slots that neither calls nor fills are declared as
 * untyped placeholders: they hold the layout, not an API.
 *
 * Every struct field and constant below is listed in
 * tests/unit/verbs_abi_list.h and, on a host that has the real headers,
 * unit_test_verbs_abi compares offsets, sizes and values against them.
 * Anything added here goes into that list too.
 */
#ifndef FERRY_VERBS_ABI_H
#define FERRY_VERBS_ABI_H

#include <errno.h>
#include <linux/types.h> /* __be16/__be32/__be64: the kernel's uapi, part of libc's headers. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_ah;
struct ibv_dm;
struct ibv_srq;
struct ibv_srq_attr;
struct ibv_srq_init_attr;
struct ibv_wq;
struct ibv_mw;
struct ibv_xrcd;
struct ibv_rwq_ind_table;
struct ibv_wc_tm_info;
struct _compat_ibv_port_attr; /* ibv_port_attr as it was before port_cap_flags2. */

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

/* ---- asynchronous events ------------------------------------------------- */

enum ibv_event_type {
    IBV_EVENT_CQ_ERR = 0,
    IBV_EVENT_QP_FATAL = 1,
    IBV_EVENT_QP_REQ_ERR = 2,
    IBV_EVENT_QP_ACCESS_ERR = 3,
    IBV_EVENT_COMM_EST = 4,
    IBV_EVENT_SQ_DRAINED = 5,
    IBV_EVENT_PATH_MIG = 6,
    IBV_EVENT_PATH_MIG_ERR = 7,
    IBV_EVENT_DEVICE_FATAL = 8,
    IBV_EVENT_PORT_ACTIVE = 9,
    IBV_EVENT_PORT_ERR = 10,
    IBV_EVENT_LID_CHANGE = 11,
    IBV_EVENT_PKEY_CHANGE = 12,
    IBV_EVENT_SM_CHANGE = 13,
    IBV_EVENT_SRQ_ERR = 14,
    IBV_EVENT_SRQ_LIMIT_REACHED = 15,
    IBV_EVENT_QP_LAST_WQE_REACHED = 16,
    IBV_EVENT_CLIENT_REREGISTER = 17,
    IBV_EVENT_GID_CHANGE = 18,
    IBV_EVENT_WQ_FATAL = 19,
};

struct ibv_async_event {
    union {
        struct ibv_cq *cq;
        struct ibv_qp *qp;
        struct ibv_srq *srq;
        struct ibv_wq *wq;
        int port_num;
    } element;
    enum ibv_event_type event_type;
};

/* ---- work completions ---------------------------------------------------- */

enum ibv_wc_status {
    IBV_WC_SUCCESS = 0,
    IBV_WC_LOC_LEN_ERR = 1,
    IBV_WC_LOC_QP_OP_ERR = 2,
    IBV_WC_LOC_EEC_OP_ERR = 3,
    IBV_WC_LOC_PROT_ERR = 4,
    IBV_WC_WR_FLUSH_ERR = 5,
    IBV_WC_MW_BIND_ERR = 6,
    IBV_WC_BAD_RESP_ERR = 7,
    IBV_WC_LOC_ACCESS_ERR = 8,
    IBV_WC_REM_INV_REQ_ERR = 9,
    IBV_WC_REM_ACCESS_ERR = 10,
    IBV_WC_REM_OP_ERR = 11,
    IBV_WC_RETRY_EXC_ERR = 12,
    IBV_WC_RNR_RETRY_EXC_ERR = 13,
    IBV_WC_LOC_RDD_VIOL_ERR = 14,
    IBV_WC_REM_INV_RD_REQ_ERR = 15,
    IBV_WC_REM_ABORT_ERR = 16,
    IBV_WC_INV_EECN_ERR = 17,
    IBV_WC_INV_EEC_STATE_ERR = 18,
    IBV_WC_FATAL_ERR = 19,
    IBV_WC_RESP_TIMEOUT_ERR = 20,
    IBV_WC_GENERAL_ERR = 21,
    IBV_WC_TM_ERR = 22,
    IBV_WC_TM_RNDV_INCOMPLETE = 23,
};

enum ibv_wc_opcode {
    IBV_WC_SEND = 0,
    IBV_WC_RDMA_WRITE = 1,
    IBV_WC_RDMA_READ = 2,
    IBV_WC_COMP_SWAP = 3,
    IBV_WC_FETCH_ADD = 4,
    IBV_WC_BIND_MW = 5,
    IBV_WC_LOCAL_INV = 6,
    IBV_WC_TSO = 7,
    IBV_WC_RECV = 1 << 7, /* Receive-side opcodes have this bit. */
    IBV_WC_RECV_RDMA_WITH_IMM = (1 << 7) + 1,
};

/* ibv_cq_init_attr_ex.wc_flags: what an extended CQ can be read for. */
enum ibv_create_cq_wc_flags {
    IBV_WC_EX_WITH_BYTE_LEN = 1 << 0,
    IBV_WC_EX_WITH_IMM = 1 << 1,
    IBV_WC_EX_WITH_QP_NUM = 1 << 2,
    IBV_WC_EX_WITH_SRC_QP = 1 << 3,
    IBV_WC_EX_WITH_SLID = 1 << 4,
    IBV_WC_EX_WITH_SL = 1 << 5,
    IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6,
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7,
};

enum {
    IBV_WC_STANDARD_FLAGS = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                            IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                            IBV_WC_EX_WITH_DLID_PATH_BITS,
};

enum ibv_wc_flags {
    IBV_WC_GRH = 1 << 0,
    IBV_WC_WITH_IMM = 1 << 1,
};

struct ibv_wc {
    uint64_t wr_id;
    enum ibv_wc_status status;
    enum ibv_wc_opcode opcode;
    uint32_t vendor_err;
    uint32_t byte_len;
    union {
        __be32 imm_data;
        uint32_t invalidated_rkey;
    };
    uint32_t qp_num;
    uint32_t src_qp;
    unsigned int wc_flags;
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
};

/* ---- protection domains and memory regions ------------------------------- */

enum ibv_access_flags {
    IBV_ACCESS_LOCAL_WRITE = 1 << 0,
    IBV_ACCESS_REMOTE_WRITE = 1 << 1,
    IBV_ACCESS_REMOTE_READ = 1 << 2,
    IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
    /* Bits 20..29 are optional: a device that does not know one ignores it. */
    IBV_ACCESS_RELAXED_ORDERING = 1 << 20,
};
#define IBV_ACCESS_OPTIONAL_RANGE 0x3ff00000

struct ibv_pd {
    struct ibv_context *context;
    uint32_t handle;
};

struct ibv_mr {
    struct ibv_context *context;
    struct ibv_pd *pd;
    void *addr;
    size_t length;
    uint32_t handle;
    uint32_t lkey;
    uint32_t rkey;
};

enum ibv_rereg_mr_err_code {
    IBV_REREG_MR_ERR_INPUT = -1,
};

/* Bound to a memory window; embedded in ibv_send_wr. */
struct ibv_mw_bind_info {
    struct ibv_mr *mr;
    uint64_t addr;
    uint64_t length;
    unsigned int mw_access_flags;
};

/* ---- address handles ----------------------------------------------------- */

struct ibv_global_route {
    union ibv_gid dgid;
    uint32_t flow_label;
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t traffic_class;
};

struct ibv_grh {
    __be32 version_tclass_flow;
    __be16 paylen;
    uint8_t next_hdr;
    uint8_t hop_limit;
    union ibv_gid sgid;
    union ibv_gid dgid;
};

enum ibv_rate {
    IBV_RATE_MAX = 0,
    IBV_RATE_2_5_GBPS = 2,
    IBV_RATE_5_GBPS = 5,
    IBV_RATE_10_GBPS = 3,
    IBV_RATE_20_GBPS = 6,
    IBV_RATE_30_GBPS = 4,
    IBV_RATE_40_GBPS = 7,
    IBV_RATE_60_GBPS = 8,
    IBV_RATE_80_GBPS = 9,
    IBV_RATE_120_GBPS = 10,
    IBV_RATE_14_GBPS = 11,
    IBV_RATE_56_GBPS = 12,
    IBV_RATE_112_GBPS = 13,
    IBV_RATE_168_GBPS = 14,
    IBV_RATE_25_GBPS = 15,
    IBV_RATE_100_GBPS = 16,
    IBV_RATE_200_GBPS = 17,
    IBV_RATE_300_GBPS = 18,
    IBV_RATE_28_GBPS = 19,
    IBV_RATE_50_GBPS = 20,
    IBV_RATE_400_GBPS = 21,
    IBV_RATE_600_GBPS = 22,
    IBV_RATE_800_GBPS = 23,
    IBV_RATE_1200_GBPS = 24,
};

struct ibv_ah_attr {
    struct ibv_global_route grh;
    uint16_t dlid;
    uint8_t sl;
    uint8_t src_path_bits;
    uint8_t static_rate;
    uint8_t is_global;
    uint8_t port_num;
};

#define ETHERNET_LL_SIZE 6

/* ---- queue pairs --------------------------------------------------------- */

enum ibv_qp_type {
    IBV_QPT_RC = 2,
    IBV_QPT_UC = 3,
    IBV_QPT_UD = 4,
};

struct ibv_qp_cap {
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
};

struct ibv_qp_init_attr {
    void *qp_context;
    struct ibv_cq *send_cq;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    struct ibv_qp_cap cap;
    enum ibv_qp_type qp_type;
    int sq_sig_all;
};

enum ibv_qp_init_attr_mask {
    IBV_QP_INIT_ATTR_PD = 1 << 0,
    IBV_QP_INIT_ATTR_XRCD = 1 << 1,
    IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2,
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3,
    IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4,
    IBV_QP_INIT_ATTR_RX_HASH = 1 << 5,
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6,
};

/* ibv_qp_init_attr_ex.send_ops_flags: the ibv_wr_* verbs a QP takes. */
enum ibv_qp_create_send_ops_flags {
    IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0,
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1,
    IBV_QP_EX_WITH_SEND = 1 << 2,
    IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3,
    IBV_QP_EX_WITH_RDMA_READ = 1 << 4,
};

struct ibv_rx_hash_conf {
    uint8_t rx_hash_function;
    uint8_t rx_hash_key_len;
    uint8_t *rx_hash_key;
    uint64_t rx_hash_fields_mask;
};

/* ibv_qp_init_attr, extended: the same prefix, then comp_mask-gated fields. */
struct ibv_qp_init_attr_ex {
    void *qp_context;
    struct ibv_cq *send_cq;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    struct ibv_qp_cap cap;
    enum ibv_qp_type qp_type;
    int sq_sig_all;
    uint32_t comp_mask; /* enum ibv_qp_init_attr_mask */
    struct ibv_pd *pd;
    struct ibv_xrcd *xrcd;
    uint32_t create_flags;
    uint16_t max_tso_header;
    struct ibv_rwq_ind_table *rwq_ind_tbl;
    struct ibv_rx_hash_conf rx_hash_conf;
    uint32_t source_qpn;
    uint64_t send_ops_flags;
};

enum ibv_qp_attr_mask {
    IBV_QP_STATE = 1 << 0,
    IBV_QP_CUR_STATE = 1 << 1,
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
    IBV_QP_ACCESS_FLAGS = 1 << 3,
    IBV_QP_PKEY_INDEX = 1 << 4,
    IBV_QP_PORT = 1 << 5,
    IBV_QP_QKEY = 1 << 6,
    IBV_QP_AV = 1 << 7,
    IBV_QP_PATH_MTU = 1 << 8,
    IBV_QP_TIMEOUT = 1 << 9,
    IBV_QP_RETRY_CNT = 1 << 10,
    IBV_QP_RNR_RETRY = 1 << 11,
    IBV_QP_RQ_PSN = 1 << 12,
    IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
    IBV_QP_ALT_PATH = 1 << 14,
    IBV_QP_MIN_RNR_TIMER = 1 << 15,
    IBV_QP_SQ_PSN = 1 << 16,
    IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
    IBV_QP_PATH_MIG_STATE = 1 << 18,
    IBV_QP_CAP = 1 << 19,
    IBV_QP_DEST_QPN = 1 << 20,
};

enum ibv_qp_state {
    IBV_QPS_RESET = 0,
    IBV_QPS_INIT = 1,
    IBV_QPS_RTR = 2,
    IBV_QPS_RTS = 3,
    IBV_QPS_SQD = 4,
    IBV_QPS_SQE = 5,
    IBV_QPS_ERR = 6,
    IBV_QPS_UNKNOWN = 7,
};

enum ibv_mig_state {
    IBV_MIG_MIGRATED = 0,
    IBV_MIG_REARM = 1,
    IBV_MIG_ARMED = 2,
};

struct ibv_qp_attr {
    enum ibv_qp_state qp_state;
    enum ibv_qp_state cur_qp_state;
    enum ibv_mtu path_mtu;
    enum ibv_mig_state path_mig_state;
    uint32_t qkey;
    uint32_t rq_psn;
    uint32_t sq_psn;
    uint32_t dest_qp_num;
    unsigned int qp_access_flags;
    struct ibv_qp_cap cap;
    struct ibv_ah_attr ah_attr;
    struct ibv_ah_attr alt_ah_attr;
    uint16_t pkey_index;
    uint16_t alt_pkey_index;
    uint8_t en_sqd_async_notify;
    uint8_t sq_draining;
    uint8_t max_rd_atomic;
    uint8_t max_dest_rd_atomic;
    uint8_t min_rnr_timer;
    uint8_t port_num;
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
    uint8_t alt_port_num;
    uint8_t alt_timeout;
    uint32_t rate_limit;
};

struct ibv_qp {
    struct ibv_context *context;
    void *qp_context;
    struct ibv_pd *pd;
    struct ibv_cq *send_cq;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    uint32_t handle;
    uint32_t qp_num;
    enum ibv_qp_state state;
    enum ibv_qp_type qp_type;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t events_completed;
};

/* ---- work requests ------------------------------------------------------- */

enum ibv_wr_opcode {
    IBV_WR_RDMA_WRITE = 0,
    IBV_WR_RDMA_WRITE_WITH_IMM = 1,
    IBV_WR_SEND = 2,
    IBV_WR_SEND_WITH_IMM = 3,
    IBV_WR_RDMA_READ = 4,
    IBV_WR_ATOMIC_CMP_AND_SWP = 5,
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
};

enum ibv_send_flags {
    IBV_SEND_FENCE = 1 << 0,
    IBV_SEND_SIGNALED = 1 << 1,
    IBV_SEND_SOLICITED = 1 << 2,
    IBV_SEND_INLINE = 1 << 3,
};

struct ibv_sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

struct ibv_data_buf {
    void *addr;
    size_t length;
};

struct ibv_send_wr {
    uint64_t wr_id;
    struct ibv_send_wr *next;
    struct ibv_sge *sg_list;
    int num_sge;
    enum ibv_wr_opcode opcode;
    unsigned int send_flags;
    union {
        __be32 imm_data;
        uint32_t invalidate_rkey;
    };
    union {
        struct {
            uint64_t remote_addr;
            uint32_t rkey;
        } rdma;
        struct {
            uint64_t remote_addr;
            uint64_t compare_add;
            uint64_t swap;
            uint32_t rkey;
        } atomic;
        struct {
            struct ibv_ah *ah;
            uint32_t remote_qpn;
            uint32_t remote_qkey;
        } ud;
    } wr;
    union {
        struct {
            uint32_t remote_srqn;
        } xrc;
    } qp_type;
    union {
        struct {
            struct ibv_mw *mw;
            uint32_t rkey;
            struct ibv_mw_bind_info bind_info;
        } bind_mw;
        struct {
            void *hdr;
            uint16_t hdr_sz;
            uint16_t mss;
        } tso;
    };
};

struct ibv_recv_wr {
    uint64_t wr_id;
    struct ibv_recv_wr *next;
    struct ibv_sge *sg_list;
    int num_sge;
};

/*
 * A QP with the work-request builder API (IBVERBS_1.6): ibv_qp_to_qp_ex
 * returns it; the ibv_wr_* verbs below jump through its slots.
 */
struct ibv_qp_ex {
    struct ibv_qp qp_base;
    uint64_t comp_mask;
    uint64_t wr_id;
    unsigned int wr_flags; /* enum ibv_send_flags */
    void (*wr_atomic_cmp_swp)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr,
                              uint64_t compare, uint64_t swap);
    void (*wr_atomic_fetch_add)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr,
                                uint64_t add);
    void (*wr_bind_mw)(void);
    void (*wr_local_inv)(void);
    void (*wr_rdma_read)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr);
    void (*wr_rdma_write)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr);
    void (*wr_rdma_write_imm)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr,
                              __be32 imm_data);
    void (*wr_send)(struct ibv_qp_ex *qp);
    void (*wr_send_imm)(struct ibv_qp_ex *qp, __be32 imm_data);
    void (*wr_send_inv)(void);
    void (*wr_send_tso)(void);
    void (*wr_set_ud_addr)(struct ibv_qp_ex *qp, struct ibv_ah *ah, uint32_t remote_qpn,
                           uint32_t remote_qkey);
    void (*wr_set_xrc_srqn)(void);
    void (*wr_set_inline_data)(struct ibv_qp_ex *qp, void *addr, size_t length);
    void (*wr_set_inline_data_list)(struct ibv_qp_ex *qp, size_t num_buf,
                                    const struct ibv_data_buf *buf_list);
    void (*wr_set_sge)(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length);
    void (*wr_set_sge_list)(struct ibv_qp_ex *qp, size_t num_sge, const struct ibv_sge *sg_list);
    void (*wr_start)(struct ibv_qp_ex *qp);
    int (*wr_complete)(struct ibv_qp_ex *qp);
    void (*wr_abort)(struct ibv_qp_ex *qp);
    void (*wr_atomic_write)(void);
};

/* Enhanced connection establishment (an mlx5 feature). */
struct ibv_ece {
    uint32_t vendor_id;
    uint32_t options;
    uint32_t comp_mask;
};

/* ---- completion queues --------------------------------------------------- */

struct ibv_comp_channel {
    struct ibv_context *context;
    int fd;
    int refcnt;
};

struct ibv_cq {
    struct ibv_context *context;
    struct ibv_comp_channel *channel;
    void *cq_context;
    uint32_t handle;
    int cqe;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t comp_events_completed;
    uint32_t async_events_completed;
};

struct ibv_poll_cq_attr {
    uint32_t comp_mask;
};

/*
 * An extended CQ: ibv_cq's layout, then the polling cursor and the reader
 * slots the ibv_start_poll / ibv_wc_read_* verbs below jump through.
 */
struct ibv_cq_ex {
    struct ibv_context *context;
    struct ibv_comp_channel *channel;
    void *cq_context;
    uint32_t handle;
    int cqe;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t comp_events_completed;
    uint32_t async_events_completed;
    uint32_t comp_mask;
    enum ibv_wc_status status;
    uint64_t wr_id;
    int (*start_poll)(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr);
    int (*next_poll)(struct ibv_cq_ex *cq);
    void (*end_poll)(struct ibv_cq_ex *cq);
    enum ibv_wc_opcode (*read_opcode)(struct ibv_cq_ex *cq);
    uint32_t (*read_vendor_err)(struct ibv_cq_ex *cq);
    uint32_t (*read_byte_len)(struct ibv_cq_ex *cq);
    __be32 (*read_imm_data)(struct ibv_cq_ex *cq);
    uint32_t (*read_qp_num)(struct ibv_cq_ex *cq);
    uint32_t (*read_src_qp)(struct ibv_cq_ex *cq);
    unsigned int (*read_wc_flags)(struct ibv_cq_ex *cq);
    uint32_t (*read_slid)(struct ibv_cq_ex *cq);
    uint8_t (*read_sl)(struct ibv_cq_ex *cq);
    uint8_t (*read_dlid_path_bits)(struct ibv_cq_ex *cq);
    uint64_t (*read_completion_ts)(struct ibv_cq_ex *cq);
    uint16_t (*read_cvlan)(struct ibv_cq_ex *cq);
    uint32_t (*read_flow_tag)(struct ibv_cq_ex *cq);
    void (*read_tm_info)(struct ibv_cq_ex *cq, struct ibv_wc_tm_info *tm_info);
    uint64_t (*read_completion_wallclock_ns)(struct ibv_cq_ex *cq);
};

enum ibv_cq_init_attr_mask {
    IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0,
    IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1,
};

enum ibv_create_cq_attr_flags {
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0,
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1,
};

struct ibv_cq_init_attr_ex {
    uint32_t cqe;
    void *cq_context;
    struct ibv_comp_channel *channel;
    uint32_t comp_vector;
    uint64_t wc_flags;  /* enum ibv_create_cq_wc_flags */
    uint32_t comp_mask; /* enum ibv_cq_init_attr_mask */
    uint32_t flags;     /* enum ibv_create_cq_attr_flags */
    struct ibv_pd *parent_domain;
};

/* ---- contexts ------------------------------------------------------------ */

/*
 * The provider's table in every context. The data-path verbs (post, poll,
 * arm) are inline below and call through it, so they need no symbol; the
 * other slots are what libibverbs once called through and keep the layout.
 */
struct ibv_context_ops {
    void *(*_compat_query_device)(void);
    int (*_compat_query_port)(struct ibv_context *context, uint8_t port_num,
                              struct _compat_ibv_port_attr *port_attr);
    void *(*_compat_alloc_pd)(void);
    void *(*_compat_dealloc_pd)(void);
    void *(*_compat_reg_mr)(void);
    void *(*_compat_rereg_mr)(void);
    void *(*_compat_dereg_mr)(void);
    void *(*alloc_mw)(void);
    void *(*bind_mw)(void);
    void *(*dealloc_mw)(void);
    void *(*_compat_create_cq)(void);
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    void *(*_compat_cq_event)(void);
    void *(*_compat_resize_cq)(void);
    void *(*_compat_destroy_cq)(void);
    void *(*_compat_create_srq)(void);
    void *(*_compat_modify_srq)(void);
    void *(*_compat_query_srq)(void);
    void *(*_compat_destroy_srq)(void);
    void *(*post_srq_recv)(void);
    void *(*_compat_create_qp)(void);
    void *(*_compat_query_qp)(void);
    void *(*_compat_modify_qp)(void);
    void *(*_compat_destroy_qp)(void);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
    void *(*_compat_create_ah)(void);
    void *(*_compat_destroy_ah)(void);
    void *(*_compat_attach_mcast)(void);
    void *(*_compat_detach_mcast)(void);
    void *(*_compat_async_event)(void);
};

struct ibv_context {
    struct ibv_device *device;
    struct ibv_context_ops ops;
    int cmd_fd;
    int async_fd;
    int num_comp_vectors;
    pthread_mutex_t mutex;
    void *abi_compat; /* __VERBS_ABI_IS_EXTENDED: the context is a verbs_context's tail. */
};

#define __VERBS_ABI_IS_EXTENDED ((void *)UINTPTR_MAX)

/*
 * The extended context: slots added over the years grow downwards, so the
 * ibv_context stays last and sz says how many of them a provider filled.
 * Slots neither ferry nor fakeibv calls or fills are untyped placeholders.
 */
struct verbs_context {
    int (*query_port)(struct ibv_context *context, uint8_t port_num,
                      struct ibv_port_attr *port_attr, size_t port_attr_len);
    void (*advise_mr)(void);
    void (*alloc_null_mr)(void);
    void (*read_counters)(void);
    void (*attach_counters_point_flow)(void);
    void (*create_counters)(void);
    void (*destroy_counters)(void);
    void (*reg_dm_mr)(void);
    void (*alloc_dm)(void);
    void (*free_dm)(void);
    void (*modify_flow_action_esp)(void);
    void (*destroy_flow_action)(void);
    void (*create_flow_action_esp)(void);
    void (*modify_qp_rate_limit)(void);
    void (*alloc_parent_domain)(void);
    void (*dealloc_td)(void);
    void (*alloc_td)(void);
    void (*modify_cq)(void);
    void (*post_srq_ops)(void);
    void (*destroy_rwq_ind_table)(void);
    void (*create_rwq_ind_table)(void);
    void (*destroy_wq)(void);
    void (*modify_wq)(void);
    void (*create_wq)(void);
    void (*query_rt_values)(void);
    struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *context,
                                      struct ibv_cq_init_attr_ex *init_attr);
    void *priv;
    int (*query_device_ex)(struct ibv_context *context,
                           const struct ibv_query_device_ex_input *input,
                           struct ibv_device_attr_ex *attr, size_t attr_size);
    void (*ibv_destroy_flow)(void);
    void (*ABI_placeholder2)(void);
    void (*ibv_create_flow)(void);
    void (*ABI_placeholder1)(void);
    void (*open_qp)(void);
    struct ibv_qp *(*create_qp_ex)(struct ibv_context *context,
                                   struct ibv_qp_init_attr_ex *qp_init_attr_ex);
    void (*get_srq_num)(void);
    void (*create_srq_ex)(void);
    void (*open_xrcd)(void);
    void (*close_xrcd)(void);
    uint64_t _ABI_placeholder3;
    size_t sz; /* Bytes of this struct the provider knows, counted back from context. */
    struct ibv_context context;
};

/* The extended context around ctx, or NULL for a provider without one. */
static inline struct verbs_context *verbs_get_ctx(struct ibv_context *ctx)
{
    if (ctx->abi_compat != __VERBS_ABI_IS_EXTENDED)
        return NULL;
    return (struct verbs_context *)(void *)((char *)ctx - offsetof(struct verbs_context, context));
}

/* Whether vctx's provider knows the slot at offset slot_off (its sz reaches it). */
static inline int verbs_abi_ctx_knows_(const struct verbs_context *vctx, size_t slot_off)
{
    return vctx != NULL && vctx->sz >= sizeof(*vctx) - slot_off;
}

/* The extended context when its provider fills slot `op`, else NULL. */
#define verbs_get_ctx_op(ctx, op)                                                                \
    (verbs_abi_ctx_knows_(verbs_get_ctx(ctx), offsetof(struct verbs_context, op)) &&             \
             verbs_get_ctx(ctx)->op != NULL                                                      \
         ? verbs_get_ctx(ctx)                                                                    \
         : NULL)

/* ---- exported entry points (libibverbs.so.1) ----------------------------- */

struct ibv_device **ibv_get_device_list(int *num_devices);
void ibv_free_device_list(struct ibv_device **list);
const char *ibv_get_device_name(struct ibv_device *device);
int ibv_get_device_index(struct ibv_device *device);
__be64 ibv_get_device_guid(struct ibv_device *device);
struct ibv_context *ibv_open_device(struct ibv_device *device);
int ibv_close_device(struct ibv_context *context);
struct ibv_context *ibv_import_device(int cmd_fd);
struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle);
void ibv_unimport_pd(struct ibv_pd *pd);
struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle);
void ibv_unimport_mr(struct ibv_mr *mr);
struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle);
void ibv_unimport_dm(struct ibv_dm *dm);
int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event);
void ibv_ack_async_event(struct ibv_async_event *event);
int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr);
/* The exported symbol fills only the old layout (up to flags); see the macro below. */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct _compat_ibv_port_attr *port_attr);
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
                             size_t max_entries, uint32_t flags, size_t entry_size);
int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey);
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey);
struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
int ibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                               int access);
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access);
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                 uint64_t iova, int fd, int access);
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
                 int access);
int ibv_dereg_mr(struct ibv_mr *mr);
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context);
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel);
struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector);
int ibv_resize_cq(struct ibv_cq *cq, int cqe);
int ibv_destroy_cq(struct ibv_cq *cq);
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr);
int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask);
int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr);
int ibv_destroy_srq(struct ibv_srq *srq);
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr);
int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags);
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                 struct ibv_qp_init_attr *init_attr);
int ibv_destroy_qp(struct ibv_qp *qp);
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp);
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
                        struct ibv_grh *grh, struct ibv_ah_attr *ah_attr);
struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
                                     uint8_t port_num);
int ibv_destroy_ah(struct ibv_ah *ah);
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int ibv_fork_init(void);
enum ibv_fork_status ibv_is_fork_initialized(void);
const char *ibv_node_type_str(enum ibv_node_type node_type);
const char *ibv_port_state_str(enum ibv_port_state port_state);
const char *ibv_event_type_str(enum ibv_event_type event);
const char *ibv_wc_status_str(enum ibv_wc_status status);
int ibv_rate_to_mult(enum ibv_rate rate) __attribute__((const));
enum ibv_rate mult_to_ibv_rate(int mult) __attribute__((const));
int ibv_rate_to_mbps(enum ibv_rate rate) __attribute__((const));
enum ibv_rate mbps_to_ibv_rate(int mbps) __attribute__((const));
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
                                uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid);
int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece);
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece);

/* ---- verbs that are inline in the ABI ------------------------------------ */

/*
 * ibv_query_port as a caller compiles it: through the provider's extended
 * query_port when it has one, which fills the whole struct; else through
 * the exported compat entry, which fills the old layout (the rest zeroed).
 */
static inline int verbs_abi_query_port_(struct ibv_context *context, uint8_t port_num,
                                        struct ibv_port_attr *port_attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, query_port);

    if (vctx == NULL) {
        memset(port_attr, 0, sizeof(*port_attr));
        return ibv_query_port(context, port_num, (struct _compat_ibv_port_attr *)(void *)port_attr);
    }
    return vctx->query_port(context, port_num, port_attr, sizeof(*port_attr));
}
#define ibv_query_port(context, port_num, port_attr) \
    verbs_abi_query_port_(context, port_num, port_attr)

static inline int ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                                   uint32_t gid_index, struct ibv_gid_entry *entry, uint32_t flags)
{
    return _ibv_query_gid_ex(context, port_num, gid_index, entry, flags, sizeof(*entry));
}

static inline ssize_t ibv_query_gid_table(struct ibv_context *context,
                                          struct ibv_gid_entry *entries, size_t max_entries,
                                          uint32_t flags)
{
    return _ibv_query_gid_table(context, entries, max_entries, flags, sizeof(*entries));
}

/* Access bits in the optional range need the IBVERBS_1.8 entry, which knows of them. */
static inline struct ibv_mr *verbs_abi_reg_mr_(struct ibv_pd *pd, void *addr, size_t length,
                                               unsigned int access)
{
    if ((access & IBV_ACCESS_OPTIONAL_RANGE) == 0)
        return (ibv_reg_mr)(pd, addr, length, (int)access);
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}
#define ibv_reg_mr(pd, addr, length, access) \
    verbs_abi_reg_mr_(pd, addr, length, (unsigned int)(access))

static inline struct ibv_mr *verbs_abi_reg_mr_iova_(struct ibv_pd *pd, void *addr, size_t length,
                                                    uint64_t iova, unsigned int access)
{
    if ((access & IBV_ACCESS_OPTIONAL_RANGE) == 0)
        return (ibv_reg_mr_iova)(pd, addr, length, iova, (int)access);
    return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}
#define ibv_reg_mr_iova(pd, addr, length, iova, access) \
    verbs_abi_reg_mr_iova_(pd, addr, length, iova, (unsigned int)(access))

static inline struct ibv_cq_ex *ibv_create_cq_ex(struct ibv_context *context,
                                                 struct ibv_cq_init_attr_ex *cq_attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, create_cq_ex);

    if (vctx == NULL) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return vctx->create_cq_ex(context, cq_attr);
}

static inline struct ibv_cq *ibv_cq_ex_to_cq(struct ibv_cq_ex *cq)
{
    return (struct ibv_cq *)(void *)cq;
}

/* A plain PD-only request goes to the IBVERBS_1.1 entry, as libibverbs does. */
static inline struct ibv_qp *ibv_create_qp_ex(struct ibv_context *context,
                                              struct ibv_qp_init_attr_ex *qp_init_attr_ex)
{
    struct verbs_context *vctx;

    if (qp_init_attr_ex->comp_mask == IBV_QP_INIT_ATTR_PD)
        return ibv_create_qp(qp_init_attr_ex->pd, (struct ibv_qp_init_attr *)(void *)qp_init_attr_ex);
    vctx = verbs_get_ctx_op(context, create_qp_ex);
    if (vctx == NULL) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return vctx->create_qp_ex(context, qp_init_attr_ex);
}

/* The provider's extended query, else the basic one with the rest zeroed. */
static inline int ibv_query_device_ex(struct ibv_context *context,
                                      const struct ibv_query_device_ex_input *input,
                                      struct ibv_device_attr_ex *attr)
{
    struct verbs_context *vctx;
    int rc;

    if (input != NULL && input->comp_mask != 0)
        return EINVAL;
    vctx = verbs_get_ctx_op(context, query_device_ex);
    if (vctx != NULL) {
        rc = vctx->query_device_ex(context, input, attr, sizeof(*attr));
        if (rc != EOPNOTSUPP && rc != ENOSYS)
            return rc;
    }
    memset(attr, 0, sizeof(*attr));
    return ibv_query_device(context, &attr->orig_attr);
}

static inline int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                struct ibv_send_wr **bad_wr)
{
    return qp->context->ops.post_send(qp, wr, bad_wr);
}

static inline int ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                struct ibv_recv_wr **bad_wr)
{
    return qp->context->ops.post_recv(qp, wr, bad_wr);
}

static inline int ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    return cq->context->ops.poll_cq(cq, num_entries, wc);
}

static inline int ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return cq->context->ops.req_notify_cq(cq, solicited_only);
}

static inline int ibv_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
    return cq->start_poll(cq, attr);
}

static inline int ibv_next_poll(struct ibv_cq_ex *cq)
{
    return cq->next_poll(cq);
}

static inline void ibv_end_poll(struct ibv_cq_ex *cq)
{
    cq->end_poll(cq);
}

static inline enum ibv_wc_opcode ibv_wc_read_opcode(struct ibv_cq_ex *cq)
{
    return cq->read_opcode(cq);
}

static inline uint32_t ibv_wc_read_byte_len(struct ibv_cq_ex *cq)
{
    return cq->read_byte_len(cq);
}

static inline __be32 ibv_wc_read_imm_data(struct ibv_cq_ex *cq)
{
    return cq->read_imm_data(cq);
}

static inline uint32_t ibv_wc_read_qp_num(struct ibv_cq_ex *cq)
{
    return cq->read_qp_num(cq);
}

static inline unsigned int ibv_wc_read_wc_flags(struct ibv_cq_ex *cq)
{
    return cq->read_wc_flags(cq);
}

static inline void ibv_wr_start(struct ibv_qp_ex *qp)
{
    qp->wr_start(qp);
}

static inline int ibv_wr_complete(struct ibv_qp_ex *qp)
{
    return qp->wr_complete(qp);
}

static inline void ibv_wr_abort(struct ibv_qp_ex *qp)
{
    qp->wr_abort(qp);
}

static inline void ibv_wr_rdma_write(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
{
    qp->wr_rdma_write(qp, rkey, remote_addr);
}

static inline void ibv_wr_rdma_write_imm(struct ibv_qp_ex *qp, uint32_t rkey,
                                         uint64_t remote_addr, __be32 imm_data)
{
    qp->wr_rdma_write_imm(qp, rkey, remote_addr, imm_data);
}

static inline void ibv_wr_rdma_read(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
{
    qp->wr_rdma_read(qp, rkey, remote_addr);
}

static inline void ibv_wr_send(struct ibv_qp_ex *qp)
{
    qp->wr_send(qp);
}

static inline void ibv_wr_set_sge(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr,
                                  uint32_t length)
{
    qp->wr_set_sge(qp, lkey, addr, length);
}

static inline void ibv_wr_set_sge_list(struct ibv_qp_ex *qp, size_t num_sge,
                                       const struct ibv_sge *sg_list)
{
    qp->wr_set_sge_list(qp, num_sge, sg_list);
}

static inline void ibv_wr_set_inline_data(struct ibv_qp_ex *qp, void *addr, size_t length)
{
    qp->wr_set_inline_data(qp, addr, length);
}

#ifdef __cplusplus
}
#endif

#endif /* FERRY_VERBS_ABI_H */
