/*
 * The out-of-band sockets' watch over socketpairs: a comm reads its socket
 * only when the process' epoll set saw something (data, EOF) on it, one
 * epoll_wait per period serves every socket, rearming reports what is left
 * unread, a removed socket's slot serves the next one clean, and a socket
 * outside the watch is read every time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "ib/ib_oob_watch.h"

#define NSOCK 256

static int sp[NSOCK][2];
static ferry_ib_oob_watch_t w[NSOCK];
static uint64_t now = 1000000000000ULL;

/* The next period: the first take after it asks the epoll set. */
static uint64_t next_period(void)
{
    now += 2 * FERRY_IB_OOB_WATCH_NS;
    return now;
}

static int setup(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < NSOCK; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp[i]) != 0)
            return -1;
        w[i] = ferry_ib_oob_watch_add(sp[i][0], "test comm");
        if (w[i] == 0)
            return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < NSOCK; i++) {
        ferry_ib_oob_watch_del(w[i], sp[i][0]);
        close(sp[i][0]);
        if (sp[i][1] >= 0)
            close(sp[i][1]);
    }
    return 0;
}

/* Idle sockets: no reads, and one epoll_wait for all of them in a period. */
static void test_idle_sockets_are_not_read(void **state)
{
    uint64_t polls, t = next_period();
    int i, reads = 0;

    (void)state;
    polls = ferry_ib_oob_watch_polls();
    for (i = 0; i < NSOCK; i++)
        reads += ferry_ib_oob_watch_take(w[i], t);
    assert_int_equal(reads, 0);
    assert_int_equal(ferry_ib_oob_watch_polls() - polls, 1);
    /* Within the same period nothing more is asked. */
    for (i = 0; i < NSOCK; i++)
        reads += ferry_ib_oob_watch_take(w[i], t + 1000);
    assert_int_equal(reads, 0);
    assert_int_equal(ferry_ib_oob_watch_polls() - polls, 1);
}

/* Data on one socket marks that one only; once read and rearmed it is quiet again. */
static void test_data_marks_its_socket(void **state)
{
    uint64_t t;
    char b = 'x', in[64];
    int i;

    (void)state;
    assert_int_equal(write(sp[17][1], &b, 1), 1);
    t = next_period();
    for (i = 0; i < NSOCK; i++)
        assert_int_equal(ferry_ib_oob_watch_take(w[i], t), i == 17);
    /* The mark is taken: a second take in the period says nothing. */
    assert_int_equal(ferry_ib_oob_watch_take(w[17], t), 0);
    assert_int_equal(recv(sp[17][0], in, sizeof(in), MSG_DONTWAIT), 1);
    assert_int_equal(in[0], 'x');
    assert_int_equal(ferry_ib_oob_watch_rearm(w[17], sp[17][0]), 0);
    t = next_period();
    assert_int_equal(ferry_ib_oob_watch_take(w[17], t), 0);
}

/* What one read left is reported again after the rearm. */
static void test_rearm_reports_what_is_left(void **state)
{
    char out[100], in[10];
    uint64_t t;

    (void)state;
    memset(out, 'y', sizeof(out));
    assert_int_equal(write(sp[3][1], out, sizeof(out)), (ssize_t)sizeof(out));
    t = next_period();
    assert_int_equal(ferry_ib_oob_watch_take(w[3], t), 1);
    assert_int_equal(recv(sp[3][0], in, sizeof(in), MSG_DONTWAIT), (ssize_t)sizeof(in));
    assert_int_equal(ferry_ib_oob_watch_rearm(w[3], sp[3][0]), 0);
    t = next_period();
    assert_int_equal(ferry_ib_oob_watch_take(w[3], t), 1);
    while (recv(sp[3][0], out, sizeof(out), MSG_DONTWAIT) > 0)
        ;
    assert_int_equal(ferry_ib_oob_watch_rearm(w[3], sp[3][0]), 0);
    t = next_period();
    assert_int_equal(ferry_ib_oob_watch_take(w[3], t), 0);
}

/* The peer's end closed (a dead peer process): EOF marks the socket. */
static void test_eof_marks_its_socket(void **state)
{
    uint64_t t;
    char in[8];
    int i;

    (void)state;
    close(sp[42][1]);
    sp[42][1] = -1;
    t = next_period();
    for (i = 0; i < NSOCK; i++)
        assert_int_equal(ferry_ib_oob_watch_take(w[i], t), i == 42);
    assert_int_equal(recv(sp[42][0], in, sizeof(in), MSG_DONTWAIT), 0);
}

/*
 * A removed socket's slot serves a new one clean (the old one's unread data
 * marks nothing), and what reached the new socket before it was added is
 * reported.
 */
static void test_slot_reuse_is_clean(void **state)
{
    int fresh[2];
    ferry_ib_oob_watch_t nw;
    char b = 'z';
    uint64_t t;

    (void)state;
    /* Socket 5 has unread data when it is removed: it must not mark its successor. */
    assert_int_equal(write(sp[5][1], &b, 1), 1);
    ferry_ib_oob_watch_del(w[5], sp[5][0]);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fresh), 0);
    nw = ferry_ib_oob_watch_add(fresh[0], "test comm");
    assert_int_equal(nw, w[5]);
    t = next_period();
    assert_int_equal(ferry_ib_oob_watch_take(nw, t), 0);
    ferry_ib_oob_watch_del(nw, fresh[0]);
    assert_int_equal(write(fresh[1], &b, 1), 1);
    nw = ferry_ib_oob_watch_add(fresh[0], "test comm");
    assert_int_equal(nw, w[5]);
    t = next_period();
    assert_int_equal(ferry_ib_oob_watch_take(nw, t), 1);
    assert_int_equal(recv(fresh[0], &b, 1, MSG_DONTWAIT), 1);
    assert_int_equal(ferry_ib_oob_watch_rearm(nw, fresh[0]), 0);
    t = next_period();
    assert_int_equal(ferry_ib_oob_watch_take(nw, t), 0);
    /* Swap the fresh pair in, so teardown closes it. */
    close(sp[5][0]);
    close(sp[5][1]);
    sp[5][0] = fresh[0];
    sp[5][1] = fresh[1];
    w[5] = nw;
}

/* Outside the watch: read every time. */
static void test_unwatched_is_always_read(void **state)
{
    (void)state;
    assert_int_equal(ferry_ib_oob_watch_add(-1, "test comm"), 0);
    assert_int_equal(ferry_ib_oob_watch_take(0, now), 1);
    assert_int_equal(ferry_ib_oob_watch_take(0, now), 1);
    assert_int_equal(ferry_ib_oob_watch_rearm(0, 0), 0);
    ferry_ib_oob_watch_del(0, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_sockets_are_not_read),
        cmocka_unit_test(test_data_marks_its_socket),
        cmocka_unit_test(test_rearm_reports_what_is_left),
        cmocka_unit_test(test_eof_marks_its_socket),
        cmocka_unit_test(test_slot_reuse_is_clean),
        cmocka_unit_test(test_unwatched_is_always_read),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
