/*
 * Bytes the ib backend puts in NCCL's handle, on the out-of-band TCP
 * connection and in the peer's memory (CTS FIFO, sizes FIFO). Fixed-width
 * fields, explicit padding, sizes pinned; integers in host order except
 * port (network order) and imm_data (network order, as verbs carries it),
 * since both ends run the same build.
 *
 * The out-of-band exchange, connector (send side) to acceptor (receive side):
 *
 *   connector                              acceptor
 *   hello (32 B) + metadata (192 B)  --->   drop strangers (magic/version/token)
 *                                          create CQ, QPs -> RTR -> RTS
 *                                   <---   metadata (192 B)
 *   QPs -> RTR -> RTS
 *   FERRY_IB_OOB_READY (1 B)         --->   recv comm returned by accept()
 *   send comm returned by connect() <---   FERRY_IB_OOB_ACCEPTED (1 B)
 *
 * A connection the acceptor evicts before its hello came (ib_pending.c) gets
 * FERRY_IB_OOB_EVICTED instead of the metadata, and the connector connects
 * again; one the acceptor drops otherwise fails the connector's connect(),
 * never a comm it already returned.
 * The TCP connection then stays open for the comms' life: EOF on it means
 * the peer process is gone (ib_poll.c). A normal close sends
 * FERRY_IB_OOB_BYE first, so the survivor can tell the two apart in its
 * message.
 */
#ifndef FERRY_IB_HANDLE_H
#define FERRY_IB_HANDLE_H

#include <stdint.h>

#include "core/api.h"
#include "core/stage_table.h"

#define FERRY_IB_MAGIC        0x62692d7972726566ULL /* "ferry-ib" */
#define FERRY_IB_WIRE_VERSION 3 /* 3: the ACCEPTED byte. */
/* Data QPs per connection (NCCL_IB_QPS_PER_CONNECTION is capped here: one watch holds them). */
#define FERRY_IB_MAX_QPS      16
/* Sub-buffers of one receive (NCCL's maxRecvs). */
#define FERRY_IB_MAX_RECVS    8
/* FIFO slots: one per request in flight. */
#define FERRY_IB_FIFO_SLOTS   FERRY_MAX_REQUESTS

#define FERRY_IB_OOB_READY    0x52 /* 'R': connector's QPs are at RTS. */
#define FERRY_IB_OOB_ACCEPTED 0x41 /* 'A': acceptor's accept() returned the recv comm. */
/* 'E': evicted unread from a crowded listener, connect again. Never the metadata's first byte
 * (its magic's, 0x66). */
#define FERRY_IB_OOB_EVICTED  0x45
#define FERRY_IB_OOB_BYE      0x42 /* 'B': a normal close, sent just before the socket closes. */
/* Merged devices: a failed port is ACTIVE again (ib_rejoin.c). */
#define FERRY_IB_OOB_JOIN     0x4a /* 'J' member n: send comm, its QPs of member at INIT. */
#define FERRY_IB_OOB_JOINED   0x4b /* 'K' member n ok: recv comm, its QPs at RTS (ok 1) or not. */
/* Either comm: the last port of its merged device failed, the comm with it (ib_noport.c). */
#define FERRY_IB_OOB_NOPORT   0x4e /* 'N' */

/*
 * The 128-byte handle. Its first 48 bytes have the socket handle's layout
 * (magic value aside), so tools and tests that read the listen address
 * from a ferry handle read either. The stage field is the connect side's:
 * NCCL passes the same buffer again on every connect() retry, so connect()
 * writes there the reference to its state in the connecting process's table
 * (core/stage_table.h), never a pointer: the bytes come from another host.
 */
typedef struct ferry_ib_handle {
    uint64_t magic;        /* FERRY_IB_MAGIC. */
    uint16_t version;      /* FERRY_IB_WIRE_VERSION. */
    uint16_t nlanes;       /* 1: one OOB connection per comm. */
    uint16_t family;       /* AF_INET or AF_INET6 of the OOB listen address. */
    uint16_t port;         /* OOB listen port, network byte order. */
    uint8_t  addr[16];     /* IPv4 (first 4 bytes) or IPv6 listen address. */
    uint32_t scope_id;     /* IPv6 scope for link-local addresses. */
    uint32_t reserved;     /* Zero. */
    uint64_t token;        /* Random per listen; the connector's hello must carry it. */
    ferry_stage_ref_t stage; /* Connect side only: its connect in progress; zero on the wire. */
    uint8_t  pad[FERRY_HANDLE_SIZE - 64];
} ferry_ib_handle_t;
_Static_assert(sizeof(ferry_ib_handle_t) == FERRY_HANDLE_SIZE, "handle must be 128 bytes");

/* First bytes on the OOB connection, connector to acceptor (the socket hello's layout). */
typedef struct ferry_ib_hello {
    uint64_t magic;        /* FERRY_IB_MAGIC. */
    uint16_t version;      /* FERRY_IB_WIRE_VERSION. */
    uint16_t hdr_size;     /* sizeof(ferry_ib_hello_t). */
    uint16_t lane;         /* 0. */
    uint16_t nlanes;       /* 1. */
    uint64_t token;        /* The handle's token. */
    uint64_t conn_id;      /* Random, for logs. */
} ferry_ib_hello_t;
_Static_assert(sizeof(ferry_ib_hello_t) == 32, "hello is 32 bytes");

/* One port of a side's device, as the other side needs it to reach it. */
typedef struct ferry_ib_meta_port {
    uint16_t lid;          /* Port LID (0 on RoCE). */
    uint8_t  port;         /* Port number on the HCA. */
    uint8_t  link_layer;   /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET. */
    uint8_t  mtu;          /* enum ibv_mtu: the port's active_mtu. */
    uint8_t  gid_index;    /* Our GID index (sgid_index in our GRH). */
    uint8_t  ar;           /* Adaptive routing on this port's device (informational). */
    uint8_t  reserved;
    uint32_t ctrl_rkey;    /* Key of our FIFO block on this port's HCA (fifo_addr / sizes_addr). */
    uint32_t reserved2;
    uint8_t  gid[16];      /* Our GID at gid_index. */
} ferry_ib_meta_port_t;
_Static_assert(sizeof(ferry_ib_meta_port_t) == 32, "a port's metadata is 32 bytes");

/*
 * What each side tells the other about its device, QPs and FIFOs. A merged
 * device has several ports (members); data QP i sits on our member
 * i % nmembers and reaches the peer's member i % (its nmembers).
 */
typedef struct ferry_ib_meta {
    uint64_t magic;        /* FERRY_IB_MAGIC. */
    uint16_t version;      /* FERRY_IB_WIRE_VERSION. */
    uint16_t size;         /* sizeof(ferry_ib_meta_t). */
    uint16_t nqps;         /* Data QPs (connector decides; acceptor echoes). */
    uint16_t nmembers;     /* Ports of our device, 1..FERRY_IB_MAX_MEMBERS. */
    uint8_t  tc;           /* Traffic class (connector decides; acceptor uses it). */
    uint8_t  sl;           /* Service level (same). */
    uint8_t  reserved[6];
    uint64_t fifo_addr;    /* Connector: its CTS FIFO [32][8] of ferry_ib_cts_t. Acceptor: 0. */
    uint64_t sizes_addr;   /* Acceptor: its sizes FIFO [32][8] of uint32_t. Connector: 0. */
    char     devname[64];  /* "fakeib0:1" or "fakeib0:1+fakeib0:2", for logs. */
    uint32_t qpn[FERRY_IB_MAX_QPS]; /* QP numbers, data QP i at [i]. */
    ferry_ib_meta_port_t ports[4]; /* Member m of our device at [m]. */
} ferry_ib_meta_t;
_Static_assert(sizeof(ferry_ib_meta_t) == 296, "metadata is 296 bytes");

/*
 * NCCL_FERRY_IB_CM=rdmacm: what ferry puts in the connection manager's
 * private data instead of the OOB hello and metadata. One rdma_cm
 * connection per data QP; the connector's REQ carries its CTS FIFO, the
 * acceptor's REP its sizes FIFO. QP numbers come with the CM's own
 * parameters (param.conn.qp_num), LID/GID/MTU from the route rdma_cm
 * resolved. 56 bytes: the REQ's limit on an RC id.
 */
#define FERRY_IB_CM_MAGIC 0x63626966U /* "fibc" */
#define FERRY_IB_CM_REJ_STRANGER 1    /* Wrong magic, version or token. */
#define FERRY_IB_CM_REJ_DEVICE   2    /* rdma_cm chose a port ferry does not use. */
#define FERRY_IB_CM_REJ_SETUP    3    /* The comm could not be built (see the acceptor's log). */
typedef struct ferry_ib_cm_priv {
    uint64_t token;        /* Connector: the listen handle's token; acceptor: echoed. */
    uint64_t conn_id;      /* Connector's random id: the nqps connections of one comm share it. */
    uint64_t addr;         /* Connector: its CTS FIFO [32][8]; acceptor: its sizes FIFO [32][8]. */
    uint32_t magic;        /* FERRY_IB_CM_MAGIC. */
    uint32_t rkey;         /* Of addr. */
    uint8_t  version;      /* FERRY_IB_WIRE_VERSION. */
    uint8_t  qp;           /* The data QP index this connection carries. */
    uint8_t  nqps;         /* Data QPs of the comm (connector decides). */
    uint8_t  tc;           /* Traffic class (connector decides). */
    uint8_t  sl;           /* Service level (connector decides). */
    uint8_t  reason;       /* In a reject: FERRY_IB_CM_REJ_*; else 0. */
    uint8_t  reserved[2];
    char     devname[16];  /* Sender's "dev:port", truncated, NUL-terminated; for logs. */
} ferry_ib_cm_priv_t;
_Static_assert(sizeof(ferry_ib_cm_priv_t) == 56, "rdma_cm private data is 56 bytes");

/*
 * One sub-buffer of a posted receive as the receiver RDMA-writes it into
 * the sender's CTS FIFO (NCCL's ncclIbSendFifo). The n entries of a
 * receive go in one write to fifo[seq % 32][0..n-1]; the sender reads an
 * entry only once its idx equals seq + 1 (acquire load: the NIC writes it).
 */
typedef struct ferry_ib_cts {
    uint64_t addr;         /* Receive buffer at the receiver. */
    uint64_t size;         /* Its capacity. */
    uint32_t rkeys[4];     /* Its key on each member of the receiver's device. */
    uint32_t nreqs;        /* n of the receive, the same in each entry. */
    int32_t  tag;
    uint64_t idx;          /* Receive number + 1; 0 never valid. */
    uint8_t  pad[16];
} __attribute__((aligned(32))) ferry_ib_cts_t;
_Static_assert(sizeof(ferry_ib_cts_t) == 64, "CTS entry is 64 bytes");

/*
 * The sizes FIFO: for a grouped receive (n > 1) the sender writes the
 * uint32_t sizes[n] it sent (the full size even when a send did not fit, so
 * the receiver can name it) into sizes[seq % 32] with the final
 * WRITE_WITH_IMM of each QP's chain. With n == 1 imm_data carries the size.
 */
typedef uint32_t ferry_ib_sizes_slot_t[FERRY_IB_MAX_RECVS];

#endif
