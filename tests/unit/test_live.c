/* The socket backend's live-object list (sock_live.c): add, look up, take once. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/live.h"

#define MANY 5000

/* Addresses are only compared, never dereferenced: slots of one array stand in for objects. */
static char objs[MANY][48];

static void test_take_once(void **state)
{
    assert_int_equal(ferry_live_count(), 0);
    assert_int_equal(ferry_live_add(objs[0], FERRY_LIVE_SEND), FERRY_OK);
    assert_true(ferry_live_has(objs[0], FERRY_LIVE_SEND));
    assert_int_equal(ferry_live_take(objs[0], FERRY_LIVE_SEND), 1);
    /* The second close of the same pointer. */
    assert_int_equal(ferry_live_take(objs[0], FERRY_LIVE_SEND), 0);
    assert_false(ferry_live_has(objs[0], FERRY_LIVE_SEND));
    assert_int_equal(ferry_live_count(), 0);
}

/* A live object of one kind does not pass for another, and is not taken by the wrong close. */
static void test_kinds_apart(void **state)
{
    assert_int_equal(ferry_live_add(objs[1], FERRY_LIVE_RECV), FERRY_OK);
    assert_int_equal(ferry_live_add(objs[2], FERRY_LIVE_MR), FERRY_OK);
    assert_false(ferry_live_has(objs[1], FERRY_LIVE_SEND));
    assert_int_equal(ferry_live_take(objs[1], FERRY_LIVE_SEND), 0);
    assert_int_equal(ferry_live_take(objs[2], FERRY_LIVE_LISTEN), 0);
    assert_true(ferry_live_has(objs[1], FERRY_LIVE_RECV));
    assert_true(ferry_live_has(objs[2], FERRY_LIVE_MR));
    assert_false(ferry_live_has(NULL, FERRY_LIVE_MR));
    assert_false(ferry_live_has(objs[3], FERRY_LIVE_MR));
    assert_int_equal(ferry_live_take(objs[1], FERRY_LIVE_RECV), 1);
    assert_int_equal(ferry_live_take(objs[2], FERRY_LIVE_MR), 1);
    assert_int_equal(ferry_live_count(), 0);
}

/* Thousands of objects (the table grows), taken in a scrambled order: each exactly once. */
static void test_many_scrambled(void **state)
{
    static int order[MANY];
    int i;

    for (i = 0; i < MANY; i++) {
        assert_int_equal(ferry_live_add(objs[i], (ferry_live_kind_t)(1 + i % 4)),
                         FERRY_OK);
        order[i] = i;
    }
    assert_int_equal(ferry_live_count(), MANY);
    srand(99);
    for (i = MANY - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];

        order[i] = order[j];
        order[j] = t;
    }
    for (i = 0; i < MANY; i++) {
        int k = order[i], m;

        assert_int_equal(ferry_live_take(objs[k], (ferry_live_kind_t)(1 + k % 4)), 1);
        assert_int_equal(ferry_live_take(objs[k], (ferry_live_kind_t)(1 + k % 4)), 0);
        /* Every 500 takes: all the others still there (the erase kept probe runs intact). */
        if (i % 500 == 0)
            for (m = i + 1; m < MANY; m++)
                assert_true(ferry_live_has(objs[order[m]],
                                                (ferry_live_kind_t)(1 + order[m] % 4)));
    }
    assert_int_equal(ferry_live_count(), 0);
}

/* Racing closes of the same objects: exactly one wins each. */
typedef struct racer {
    int won;
} racer_t;

static void *race_take(void *arg)
{
    racer_t *r = arg;
    int i;

    for (i = 0; i < 1000; i++)
        r->won += ferry_live_take(objs[i], FERRY_LIVE_SEND);
    return NULL;
}

static void test_racing_takes(void **state)
{
    racer_t r[4];
    pthread_t t[4];
    int i, total = 0;

    for (i = 0; i < 1000; i++)
        assert_int_equal(ferry_live_add(objs[i], FERRY_LIVE_SEND), FERRY_OK);
    memset(r, 0, sizeof(r));
    for (i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race_take, &r[i]), 0);
    for (i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        total += r[i].won;
    }
    assert_int_equal(total, 1000);
    assert_int_equal(ferry_live_count(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_once),
        cmocka_unit_test(test_kinds_apart),
        cmocka_unit_test(test_many_scrambled),
        cmocka_unit_test(test_racing_takes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
