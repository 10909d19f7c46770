/*
 * Binders for ncclNet v11 and v12: per-communicator ctx from init, handed
 * back to listen/connect/finalize. The two versions differ only in type
 * names and the properties layout, so one macro defines both sets of shims;
 * every call still goes through that version's own struct type.
 */
#include <dlfcn.h>
#include <string.h>

#include "abi_net.h"

/* Any value: ferry only uses the comm id for logs. */
#define ABI_COMM_ID 0xfe77ULL

#define ABI_DEFINE_CTX_VERSION(_v)                                                         \
    static const char *abi_v##_v##_bad_member(const abi_net_t *net)                        \
    {                                                                                      \
        const ncclNet_v##_v##_t *t = net->table;                                           \
        const char *bad = ABI_BAD_MEMBER_COMMON(t);                                        \
        /* NCCL calls finalize unconditionally from v11 on. */                             \
        return bad != NULL ? bad : t->finalize == NULL ? "finalize" : NULL;                \
    }                                                                                      \
                                                                                           \
    static ncclResult_t abi_v##_v##_init(abi_net_t *net, ncclDebugLogger_t log)            \
    {                                                                                      \
        /* Like NCCL: a config on the caller's stack, gone after the call. */              \
        ncclNetCommConfig_v##_v##_t config = { .trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF }; \
        const ncclNet_v##_v##_t *t = net->table;                                           \
        return t->init(&net->ctx, ABI_COMM_ID, &config, log, NULL);                        \
    }                                                                                      \
                                                                                           \
    static ncclResult_t abi_v##_v##_listen(abi_net_t *net, int dev, void *handle,          \
                                           void **listen_comm)                             \
    {                                                                                      \
        const ncclNet_v##_v##_t *t = net->table;                                           \
        return t->listen(net->ctx, dev, handle, listen_comm);                              \
    }                                                                                      \
                                                                                           \
    static ncclResult_t abi_v##_v##_connect(abi_net_t *net, int dev, void *handle,         \
                                            void **send_comm)                              \
    {                                                                                      \
        ncclNetDeviceHandle_v##_v##_t *dev_handle = NULL; /* What NCCL passes for HOST. */ \
        const ncclNet_v##_v##_t *t = net->table;                                           \
        return t->connect(net->ctx, dev, handle, send_comm, &dev_handle);                  \
    }                                                                                      \
                                                                                           \
    static ncclResult_t abi_v##_v##_isend(abi_net_t *net, void *comm, void *data,          \
                                          size_t size, int tag, void *mhandle,             \
                                          void **request)                                  \
    {                                                                                      \
        const ncclNet_v##_v##_t *t = net->table;                                           \
        return t->isend(comm, data, size, tag, mhandle, NULL, request);                    \
    }                                                                                      \
                                                                                           \
    static ncclResult_t abi_v##_v##_irecv(abi_net_t *net, void *comm, void *data,          \
                                          size_t size, int tag, void *mhandle,             \
                                          void **request)                                  \
    {                                                                                      \
        const ncclNet_v##_v##_t *t = net->table;                                           \
        return t->irecv(comm, 1, &data, &size, &tag, &mhandle, NULL, request);             \
    }                                                                                      \
                                                                                           \
    static ncclResult_t abi_v##_v##_finalize(abi_net_t *net)                               \
    {                                                                                      \
        const ncclNet_v##_v##_t *t = net->table;                                           \
        return t->finalize(net->ctx);                                                      \
    }                                                                                      \
                                                                                           \
    int abi_bind_v##_v(abi_net_t *net, void *lib)                                          \
    {                                                                                      \
        ABI_BIND(net, lib, _v);                                                            \
        net->finalize  = abi_v##_v##_finalize;                                             \
        net->recv_hint = 1;                                                                \
        return 0;                                                                          \
    }

/* Properties are the one place v11 and v12 differ in layout. */
static ncclResult_t abi_v11_get_props(abi_net_t *net, int dev, abi_props_t *out)
{
    ncclNetProperties_v11_t p;
    ncclResult_t res = ((const ncclNet_v11_t *)net->table)->getProperties(dev, &p);

    if (res == ncclSuccess) {
        ABI_PROPS_V9(out, &p);
        out->has_mmr           = 1;
        out->max_multi_request = p.maxMultiRequestSize;
    }
    return res;
}

static ncclResult_t abi_v12_get_props(abi_net_t *net, int dev, abi_props_t *out)
{
    ncclNetProperties_v12_t p;
    ncclResult_t res = ((const ncclNet_v12_t *)net->table)->getProperties(dev, &p);

    if (res == ncclSuccess) {
        ABI_PROPS_V9(out, &p);
        out->has_mmr           = 1;
        out->max_multi_request = p.maxMultiRequestSize;
        out->has_rail          = 1;
        out->rail_id           = p.railId;
        out->plane_id          = p.planeId;
    }
    return res;
}

ABI_DEFINE_CTX_VERSION(11)
ABI_DEFINE_CTX_VERSION(12)
