/*
 * fakeibv: internal object model shared by the files of the emulated verbs
 * library. Nothing here is visible to consumers; they see only the public
 * verbs structs embedded at the start of each object.
 */
#ifndef FAKEIBV_INTERNAL_H
#define FAKEIBV_INTERNAL_H

#include "ferry/verbs_abi.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "fakeibv.h"

/* Exported verbs must survive the project's hidden-by-default visibility. */
#define FAKEIBV_EXPORT __attribute__((visibility("default")))

#define FAKEIBV_MAX_DEVS 8
#define FAKEIBV_MAX_PORTS 4
#define FAKEIBV_MAX_SGE 16      /* Per WQE; reported as max_sge. */
#define FAKEIBV_MAX_INBOUND 8   /* Inbound streams one QP can serve at once. */
#define FAKEIBV_GID_TBL_LEN 4   /* fe80 v1, fe80 v2, ::ffff:ip v1, ::ffff:ip v2 */

#define fakeibv_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- configuration (fakeibv_config.c) --------------------------------- */

struct fakeibv_config {
    int ndev;                   /* FAKEIBV_NDEV: devices fakeib0.. */
    int nports;                 /* FAKEIBV_NPORTS: ports per device. */
    uint8_t link_layer;         /* FAKEIBV_LINK: IBV_LINK_LAYER_{INFINIBAND,ETHERNET}. */
    uint8_t active_speed;       /* FAKEIBV_SPEED: ibv_port_attr.active_speed code. */
    uint8_t active_width;       /* FAKEIBV_WIDTH: ibv_port_attr.active_width code. */
    enum ibv_mtu mtu;           /* FAKEIBV_MTU: active MTU. */
    uint32_t max_qp_wr;         /* FAKEIBV_MAX_QP_WR */
    uint32_t max_cqe;           /* FAKEIBV_MAX_CQE */
    uint32_t max_qp;            /* FAKEIBV_MAX_QP */
    uint32_t max_mr;            /* FAKEIBV_MAX_MR */
    uint32_t max_inline;        /* FAKEIBV_MAX_INLINE */
    uint64_t max_mr_size;       /* FAKEIBV_MAX_MR_SIZE */
    long retry_timeout_ms;      /* FAKEIBV_RETRY_TIMEOUT_MS; <0: derive from QP attrs. */
    long rnr_timeout_ms;        /* FAKEIBV_RNR_TIMEOUT_MS; <0: derive from QP attrs. */
    int debug;                  /* FAKEIBV_DEBUG: log level 0..2 on stderr. */
    int dmabuf;                 /* FAKEIBV_DMABUF: ibv_reg_dmabuf_mr supported. */
    int cuda;                   /* FAKEIBV_CUDA: try libcuda for device pointers. */
    int cuda_own_ctx;           /* FAKEIBV_CUDA_CTX: copy in a context of our own (1) or the primary one. */
    int one_copy;               /* FAKEIBV_ONE_COPY: offer/accept descriptor mode. */
    uint64_t one_copy_min;      /* FAKEIBV_ONE_COPY_MIN: smallest WR sent as a descriptor. */
    uint32_t max_msg_sz;        /* FAKEIBV_MAX_MSG_SZ: ports' max_msg_sz, enforced at post. */
    int direct;                 /* FAKEIBV_DIRECT: the posting thread sends small requests. */
    int null_payload;           /* FAKEIBV_NULL_PAYLOAD: large payloads complete without bytes. */
    uint64_t null_payload_min;  /* FAKEIBV_NULL_PAYLOAD_MIN: smallest payload skipped. */
    long test_ack_lag_us;       /* FAKEIBV_TEST_ACK_LAG_US: each ACK job sleeps first (tests). */
    long spin_us;               /* FAKEIBV_SPIN_US: engine threads poll this long before sleeping. */
    const char *sysfs_root;     /* FAKEIBV_SYSFS_ROOT (absolute); NULL: per-process default. */
    const char *fabric_dir;     /* FAKEIBV_FABRIC_DIR: path sockets there; NULL: abstract. */
    const char *netdev;         /* FAKEIBV_NETDEV: ifnames, comma-separated, one per port. */
};

const struct fakeibv_config *fakeibv_config(void);
void fakeibv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define FAKEIBV_WARN(...) fakeibv_log(0, __VA_ARGS__)
#define FAKEIBV_INFO(...) fakeibv_log(1, __VA_ARGS__)
#define FAKEIBV_TRACE(...) fakeibv_log(2, __VA_ARGS__)

/* ---- fault injection (fakeibv_fault.c) -------------------------------- */

/* Returns 0 to let the verb proceed, or the errno the verb must fail with. */
int fakeibv_fault_check(enum fakeibv_fault_kind kind);

/* ---- device, port, context (fakeibv_device.c) ------------------------- */

struct fakeibv_port {
    uint16_t lid;                 /* Unique on the fabric; owns the listener name. */
    int listen_fd;                /* Listener named by the LID (fakeibv_wire.c). */
    int gid_fd;                   /* Listener named by the netdev GID; -1 if none. */
    char netdev[16];              /* FAKEIBV_NETDEV interface of this port; "" if none. */
    uint8_t ipv4[4];              /* Its IPv4 address: GIDs 2/3 are ::ffff:ipv4. */
    unsigned ifindex;             /* gid_entry.ndev_ifindex: the netdev's (or lo's) index. */
    enum ibv_port_state state;    /* ACTIVE, or DOWN after an injected port error (atomic). */
    /* Traffic counters (fakeibv_port_counters), atomics, any thread. */
    uint64_t ctr_xmit_bytes, ctr_rcv_bytes, ctr_xmit_pkts, ctr_rcv_pkts;
};

struct fakeibv_device {
    struct ibv_device dev;        /* Must be first: consumers hold ibv_device *. */
    /* libmlx5's mlx5dv_is_supported() reads verbs_device::ops right after
     * ibv_device; keeping zeros there makes it say "not mlx5" safely. */
    void *verbs_device_pad[32];
    int index;
    uint64_t node_guid;           /* Big-endian as verbs reports it. */
    char pci[16];                 /* Fake PCI address, "0000:FX:00.0". */
    struct fakeibv_port ports[FAKEIBV_MAX_PORTS];
};

#define FAKEIBV_ASYNC_QLEN 64

struct fakeibv_context {
    struct fakeibv_device *dev;
    pthread_mutex_t async_lock;   /* Protects the async queue and the QPs' event counts. */
    pthread_cond_t async_acked;   /* A QP event was acknowledged (ibv_destroy_qp waits). */
    int async_wfd;                /* Write end; the read end is context.async_fd. */
    struct ibv_async_event async_q[FAKEIBV_ASYNC_QLEN];
    unsigned async_head, async_tail;
    struct verbs_context vctx;    /* context is its last member, as verbs.h requires. */
};

static inline struct fakeibv_context *fakeibv_ctx(struct ibv_context *c)
{
    return fakeibv_container_of(c, struct fakeibv_context, vctx.context);
}

struct fakeibv_device *fakeibv_device_by_lid(uint16_t lid, int *port_p);
void fakeibv_async_raise(struct fakeibv_context *ctx, const struct ibv_async_event *ev);
/*
 * For ibv_destroy_qp, as rdma-core and the kernel do it: the QP's events not
 * yet read leave the queue, and the call waits until the ones already handed
 * out are acknowledged (the consumer may still be reading ev.element.qp).
 */
struct fakeibv_qp;
void fakeibv_async_forget_qp(struct fakeibv_qp *qp);
uint16_t fakeibv_lid_from_gid(const union ibv_gid *gid);
void fakeibv_gid_fill(const struct fakeibv_device *dev, int port, int index,
                      union ibv_gid *gid, uint32_t *type_p);
int fakeibv_query_port_attr(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr);

const char *fakeibv_ndev_name(const struct fakeibv_port *p);
void fakeibv_cleanup_at_exit(void);

/* ---- sysfs tree (fakeibv_sysfs.c) --------------------------------------- */

/* Picks the root and checks it fits in ibv_device paths; 0 or an errno. */
int fakeibv_sysfs_pick_root(void);
const char *fakeibv_sysfs_root(void);
/* Writes the tree for the devices of this process (warns on failure). */
void fakeibv_sysfs_build(struct fakeibv_device *devs, int ndev);
void fakeibv_sysfs_port_state(const struct fakeibv_device *dev, int port);
/* Rewrites ports/<port>/counters/ from the port's counters. */
void fakeibv_sysfs_port_counters(struct fakeibv_device *dev, int port);
void fakeibv_sysfs_cleanup(void);

/* ---- listener / wire (fakeibv_wire.c) --------------------------------- */

/* Binds the port's LID listener (and its GID listener when the port has a
 * netdev address); called once per port when the device list is built. */
int fakeibv_port_bind(struct fakeibv_device *dev, int port);
void fakeibv_port_bind_gid(struct fakeibv_device *dev, int port, const union ibv_gid *gid);
/* The accept thread runs while at least one QP is past INIT. */
int fakeibv_acceptor_hold(void);
void fakeibv_acceptor_release(void);
int fakeibv_wire_connect(const struct ibv_ah_attr *ah, uint16_t src_lid, uint32_t src_qpn,
                         uint32_t dst_qpn, int *fd_p);
void fakeibv_wire_cleanup(void);
int fakeibv_io_read(int fd, void *buf, size_t len);
int fakeibv_io_write(int fd, const void *buf, size_t len);
int fakeibv_io_discard(int fd, size_t len);

/* ---- PD / MR (fakeibv_mr.c) ------------------------------------------- */

struct fakeibv_pd {
    struct ibv_pd pd;             /* Must be first. */
};

struct fakeibv_mr {
    struct ibv_mr mr;             /* Must be first. */
    uint64_t iova;                /* Address peers and SGEs name; usually == addr. */
    int access;                   /* ibv_access_flags given at registration. */
    int is_cuda;                  /* Device memory: move it with fakeibv_cuda_*(). */
    void *cu_ctx;                 /* Its device (fakeibv_cuda.c) when is_cuda. */
    uint32_t slot;                /* Index in the key table. */
};

enum fakeibv_mr_check {
    FAKEIBV_MR_OK = 0,
    FAKEIBV_MR_BAD_KEY,           /* No MR with that key. */
    FAKEIBV_MR_BAD_PD,            /* MR belongs to another PD than the QP. */
    FAKEIBV_MR_BAD_RANGE,         /* [addr, addr+len) not inside the MR. */
    FAKEIBV_MR_BAD_ACCESS,        /* MR lacks the access right needed. */
};

/* On FAKEIBV_MR_OK the MR table stays read-locked until fakeibv_mr_put(). */
enum fakeibv_mr_check fakeibv_mr_get(uint32_t key, struct ibv_pd *pd, uint64_t addr,
                                     uint64_t len, int need_access, struct fakeibv_mr **mr_p);
void fakeibv_mr_put(void);

/* Local copies that honour device memory. dst/src are MR-relative addresses. */
int fakeibv_mem_from_fd(const struct fakeibv_mr *mr, uint64_t addr, int fd, size_t len);
int fakeibv_mem_to_fd(const struct fakeibv_mr *mr, uint64_t addr, int fd, size_t len);

/* One-copy mode: len bytes between the MR at addr and another process's
 * memory, the pieces riov[0..nriov) taken from byte roff on; to_remote 0
 * reads them (process_vm_readv), 1 writes them (process_vm_writev). Device
 * memory goes through the bounce buffer. Returns 0 or an errno (ESRCH: the
 * process is gone; EFAULT: its memory is not mapped). */
struct iovec;
int fakeibv_mem_pvm(const struct fakeibv_mr *mr, uint64_t addr, size_t len, int pid,
                    const struct iovec *riov, int nriov, size_t roff, int to_remote);

/* ---- CUDA (fakeibv_cuda.c) -------------------------------------------- */

int fakeibv_cuda_is_device_ptr(uint64_t addr, void **cu_dev_p);
int fakeibv_cuda_htod(void *cu_dev, uint64_t dst, const void *src, size_t len);
int fakeibv_cuda_dtoh(void *cu_dev, void *dst, uint64_t src, size_t len);

/* ---- CQ and completion channel (fakeibv_cq.c) ------------------------- */

struct fakeibv_channel;

struct fakeibv_cq {
    union {                       /* Must be first. */
        struct ibv_cq cq;         /* What ibv_create_cq hands out. */
        struct ibv_cq_ex cqx;     /* Same prefix: what ibv_create_cq_ex hands out. */
    };
    struct ibv_wc cur;            /* Entry the ibv_start_poll API is looking at. */
    pthread_mutex_t lock;         /* Protects the ring, armed, ev_next; held
                                   * from start_poll to end_poll. */
    struct ibv_wc *ring;
    uint32_t size;                /* Ring capacity (cq.cqe). */
    uint32_t head, tail;          /* Produced / consumed counters. */
    int armed;                    /* req_notify_cq called since last event. */
    int overflowed;               /* CQ_ERR raised; further CQEs dropped. */
    int users;                    /* QPs using this CQ; destroy fails with EBUSY. */
    struct fakeibv_cq *ev_next;   /* Link in the channel's pending-event list. */
    uint64_t *trace_ts;           /* FAKEIBV_STATS: push time of entry i at [i % 1024]. */
    uint64_t trace_last_poll_ns;  /* FAKEIBV_STATS: when it was last polled. */
};
#define FAKEIBV_TRACE_CQ_TS 1024

struct fakeibv_cq *fakeibv_cq_create(struct ibv_context *context, int cqe, void *cq_context,
                                     struct ibv_comp_channel *channel, int comp_vector);
int fakeibv_cq_pop_locked(struct fakeibv_cq *cq, struct ibv_wc *wc);
/* True when the CQ looks empty, read without the lock (a consumer spinning on an
 * empty CQ must not hold the lock the "device" needs to deliver the next CQE). */
static inline int fakeibv_cq_looks_empty(struct fakeibv_cq *cq)
{
    return __atomic_load_n(&cq->head, __ATOMIC_ACQUIRE) ==
           __atomic_load_n(&cq->tail, __ATOMIC_RELAXED);
}
struct ibv_cq_ex *fakeibv_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *a);
void fakeibv_cq_push(struct fakeibv_cq *cq, const struct ibv_wc *wc);
int fakeibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int fakeibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* ---- QP (fakeibv_qp.c, fakeibv_post.c, fakeibv_xfer.c) ---------------- */

struct fakeibv_swqe {
    uint64_t wr_id;
    enum ibv_wr_opcode opcode;
    unsigned send_flags;
    uint32_t imm;                 /* Network order, passed through untouched. */
    uint64_t raddr;
    uint32_t rkey;
    uint32_t len;                 /* Total bytes of all SGEs or inline data. */
    uint64_t compare_add, swap;   /* Atomics' operands. */
    int num_sge;
    struct ibv_sge sge[FAKEIBV_MAX_SGE];
    uint8_t *inline_buf;          /* Slot in qp->inline_slab when IBV_SEND_INLINE. */
    int done;                     /* Response arrived (or local error decided). */
    uint32_t wire;                /* Bytes it put on the stream (0: none yet). */
    uint64_t seq;                 /* Wire sequence it went with; its response echoes it. */
    enum ibv_wc_status status;    /* Valid when done. */
    uint8_t direct;               /* The posting thread sent it (FAKEIBV_STATS only). */
    uint64_t post_ns;             /* When it was posted; 0 unless FAKEIBV_STATS. */
};

/* The two atomic opcodes (ATOMIC_FETCH_AND_ADD, ATOMIC_CMP_AND_SWP). */
static inline int fakeibv_is_atomic(int opcode)
{
    return opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
}

struct fakeibv_rwqe {
    uint64_t wr_id;
    int num_sge;
    struct ibv_sge sge[FAKEIBV_MAX_SGE];
};

/* Work the engine (fakeibv_engine.c) hands a worker: embedded in the QP,
 * queued at most once. */
enum fakeibv_job_kind { FAKEIBV_JOB_TX, FAKEIBV_JOB_RX, FAKEIBV_JOB_RESP };
struct fakeibv_job {
    struct fakeibv_job *next;     /* Queue link (engine lock). */
    struct fakeibv_qp *qp;
    enum fakeibv_job_kind kind;
    int slot;                     /* FAKEIBV_JOB_RESP: index in qp->in[]. */
    int queued;                   /* In the queue (engine lock). */
};

struct fakeibv_inbound {
    int fd;                       /* -1 when the slot is free. */
    int peer_pid;                 /* Requester's pid (as this process names it). */
    int one_copy;                 /* The probe passed: descriptors may come. */
    int busy;                     /* A worker is serving it. */
    int parked;                   /* Readable before the QP reached RTR: re-armed then. */
    int ended;                    /* The stream ended (shut down); closed on reuse or stop. */
    struct fakeibv_job job;
};

struct fakeibv_qp {
    struct ibv_qp_ex qpx;         /* Must be first; qpx.qp_base is the ibv_qp. */
    struct fakeibv_context *ctx;
    /* FAKEIBV_STATS: when the responder last placed an inbound WRITE / WRITE_IMM
     * (atomics, no lock; 0 once a post has measured its reaction to it). */
    uint64_t trace_in_write_ns, trace_in_imm_ns;
    pthread_mutex_t lock;         /* Protects everything below. */
    pthread_cond_t cond;          /* Signals SQ/RQ/state changes to the threads. */
    struct ibv_qp_attr attr;      /* Attributes as last modified. */
    int sq_sig_all;
    uint32_t sq_depth, rq_depth, max_send_sge, max_recv_sge, max_inline;
    /* Send queue counters, all monotonic:
     * free <= ack <= resp <= tx <= head; head - free <= sq_depth. */
    struct fakeibv_swqe *sq;
    uint8_t *inline_slab;
    uint32_t sq_head;             /* Next slot post_send fills. */
    uint32_t sq_tx;               /* Next WQE the tx thread transmits. */
    uint32_t sq_resp;             /* Next WQE waiting for a response. */
    uint32_t sq_ack;              /* Next WQE to complete to the CQ. */
    uint32_t sq_free;             /* Slots up to here may be reused. */
    int sq_blocked;               /* A local error stopped transmission. */
    int tx_busy;                  /* A thread (tx or poster) is sending a request. */
    int rx_busy;                  /* A thread (the RX job, or a poster reaping ACKs:
                                   * fakeibv_reap.c) reads responses off out_fd. */
    int rx_waiters;               /* Threads waiting on cond for rx_busy to clear. */
    uint64_t wire_out;            /* Bytes of requests sent and not yet answered: at most
                                   * what the stream still holds (fakeibv_tx.c's room check). */
    int out_sndbuf;               /* out_fd's SO_SNDBUF, read when it connected. */
    uint64_t tx_seq;              /* Wire sequence of the next request. */
    struct fakeibv_rwqe *rq;
    uint32_t rq_head, rq_tail;    /* Posted / consumed receive WQEs. */
    int rq_waiters;               /* Responders waiting for a receive WQE (RNR). */
    /* Requester connection. */
    int out_fd;                   /* Stream to the peer's port; -1 if none. */
    int mode_known;               /* The responder's FAKEIBV_OP_MODE arrived. */
    int one_copy;                 /* ... and it said descriptors are welcome. */
    int broken;                   /* Peer unreachable: retry timer runs. */
    int link_down;                /* QP_DROP or its port went down: no stream in or out
                                   * until RESET (implies broken). */
    int data_port;                /* Port (1-based) it moved data on, fixed at RTR; 0 before. */
    /* Async events about it handed out / acknowledged (under ctx->async_lock). */
    unsigned events_reported, events_completed;
    uint32_t mtu_bytes;           /* Its path MTU in bytes, fixed at RTR (packet counts). */
    struct timespec deadline;     /* When the retry timer expires (broken only). */
    int deadline_set;
    int rx_watched;               /* out_fd is in the engine's epoll set. */
    int acc_held;                 /* Counted in fakeibv_acceptor_hold() and
                                   * fakeibv_engine_hold() (RTR until reset). */
    int stopping;                 /* Jobs must end. */
    /* Engine bookkeeping (fakeibv_engine.c, under its lock). */
    struct fakeibv_job tx_job, rx_job;
    int jobs;                     /* Queued or running jobs of this QP. */
    int dead;                     /* Stopping: no new job is queued. */
    int tx_sched;                 /* tx_job queued or running. */
    int timer_on;                 /* In the engine's timer list until timer_at. */
    struct timespec timer_at;
    struct fakeibv_qp *timer_next;
    struct fakeibv_inbound in[FAKEIBV_MAX_INBOUND];
    /* ibv_wr_* staging (fakeibv_post.c). */
    struct ibv_send_wr *wr_stage;
    struct ibv_sge *wr_stage_sge;
    uint8_t *wr_stage_inl;
    uint32_t wr_nstage;
    int wr_err;
    /* Requests this QP transmitted, by kind (fakeibv_qp_stats); atomics, any thread. */
    uint64_t stat_writes, stat_writes_imm, stat_reads, stat_sends, stat_read_bytes;
};

static inline struct fakeibv_qp *fakeibv_qp(struct ibv_qp *qp)
{
    return fakeibv_container_of(qp, struct fakeibv_qp, qpx.qp_base);
}

/* fakeibv_qp.c */
struct fakeibv_qp *fakeibv_qp_lookup_get(uint32_t qpn);  /* Returns with qp->lock held. */
void fakeibv_qp_to_err_locked(struct fakeibv_qp *qp);
void fakeibv_qp_advance_locked(struct fakeibv_qp *qp);
void fakeibv_qp_set_broken_locked(struct fakeibv_qp *qp);
/* Cuts every stream of the QP, both ways, and keeps new ones out: the peer
 * QP's requests go unanswered, ours time out (QP_DROP, port down). */
void fakeibv_qp_link_down_locked(struct fakeibv_qp *qp);
/* Calls fn on every QP of the process with the registry lock held, so none
 * is destroyed meanwhile; -1 if that lock stayed held for 100 ms. */
int fakeibv_qps_each(void (*fn)(struct fakeibv_qp *qp, void *arg), void *arg);
/* fakeibv_dump.c: 1 once m is locked, 0 if it stayed held for ms milliseconds. */
int fakeibv_trylock_ms(pthread_mutex_t *m, int ms);
/* Port `port` of dev went down: every QP on it past INIT loses its link. */
void fakeibv_qps_port_down(struct fakeibv_device *dev, int port);
/* The port a QP is bound to (port_num of INIT, else the AV's), 1-based. */
int fakeibv_qp_port_num(const struct fakeibv_qp *qp);

/* ---- port counters (fakeibv_counters.c) ---------------------------------- */

/* Counts traffic of a QP's data port: bytes of payload and the packets a
 * message of `len` bytes takes (pkts_len < 0: one packet), sent (xmit 1)
 * or received; refreshes sysfs at most every 10 ms. */
void fakeibv_port_count(struct fakeibv_qp *qp, int xmit, uint64_t bytes, int64_t pkts_len);
/* Writes the sysfs counter files of the QP's data port now (QP destroyed). */
void fakeibv_port_counters_flush(struct fakeibv_qp *qp);
int fakeibv_qp_attach_inbound(uint32_t qpn, int fd, int peer_pid, int one_copy);
void fakeibv_qp_fill_ex_ops(struct fakeibv_qp *qp);
long fakeibv_qp_retry_timeout_ms(const struct fakeibv_qp *qp);
long fakeibv_qp_rnr_timeout_ms(const struct fakeibv_qp *qp, int rnr_retry);
void fakeibv_push_flush_locked(struct fakeibv_qp *qp, struct fakeibv_cq *cq, uint64_t wr_id,
                               enum ibv_wc_opcode op, enum ibv_wc_status st);

/* fakeibv_post.c */
int fakeibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int fakeibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
enum ibv_wc_opcode fakeibv_wc_opcode(enum ibv_wr_opcode op);

/* fakeibv_tx.c, fakeibv_xfer.c: the jobs behind a QP, run by the engine's
 * workers. Each returns when its stream has nothing more waiting. */
void fakeibv_tx_run(struct fakeibv_qp *qp);
/* Sends what it can of the send queue from the posting thread (qp->lock held). */
void fakeibv_tx_direct_locked(struct fakeibv_qp *qp);
void fakeibv_rx_run(struct fakeibv_qp *qp);
int fakeibv_rx_one(struct fakeibv_qp *qp, int fd);
/* fakeibv_reap.c: one reader of the outbound stream at a time. */
int fakeibv_rx_claim_locked(struct fakeibv_qp *qp);
void fakeibv_rx_unclaim_locked(struct fakeibv_qp *qp);
void fakeibv_sq_reap_locked(struct fakeibv_qp *qp);
void fakeibv_rx_hold_wait(void);
void fakeibv_tx_hold_wait(void);
void fakeibv_resp_run(struct fakeibv_qp *qp, int slot);

/* fakeibv_engine.c: the poll thread and the worker pool. */
int fakeibv_engine_hold(void);
void fakeibv_engine_release(void);
int fakeibv_engine_watch(struct fakeibv_job *j, int fd);
void fakeibv_engine_rearm(struct fakeibv_job *j, int fd);
void fakeibv_engine_unwatch(const int *fds, int n);
void fakeibv_engine_kick_tx_locked(struct fakeibv_qp *qp);
void fakeibv_engine_tx_done_locked(struct fakeibv_qp *qp, const struct timespec *deadline);
void fakeibv_engine_quiesce(struct fakeibv_qp *qp);
void fakeibv_engine_describe(char *buf, size_t len);
/* qp's engine bookkeeping (jobs, tx_sched, timer_on: the engine's lock, tried
 * for 100 ms); "jobs ?" in buf if it stayed held. For the dump. */
void fakeibv_engine_describe_qp(const struct fakeibv_qp *qp, char *buf, size_t len);

/* Live objects behind fakeibv_objects() (fakeibv_objects.c). */
extern struct fakeibv_objects fakeibv_live;
extern uint64_t fakeibv_live_cqes; /* ...and their CQs' entries (fakeibv_cq_entries). */
void fakeibv_live_add(uint64_t *counter, int delta);

/* Counters behind fakeibv_xfer_stats() (fakeibv.h), updated atomically. */
extern struct fakeibv_xfer_stats fakeibv_stats;

/* fakeibv_trace.c: FAKEIBV_STATS=1 counters, printed at exit. */
enum { FAKEIBV_TRACE_WRITE, FAKEIBV_TRACE_WRITE_IMM, FAKEIBV_TRACE_READ, FAKEIBV_TRACE_OTHER,
       FAKEIBV_TRACE_KINDS };
struct fakeibv_trace {
    int on;
    uint64_t post_calls, wrs[FAKEIBV_TRACE_KINDS], signalled, inlined, tx_sends, recv_wrs;
    uint64_t poll_calls, poll_empty, cqes, responder_reqs;
    uint64_t ack_ns[FAKEIBV_TRACE_KINDS], ack_n[FAKEIBV_TRACE_KINDS];
    uint64_t ack_direct_ns, ack_direct_n, ack_tx_ns, ack_tx_n;
    uint64_t serve_ns, serve_n;                 /* Responder: header read to answer sent. */
    uint64_t write_to_imm_ns, write_to_imm_n;   /* Inbound WRITE placed -> WRITE_IMM posted, same QP. */
    uint64_t imm_to_write_ns, imm_to_write_n;   /* Inbound WRITE_IMM placed -> WRITE posted, same QP. */
    uint64_t cqe_recv_ns, cqe_recv_n, cqe_send_ns, cqe_send_n; /* CQE pushed -> polled. */
    uint64_t poll_gap_ns, poll_gap_n;           /* Between two polls of one CQ (under 1 ms). */
    uint64_t post_call_ns;                      /* Time spent in ibv_post_send. */
};
/* A WR posted into slot w: its counts, its post time, the QP's reaction time. */
void fakeibv_trace_posted(struct fakeibv_qp *qp, const struct ibv_send_wr *wr,
                          struct fakeibv_swqe *w);
void fakeibv_trace_placed(struct fakeibv_qp *qp, int imm);
/* A poll of cq that returned got CQEs; a responder request served from t0. */
void fakeibv_trace_polled(struct fakeibv_cq *cq, int got);
void fakeibv_trace_served(uint64_t t0);
extern struct fakeibv_trace fakeibv_trace;
uint64_t fakeibv_trace_now_ns(void);
int fakeibv_trace_kind(enum ibv_wr_opcode op);
void fakeibv_trace_acked(const struct fakeibv_swqe *w);
static inline void fakeibv_trace_add(uint64_t *c, uint64_t v)
{
    __atomic_add_fetch(c, v, __ATOMIC_RELAXED);
}

/* Time helpers. */
static inline void fakeibv_deadline_in(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int fakeibv_cond_init_monotonic(pthread_cond_t *cond);

/* Every thread fakeibv starts carries a name beginning "fakeibv-". */
#define FAKEIBV_THREAD_PREFIX "fakeibv-"
int fakeibv_thread_start(pthread_t *thr, const char *name, void *(*fn)(void *), void *arg);

#endif /* FAKEIBV_INTERNAL_H */
