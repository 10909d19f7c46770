/*
 * ncclNetPlugin_v11: the native ABI of NCCL 2.28-2.29. Per-communicator
 * init/finalize map one-to-one onto ferry_api_init/finalize.
 */
#include "nccl/net_attr.h"
#include "nccl/profiler.h"
#include "nccl/props.h"

FERRY_NCCL_DEFINE_SET_NET_ATTR(ferry_nccl_v11_set_net_attr, ncclNetAttr_v11_t)

/* Defined below; init sets its setNetAttr. */
FERRY_NCCL_EXPORT extern ncclNet_v11_t ncclNetPlugin_v11;

static ncclResult_t ferry_nccl_v11_init(void **ctx_p, uint64_t comm_id,
                                        ncclNetCommConfig_v11_t *config,
                                        ncclDebugLogger_t log_fn,
                                        ncclProfilerCallback_t prof_fn)
{
    /* config is on NCCL's stack: the value is copied, the pointer not kept. */
    ncclResult_t res = ferry_nccl_ctx_init(ctx_p, comm_id, FERRY_NCCL_CONFIG_CLASS(config),
                                           log_fn);

    /* After init: its INFO line goes through NCCL's logger. */
    if (res == ncclSuccess) {
        ferry_nccl_prof_init(prof_fn);
        FERRY_NCCL_PUBLISH_SET_NET_ATTR(ncclNetPlugin_v11.setNetAttr, ferry_nccl_v11_set_net_attr);
    }
    return res;
}

FERRY_NCCL_DEFINE_GET_PROPERTIES(ferry_nccl_v11_get_properties, ncclNetProperties_v11_t,
                                 FERRY_NCCL_PROPS_FILL_V11)

FERRY_NCCL_DEFINE_MAKE_VDEVICE(ferry_nccl_v11_make_vdevice, ncclNetVDeviceProps_v11_t)

/*
 * makeVDevice merges ports into one device (the ib backend; the socket
 * backend refuses, and NCCL keeps its devices apart). setNetAttr keeps
 * NCCL's connection hints on the context (nccl/net_attr.h); the socket
 * backend sizes a connection's streams from them with NCCL_FERRY_NET_HINTS=1.
 */
FERRY_NCCL_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    .name          = FERRY_NCCL_NAME,
    .init          = ferry_nccl_v11_init,
    .getProperties = ferry_nccl_v11_get_properties,
    FERRY_NCCL_COMMON_MEMBERS,
    FERRY_NCCL_PHANDLE_MEMBERS,
    FERRY_NCCL_CTX_MEMBERS,
    .makeVDevice   = ferry_nccl_v11_make_vdevice,
    .setNetAttr    = NULL, /* Set by init where the backend uses the hints. */
};
