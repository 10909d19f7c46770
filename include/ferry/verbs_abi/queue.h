/*
 * libibverbs ABI: asynchronous events, work completions, protection domains
 * and memory regions, address handles, queue pairs, work requests and
 * completion queues.
 * Part of ferry/verbs_abi.h, which says what these declarations are and
 * where they are checked; include that header, not this one.
 */
#ifndef FERRY_VERBS_ABI_QUEUE_H
#define FERRY_VERBS_ABI_QUEUE_H

#ifndef FERRY_VERBS_ABI_H
#error "include ferry/verbs_abi.h"
#endif

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

#endif /* FERRY_VERBS_ABI_QUEUE_H */
