/*
 * The libibverbs ABI that ferry's ib backend (src/ib) and its emulator
 * (tests/fakeibv) use, declared here so that neither needs rdma-core's
 * development headers to build: a GPU node image often lacks
 * libibverbs-dev, and the library itself is dlopened at run time anyway.
 *
 * What is here is rdma-core's public, stable user-space ABI (layouts,
 * constant values, the entry points' signatures), written out for exactly
 * what ferry and fakeibv touch and nothing more. Structs are complete where
 * one of them reads, writes or embeds the struct; others stay incomplete.
 * Function-pointer slots that neither calls nor fills are declared as
 * untyped placeholders: they hold the layout, not an API.
 *
 * Every struct field and constant below is listed in
 * tests/unit/verbs_abi_list.h and, on a host that has the real headers,
 * unit_test_verbs_abi compares offsets, sizes and values against them.
 * Anything added here goes into that list too.
 */
#ifndef FERRY_VERBS_ABI_H
#define FERRY_VERBS_ABI_H

#include <errno.h>
#include <linux/types.h> /* __be16/__be32/__be64: the kernel's uapi, part of libc's headers. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_ah;
struct ibv_dm;
struct ibv_srq;
struct ibv_srq_attr;
struct ibv_srq_init_attr;
struct ibv_wq;
struct ibv_mw;
struct ibv_xrcd;
struct ibv_rwq_ind_table;
struct ibv_wc_tm_info;
struct _compat_ibv_port_attr; /* ibv_port_attr as it was before port_cap_flags2. */

#include "ferry/verbs_abi/device.h"  /* GIDs, devices, ports */
#include "ferry/verbs_abi/queue.h"   /* events, completions, MRs, AHs, QPs, WRs, CQs */
#include "ferry/verbs_abi/context.h" /* contexts, entry points, inline verbs */

#ifdef __cplusplus
}
#endif

#endif /* FERRY_VERBS_ABI_H */
