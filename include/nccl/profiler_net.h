/*
 * The net-plugin events of NCCL's profiler interface (v10+ net ABI), as
 * NCCL's profiler headers define them: what a net plugin passes as
 * extData to the ncclProfilerCallback_t it got at init, and how pluginId
 * names the descriptor's layout. Written from the ABI facts; the layouts are
 * pinned below.
 *
 * pluginId = type | version: the low 16 bits are the descriptor's version,
 * the next 16 the network type. NCCL's core forwards the descriptor to the
 * profiler plugin untouched; a profiler decodes only the types it knows
 * (NCCL's example profiler: IB and SOCK, version 1).
 */
#ifndef FERRY_NCCL_PROFILER_NET_H
#define FERRY_NCCL_PROFILER_NET_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define NCCL_PROFILER_NET_VER_BITS  16
#define NCCL_PROFILER_NET_VER_MASK  (~0U >> NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_MASK (~0U << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_IB   (1U << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_SOCK (2U << NCCL_PROFILER_NET_VER_BITS)

#define NCCL_PROFILER_NET_IB_VER     1
#define NCCL_PROFILER_NET_SOCKET_VER 1

/* The descriptors' type field: the one event each version defines. */
#define ncclProfileQp     (1 << 0) /* IB: one work request on a QP. */
#define ncclProfileSocket (1 << 0) /* Socket: one transfer on a socket. */

/* IB, version 1: one work request. */
typedef struct {
    uint8_t type;            /* ncclProfileQp. */
    union {
        struct {
            int      device; /* Net device index. */
            uint64_t wr_id;  /* Work request id. */
            int      opcode; /* ibv opcode. */
            int      qpNum;  /* QP number. */
            size_t   length; /* Bytes. */
        } qp;
    };
} ncclProfilerNetIbDescr_v1_t;
FERRY_ABI_SIZE(ncclProfilerNetIbDescr_v1_t, 40);
FERRY_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.device, 8);
FERRY_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.wr_id, 16);
FERRY_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.opcode, 24);
FERRY_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.qpNum, 28);
FERRY_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.length, 32);

/* Socket, version 1: one transfer. op is NCCL's socket op: 0 send, 1 receive. */
typedef struct {
    uint8_t type;            /* ncclProfileSocket. */
    union {
        struct {
            int    fd;
            int    op;
            size_t length;
        } sock;
    };
} ncclProfilerNetSockDescr_v1_t;
FERRY_ABI_SIZE(ncclProfilerNetSockDescr_v1_t, 24);
FERRY_ABI_OFFSET(ncclProfilerNetSockDescr_v1_t, sock.fd, 8);
FERRY_ABI_OFFSET(ncclProfilerNetSockDescr_v1_t, sock.op, 12);
FERRY_ABI_OFFSET(ncclProfilerNetSockDescr_v1_t, sock.length, 16);

#endif
