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
#define FAKEIBV_WIRE_VERSION 2

/*
 * One-copy (descriptor) mode. The hello offers it: the requester's pid and
 * the address and value of a random cookie in its memory. The accepting
 * side reads the cookie there with process_vm_readv(2) (and writes it
 * back with process_vm_writev): equal means that pid, in the acceptor's
 * pid namespace, is the requester and may be read and written. Its answer
 * is the first message on the stream, FAKEIBV_OP_MODE (len 1: on). From
 * then on a request may carry FAKEIBV_HDR_DESC: instead of the payload, an
 * array of fakeibv_wire_iov naming the requester's own memory follows, and
 * the responder copies straight from (WRITE, SEND) or to (READ) it.
 */
#define FAKEIBV_HELLO_ONE_COPY 0x1u /* hello.flags: descriptor mode offered. */

/* First bytes on every new stream, from the connecting (requester) side. */
struct fakeibv_wire_hello {
    uint32_t magic;      /* FAKEIBV_WIRE_MAGIC: rejects stray connections. */
    uint16_t version;    /* FAKEIBV_WIRE_VERSION. */
    uint16_t src_lid;    /* Requester's port LID (for logs). */
    uint32_t src_qpn;    /* Requester QP number. */
    uint32_t dst_qpn;    /* Responder QP the stream is for. */
    int32_t pid;         /* Requester's pid in its own pid namespace. */
    uint32_t flags;      /* FAKEIBV_HELLO_*. */
    uint64_t cookie_addr;/* Address of the cookie in the requester. */
    uint64_t cookie;     /* Its value. */
};
_Static_assert(sizeof(struct fakeibv_wire_hello) == 40, "hello is 40 bytes");

enum fakeibv_wire_op {
    FAKEIBV_OP_WRITE = 1,      /* payload follows; raddr/rkey name the target. */
    FAKEIBV_OP_WRITE_IMM = 2,  /* as WRITE, then consumes a receive WQE. */
    FAKEIBV_OP_SEND = 3,       /* payload follows; scattered into a receive WQE. */
    FAKEIBV_OP_SEND_IMM = 4,   /* as SEND with imm. */
    FAKEIBV_OP_READ_REQ = 5,   /* len bytes at raddr/rkey requested; no payload. */
    /* Atomics: len 8; 16 bytes follow (compare_add, swap; host order: one host); the
     * answer is a READ_RESP of 8 bytes, the word's value before the operation. */
    FAKEIBV_OP_ATOMIC_FA = 6,  /* Fetch and add compare_add to the 64-bit word at raddr. */
    FAKEIBV_OP_ATOMIC_CS = 7,  /* Compare with compare_add, swap in swap if equal. */
    FAKEIBV_OP_ACK = 16,       /* request done. */
    FAKEIBV_OP_NAK = 17,       /* request failed; syndrome says why. */
    FAKEIBV_OP_READ_RESP = 18, /* len bytes of READ data follow (none with HDR_DESC). */
    FAKEIBV_OP_MODE = 19,      /* First message of a responder: len 1 = one-copy on. */
};

#define FAKEIBV_HDR_DESC 0x1u  /* hdr.flags: iovecs follow instead of the payload. */
/* hdr.flags: null-payload mode (FAKEIBV_NULL_PAYLOAD): no payload follows and
 * none is placed; keys and ranges are checked and the request completes as
 * if it had been. On a READ_REQ: answer with a READ_RESP carrying the flag
 * and no bytes (the requester's SGEs stay as they are). */
#define FAKEIBV_HDR_NULL 0x2u

/* A piece of the requester's memory, in its address space (HDR_DESC). */
struct fakeibv_wire_iov {
    uint64_t addr;
    uint64_t len;
};

enum fakeibv_wire_syndrome {
    FAKEIBV_SYN_NONE = 0,
    FAKEIBV_SYN_REM_ACCESS = 1, /* -> IBV_WC_REM_ACCESS_ERR */
    FAKEIBV_SYN_REM_INV_REQ = 2,/* -> IBV_WC_REM_INV_REQ_ERR (e.g. SEND too long) */
    FAKEIBV_SYN_REM_OP = 3,     /* -> IBV_WC_REM_OP_ERR (responder-side failure) */
    FAKEIBV_SYN_RNR = 4,        /* -> IBV_WC_RNR_RETRY_EXC_ERR */
    FAKEIBV_SYN_DROPPED = 5,    /* responder QP cannot answer: requester retries, times out */
    FAKEIBV_SYN_LOC_PROT = 6,   /* -> IBV_WC_LOC_PROT_ERR: the requester's memory named by a
                                 * descriptor could not be read/written (unmapped). */
};

struct fakeibv_wire_hdr {
    uint8_t op;          /* enum fakeibv_wire_op */
    uint8_t syndrome;    /* enum fakeibv_wire_syndrome (NAK); requests with HDR_DESC:
                          * the number of fakeibv_wire_iov that follow (<= 16). */
    uint8_t rnr_retry;   /* Requester's rnr_retry attribute (requests only). */
    uint8_t flags;       /* FAKEIBV_HDR_*. */
    uint32_t len;        /* Payload bytes that follow, or bytes a READ asks for. */
    uint64_t raddr;      /* Remote virtual address (WRITE*, READ_REQ). */
    uint32_t rkey;       /* Remote key (WRITE*, READ_REQ). */
    uint32_t imm;        /* Immediate data, network order (WRITE_IMM, SEND_IMM). */
    uint64_t seq;        /* Per-stream sequence; responses echo it: catches desync. */
};
_Static_assert(sizeof(struct fakeibv_wire_hdr) == 32, "header is 32 bytes");

#endif /* FAKEIBV_WIRE_H */
