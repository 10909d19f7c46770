/*
 * fakeibv wire format between two emulated ports (one host, Unix stream
 * sockets). One stream carries one direction of one RC connection: the
 * requester QP sends requests, the responder answers on the same stream in
 * the same order, which gives RC's in-order semantics for free.
 */
#ifndef FAKEIBV_WIRE_H
#define FAKEIBV_WIRE_H

#include <stdint.h>

#define FAKEIBV_WIRE_MAGIC 0xfa4e1b01u
#define FAKEIBV_WIRE_VERSION 1

/* First bytes on every new stream, from the connecting (requester) side. */
struct fakeibv_wire_hello {
    uint32_t magic;      /* FAKEIBV_WIRE_MAGIC: rejects stray connections. */
    uint16_t version;    /* FAKEIBV_WIRE_VERSION. */
    uint16_t src_lid;    /* Requester's port LID (for logs). */
    uint32_t src_qpn;    /* Requester QP number. */
    uint32_t dst_qpn;    /* Responder QP the stream is for. */
};
_Static_assert(sizeof(struct fakeibv_wire_hello) == 16, "hello is 16 bytes");

enum fakeibv_wire_op {
    FAKEIBV_OP_WRITE = 1,      /* payload follows; raddr/rkey name the target. */
    FAKEIBV_OP_WRITE_IMM = 2,  /* as WRITE, then consumes a receive WQE. */
    FAKEIBV_OP_SEND = 3,       /* payload follows; scattered into a receive WQE. */
    FAKEIBV_OP_SEND_IMM = 4,   /* as SEND with imm. */
    FAKEIBV_OP_READ_REQ = 5,   /* len bytes at raddr/rkey requested; no payload. */
    FAKEIBV_OP_ACK = 16,       /* request done. */
    FAKEIBV_OP_NAK = 17,       /* request failed; syndrome says why. */
    FAKEIBV_OP_READ_RESP = 18, /* len bytes of READ data follow. */
};

enum fakeibv_wire_syndrome {
    FAKEIBV_SYN_NONE = 0,
    FAKEIBV_SYN_REM_ACCESS = 1, /* -> IBV_WC_REM_ACCESS_ERR */
    FAKEIBV_SYN_REM_INV_REQ = 2,/* -> IBV_WC_REM_INV_REQ_ERR (e.g. SEND too long) */
    FAKEIBV_SYN_REM_OP = 3,     /* -> IBV_WC_REM_OP_ERR (responder-side failure) */
    FAKEIBV_SYN_RNR = 4,        /* -> IBV_WC_RNR_RETRY_EXC_ERR */
    FAKEIBV_SYN_DROPPED = 5,    /* responder QP cannot answer: requester retries, times out */
};

struct fakeibv_wire_hdr {
    uint8_t op;          /* enum fakeibv_wire_op */
    uint8_t syndrome;    /* enum fakeibv_wire_syndrome (NAK only) */
    uint8_t rnr_retry;   /* Requester's rnr_retry attribute (requests only). */
    uint8_t pad;         /* Zero. */
    uint32_t len;        /* Payload bytes that follow, or bytes a READ asks for. */
    uint64_t raddr;      /* Remote virtual address (WRITE*, READ_REQ). */
    uint32_t rkey;       /* Remote key (WRITE*, READ_REQ). */
    uint32_t imm;        /* Immediate data, network order (WRITE_IMM, SEND_IMM). */
    uint64_t seq;        /* Per-stream sequence; responses echo it: catches desync. */
};
_Static_assert(sizeof(struct fakeibv_wire_hdr) == 32, "header is 32 bytes");

#endif /* FAKEIBV_WIRE_H */
