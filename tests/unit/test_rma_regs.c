/*
 * core/rma_regs.c: the per-peer region table of an RMA group. Chunks are
 * made only for the numbers handed out (a peer of a group that registered
 * three regions holds one chunk, not room for 1,024); entries are zeroed,
 * keep what was written across later chunks, and are absent (NULL) where no
 * chunk was made or past FERRY_RMA_MAX_REGS; free empties the table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/rma_regs.h"

typedef struct entry {
    uint64_t addr, size;
    uint32_t key;
} entry_t;

static int chunks_made(const ferry_rma_regs_t *t)
{
    int n = 0;

    for (size_t c = 0; c < sizeof(t->chunk) / sizeof(t->chunk[0]); c++)
        n += t->chunk[c] != NULL;
    return n;
}

static void test_chunks_follow_the_numbers(void **state)
{
    ferry_rma_regs_t t;
    entry_t *e;
    uint32_t i;

    (void)state;
    memset(&t, 0, sizeof(t));
    assert_null(ferry_rma_regs_find(&t, 0, sizeof(entry_t)));
    for (i = 0; i < 3; i++) {
        e = ferry_rma_regs_slot(&t, i, sizeof(entry_t));
        assert_non_null(e);
        assert_int_equal(e->addr | e->size | e->key, 0);
        e->addr = 0x1000 + i;
        e->size = 100 + i;
        e->key = 7 * i;
    }
    assert_int_equal(chunks_made(&t), 1);
    /* Past the first chunk: one more, the earlier entries kept. */
    e = ferry_rma_regs_slot(&t, FERRY_RMA_REGS_CHUNK, sizeof(entry_t));
    assert_non_null(e);
    e->size = 4242;
    assert_int_equal(chunks_made(&t), 2);
    for (i = 0; i < 3; i++) {
        const entry_t *f = ferry_rma_regs_find(&t, i, sizeof(entry_t));

        assert_non_null(f);
        assert_int_equal(f->addr, 0x1000 + i);
        assert_int_equal(f->size, 100 + i);
        assert_int_equal(f->key, 7 * i);
    }
    assert_int_equal(((const entry_t *)ferry_rma_regs_find(&t, FERRY_RMA_REGS_CHUNK,
                                                           sizeof(entry_t)))->size, 4242);
    /* A number in a chunk never made: absent. */
    assert_null(ferry_rma_regs_find(&t, 5 * FERRY_RMA_REGS_CHUNK, sizeof(entry_t)));
    /* The last number exists; one past it does not, and makes nothing. */
    assert_non_null(ferry_rma_regs_slot(&t, FERRY_RMA_MAX_REGS - 1, sizeof(entry_t)));
    assert_null(ferry_rma_regs_slot(&t, FERRY_RMA_MAX_REGS, sizeof(entry_t)));
    assert_null(ferry_rma_regs_find(&t, FERRY_RMA_MAX_REGS, sizeof(entry_t)));
    assert_null(ferry_rma_regs_find(&t, UINT32_MAX, sizeof(entry_t)));
    assert_int_equal(chunks_made(&t), 3);
    ferry_rma_regs_free(&t);
    assert_int_equal(chunks_made(&t), 0);
    assert_null(ferry_rma_regs_find(&t, 0, sizeof(entry_t)));
}

/* A socket backend's table holds sizes only: the same table, 8-byte entries. */
static void test_sizes_only(void **state)
{
    ferry_rma_regs_t t;
    uint32_t i;

    (void)state;
    memset(&t, 0, sizeof(t));
    for (i = 0; i < FERRY_RMA_MAX_REGS; i++) {
        uint64_t *s = ferry_rma_regs_slot(&t, i, sizeof(uint64_t));

        assert_non_null(s);
        *s = (uint64_t)i * 3 + 1;
    }
    for (i = 0; i < FERRY_RMA_MAX_REGS; i++)
        assert_int_equal(*(const uint64_t *)ferry_rma_regs_find(&t, i, sizeof(uint64_t)),
                         (uint64_t)i * 3 + 1);
    assert_int_equal(chunks_made(&t), FERRY_RMA_MAX_REGS / FERRY_RMA_REGS_CHUNK);
    ferry_rma_regs_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_follow_the_numbers),
        cmocka_unit_test(test_sizes_only),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
