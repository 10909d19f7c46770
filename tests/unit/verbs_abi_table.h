/*
 * The table that verbs_abi_list.h expands to, one per set of declarations:
 * rdma-core's (verbs_abi_sys.c) and ferry's (verbs_abi_ferry.c).
 */
#ifndef FERRY_TEST_VERBS_ABI_TABLE_H
#define FERRY_TEST_VERBS_ABI_TABLE_H

#include <stddef.h>

struct verbs_abi_entry {
    const char *what; /* "size struct ibv_qp", "field struct ibv_qp.qp_num", "const IBV_QPS_RTS" */
    long long a;      /* size: sizeof; field: offsetof; const: the value */
    long long b;      /* size: _Alignof; field: sizeof the field; const: 0 */
};

#define VERBS_ABI_SIZE(t) {"size " #t, (long long)sizeof(t), (long long)_Alignof(t)},
#define VERBS_ABI_FIELD(t, f) \
    {"field " #t "." #f, (long long)offsetof(t, f), (long long)sizeof(((t *)0)->f)},
#define VERBS_ABI_CONST(c) {"const " #c, (long long)(c), 0},

extern const struct verbs_abi_entry verbs_abi_sys[];
extern const size_t verbs_abi_sys_count;
extern const struct verbs_abi_entry verbs_abi_ferry[];
extern const size_t verbs_abi_ferry_count;

#endif
