/*
 * Request counters and state transitions, and the comm's ring: posting,
 * claiming chunks in order, matching receives, test() outcomes, failures.
 * No threads: the test plays the lanes itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "socket/sock_stream.h"

/* The ring ops a stream backend gives, without a backend's words. */
static const ferry_px_ring_ops_t test_ring_ops = {
    .unit = "chunks", .poll = ferry_sock_stream_poll, .state = ferry_sock_stream_state,
    .dump = ferry_sock_stream_dump, .failed = ferry_sock_stream_failed};

static long fake_progress(ferry_sock_stream_t *comm, int lane, short revents,
                          ferry_sock_burst_t burst)
{
    return 0;
}
static short fake_wants(ferry_sock_stream_t *comm, int lane, int *fd_p) { *fd_p = -1; return 0; }
static const ferry_sock_stream_lane_ops_t fake_ops = {.progress = fake_progress, .wants = fake_wants};

static ferry_sock_stream_t *new_comm(ferry_px_req_kind_t kind)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));

    assert_int_equal(ferry_sock_stream_init(c, kind, "test", "10.0.0.2:1234", 4, 2, 64 << 10,
                                        1 << 20, &fake_ops, &test_ring_ops), FERRY_OK);
    return c;
}

static void test_send_lifecycle(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_SEND);
    static char buf[1 << 20];
    ferry_sock_claim_t cl;
    ferry_px_req_t *r;
    int done = -1, size = -1, i;

    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_non_null(r);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_POSTED);
    assert_int_equal(atomic_load(&r->nparts), 4);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 0);

    for (i = 0; i < 4; i++) {
        assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
        assert_ptr_equal(cl.req, r);
        assert_int_equal(cl.chunk, i);
        assert_int_equal(cl.offset, (uint64_t)i * (256 << 10));
        assert_int_equal(cl.len, 256 << 10);
        assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_ACTIVE);
    }
    assert_int_equal(ferry_sock_stream_claim(c, &cl), 0);
    assert_int_equal(atomic_load(&r->posted), 4);
    for (i = 0; i < 4; i++) {
        ferry_px_req_progress(r, 256 << 10);
        ferry_px_req_part_finish(r, 0);
        assert_true(ferry_px_req_check(r));
    }
    assert_int_equal(atomic_load(&r->transmitted), 4);
    assert_int_equal(atomic_load(&r->done), 4);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_DONE);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, sizeof(buf));
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_FREE);
    /* Tested again after done: NCCL never does; we say it is misuse. */
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, NULL), FERRY_ERR_INVALID);
    free(c);
}

/* Chunks are handed out in message order, across messages, including 0-byte ones. */
static void test_claim_order_and_zero_bytes(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_SEND);
    static char buf[200 << 10];
    ferry_px_req_t *a, *b, *z;
    ferry_sock_claim_t cl;
    int done = 0, size = -1;

    a = ferry_sock_stream_post(c, buf, 100, NULL, 0);
    z = ferry_sock_stream_post(c, buf, 0, NULL, 0);
    b = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
    assert_ptr_equal(cl.req, a);
    assert_int_equal(cl.seq, 0);
    assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
    assert_ptr_equal(cl.req, z);
    assert_int_equal(cl.len, 0);
    assert_int_equal(cl.nchunks, 1);
    ferry_px_req_part_finish(z, 0);
    assert_int_equal(ferry_px_ring_test(&c->ring, z, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, 0);
    assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
    assert_ptr_equal(cl.req, b);
    assert_int_equal(cl.seq, 2);
    free(c);
}

/* 32 in flight; the 33rd waits until the oldest is tested. */
static void test_ring_full_then_reuse(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_SEND);
    ferry_px_req_t *reqs[FERRY_MAX_REQUESTS];
    ferry_sock_claim_t cl;
    static char buf[8];
    int i, done = 0;

    for (i = 0; i < FERRY_MAX_REQUESTS; i++)
        assert_non_null(reqs[i] = ferry_sock_stream_post(c, buf, 8, NULL, 0));
    assert_null(ferry_sock_stream_post(c, buf, 8, NULL, 0));
    assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
    ferry_px_req_part_finish(cl.req, 0);
    assert_int_equal(ferry_px_ring_test(&c->ring, reqs[0], &done, NULL), FERRY_OK);
    assert_int_equal(done, 1);
    assert_ptr_equal(ferry_sock_stream_post(c, buf, 8, NULL, 0), reqs[0]);
    assert_int_equal(reqs[0]->seq, FERRY_MAX_REQUESTS);
    free(c);
}

static void test_recv_match_learn_and_sizes(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_RECV);
    static char buf[4096];
    ferry_px_req_t *r;
    int done = 0, size = -1;

    assert_null(ferry_px_ring_match(&c->ring, 0)); /* Chunk before its irecv: the lane parks. */
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_ptr_equal(ferry_px_ring_match(&c->ring, 0), r);
    assert_null(ferry_px_ring_match(&c->ring, 1));
    assert_null(ferry_px_ring_match(&c->ring, FERRY_MAX_REQUESTS)); /* Same slot, other message. */
    assert_int_equal(ferry_px_req_learn(r, 100, 2), FERRY_OK);
    assert_int_equal(ferry_px_req_learn(r, 100, 2), FERRY_OK);
    assert_int_equal(ferry_px_req_learn(r, 100, 3), FERRY_ERR_REMOTE);
    ferry_px_req_part_start(r);
    ferry_px_req_part_start(r);
    ferry_px_req_part_finish(r, 60);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_ACTIVE);
    ferry_px_req_part_finish(r, 40);
    assert_int_equal(atomic_load(&r->received), 2);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, 100); /* The real size, not the posted 4096. */
    free(c);
}

static void test_recv_larger_than_posted_is_usage_error(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_RECV);
    static char buf[16];
    ferry_px_req_t *r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    int done = 0;

    assert_int_equal(ferry_px_req_learn(r, 17, 1), FERRY_ERR_USAGE);
    ferry_px_req_fail(r, FERRY_ERR_USAGE);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_ERROR);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, NULL), FERRY_ERR_USAGE);
    assert_int_equal(done, 0);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_FREE);
    free(c);
}

/* A broken comm fails pending requests once each; DONE ones still succeed. */
static void test_comm_failure(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_RECV);
    static char buf[64];
    ferry_px_req_t *a = ferry_sock_stream_post(c, buf, 64, NULL, 0);
    ferry_px_req_t *b = ferry_sock_stream_post(c, buf, 64, NULL, 0);
    int done = 0, size = 0;

    assert_int_equal(ferry_px_req_learn(a, 64, 1), FERRY_OK);
    ferry_px_req_part_start(a);
    ferry_px_req_part_finish(a, 64);
    ferry_px_ring_fail(&c->ring, FERRY_ERR_REMOTE, "connection closed by peer %s", c->ring.peer);
    ferry_px_ring_fail(&c->ring, FERRY_ERR_IO, "second reason is ignored");
    assert_string_equal(c->ring.fail_reason, "connection closed by peer 10.0.0.2:1234");
    assert_int_equal(ferry_px_ring_test(&c->ring, a, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, 64);
    assert_int_equal(ferry_px_ring_test(&c->ring, b, &done, &size), FERRY_ERR_REMOTE);
    assert_int_equal(done, 0);
    free(c);
}

static void test_fail_does_not_undo_done(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_SEND);
    static char buf[8];
    ferry_px_req_t *r = ferry_sock_stream_post(c, buf, 8, NULL, 0);
    ferry_sock_claim_t cl;

    assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
    ferry_px_req_part_finish(r, 8);
    ferry_px_req_fail(r, FERRY_ERR_REMOTE);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_DONE);
    free(c);
}

/*
 * NCCL_FERRY_INJECT_DELAY_US: the payload counts as moved at once, the
 * completion comes due later; a peer that closes meanwhile fails nothing.
 */
static void test_injected_delay_and_close(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_RECV);
    static char buf[64];
    ferry_px_req_t *r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    uint64_t t0;
    int done = 0, size = 0, spins = 0;

    c->inject_delay_us = 2000;
    c->defer = calloc((size_t)c->nlanes, sizeof(*c->defer));
    assert_int_equal(ferry_px_req_learn(r, 64, 1), FERRY_OK);
    ferry_px_req_part_start(r);
    t0 = ferry_px_now_ns();
    ferry_sock_stream_chunk_finish(c, 1, r);
    assert_int_equal(atomic_load(&r->received), 1);
    assert_int_equal(atomic_load(&r->done), 0);
    assert_true(ferry_px_req_all_moved(r));
    /* Queued (UINT64_MAX: nothing deferred); it may already be due on a slow machine. */
    assert_true(ferry_sock_stream_defer_next_ns(c, 1) != UINT64_MAX);
    ferry_px_ring_fail(&c->ring, FERRY_ERR_REMOTE, "peer closed");
    while (!done && spins++ < 1000000) {
        ferry_sock_stream_progress_lane(c, 1, 0, FERRY_SOCK_POOL_BURST);
        assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    }
    assert_int_equal(done, 1);
    assert_int_equal(size, 64);
    /* Never reported before it was due: 2 ms after the chunk finished, however slow the host. */
    assert_true(ferry_px_now_ns() - t0 >= 2000000);
    free(c->defer);
    free(c);
}

/* Lane calls made by the thread that posts and tests (counting ops). */
static int count_progress[4], count_retire[4];
static long count_progress_fn(ferry_sock_stream_t *comm, int lane, short revents,
                          ferry_sock_burst_t burst)
{
    (void)comm;
    (void)revents;
    count_progress[lane]++;
    return 0;
}
static long count_retire_fn(ferry_sock_stream_t *comm, int lane)
{
    (void)comm;
    count_retire[lane]++;
    return 0;
}
static const ferry_sock_stream_lane_ops_t count_ops = {
    .progress = count_progress_fn, .wants = fake_wants, .retire = count_retire_fn};

static ferry_sock_stream_t *new_counted_comm(ferry_px_req_kind_t kind, int nthreads)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));

    assert_int_equal(ferry_sock_stream_init(c, kind, "test", "10.0.0.2:1234", 4, nthreads, 64 << 10,
                                        1 << 20, &count_ops, &test_ring_ops), FERRY_OK);
    /* These tests count NCCL's thread's calls by rule; the timed rescue has its own test. */
    c->rescue_after_ns = 0;
    memset(count_progress, 0, sizeof(count_progress));
    memset(count_retire, 0, sizeof(count_retire));
    return c;
}

/* A receive lane that delivers message seq 0 (1 MiB, one chunk) once the "peer" has sent it. */
static int arrive_ready;
static int arrive_too_big;    /* The "peer" sends more than the receive holds. */
static uint32_t arrive_seq;   /* Sequence number of the message that arrives. */
static long arrive_progress_fn(ferry_sock_stream_t *comm, int lane, short revents,
                          ferry_sock_burst_t burst)
{
    ferry_px_req_t *r;

    (void)revents;
    if (lane != 0 || !arrive_ready || (r = ferry_px_ring_match(&comm->ring, arrive_seq)) == NULL)
        return 0;
    arrive_ready = 0;
    if (arrive_too_big) {
        assert_int_equal(ferry_px_req_learn(r, 2 << 20, 1), FERRY_ERR_USAGE);
        ferry_px_req_fail(r, FERRY_ERR_USAGE);
        return FERRY_ERR_USAGE;
    }
    assert_int_equal(ferry_px_req_learn(r, 1 << 20, 1), FERRY_OK);
    ferry_px_req_part_start(r);
    ferry_px_req_progress(r, 1 << 20);
    ferry_sock_stream_chunk_finish(comm, lane, r);
    return 1 << 20;
}
static const ferry_sock_stream_lane_ops_t arrive_ops = {.progress = arrive_progress_fn,
                                               .wants = fake_wants};

/*
 * A test() whose assist finishes the request says so in that same call:
 * NCCL's proxy thread yields the CPU after a round that reported nothing, so
 * a completion held back to the next call costs a one-core rank its wait for
 * the core.
 */
static void test_assist_completes_in_same_test(void **state)
{
    static char buf[1 << 20];
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    ferry_px_req_t *r;
    int done = 0, size = 0;

    (void)state;
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.2:1234", 1, 0,
                                        64 << 10, 1 << 20, &arrive_ops, &test_ring_ops), FERRY_OK);
    arrive_ready = 0;
    arrive_seq = 0;
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 0); /* Nothing has arrived. */
    arrive_ready = 1;
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, 1 << 20);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_FREE);

    /* A failure the assist finds is reported in that same call too, by its code. */
    arrive_too_big = 1;
    arrive_ready = 1;
    arrive_seq = 1;
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    done = 0;
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_ERR_USAGE);
    assert_int_equal(done, 0);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_FREE);
    arrive_too_big = 0;
    free(c);
}

/*
 * NCCL's thread moves stream 0 itself only for small messages (isend posts
 * up to assist_max, test() up to assist_test_max; a receive goes by the last
 * message's size); bulk is left to the helpers. Without helpers it moves
 * every stream, whatever the size.
 */
static void test_assist_policy(void **state)
{
    static char buf[1 << 20];
    ferry_sock_stream_t *c;
    ferry_px_req_t *r;
    int done = 0, size = 0;

    (void)state;
    c = new_counted_comm(FERRY_PX_SEND, 2);
    assert_int_equal((int)c->assist_max, 32 << 10);
    r = ferry_sock_stream_post(c, buf, 16 << 10, NULL, 0);            /* Small: sent at post... */
    assert_int_equal(count_progress[0], 1);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(count_progress[0], 2);               /* ...and helped along in test(). */
    assert_int_equal(count_retire[0], 2);                 /* Held-back completions looked at too. */
    r = ferry_sock_stream_post(c, buf, 1 << 20, NULL, 0);             /* Bulk: left to the helpers. */
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(count_progress[0], 2);
    assert_int_equal(count_progress[1] + count_progress[2] + count_progress[3], 0);
    free(c);

    /* Receive: the first test() helps (nothing learnt yet); after a 1 MiB message, no more. */
    c = new_counted_comm(FERRY_PX_RECV, 2);
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_int_equal(count_progress[0], 0);               /* Receives are not pushed at post. */
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(count_progress[0], 1);
    assert_ptr_equal(ferry_px_ring_match(&c->ring, 0), r);
    assert_int_equal(ferry_px_req_learn(r, 1 << 20, 1), FERRY_OK);
    ferry_px_req_part_start(r);
    ferry_px_req_part_finish(r, 1 << 20);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 0);
    assert_int_equal(count_progress[0], 1);
    free(c);

    /* No helper threads (a one-CPU process): every stream, any size. */
    c = new_counted_comm(FERRY_PX_SEND, 0);
    r = ferry_sock_stream_post(c, buf, 1 << 20, NULL, 0);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(count_progress[0], 2);
    assert_int_equal(count_progress[3], 2);
    free(c);
}

/*
 * A comm that is the only one of its kind posting (a ping-pong) has NCCL's
 * thread move messages up to solo_max itself; as soon as another comm posts
 * within the window (NCCL's channels), only the 32 KiB rule holds again.
 */
static void test_solo_assist(void **state)
{
    static char buf[1 << 20];
    ferry_sock_stream_t *c, *other;
    ferry_px_req_t *r;
    int done = 0, size = 0;

    (void)state;
    usleep(3000); /* Earlier tests' comms posted: let the window pass. */
    other = new_counted_comm(FERRY_PX_SEND, 2);
    c = new_counted_comm(FERRY_PX_SEND, 2);
    c->solo_max = 256 << 10;
    other->solo_max = 256 << 10;
    r = ferry_sock_stream_post(c, buf, 128 << 10, NULL, 0);       /* Alone: sent at post... */
    assert_non_null(r);
    assert_int_equal(count_progress[0], 1);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(count_progress[0], 2);           /* ...and helped in test(). */
    r = ferry_sock_stream_post(c, buf, 512 << 10, NULL, 0);       /* Above solo_max: helpers. */
    assert_int_equal(count_progress[0], 2);
    assert_non_null(ferry_sock_stream_post(other, buf, 1 << 20, NULL, 0)); /* A second comm posts... */
    r = ferry_sock_stream_post(c, buf, 128 << 10, NULL, 0);       /* ...so 128 KiB is bulk again. */
    assert_int_equal(count_progress[0], 2);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(count_progress[0], 2);
    usleep(3000);                                     /* The other comm went quiet. */
    r = ferry_sock_stream_post(c, buf, 128 << 10, NULL, 0);
    assert_int_equal(count_progress[0], 3);
    c->solo_max = 0;                                  /* NCCL_FERRY_SOLO_MAX=0: off. */
    usleep(3000);
    r = ferry_sock_stream_post(c, buf, 128 << 10, NULL, 0);
    assert_int_equal(count_progress[0], 3);
    free(other);
    free(c);
}

/* A gated send (its buffer still being filled) holds back its chunks and every later message's. */
static void test_gated_send(void **state)
{
    ferry_sock_stream_t *c = new_comm(FERRY_PX_SEND);
    static char buf[2][256 << 10];
    ferry_sock_claim_t cl;
    ferry_px_req_t *a, *b;
    int done = -1, i;

    a = ferry_sock_stream_post(c, buf[0], sizeof(buf[0]), buf, 1);
    b = ferry_sock_stream_post(c, buf[1], sizeof(buf[1]), NULL, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_equal(a->sub[0].mem, buf);
    assert_int_equal(atomic_load(&a->gated), 1);
    assert_int_equal(atomic_load(&b->gated), 0);
    /* Nothing moves: not a's chunks, and not b's either (messages leave in order). */
    assert_int_equal(ferry_sock_stream_claim(c, &cl), 0);
    assert_int_equal(ferry_px_ring_test(&c->ring, a, &done, NULL), FERRY_OK);
    assert_int_equal(done, 0);
    assert_int_equal(atomic_load(&a->state), FERRY_PX_REQ_POSTED);
    ferry_sock_stream_open(c, a);
    assert_int_equal(atomic_load(&a->gated), 0);
    for (i = 0; i < 4; i++) {
        assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
        assert_ptr_equal(cl.req, a);
    }
    assert_int_equal(ferry_sock_stream_claim(c, &cl), 1);
    assert_ptr_equal(cl.req, b);
    /* A receive is never gated: lanes must be free to match it. */
    {
        ferry_sock_stream_t *r = new_comm(FERRY_PX_RECV);
        ferry_px_req_t *q = ferry_sock_stream_post(r, buf[0], sizeof(buf[0]), buf, 1);

        assert_int_equal(atomic_load(&q->gated), 0);
        assert_ptr_equal(ferry_px_ring_match(&r->ring, 0), q);
        free(r);
    }
    free(c);
}

/* A backend's finish hook holds a DONE request back from test() until it says ready. */
static int finish_calls, finish_ready;
static ferry_status_t fake_finish(ferry_px_ring_t *ring, ferry_px_req_t *req, int *ready)
{
    finish_calls++;
    *ready = finish_ready;
    return finish_ready < 0 ? FERRY_ERR_CUDA : FERRY_OK;
}
static const ferry_sock_stream_lane_ops_t finish_ops = {.progress = fake_progress, .wants = fake_wants};
static const ferry_px_ring_ops_t finish_ring_ops = {
    .unit = "chunks", .poll = ferry_sock_stream_poll, .finish = fake_finish,
    .failed = ferry_sock_stream_failed};

static void test_finish_hook(void **state)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    static char buf[64 << 10];
    ferry_px_req_t *r;
    int done = -1, size = -1;

    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.2:1234", 4, 2,
                                        64 << 10, 1 << 20, &finish_ops, &finish_ring_ops), FERRY_OK);
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    finish_calls = 0;
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(finish_calls, 0); /* Not DONE yet: the hook is not asked. */
    assert_int_equal(ferry_px_req_learn(r, 1000, 1), FERRY_OK);
    ferry_px_req_part_start(r);
    ferry_px_req_progress(r, 1000);
    ferry_px_req_part_finish(r, 0);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_DONE);
    finish_ready = 0;
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 0);
    assert_int_equal(finish_calls, 1);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_DONE);
    finish_ready = -1; /* The hook's error is test()'s answer, the request stays. */
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_ERR_CUDA);
    assert_int_equal(done, 0);
    finish_ready = 1;
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, 1000);
    assert_int_equal(atomic_load(&r->state), FERRY_PX_REQ_FREE);
    free(c);
}

static void test_state_names(void **state)
{
    assert_string_equal(ferry_px_req_state_str(FERRY_PX_REQ_POSTED), "POSTED");
    assert_string_equal(ferry_px_req_state_str(99), "INVALID");
    assert_string_equal(ferry_sock_lane_state_str(FERRY_SOCK_LANE_PARKED), "parked");
}

static long no_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now) { return 0; }

/*
 * A ring holds as many sub-buffers per slot as its ops say: one where the
 * backend never groups receives (every send comm, the socket backend), so a
 * comm stays small at thousands of peers; maxRecvs where it does, every
 * slot's buffers its own.
 */
static void test_ring_sub_buffers_sized_by_ops(void **state)
{
    static const ferry_px_ring_ops_t one = {.unit = "parts", .poll = no_poll};
    static const ferry_px_ring_ops_t grouped = {.unit = "parts", .poll = no_poll,
                                                .max_subs = FERRY_PX_MAX_SUBS};
    static const ferry_px_ring_ops_t too_many = {.unit = "parts", .poll = no_poll,
                                                 .max_subs = FERRY_PX_MAX_SUBS + 1};
    ferry_px_ring_t *ring = calloc(1, sizeof(*ring));
    ferry_px_sub_t subs[FERRY_PX_MAX_SUBS];
    static char bufs[FERRY_MAX_REQUESTS][FERRY_PX_MAX_SUBS][16];
    ferry_px_req_t *reqs[FERRY_MAX_REQUESTS];
    int i, j, done, sizes[FERRY_PX_MAX_SUBS];

    /* Every send comm and socket comm carries this ring: no seven unused buffers per slot. */
    assert_true(sizeof(ferry_px_ring_t) < 8192);

    assert_int_equal(ferry_px_ring_init(ring, FERRY_PX_RECV, "t", "10.0.0.2:1", &too_many),
                     FERRY_ERR_INVALID);
    assert_int_equal(ferry_px_ring_init(ring, FERRY_PX_RECV, "t", "10.0.0.2:1", &one), FERRY_OK);
    memset(subs, 0, sizeof(subs));
    for (j = 0; j < FERRY_PX_MAX_SUBS; j++) {
        subs[j].buf = bufs[0][j];
        subs[j].capacity = 16;
        subs[j].tag = j;
    }
    /* More buffers than the ring holds: refused, no slot taken. */
    assert_null(ferry_px_ring_post(ring, 2, subs, 0, 2, 0));
    assert_non_null(reqs[0] = ferry_px_ring_post(ring, 1, subs, 0, 1, 0));
    assert_int_equal(reqs[0]->seq, 0);
    ferry_px_ring_fini(ring);

    assert_int_equal(ferry_px_ring_init(ring, FERRY_PX_RECV, "t", "10.0.0.2:1", &grouped),
                     FERRY_OK);
    assert_null(ferry_px_ring_post(ring, FERRY_PX_MAX_SUBS + 1, subs, 0, 1, 0));
    for (i = 0; i < FERRY_MAX_REQUESTS; i++) {
        for (j = 0; j < FERRY_PX_MAX_SUBS; j++) {
            subs[j].buf = bufs[i][j];
            subs[j].capacity = (size_t)(16 + i);
            subs[j].tag = i * 100 + j;
        }
        reqs[i] = ferry_px_ring_post(ring, FERRY_PX_MAX_SUBS, subs, 0, FERRY_PX_MAX_SUBS, 0);
        assert_non_null(reqs[i]);
    }
    /* Every slot kept its own eight, none overwritten by a later post. */
    for (i = 0; i < FERRY_MAX_REQUESTS; i++) {
        assert_int_equal(reqs[i]->n, FERRY_PX_MAX_SUBS);
        for (j = 0; j < FERRY_PX_MAX_SUBS; j++) {
            assert_ptr_equal(reqs[i]->sub[j].buf, bufs[i][j]);
            assert_int_equal(reqs[i]->sub[j].tag, i * 100 + j);
            assert_int_equal(reqs[i]->sub[j].capacity, 16 + i);
        }
    }
    /* Sizes learnt per buffer come back per buffer. */
    for (j = 0; j < FERRY_PX_MAX_SUBS; j++) {
        atomic_store(&reqs[5]->sub[j].size, (uint64_t)j + 1);
        ferry_px_req_part_start(reqs[5]);
        ferry_px_req_part_finish(reqs[5], 0);
    }
    assert_int_equal(ferry_px_ring_test(ring, reqs[5], &done, sizes), FERRY_OK);
    assert_int_equal(done, 1);
    for (j = 0; j < FERRY_PX_MAX_SUBS; j++)
        assert_int_equal(sizes[j], j + 1);
    ferry_px_ring_fini(ring);
    free(ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_lifecycle),
        cmocka_unit_test(test_claim_order_and_zero_bytes),
        cmocka_unit_test(test_ring_full_then_reuse),
        cmocka_unit_test(test_recv_match_learn_and_sizes),
        cmocka_unit_test(test_recv_larger_than_posted_is_usage_error),
        cmocka_unit_test(test_comm_failure),
        cmocka_unit_test(test_fail_does_not_undo_done),
        cmocka_unit_test(test_injected_delay_and_close),
        cmocka_unit_test(test_solo_assist),
        cmocka_unit_test(test_assist_policy),
        cmocka_unit_test(test_assist_completes_in_same_test),
        cmocka_unit_test(test_gated_send),
        cmocka_unit_test(test_finish_hook),
        cmocka_unit_test(test_state_names),
        cmocka_unit_test(test_ring_sub_buffers_sized_by_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
