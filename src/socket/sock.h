/* Socket backend internals: devices, comms and lanes (one TCP stream each). */
#ifndef FERRY_SOCK_H
#define FERRY_SOCK_H

#include <limits.h>
#include <sched.h>

#include "core/backend.h"
#include "core/live.h"
#include "core/netif.h"
#include "socket/sock_stream.h"
#include "socket/sock_config.h"
#include "socket/sock_gpu.h"
#include "socket/sock_hints.h"
#include "socket/sock_wire.h"

#define FERRY_SOCK_COMM_MAGIC   0x636f6d6d6b636f73ULL /* Recognises our comms in every entry point. */
#define FERRY_SOCK_LISTEN_MAGIC 0x6e7473696c6b636fULL
#define FERRY_SOCK_MR_MAGIC     0x72656d6b636f7372ULL
#define FERRY_SOCK_PENDING_MAX  64 /* Inbound streams waiting for their hello. */
#define FERRY_SOCK_GROUP_MAX    8  /* Connections being assembled at once. */
/*
 * Measurement builds only (bench: libnccl-net-ferry-null.so, never installed):
 * 1 sends each chunk's header and none of its payload, and the receiver counts
 * the payload as read. Everything else runs as in the real plugin, so NCCL over
 * it shows the zero-cost ceiling: what one host reaches when the network moves
 * nothing (bench/README.md). Only NCCL's Simple protocol completes over it: LL
 * and LL128 find their flags in the payload.
 */
#ifndef FERRY_SOCK_NULL_PAYLOAD
#define FERRY_SOCK_NULL_PAYLOAD 0
#endif

typedef struct ferry_sock_dev {
    ferry_netif_t   ifc;
    char            pci_path[PATH_MAX]; /* Empty when the interface has no PCI device. */
    int             speed_mbps;
    char            addr_str[64];
    int             numa_node;    /* The NIC's NUMA node, -1 when unknown (lo, veth). */
    int             has_cpus;     /* cpus = that node's CPUs within the process' mask. */
    cpu_set_t       cpus;
} ferry_sock_dev_t;

/* Process-wide state: written once by init (under api.c's lock), then read-only. */
typedef struct ferry_sock_state {
    ferry_config_t      core; /* Process-wide: interface, retries, hello timeout, stall warning. */
    ferry_sock_config_t cfg;  /* The socket backend's own variables (sock_config.h). */
    ferry_sock_hints_config_t hints; /* NCCL_FERRY_NET_HINTS (sock_hints.h). */
    int                 ndev;
    ferry_sock_dev_t    devs[FERRY_NETIF_MAX];
    int                 gpu;  /* GPU buffers are taken (sock_gpu.h). */
} ferry_sock_state_t;

extern ferry_sock_state_t ferry_sock_state;

/* Zerocopy chunks a lane may have waiting for the kernel's release; then it copies. */
#define FERRY_SOCK_ZC_WAIT 16

/*
 * One TCP stream. Fields are touched by whoever holds the lane (its helper
 * thread, or NCCL's thread assisting, see ferry_sock_stream_progress_lane);
 * the ones a sleeping pool thread reads without holding it are atomics.
 */
typedef struct ferry_sock_lane {
    int                    fd;
    _Atomic int            closed;    /* Peer closed this stream (EOF seen); read by wants(). */
    /* Send side. */
    int                    has_chunk; /* claim/hdr describe the chunk in hand. */
    _Atomic int            blocked;   /* Last send hit EAGAIN: wait for POLLOUT; read by wants(). */
    ferry_sock_claim_t       claim;
    ferry_sock_chunk_hdr_t hdr;
    const ferry_sock_chunk_hdr_t *hdr_p; /* What goes out: &hdr, or a zc_hdr slot (below). */
    size_t                 sent;      /* Header + payload bytes of the chunk sent so far. */
    ferry_sock_refuse_t    refusal;   /* What the receiver sent back so far (sock_refuse.c)... */
    size_t                 refusal_got; /* ...in bytes. */
    uint64_t               peer_ns;   /* Coarse time the stream was last read without a poller. */
    uint64_t               chunk_ns;  /* When the chunk in hand was taken (send) or matched (recv). */
    /* Receive side. */
    ferry_sock_chunk_hdr_t rhdr;
    size_t                 rhdr_got;  /* Header bytes read so far. */
    ferry_px_req_t        *rreq;      /* Request the payload goes to, once matched. */
    size_t                 rgot;      /* Payload bytes of the chunk read so far. */
    _Atomic int            parked;    /* Header read, its irecv not posted yet; read by wants(). */
    /* MSG_ZEROCOPY on the send side (sock_zc.c); touched only with the lane held. */
    int                    zc_on;     /* Chunks of zc_min bytes or more go MSG_ZEROCOPY. */
    int                    zc_chunk;  /* The chunk in hand went (partly) MSG_ZEROCOPY... */
    uint32_t               zc_last;   /* ...and this is the id of its last zerocopy sendmsg. */
    uint32_t               zc_next;   /* Id the kernel gives the next zerocopy sendmsg. */
    uint32_t               zc_acked;  /* Every id below this is released by the kernel. */
    uint32_t               zc_head, zc_tail; /* Chunks waiting for their release. */
    struct {
        ferry_px_req_t *req;
        uint32_t        last;
    } zc_wait[FERRY_SOCK_ZC_WAIT];
    /* A zerocopy send pins its header too: each waiting chunk keeps its own. */
    ferry_sock_chunk_hdr_t zc_hdr[FERRY_SOCK_ZC_WAIT];
} ferry_sock_lane_t;

typedef struct ferry_sock_comm {
    ferry_sock_stream_t   px;            /* First: requests point back to it. */
    uint64_t          magic;         /* FERRY_SOCK_COMM_MAGIC while alive. */
    int               dev;
    _Atomic int       closed_lanes;  /* Lanes that saw EOF. */
    _Atomic int       refused;       /* Receive: the refusal went out (once per comm). */
    size_t            zc_min;        /* NCCL_FERRY_ZEROCOPY_MIN; 0: zerocopy off. */
    int               zc_keep;       /* NCCL_FERRY_ZEROCOPY=2: no fallback when the kernel copies. */
    /*
     * GPU buffers (sock_gpu.h), all driven by NCCL's thread. A send from GPU
     * memory is posted gated while its copy to the shadow runs; test() opens
     * the gates of finished copies, in order (gpu_next: the oldest send whose
     * gate may still be closed). A receive into GPU memory is copied there
     * once all of it arrived (gpu_copying[slot]) and reported after that.
     */
    ferry_sock_gpu_queue_t gpu;
    uint32_t          gpu_next;
    unsigned char     gpu_copying[FERRY_SOCK_GPU_SLOTS];
    ferry_sock_lane_t lanes[FERRY_SOCK_MAX_LANES];
} ferry_sock_comm_t;

typedef struct ferry_sock_pending {
    int                fd;
    ferry_sock_hello_t hello;
    size_t             got;       /* Hello bytes read so far. */
    uint64_t           since_ns;  /* When accept4 returned it; NCCL_FERRY_HELLO_TIMEOUT_MS counts from here. */
    char               peer[64];
} ferry_sock_pending_t;

typedef struct ferry_sock_group {
    uint64_t conn_id;
    int      nlanes;
    int      got;
    uint64_t last_ns;  /* When its latest stream was filed: an idle incomplete group expires. */
    int      fds[FERRY_SOCK_MAX_LANES];
    char     peer[64];
} ferry_sock_group_t;

/* accept() state; only NCCL's service thread for this listen comm touches it. */
typedef struct ferry_sock_listen_comm {
    uint64_t             magic;      /* FERRY_SOCK_LISTEN_MAGIC. */
    int                  fd;
    int                  dev;
    int                  nlanes;     /* Streams offered in the handle. */
    int                  takes_fewer; /* The handle says FERRY_SOCK_HANDLE_TAKES_FEWER. */
    uint64_t             token;
    char                 addr_str[64];
    /* " (comm 0x...)" after the address in its warnings with NCCL_FERRY_NET_HINTS=1, else "". */
    char                 comm_words[32];
    int                  npending;
    /* In arrival order, pending[0] the oldest: a full table evicts from the front. */
    ferry_sock_pending_t pending[FERRY_SOCK_PENDING_MAX];
    int                  ngroups;
    ferry_sock_group_t   groups[FERRY_SOCK_GROUP_MAX];
} ferry_sock_listen_comm_t;

typedef struct ferry_sock_mr {
    uint64_t magic;
    char    *base;   /* NCCL's address: host memory, or device memory when gpu.shadow is set. */
    size_t   size;
    ferry_sock_gpu_region_t gpu; /* Device memory: lanes move its pinned shadow. */
    /*
     * A GPU region's comm, whose stream copies in and out of the shadow;
     * NULL once the comm is closed (NCCL may deregister after closing). Both
     * under the GPU-region list's lock (sock_gpu_path.c).
     */
    struct ferry_sock_comm *gpu_comm;
    struct ferry_sock_mr   *gpu_next;
} ferry_sock_mr_t;

/* The device address behind a shadow address of a GPU region. */
static inline char *ferry_sock_mr_dev(const ferry_sock_mr_t *mr, const char *shadow_addr)
{
    return mr->base + (shadow_addr - mr->gpu.shadow);
}

/* The backend's ops table (sock_ops.c). */
extern const ferry_backend_ops_t ferry_sock_ops;

/* Clear an object's magic just before free(): volatile, or the compiler drops the dead store. */
static inline void ferry_sock_magic_clear(uint64_t *magic)
{
    *(volatile uint64_t *)magic = 0;
}


/* sock_dev.c: init parses the socket backend's variables (sock_config.h) first. */
ferry_status_t ferry_sock_init(const ferry_config_t *core);
/*
 * The INFO lines on the streams and helpers chosen for the CPU budget, and
 * the step hint where it applies: at init and when the node's masks change
 * the budget (sock_board.c).
 */
void ferry_sock_dev_log_budget(const ferry_sock_config_t *cfg, const ferry_config_t *core);
void ferry_sock_fini(void);
ferry_status_t ferry_sock_devices(int *ndev_p);
ferry_status_t ferry_sock_get_properties(int dev, ferry_props_t *props_p);

/* sock_socket.c: socket options shared by both ends. */
ferry_status_t ferry_sock_fd_tune(int fd, const char *peer);
uint64_t ferry_sock_random64(void);

/* sock_connect.c / sock_accept.c */
ferry_status_t ferry_sock_listen(ferry_ctx_t *ctx, int dev, void *handle, void **listen_comm_p);
ferry_status_t ferry_sock_connect(ferry_ctx_t *ctx, int dev, void *handle, int traffic_class,
                                  void **send_comm_p);
ferry_status_t ferry_sock_accept(void *listen_comm, void **recv_comm_p);
ferry_status_t ferry_sock_close_listen(void *listen_comm);
/* 0 if the hello is one of ours for this listener, else a static reason. */
const char *ferry_sock_hello_check(const ferry_sock_hello_t *hello, uint64_t token, int nlanes);
/*
 * The same for a listener that takes fewer streams (FERRY_SOCK_HANDLE_TAKES_FEWER):
 * a stream count of 1..offered, the lane below it. NULL if accepted, else
 * the reason (static, or written into why).
 */
const char *ferry_sock_hello_check_fewer(const ferry_sock_hello_t *hello, uint64_t token,
                                         int offered, char *why, size_t why_len);
/*
 * 1 if a received chunk header is one a ferry peer can send: its check
 * word, len <= msg_size, offset + len inside the message (no wrap), at
 * least one chunk. Whether its message fits the posted receive is the
 * request's check (ferry_px_req_learn). tests/fuzz calls it alone.
 */
int ferry_sock_chunk_hdr_ok(const ferry_sock_chunk_hdr_t *h);

/* sock_comm.c: build a comm from connected streams (takes the fds) and start its threads. */
ferry_status_t ferry_sock_comm_create(ferry_px_req_kind_t kind, int dev, const int *fds,
                                      int nlanes, const char *peer, ferry_sock_comm_t **comm_p);
void ferry_sock_comm_destroy(ferry_sock_comm_t *comm);

/* sock_lane.c */
extern const ferry_sock_stream_lane_ops_t ferry_sock_send_lane_ops;
/* A hard error on stream li: WARN with what was going on, fail the comm; returns the status. */
long ferry_sock_lane_error(ferry_sock_comm_t *c, int li, const char *op, int err,
                           const char *what);

/*
 * sock_refuse.c. Receive side: tell the sender, on every stream, that
 * message seq (msg_size bytes) does not fit the posted receive of capacity
 * bytes; the first call of a comm sends, later ones do nothing.
 */
void ferry_sock_refuse_send(ferry_sock_comm_t *c, uint32_t seq, uint64_t msg_size,
                            uint64_t capacity);
/*
 * Send side: n more bytes from the receiver arrived in stream li's
 * lane->refusal. A complete refusal fails the comm with FERRY_ERR_REMOTE and
 * a WARN; bytes that are no refusal fail it as a protocol error. Returns 0
 * (part of a refusal so far) or the negative status the comm failed with.
 */
long ferry_sock_refuse_take(ferry_sock_comm_t *c, int li, size_t n);
/* 1 if a complete frame from a receiver is a refusal this build knows; tests/fuzz calls it. */
int ferry_sock_refuse_ok(const ferry_sock_refuse_t *r);

/* MSG_ZEROCOPY (sock_zc.c). Turn it on for a send comm's lanes when zc_min > 0. */
void ferry_sock_zc_setup(ferry_sock_comm_t *c);
/* A chunk starts on lane li (header filled in): pick where its header goes out from. */
void ferry_sock_zc_prepare(ferry_sock_comm_t *c, int li);
/* Flags for the next sendmsg of lane li's chunk in hand: MSG_ZEROCOPY or 0. */
int ferry_sock_zc_flags(ferry_sock_comm_t *c, int li);
/* A sendmsg with those flags queued bytes. */
void ferry_sock_zc_sent(ferry_sock_comm_t *c, int li, int flags);
/* The chunk in hand is fully queued: complete it now, or once the kernel releases it. */
void ferry_sock_zc_chunk_queued(ferry_sock_comm_t *c, int li);
/* Read the kernel's releases and complete the chunks they cover (lane ops retire). */
long ferry_sock_zc_retire(ferry_sock_stream_t *px, int li);
extern const ferry_sock_stream_lane_ops_t ferry_sock_recv_lane_ops;
/* sock_gpu_path.c: GPU buffers in the data path. */
/* List a registered GPU region with its comm; unlink it (after the comm's queued copies). */
void ferry_sock_mr_gpu_link(ferry_sock_mr_t *mr, ferry_sock_comm_t *comm);
void ferry_sock_mr_gpu_unlink(ferry_sock_mr_t *mr);
/* A closing comm's GPU regions stop pointing at it. */
void ferry_sock_mr_forget_comm(ferry_sock_comm_t *comm);
/* isend from a GPU region: posted gated while its copy to the shadow runs. */
ferry_status_t ferry_sock_isend_gpu(ferry_sock_comm_t *c, void *data, size_t size,
                                    ferry_sock_mr_t *mr, void **request_p);
/* irecv: into the shadow when the buffer is a GPU region. */
ferry_px_req_t *ferry_sock_post_recv(ferry_sock_comm_t *c, void *data, size_t size,
                                     void *mhandle);
/* test() on a comm with GPU regions: open finished sends' gates / start complete receives' copies. */
ferry_status_t ferry_sock_gpu_open_sends(ferry_sock_comm_t *c);
ferry_status_t ferry_sock_gpu_start_recvs(ferry_sock_comm_t *c, const ferry_px_req_t *oldest);
/* Lane ops finish: a DONE receive into GPU memory is reported once its copy there is done. */
ferry_status_t ferry_sock_recv_finish(ferry_px_ring_t *ring, ferry_px_req_t *req, int *ready);
/* sock_ring.c: the socket backend's ring ops (its words in warnings and the dump). */
extern const ferry_px_ring_ops_t ferry_sock_send_ring_ops;
extern const ferry_px_ring_ops_t ferry_sock_recv_ring_ops;

#endif
