/*
 * A request (one isend or irecv) and its counters. A message is cut into
 * chunks; the chunk counters only grow and tell where the request stands:
 *
 *   posted      chunks handed to a lane (send: claimed; recv: header matched)
 *   transmitted chunks whose payload left completely (send side)
 *   received    chunks whose payload arrived completely (recv side)
 *   done        chunks retired; the request is DONE when done == nchunks
 *
 * Invariant (ferry_px_req_check): done <= transmitted + received <= posted <= nchunks.
 * Several lanes work on one request at once, so counters are atomics bumped
 * with fetch_add; state changes are release stores read with acquire.
 */
#ifndef FERRY_PROXY_REQ_H
#define FERRY_PROXY_REQ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum ferry_px_req_state {
    FERRY_PX_REQ_FREE,   /* In the comm's ring, unused; isend/irecv may take it. */
    FERRY_PX_REQ_POSTED, /* Returned to NCCL; no chunk touched by a lane yet. */
    FERRY_PX_REQ_ACTIVE, /* Lanes are moving chunks; counters advance. */
    FERRY_PX_REQ_DONE,   /* done == nchunks; test() reports success once, then FREE. */
    FERRY_PX_REQ_ERROR,  /* Sticky failure in status; test() reports it once, then FREE. */
    FERRY_PX_REQ_STATE_COUNT
} ferry_px_req_state_t;

typedef enum ferry_px_req_kind {
    FERRY_PX_SEND,
    FERRY_PX_RECV
} ferry_px_req_kind_t;

struct ferry_px_comm;

typedef struct ferry_px_req {
    _Atomic int          state;       /* ferry_px_req_state_t; see transitions in req.c. */
    ferry_px_req_kind_t  kind;        /* Set at post. */
    uint32_t             seq;         /* Message number on the comm; set at post. */
    char                *buf;         /* Where lanes move the bytes; set at post. */
    void                *mem;         /* The backend's memory handle for buf (NULL: none); set at post. */
    _Atomic int          gated;       /* Send: 1 until the backend opens it; lanes take no chunk of it. */
    size_t               capacity;    /* Send: message size; recv: posted buffer size. */
    size_t               chunk_size;  /* Send only: from ferry_px_chunk_plan. */
    _Atomic uint64_t     size;        /* Message size; recv: learnt from the first chunk. */
    _Atomic uint32_t     nchunks;     /* Send: set at post; recv: 0 until the first chunk. */
    _Atomic uint32_t     posted;      /* Chunk counters, see the top of this file. */
    _Atomic uint32_t     transmitted;
    _Atomic uint32_t     received;
    _Atomic uint32_t     done;
    _Atomic uint64_t     bytes;       /* Payload bytes moved so far. */
    _Atomic uint64_t     last_ns;     /* Monotonic time of the last progress (dump). */
    uint64_t             post_ns;     /* Monotonic time of the post (dump). */
    _Atomic uint64_t     start_ns;    /* A lane took its first chunk (POSTED -> ACTIVE). */
    _Atomic uint64_t     done_ns;     /* Its last chunk was retired (-> DONE). */
    ferry_status_t       status;      /* Valid in ERROR; written before the release store. */
    struct ferry_px_comm *comm;       /* Owner, for logs. */
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
uint64_t ferry_px_now_ns(void);
/* The same clock read cheaply, a few ms behind: for checks counted in seconds. */
uint64_t ferry_px_coarse_ns(void);

/* FREE -> POSTED. nchunks is 0 for a receive (learnt from the wire). mem: see the struct. */
void ferry_px_req_post(ferry_px_req_t *req, ferry_px_req_kind_t kind, uint32_t seq, void *buf,
                       void *mem, int gated, size_t size, ferry_px_chunk_plan_t plan);
/* A lane took one chunk: posted++, POSTED -> ACTIVE. */
void ferry_px_req_chunk_start(ferry_px_req_t *req);
/*
 * Receive side, first header of a chunk: record the message size and chunk
 * count, or fail with FERRY_ERR_USAGE (larger than the posted buffer) or
 * FERRY_ERR_REMOTE (chunks of one message disagree).
 */
ferry_status_t ferry_px_req_learn(ferry_px_req_t *req, uint64_t msg_size, uint32_t nchunks);
/* A chunk's payload moved completely: transmitted++ or received++. */
void ferry_px_req_chunk_moved(ferry_px_req_t *req);
/* A moved chunk is retired: done++, and the request is DONE at nchunks. */
void ferry_px_req_chunk_done(ferry_px_req_t *req);
/* Both at once, after accounting `bytes` of progress. */
void ferry_px_req_chunk_finish(ferry_px_req_t *req, size_t bytes);
/* 1 when every chunk's payload has moved (completions may still be held back). */
int ferry_px_req_all_moved(const ferry_px_req_t *req);
/* Account partial progress (bytes, timestamp) while a chunk is moving. */
void ferry_px_req_progress(ferry_px_req_t *req, size_t bytes);
/* ACTIVE/POSTED -> ERROR with status; a request already DONE stays DONE. */
void ferry_px_req_fail(ferry_px_req_t *req, ferry_status_t status);
/* 1 if the counters respect the invariant; tests and asserts use it. */
int ferry_px_req_check(const ferry_px_req_t *req);

#endif
