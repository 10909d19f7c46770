/* HCAs opened once each, and their ACTIVE ports turned into the devices NCCL sees. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_cm.h"
#include "ib/ib_dev_port.h"
#include "ib/ib_gid.h"
#include "ib/ib_sysfs.h"

/* Index of the lowest set bit of val, at most max (NCCL's firstBitSet). */
static int ferry_ib_first_bit(unsigned val, int max)
{
    int i = 0;

    while (i < max && (val & (1u << i)) == 0)
        i++;
    return i;
}

int ferry_ib_port_speed_mbps(unsigned active_speed, unsigned active_speed_ex, unsigned width)
{
    /* Per lane: SDR DDR QDR FDR10 FDR EDR HDR NDR XDR (IBV_SPEED_* bit order). */
    static const int speeds[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
    /* Lanes: IBV_WIDTH_1X 4X 8X 12X 2X bit order. */
    static const int widths[] = {1, 4, 8, 12, 2};
    unsigned speed = active_speed_ex != 0 ? active_speed_ex : active_speed;

    return speeds[ferry_ib_first_bit(speed, (int)(sizeof(speeds) / sizeof(speeds[0])) - 1)] *
           widths[ferry_ib_first_bit(width, (int)(sizeof(widths) / sizeof(widths[0])) - 1)];
}

const char *ferry_ib_port_skip_reason(const char *hca, int port, const struct ibv_port_attr *attr,
                                      const ferry_ib_hca_filter_t *filter)
{
    if (attr->state != IBV_PORT_ACTIVE) {
        switch (attr->state) {
        case IBV_PORT_DOWN: return "port state DOWN";
        case IBV_PORT_INIT: return "port state INIT (no subnet manager has configured it)";
        case IBV_PORT_ARMED: return "port state ARMED";
        default: return "port not ACTIVE";
        }
    }
    if (attr->link_layer != IBV_LINK_LAYER_INFINIBAND &&
        attr->link_layer != IBV_LINK_LAYER_ETHERNET)
        return "link layer is neither InfiniBand nor Ethernet";
    if (!ferry_ib_hca_filter_match(filter, hca, port))
        return "filtered out by NCCL_IB_HCA";
    return NULL;
}

ferry_status_t ferry_ib_hca_open(ferry_ib_hca_t *hca, struct ibv_device *device, int merge_vfs,
                                 char *why, size_t len)
{
    const char *name = ferry_ibv.get_device_name(device);

    memset(hca, 0, sizeof(*hca));
    snprintf(hca->name, sizeof(hca->name), "%s", name != NULL ? name : "?");
    snprintf(hca->ibdev_path, sizeof(hca->ibdev_path), "%s", device->ibdev_path);
    /* rdmacm mode: librdmacm's own context, or its ids' PDs and CQs would not match ours. */
    hca->ctx = ferry_ib_cm_device_ctx(device);
    hca->ctx_cm = hca->ctx != NULL;
    if (hca->ctx == NULL)
        hca->ctx = ferry_ibv.open_device(device);
    if (hca->ctx == NULL) {
        snprintf(why, len, "ibv_open_device failed: %s", strerror(errno));
        return FERRY_ERR_IO;
    }
    if (ferry_ibv.query_device(hca->ctx, &hca->attr) != 0) {
        snprintf(why, len, "ibv_query_device failed: %s", strerror(errno));
        goto err_close;
    }
    hca->pd = ferry_ibv.alloc_pd(hca->ctx);
    if (hca->pd == NULL) {
        snprintf(why, len, "ibv_alloc_pd failed: %s", strerror(errno));
        goto err_close;
    }
    ferry_ib_sysfs_pci_path(hca->ibdev_path, merge_vfs, hca->pci_path, sizeof(hca->pci_path));
    hca->numa_node = ferry_ib_sysfs_numa_node(hca->ibdev_path);
    pthread_mutex_init(&hca->mr_lock, NULL);
    return FERRY_OK;
err_close:
    if (!hca->ctx_cm)
        ferry_ibv.close_device(hca->ctx);
    hca->ctx = NULL;
    return FERRY_ERR_IO;
}

void ferry_ib_hca_close(ferry_ib_hca_t *hca)
{
    int i;

    if (hca->ctx == NULL)
        return;
    for (i = 0; i < hca->nmrs; i++) {
        FERRY_INFO(FERRY_LOG_NET, "ib %s: memory registration 0x%lx (+%zu bytes) still held "
                   "(%d references) at shutdown; deregistering it", hca->name,
                   (unsigned long)hca->mrs[i].addr, hca->mrs[i].len, hca->mrs[i].refs);
        ferry_ibv.dereg_mr(hca->mrs[i].mr);
    }
    free(hca->mrs);
    hca->mrs = NULL;
    hca->nmrs = hca->mrs_cap = 0;
    pthread_mutex_destroy(&hca->mr_lock);
    if (ferry_ibv.dealloc_pd(hca->pd) != 0)
        FERRY_WARN("ib %s: ibv_dealloc_pd failed at shutdown: %s", hca->name, strerror(errno));
    if (!hca->ctx_cm && ferry_ibv.close_device(hca->ctx) != 0)
        FERRY_WARN("ib %s: ibv_close_device failed at shutdown: %s", hca->name, strerror(errno));
    hca->pd = NULL;
    hca->ctx = NULL;
}

void ferry_ib_hca_probe(ferry_ib_hca_t *hca, const ferry_ib_config_t *cfg)
{
    struct ibv_mr *mr;

    /* NCCL's probe: a dummy registration with fd -1 fails with EBADF where DMA-BUF works. */
    hca->dmabuf = 0;
    if (ferry_ibv.reg_dmabuf_mr != NULL) {
        errno = 0;
        mr = ferry_ibv.reg_dmabuf_mr(hca->pd, 0, 0, 0, -1, 0);
        if (mr != NULL)
            ferry_ibv.dereg_mr(mr);
        hca->dmabuf = errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
    }
    hca->relaxed_ordering = cfg->relaxed_ordering != 0 && ferry_ibv.reg_mr_iova2 != NULL;
    if (cfg->relaxed_ordering == 1 && ferry_ibv.reg_mr_iova2 == NULL)
        FERRY_WARN("ib %s: NCCL_IB_PCI_RELAXED_ORDERING=1 but %s has no ibv_reg_mr_iova2 "
                   "(IBVERBS_1.8, rdma-core 28+): registering without relaxed ordering",
                   hca->name, ferry_ibv_loaded_path());
}

/* Append "name:port why; " to the list of skipped ports. */
static void ferry_ib_skip_note(char *skipped, size_t len, const char *hca, int port,
                               const char *why)
{
    size_t off = strlen(skipped);

    if (off + 1 < len)
        snprintf(skipped + off, len - off, "%s%s:%d %s", off > 0 ? "; " : "", hca, port, why);
}

/* The pieces of a device that come from its port (the GID comes after). */
static void ferry_ib_dev_fill(ferry_ib_dev_t *dev, ferry_ib_hca_t *hca, int port,
                              const struct ibv_port_attr *attr, uint32_t speed_ex,
                              const ferry_ib_config_t *cfg)
{
    memset(dev, 0, sizeof(*dev));
    snprintf(dev->name, sizeof(dev->name), "%s:%u", hca->name, (unsigned)(uint8_t)port);
    dev->hca = hca;
    dev->port = port;
    dev->link_layer = attr->link_layer;
    dev->port_attr = *attr;
    dev->speed_mbps = ferry_ib_port_speed_mbps(attr->active_speed, speed_ex, attr->active_width);
    dev->guid = hca->attr.sys_image_guid;
    /* Adaptive routing: NCCL's default is on for InfiniBand, off for RoCE. */
    dev->ar = cfg->adaptive_routing != -2 ? cfg->adaptive_routing
                                          : attr->link_layer == IBV_LINK_LAYER_INFINIBAND;
}

ferry_status_t ferry_ib_hca_add_ports(ferry_ib_state_t *st, ferry_ib_hca_t *hca,
                                      const ferry_ib_hca_filter_t *filter, char *skipped,
                                      size_t len)
{
    ferry_status_t status;
    int port;

    for (port = 1; port <= hca->attr.phys_port_cnt; port++) {
        struct ibv_port_attr attr;
        uint32_t speed_ex = 0;
        const char *why;
        ferry_ib_dev_t *dev;

        if (ferry_ibv_query_port_ex(hca->ctx, (uint8_t)port, &attr, &speed_ex) != 0) {
            FERRY_WARN("ib %s:%d: ibv_query_port failed: %s; check the device with "
                       "`ibv_devinfo -d %s`", hca->name, port, strerror(errno), hca->name);
            return FERRY_ERR_IO;
        }
        why = ferry_ib_port_skip_reason(hca->name, port, &attr, filter);
        if (why == NULL && st->ndev == FERRY_IB_MAX_DEVS)
            why = "more ports than ferry keeps (64)";
        if (why != NULL) {
            ferry_ib_skip_note(skipped, len, hca->name, port, why);
            continue;
        }
        dev = &st->devs[st->ndev];
        ferry_ib_dev_fill(dev, hca, port, &attr, speed_ex, &st->cfg);
        ferry_ib_hca_filter_ids(filter, hca->name, port, &dev->rail_id, &dev->plane_id);
        status = ferry_ib_gid_select(dev);
        if (status != FERRY_OK)
            return status;
        st->ndev++;
    }
    return FERRY_OK;
}
