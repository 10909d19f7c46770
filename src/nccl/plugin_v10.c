/*
 * ncclNetPlugin_v10 (NCCL 2.26-2.27): the process-wide context stands in
 * for v11's per-comm ctx, and the traffic class arrives with each connect.
 */
#include "nccl/profiler.h"
#include "nccl/props.h"

static ncclResult_t ferry_nccl_v10_init(ncclDebugLogger_t log_fn, ncclProfilerCallback_t prof_fn)
{
    ncclResult_t res = ferry_nccl_legacy_init(log_fn);

    /* After init: its INFO line goes through NCCL's logger. */
    if (res == ncclSuccess)
        ferry_nccl_prof_init(prof_fn);
    return res;
}

FERRY_NCCL_DEFINE_GET_PROPERTIES(ferry_nccl_v10_get_properties, ncclNetProperties_v10_t,
                                 FERRY_NCCL_PROPS_FILL_V9)

static ncclResult_t ferry_nccl_v10_connect(int dev, ncclNetCommConfig_v10_t *config,
                                           void *handle, void **send_comm_p,
                                           ncclNetDeviceHandle_v10_t **send_dev_comm_p)
{
    (void)send_dev_comm_p; /* HOST plugin: never touched. */
    return ferry_nccl_result(ferry_api_connect(ferry_nccl_legacy_ctx(), dev, handle,
                                               FERRY_NCCL_CONFIG_CLASS(config), send_comm_p));
}

FERRY_NCCL_DEFINE_MAKE_VDEVICE(ferry_nccl_v10_make_vdevice, ncclNetVDeviceProps_v10_t)

/* No finalize or setNetAttr in v10; makeVDevice as in plugin_v11.c. */
FERRY_NCCL_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name          = FERRY_NCCL_NAME,
    .init          = ferry_nccl_v10_init,
    .getProperties = ferry_nccl_v10_get_properties,
    .listen        = ferry_nccl_legacy_listen,
    .connect       = ferry_nccl_v10_connect,
    FERRY_NCCL_COMMON_MEMBERS,
    FERRY_NCCL_PHANDLE_MEMBERS,
    .makeVDevice   = ferry_nccl_v10_make_vdevice,
};
