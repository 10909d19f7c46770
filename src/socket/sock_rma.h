/*
 * One-sided operations over TCP (core/rma.h): a group is one TCP
 * connection to every other rank, carrying frames both ways. A frame is a
 * 64-byte header, and a payload for puts and get replies. The target's
 * progress applies a put straight into its registered region, then the
 * put's signal, then answers; the initiator's request is done at the
 * answer. One connection per pair keeps every rank's frames in order, so
 * a signal is seen only after its data and a flush's answer comes after
 * every earlier put was applied.
 *
 * Every outgoing operation is a request of the peer's request ring
 * (proxy/ring.h), one part each: posted when queued, transmitted when its
 * frame left, done at the answer. So the dump and the stall WARN see them.
 * Progress is driven by the caller's test() / progress() (no helper
 * threads); one lock per group serialises it with the posts.
 */
#ifndef FERRY_SOCK_RMA_H
#define FERRY_SOCK_RMA_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/rma.h"
#include "core/rma_link.h"
#include "core/rma_regs.h"
#include "proxy/ring.h"
#include "socket/sock_gpu.h"

#define FERRY_SOCK_RMA_MAGIC       0x616d726bU            /* "krma" on the wire. */
#define FERRY_SOCK_RMA_GROUP_MAGIC 0x70726761726d6b73ULL
#define FERRY_SOCK_RMA_LISTEN_MAGIC 0x6e736c61726d6b73ULL
#define FERRY_SOCK_RMA_MR_MAGIC    0x72726d61726d6b73ULL
#define FERRY_SOCK_RMA_MAX_REGS    FERRY_RMA_MAX_REGS /* Regions a group may register in its life. */
/* Ranks in a group: 2,048 nodes of 8. Each peer costs its ring, its queue, its
 * TCP connection (a descriptor) and the regions registered (core/rma_regs.h). */
#define FERRY_SOCK_RMA_MAX_RANKS   16384
/* Outgoing frames per peer: our 32 requests, answers to its 32, and a registration. */
#define FERRY_SOCK_RMA_TXQ         80
/* Per peer and progress call: frames handled and payload bytes moved at most. */
#define FERRY_SOCK_RMA_STEP_FRAMES 8
#define FERRY_SOCK_RMA_STEP_BYTES  (4u << 20)

typedef enum ferry_sock_rma_op {
    FERRY_SOCK_RMA_HELLO = 1, /* Connector -> listener: rank, group size, the listener's token. */
    FERRY_SOCK_RMA_REG,       /* Region number reg has size bytes on the sender. */
    FERRY_SOCK_RMA_PUT,       /* size payload bytes for reg at off; then the signal if any. */
    FERRY_SOCK_RMA_GET,       /* Send back size bytes of reg at off. */
    FERRY_SOCK_RMA_FLUSH,     /* Answer once every earlier put is applied. */
    FERRY_SOCK_RMA_ACK,       /* Answer to a PUT or FLUSH: status. */
    FERRY_SOCK_RMA_REPLY,     /* Answer to a GET: status, then size payload bytes when OK. */
    FERRY_SOCK_RMA_BYE,       /* The sender closes its group: no more frames follow. */
} ferry_sock_rma_op_t;

typedef struct ferry_sock_rma_frame {
    uint32_t magic;     /* FERRY_SOCK_RMA_MAGIC. */
    uint8_t  op;        /* ferry_sock_rma_op_t. */
    uint8_t  sig_op;    /* FERRY_RMA_SIGNAL_* of a PUT. */
    uint16_t spare;
    uint32_t seq;       /* The initiator's message number; answers carry it back. */
    uint32_t reg;       /* Region number at the target (HELLO: the sender's rank). */
    uint64_t off;       /* HELLO: the listener's token. */
    uint64_t size;      /* HELLO: the group's size. */
    uint32_t sig_reg;
    int32_t  status;    /* Answers: ferry_status_t. */
    uint64_t sig_off;
    uint64_t sig_value;
    uint64_t check;     /* ferry_sock_rma_check() of the fields above. */
} ferry_sock_rma_frame_t;
_Static_assert(sizeof(ferry_sock_rma_frame_t) == 64, "RMA frame is 64 bytes on the wire");

/* The listen handle: the group's TCP link's (core/rma_link.h), magic FERRY_SOCK_RMA_MAGIC. */
typedef ferry_rma_link_handle_t ferry_sock_rma_handle_t;

typedef struct ferry_sock_rma_listen {
    uint64_t magic;
    int      fd;
    int      dev;
    uint64_t token;
    char     addr[64];
} ferry_sock_rma_listen_t;

typedef struct ferry_sock_rma_mr {
    uint64_t magic;
    uint32_t index;     /* Its number in the group's registration order. */
    char    *base;      /* The caller's address: host memory, or GPU memory when is_gpu. */
    size_t   size;
    int      is_gpu;    /* Its bytes cross TCP through gpu.shadow (sock_rma_gpu.c). */
    ferry_sock_gpu_region_t gpu;
} ferry_sock_rma_mr_t;

/* One frame waiting to go out, with the payload that follows it. */
typedef struct ferry_sock_rma_tx {
    ferry_sock_rma_frame_t frame;
    const char            *payload;
    size_t                 len;
    int                    owned;   /* payload is a copy to free once sent (sock_rma_forget.c). */
    ferry_px_req_t        *req; /* Our request the frame carries, or NULL (an answer). */
} ferry_sock_rma_tx_t;

struct ferry_sock_rma_group;

typedef struct ferry_sock_rma_peer {
    ferry_px_ring_t              ring;   /* First: ring ops find the peer from it. */
    struct ferry_sock_rma_group *group;
    int                          rank;
    int                          fd;     /* -1 for the caller's own rank. */
    char                         addr[64];
    int                          has_ring;
    int                          bye;    /* It closed its group in order. */
    int                          dead;   /* Its connection failed; reason in the ring. */
    uint32_t                     nregs;  /* Regions it told us about (REG frames)... */
    ferry_rma_regs_t             reg_size; /* ...and their sizes (uint64_t by region number). */
    /* Outgoing frames, a ring buffer. */
    ferry_sock_rma_tx_t          tx[FERRY_SOCK_RMA_TXQ];
    uint32_t                     tx_head, tx_tail; /* tail - head queued. */
    size_t                       tx_sent;          /* Bytes of tx[head] (frame + payload) sent. */
    /* Incoming. */
    ferry_sock_rma_frame_t       rx;
    size_t                       rx_got;   /* Header bytes read. */
    int                          rx_body;  /* Reading the payload of rx. */
    char                        *rx_dst;   /* Where it goes; NULL: read and dropped. */
    int                          rx_dropped; /* A REPLY's landing region left: its get fails. */
    size_t                       rx_got_body;
    int32_t                      rx_status; /* What the answer will say. */
    ferry_px_req_t              *rx_req;   /* A REPLY's request. */
    /* Each request's frame as it went out, by ring slot: what an error names. */
    ferry_sock_rma_frame_t       sent[FERRY_MAX_REQUESTS];
    /* A get's local region and offset, by ring slot: where a GPU region's bytes land. */
    ferry_sock_rma_mr_t         *land[FERRY_MAX_REQUESTS];
    uint64_t                     land_off[FERRY_MAX_REQUESTS];
} ferry_sock_rma_peer_t;

typedef struct ferry_sock_rma_group {
    uint64_t               magic;
    pthread_mutex_t        lock;      /* Posts, progress, registration. */
    int                    nranks;
    int                    rank;
    uint64_t               comm_id;
    int                    source_check; /* 0 only in tests: leave the bounds to the target. */
    ferry_sock_rma_peer_t *peers;     /* nranks entries; peers[rank] is ourselves. */
    struct pollfd         *pfds;      /* One poll() per progress call finds the readable peers. */
    int                   *pfd_rank;  /* The rank of each pfds entry. */
    uint32_t               nregs;
    ferry_sock_rma_mr_t   *regs[FERRY_SOCK_RMA_MAX_REGS]; /* NULL once deregistered. */
    _Atomic int            failed;    /* A peer's connection failed. */
    ferry_sock_gpu_queue_t gpu_q;     /* Copies of GPU regions; set up by the first one. */
    char                   scratch[64 * 1024]; /* Where refused payloads are read and dropped. */
} ferry_sock_rma_group_t;

/* sock_rma_wire.c */
uint64_t ferry_sock_rma_check(const ferry_sock_rma_frame_t *f);
void ferry_sock_rma_seal(ferry_sock_rma_frame_t *f);
/* NULL, or why the frame is not one of ours (a static string). */
const char *ferry_sock_rma_frame_bad(const ferry_sock_rma_frame_t *f);
const char *ferry_sock_rma_op_str(int op);
/* Blocking exchange while connecting: the whole frame or an error, within timeout_ms. */
ferry_status_t ferry_sock_rma_send_all(int fd, const void *buf, size_t len, int timeout_ms);
ferry_status_t ferry_sock_rma_recv_all(int fd, void *buf, size_t len, int timeout_ms);

/* sock_rma_conn.c */
ferry_status_t ferry_sock_rma_listen(int dev, void *handle, void **listen_p);
ferry_status_t ferry_sock_rma_close_listen(void *listen);
ferry_status_t ferry_sock_rma_connect(void *const *handles, int nranks, int rank, void *listen,
                                      uint64_t comm_id, void **group_p);
ferry_status_t ferry_sock_rma_close(void *group);

/* sock_rma_reg.c */
ferry_status_t ferry_sock_rma_reg(void *group, void *data, size_t size, int type, void **mr_p);
ferry_status_t ferry_sock_rma_dereg(void *group, void *mr);
/* The live region number index of ours, or NULL. */
ferry_sock_rma_mr_t *ferry_sock_rma_region(ferry_sock_rma_group_t *g, uint32_t index);

/*
 * sock_rma_gpu.c: GPU regions, staged through a pinned host shadow with
 * synchronous copies (with g->lock held).
 */
ferry_status_t ferry_sock_rma_gpu_reg(ferry_sock_rma_group_t *g, ferry_sock_rma_mr_t *mr);
void ferry_sock_rma_gpu_dereg(ferry_sock_rma_mr_t *mr);
/* Before mr is freed: nothing of the group points into its memory any more. Under the lock. */
void ferry_sock_rma_forget_region(ferry_sock_rma_group_t *g, const ferry_sock_rma_mr_t *mr);
/* A frame left or was dropped: free its payload if it was a copy. */
void ferry_sock_rma_tx_release(ferry_sock_rma_tx_t *t);
/* Where TCP reads and writes [off, ...) of mr: the caller's memory, or the shadow. */
static inline char *ferry_sock_rma_host(const ferry_sock_rma_mr_t *mr, uint64_t off)
{
    return (mr->is_gpu ? mr->gpu.shadow : mr->base) + off;
}
/* Copy [off, off + len) between a GPU region and its shadow; a host region: nothing. */
ferry_status_t ferry_sock_rma_gpu_copy(ferry_sock_rma_group_t *g, ferry_sock_rma_mr_t *mr,
                                       uint64_t off, size_t len, int to_device);
/* Add to the 64-bit signal word at off of mr (after the data, in order). */
ferry_status_t ferry_sock_rma_signal(ferry_sock_rma_group_t *g, ferry_sock_rma_mr_t *mr,
                                     uint64_t off, uint64_t add);

/* sock_rma_progress.c: with g->lock held. */
/* Queue a frame to peer p; FERRY_ERR_INTERNAL when its queue is full (a bug: it is sized). */
ferry_status_t ferry_sock_rma_queue(ferry_sock_rma_peer_t *p, const ferry_sock_rma_frame_t *f,
                                    const char *payload, size_t len, ferry_px_req_t *req);
/* Move every peer's frames a bounded step. Returns work done, or < 0 (a peer failed). */
long ferry_sock_rma_progress_locked(ferry_sock_rma_group_t *g);
/* Mark peer p failed: its requests end with FERRY_ERR_REMOTE, queryLastError says so. */
void ferry_sock_rma_peer_fail(ferry_sock_rma_peer_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "RMA group rank 1 of 3 (comm 0x..)" for messages. */
void ferry_sock_rma_describe(const ferry_sock_rma_group_t *g, char *buf, size_t len);

/* sock_rma_ops.c */
extern const ferry_rma_ops_t ferry_sock_rma_ops;
extern const ferry_px_ring_ops_t ferry_sock_rma_ring_ops;

#endif
