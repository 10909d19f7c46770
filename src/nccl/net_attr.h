/*
 * setNetAttr for the v11 and v12 tables: the version's struct copied field
 * by field into the core's (core/net_hints.h), whose context keeps the
 * connection hints for the socket backend's connect (NCCL_FERRY_NET_HINTS).
 * NCCL ignores what setNetAttr returns; a struct with fields out of range
 * is still a success (they are ignored with a WARN), a context that is not
 * live is not.
 */
#ifndef FERRY_NCCL_NET_ATTR_H
#define FERRY_NCCL_NET_ATTR_H

#include "core/net_hints.h"
#include "nccl/plugin.h"

#define FERRY_NCCL_NET_ATTR_SIDE(_dst, _src)           \
    do {                                                \
        (_dst).max_peers = (_src).maxConcurrentPeers;   \
        (_dst).min_peers = (_src).minConcurrentPeers;   \
        (_dst).max_flows = (_src).maxFlowsPerPeer;      \
        (_dst).min_flows = (_src).minFlowsPerPeer;      \
    } while (0)

#define FERRY_NCCL_DEFINE_SET_NET_ATTR(_fn, _type)                          \
    static ncclResult_t _fn(void *ctx, _type *net_attr)                      \
    {                                                                        \
        ferry_net_attr_t attr;                                               \
                                                                             \
        if (net_attr == NULL)                                                \
            return ferry_nccl_result(ferry_api_set_net_attr(ctx, NULL));     \
        FERRY_NCCL_NET_ATTR_SIDE(attr.send, net_attr->sendCommAttr);         \
        FERRY_NCCL_NET_ATTR_SIDE(attr.recv, net_attr->recvCommAttr);         \
        attr.op = net_attr->op;                                              \
        attr.algo = net_attr->algo;                                          \
        attr.proto = net_attr->proto;                                        \
        return ferry_nccl_result(ferry_api_set_net_attr(ctx, &attr));        \
    }

/*
 * After a successful init: the table's setNetAttr is _fn where the backend
 * uses the hints, NULL otherwise, so that NCCL builds and sends none where
 * they would change nothing (NCCL reads the member after init: v12 from the
 * table itself, v11 when its shim copies the table at init's return). The
 * answer is the same for every init of a process; the store happens once.
 */
#define FERRY_NCCL_PUBLISH_SET_NET_ATTR(_slot, _fn)                                  \
    do {                                                                             \
        __typeof__(_fn) *_want = ferry_api_takes_net_hints() ? (_fn) : NULL;         \
        if (__atomic_load_n(&(_slot), __ATOMIC_ACQUIRE) != _want)                    \
            __atomic_store_n(&(_slot), _want, __ATOMIC_RELEASE);                     \
    } while (0)

#endif
