/*
 * rdmacm mode at init: librdmacm loaded (NCCL_FERRY_RDMACM_LIB or
 * librdmacm.so.1), its device answering (an event channel opens: real
 * librdmacm opens /dev/infiniband/rdma_cm for it), and the device contexts
 * it opened, which the HCAs take instead of opening their own.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_cm.h"
#include "ib/ib_cm_verbs.h"
#include "ib/ib_verbs.h"

static struct ibv_context **ferry_ib_cm_devs; /* rdma_get_devices(); NULL in oob mode. */

ferry_status_t ferry_ib_cm_init(const ferry_ib_config_t *cfg)
{
    struct rdma_event_channel *ch;
    ferry_status_t status;
    char err[512];
    int n = 0;

    status = ferry_rdmacm_load(cfg->rdmacm_lib, err, sizeof(err));
    if (status != FERRY_OK) {
        FERRY_WARN("ib backend: %s", err);
        return status;
    }
    ch = ferry_rdmacm.create_event_channel();
    if (ch == NULL) {
        int e = errno;

        FERRY_WARN("ib backend: NCCL_FERRY_IB_CM=rdmacm: rdma_create_event_channel failed: %s%s; "
                   "set NCCL_FERRY_IB_CM=oob to connect out of band over TCP", strerror(e),
                   e == ENODEV || e == ENOENT
                       ? " (no /dev/infiniband/rdma_cm: load the rdma_ucm kernel module, or "
                         "give the container that device)" : "");
        return FERRY_ERR_UNSUPPORTED;
    }
    ferry_rdmacm.destroy_event_channel(ch);
    ferry_ib_cm_devs = ferry_rdmacm.get_devices(&n);
    if (ferry_ib_cm_devs == NULL || n == 0) {
        FERRY_WARN("ib backend: NCCL_FERRY_IB_CM=rdmacm: rdma_get_devices found no RDMA device "
                   "(%s); set NCCL_FERRY_IB_CM=oob", strerror(errno));
        if (ferry_ib_cm_devs != NULL)
            ferry_rdmacm.free_devices(ferry_ib_cm_devs);
        ferry_ib_cm_devs = NULL;
        return FERRY_ERR_UNSUPPORTED;
    }
    return FERRY_OK;
}

void ferry_ib_cm_fini(void)
{
    if (ferry_ib_cm_devs != NULL)
        ferry_rdmacm.free_devices(ferry_ib_cm_devs);
    ferry_ib_cm_devs = NULL;
}

struct ibv_context *ferry_ib_cm_device_ctx(struct ibv_device *device)
{
    const char *want = ferry_ibv.get_device_name(device);
    int i;

    for (i = 0; ferry_ib_cm_devs != NULL && ferry_ib_cm_devs[i] != NULL; i++) {
        const char *name = ferry_ibv.get_device_name(ferry_ib_cm_devs[i]->device);

        if (want != NULL && name != NULL && strcmp(want, name) == 0)
            return ferry_ib_cm_devs[i];
    }
    return NULL;
}
