/* Handshake encode/decode: hellos and handles with bad or hostile content. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "socket/sock.h"

static ferry_sock_hello_t good_hello(void)
{
    ferry_sock_hello_t h;

    memset(&h, 0, sizeof(h));
    h.magic = FERRY_SOCK_MAGIC;
    h.version = FERRY_SOCK_WIRE_VERSION;
    h.hdr_size = sizeof(h);
    h.lane = 2;
    h.nlanes = 4;
    h.token = 0x1234567890abcdefULL;
    h.conn_id = 42;
    return h;
}

static void test_good_hello_accepted(void **state)
{
    ferry_sock_hello_t h = good_hello();

    assert_null(ferry_sock_hello_check(&h, 0x1234567890abcdefULL, 4));
}

static void test_bad_hellos_rejected(void **state)
{
    const uint64_t token = 0x1234567890abcdefULL;
    ferry_sock_hello_t h;
    const char *why;

    h = good_hello();
    h.magic ^= 1;
    why = ferry_sock_hello_check(&h, token, 4);
    assert_non_null(why);
    assert_non_null(strstr(why, "magic"));

    h = good_hello();
    h.version = FERRY_SOCK_WIRE_VERSION + 1;
    assert_non_null(strstr(ferry_sock_hello_check(&h, token, 4), "version"));

    h = good_hello();
    h.hdr_size = 64;
    assert_non_null(strstr(ferry_sock_hello_check(&h, token, 4), "version"));

    h = good_hello();
    assert_non_null(strstr(ferry_sock_hello_check(&h, token + 1, 4), "token"));

    h = good_hello();
    h.lane = 4;
    assert_non_null(strstr(ferry_sock_hello_check(&h, token, 4), "lane"));

    h = good_hello();
    assert_non_null(strstr(ferry_sock_hello_check(&h, token, 8), "lane"));
}

/* Random bytes never pass: the magic alone makes a false accept ~2^-64. */
static void test_random_hellos_rejected(void **state)
{
    ferry_sock_hello_t h;
    unsigned i, j;

    srand(7);
    for (i = 0; i < 10000; i++) {
        for (j = 0; j < sizeof(h); j++)
            ((unsigned char *)&h)[j] = (unsigned char)rand();
        assert_non_null(ferry_sock_hello_check(&h, 0x1234567890abcdefULL, 4));
    }
}

/* connect() with a handle that is not ours fails with a usage error, opening nothing. */
static void test_foreign_handle_rejected(void **state)
{
    ferry_sock_handle_t h;
    void *comm = (void *)1;

    memset(&h, 0xab, sizeof(h));
    memset(&h.stage, 0, sizeof(h.stage));
    assert_int_equal(ferry_sock_connect(NULL, 0, &h, -1, &comm), FERRY_ERR_USAGE);
    assert_null(comm);

    memset(&h, 0, sizeof(h));
    h.magic = FERRY_SOCK_MAGIC;
    h.version = FERRY_SOCK_WIRE_VERSION;
    h.family = 2; /* AF_INET */
    h.nlanes = 0;
    assert_int_equal(ferry_sock_connect(NULL, 0, &h, -1, &comm), FERRY_ERR_USAGE);
    h.nlanes = FERRY_SOCK_MAX_LANES + 1;
    assert_int_equal(ferry_sock_connect(NULL, 0, &h, -1, &comm), FERRY_ERR_USAGE);
}

/*
 * A handle whose connect-state reference no connect of this process made is
 * refused, not followed: the old layout's pointer with its cookie, a slot no
 * connect used, slot 0, generation 0.
 */
static void test_stale_stage_rejected(void **state)
{
    static const ferry_stage_ref_t forged[] = {
        { 0xdeadbeefU ^ 99U, 0, 0xdeadbeefULL }, /* The old pointer layout: token ^ ptr, ptr. */
        { 1, 5, 0x1234 }, { 0xffffffffU, 1, 1 }, { 0, 1, 1 }, { 1, 0, 0 },
    };
    ferry_sock_handle_t h;
    void *comm = (void *)1;
    size_t i;

    for (i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
        memset(&h, 0, sizeof(h));
        h.magic = FERRY_SOCK_MAGIC;
        h.version = FERRY_SOCK_WIRE_VERSION;
        h.family = 2;
        h.nlanes = 1;
        h.token = 99;
        h.stage = forged[i];
        assert_int_equal(ferry_sock_connect(NULL, 0, &h, -1, &comm), FERRY_ERR_USAGE);
        assert_null(comm);
    }
}

static void test_wire_sizes(void **state)
{
    assert_int_equal(sizeof(ferry_sock_handle_t), 128);
    assert_int_equal(sizeof(ferry_sock_hello_t), 32);
    assert_int_equal(sizeof(ferry_sock_chunk_hdr_t), 32);
    assert_int_equal(offsetof(ferry_sock_handle_t, token), 40);
    assert_int_equal(offsetof(ferry_sock_handle_t, stage), 48);
    assert_int_not_equal(FERRY_SOCK_CHUNK_CHECK(1, 0), FERRY_SOCK_CHUNK_CHECK(2, 0));
    assert_int_not_equal(FERRY_SOCK_CHUNK_CHECK(1, 5), FERRY_SOCK_CHUNK_CHECK(1, 6));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_hello_accepted),
        cmocka_unit_test(test_bad_hellos_rejected),
        cmocka_unit_test(test_random_hellos_rejected),
        cmocka_unit_test(test_foreign_handle_rejected),
        cmocka_unit_test(test_stale_stage_rejected),
        cmocka_unit_test(test_wire_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
