/*
 * fakeibv control API: what a test may ask of the emulated verbs device
 * beyond the verbs themselves. Exported under the version node FAKEIBV_1.0,
 * so a test that loads the library with dlopen() finds it with
 *     dlvsym(h, "fakeibv_inject", "FAKEIBV_1.0")
 * and a test linked against the fake simply calls it.
 */
#ifndef FAKEIBV_H
#define FAKEIBV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ibv_context;

enum fakeibv_fault_kind {
    /* Verb failures: the verb fails with `err` (default ENOMEM / EINVAL /
     * ETIMEDOUT) on `count` calls after `after` successful ones. */
    FAKEIBV_FAULT_REG_MR = 1,     /* ibv_reg_mr*, ibv_reg_dmabuf_mr return NULL. */
    FAKEIBV_FAULT_CREATE_QP = 2,  /* ibv_create_qp(_ex) returns NULL. */
    FAKEIBV_FAULT_MODIFY_QP = 3,  /* ibv_modify_qp returns err (NCCL retries ETIMEDOUT). */
    FAKEIBV_FAULT_CREATE_CQ = 4,  /* ibv_create_cq returns NULL. */
    /* Events on a live object; `target` names it, `ctx` is its context. */
    /* QP `target`'s requests stop reaching its peer: outstanding and new
     * sends end in RETRY_EXC_ERR after the timeout. One way only: the
     * peer's requests to it still arrive until it is in ERR. */
    FAKEIBV_FAULT_QP_DROP = 16,
    FAKEIBV_FAULT_QP_FATAL = 17,  /* QP `target` -> ERR, IBV_EVENT_QP_FATAL raised. */
    /* Port `target` of `ctx`'s device goes DOWN, IBV_EVENT_PORT_ERR raised,
     * and every QP of this process on that device and port past INIT
     * loses its link as by QP_LINK_DOWN; QPs reaching RTR while it is down connect to
     * nothing (modify_qp succeeds, their sends time out) and streams to
     * the port are dropped unanswered. */
    FAKEIBV_FAULT_PORT_ERR = 18,
    /* Port `target` back to ACTIVE, IBV_EVENT_PORT_ACTIVE: QPs brought to
     * RTR from now on work; the dropped ones stay dropped until RESET. */
    FAKEIBV_FAULT_PORT_ACTIVE = 19,
    FAKEIBV_FAULT_DEVICE_FATAL = 20, /* IBV_EVENT_DEVICE_FATAL on `ctx`. */
    /* QP `target` loses its link both ways, as a QP on a port that goes
     * down: its streams in and out are cut (the peer QP's requests go
     * unanswered and time out too), no new one is accepted until RESET,
     * outstanding and new sends end in RETRY_EXC_ERR after the timeout. */
    FAKEIBV_FAULT_QP_LINK_DOWN = 21
};

/*
 * Arms a fault. For verb failures ctx and target are ignored; count 0
 * disarms. Returns 0, or an errno value (EINVAL for an unknown kind or
 * target, ENOENT when the QP does not exist).
 */
int fakeibv_inject(struct ibv_context *ctx, enum fakeibv_fault_kind kind, uint32_t target,
                   unsigned after, unsigned count, int err);

/* The LID of a port of an opened context: lets a test build an address
 * without an out-of-band exchange. Returns 0 for a bad port. */
uint16_t fakeibv_port_lid(struct ibv_context *ctx, uint8_t port);

/*
 * Data-path counters of this process, since it started (all requests, any
 * QP). A request "carries a payload" if it is a WRITE, WRITE_WITH_IMM,
 * SEND or READ of at least one byte; it goes either as a descriptor
 * (one-copy mode: the responder copies with process_vm_readv/writev) or
 * with its bytes in the stream. Probes count the streams this process
 * accepted: whether it could read the requester's memory.
 */
struct fakeibv_xfer_stats {
    uint64_t one_copy_ops;        /* Requests this process sent as descriptors. */
    uint64_t one_copy_bytes;      /* Their payload bytes. */
    uint64_t stream_ops;          /* Payload requests sent with their bytes in the stream. */
    uint64_t stream_bytes;
    uint64_t probes_ok;           /* Accepted streams in one-copy mode. */
    uint64_t probes_failed;       /* Accepted streams left streaming (probe failed or off). */
    uint64_t direct_ops;          /* Requests the posting thread sent itself (FAKEIBV_DIRECT). */
    /* FAKEIBV_NULL_PAYLOAD: requests this process sent whose payload (WRITE, SEND) or READ
     * data was not moved, their bytes, and requests it served as responder without placing
     * (or, for a READ, sending) their bytes. */
    uint64_t null_ops;
    uint64_t null_bytes;
    uint64_t null_served_ops;
    /* FAKEIBV_SPIN_US: jobs an engine worker took while it spun (no wake-up). */
    uint64_t spin_takes;
};
void fakeibv_xfer_stats(struct fakeibv_xfer_stats *stats);

/*
 * What one QP of this process transmitted as requester since it was
 * created (a READ counts at the QP that posted it; a QP connected to itself
 * is both ends). Returns 0, or ENOENT when no QP has that number.
 */
struct fakeibv_qp_stats {
    uint64_t writes;      /* RDMA WRITE. */
    uint64_t writes_imm;  /* RDMA WRITE_WITH_IMM. */
    uint64_t reads;       /* RDMA READ requests... */
    uint64_t read_bytes;  /* ...and the bytes they asked for. */
    uint64_t sends;       /* SEND, SEND_WITH_IMM and anything else. */
    uint32_t tx_busy;     /* 1 while a thread is putting one of its requests on the wire. */
};
int fakeibv_qp_stats(uint32_t qpn, struct fakeibv_qp_stats *stats);

/*
 * Traffic of one port of this process since it started, as a real HCA's
 * port counters (sysfs ports/<p>/counters/). Data is payload only: the
 * bytes of WRITE, WRITE_WITH_IMM and SEND requests count where they leave
 * (requester's port) and arrive (responder's port), READ data where the
 * response leaves (responder) and arrives (requester); headers are not
 * counted. Packets: a request or READ response of n bytes is
 * max(1, ceil(n / path MTU)) packets, every other response (ACK, NAK) one.
 * A port that is down moves nothing, so its counters stand still.
 */
struct fakeibv_port_counters {
    uint64_t xmit_bytes;    /* Payload bytes sent from this port. */
    uint64_t rcv_bytes;     /* Payload bytes received on it. */
    uint64_t xmit_data;     /* xmit_bytes / 4: port_xmit_data's unit (4 octets). */
    uint64_t rcv_data;      /* rcv_bytes / 4: port_rcv_data. */
    uint64_t xmit_packets;  /* port_xmit_packets */
    uint64_t rcv_packets;   /* port_rcv_packets */
};
/* Fills *c for port `port` of ctx's device (and refreshes the sysfs
 * counter files). Returns 0, or EINVAL for a bad context or port. */
int fakeibv_port_counters(struct ibv_context *ctx, uint8_t port, struct fakeibv_port_counters *c);

/* Threads of fakeibv's engine now (the poll thread and the workers that
 * serve every QP of the process; README "Threads"); 0 while it is stopped. */
int fakeibv_engine_threads(void);

/* Tests: while on, the engine's jobs that read responses (ACKs) wait before
 * reading, as a worker the scheduler left behind would (at most 10 s); off
 * lets them go. A full send queue still takes the ACKs already waiting
 * (fakeibv_reap.c), as a NIC would have. */
void fakeibv_test_hold_acks(int on);

/* Tests: while on, a QP's transmit job, once a worker has taken it off the
 * queue, waits before it looks at the QP (at most 10 s), as a worker the
 * scheduler left behind between taking a job and running it; off lets it go. */
void fakeibv_test_hold_tx(int on);

/* Tests: while on, no engine worker takes a job off the queue (at most 10 s),
 * as if the scheduler left every worker behind; the poll thread and the
 * retry timers still queue jobs, and a job a worker already took runs on.
 * Off lets the workers take the queued jobs in order. */
void fakeibv_test_stall_workers(int on);

/* Tests: the next response any QP of this process sends (ACK, NAK or READ
 * response) carries its request's wire sequence plus one, as a stream out of
 * step would. The requester must not complete a WR with it: it warns, and
 * the QP's WRs fail as if its peer were gone (IBV_WC_RETRY_EXC_ERR, then
 * IBV_WC_WR_FLUSH_ERR). Each call skews one more response. */
void fakeibv_test_skew_response(void);

/* Tests: the engine's state and one line per QP of this process (send queue
 * positions, receives posted and taken, retry timer, jobs) on f, for a test
 * that ran out of time. A QP lock held for 100 ms is reported, not waited on. */
void fakeibv_dump(FILE *f);

/* Verbs objects of this process alive now, for measuring what a client
 * keeps per connection. */
struct fakeibv_objects {
    uint64_t qps, cqs, mrs, pds, contexts;
};
void fakeibv_objects(struct fakeibv_objects *o);
/* Entries of this process's live CQs together (what their rings hold room for): a
 * CQ's size, not only its count, is what a connection costs. */
uint64_t fakeibv_cq_entries(void);

/* Tests only: while on, this process's hellos carry a wrong cookie value,
 * so the peer's probe fails as it would across pid namespaces. */
void fakeibv_one_copy_break_probe(int on);

/*
 * Two verbs of libibverbs that rdma-core declares only in its private
 * <infiniband/driver.h> (not shipped by Debian's libibverbs-dev), exported
 * under IBVERBS_1.0 as there. ibv_get_sysfs_path() returns the root of
 * fakeibv's sysfs tree (README "sysfs"); ibv_read_sysfs_file() reads
 * <dir>/<file> without its trailing newline and returns its length, or -1.
 */
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

#endif /* FAKEIBV_H */
