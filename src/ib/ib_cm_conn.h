/*
 * The rdmacm connection mode's shared pieces (ib_cm.c), used by its
 * connect (ib_cm_connect.c) and accept (ib_cm_accept.c) state machines.
 *
 * A comm in rdmacm mode has one rdma_cm id per data QP (QP i on ids[i]),
 * on an event channel of its own (non-blocking: nothing here ever waits).
 * After the handshake the channel's DISCONNECTED is how a dead or closed
 * peer is noticed: ferry_ib_cm_poll() closes live_peer, the far end of a
 * socketpair whose near end is the comm's oob_fd, so the liveness code the
 * oob mode uses (ib_poll.c) reads EOF and fails the comm in the same words.
 * Threads: NCCL's, one comm at a time, as for the rest of the comm.
 */
#ifndef FERRY_IB_CM_CONN_H
#define FERRY_IB_CM_CONN_H

#include "ferry/rdma_cm_abi.h"

#include "ib/ib_cm_verbs.h"
#include "ib/ib_comm.h"

#define FERRY_IB_CM_EVENTS_PER_CALL 64 /* Events one connect/accept/poll call handles at most. */
#define FERRY_IB_CM_TIMEOUT_MS      5000 /* resolve_addr / resolve_route timeouts. */

typedef struct ferry_ib_cm_conn {
    struct rdma_event_channel *ch;         /* The comm's own; non-blocking. */
    int                        nids;
    struct rdma_cm_id         *ids[FERRY_IB_MAX_QPS]; /* Data QP i on ids[i]; context = i + 1. */
    int                        live_peer;  /* Far end of the liveness socketpair; -1 once closed. */
} ferry_ib_cm_conn_t;

/* One inbound connection (nqps CONNECT_REQUESTs of one conn_id) in its handshake. */
typedef struct ferry_ib_cm_group {
    uint64_t              conn_id;
    int                   nqps, nreq, nest; /* QPs, requests in, ESTABLISHED seen. */
    uint64_t              since_ns;
    char                  peer[64];
    ferry_ib_cm_priv_t    priv;             /* The connector's (QP 0's). */
    uint32_t              qpn[FERRY_IB_MAX_QPS];
    ferry_ib_cm_conn_t   *cm;               /* Its ids, on its own channel; the comm's once built. */
    ferry_ib_recv_comm_t *comm;             /* Built when every request is in; owns cm then. */
} ferry_ib_cm_group_t;

/* The listen comm's rdmacm part. */
struct ferry_ib_cm_listen {
    ferry_ib_cm_conn_t *cm;                 /* Channel and the listening id (ids[0]). */
    int                 ngroups;
    ferry_ib_cm_group_t groups[FERRY_IB_PENDING_MAX]; /* Oldest first. */
};

/* A channel (non-blocking) and no ids. WARNs naming `who` on failure. */
ferry_status_t ferry_ib_cm_conn_create(const char *who, ferry_ib_cm_conn_t **cm_p);
/* Disconnect, destroy QPs made on the ids, the ids, the channel. */
void ferry_ib_cm_conn_destroy(ferry_ib_cm_conn_t *cm);
/* The liveness socketpair: *fd_p becomes the comm's oob_fd. */
ferry_status_t ferry_ib_cm_conn_live(ferry_ib_cm_conn_t *cm, int *fd_p);
/* Index of id in cm (from its context), -1 if not one of them. */
int ferry_ib_cm_id_index(const ferry_ib_cm_conn_t *cm, const struct rdma_cm_id *id);
/* The ferry device of the port rdma_cm chose for id, -1 when ferry does not use it. */
int ferry_ib_cm_devidx(const struct rdma_cm_id *id);

/*
 * The address of device dev itself when it has one (RoCE: its GID's IPv4),
 * with port 0: 1, else 0 and *addr untouched. Listen binds to it, connect
 * resolves from it, so rdma_cm picks the device NCCL asked for.
 */
int ferry_ib_cm_dev_addr(int dev, struct sockaddr_storage *addr, socklen_t *len_p);

/* Private data: ours for QP qp of comm c. */
void ferry_ib_cm_priv_fill(ferry_ib_cm_priv_t *p, const ferry_ib_comm_t *c, int qp,
                           uint64_t token, uint64_t conn_id);
/* rdma_connect/rdma_accept parameters carrying p: read depth, retries as the oob QPs get. */
void ferry_ib_cm_param(struct rdma_conn_param *param, const ferry_ib_cm_priv_t *p);
/* Why pd cannot be a real peer's (the hello's rules, then the sizes), or NULL; copies it. */
const char *ferry_ib_cm_priv_check(const void *pd, int len, uint64_t token,
                                   ferry_ib_cm_priv_t *out);
/*
 * The peer's metadata from its private data, its QP numbers and our port
 * (the route's); `ours` is our comm's kind: the connector's addr is its CTS
 * FIFO, the acceptor's its sizes FIFO.
 */
void ferry_ib_cm_meta(ferry_ib_meta_t *m, const ferry_ib_cm_priv_t *p, const uint32_t *qpn,
                      int nqps, const ferry_ib_dev_t *dev, ferry_px_req_kind_t ours);
/* "RDMA_CM_EVENT_REJECTED (status 28: ...)" of an event, for WARNs. */
const char *ferry_ib_cm_event_words(const struct rdma_cm_event *ev, char *buf, size_t len);
/* rdma_reject with ferry's reason in the private data. */
void ferry_ib_cm_reject(struct rdma_cm_id *id, int reason);

#endif
