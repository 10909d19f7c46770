/*
 * The connect-stage table (core/stage_table.h): a reference is honoured
 * only for the live stage, kind, listener and process it was made for, and
 * every other one is refused with its reason; threads put and drop at once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/stage_table.h"

#define TOKEN 0x1122334455667788ULL

static char why[512];

static void *get(const ferry_stage_ref_t *ref, ferry_stage_kind_t kind, uint64_t token)
{
    why[0] = '\0';
    return ferry_stage_get(ref, kind, token, why, sizeof(why));
}

static void assert_refused(const ferry_stage_ref_t *ref, ferry_stage_kind_t kind, uint64_t token,
                           const char *reason)
{
    assert_null(get(ref, kind, token));
    if (strstr(why, reason) == NULL)
        fail_msg("refused for '%s', expected '%s'", why, reason);
}

static void test_put_get_drop(void **state)
{
    int a, b;
    ferry_stage_ref_t ra, rb, copy, stale, none;

    (void)state;
    memset(&none, 0, sizeof(none));
    assert_true(ferry_stage_ref_none(&none));
    assert_int_equal(ferry_stage_put(&a, FERRY_STAGE_SOCK, TOKEN, &ra), FERRY_OK);
    assert_int_equal(ferry_stage_put(&b, FERRY_STAGE_IB_OOB, TOKEN, &rb), FERRY_OK);
    assert_false(ferry_stage_ref_none(&ra));
    assert_int_not_equal(ra.slot, rb.slot);
    assert_int_equal(ferry_stage_count(), 2);
    assert_ptr_equal(get(&ra, FERRY_STAGE_SOCK, TOKEN), &a);
    assert_ptr_equal(get(&rb, FERRY_STAGE_IB_OOB, TOKEN), &b);

    assert_refused(&ra, FERRY_STAGE_IB_OOB, TOKEN, "is a socket connect, not a ib (oob) one");
    assert_refused(&ra, FERRY_STAGE_SOCK, TOKEN + 1, "goes to another listener");
    copy = ra;
    copy.key ^= 1;
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "its key does not match");
    copy = ra;
    copy.slot = 0;
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "connect slot 0");
    copy = ra;
    copy.slot = 0xffffffffU;
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "has used a slot other than 1..");
    copy = ra;
    copy.gen = 0;
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "generation 0");
    copy = ra;
    copy.gen = 0xfffffff0U;
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "has made only");

    copy = ra;
    ferry_stage_drop(&ra);
    assert_true(ferry_stage_ref_none(&ra));
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "so the handle is stale");
    /* The slot's next stage has another generation: the old reference stays stale. */
    assert_int_equal(ferry_stage_put(&a, FERRY_STAGE_SOCK, TOKEN, &ra), FERRY_OK);
    assert_int_equal(ra.slot, copy.slot);
    assert_int_not_equal(ra.gen, copy.gen);
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "so the handle is stale");
    stale = copy;
    ferry_stage_drop(&stale); /* A stale drop frees nothing, and zeroes the reference. */
    assert_true(ferry_stage_ref_none(&stale));
    assert_int_equal(ferry_stage_count(), 2);
    assert_ptr_equal(get(&ra, FERRY_STAGE_SOCK, TOKEN), &a);
    ferry_stage_drop(&ra);
    ferry_stage_drop(&rb);
    assert_int_equal(ferry_stage_count(), 0);
    /* Emptied (the table is freed): the old references are still stale, not followed. */
    assert_refused(&copy, FERRY_STAGE_SOCK, TOKEN, "so the handle is stale");
}

/* More stages than the first table holds; all found, all dropped. */
static void test_grow(void **state)
{
    enum { N = 200 };
    static int objs[N];
    static ferry_stage_ref_t refs[N];
    int i;

    (void)state;
    for (i = 0; i < N; i++)
        assert_int_equal(ferry_stage_put(&objs[i], FERRY_STAGE_IB_CM, TOKEN + (uint64_t)i,
                                         &refs[i]), FERRY_OK);
    assert_int_equal(ferry_stage_count(), N);
    for (i = 0; i < N; i++)
        assert_ptr_equal(get(&refs[i], FERRY_STAGE_IB_CM, TOKEN + (uint64_t)i), &objs[i]);
    for (i = 0; i < N; i++)
        ferry_stage_drop(&refs[i]);
    assert_int_equal(ferry_stage_count(), 0);
}

/* A forked child inherits the table: the parent's stage is refused there, and its slot reused. */
static void test_fork(void **state)
{
    int a, b, status = -1;
    ferry_stage_ref_t ra;
    pid_t pid;

    (void)state;
    assert_int_equal(ferry_stage_put(&a, FERRY_STAGE_SOCK, TOKEN, &ra), FERRY_OK);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ferry_stage_ref_t rb;
        int ok = get(&ra, FERRY_STAGE_SOCK, TOKEN) == NULL && strstr(why, "not this one's");

        ok = ok && ferry_stage_put(&b, FERRY_STAGE_SOCK, TOKEN, &rb) == FERRY_OK &&
             rb.slot == ra.slot && get(&rb, FERRY_STAGE_SOCK, TOKEN) == &b;
        _exit(ok ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_ptr_equal(get(&ra, FERRY_STAGE_SOCK, TOKEN), &a);
    ferry_stage_drop(&ra);
}

/* Threads put, look up and drop their own stages at once: each finds only its own. */
#define THREADS 8
#define ROUNDS  2000

static void *churn(void *arg)
{
    uintptr_t t = (uintptr_t)arg, bad = 0;
    char local_why[512];
    int i, obj;

    for (i = 0; i < ROUNDS; i++) {
        ferry_stage_ref_t r, stale;

        if (ferry_stage_put(&obj, FERRY_STAGE_SOCK, TOKEN ^ t, &r) != FERRY_OK)
            return (void *)1;
        bad += ferry_stage_get(&r, FERRY_STAGE_SOCK, TOKEN ^ t, local_why,
                               sizeof(local_why)) != &obj;
        stale = r;
        ferry_stage_drop(&r);
        bad += ferry_stage_get(&stale, FERRY_STAGE_SOCK, TOKEN ^ t, local_why,
                               sizeof(local_why)) != NULL;
    }
    return (void *)bad;
}

static void test_threads(void **state)
{
    pthread_t th[THREADS];
    uintptr_t t;
    void *bad;

    (void)state;
    for (t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, churn, (void *)t), 0);
    for (t = 0; t < THREADS; t++) {
        assert_int_equal(pthread_join(th[t], &bad), 0);
        assert_null(bad);
    }
    assert_int_equal(ferry_stage_count(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_drop),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_threads),
    };

    return cmocka_run_group_tests_name("stage_table", tests, NULL, NULL);
}
