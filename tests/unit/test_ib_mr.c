/* The per-HCA registration cache over fakeibv: sharing, access, references, errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/config.h"
#include "ib/ib.h"
#include "test_ib_util.h"

#define FAKE_FAULT_REG_MR 1 /* fakeibv.h */

#define LW IBV_ACCESS_LOCAL_WRITE
#define RW IBV_ACCESS_REMOTE_WRITE
#define RR IBV_ACCESS_REMOTE_READ

static ferry_ib_hca_t *hca;
static char *buf; /* 8 pages, page-aligned. */
static size_t page;

static int setup(void **state)
{
    ferry_config_t cfg;

    (void)state;
    unsetenv("NCCL_IB_PCI_RELAXED_ORDERING");
    test_ib_log_reset();
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(ferry_ib_init(&cfg), FERRY_OK);
    hca = &ferry_ib_state.hcas[0];
    page = (size_t)sysconf(_SC_PAGESIZE);
    buf = aligned_alloc(page, 8 * page);
    assert_non_null(buf);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(hca->nmrs, 0); /* Every test gives back what it took. */
    ferry_ib_fini();
    free(buf);
    return 0;
}

static struct ibv_mr *get(void *addr, size_t size, int access)
{
    struct ibv_mr *mr = NULL;
    char err[512];

    if (ferry_ib_mr_get(hca, addr, size, access, 0, &mr, err, sizeof(err)) != FERRY_OK)
        fail_msg("%s", err);
    return mr;
}

static ferry_ib_mr_entry_t *entry_of(struct ibv_mr *mr)
{
    int i;

    for (i = 0; i < hca->nmrs; i++)
        if (hca->mrs[i].mr == mr)
            return &hca->mrs[i];
    return NULL;
}

static void test_ranges_inside_an_entry_share_it(void **state)
{
    struct ibv_mr *a, *b, *c;

    (void)state;
    a = get(buf + 100, 2 * page, LW | RW); /* Spans pages 0..2. */
    assert_int_equal(hca->nmrs, 1);
    assert_true(entry_of(a)->addr == (uintptr_t)buf);
    assert_int_equal(entry_of(a)->len, 3 * page);
    assert_true(a->addr == (void *)buf);
    assert_int_equal(a->length, 3 * page);
    b = get(buf + page, 10, LW | RW);       /* Inside. */
    c = get(buf + 2 * page, page, LW);      /* Inside, with less access. */
    assert_ptr_equal(b, a);
    assert_ptr_equal(c, a);
    assert_int_equal(hca->nmrs, 1);
    assert_int_equal(entry_of(a)->refs, 3);
    ferry_ib_mr_put(hca, b);
    ferry_ib_mr_put(hca, c);
    assert_int_equal(entry_of(a)->refs, 1);
    ferry_ib_mr_put(hca, a);
    assert_int_equal(hca->nmrs, 0);
}

static void test_outside_or_wider_access_registers_anew(void **state)
{
    struct ibv_mr *a, *b, *c, *d;

    (void)state;
    a = get(buf, page, LW);
    b = get(buf, page, LW | RW);       /* More access than a has: its own MR... */
    c = get(buf + page / 2, page, LW); /* ...and so is a range past a's page. */
    d = get(buf, 10, LW | RW);         /* b covers this. */
    assert_ptr_not_equal(a, b);
    assert_ptr_not_equal(a, c);
    assert_ptr_equal(d, b);
    assert_int_equal(hca->nmrs, 3);
    /* Each keeps exactly the access it was asked for. */
    assert_int_equal(entry_of(a)->access, LW);
    assert_int_equal(entry_of(b)->access, LW | RW);
    /* Sorted by address. */
    assert_true(hca->mrs[0].addr <= hca->mrs[1].addr && hca->mrs[1].addr <= hca->mrs[2].addr);
    ferry_ib_mr_put(hca, a);
    ferry_ib_mr_put(hca, b);
    ferry_ib_mr_put(hca, c);
    assert_int_equal(hca->nmrs, 1);
    ferry_ib_mr_put(hca, d);
}

/* The last put removes the entry; the same range then registers afresh. */
static void test_deregistered_at_zero(void **state)
{
    struct ibv_mr *a, *b;

    (void)state;
    a = get(buf, page, LW | RW);
    ferry_ib_mr_put(hca, a);
    assert_int_equal(hca->nmrs, 0);
    b = get(buf, page, LW | RW);
    assert_int_equal(hca->nmrs, 1);
    assert_int_equal(entry_of(b)->refs, 1);
    ferry_ib_mr_put(hca, b);
    /* Once more is a caller bug: a WARN, nothing else. */
    test_ib_log_reset();
    ferry_ib_mr_put(hca, b);
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, "ib fakeib0: deregistration of MR"), 1);
}

static void test_injected_failure_explains(void **state)
{
    test_ib_inject_fn_t inject = test_ib_inject_fn();
    struct ibv_mr *mr = NULL;
    char err[1024], expected[512];

    (void)state;
    assert_non_null(inject);
    assert_int_equal(inject(NULL, FAKE_FAULT_REG_MR, 0, 0, 1, ENOMEM), 0);
    assert_int_equal(ferry_ib_mr_get(hca, buf + 8, 100, LW | RW, 0, &mr, err, sizeof(err)),
                     FERRY_ERR_NO_MEMORY);
    assert_null(mr);
    /* fakeibv has ibv_reg_mr_iova2, so relaxed ordering is on (NCCL_IB_PCI_RELAXED_ORDERING=2). */
    snprintf(expected, sizeof(expected),
             "ib fakeib0: ibv_reg_mr_iova2 of %p (100 bytes; page-rounded 0x%lx, %zu bytes; "
             "LOCAL_WRITE|REMOTE_WRITE|RELAXED_ORDERING) failed: Cannot allocate memory (ENOMEM); "
             "the locked-memory limit (ulimit -l", (void *)(buf + 8), (unsigned long)buf, page);
    if (strncmp(err, expected, strlen(expected)) != 0)
        fail_msg("got '%s'\nwant '%s...'", err, expected);
    assert_int_equal(hca->nmrs, 0);
    /* force_so: plain ibv_reg_mr; EFAULT names an unmapped range. */
    assert_int_equal(inject(NULL, FAKE_FAULT_REG_MR, 0, 0, 1, EFAULT), 0);
    assert_int_equal(ferry_ib_mr_get(hca, buf, page, LW, 1, &mr, err, sizeof(err)),
                     FERRY_ERR_INVALID);
    snprintf(expected, sizeof(expected),
             "ib fakeib0: ibv_reg_mr of %p (%zu bytes; page-rounded 0x%lx, %zu bytes; "
             "LOCAL_WRITE) failed: Bad address (EFAULT); the address range is not mapped in this "
             "process (a freed or wrong buffer)", (void *)buf, page, (unsigned long)buf, page);
    assert_string_equal(err, expected);
    /* The next one works again. */
    mr = get(buf, page, LW);
    ferry_ib_mr_put(hca, mr);
}

static void test_unmapped_memory_fails(void **state)
{
    struct ibv_mr *mr = NULL;
    char err[1024];
    void *hole = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    (void)state;
    assert_true(hole != MAP_FAILED);
    munmap(hole, page);
    /* Whatever fakeibv decides about an unmapped range, the cache must stay consistent. */
    if (ferry_ib_mr_get(hca, hole, page, LW, 0, &mr, err, sizeof(err)) == FERRY_OK)
        ferry_ib_mr_put(hca, mr);
    else
        assert_non_null(strstr(err, "ib fakeib0: ibv_reg_mr"));
}

/* NCCL_NET_MR_FLAG_FORCE_SO: never an MR registered with relaxed ordering. */
static void test_force_so_gets_a_strict_mr(void **state)
{
    struct ibv_mr *relaxed, *strict, *again;
    char err[512];

    (void)state;
    assert_true(hca->relaxed_ordering); /* fakeibv has ibv_reg_mr_iova2: auto turns it on. */
    relaxed = get(buf, 2 * page, LW | RW);
    assert_true(entry_of(relaxed)->relaxed);
    assert_int_equal(ferry_ib_mr_get(hca, buf, page, LW | RW, 1, &strict, err, sizeof(err)),
                     FERRY_OK);
    assert_ptr_not_equal(strict, relaxed);
    assert_false(entry_of(strict)->relaxed);
    /* A second FORCE_SO request inside it shares the strict MR. */
    assert_int_equal(ferry_ib_mr_get(hca, buf, page, LW | RW, 1, &again, err, sizeof(err)),
                     FERRY_OK);
    assert_ptr_equal(again, strict);
    assert_int_equal(entry_of(strict)->refs, 2);
    ferry_ib_mr_put(hca, again);
    ferry_ib_mr_put(hca, strict);
    ferry_ib_mr_put(hca, relaxed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ranges_inside_an_entry_share_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outside_or_wider_access_registers_anew, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_deregistered_at_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_injected_failure_explains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmapped_memory_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_force_so_gets_a_strict_mr, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
