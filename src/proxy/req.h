/*
 * A request (one isend, irecv or iflush) and its counters. The backend cuts
 * the work of a request into parts, in units it names (ring ops `unit`:
 * chunks a stream moves, work requests on a queue pair, ...). The part
 * counters only grow and tell where the request stands:
 *
 *   posted      parts started (handed to the transport)
 *   transmitted parts whose bytes left completely (send side)
 *   received    parts whose bytes arrived completely (recv side)
 *   done        parts retired; the request is DONE when done == nparts
 *
 * Each backend documents, beside its ring ops, what starting and moving a
 * part means for it.
 * Invariant (ferry_px_req_check): done <= transmitted + received <= posted <= nparts.
 * Several threads may work on one request at once, so counters are atomics
 * bumped with fetch_add; state changes are release stores read with acquire.
 */
#ifndef FERRY_PROXY_REQ_H
#define FERRY_PROXY_REQ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "proxy/clock.h"

/* Sub-buffers of one request: NCCL's grouped receives (maxRecvs). */
#define FERRY_PX_MAX_SUBS 8

typedef enum ferry_px_req_state {
    FERRY_PX_REQ_FREE,   /* In the comm's ring, unused; isend/irecv may take it. */
    FERRY_PX_REQ_POSTED, /* Returned to NCCL; no part started yet. */
    FERRY_PX_REQ_ACTIVE, /* Parts are moving; counters advance. */
    FERRY_PX_REQ_DONE,   /* done == nparts; test() reports success once, then FREE. */
    FERRY_PX_REQ_ERROR,  /* Sticky failure in status; test() reports it once, then FREE. */
    FERRY_PX_REQ_STATE_COUNT
} ferry_px_req_state_t;

typedef enum ferry_px_req_kind {
    FERRY_PX_SEND,
    FERRY_PX_RECV,
    FERRY_PX_FLUSH /* Makes received data visible to the GPU. */
} ferry_px_req_kind_t;

/*
 * One buffer of a request. What a backend knows beyond these (where a
 * receiver-driven send writes at the peer) it keeps by the request's ring
 * slot (ferry_px_ring_slot_index), in its own comm.
 */
typedef struct ferry_px_sub {
    char            *buf;      /* Where the bytes are moved; set at post. */
    size_t           capacity; /* Send: message size; recv: posted buffer size. */
    int              tag;      /* NCCL's tag; grouped receives are matched by it. */
    void            *mem;      /* The backend's memory handle for buf (NULL: none). */
    _Atomic uint64_t size;     /* Bytes test() reports; recv: learnt from the peer. */
} ferry_px_sub_t;

struct ferry_px_ring;

typedef struct ferry_px_req {
    /*
     * The first 64 bytes hold what test() of a request still in flight reads
     * (state, owner, stall clock) and the part counters the backends bump,
     * so a pass of NCCL's proxy over many requests touches one cache line of
     * each (rings are cache-line aligned, requests 128 bytes).
     */
    _Atomic int          state;       /* ferry_px_req_state_t; see transitions in req.c. */
    ferry_px_req_kind_t  kind;        /* Set at post. */
    uint32_t             seq;         /* Message number on the comm; set at post. */
    int                  n;           /* Sub-buffers in use, 1..the ring's max_subs. */
    struct ferry_px_ring *ring;       /* Owner. */
    _Atomic uint64_t     last_ns;     /* Monotonic time a part last started or finished (dump, stall). */
    /*
     * n entries, owned by the ring: one per request, or FERRY_PX_MAX_SUBS
     * where the backend takes grouped receives (ops->max_subs), so comms
     * that never group (every send comm) do not carry seven unused ones.
     */
    ferry_px_sub_t      *sub;
    _Atomic int          gated;       /* Send: 1 until the backend opens it; no part starts. */
    _Atomic uint32_t     nparts;      /* Set at post, or 0 until the backend learns it. */
    _Atomic uint32_t     posted;      /* Part counters, see the top of this file. */
    _Atomic uint32_t     transmitted;
    _Atomic uint32_t     received;
    _Atomic uint32_t     done;
    size_t               part_size;   /* Bytes per part where the backend plans them. */
    _Atomic uint64_t     bytes;       /* Payload bytes moved so far (where the backend sees them). */
    uint64_t             post_ns;     /* Monotonic time of the post (dump). */
    _Atomic uint64_t     start_ns;    /* Its first part started (POSTED -> ACTIVE). */
    _Atomic uint64_t     done_ns;     /* Its last part was retired (-> DONE). */
    ferry_status_t       status;      /* Valid in ERROR; written before the release store. */
    uint64_t             backend_word; /* The backend's own per-request note. */
    uint64_t             pad_;        /* To 128 bytes: in reqs[] each request starts a line. */
} ferry_px_req_t;

/* How a message of `size` bytes is cut for `nlanes` lanes. */
typedef struct ferry_px_chunk_plan {
    size_t   chunk_size; /* Bytes per chunk; the last one may be shorter. */
    uint32_t nchunks;    /* >= 1, also for a 0-byte message. */
} ferry_px_chunk_plan_t;

/*
 * Enough chunks that every lane gets work (size / nlanes), none smaller than
 * min_chunk nor larger than max_chunk, so a slow lane holds back at most one
 * chunk while faster lanes take the rest.
 */
ferry_px_chunk_plan_t ferry_px_chunk_plan(size_t size, int nlanes, size_t min_chunk,
                                          size_t max_chunk);

const char *ferry_px_req_state_str(int state);
const char *ferry_px_req_kind_str(ferry_px_req_kind_t kind);

/*
 * FREE -> POSTED with n sub-buffers (buf, capacity, tag, mem of each taken
 * from subs). nparts 0: learnt later (ferry_px_req_learn, or set by the
 * backend before its first part starts).
 */
void ferry_px_req_post(ferry_px_req_t *req, ferry_px_req_kind_t kind, uint32_t seq, int n,
                       const ferry_px_sub_t *subs, int gated, uint32_t nparts,
                       size_t part_size);
/* One part started: posted++, POSTED -> ACTIVE. */
void ferry_px_req_part_start(ferry_px_req_t *req);
/* k parts started at once. */
void ferry_px_req_parts_start(ferry_px_req_t *req, uint32_t k);
/* The same at a time the caller read (a backend that starts a request in the call that posted it). */
void ferry_px_req_parts_start_at(ferry_px_req_t *req, uint32_t k, uint64_t now);
/*
 * Receive side, first header of a chunk: record the message size and part
 * count, or fail with FERRY_ERR_USAGE (larger than the posted buffer) or
 * FERRY_ERR_REMOTE (parts of one message disagree).
 */
ferry_status_t ferry_px_req_learn(ferry_px_req_t *req, uint64_t msg_size, uint32_t nparts);
/* A part's bytes moved completely: transmitted++ or received++. */
void ferry_px_req_part_moved(ferry_px_req_t *req);
/* A moved part is retired: done++, and the request is DONE at nparts. */
void ferry_px_req_part_done(ferry_px_req_t *req);
/* Both at once, after accounting `bytes` of progress. */
void ferry_px_req_part_finish(ferry_px_req_t *req, size_t bytes);
/* k parts moved and retired at once (bulk completion: several of one poll). */
void ferry_px_req_parts_finish(ferry_px_req_t *req, uint32_t k, size_t bytes);
/* 1 when every part's bytes have moved (completions may still be held back). */
int ferry_px_req_all_moved(const ferry_px_req_t *req);
/* Account partial progress (bytes, timestamp) while a part is moving. */
void ferry_px_req_progress(ferry_px_req_t *req, size_t bytes);
/* ACTIVE/POSTED -> ERROR with status; a request already DONE stays DONE. */
void ferry_px_req_fail(ferry_px_req_t *req, ferry_status_t status);
/* 1 if the counters respect the invariant; tests and asserts use it. */
int ferry_px_req_check(const ferry_px_req_t *req);

#endif
