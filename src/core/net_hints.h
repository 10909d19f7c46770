/*
 * NCCL's traffic hints (ncclNet v11/v12 setNetAttr), in the core's own
 * types: src/nccl copies each ABI version's struct into ferry_net_attr_t,
 * the core checks it and keeps the latest connection-level hints on the
 * context (ferry_ctx_t.hints, core/backend.h), where a backend's connect
 * reads them. Nothing here knows an ABI version or a backend.
 *
 * NCCL 2.30 calls setNetAttr in two shapes on the same context:
 *  - before it connects or accepts a connection (its proxy's connect step):
 *    per side, at most maxConcurrentPeers peers at once, each over at most
 *    maxFlowsPerPeer connections (its channels to that peer); op is the
 *    p2p set or undefined, algorithm and protocol undefined;
 *  - from its progress thread when a transfer's shape differs from the
 *    last one: the transfer's peers and channels, op its one operation.
 * Only the first describes the connections being made, so only it is kept
 * for connect; the second is counted and remembered for the summary line,
 * with a few relaxed stores and nothing logged.
 */
#ifndef FERRY_CORE_NET_HINTS_H
#define FERRY_CORE_NET_HINTS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A field NCCL leaves unset (NCCL_NET_ATTR_UNDEF). */
#define FERRY_NET_ATTR_UNDEF (-1)
/*
 * Beyond these a hint is no description of a job but garbage (a struct of
 * another ABI version, uninitialised memory): NCCL's peers at once are
 * bounded by its ranks and batch sizes, its flows per peer by its channels.
 */
#define FERRY_NET_HINT_PEERS_MAX 65536
#define FERRY_NET_HINT_FLOWS_MAX 1024

/* One side's hints, as NCCL gives them (ncclNetCommAttr_vN_t). */
typedef struct ferry_net_attr_side {
    int32_t max_peers;
    int32_t min_peers;
    int32_t max_flows;
    int32_t min_flows;
} ferry_net_attr_side_t;

/* A whole setNetAttr argument (ncclNetAttr_vN_t). */
typedef struct ferry_net_attr {
    ferry_net_attr_side_t send;
    ferry_net_attr_side_t recv;
    uint32_t op;    /* Bit per NCCL function; all ones: undefined. */
    uint32_t algo;  /* Bit per algorithm; all ones: undefined. */
    uint32_t proto; /* Bit per protocol; all ones: undefined. */
} ferry_net_attr_t;

/* What a connection can use of one side: flows x peers connections share the streams. */
typedef struct ferry_net_hint {
    int flows; /* maxFlowsPerPeer; 0: no usable hint. */
    int peers; /* maxConcurrentPeers; 0: no usable hint. */
} ferry_net_hint_t;

/*
 * Kept on each context. Written by setNetAttr (NCCL's proxy threads), read
 * by connect and the finalize summary from other threads: every field is
 * an atomic of its own, and a side's two counts share one word so connect
 * never sees half of a new pair.
 */
typedef struct ferry_net_hints {
    _Atomic uint64_t send;        /* Packed ferry_net_hint_t of the latest connection hints. */
    _Atomic uint64_t recv;
    _Atomic uint32_t conn_calls;  /* Connection-level calls. */
    _Atomic uint32_t xfer_calls;  /* Per-transfer calls. */
    _Atomic uint32_t ignored;     /* Fields refused (negative, zero, absurd, min above max). */
    _Atomic uint64_t xfer_shape;  /* Latest transfer: send peers, send flows, recv peers, recv flows (16 bits each). */
    _Atomic uint32_t xfer_op, xfer_algo, xfer_proto;
} ferry_net_hints_t;

/* 1 if attr has the per-transfer shape (op is exactly one operation), else 0. */
int ferry_net_attr_is_xfer(const ferry_net_attr_t *attr);

/*
 * Check one side (named side_name in the text, "sendCommAttr"): every
 * field undefined or a count in range, a min no larger than its max. *hint
 * gets the usable pair (zeros when either max is unset or refused); each
 * refused field is appended to why ("sendCommAttr.maxFlowsPerPeer=-5
 * (negative)"). Returns the number of refused fields.
 */
int ferry_net_attr_side_check(const ferry_net_attr_side_t *side, const char *side_name,
                              ferry_net_hint_t *hint, char *why, size_t why_len);

/*
 * setNetAttr on a context: a connection-level attr replaces both sides'
 * hints (a refused or unset max leaves that side without one: the latest
 * call describes the connection being made), with one limited WARN naming
 * every refused field and comm_id; a per-transfer one is only remembered.
 */
void ferry_net_hints_set(ferry_net_hints_t *hints, const ferry_net_attr_t *attr,
                         uint64_t comm_id);

/* The latest usable connection hints of a side (zeros: none). */
ferry_net_hint_t ferry_net_hints_send(ferry_net_hints_t *hints);
ferry_net_hint_t ferry_net_hints_recv(ferry_net_hints_t *hints);

/* "3 connection hints (last: send 4 flows x 6 peers, ...), 120 per-transfer ..."; "" if none came. */
void ferry_net_hints_summary(ferry_net_hints_t *hints, char *buf, size_t len);

#endif
