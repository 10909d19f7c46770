/*
 * The stream scheduler's kicks of its pool threads: which sleeping thread a
 * post wakes, and the counters the dump shows. The process' helper pool
 * (proxy/pool.h) runs real threads for a comm whose lanes are played by the
 * test (they move nothing and wait on no socket), every wait bounded. Each
 * test's comm is the pool's only client, so the pool starts with it (as
 * many threads as the comm spreads over) and stops with it.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "socket/sock_stream.h"

/* The ring ops a stream backend gives, without a backend's words. */
static const ferry_px_ring_ops_t test_ring_ops = {
    .unit = "chunks", .poll = ferry_sock_stream_poll, .state = ferry_sock_stream_state,
    .dump = ferry_sock_stream_dump, .failed = ferry_sock_stream_failed};
#include "proxy/registry.h"

static long idle_progress(ferry_sock_stream_t *comm, int lane, short revents,
                          ferry_sock_burst_t burst)
{
    (void)comm;
    (void)lane;
    (void)revents;
    return 0;
}
static short no_fd_wants(ferry_sock_stream_t *comm, int lane, int *fd_p)
{
    (void)comm;
    (void)lane;
    *fd_p = -1;
    return 0;
}
static const ferry_sock_stream_lane_ops_t idle_ops = {.progress = idle_progress, .wants = no_fd_wants};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Wait (at most 5 s) until every pool thread of c sleeps in epoll. */
static void wait_all_asleep(ferry_sock_stream_t *c)
{
    int i, tries, asleep = 0;

    for (tries = 0; tries < 5000 && !asleep; tries++) {
        asleep = 1;
        for (i = 0; i < c->pool.nthreads; i++)
            asleep &= ferry_px_pool_sleeping(&c->pool, i);
        if (!asleep)
            sleep_ms(1);
    }
    assert_true(asleep);
}

static ferry_px_pool_stats_t stats_of(ferry_sock_stream_t *c, int w)
{
    ferry_px_pool_stats_t st;
    int index, placed_for;

    assert_true(ferry_px_pool_thread_stats(&c->pool, w, &st, &index, &placed_for));
    return st;
}

static uint64_t woken_post(ferry_sock_stream_t *c, int w)
{
    ferry_px_pool_stats_t st = stats_of(c, w);

    return atomic_load(&st.woken_post);
}

static uint64_t woken_timer(ferry_sock_stream_t *c, int w)
{
    ferry_px_pool_stats_t st = stats_of(c, w);

    return atomic_load(&st.woken_timer);
}

/*
 * Wait (at most 5 s) until worker w was woken by a post, n in all, or was
 * awake anyway: its 1 s safety-net timeout (timer count past `timer`) can
 * end a sleep just before the post, and then the post has no one to wake.
 */
static void wait_woken_or_timer(ferry_sock_stream_t *c, int w, uint64_t n, uint64_t timer)
{
    int tries;

    for (tries = 0; tries < 5000 && woken_post(c, w) < n && woken_timer(c, w) == timer; tries++)
        sleep_ms(1);
    assert_true(woken_post(c, w) == n || woken_timer(c, w) > timer);
}

/*
 * The registry's dump as text into *text (free() it); at least one comm must
 * be live. The stream writes the buffer's address into *text until fclose(),
 * so *text is the caller's variable, which outlives every use of the text: a
 * local of this function would hand the stream an address that dies here,
 * and gcc -O3 (inlining this) then takes pointers into the text for pointers
 * to that dead local (-Wdangling-pointer). The stream is closed before the
 * checks, so a failing one (cmocka longjmps out) leaves no open stream
 * holding that address for exit() to flush through.
 */
static void dump_text(char **text)
{
    size_t len = 0;
    FILE *mem;
    int n;

    *text = NULL;
    mem = open_memstream(text, &len);
    assert_non_null(mem);
    n = ferry_px_registry_dump(mem);
    fclose(mem);
    assert_true(n >= 1);
    assert_non_null(*text);
}

static void park(ferry_sock_stream_t *c, int lane, uint32_t seq)
{
    atomic_store(&c->lanes[lane].seq, seq);
    ferry_sock_lane_set(c, lane, FERRY_SOCK_LANE_PARKED);
}

/*
 * Chunks of later messages arrive before their irecv: lane 0 holds a header
 * of message 1, lane 1 one of message 0. Posting the irecv for message 0
 * wakes lane 1's worker only; lane 0's would only park again. The irecv for
 * message 1 then wakes lane 0's.
 */
static void test_recv_post_wakes_only_matching_parked_lane(void **state)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    static char buf[2][64];
    uint64_t w0, w1, t0, t1, sent, sent0;

    (void)state;
    assert_non_null(c);
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.2:1234", 2, 2, 64 << 10,
                                        1 << 20, &idle_ops, &test_ring_ops), FERRY_OK);
    park(c, 0, 1);
    park(c, 1, 0);
    assert_int_equal(ferry_sock_stream_start(c), FERRY_OK);
    wait_all_asleep(c);
    w0 = woken_post(c, 0);
    w1 = woken_post(c, 1);
    t0 = woken_timer(c, 0);
    t1 = woken_timer(c, 1);
    sent0 = atomic_load(&c->pool.wakes_sent);

    assert_non_null(ferry_sock_stream_post(c, buf[0], sizeof(buf[0]), NULL, 0));
    wait_woken_or_timer(c, 1, w1 + 1, t1);
    sleep_ms(50); /* A wrong wake-up would have landed by now. */
    assert_int_equal(woken_post(c, 0), w0);
    assert_true(atomic_load(&c->pool.wakes_sent) <= sent0 + 1);
    w1 = woken_post(c, 1);

    /* Lane 1 took its message and is idle now; message 1 is lane 0's. */
    ferry_sock_lane_set(c, 1, FERRY_SOCK_LANE_IDLE);
    wait_all_asleep(c);
    sent = atomic_load(&c->pool.wakes_sent);
    assert_non_null(ferry_sock_stream_post(c, buf[1], sizeof(buf[1]), NULL, 0));
    wait_woken_or_timer(c, 0, w0 + 1, t0);
    sleep_ms(50);
    assert_int_equal(woken_post(c, 1), w1);
    assert_true(atomic_load(&c->pool.wakes_sent) <= sent + 1);

    ferry_sock_stream_stop(c);
    free(c);
}

/*
 * A lane held by another thread (NCCL's thread copying a chunk in test())
 * while its socket is readable: the pool thread that finds it busy must not
 * wait on the fd again (level-triggered, it fires at once: a spinning
 * thread), and must get the lane back from the holder when it lets go.
 */
static int held_fd = -1;
static _Atomic int held_release;
static _Atomic int held_inside;
static _Atomic size_t held_read;
static pthread_t held_holder;

static long held_progress(ferry_sock_stream_t *comm, int lane, short revents,
                          ferry_sock_burst_t burst)
{
    char buf[256];
    ssize_t n;
    int i;

    (void)comm;
    (void)revents;
    if (lane != 1)
        return 0;
    if (pthread_equal(pthread_self(), held_holder)) {
        atomic_store(&held_inside, 1);
        for (i = 0; i < 5000 && !atomic_load(&held_release); i++)
            sleep_ms(1);
        return 0; /* The holder leaves the bytes to the pool. */
    }
    n = read(held_fd, buf, sizeof(buf));
    if (n <= 0)
        return 0;
    atomic_fetch_add(&held_read, (size_t)n);
    return n;
}

static short held_wants(ferry_sock_stream_t *comm, int lane, int *fd_p)
{
    (void)comm;
    *fd_p = lane == 1 ? held_fd : -1;
    return lane == 1 ? POLLIN : 0;
}

static const ferry_sock_stream_lane_ops_t held_ops = {.progress = held_progress, .wants = held_wants};

static void *held_holder_main(void *arg)
{
    ferry_sock_stream_progress_lane(arg, 1, 0, FERRY_SOCK_POOL_BURST);
    return NULL;
}

static void test_busy_lane_no_spin_and_handed_back(void **state)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    ferry_px_pool_stats_t st;
    uint64_t idle0, idle1;
    char data[100];
    int sv[2], i;

    (void)state;
    assert_non_null(c);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    held_fd = sv[0];
    atomic_store(&held_release, 0);
    atomic_store(&held_inside, 0);
    atomic_store(&held_read, 0);
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.3:1", 2, 2, 64 << 10,
                                        1 << 20, &held_ops, &test_ring_ops), FERRY_OK);
    assert_int_equal(ferry_sock_stream_start(c), FERRY_OK);
    wait_all_asleep(c);

    /* Another thread takes lane 1 and stays inside its progress. */
    assert_int_equal(pthread_create(&held_holder, NULL, held_holder_main, c), 0);
    for (i = 0; i < 5000 && !atomic_load(&held_inside); i++)
        sleep_ms(1);
    assert_true(atomic_load(&held_inside));
    st = stats_of(c, 1);
    idle0 = atomic_load(&st.idle_sweeps);
    memset(data, 0x5a, sizeof(data));
    assert_int_equal(write(sv[1], data, sizeof(data)), (ssize_t)sizeof(data));
    sleep_ms(100);
    st = stats_of(c, 1);
    idle1 = atomic_load(&st.idle_sweeps);
    printf("  lane held 100 ms with its socket readable: %llu idle sweeps of its pool thread\n",
           (unsigned long long)(idle1 - idle0));
    /* One wake to find it busy, maybe the safety timeout; a spin makes thousands. */
    assert_true(idle1 - idle0 <= 5);
    assert_int_equal(atomic_load(&held_read), 0);

    /* The holder lets go: its release kicks the pool thread, which reads the bytes. */
    atomic_store(&held_release, 1);
    assert_int_equal(pthread_join(held_holder, NULL), 0);
    for (i = 0; i < 5000 && atomic_load(&held_read) < sizeof(data); i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&held_read), sizeof(data));

    ferry_sock_stream_stop(c);
    free(c);
    close(sv[0]);
    close(sv[1]);
}

/*
 * A send post wakes one sleeping worker per chunk, no more; the counters add
 * up (every sleep ended by one cause) and the dump shows them per thread with
 * the wake-ups per chunk.
 */
static void test_send_post_wakes_one_per_chunk_and_dump(void **state)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    static char buf[128 << 10];
    char *text = NULL, want[64];
    uint64_t posts0, sent0;
    int i;

    (void)state;
    assert_non_null(c);
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_SEND, "test", "10.0.0.2:1234", 4, 4, 64 << 10,
                                        1 << 20, &idle_ops, &test_ring_ops), FERRY_OK);
    assert_int_equal(ferry_sock_stream_start(c), FERRY_OK);
    wait_all_asleep(c);
    /* The attach kicked each thread once to register the lanes: count from here. */
    posts0 = woken_post(c, 0) + woken_post(c, 1) + woken_post(c, 2) + woken_post(c, 3);
    sent0 = atomic_load(&c->pool.wakes_sent);
    /* 128 KiB over 4 lanes with 64 KiB chunks: 2 chunks, so 2 of the 4 workers. */
    assert_non_null(ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0));
    /* Workers 0 and 1, unless a safety-net timeout had one of them awake at that moment. */
    for (i = 0; i < 5000 && woken_post(c, 0) + woken_post(c, 1) + woken_post(c, 2) +
                                    woken_post(c, 3) < posts0 + 2; i++)
        sleep_ms(1);
    sleep_ms(50);
    assert_int_equal(woken_post(c, 0) + woken_post(c, 1) + woken_post(c, 2) + woken_post(c, 3),
                     posts0 + 2);
    assert_int_equal(atomic_load(&c->pool.wakes_sent), sent0 + 2);
    for (i = 0; i < 4; i++) {
        ferry_px_pool_stats_t st = stats_of(c, i);

        assert_true(atomic_load(&st.woken_post) + atomic_load(&st.woken_io) +
                        atomic_load(&st.woken_timer) <= atomic_load(&st.sleeps));
        assert_true(atomic_load(&st.sleeps) <= atomic_load(&st.sweeps));
        assert_true(atomic_load(&st.idle_sweeps) <= atomic_load(&st.sweeps));
    }

    dump_text(&text);
    /* The comm names its 4 threads; the pool's section, once, gives their figures. */
    assert_non_null(strstr(text, "served by ferry-pool-"));
    assert_non_null(strstr(text, "(of the process' 4; their figures under \"helper pool\")"));
    snprintf(want, sizeof(want), "%llu helper wake-ups by this comm's posts",
             (unsigned long long)(sent0 + 2));
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "helper pool: 4 thread(s), shared by every comm of the process"));
    for (i = 0; i < 4; i++) {
        char line[64];

        snprintf(line, sizeof(line), "  ferry-pool-%d: ", i);
        assert_non_null(strstr(text, line));
        assert_null(strstr(strstr(text, line) + 1, line)); /* Once per dump. */
    }
    free(text);

    ferry_sock_stream_stop(c);
    free(c);
}

/* Without helper threads the dump says who moves the lanes. */
static void test_dump_without_helpers(void **state)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    char *text = NULL, *own, *next;

    (void)state;
    assert_non_null(c);
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.9:9", 1, 0, 64 << 10,
                                        1 << 20, &idle_ops, &test_ring_ops), FERRY_OK);
    assert_int_equal(ferry_sock_stream_start(c), FERRY_OK);
    dump_text(&text);
    /* This comm's section: from its line to the next comm's, if any. */
    own = strstr(text, "peer 10.0.0.9:9");
    assert_non_null(own);
    next = strstr(own + 1, " comm 0x");
    if (next != NULL)
        *next = '\0';
    assert_non_null(strstr(own, "no helper threads: NCCL's thread moves every lane"));
    assert_null(strstr(own, "helper wake-ups"));
    free(text);
    ferry_sock_stream_stop(c);
    free(c);
}

/*
 * The dump's timeline of finished messages: post -> a lane takes the first
 * chunk -> last chunk retired -> test() reports it, each step timed here by
 * sleeping between them (no threads: the test plays the lane).
 */
static void test_message_timeline(void **state)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    static char buf[256 << 10];
    const ferry_px_timing_t *t;
    ferry_sock_claim_t claim;
    ferry_px_req_t *r;
    char *text = NULL, *own;
    int done = 0, size = 0, i;

    (void)state;
    assert_non_null(c);
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_SEND, "test", "10.0.0.7:7", 2, 2, 64 << 10,
                                        1 << 20, &idle_ops, &test_ring_ops), FERRY_OK);
    ferry_px_ring_register(&c->ring); /* Listed in the dump; no helper threads started. */
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_non_null(r);
    sleep_ms(20);
    for (i = 0; i < 2; i++) { /* 256 KiB over 2 lanes: 2 chunks. */
        assert_int_equal(ferry_sock_stream_claim(c, &claim), 1);
        if (i == 0)
            sleep_ms(30);
        ferry_px_req_progress(r, claim.len);
        ferry_sock_stream_chunk_finish(c, i, r);
    }
    sleep_ms(10);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, sizeof(buf));

    t = &c->ring.timing;
    assert_int_equal(atomic_load(&t->msgs), 1);
    assert_true(atomic_load(&t->wait_ns) >= 20000000ULL);   /* Post -> first claim. */
    assert_true(atomic_load(&t->move_ns) >= 30000000ULL);   /* First claim -> last done. */
    assert_true(atomic_load(&t->report_ns) >= 10000000ULL); /* Done -> test(). */
    assert_int_equal(atomic_load(&t->move_max_ns), atomic_load(&t->move_ns));
    /* Generous upper bounds: a loaded runner may stretch sleeps, not shrink them. */
    assert_true(atomic_load(&t->wait_ns) < 2000000000ULL);

    dump_text(&text);
    own = strstr(text, "peer 10.0.0.7:7");
    assert_non_null(own);
    assert_non_null(strstr(own, "1 messages done; on average "));
    assert_non_null(strstr(own, "until their first of chunks started (the hand-off, or the peer's clear-to-send)"));
    free(text);
    ferry_px_ring_unregister(&c->ring);
    free(c);
}

/* A lane that sends whatever it can claim at once, counting who called it. */
static _Atomic int claim_calls;
static long claim_all_progress(ferry_sock_stream_t *comm, int lane, short revents,
                          ferry_sock_burst_t burst)
{
    ferry_sock_claim_t claim;
    long work = 0;

    (void)revents;
    atomic_fetch_add(&claim_calls, 1);
    while (ferry_sock_stream_claim(comm, &claim)) {
        ferry_px_req_progress(claim.req, claim.len);
        ferry_sock_stream_chunk_finish(comm, lane, claim.req);
        work++;
    }
    return work;
}
static const ferry_sock_stream_lane_ops_t claim_all_ops = {.progress = claim_all_progress,
                                                           .wants = no_fd_wants};

/* After 2 ms, test() on r has neither finished it nor called a lane. */
static void expect_untouched(ferry_sock_stream_t *c, ferry_px_req_t *r)
{
    int done = 0, size = 0, calls = atomic_load(&claim_calls);

    sleep_ms(2);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 0);
    assert_int_equal(atomic_load(&claim_calls), calls);
}

/* A send test() must leave to its helper: untouched, then the test plays the helper. */
static void expect_left_to_helper(ferry_sock_stream_t *c, char *buf, size_t len)
{
    ferry_px_req_t *r = ferry_sock_stream_post(c, buf, len, NULL, 0);
    int done = 0, size = 0;

    assert_non_null(r);
    expect_untouched(c, r);
    assert_true(ferry_sock_stream_progress_lane(c, 0, 0, FERRY_SOCK_POOL_BURST) > 0);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, (int)len);
}

/*
 * A lane that NCCL's thread's rescue leaves holding its chunk (the socket
 * took part of it: blocked) while the pool thread sleeps: the pool thread
 * declines the message until the rescue has taken it, then finishes it.
 */
static _Atomic int half_rescued;
static pthread_t half_tester;
static ferry_sock_claim_t half_claim;

static long half_progress(ferry_sock_stream_t *comm, int lane, short revents,
                          ferry_sock_burst_t burst)
{
    (void)revents;
    (void)burst;
    if (!pthread_equal(pthread_self(), half_tester)) {
        if (!atomic_load(&half_rescued))
            return 0; /* The late helper: the message stays POSTED. */
        if (half_claim.req == NULL)
            return 0;
        ferry_px_req_progress(half_claim.req, half_claim.len);
        ferry_sock_stream_chunk_finish(comm, lane, half_claim.req);
        half_claim.req = NULL;
        return 1;
    }
    if (atomic_load(&half_rescued) || !ferry_sock_stream_claim(comm, &half_claim))
        return 0;
    ferry_sock_lane_set(comm, lane, FERRY_SOCK_LANE_BLOCKED);
    atomic_store(&half_rescued, 1);
    return 1;
}

static const ferry_sock_stream_lane_ops_t half_ops = {.progress = half_progress,
                                                      .wants = no_fd_wants};

/*
 * A rescue that leaves a lane holding a chunk (the socket was full) hands it
 * back to the pool at once: the pool thread, asleep with no fd of that lane
 * registered, is kicked, and finishes the message without its 1 s safety
 * sweep (which the pool counts as a lost wake-up).
 */
static void test_rescue_left_blocked_kicks_pool(void **state)
{
    ferry_sock_stream_t *c = ferry_px_ring_alloc(sizeof(*c));
    static char buf[64 << 10];
    ferry_px_pool_stats_t st;
    ferry_px_req_t *r;
    int done = 0, size = 0, i;

    (void)state;
    assert_non_null(c);
    half_tester = pthread_self();
    atomic_store(&half_rescued, 0);
    half_claim.req = NULL;
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_SEND, "test", "10.0.0.5:7", 1, 1, 64 << 10,
                                        1 << 20, &half_ops, &test_ring_ops), FERRY_OK);
    assert_int_equal(ferry_sock_stream_start(c), FERRY_OK);
    wait_all_asleep(c);
    r = ferry_sock_stream_post(c, buf, sizeof(buf), NULL, 0);
    assert_non_null(r);
    /* The pool thread looked and declined; test() rescues once the interval passed. */
    for (i = 0; i < 5000 && !atomic_load(&half_rescued); i++) {
        assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
        if (!atomic_load(&half_rescued))
            sleep_ms(1);
    }
    assert_true(atomic_load(&half_rescued));
    assert_int_equal(atomic_load(&c->rescues), 1);
    for (i = 0; i < 5000 && !done; i++) {
        assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
        if (!done)
            sleep_ms(1);
    }
    assert_int_equal(done, 1);
    assert_int_equal(size, (int)sizeof(buf));
    st = stats_of(c, 0);
    printf("  rescued, left blocked: done after %d ms; pool woken %llu times by kicks, %llu by "
           "its safety timeout, %llu lost wake-ups\n", i,
           (unsigned long long)atomic_load(&st.woken_post),
           (unsigned long long)atomic_load(&st.woken_timer),
           (unsigned long long)atomic_load(&st.rescues));
    assert_int_equal(atomic_load(&st.rescues), 0);
    ferry_sock_stream_stop(c);
    free(c);
}

/*
 * A helper that never runs (its comm has one, never started): test() on a
 * 64 KiB send, above what NCCL's thread sends itself, leaves it to the
 * helper at first, and once it has waited past the rescue interval moves it
 * itself, counted in the dump. A 512 KiB message (bulk) stays the helper's,
 * and so does a small one while a lane holds a chunk of an earlier message,
 * or with the rescue off (NCCL_FERRY_RESCUE_US=0); a receive is never
 * rescued.
 */
static void test_rescue_message_helper_left(void **state)
{
    ferry_sock_stream_t *c = ferry_px_ring_alloc(sizeof(*c));
    static char buf[512 << 10];
    ferry_px_req_t *r;
    uint64_t t0, t1;
    char *text = NULL, *own;
    int done = 0, size = 0;

    (void)state;
    assert_non_null(c);
    atomic_store(&claim_calls, 0);
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_SEND, "test", "10.0.0.5:5", 1, 1, 64 << 10,
                                        1 << 20, &claim_all_ops, &test_ring_ops), FERRY_OK);
    ferry_px_ring_register(&c->ring);
    t0 = ferry_px_now_ns();
    r = ferry_sock_stream_post(c, buf, 64 << 10, NULL, 0);
    assert_non_null(r);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    t1 = ferry_px_now_ns();
    if (t1 - t0 < 90000) { /* Not yet due (a descheduled runner may be past it). */
        assert_int_equal(done, 0);
        assert_int_equal(atomic_load(&claim_calls), 0);
    }
    if (!done) {
        sleep_ms(2);
        assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    }
    assert_int_equal(done, 1);
    assert_int_equal(size, 64 << 10);
    assert_int_equal(atomic_load(&c->rescues), 1);

    /* Bulk: its helper's, however long it waits. */
    expect_left_to_helper(c, buf, sizeof(buf));
    assert_int_equal(atomic_load(&c->rescues), 1);

    dump_text(&text);
    own = strstr(text, "peer 10.0.0.5:5");
    assert_non_null(own);
    assert_non_null(strstr(own, "1 times NCCL's thread moved a message no helper had taken"));
    free(text);

    /*
     * Behind a chunk a lane has in hand (an earlier message's, moving or
     * waiting for POLLOUT) a small message waits its turn in the stream:
     * left to the lane while it holds one, rescued once the lane is free.
     */
    ferry_sock_lane_set(c, 0, FERRY_SOCK_LANE_BLOCKED);
    r = ferry_sock_stream_post(c, buf, 64 << 10, NULL, 0);
    assert_non_null(r);
    expect_untouched(c, r);
    ferry_sock_lane_set(c, 0, FERRY_SOCK_LANE_PAYLOAD);
    expect_untouched(c, r);
    assert_int_equal(atomic_load(&c->rescues), 1);
    ferry_sock_lane_set(c, 0, FERRY_SOCK_LANE_IDLE);
    assert_int_equal(ferry_px_ring_test(&c->ring, r, &done, &size), FERRY_OK);
    assert_int_equal(done, 1);
    assert_int_equal(size, 64 << 10);
    assert_int_equal(atomic_load(&c->rescues), 2);

    /* NCCL_FERRY_RESCUE_US=0: a small message waits for its helper too. */
    c->rescue_after_ns = 0;
    expect_left_to_helper(c, buf, 64 << 10);
    assert_int_equal(atomic_load(&c->rescues), 2);
    ferry_px_ring_unregister(&c->ring);
    free(c);

    /* A receive waits for its sender as much as for its helper: never rescued. */
    c = ferry_px_ring_alloc(sizeof(*c));
    assert_non_null(c);
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.5:6", 1, 1, 64 << 10,
                                        1 << 20, &claim_all_ops, &test_ring_ops), FERRY_OK);
    atomic_store(&c->ring.last_size, 128 << 10); /* Above what test() assists with. */
    r = ferry_sock_stream_post(c, buf, 128 << 10, NULL, 0);
    assert_non_null(r);
    expect_untouched(c, r);
    assert_int_equal(atomic_load(&c->rescues), 0);
    free(c);
}

/* Pin the calling thread to one CPU and check it runs there now. */
static void pin_self(int cpu)
{
    cpu_set_t one;

    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
    assert_int_equal(sched_getcpu(), cpu);
}

static uint64_t placed(ferry_sock_stream_t *c, int w)
{
    ferry_px_pool_stats_t st = stats_of(c, w);

    return atomic_load(&st.placed);
}

/* Wait (at most 5 s) until pool thread w has moved its CPUs n times. */
static void wait_placed(ferry_sock_stream_t *c, int w, uint64_t n)
{
    int tries;

    for (tries = 0; tries < 5000 && placed(c, w) < n; tries++)
        sleep_ms(1);
    assert_int_equal(placed(c, w), n);
}

static int worker_may_run_on(ferry_sock_stream_t *c, int w, int cpu)
{
    cpu_set_t set;
    pthread_t th;

    assert_true(ferry_px_pool_thread_of(&c->pool, w, &th));
    assert_int_equal(pthread_getaffinity_np(th, sizeof(set), &set), 0);
    return CPU_ISSET(cpu, &set);
}

/* Post a receive, wait for worker 0's n-th move, check it may run on `on` and not on `off`. */
static void post_and_check_placed(ferry_sock_stream_t *c, char *buf, size_t len, uint64_t n, int on,
                                  int off)
{
    assert_non_null(ferry_sock_stream_post(c, buf, len, NULL, 0));
    wait_placed(c, 0, n);
    assert_true(worker_may_run_on(c, 0, on));
    assert_false(worker_may_run_on(c, 0, off));
}

/*
 * place_away: a helper keeps off the CPU the posts come from, follows that
 * CPU when it moves, keeps every other CPU it had, and the dump says so.
 * With one CPU to its name it stays there. Needs two CPUs in the mask.
 */
static void test_place_away_follows_posting_cpu(void **state)
{
    ferry_sock_stream_t *c = calloc(1, sizeof(*c));
    static char buf[3][64];
    cpu_set_t mine, saved;
    int a = -1, b = -1, cpu;
    char *text = NULL, want[64];

    (void)state;
    assert_non_null(c);
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
    mine = saved;
    for (cpu = 0; cpu < CPU_SETSIZE && b < 0; cpu++)
        if (CPU_ISSET(cpu, &mine)) {
            if (a < 0)
                a = cpu;
            else
                b = cpu;
        }
    if (b < 0) {
        free(c);
        skip(); /* One CPU: nowhere to keep off to. */
    }
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.5:5", 1, 1, 64 << 10,
                                        1 << 20, &idle_ops, &test_ring_ops), FERRY_OK);
    c->place_away = 1;
    park(c, 0, 0);
    assert_int_equal(ferry_sock_stream_start(c), FERRY_OK); /* The worker inherits the whole mask. */
    wait_all_asleep(c);
    assert_int_equal(placed(c, 0), 0); /* No post yet: left alone. */

    pin_self(a);
    post_and_check_placed(c, buf[0], sizeof(buf[0]), 1, b, a);

    /* The posting thread moves to b: the worker takes a back and leaves b. */
    pin_self(b);
    park(c, 0, 1);
    post_and_check_placed(c, buf[1], sizeof(buf[1]), 2, a, b);
    dump_text(&text);
    snprintf(want, sizeof(want), "kept off the posting CPU, moved 2 times, last off CPU %d", b);
    assert_non_null(strstr(text, want));
    free(text);
    ferry_sock_stream_stop(c);

    /* Given only the posting CPU (has_cpus), the worker stays on it: never an empty set. */
    assert_int_equal(ferry_sock_stream_init(c, FERRY_PX_RECV, "test", "10.0.0.5:6", 1, 1, 64 << 10,
                                        1 << 20, &idle_ops, &test_ring_ops), FERRY_OK);
    c->place_away = 1;
    c->has_cpus = 1;
    CPU_ZERO(&c->cpus);
    CPU_SET(b, &c->cpus);
    park(c, 0, 0);
    assert_int_equal(ferry_sock_stream_start(c), FERRY_OK);
    wait_all_asleep(c);
    post_and_check_placed(c, buf[2], sizeof(buf[2]), 1, b, a);
    ferry_sock_stream_stop(c);
    assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recv_post_wakes_only_matching_parked_lane),
        cmocka_unit_test(test_send_post_wakes_one_per_chunk_and_dump),
        cmocka_unit_test(test_dump_without_helpers),
        cmocka_unit_test(test_message_timeline),
        cmocka_unit_test(test_rescue_message_helper_left),
        cmocka_unit_test(test_rescue_left_blocked_kicks_pool),
        cmocka_unit_test(test_place_away_follows_posting_cpu),
        cmocka_unit_test(test_busy_lane_no_spin_and_handed_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
