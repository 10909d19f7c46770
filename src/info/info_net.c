/*
 * The ABI calls ferry-info makes, through ncclNet_v12_t or ncclNet_v11_t,
 * whichever the plugin's newest symbol is. Both have the same members in
 * the same order; only the config and properties types differ, so each call
 * is one branch. Single buffers only (n = 1), host memory only: what a
 * loopback self-test needs.
 */
#include <stdio.h>
#include <string.h>

#include "info/info.h"

#define FERRY_INFO_CALL(_p, _member, ...)                                        \
    ((_p)->version == 12 ? ((const ncclNet_v12_t *)(_p)->net)->_member(__VA_ARGS__) \
                         : ((const ncclNet_v11_t *)(_p)->net)->_member(__VA_ARGS__))

const char *ferry_info_result_str(ncclResult_t rc)
{
    static const char *const names[] = {
        "ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
        "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
    };

    return (unsigned)rc < sizeof(names) / sizeof(names[0]) ? names[rc] : "unknown ncclResult_t";
}

ncclResult_t ferry_info_net_init(const ferry_info_plugin_t *p, void **ctx_p,
                                 ncclDebugLogger_t log_fn)
{
    /* No profiler: ferry-info is not NCCL and has no proxy steps to hang events on. */
    if (p->version == 12) {
        ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};

        return ((const ncclNet_v12_t *)p->net)->init(ctx_p, 0xf3779, &cfg, log_fn, NULL);
    } else {
        ncclNetCommConfig_v11_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};

        return ((const ncclNet_v11_t *)p->net)->init(ctx_p, 0xf3779, &cfg, log_fn, NULL);
    }
}

ncclResult_t ferry_info_net_finalize(const ferry_info_plugin_t *p, void *ctx)
{
    return FERRY_INFO_CALL(p, finalize, ctx);
}

ncclResult_t ferry_info_net_devices(const ferry_info_plugin_t *p, int *ndev)
{
    return FERRY_INFO_CALL(p, devices, ndev);
}

#define FERRY_INFO_PROPS_COPY(_out, _in)                                                   \
    do {                                                                                   \
        snprintf((_out)->name, sizeof((_out)->name), "%s", (_in).name ? (_in).name : "");  \
        snprintf((_out)->pci_path, sizeof((_out)->pci_path), "%s",                         \
                 (_in).pciPath ? (_in).pciPath : "");                                      \
        (_out)->ptr_support = (_in).ptrSupport;                                            \
        (_out)->speed = (_in).speed;                                                       \
        (_out)->port = (_in).port;                                                         \
        (_out)->latency = (_in).latency;                                                   \
        (_out)->max_comms = (_in).maxComms;                                                \
        (_out)->max_recvs = (_in).maxRecvs;                                                \
        (_out)->reg_is_global = (_in).regIsGlobal;                                         \
        (_out)->force_flush = (_in).forceFlush;                                            \
        (_out)->max_p2p_bytes = (_in).maxP2pBytes;                                         \
        (_out)->guid = (_in).guid;                                                         \
    } while (0)

ncclResult_t ferry_info_net_props(const ferry_info_plugin_t *p, int dev, ferry_info_props_t *out)
{
    ncclResult_t rc;

    memset(out, 0, sizeof(*out));
    out->rail_id = out->plane_id = NCCL_NET_ID_UNDEF;
    if (p->version == 12) {
        ncclNetProperties_v12_t props;

        memset(&props, 0, sizeof(props));
        rc = ((const ncclNet_v12_t *)p->net)->getProperties(dev, &props);
        if (rc == ncclSuccess) {
            FERRY_INFO_PROPS_COPY(out, props);
            out->rail_id = props.railId;
            out->plane_id = props.planeId;
        }
    } else {
        ncclNetProperties_v11_t props;

        memset(&props, 0, sizeof(props));
        rc = ((const ncclNet_v11_t *)p->net)->getProperties(dev, &props);
        if (rc == ncclSuccess)
            FERRY_INFO_PROPS_COPY(out, props);
    }
    return rc;
}

ncclResult_t ferry_info_net_listen(const ferry_info_plugin_t *p, void *ctx, int dev, void *handle,
                                   void **listen_comm)
{
    return FERRY_INFO_CALL(p, listen, ctx, dev, handle, listen_comm);
}

ncclResult_t ferry_info_net_connect(const ferry_info_plugin_t *p, void *ctx, int dev,
                                    void *handle, void **send_comm)
{
    /* A HOST plugin never touches the device-handle pointer; NCCL passes one anyway. */
    ncclNetDeviceHandle_v11_t *dev_comm = NULL;

    return FERRY_INFO_CALL(p, connect, ctx, dev, handle, send_comm, &dev_comm);
}

ncclResult_t ferry_info_net_accept(const ferry_info_plugin_t *p, void *listen_comm,
                                   void **recv_comm)
{
    ncclNetDeviceHandle_v11_t *dev_comm = NULL;

    return FERRY_INFO_CALL(p, accept, listen_comm, recv_comm, &dev_comm);
}

ncclResult_t ferry_info_net_reg_mr(const ferry_info_plugin_t *p, void *comm, void *data,
                                   size_t size, void **mhandle)
{
    return FERRY_INFO_CALL(p, regMr, comm, data, size, NCCL_PTR_HOST, mhandle);
}

ncclResult_t ferry_info_net_dereg_mr(const ferry_info_plugin_t *p, void *comm, void *mhandle)
{
    return FERRY_INFO_CALL(p, deregMr, comm, mhandle);
}

ncclResult_t ferry_info_net_isend(const ferry_info_plugin_t *p, void *send_comm, void *data,
                                  size_t size, int tag, void *mhandle, void **request)
{
    return FERRY_INFO_CALL(p, isend, send_comm, data, size, tag, mhandle, NULL, request);
}

ncclResult_t ferry_info_net_irecv(const ferry_info_plugin_t *p, void *recv_comm, void *data,
                                  size_t size, int tag, void *mhandle, void **request)
{
    void *datas[1] = {data}, *mhandles[1] = {mhandle};
    size_t sizes[1] = {size};
    int tags[1] = {tag};

    *request = NULL;
    return FERRY_INFO_CALL(p, irecv, recv_comm, 1, datas, sizes, tags, mhandles, NULL, request);
}

ncclResult_t ferry_info_net_test(const ferry_info_plugin_t *p, void *request, int *done,
                                 int *size)
{
    return FERRY_INFO_CALL(p, test, request, done, size);
}

ncclResult_t ferry_info_net_close_send(const ferry_info_plugin_t *p, void *comm)
{
    return FERRY_INFO_CALL(p, closeSend, comm);
}

ncclResult_t ferry_info_net_close_recv(const ferry_info_plugin_t *p, void *comm)
{
    return FERRY_INFO_CALL(p, closeRecv, comm);
}

ncclResult_t ferry_info_net_close_listen(const ferry_info_plugin_t *p, void *comm)
{
    return FERRY_INFO_CALL(p, closeListen, comm);
}
