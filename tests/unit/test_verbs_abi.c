/*
 * ferry's declarations of the verbs and rdma_cm ABI (include/ferry/
 * verbs_abi.h, rdma_cm_abi.h) against rdma-core's headers: every struct
 * size and alignment, every field's offset and size and every constant
 * listed in verbs_abi_list.h must be the same in both. Each mismatch is
 * printed with both numbers; the test fails if there is any. Built only
 * where rdma-core's headers exist (the build needs them for verbs_abi_sys.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "verbs_abi_table.h"

static void names_what(const struct verbs_abi_entry *e, char *buf, size_t len)
{
    if (strncmp(e->what, "size ", 5) == 0)
        snprintf(buf, len, "sizeof %lld, alignment %lld", e->a, e->b);
    else if (strncmp(e->what, "field ", 6) == 0)
        snprintf(buf, len, "offset %lld, size %lld", e->a, e->b);
    else
        snprintf(buf, len, "value %lld", e->a);
}

static void test_tables_match(void **state)
{
    size_t i, mismatches = 0, fields = 0, sizes = 0, consts = 0;

    assert_int_equal(verbs_abi_ferry_count, verbs_abi_sys_count);
    for (i = 0; i < verbs_abi_sys_count; i++) {
        const struct verbs_abi_entry *sys = &verbs_abi_sys[i], *ours = &verbs_abi_ferry[i];
        char want[64], got[64];

        assert_string_equal(ours->what, sys->what);
        fields += strncmp(sys->what, "field ", 6) == 0;
        sizes += strncmp(sys->what, "size ", 5) == 0;
        consts += strncmp(sys->what, "const ", 6) == 0;
        if (sys->a == ours->a && sys->b == ours->b)
            continue;
        names_what(sys, want, sizeof(want));
        names_what(ours, got, sizeof(got));
        printf("MISMATCH %s: rdma-core %s; ferry %s\n", sys->what, want, got);
        mismatches++;
    }
    printf("verbs ABI: %zu structs, %zu fields, %zu constants checked against rdma-core's "
           "headers; %zu mismatches\n",
           sizes, fields, consts, mismatches);
    assert_int_equal(mismatches, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
