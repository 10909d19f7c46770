/*
 * The ib backend's comms (connection and data half): listen comm, send and
 * receive comms, memory handles, and the functions the files of this half
 * share. Device discovery, the MR cache and async events are ib.h's.
 *
 * Data moves receiver-driven, as NCCL's IB transport does:
 *  - irecv posts a 0-SGE receive WR on each data QP the message will use
 *    and RDMA-writes its n buffers' descriptors (ferry_ib_cts_t) into the
 *    sender's CTS FIFO slot seq % 32;
 *  - isend finds the descriptors there (or returns a NULL request), and
 *    RDMA-writes the data, the last WR of each QP's chain a WRITE_WITH_IMM
 *    whose completion at the receiver tells it the message (imm_data: the
 *    size for n == 1; the sizes FIFO for grouped receives).
 * Message k (counted per receive on both sides) is cut into nchains parts,
 * one per port of the larger device (1 on single ports), on consecutive data
 * QPs from k * nchains % nqps, or into nqps parts with
 * NCCL_IB_SPLIT_DATA_ON_QPS=1. A merged device's comm ("multi") differs in
 * what a part's WRITE_WITH_IMM says (message and part, FERRY_IB_IMM_CHAIN),
 * keeps receives posted on every QP, and moves a failed port's parts to the
 * others (ib_failover.c).
 *
 * Part counters (proxy/req.h) of ib requests:
 *   send: nparts      = QP chains the message is split over (1, or nqps when split)
 *         posted      += chains, when they are posted (after the CTS was read
 *                        and every buffer of a grouped receive has its isend)
 *         transmitted, done += 1 as each chain's signalled completion is polled
 *   recv: nparts      = WRITE_WITH_IMM completions expected (one per QP used)
 *         posted      += nparts, once the receive WRs are posted and the CTS written
 *         received, done += 1 as each WRITE_WITH_IMM completion is polled;
 *         sub[i].size from imm_data (n == 1) or the sizes FIFO (n > 1)
 * req->backend_word: the FIFO sequence number of the message (send: with
 * FERRY_IB_WORD_TRUNC when its buffer is too small).
 *
 * Threads: isend, irecv and test of one comm come from one thread (NCCL's
 * progress thread), so the data-path fields are plain. The async thread
 * only calls the watch callback, which fails the ring (thread-safe).
 */
#ifndef FERRY_IB_COMM_H
#define FERRY_IB_COMM_H

#include <stdint.h>
#include <sys/socket.h>

#include "core/live.h"
#include "core/log.h"
#include "core/netif.h"
#include "ib/ib.h"
#include "ib/ib_handle.h"
#include "ib/ib_oob_watch.h"

#define FERRY_IB_SEND_MAGIC   0x646e65736269662eULL
#define FERRY_IB_RECV_MAGIC   0x766365726269662eULL
#define FERRY_IB_LISTEN_MAGIC 0x6e74736c6269662eULL
#define FERRY_IB_MH_MAGIC     0x68726d2d6269662eULL
#define FERRY_IB_DEAD_MAGIC   0x646165646269662eULL /* Written at close: misuse is named. */

/* Mark an object dead just before free(): volatile, or the compiler drops the store. */
static inline void ferry_ib_magic_clear(uint64_t *magic)
{
    *(volatile uint64_t *)magic = FERRY_IB_DEAD_MAGIC;
}

/*
 * Counters and flags the signal dump's thread reads (ferry_ib_dump, _state_words,
 * ferry_ib_flush_words) while the data-path thread writes them: relaxed atomics, so
 * the dump reads a whole value and TSan sees no race. That thread is the only
 * writer, so an increment is a load and a store, not a locked read-modify-write;
 * its own reads stay plain.
 */
#define FERRY_IB_DIAG_SET(_f, _v) __atomic_store_n(&(_f), (_v), __ATOMIC_RELAXED)
#define FERRY_IB_DIAG_ADD(_f, _d) FERRY_IB_DIAG_SET(_f, (_f) + (_d))
#define FERRY_IB_DIAG_GET(_f)     __atomic_load_n(&(_f), __ATOMIC_RELAXED)

/*
 * Inbound OOB connections whose hello is not in yet (strangers until it
 * checks out) held at once; more wait in the kernel's accept queue. Real
 * peers (hello checked) are not counted: they are never evicted.
 */
#define FERRY_IB_STRANGERS_MAX 64
#define FERRY_IB_PENDING_MAX  32  /* rdmacm mode: connections in their handshake at once. */
/* A stranger older than this at a full table is evicted (a real connector's hello follows its
 * TCP handshake at once; one evicted anyway reconnects: ib_connect.c). */
#define FERRY_IB_STRANGER_GRACE_NS 100000000ULL
#define FERRY_IB_POLL_BATCH   16  /* CQEs per ibv_poll_cq. */
#define FERRY_IB_DRAIN_BATCHES 256 /* Bound on the batches a failover takes from a CQ first. */
#define FERRY_IB_CTS_SIGNAL   16  /* Every 16th CTS write is signalled, so the SQ drains. */
#define FERRY_IB_CHUNK_ALIGN  128 /* Split parts keep LL/LL128 lines whole. */
#define FERRY_IB_PEER_GRACE_NS 300000000ULL /* After the peer's EOF, completions still land. */

/* wr_id: kind in the top byte, then the QP chain index, then the FIFO sequence (low 32 bits). */
#define FERRY_IB_WR_DATA 1ULL
#define FERRY_IB_WR_CTS  2ULL
#define FERRY_IB_WR_RECV 3ULL
#define FERRY_IB_WR_FLUSH 4ULL /* The GDR flush READ (ib_flush.c); seq: its ring slot. */
#define FERRY_IB_WR_ID(_kind, _chain, _seq) \
    (((_kind) << 56) | ((uint64_t)(_chain) << 32) | ((uint64_t)(_seq) & 0xffffffffULL))
/* ...and, on a merged device, the epoch of the member whose QP carries it (bits 40-47). */
#define FERRY_IB_WR_ID_EP(_kind, _chain, _seq, _epoch) \
    (FERRY_IB_WR_ID(_kind, _chain, _seq) | ((uint64_t)(_epoch) << 40))
#define FERRY_IB_WR_EPOCH(_id) ((uint8_t)((_id) >> 40))
#define FERRY_IB_WR_KIND(_id)  ((_id) >> 56)
#define FERRY_IB_WR_CHAIN(_id) ((int)(((_id) >> 32) & 0xff))
#define FERRY_IB_WR_SEQ(_id)   ((uint32_t)(_id))

/*
 * imm_data on a merged device: message (low 23 bits), whether the sizes came
 * through the sizes FIFO (grouped receives, a send that did not fit, adaptive
 * routing's 0-byte completion) or are the bytes each part's WRITE_WITH_IMM
 * wrote (byte_len, summed over the parts), how many parts the message has
 * (1 when it went whole on one port), and which part this is. So duplicates
 * are seen and a single buffer needs no extra write.
 */
#define FERRY_IB_IMM_FIFO 0x100U
#define FERRY_IB_IMM_SEQ_MASK 0x7fffffU
#define FERRY_IB_IMM_CHAIN(_seq, _chain, _count, _fifo)                                  \
    ((((uint32_t)(_seq) & FERRY_IB_IMM_SEQ_MASK) << 9) | ((_fifo) ? FERRY_IB_IMM_FIFO : 0U) | \
     (((uint32_t)(_count) - 1U) << 4) | (uint32_t)(_chain))
#define FERRY_IB_IMM_SEQ(_imm)   ((_imm) >> 9)
#define FERRY_IB_IMM_COUNT(_imm) ((int)(((_imm) >> 4) & 0xf) + 1)
#define FERRY_IB_IMM_J(_imm)     ((int)((_imm) & 0xf))
/* Receives a merged device's QP keeps posted: every chain of every slot could land on it. */
#define FERRY_IB_RQ_DEPTH (FERRY_IB_FIFO_SLOTS * FERRY_IB_MAX_QPS)

#define FERRY_IB_WORD_TRUNC (1ULL << 63)
#define FERRY_IB_WORD_FLUSH (1ULL << 62) /* recv: the request is a GDR flush (low bits: its number). */
#define FERRY_IB_WORD_CUDA  (1ULL << 61) /* ...made with cuFlushGPUDirectRDMAWrites. */

/*
 * One port of a comm's device (a member; a device that is one port has one).
 * Its QPs are the comm's data QPs i with i % nmem == its index.
 */
typedef struct ferry_ib_member {
    ferry_ib_dev_t  *dev;
    struct ibv_cq   *cq;           /* On the member's HCA: its QPs complete here. */
    struct ibv_mr   *ctrl_mr;      /* The control block, registered on the member's HCA. */
    ferry_ib_watch_t watch;        /* Its QPs and port, on its HCA's async thread. */
    int              watching;
    int              down;         /* Failed for this comm: nothing new is posted on it. */
    uint64_t         bytes;        /* send: payload bytes posted on it. */
    uint64_t         chains;       /* Chains completed through it (send: acked; recv: landed). */
    uint64_t         moved;        /* Chains (send) or clear-to-sends (recv) moved off it. */
    _Atomic int      async_down;   /* The async thread saw a fatal event on its QPs... */
    char             async_why[160]; /* ...this one (written before async_down is set). */
    uint8_t          epoch;        /* In every WR's id; bumped when it comes back, so errors of
                                    * WRs from before the failure are known stale. */
    uint8_t          join_n;       /* send: number of the last rejoin asked (ib_rejoin.c). */
    int              joining;      /* send: a rejoin was asked, its answer is not in yet. */
    uint64_t         join_ns;      /* send: when a rejoin may be asked (again). */
    uint64_t         rejoins;      /* Times it came back into use. */
} ferry_ib_member_t;

/* What both comm kinds share: members, QPs, control block, OOB socket. */
typedef struct ferry_ib_conn {
    /* What test()'s poll reads, first, with member 0's CQ just after. */
    ferry_ib_dev_t  *dev;          /* Member 0's port: logs, the GDR flush. */
    int              devidx;       /* The device as NCCL numbers it (ferry_ib_state.vdevs). */
    int              nmem;         /* Members of our device. */
    /*
     * Either side's device is merged: every QP keeps receives posted (a
     * chain may land on any QP after a failover), imm_data names message
     * and chain, sizes always come through the sizes FIFO, and a failed
     * member's work moves to the others instead of failing the comm.
     */
    int              multi;
    uint64_t         check_ns;     /* Next liveness look (coarse clock). */
    ferry_ib_member_t mem[FERRY_IB_MAX_MEMBERS];
    int              nqps;
    struct ibv_qp   *qps[FERRY_IB_MAX_QPS];
    int              nchains;      /* QP chains per message: max(members on each side), or nqps split. */
    int              ndown;        /* Members down. */
    size_t           stripe_min;   /* multi: messages this big are striped, smaller go whole. */
    int              cts_qp;       /* recv: the QP that carries the clear-to-sends (multi). */
    uint32_t         max_inline;   /* What the QPs got (0: NCCL_IB_USE_INLINE off). */
    uint32_t         sq_depth, rq_depth; /* WRs each data QP was made for (ib_qp.c). */
    int              split;        /* NCCL_IB_SPLIT_DATA_ON_QPS. */
    void            *ctrl;         /* Page-aligned: send: CTS FIFO + sizes source; recv: sizes FIFO + CTS source. */
    size_t           ctrl_len;
    ferry_ib_meta_t  local;        /* What we told the peer... */
    ferry_ib_meta_t  remote;       /* ...and what it told us. */
    int              oob_fd;       /* Kept open: EOF = peer gone. -1 when off or closed. */
    ferry_ib_oob_watch_t oob_watch; /* Its place in the process' watch (ib_oob_watch.h); 0: none. */
    uint64_t         gone_ns;      /* When EOF was seen; 0 while the peer is there. */
    int              gone_err;     /* ...and the socket's errno then (0: EOF, a FIN). */
    int              bye;          /* The peer closed its comm normally (FERRY_IB_OOB_BYE). */
    uint8_t          oob_in[4];    /* A message from the peer being read (ib_rejoin.c). */
    int              oob_in_len;
    uint64_t         oob_check_ns; /* Next read of the OOB socket while a port is down. */
    int              registered;   /* ring is in the registry (returned to NCCL). */
    char             peer[64];     /* OOB address of the peer, "ip:port". */
    struct ferry_ib_cm_conn *cm;   /* NCCL_FERRY_IB_CM=rdmacm: the comm's CM ids; NULL in oob mode. */
} ferry_ib_conn_t;

/* Our member, and the peer's, that data QP q connects. */
static inline int ferry_ib_qp_mem(const ferry_ib_conn_t *conn, int q)
{
    return q % conn->nmem;
}
static inline int ferry_ib_qp_rmem(const ferry_ib_conn_t *conn, int q)
{
    return q % (conn->remote.nmembers > 0 ? conn->remote.nmembers : 1);
}

/* Head of both comm kinds. ring first: requests lead back to the comm. */
typedef struct ferry_ib_comm {
    ferry_px_ring_t ring;
    uint64_t        magic;         /* FERRY_IB_SEND_MAGIC / _RECV_MAGIC while alive. */
    ferry_ib_conn_t conn;
} ferry_ib_comm_t;

/* A FIFO slot as the sender fills it. */
typedef struct ferry_ib_send_slot {
    int             nreqs;         /* Buffers of the receive (from the CTS). */
    int             matched;       /* ...that have an isend. */
    int             chains;        /* QP chains posted for it... */
    int             outstanding;   /* ...whose completion is not polled yet. */
    uint32_t        trunc;         /* Buffers whose isend did not fit (bit i). */
    uint32_t        chains_done;   /* Chains whose completion was polled (bit j). */
    uint32_t        moved;         /* Chains a failover posted again, not completed yet (bit j). */
    uint8_t         nq, q0;        /* The message's chains, planned from QP q0 (ferry_ib_msg_plan). */
    uint8_t         chain_qp[FERRY_IB_MAX_QPS]; /* The QP chain j was last posted on. */
    ferry_px_req_t *reqs[FERRY_IB_MAX_RECVS]; /* Request of buffer i. */
    uint64_t        fifo_seq;
} ferry_ib_send_slot_t;

/*
 * Where a send request writes at the peer: the receive buffer its
 * clear-to-send named, and that buffer's key on each member of the
 * receiver's device. ib's own per-request state, kept by the request's ring
 * slot (ferry_ib_send_rbuf): the engine's request has no words for remote memory.
 */
typedef struct ferry_ib_rbuf {
    uint64_t        addr;
    uint32_t        rkeys[FERRY_IB_MAX_MEMBERS];
} ferry_ib_rbuf_t;
_Static_assert(sizeof(((ferry_ib_rbuf_t *)0)->rkeys) == sizeof(((ferry_ib_cts_t *)0)->rkeys),
               "a send's remote keys are the clear-to-send's");

typedef struct ferry_ib_send_comm {
    ferry_ib_comm_t        base;
    /* What isend reads on each call, together (NCCL retries it until a clear-to-send lands). */
    ferry_ib_cts_t       (*fifo)[FERRY_IB_MAX_RECVS]; /* In ctrl: the receiver writes here. */
    uint64_t               fifo_head;  /* Receives whose buffers all have an isend. */
    /*
     * Chains a failover posted again whose completion is not polled yet. While
     * any is out, isend takes no new clear-to-send: a part acknowledged on the
     * failed port after it failed lands twice (the same bytes), and its second
     * copy must not overtake a later message into a buffer the receiver has
     * reused. Once the moved chains are acknowledged, nothing of theirs is left
     * in flight.
     */
    int                    moved_out;
    /*
     * Sends that did not fit, back from the wire: failed by the next poll,
     * one test() later, so a receiver driven by the same thread in between
     * reports the mismatch first (the receiver's error is NCCL's).
     */
    int                    ntrunc;
    ferry_ib_rbuf_t        rbuf[FERRY_MAX_REQUESTS]; /* By ring slot: ferry_ib_send_rbuf. */
    ferry_ib_sizes_slot_t *sizes_src;  /* In ctrl: source of grouped-receive size writes. */
    ferry_ib_send_slot_t   slots[FERRY_IB_FIFO_SLOTS];
    int                    ar;         /* Adaptive routing: data as WRITE, then a 0-byte WRITE_WITH_IMM. */
    size_t                 ar_threshold;
    uint64_t               chains_posted, chains_done; /* For the dump. */
    ferry_px_req_t        *trunc[FERRY_IB_FIFO_SLOTS];
    /*
     * The receive of message fifo_head as isend first read it whole: every
     * isend of it matches against this copy, and finds the FIFO unchanged or
     * fails the comm (ib_send_cts.c).
     */
    ferry_ib_cts_t         cts_seen[FERRY_IB_MAX_RECVS];
} ferry_ib_send_comm_t;

/* The peer's receive buffer a posted send request of sc writes to. */
static inline ferry_ib_rbuf_t *ferry_ib_send_rbuf(ferry_ib_send_comm_t *sc,
                                                  const ferry_px_req_t *req)
{
    return &sc->rbuf[ferry_px_ring_slot_index(&sc->base.ring, req)];
}

/*
 * A receive comm's GDR flush (ib_flush.c), made on its first READ flush:
 * per HCA of the device (a merged device may span several: each orders only
 * its own writes into GPU memory), an RC QP connected to itself on that
 * member's CQ, so its completions come back through the comm's own poll;
 * and a registered host word the READs land in. Data-path thread only, but
 * the dump reads nqps (acquire: qps[] is filled first) and the counters.
 */
typedef struct ferry_ib_flush_qp {
    int             mem;           /* The member whose HCA and port it uses. */
    struct ibv_qp  *qp;
    struct ibv_mr  *word_mr;       /* The host word on that HCA. */
} ferry_ib_flush_qp_t;

/*
 * NCCL_FERRY_IB_FLUSH=auto (ib_flush_choice.c): the comm's first flushes take
 * turns between the two methods; each is timed from iflush until its request
 * is done, and the lower median of FERRY_IB_FLUSH_TRIAL - 1 (the first of each
 * warms up) picks the method for the comm's life.
 */
#define FERRY_IB_FLUSH_TRIAL 9

typedef struct ferry_ib_flush_choice {
    int             decided;       /* Release-stored once method and why are final. */
    int             method;        /* FERRY_IB_FLUSH_READ or _CUDA, once decided. */
    int             cuda_off;      /* The cuda method cannot run here (why says why). */
    int             tried[2];      /* Flushes timed per method (index: READ 0, CUDA 1). */
    uint64_t        ns[2][FERRY_IB_FLUSH_TRIAL];
    uint64_t        median_ns[2];  /* Set when chosen by timing; 0 otherwise. */
    char            why[192];      /* How the method was chosen (dump, closeRecv). */
} ferry_ib_flush_choice_t;

typedef struct ferry_ib_flush {
    ferry_ib_flush_choice_t choice;
    int             nqps;          /* 0 until the first READ flush; then one per HCA. */
    ferry_ib_flush_qp_t qps[FERRY_IB_MAX_MEMBERS];
    void           *word;          /* Page-aligned; the READs write its first byte. */
    uint64_t        reads, reads_done; /* READs posted / completed (dump). */
    uint64_t        cuda;          /* cuFlushGPUDirectRDMAWrites calls (dump). */
    uint64_t        cuda_ns, cuda_max_ns; /* Their time from iflush until done. */
    /* READ flushes completed, and their time from iflush until test() polled the last READ. */
    uint64_t        done, wait_ns, wait_max_ns;
} ferry_ib_flush_t;

typedef struct ferry_ib_recv_comm {
    ferry_ib_comm_t        base;
    /*
     * The request of FIFO slot s (message seq with seq % 32 == s). Not
     * ring.reqs[s]: flushes take ring slots too, so ring and FIFO numbers part.
     */
    ferry_px_req_t        *fifo_reqs[FERRY_IB_FIFO_SLOTS];
    ferry_ib_flush_t       flush;
    ferry_ib_cts_t       (*cts)[FERRY_IB_MAX_RECVS]; /* In ctrl: source of CTS writes. */
    ferry_ib_sizes_slot_t *sizes;      /* In ctrl: the sender writes grouped sizes here. */
    uint64_t               cts_seq;    /* Receives posted (CTS written). */
    uint64_t               imm_done;   /* WRITE_WITH_IMM completions polled (dump). */
    uint32_t               chains_seen[FERRY_IB_FIFO_SLOTS]; /* multi: chains landed (bit j) per slot. */
    uint64_t               chain_bytes[FERRY_IB_FIFO_SLOTS]; /* multi, one buffer: bytes they wrote. */
    /* Receives reported done when posted (ib_recv_early.c): the FIFO slots whose data has
     * not been seen land yet, their messages and buffer sizes; counts for the dump. */
    uint32_t               early_mask;
    uint32_t               early_seq[FERRY_IB_FIFO_SLOTS]; /* As FERRY_IB_WR_SEQ has it. */
    size_t                 early_cap[FERRY_IB_FIFO_SLOTS];
    uint64_t               early_posted, early_landed;
} ferry_ib_recv_comm_t;

/* ib_recv_early.c: receives NCCL lets complete early (NCCL_NET_OPTIONAL_RECV_COMPLETION).
 * Their completions are taken once this many are outstanding (or a FIFO slot is reused). */
#define FERRY_IB_EARLY_POLL 8
int ferry_ib_recv_early_wanted(const ferry_ib_recv_comm_t *rc, void *hint, int n, int nq);
/* 1: FIFO slot s still waits for an early receive's data (retry later); < 0: the comm's
 * failure status. */
int ferry_ib_recv_early_slot_busy(ferry_ib_recv_comm_t *rc, uint32_t s);
void ferry_ib_recv_early_post(ferry_ib_recv_comm_t *rc, ferry_px_req_t *req, uint32_t s,
                              uint64_t seq);
/* 1 if wc is the data of an early receive (handled), else 0. */
int ferry_ib_recv_early_landed(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc);
int ferry_ib_recv_early_words(const ferry_ib_recv_comm_t *rc, char *buf, size_t len);

/* ib_flush.c: iflush, its completions and errors, its resources and dump words. */
ferry_status_t ferry_ib_iflush(ferry_ib_recv_comm_t *rc, int n, void **data, int *sizes,
                               void **mhandles, void **request_p);
void ferry_ib_flush_completion(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc);

/* ib_flush_choice.c: which method flushes next, and the timings that choose it. */
int ferry_ib_flush_method(ferry_ib_recv_comm_t *rc);
void ferry_ib_flush_timed(ferry_ib_recv_comm_t *rc, int method, uint64_t ns);
void ferry_ib_flush_cuda_unusable(ferry_ib_recv_comm_t *rc, const char *why);
void ferry_ib_flush_wc_error(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc);
void ferry_ib_flush_destroy(ferry_ib_recv_comm_t *rc);
void ferry_ib_flush_words(const ferry_ib_recv_comm_t *rc, char *buf, size_t len);
/* At close: one INFO with the READ flushes' count and time (none: nothing). */
void ferry_ib_flush_close_info(const ferry_ib_recv_comm_t *rc);
void ferry_ib_flush_stall_why(const ferry_ib_recv_comm_t *rc, const ferry_px_req_t *req,
                              char *buf, size_t len);

/* A registered buffer as NCCL holds it. */
typedef struct ferry_ib_mh {
    uint64_t        magic;         /* FERRY_IB_MH_MAGIC. */
    int             devidx;        /* The device (as NCCL numbers it) of the comm it was made on. */
    int             nmem;          /* Its members: one MR each, [m] on member m's HCA. */
    struct ibv_mr  *mr[FERRY_IB_MAX_MEMBERS]; /* What our NIC reads (send) or the peer writes (recv). */
    /*
     * The MRs the peer may write into: mr for a buffer registered on a receive
     * comm; for one registered on a send comm, NULL until a receive uses the
     * handle (regIsGlobal: NCCL may register once and use the handle on every
     * comm of the device), then registered with remote write on that first use.
     */
    struct ibv_mr  *mr_remote[FERRY_IB_MAX_MEMBERS];
    ferry_ib_hca_t *hca[FERRY_IB_MAX_MEMBERS];
    uintptr_t       base;          /* What NCCL registered. */
    size_t          size;
    ferry_px_req_kind_t kind;      /* The comm's kind: recv MRs take remote writes. */
    int             type;          /* FERRY_PTR_HOST, _CUDA or _DMABUF: GPU ones get flushed. */
} ferry_ib_mh_t;

/* One inbound OOB connection in its handshake (ib_accept.c). */
typedef struct ferry_ib_pending {
    int                   fd;
    int                   state;    /* ferry_ib_acc_state_t. */
    uint64_t              since_ns;
    char                  peer[64];
    size_t                got, sent;
    struct {
        ferry_ib_hello_t  hello;
        ferry_ib_meta_t   meta;
    }                     in;     /* No padding: 32 + 192 bytes. */
    uint8_t               ready;
    int                   real;     /* Its hello checked out: a real peer, never evicted. */
    ferry_ib_recv_comm_t *comm;     /* Created once hello and metadata are in. */
} ferry_ib_pending_t;

typedef struct ferry_ib_listen_comm {
    uint64_t           magic;       /* FERRY_IB_LISTEN_MAGIC. */
    int                fd;
    int                dev;
    uint64_t           token;
    char               addr_str[64];
    int                npending;    /* Entries of pending, oldest first... */
    int                cap_pending; /* ...of this many allocated (ib_pending.c grows it). */
    int                nstrangers;  /* Entries whose hello has not checked out yet. */
    uint64_t           evicted;     /* Strangers evicted to make room, since listen. */
    ferry_ib_pending_t *pending;
    struct ferry_ib_cm_listen *cm; /* rdmacm mode: the CM listener (fd is -1); NULL in oob mode. */
} ferry_ib_listen_comm_t;

/* ib_ops.c: the core config given to init (timeouts, retries, stall warning). */
extern ferry_config_t ferry_ib_core_cfg;
extern const ferry_px_ring_ops_t ferry_ib_send_ring_ops;
extern const ferry_px_ring_ops_t ferry_ib_recv_ring_ops;

/* ib_oob.c: the out-of-band TCP pieces. */
#define FERRY_IB_OOB_EOF (-1000000) /* The peer closed its end. */
void ferry_ib_addr_str(const struct sockaddr *sa, char *buf, size_t len);
uint64_t ferry_ib_random64(void);
/* Move bytes without blocking: 1 all done, 0 try again, < 0 -errno or FERRY_IB_OOB_EOF. */
int ferry_ib_oob_send(int fd, const void *buf, size_t len, size_t *done_p);
int ferry_ib_oob_recv(int fd, void *buf, size_t len, size_t *got_p);
const char *ferry_ib_oob_strerror(int rc);
/* TCP_NODELAY, and keepalive + TCP_USER_TIMEOUT of peer_timeout_s (0: left alone). */
void ferry_ib_oob_tune(int fd, int peer_timeout_s);
/* Tell the peer this is a normal close, then close fd. */
void ferry_ib_oob_bye(int fd);
/* Handle -> socket address. */
int ferry_ib_handle_sockaddr(const ferry_ib_handle_t *h, struct sockaddr_storage *ss,
                             socklen_t *len_p);

/* ib_qp.c: a comm's verbs resources. */
struct rdma_cm_id;
/*
 * CQ, control block and nqps RC QPs at INIT; peer_members: the ports of the
 * peer's device (a receive comm's QPs keep more receives when it is merged; 0:
 * not known, as on a send comm); with cm_ids (rdmacm mode) QP i
 * is created on cm_ids[i] with rdma_create_qp, which leaves it to rdma_cm
 * to bring it up; NULL: ibv_create_qp and INIT here (oob mode).
 */
ferry_status_t ferry_ib_comm_create(ferry_px_req_kind_t kind, int devidx, int nqps,
                                    int peer_members, const char *peer,
                                    struct rdma_cm_id *const *cm_ids, ferry_ib_comm_t **comm_p);
void ferry_ib_comm_destroy(ferry_ib_comm_t *c);
/* Remote metadata checked, then every QP to RTR and RTS. WARNs naming `step`. */
ferry_status_t ferry_ib_comm_connect_qps(ferry_ib_comm_t *c, const ferry_ib_meta_t *remote,
                                         const char *step);
/* Handshake done: keep fd for liveness, watch the QPs, register the ring. */
void ferry_ib_comm_start(ferry_ib_comm_t *c, int fd);
/*
 * The clear-to-send entries e[0..n-1] of message want - 1, whose e[0].idx
 * already reads want: 1 all n are in, 0 the others still land, -1 an n
 * (e[0].nreqs, in *nreqs_p) no ferry writes.
 * isend's parser of the peer's CTS, callable alone for tests/fuzz.
 */
int ferry_ib_cts_ready(const ferry_ib_cts_t *e, uint64_t want, int *nreqs_p);
/*
 * ib_send_cts.c: isend's read of the clear-to-send of message fifo_head.
 * 1: its nreqs buffers are in sc->cts_seen, checked, and (matched > 0: isend
 * already matched that many of them) the FIFO still says the same; 0: not
 * in yet; < 0: the peer broke the protocol (WARN, the comm failed).
 */
long ferry_ib_send_cts_read(ferry_ib_send_comm_t *sc, int matched, int *nreqs_p);
/* What is wrong with a copied receive of n entries for message want - 1 (in why), or 0. */
int ferry_ib_cts_whole_why(const ferry_ib_cts_t *e, int n, uint64_t want, char *why,
                           size_t len);
/* The fields of n entries that differ between was and now, in words; returns their count. */
int ferry_ib_cts_diff(const ferry_ib_cts_t *was, const ferry_ib_cts_t *now, int n, char *buf,
                      size_t len);
/* Why metadata is unusable, or NULL. */
const char *ferry_ib_meta_check(const ferry_ib_meta_t *m, int nqps, int link_layer);
/* "fakeib0:1" of a comm. */
const char *ferry_ib_comm_where(const ferry_ib_comm_t *c);

/* ib_send.c, ib_recv.c */
ferry_status_t ferry_ib_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void **request_p);
ferry_status_t ferry_ib_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **request_p);
void ferry_ib_send_completion(ferry_ib_send_comm_t *sc, const struct ibv_wc *wc);
void ferry_ib_send_fail_trunc(ferry_ib_send_comm_t *sc);
void ferry_ib_recv_completion(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc);
/* Failover: chains (send) or clear-to-sends (recv) in flight on member m, posted again on the
 * others. Returns the requests moved, or -1 when the comm failed. */
int ferry_ib_send_move(ferry_ib_send_comm_t *sc, int m);
int ferry_ib_recv_move(ferry_ib_recv_comm_t *rc, int m);
/* A merged device's receive comm: FERRY_IB_RQ_DEPTH receives on each QP of member m (-1: all). */
ferry_status_t ferry_ib_recv_pool_fill(ferry_ib_recv_comm_t *rc, int m);
/* The index of the data QP with this number, or -1. */
int ferry_ib_qp_index(const ferry_ib_conn_t *conn, uint32_t qp_num);
/*
 * Which data QPs message fifo_seq uses: chains j = 0..count-1 on QPs
 * (first + j) % nqps, so consecutive chains alternate members.
 */
static inline void ferry_ib_msg_qps(const ferry_ib_conn_t *conn, uint64_t fifo_seq,
                                    int *first_p, int *count_p)
{
    *count_p = conn->split ? conn->nqps : conn->nchains;
    *first_p = conn->split ? 0
                           : (int)((fifo_seq * (uint64_t)conn->nchains) % (uint64_t)conn->nqps);
}
/*
 * The chains of message fifo_seq of nreqs buffers, size the first one's:
 * on a merged device a single buffer under NCCL_FERRY_IB_STRIPE_MIN goes
 * whole on one QP, consecutive messages on consecutive QPs (so alternating
 * ports); everything else as ferry_ib_msg_qps. The sender plans at isend and
 * at post with the same arguments; the receiver learns the count from imm_data.
 */
static inline void ferry_ib_msg_plan(const ferry_ib_conn_t *conn, uint64_t fifo_seq, int nreqs,
                                     size_t size, int *first_p, int *count_p)
{
    if (conn->multi && !conn->split && nreqs == 1 && size < conn->stripe_min) {
        *first_p = (int)(fifo_seq % (uint64_t)conn->nqps);
        *count_p = 1;
        return;
    }
    ferry_ib_msg_qps(conn, fifo_seq, first_p, count_p);
}
/* The QP of chain j: its planned one, or (multi) the next whose member is up. */
int ferry_ib_chain_qp(const ferry_ib_conn_t *conn, int first, int j);
/*
 * Member m of c failed (why: what was seen): no new work goes to it; one
 * WARN the first time. When no member is left the comm fails.
 * Returns 0, or the ring's error when the comm failed.
 */
long ferry_ib_member_down(ferry_ib_comm_t *c, int m, const char *why);
/* member_stop's flags: WARN (else an INFO: a port taken out on purpose); TAKE_CQ: first take
 * the completions already in the member's CQ (not while a chain is half posted: they may
 * retire the slot being posted). */
#define FERRY_IB_STOP_WARN    1U
#define FERRY_IB_STOP_TAKE_CQ 2U
/* The same as member_down (which is WARN | TAKE_CQ), with flags. */
long ferry_ib_member_stop(ferry_ib_comm_t *c, int m, const char *why, unsigned flags);
/* Hand every completion already in member m's CQ to the comm; 0 or the ring's error. */
long ferry_ib_cq_drain(ferry_ib_comm_t *c, int m);
/* A completion error on a merged device's QP (what: the WR in words): its member fails over. */
void ferry_ib_wc_failover(ferry_ib_comm_t *c, const struct ibv_wc *wc, const char *what);
/* Ports down, fatal device or async QP events: their members fail (the comm, when not merged). */
long ferry_ib_members_check(ferry_ib_comm_t *c);
/*
 * ib_rejoin.c: a failed member whose port is ACTIVE again comes back. The
 * send comm asks over the OOB socket (FERRY_IB_OOB_JOIN, its QPs reset to
 * INIT); the receive comm resets its QPs to RTS, posts its receives and
 * answers (FERRY_IB_OOB_JOINED); the send comm then brings its QPs up.
 */
void ferry_ib_rejoin_poll(ferry_ib_comm_t *c);
/* Bytes read from the OOB socket: BYE, NOPORT, and the rejoin messages. */
void ferry_ib_oob_input(ferry_ib_comm_t *c, const uint8_t *buf, size_t n);
/*
 * ib_noport.c: the last port of our merged device failed: tell the peer
 * (FERRY_IB_OOB_NOPORT); the peer's message came: fail our comm, a WARN
 * naming the peer and its device.
 */
void ferry_ib_oob_tell_no_port(ferry_ib_comm_t *c);
long ferry_ib_peer_no_port(ferry_ib_comm_t *c);
/* ib_qp.c: member m's QPs to RESET then INIT; from INIT to RTR and RTS. */
ferry_status_t ferry_ib_member_qps_reset(ferry_ib_comm_t *c, int m);
ferry_status_t ferry_ib_member_qps_up(ferry_ib_comm_t *c, int m);

/* ib_poll.c */
long ferry_ib_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now);
/* ib_oob_gone.c: the OOB socket read n (recv's result): EOF or an error marks the peer gone. */
void ferry_ib_oob_gone_note(ferry_ib_comm_t *c, ssize_t n, int err);
/* Why the comm fails now that its OOB socket is gone (the peer's BYE or not, EOF or errno). */
void ferry_ib_oob_gone_why(const ferry_ib_comm_t *c, char *why, size_t len);

/* Liveness (OOB EOF, port down), once its 1 ms deadline (conn.check_ns) passed. */
long ferry_ib_check_peer_due(ferry_ib_comm_t *c, int pending, uint64_t now);
/* The same, inline for NCCL's tight loop: nothing until the deadline. Negative: ring failed. */
static inline long ferry_ib_check_peer(ferry_ib_comm_t *c, int pending, uint64_t now)
{
    return now < c->conn.check_ns ? 0 : ferry_ib_check_peer_due(c, pending, now);
}
void ferry_ib_watch_fn(ferry_ib_watch_t *w, const char *what, int fatal);

/* Both connection modes' shared steps (ib_connect.c, ib_accept.c). */
/* The handle is a ferry ib handle and dev is ours; else WARN and an error. */
ferry_status_t ferry_ib_handle_check(const ferry_ib_handle_t *h, int dev);
/* The handle's address as a socket address, and as "ip:port" for logs. */
ferry_status_t ferry_ib_handle_peer(const ferry_ib_handle_t *h, int dev,
                                    struct sockaddr_storage *ss, socklen_t *len_p,
                                    char *peer, size_t peer_len);
/*
 * ib_conn_stage.c. The connect this handle is in the middle of, NULL on its
 * first call: the handle checked (ferry_ib_handle_check), then its stage
 * reference (core/stage_table.h); one that is not this process's live
 * connect of kind to this listener gets a WARN and FERRY_ERR_USAGE.
 */
ferry_status_t ferry_ib_handle_stage(ferry_ib_handle_t *h, int dev, ferry_stage_kind_t kind,
                                     void **stage_p);
/* A new connect's stage into the table, its reference into the handle; else WARN, no memory. */
ferry_status_t ferry_ib_handle_set_stage(ferry_ib_handle_t *h, ferry_stage_kind_t kind,
                                         void *stage, const char *peer);
/* The connect ended: its slot is freed and the handle's reference zeroed. */
void ferry_ib_handle_clear_stage(ferry_ib_handle_t *h);
/* TC and SL are the connecting side's choice: NCCL_IB_TC/_SL, else the comm's class, else 0. */
void ferry_ib_conn_class(ferry_ib_meta_t *m, const ferry_ctx_t *ctx, int traffic_class);
/* How long an inbound connection may take to show it is a real peer (NCCL_FERRY_HELLO_TIMEOUT_MS). */
uint64_t ferry_ib_hello_timeout_ns(void);
/* Why a hello cannot be a real peer's (magic, version, token), or NULL. */
const char *ferry_ib_hello_check(const ferry_ib_hello_t *hello, uint64_t token);
/* Acceptor: the peer's metadata checked, then the recv comm on devidx with its TC and SL. */
ferry_status_t ferry_ib_accept_comm(int devidx, const ferry_ib_meta_t *m, const char *peer,
                                    struct rdma_cm_id *const *cm_ids, ferry_ib_comm_t **comm_p);
/* Handshake done: start the comm on fd (its liveness) and log it, as NCCL's INFO does. */
void ferry_ib_connected(ferry_ib_comm_t *c, int fd);
void ferry_ib_accepted(ferry_ib_comm_t *c, int fd);

/* ib_cm*.c: NCCL_FERRY_IB_CM=rdmacm. */
ferry_status_t ferry_ib_cm_listen(ferry_ib_listen_comm_t *lc, struct sockaddr_storage *addr,
                                  socklen_t *len_p);
void ferry_ib_cm_listen_close(ferry_ib_listen_comm_t *lc);
ferry_status_t ferry_ib_cm_connect(ferry_ctx_t *ctx, int dev, ferry_ib_handle_t *h,
                                   int traffic_class, void **send_comm_p);
ferry_status_t ferry_ib_cm_accept(ferry_ib_listen_comm_t *lc, void **recv_comm_p);
/* Liveness: the comm's CM events; a DISCONNECTED makes its liveness fd read EOF. */
void ferry_ib_cm_poll(ferry_ib_comm_t *c);
/* Disconnect and free the comm's CM ids (its QPs go with them). */
void ferry_ib_cm_conn_free(ferry_ib_comm_t *c);

/* ib_listen.c, ib_connect.c, ib_accept.c */
ferry_status_t ferry_ib_listen(ferry_ctx_t *ctx, int dev, void *handle, void **listen_comm_p);
ferry_status_t ferry_ib_connect(ferry_ctx_t *ctx, int dev, void *handle, int traffic_class,
                                void **send_comm_p);
ferry_status_t ferry_ib_accept(void *listen_comm, void **recv_comm_p);
ferry_status_t ferry_ib_close_listen(void *listen_comm);
/* ib_pending.c: the table of inbound connections in their handshake. */
void ferry_ib_pending_drop(ferry_ib_listen_comm_t *lc, int i);
/* A new entry for fd at the table's end (NULL: out of memory; fd is not taken then). */
ferry_ib_pending_t *ferry_ib_pending_add(ferry_ib_listen_comm_t *lc, int fd);
/* Its hello checked out: count it a real peer. */
void ferry_ib_pending_real(ferry_ib_listen_comm_t *lc, ferry_ib_pending_t *p);
/* Room for one more stranger: 1, after evicting the oldest stale one if needed; 0: wait. */
int ferry_ib_pending_room(ferry_ib_listen_comm_t *lc, uint64_t now);

/* ib_dump.c: the ring ops' words. */
/*
 * ib_send.c: what an isend without its clear-to-send waits for (ring ops
 * wait_why): isend returns no request then, so the ring times the wait
 * itself (ferry_px_ring_check_wait).
 */
void ferry_ib_send_wait_why(const ferry_px_ring_t *ring, char *buf, size_t len);
void ferry_ib_stall_why(const ferry_px_ring_t *ring, const ferry_px_req_t *req, char *buf,
                        size_t len);
void ferry_ib_state_words(const ferry_px_ring_t *ring, char *buf, size_t len);
void ferry_ib_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now);
const char *ferry_ib_qp_state_str(int state);

#endif
