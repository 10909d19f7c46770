/*
 * Bytes the socket backend puts on the wire or in NCCL's handle. Fixed-width
 * fields, explicit padding, sizes pinned; all integers little-endian host
 * order except port (network order), since both ends run the same build.
 */
#ifndef FERRY_SOCK_WIRE_H
#define FERRY_SOCK_WIRE_H

#include <stdint.h>

#include "core/api.h"
#include "core/stage_table.h"

#define FERRY_SOCK_MAGIC        0x6b732d7972726566ULL /* "ferry-sk" */
#define FERRY_SOCK_WIRE_VERSION 1
#define FERRY_SOCK_MAX_LANES    64

/*
 * The 128-byte handle: listen() fills the first part, NCCL carries it to the
 * peer, and the peer's connect() writes the reference to its state into
 * `stage` because NCCL passes the same buffer again on every retry. Only a
 * reference into the connecting process's table (core/stage_table.h), never
 * a pointer: the bytes come from another host.
 */
typedef struct ferry_sock_handle {
    uint64_t magic;          /* FERRY_SOCK_MAGIC. */
    uint16_t version;        /* FERRY_SOCK_WIRE_VERSION. */
    uint16_t nlanes;         /* Data streams the listener offers per connection. */
    uint16_t family;         /* AF_INET or AF_INET6. */
    uint16_t port;           /* Listen port, network byte order. */
    uint8_t  addr[16];       /* IPv4 (first 4 bytes) or IPv6 listen address. */
    uint32_t scope_id;       /* IPv6 scope for link-local addresses. */
    uint32_t flags;          /* FERRY_SOCK_HANDLE_*; zero from a ferry that predates them. */
    uint64_t token;          /* Random; every stream must present it in its hello. */
    ferry_stage_ref_t stage; /* Connect side only: its connect in progress; zero on the wire. */
    uint8_t  pad[FERRY_HANDLE_SIZE - 64];
} ferry_sock_handle_t;
_Static_assert(sizeof(ferry_sock_handle_t) == FERRY_HANDLE_SIZE, "handle must be 128 bytes");

/*
 * The listener takes a connection of fewer streams than nlanes, 1..nlanes,
 * as its connector's hellos say (NCCL_FERRY_NET_HINTS=1, sock_hints.h).
 * Without it the hellos must say nlanes. A connector that predates the flag
 * ignores it and opens nlanes, which such a listener takes too.
 */
#define FERRY_SOCK_HANDLE_TAKES_FEWER 0x1u

/*
 * First bytes on every stream, connector to acceptor. nlanes is the
 * handle's, or with FERRY_SOCK_HANDLE_TAKES_FEWER the connector's choice
 * (the same in every hello of the connection).
 */
typedef struct ferry_sock_hello {
    uint64_t magic;          /* FERRY_SOCK_MAGIC. */
    uint16_t version;        /* FERRY_SOCK_WIRE_VERSION. */
    uint16_t hdr_size;       /* sizeof(ferry_sock_hello_t), for future growth. */
    uint16_t lane;           /* Index of this stream in its connection. */
    uint16_t nlanes;         /* Streams in this connection (see above). */
    uint64_t token;          /* The handle's token. */
    uint64_t conn_id;        /* Random, the same on every stream of one connection. */
} ferry_sock_hello_t;
_Static_assert(sizeof(ferry_sock_hello_t) == 32, "hello is 32 bytes");

/*
 * Every chunk is self-describing, so any stream can carry any chunk and the
 * receiver places the payload straight into the posted buffer.
 */
typedef struct ferry_sock_chunk_hdr {
    uint32_t seq;            /* Message number on this connection (isend order). */
    uint32_t nchunks;        /* Chunks in the message (>= 1, also for 0 bytes). */
    uint64_t msg_size;       /* Total bytes of the message: how the receiver learns the size. */
    uint64_t offset;         /* Where this chunk's payload goes in the message. */
    uint32_t len;            /* Payload bytes that follow the header. */
    uint32_t check;          /* FERRY_SOCK_CHUNK_CHECK(seq, len): catches stream desync. */
} ferry_sock_chunk_hdr_t;
_Static_assert(sizeof(ferry_sock_chunk_hdr_t) == 32, "chunk header is 32 bytes");

#define FERRY_SOCK_CHUNK_CHECK(_seq, _len) (0x7e7e1a4eU ^ (_seq) ^ ((_len) * 2654435761U))

/*
 * The one frame that goes the other way, receiver to sender, on every
 * stream of the connection: the receiver failed the comm because of a
 * message (sock_refuse.c). Without it the sender of a message larger than
 * the receive would block on streams nobody reads any more until the
 * receiver closed them. A sender of an older build sees unexpected bytes
 * from its receiver, which fails its comm too.
 */
#define FERRY_SOCK_REFUSE_MAGIC 0x6665722d7972726dULL /* Not FERRY_SOCK_MAGIC: a hello is no refusal. */
#define FERRY_SOCK_REFUSE_TOO_LARGE 1 /* The message is larger than the posted receive. */

typedef struct ferry_sock_refuse {
    uint64_t magic;          /* FERRY_SOCK_REFUSE_MAGIC. */
    uint32_t reason;         /* FERRY_SOCK_REFUSE_*. */
    uint32_t seq;            /* The message refused. */
    uint64_t msg_size;       /* Its size, as its chunk header said. */
    uint64_t capacity;       /* The posted receive's size. */
} ferry_sock_refuse_t;
_Static_assert(sizeof(ferry_sock_refuse_t) == 32, "refusal is 32 bytes");

#endif
