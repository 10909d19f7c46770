/*
 * ncclNetPlugin_v12: the native ABI of NCCL 2.30. The members are v11's;
 * only the properties struct differs (8-entry vProps, railId/planeId).
 */
#include "nccl/net_attr.h"
#include "nccl/profiler.h"
#include "nccl/props.h"

FERRY_NCCL_DEFINE_SET_NET_ATTR(ferry_nccl_v12_set_net_attr, ncclNetAttr_v12_t)

/* Defined below; init sets its setNetAttr. */
FERRY_NCCL_EXPORT extern ncclNet_v12_t ncclNetPlugin_v12;

static ncclResult_t ferry_nccl_v12_init(void **ctx_p, uint64_t comm_id,
                                        ncclNetCommConfig_v12_t *config,
                                        ncclDebugLogger_t log_fn,
                                        ncclProfilerCallback_t prof_fn)
{
    /* As in v11: the config copied by value, the profiler callback kept (nccl/profiler.h). */
    ncclResult_t res = ferry_nccl_ctx_init(ctx_p, comm_id, FERRY_NCCL_CONFIG_CLASS(config),
                                           log_fn);

    /* After init: its INFO line goes through NCCL's logger. */
    if (res == ncclSuccess) {
        ferry_nccl_prof_init(prof_fn);
        FERRY_NCCL_PUBLISH_SET_NET_ATTR(ncclNetPlugin_v12.setNetAttr, ferry_nccl_v12_set_net_attr);
    }
    return res;
}

FERRY_NCCL_DEFINE_GET_PROPERTIES(ferry_nccl_v12_get_properties, ncclNetProperties_v12_t,
                                 FERRY_NCCL_PROPS_FILL_V12)

FERRY_NCCL_DEFINE_MAKE_VDEVICE(ferry_nccl_v12_make_vdevice, ncclNetVDeviceProps_v12_t)

/* makeVDevice and setNetAttr as in plugin_v11.c. */
FERRY_NCCL_EXPORT ncclNet_v12_t ncclNetPlugin_v12 = {
    .name          = FERRY_NCCL_NAME,
    .init          = ferry_nccl_v12_init,
    .getProperties = ferry_nccl_v12_get_properties,
    FERRY_NCCL_COMMON_MEMBERS,
    FERRY_NCCL_PHANDLE_MEMBERS,
    FERRY_NCCL_CTX_MEMBERS,
    .makeVDevice   = ferry_nccl_v12_make_vdevice,
    .setNetAttr    = NULL, /* Set by init where the backend uses the hints. */
};
