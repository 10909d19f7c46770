/*
 * Binders for ncclNet v8, v9 and v10: no ctx (NCCL calls init once per
 * process), no finalize. v8 has int sizes; v9 has no profiler handles.
 */
#include <dlfcn.h>
#include <string.h>

#include "abi_net.h"

/* Requests the largest size an int-sized (v8) call can carry. */
#define ABI_V8_MAX_SIZE 0x7fffffff

/* ---- v8 ---- */

ABI_DEFINE_BAD_MEMBER(8)

static ncclResult_t abi_v8_init(abi_net_t *net, ncclDebugLogger_t log)
{
    return ((const ncclNet_v8_t *)net->table)->init(log);
}

static ncclResult_t abi_v8_get_props(abi_net_t *net, int dev, abi_props_t *out)
{
    ncclNetProperties_v8_t p;
    ncclResult_t res = ((const ncclNet_v8_t *)net->table)->getProperties(dev, &p);

    if (res == ncclSuccess)
        ABI_PROPS_V8(out, &p);
    return res;
}

static ncclResult_t abi_v8_listen(abi_net_t *net, int dev, void *handle, void **listen_comm)
{
    return ((const ncclNet_v8_t *)net->table)->listen(dev, handle, listen_comm);
}

static ncclResult_t abi_v8_connect(abi_net_t *net, int dev, void *handle, void **send_comm)
{
    ncclNetDeviceHandle_v8_t *dev_handle = NULL; /* What NCCL passes for HOST. */

    return ((const ncclNet_v8_t *)net->table)->connect(dev, handle, send_comm, &dev_handle);
}

static ncclResult_t abi_v8_isend(abi_net_t *net, void *comm, void *data, size_t size, int tag,
                                 void *mhandle, void **request)
{
    if (size > ABI_V8_MAX_SIZE)
        return ncclInvalidArgument;
    return ((const ncclNet_v8_t *)net->table)->isend(comm, data, (int)size, tag, mhandle,
                                                      request);
}

static ncclResult_t abi_v8_irecv(abi_net_t *net, void *comm, void *data, size_t size, int tag,
                                 void *mhandle, void **request)
{
    int isize = (int)size;

    if (size > ABI_V8_MAX_SIZE)
        return ncclInvalidArgument;
    return ((const ncclNet_v8_t *)net->table)->irecv(comm, 1, &data, &isize, &tag, &mhandle,
                                                      request);
}

int abi_bind_v8(abi_net_t *net, void *lib)
{
    ABI_BIND(net, lib, 8);
    return 0;
}

/* ---- v9 ---- */

ABI_DEFINE_BAD_MEMBER(9)

static ncclResult_t abi_v9_init(abi_net_t *net, ncclDebugLogger_t log)
{
    return ((const ncclNet_v9_t *)net->table)->init(log);
}

static ncclResult_t abi_v9_get_props(abi_net_t *net, int dev, abi_props_t *out)
{
    ncclNetProperties_v9_t p;
    ncclResult_t res = ((const ncclNet_v9_t *)net->table)->getProperties(dev, &p);

    if (res == ncclSuccess)
        ABI_PROPS_V9(out, &p);
    return res;
}

static ncclResult_t abi_v9_listen(abi_net_t *net, int dev, void *handle, void **listen_comm)
{
    return ((const ncclNet_v9_t *)net->table)->listen(dev, handle, listen_comm);
}

static ncclResult_t abi_v9_connect(abi_net_t *net, int dev, void *handle, void **send_comm)
{
    ncclNetDeviceHandle_v9_t *dev_handle = NULL;

    return ((const ncclNet_v9_t *)net->table)->connect(dev, handle, send_comm, &dev_handle);
}

static ncclResult_t abi_v9_isend(abi_net_t *net, void *comm, void *data, size_t size, int tag,
                                 void *mhandle, void **request)
{
    return ((const ncclNet_v9_t *)net->table)->isend(comm, data, size, tag, mhandle, request);
}

static ncclResult_t abi_v9_irecv(abi_net_t *net, void *comm, void *data, size_t size, int tag,
                                 void *mhandle, void **request)
{
    return ((const ncclNet_v9_t *)net->table)->irecv(comm, 1, &data, &size, &tag, &mhandle,
                                                      request);
}

int abi_bind_v9(abi_net_t *net, void *lib)
{
    ABI_BIND(net, lib, 9);
    return 0;
}

/* ---- v10 ---- */

ABI_DEFINE_BAD_MEMBER(10)

static ncclResult_t abi_v10_init(abi_net_t *net, ncclDebugLogger_t log)
{
    return ((const ncclNet_v10_t *)net->table)->init(log, NULL);
}

static ncclResult_t abi_v10_get_props(abi_net_t *net, int dev, abi_props_t *out)
{
    ncclNetProperties_v10_t p;
    ncclResult_t res = ((const ncclNet_v10_t *)net->table)->getProperties(dev, &p);

    if (res == ncclSuccess)
        ABI_PROPS_V9(out, &p);
    return res;
}

static ncclResult_t abi_v10_listen(abi_net_t *net, int dev, void *handle, void **listen_comm)
{
    return ((const ncclNet_v10_t *)net->table)->listen(dev, handle, listen_comm);
}

static ncclResult_t abi_v10_connect(abi_net_t *net, int dev, void *handle, void **send_comm)
{
    /* As the 2.28 shim does: a config on the caller's stack, class undefined. */
    ncclNetCommConfig_v10_t config = { .trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF };
    ncclNetDeviceHandle_v10_t *dev_handle = NULL;

    return ((const ncclNet_v10_t *)net->table)->connect(dev, &config, handle, send_comm,
                                                         &dev_handle);
}

static ncclResult_t abi_v10_isend(abi_net_t *net, void *comm, void *data, size_t size,
                                  int tag, void *mhandle, void **request)
{
    /* phandle NULL, as in NCCL builds without a profiler. */
    return ((const ncclNet_v10_t *)net->table)->isend(comm, data, size, tag, mhandle, NULL,
                                                       request);
}

static ncclResult_t abi_v10_irecv(abi_net_t *net, void *comm, void *data, size_t size,
                                  int tag, void *mhandle, void **request)
{
    return ((const ncclNet_v10_t *)net->table)->irecv(comm, 1, &data, &size, &tag, &mhandle,
                                                       NULL, request);
}

int abi_bind_v10(abi_net_t *net, void *lib)
{
    ABI_BIND(net, lib, 10);
    return 0;
}
