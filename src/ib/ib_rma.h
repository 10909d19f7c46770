/*
 * One-sided operations over verbs (core/rma.h): a group is one RC QP to
 * every rank on the listen device's port (our own looped back), all
 * completing into one CQ, plus one TCP connection per pair (the out-of-band link) that carries
 * the QPs' addresses at connect, each region's address, rkey and size at
 * regMrSym, and a normal close's marker. The target's CPU takes no part in
 * the data path:
 *
 *   iput        RDMA WRITE, done at its completion (the target ACKed it).
 *   iputSignal  the WRITE, then an ATOMIC_FETCH_AND_ADD of the
 *               signal word on the same QP: an RC responder executes its
 *               requests in order, so the add lands after the data.
 *   iget        RDMA READ.
 *   iflush      a zero-length RDMA READ: its answer comes after every
 *               earlier WRITE on the QP was executed at the target.
 *
 * Every operation is a request of the peer's request ring (proxy/ring.h),
 * one part per work request (an operation larger than the port's
 * max_msg_sz is cut into several: ib_rma_parts.c), so the dump and the
 * stall WARN see it; each work request carries the ring's message number,
 * its part number and the target rank in wr_id, so a late completion of a
 * request already reported finds nothing. One lock
 * per group serialises posts, polling and registration.
 */
#ifndef FERRY_IB_RMA_H
#define FERRY_IB_RMA_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/rma.h"
#include "core/rma_link.h"
#include "core/rma_regs.h"
#include "ib/ib.h"
#include "proxy/ring.h"

#define FERRY_IB_RMA_MAGIC        0x616d7269U /* "irma" on the wire. */
#define FERRY_IB_RMA_GROUP_MAGIC  0x70726761726d6269ULL
#define FERRY_IB_RMA_LISTEN_MAGIC 0x6e736c61726d6269ULL
#define FERRY_IB_RMA_MR_MAGIC     0x72726d61726d6269ULL
#define FERRY_IB_RMA_MAX_REGS     FERRY_RMA_MAX_REGS /* Regions a group may register in its life. */
/*
 * Ranks in a group: 2,048 nodes of 8. What each peer costs is its ring, its
 * QP and the regions registered (core/rma_regs.h); the CQ takes
 * FERRY_IB_RMA_SQ_DEPTH entries per peer (about 1.1 million here, within
 * what current HCAs allow).
 */
#define FERRY_IB_RMA_MAX_RANKS    16384
/*
 * Work requests one QP holds posted: two per request (put + signal) for 32
 * requests, and room. Operations cut into more parts than fit post the rest
 * from progress as completions free room (ib_rma_parts.c).
 */
#define FERRY_IB_RMA_SQ_DEPTH     (2 * FERRY_MAX_REQUESTS + 4)
/* One work request moves at most this much where the port reports no max_msg_sz. */
#define FERRY_IB_RMA_DEFAULT_MSG  (1ULL << 30)
/* Work requests one operation may take: the part number's bits in wr_id. */
#define FERRY_IB_RMA_PART_BITS    16
#define FERRY_IB_RMA_MAX_PARTS    (1U << FERRY_IB_RMA_PART_BITS)
#define FERRY_IB_RMA_RANK_BITS    16
_Static_assert(FERRY_IB_RMA_MAX_RANKS <= (1 << FERRY_IB_RMA_RANK_BITS), "ranks fit wr_id");
/* Completions one progress call takes at most. */
#define FERRY_IB_RMA_POLL_BATCH   16

/* Out-of-band messages: 64 bytes each. */
typedef enum ferry_ib_rma_kind {
    FERRY_IB_RMA_HELLO = 1, /* Dialer -> listener: rank (a), group size (size), token (addr). */
    FERRY_IB_RMA_QP,        /* The sender's QP for the receiver: qpn (a), lid, gid, port. */
    FERRY_IB_RMA_REG,       /* Region number a: addr, rkey, size on the sender. */
} ferry_ib_rma_kind_t;

typedef struct ferry_ib_rma_wire {
    uint32_t magic;      /* FERRY_IB_RMA_MAGIC; its first byte is never FERRY_IB_OOB_BYE. */
    uint8_t  kind;       /* ferry_ib_rma_kind_t. */
    uint8_t  link_layer; /* QP: IBV_LINK_LAYER_*. */
    uint8_t  mtu;        /* QP: enum ibv_mtu of the port. */
    uint8_t  spare;
    uint32_t a;          /* HELLO: rank; QP: qpn; REG: region number. */
    uint32_t rkey;       /* REG: rkey; QP: lid. */
    uint64_t addr;       /* HELLO: the listener's token; REG: the region's address. */
    uint64_t size;       /* HELLO: group size; REG: region bytes. */
    uint8_t  gid[16];    /* QP: the port's GID. */
    uint64_t check;      /* ferry_ib_rma_check() of the fields above. */
} ferry_ib_rma_wire_t;
_Static_assert(sizeof(ferry_ib_rma_wire_t) == 56, "RMA out-of-band message is 56 bytes");

/* The listen handle: the group's TCP link's (core/rma_link.h), magic FERRY_IB_RMA_MAGIC. */
typedef ferry_rma_link_handle_t ferry_ib_rma_handle_t;

typedef struct ferry_ib_rma_listen {
    uint64_t        magic;
    int             fd;
    int             dev;     /* NCCL's device number. */
    ferry_ib_dev_t *port;    /* Its (first) port: the group's QPs live there. */
    uint64_t        token;
    char            addr[64];
} ferry_ib_rma_listen_t;

/* What a peer told us about one of its regions. */
typedef struct ferry_ib_rma_remote {
    uint64_t addr;
    uint64_t size;
    uint32_t rkey;
} ferry_ib_rma_remote_t;

typedef struct ferry_ib_rma_mr {
    uint64_t       magic;
    uint32_t       index; /* Its number in the group's registration order. */
    char          *base;
    size_t         size;
    int            type;  /* FERRY_PTR_HOST or FERRY_PTR_CUDA. */
    struct ibv_mr *mr;    /* The HCA's registration covering it (ib_mr.c's cache). */
} ferry_ib_rma_mr_t;

struct ferry_ib_rma_group;

/*
 * One operation as its work requests are built: ndata data WRs of at most
 * part bytes each (one zero-length WR for an empty get, put or flush), then
 * the signal's fetch-and-add when sig; next of them are posted.
 */
typedef struct ferry_ib_rma_op {
    uint32_t            seq;    /* The ring's message number it belongs to. */
    enum ibv_wr_opcode  opcode; /* RDMA_WRITE or RDMA_READ for the data. */
    char               *local;
    uint32_t            lkey;
    uint64_t            raddr;
    uint32_t            rkey;
    uint64_t            size;
    uint64_t            part;
    uint32_t            ndata, nparts, next;
    int                 sig;
    uint64_t            sig_raddr;
    uint32_t            sig_rkey;
    uint64_t            sig_add;
} ferry_ib_rma_op_t;

typedef struct ferry_ib_rma_peer {
    ferry_px_ring_t            ring;  /* First: ring ops find the peer from it. */
    struct ferry_ib_rma_group *group;
    int                        rank;
    int                        fd;    /* Out-of-band link; -1 for our own rank. */
    char                       addr[64];
    struct ibv_qp             *qp;    /* Our own rank's is connected to itself. */
    uint32_t                   remote_qpn;
    int                        has_ring;
    int                        bye;   /* It closed its group in order. */
    int                        dead;  /* Its QP or link failed; reason in the ring. */
    ferry_ib_watch_t           watch; /* Async events on its QP (ib_async.c)... */
    int                        watching; /* ...once added. */
    ferry_rma_regs_t           regs;  /* ferry_ib_rma_remote_t by region number. */
    /* Each request's target (region, offset, size) as posted, by ring slot: errors name it. */
    uint32_t                   op_reg[FERRY_MAX_REQUESTS];
    uint64_t                   op_off[FERRY_MAX_REQUESTS];
    uint64_t                   op_size[FERRY_MAX_REQUESTS];
    ferry_ib_rma_op_t          ops[FERRY_MAX_REQUESTS]; /* Its work requests, by ring slot. */
    uint32_t                   sq_used;   /* WRs posted on qp and not completed yet. */
    uint32_t                   pump_head; /* Requests [head, tail) have WRs left to post, */
    uint32_t                   pump_tail; /* in order: nothing overtakes on the QP. */
} ferry_ib_rma_peer_t;

typedef struct ferry_ib_rma_group {
    uint64_t             magic;
    pthread_mutex_t      lock;
    int                  nranks;
    int                  rank;
    uint64_t             comm_id;
    ferry_ib_dev_t      *port;
    struct ibv_cq       *cq;
    ferry_ib_rma_peer_t *peers;       /* nranks entries; peers[rank] is ourselves. */
    uint32_t             nregs;
    ferry_ib_rma_mr_t   *regs[FERRY_IB_RMA_MAX_REGS]; /* NULL once deregistered. */
    uint64_t            *sink;        /* Where fetch-and-add results land (discarded). */
    struct ibv_mr       *sink_mr;
    _Atomic int          failed;      /* A peer failed. */
    uint64_t             last_watch_ns; /* Progress last looked at the out-of-band links. */
    char                 self[64];    /* Our out-of-band address, for messages. */
} ferry_ib_rma_group_t;

/* ib_rma_wire.c */
void ferry_ib_rma_seal(ferry_ib_rma_wire_t *w);
/* NULL when m is a sound message of kind, else why not. */
const char *ferry_ib_rma_wire_bad(const ferry_ib_rma_wire_t *m, int kind);
/* Blocking with a deadline (ms) on a non-blocking fd: FERRY_OK, or FERRY_ERR_REMOTE. */
ferry_status_t ferry_ib_rma_send_all(int fd, const void *buf, size_t len, int ms);
ferry_status_t ferry_ib_rma_recv_all(int fd, void *buf, size_t len, int ms);
/*
 * Collective step: out[r] to every peer r, then in[r] from every peer,
 * each checked as kind (in[rank], out[rank] untouched). WARNs naming step
 * and the peer on failure.
 */
ferry_status_t ferry_ib_rma_exchange(ferry_ib_rma_group_t *g, const char *step,
                                     ferry_ib_rma_wire_t *out, ferry_ib_rma_wire_t *in,
                                     int kind);
/* "RMA group rank 0 of 3 on fakeib0:1" for messages. */
void ferry_ib_rma_describe(const ferry_ib_rma_group_t *g, char *buf, size_t len);

/* ib_rma_qp.c */
ferry_status_t ferry_ib_rma_qps_create(ferry_ib_rma_group_t *g);
/* Our side of peer p's QP, for the QP message. */
void ferry_ib_rma_qp_local(const ferry_ib_rma_group_t *g, const ferry_ib_rma_peer_t *p,
                           ferry_ib_rma_wire_t *w);
/* INIT -> RTR -> RTS towards what p sent. */
ferry_status_t ferry_ib_rma_qp_up(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p,
                                  const ferry_ib_rma_wire_t *remote);

/* ib_rma_conn.c */
ferry_status_t ferry_ib_rma_listen(int dev, void *handle, void **listen_p);
ferry_status_t ferry_ib_rma_close_listen(void *listen);
ferry_status_t ferry_ib_rma_connect(void *const *handles, int nranks, int rank, void *listen,
                                    uint64_t comm_id, void **group_p);
ferry_status_t ferry_ib_rma_close(void *group);

/* ib_rma_reg.c */
ferry_status_t ferry_ib_rma_reg(void *group, void *data, size_t size, int type, void **mr_p);
ferry_status_t ferry_ib_rma_reg_dmabuf(void *group, void *data, size_t size, int type,
                                       uint64_t offset, int fd, void **mr_p);
ferry_status_t ferry_ib_rma_dereg(void *group, void *mr);
/* The live region index, or NULL. */
ferry_ib_rma_mr_t *ferry_ib_rma_region(ferry_ib_rma_group_t *g, uint32_t index);

/* ib_rma_poll.c */
/* Take completions and watch the out-of-band links; with g->lock held. Returns work done. */
long ferry_ib_rma_progress_locked(ferry_ib_rma_group_t *g);
/* Mark p failed (first reason wins), with a WARN; with g->lock held. */
void ferry_ib_rma_peer_fail(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p, ferry_status_t st,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Async events on every peer's QP fail that peer (from the HCA's async thread). */
void ferry_ib_rma_watch_start(ferry_ib_rma_group_t *g);
/* What p registered as region index (size 0 where that number never reached it). */
static inline const ferry_ib_rma_remote_t *ferry_ib_rma_remote(const ferry_ib_rma_peer_t *p,
                                                               uint32_t index)
{
    static const ferry_ib_rma_remote_t none;
    const ferry_ib_rma_remote_t *r = ferry_rma_regs_find(&p->regs, index, sizeof(*r));

    return r != NULL ? r : &none;
}

/* wr_id of part k of a request of p: its message number, the part and the target rank. */
static inline uint64_t ferry_ib_rma_wr_id(const ferry_ib_rma_peer_t *p, uint32_t seq, uint32_t k)
{
    return (uint64_t)seq << 32 | (uint64_t)k << FERRY_IB_RMA_RANK_BITS | (uint32_t)p->rank;
}

/* ib_rma_parts.c */
/* The most one work request moves on g's port: its max_msg_sz, or 1 GiB where it reports 0. */
uint64_t ferry_ib_rma_max_msg(const ferry_ib_rma_group_t *g);
/* op's number of work requests, or 0 with a WARN when more than FERRY_IB_RMA_MAX_PARTS. */
uint32_t ferry_ib_rma_op_parts(ferry_ib_rma_group_t *g, ferry_ib_rma_op_t *op, const char *name,
                               int rank);
/* Bytes part k of op moves (0 for the signal). */
uint64_t ferry_ib_rma_part_bytes(const ferry_ib_rma_op_t *op, uint32_t k);
/*
 * Post what fits of p's queued requests, oldest first; with g->lock held.
 * A request whose post fails fails (WARN); returns FERRY_ERR_IO when the
 * request of seq was among them, else FERRY_OK.
 */
ferry_status_t ferry_ib_rma_pump(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p, uint32_t seq);

/* ib_rma_ops.c */
extern const ferry_px_ring_ops_t ferry_ib_rma_ring_ops;
extern const ferry_rma_ops_t ferry_ib_rma_ops;

#endif
