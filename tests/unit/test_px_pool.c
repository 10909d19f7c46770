/*
 * The helper pool (proxy/pool.h) with fake units: each unit's fd is an
 * eventfd the test writes, its ops count their calls. A kick wakes exactly
 * the thread that owns the unit; an fd wakes its thread with its events; a
 * timer fires; work that no kick announced waits for the 1 s safety sweep,
 * which counts it as a lost wake-up; a client detached while its unit is
 * busy is never touched after; a busy unit does not starve another on the same thread; the shared
 * pool keeps its first size and stops with its last client. Every wait is
 * bounded.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "proxy/clock.h"
#include "proxy/pool.h"

#define NUNITS 4

typedef struct fake {
    int              fd[NUNITS];
    _Atomic uint64_t calls[NUNITS];     /* progress() calls. */
    _Atomic int      last_revents[NUNITS];
    _Atomic uint64_t due_ns[NUNITS];    /* Absolute; 0: no timer. */
    _Atomic uint64_t fired_ns[NUNITS];  /* When progress ran with the timer due. */
    _Atomic int      busy[NUNITS];      /* progress sleeps 2 ms and reports work. */
    _Atomic int      pending[NUNITS];   /* Work set without a kick: the next call takes it. */
    _Atomic int      detached;          /* Set after detach returned: no call may come. */
    _Atomic int      late_calls;        /* Calls that came anyway. */
} fake_t;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static long fake_progress(void *ctx, int unit, short revents)
{
    fake_t *f = ctx;
    uint64_t v, due;

    if (atomic_load(&f->detached))
        atomic_fetch_add(&f->late_calls, 1);
    atomic_fetch_add(&f->calls[unit], 1);
    if (revents != 0)
        atomic_store(&f->last_revents[unit], revents);
    due = atomic_load(&f->due_ns[unit]);
    if (due != 0 && ferry_px_now_ns() >= due) {
        atomic_store(&f->fired_ns[unit], ferry_px_now_ns());
        atomic_store(&f->due_ns[unit], 0);
    }
    if (atomic_load(&f->busy[unit])) {
        sleep_ms(2);
        return 1;
    }
    if (atomic_exchange(&f->pending[unit], 0))
        return 1;
    /* Drain the eventfd: its bytes are the unit's work. */
    if (f->fd[unit] >= 0 && read(f->fd[unit], &v, sizeof(v)) == (ssize_t)sizeof(v))
        return 1;
    return 0;
}

static short fake_wants(void *ctx, int unit, int *fd_p)
{
    fake_t *f = ctx;

    *fd_p = f->fd[unit];
    return f->fd[unit] >= 0 ? FERRY_PX_POOL_READABLE : 0;
}

static uint64_t fake_next_ns(void *ctx, int unit, uint64_t now)
{
    fake_t *f = ctx;
    uint64_t due = atomic_load(&f->due_ns[unit]);

    if (due == 0)
        return UINT64_MAX;
    return due <= now ? 0 : due - now;
}

static const ferry_px_pool_ops_t fake_ops = {
    .progress = fake_progress, .wants = fake_wants, .next_ns = fake_next_ns};

static fake_t *fake_new(int with_fds)
{
    fake_t *f = calloc(1, sizeof(*f));
    int i;

    assert_non_null(f);
    for (i = 0; i < NUNITS; i++) {
        f->fd[i] = with_fds ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
        if (with_fds)
            assert_true(f->fd[i] >= 0);
    }
    return f;
}

static void fake_free(fake_t *f)
{
    int i;

    for (i = 0; i < NUNITS; i++)
        if (f->fd[i] >= 0)
            close(f->fd[i]);
    free(f);
}

static ferry_px_pool_stats_t stats(const ferry_px_pool_client_t *c, int slot)
{
    ferry_px_pool_stats_t st;
    int index, placed_for;

    assert_true(ferry_px_pool_thread_stats(c, slot, &st, &index, &placed_for));
    return st;
}

static uint64_t rescues_of(const ferry_px_pool_client_t *c, int slot)
{
    ferry_px_pool_stats_t st = stats(c, slot);

    return atomic_load(&st.rescues);
}

static int thread_index(const ferry_px_pool_client_t *c, int slot)
{
    ferry_px_pool_stats_t st;
    int index, placed_for;

    assert_true(ferry_px_pool_thread_stats(c, slot, &st, &index, &placed_for));
    return index;
}

static void wait_asleep(const ferry_px_pool_client_t *c)
{
    int j, tries, asleep = 0;

    for (tries = 0; tries < 5000 && !asleep; tries++) {
        asleep = 1;
        for (j = 0; j < c->nthreads; j++)
            asleep &= ferry_px_pool_sleeping(c, j);
        if (!asleep)
            sleep_ms(1);
    }
    assert_true(asleep);
}

static ferry_px_pool_want_t want_of(int threads, int pool_size)
{
    ferry_px_pool_want_t w;

    memset(&w, 0, sizeof(w));
    w.threads = threads;
    w.pool_size = pool_size;
    return w;
}

/* A kick wakes the one thread that owns the unit's slot, and only that unit's calls grow. */
static void test_kick_wakes_owner_only(void **state)
{
    ferry_px_pool_want_t w = want_of(4, 4);
    struct ferry_px_pool *pool = ferry_px_pool_create(4, &w);
    ferry_px_pool_client_t c;
    fake_t *f = fake_new(0);
    uint64_t posts[NUNITS], calls[NUNITS], full[NUNITS];
    int j, tries, seen[NUNITS] = {0};

    (void)state;
    assert_non_null(pool);
    memset(&c, 0, sizeof(c));
    assert_int_equal(ferry_px_pool_attach_to(pool, &c, &fake_ops, f, NUNITS, &w), FERRY_OK);
    assert_int_equal(c.nthreads, 4);
    for (j = 0; j < 4; j++) { /* One unit per thread, each thread once. */
        assert_false(seen[thread_index(&c, j)]);
        seen[thread_index(&c, j)] = 1;
    }
    wait_asleep(&c);
    for (j = 0; j < NUNITS; j++) {
        ferry_px_pool_stats_t st = stats(&c, j);

        posts[j] = atomic_load(&st.woken_post);
        full[j] = atomic_load(&st.full_sweeps);
        calls[j] = atomic_load(&f->calls[j]);
    }
    ferry_px_pool_kick(&c, 2);
    for (tries = 0; tries < 5000 && atomic_load(&f->calls[2]) == calls[2]; tries++)
        sleep_ms(1);
    sleep_ms(50); /* A wrong wake-up would have landed by now. */
    for (j = 0; j < NUNITS; j++) {
        ferry_px_pool_stats_t st = stats(&c, j);

        if (j == 2) {
            assert_int_equal(atomic_load(&st.woken_post), posts[j] + 1);
            assert_true(atomic_load(&f->calls[j]) > calls[j]);
            continue;
        }
        assert_int_equal(atomic_load(&st.woken_post), posts[j]);
        /* Only the 1 s safety sweep may have looked at the others. */
        if (atomic_load(&st.full_sweeps) == full[j])
            assert_int_equal(atomic_load(&f->calls[j]), calls[j]);
    }
    assert_true(atomic_load(&c.wakes_sent) >= 1);
    ferry_px_pool_detach(&c);
    ferry_px_pool_destroy(pool);
    fake_free(f);
}

/* An fd that becomes readable wakes its thread, which tells that unit it is readable. */
static void test_fd_wakes_with_events(void **state)
{
    ferry_px_pool_want_t w = want_of(2, 2);
    struct ferry_px_pool *pool = ferry_px_pool_create(2, &w);
    ferry_px_pool_client_t c;
    fake_t *f = fake_new(1);
    uint64_t one = 1, io0, calls1;
    int tries;

    (void)state;
    assert_non_null(pool);
    memset(&c, 0, sizeof(c));
    assert_int_equal(ferry_px_pool_attach_to(pool, &c, &fake_ops, f, NUNITS, &w), FERRY_OK);
    wait_asleep(&c);
    {
        ferry_px_pool_stats_t st = stats(&c, 1);

        io0 = atomic_load(&st.woken_io);
    }
    calls1 = atomic_load(&f->calls[1]);
    /* Unit 1 is slot 1's (units 1 and 3 there). */
    assert_int_equal(write(f->fd[1], &one, sizeof(one)), (ssize_t)sizeof(one));
    for (tries = 0; tries < 5000 && atomic_load(&f->last_revents[1]) == 0; tries++)
        sleep_ms(1);
    assert_true(atomic_load(&f->last_revents[1]) & FERRY_PX_POOL_READABLE);
    assert_true(atomic_load(&f->calls[1]) > calls1);
    {
        ferry_px_pool_stats_t st = stats(&c, 1);

        assert_true(atomic_load(&st.woken_io) >= io0 + 1);
    }
    assert_int_equal(atomic_load(&f->last_revents[0]), 0);
    ferry_px_pool_detach(&c);
    ferry_px_pool_destroy(pool);
    fake_free(f);
}

/* A unit's timer fires on time without any kick or fd: the thread sleeps only until then. */
static void test_timer_fires(void **state)
{
    ferry_px_pool_want_t w = want_of(1, 1);
    struct ferry_px_pool *pool = ferry_px_pool_create(1, &w);
    ferry_px_pool_client_t c;
    fake_t *f = fake_new(0);
    uint64_t set_ns, fired, timer0;
    int tries;

    (void)state;
    assert_non_null(pool);
    memset(&c, 0, sizeof(c));
    assert_int_equal(ferry_px_pool_attach_to(pool, &c, &fake_ops, f, NUNITS, &w), FERRY_OK);
    wait_asleep(&c);
    {
        ferry_px_pool_stats_t st = stats(&c, 0);

        timer0 = atomic_load(&st.woken_timer);
    }
    set_ns = ferry_px_now_ns();
    atomic_store(&f->due_ns[3], set_ns + 50000000ULL);
    /* The thread learns of the timer when it next serves the unit: one kick. */
    ferry_px_pool_kick(&c, 0);
    for (tries = 0; tries < 3000 && atomic_load(&f->fired_ns[3]) == 0; tries++)
        sleep_ms(1);
    fired = atomic_load(&f->fired_ns[3]);
    assert_true(fired != 0);
    assert_true(fired - set_ns >= 50000000ULL);
    assert_true(fired - set_ns < 900000000ULL); /* Well before the 1 s safety sweep. */
    {
        ferry_px_pool_stats_t st = stats(&c, 0);

        assert_true(atomic_load(&st.woken_timer) >= timer0 + 1);
    }
    ferry_px_pool_detach(&c);
    ferry_px_pool_destroy(pool);
    fake_free(f);
}

/*
 * Work that no kick and no fd announced (a lost wake-up) is found by the
 * safety timeout's sweep, and counted: the figure a test reads to prove no
 * wake-up was lost. Kicked work is not counted.
 */
static void test_safety_sweep_counts_lost_wakeup(void **state)
{
    ferry_px_pool_want_t w = want_of(1, 1);
    struct ferry_px_pool *pool = ferry_px_pool_create(1, &w);
    ferry_px_pool_client_t c;
    fake_t *f = fake_new(0);
    uint64_t calls;
    int tries;

    (void)state;
    assert_non_null(pool);
    memset(&c, 0, sizeof(c));
    assert_int_equal(ferry_px_pool_attach_to(pool, &c, &fake_ops, f, NUNITS, &w), FERRY_OK);
    wait_asleep(&c);
    calls = atomic_load(&f->calls[1]);
    atomic_store(&f->pending[2], 1);
    ferry_px_pool_kick(&c, 0); /* Announced (the one slot): served at once, not a rescue. */
    for (tries = 0; tries < 3000 && atomic_load(&f->pending[2]); tries++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&f->pending[2]), 0);
    wait_asleep(&c);
    atomic_store(&f->pending[1], 1); /* No kick: only the safety sweep finds it. */
    for (tries = 0; tries < 3000 && atomic_load(&f->pending[1]); tries++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&f->pending[1]), 0);
    assert_true(atomic_load(&f->calls[1]) > calls);
    for (tries = 0; tries < 1000 && rescues_of(&c, 0) == 0; tries++)
        sleep_ms(1); /* Counted just after the turn that took it. */
    {
        ferry_px_pool_stats_t st = stats(&c, 0);

        assert_int_equal(atomic_load(&st.rescues), 1);
        assert_true(atomic_load(&st.full_sweeps) >= 1);
    }
    ferry_px_pool_detach(&c);
    ferry_px_pool_destroy(pool);
    fake_free(f);
}

/*
 * Detach while the thread is inside the client's progress (busy units that
 * always report work): after detach returns no call comes, and the client's
 * memory can go (ASan/TSan would see a late touch).
 */
static void test_detach_while_busy(void **state)
{
    ferry_px_pool_want_t w = want_of(2, 2);
    struct ferry_px_pool *pool = ferry_px_pool_create(2, &w);
    ferry_px_pool_client_t *c = calloc(1, sizeof(*c));
    fake_t *f = fake_new(1), *g = fake_new(0);
    ferry_px_pool_client_t other;
    uint64_t calls;
    int i, tries;

    (void)state;
    assert_non_null(pool);
    assert_non_null(c);
    memset(&other, 0, sizeof(other));
    /* Another client on the same threads keeps them turning after the detach. */
    assert_int_equal(ferry_px_pool_attach_to(pool, &other, &fake_ops, g, NUNITS, &w), FERRY_OK);
    assert_int_equal(ferry_px_pool_attach_to(pool, c, &fake_ops, f, NUNITS, &w), FERRY_OK);
    for (i = 0; i < NUNITS; i++) {
        atomic_store(&f->busy[i], 1);
        atomic_store(&g->busy[i], i == 0);
    }
    ferry_px_pool_kick_all(c);
    ferry_px_pool_kick_all(&other);
    for (tries = 0; tries < 5000 && atomic_load(&f->calls[0]) < 5; tries++)
        sleep_ms(1);
    assert_true(atomic_load(&f->calls[0]) >= 5);
    ferry_px_pool_detach(c);
    atomic_store(&f->detached, 1);
    calls = atomic_load(&f->calls[0]) + atomic_load(&f->calls[1]) + atomic_load(&f->calls[2]) +
            atomic_load(&f->calls[3]);
    /* Its fds stay open and readable: the thread must have dropped them from its epoll set. */
    {
        uint64_t one = 1;

        for (i = 0; i < NUNITS; i++)
            assert_int_equal(write(f->fd[i], &one, sizeof(one)), (ssize_t)sizeof(one));
    }
    sleep_ms(100);
    assert_int_equal(atomic_load(&f->late_calls), 0);
    assert_int_equal(atomic_load(&f->calls[0]) + atomic_load(&f->calls[1]) +
                         atomic_load(&f->calls[2]) + atomic_load(&f->calls[3]), calls);
    assert_true(atomic_load(&g->calls[0]) > 5); /* The other client was served all along. */
    free(c);
    fake_free(f);
    ferry_px_pool_detach(&other);
    ferry_px_pool_destroy(pool);
    fake_free(g);
}

/*
 * One thread, client A's units always busy: a kick of client B still gets
 * B's unit served within a few of A's turns (one progress per unit per turn).
 */
static void test_busy_client_does_not_starve(void **state)
{
    ferry_px_pool_want_t w = want_of(1, 1);
    struct ferry_px_pool *pool = ferry_px_pool_create(1, &w);
    ferry_px_pool_client_t a, b;
    fake_t *fa = fake_new(0), *fb = fake_new(0);
    int i, k, tries;
    double worst = 0;

    (void)state;
    assert_non_null(pool);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    assert_int_equal(ferry_px_pool_attach_to(pool, &a, &fake_ops, fa, NUNITS, &w), FERRY_OK);
    assert_int_equal(ferry_px_pool_attach_to(pool, &b, &fake_ops, fb, NUNITS, &w), FERRY_OK);
    for (i = 0; i < NUNITS; i++)
        atomic_store(&fa->busy[i], 1);
    ferry_px_pool_kick_all(&a);
    for (k = 0; k < 20; k++) {
        uint64_t before = atomic_load(&fb->calls[0]), t0 = ferry_px_now_ns(), t1;

        ferry_px_pool_kick(&b, 0);
        for (tries = 0; tries < 5000 && atomic_load(&fb->calls[0]) == before; tries++)
            sleep_ms(1);
        t1 = ferry_px_now_ns();
        assert_true(atomic_load(&fb->calls[0]) > before);
        if ((double)(t1 - t0) / 1e6 > worst)
            worst = (double)(t1 - t0) / 1e6;
    }
    /* A turn over A's 4 busy units is 4 x 2 ms: B waits about one turn, not A's whole stream. */
    print_message("  B served within %.1f ms of each kick at worst, A's units busy all along\n",
                  worst);
    assert_true(worst < 500.0);
    for (i = 0; i < NUNITS; i++)
        atomic_store(&fa->busy[i], 0);
    ferry_px_pool_detach(&a);
    ferry_px_pool_detach(&b);
    ferry_px_pool_destroy(pool);
    fake_free(fa);
    fake_free(fb);
}

/* The shared pool: the first client sizes it, later ones share it, the last detach stops it. */
static void test_shared_pool_fixed_size(void **state)
{
    ferry_px_pool_want_t w2 = want_of(1, 2), w8 = want_of(4, 8);
    ferry_px_pool_client_t c[3];
    fake_t *f = fake_new(0);
    int i;

    (void)state;
    memset(c, 0, sizeof(c));
    assert_int_equal(ferry_px_pool_size(), 0);
    assert_int_equal(ferry_px_pool_attach(&c[0], &fake_ops, f, NUNITS, &w2), FERRY_OK);
    assert_int_equal(ferry_px_pool_size(), 2);
    assert_int_equal(ferry_px_pool_attach(&c[1], &fake_ops, f, NUNITS, &w2), FERRY_OK);
    /* Rotating first thread: the second client of one thread each lands on the other. */
    assert_int_not_equal(thread_index(&c[0], 0), thread_index(&c[1], 0));
    assert_int_equal(ferry_px_pool_attach(&c[2], &fake_ops, f, NUNITS, &w8), FERRY_OK);
    assert_int_equal(ferry_px_pool_size(), 2); /* Asking for 8 later gets the 2 there are. */
    assert_int_equal(c[2].nthreads, 2);
    for (i = 0; i < 3; i++)
        ferry_px_pool_detach(&c[i]);
    assert_int_equal(ferry_px_pool_size(), 0);
    fake_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kick_wakes_owner_only),
        cmocka_unit_test(test_fd_wakes_with_events),
        cmocka_unit_test(test_timer_fires),
        cmocka_unit_test(test_safety_sweep_counts_lost_wakeup),
        cmocka_unit_test(test_detach_while_busy),
        cmocka_unit_test(test_busy_client_does_not_starve),
        cmocka_unit_test(test_shared_pool_fixed_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
