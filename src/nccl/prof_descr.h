/*
 * The event descriptor ferry passes to NCCL's profiler callback (extData of
 * ncclProfilerNetEventStart), one per request buffer. It opens with NCCL's
 * own version-1 descriptor for the backend's kind of network, so a profiler
 * that knows NCCL's transports (NCCL's example profiler) shows ferry's
 * requests as it shows NCCL's: pluginId NCCL_PROFILER_NET_TYPE_SOCK | 1 for
 * the socket backend, NCCL_PROFILER_NET_TYPE_IB | 1 for the ib backend.
 * ferry's own part follows at a fixed offset, marked by a magic, for a
 * profiler that wants peer, tag and message number.
 *
 * Lifetime: valid from the Start call until the Stop call for it returns;
 * done_size and failed are written just before Stop.
 */
#ifndef FERRY_NCCL_PROF_DESCR_H
#define FERRY_NCCL_PROF_DESCR_H

#include <stdint.h>

#include "nccl/profiler_net.h"

#define FERRY_NCCL_PROF_MAGIC   0x59525246u /* "FRRY" in memory order. */
#define FERRY_NCCL_PROF_VERSION 1

/* NCCL's socket op values, used in the socket prefix. */
#define FERRY_NCCL_PROF_SOCK_SEND 0
#define FERRY_NCCL_PROF_SOCK_RECV 1
/* The ib prefix's opcode: ferry's ib send is an RDMA write with immediate
 * (IBV_WR_RDMA_WRITE_WITH_IMM); a receive completes as IBV_WC_RECV_RDMA_WITH_IMM. */
#define FERRY_NCCL_PROF_IB_SEND 1
#define FERRY_NCCL_PROF_IB_RECV 129

typedef struct ferry_nccl_prof_descr {
    union {
        ncclProfilerNetSockDescr_v1_t sock; /* Socket backend. qp/fd: -1 (several lanes). */
        ncclProfilerNetIbDescr_v1_t   ib;   /* ib backend. device -1, qpNum 0: see where. */
    } nccl;
    uint32_t magic;       /* FERRY_NCCL_PROF_MAGIC. */
    uint16_t version;     /* FERRY_NCCL_PROF_VERSION. */
    uint8_t  send;        /* 1: isend; 0: irecv. */
    uint8_t  sub;         /* Buffer index within a grouped receive (0 otherwise). */
    char     backend[8];  /* "socket", "ib". */
    char     peer[64];    /* The peer's address, as ferry's logs and dump name it. */
    char     where[64];   /* Local side ("fakeib0:1"), may be empty. */
    uint32_t comm;        /* The comm's serial number (logs, dump, thread names). */
    uint32_t seq;         /* The message's number on its comm. */
    int32_t  tag;         /* NCCL's tag. */
    int32_t  failed;      /* 0, or the ncclResult_t test() returned (set before Stop). */
    uint64_t size;        /* Send: bytes; receive: posted buffer size. */
    uint64_t done_size;   /* Bytes test() reported (set before Stop). */
} ferry_nccl_prof_descr_t;

FERRY_ABI_OFFSET(ferry_nccl_prof_descr_t, magic, 40);

#endif
