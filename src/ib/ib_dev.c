/* The ib backend's devices: bring-up, tear-down and what NCCL is told about each port. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/netif.h"
#include "ib/ib.h"
#include "ib/ib_async.h"
#include "ib/ib_cm.h"
#include "ib/ib_dev_port.h"

ferry_ib_state_t ferry_ib_state;

/*
 * The out-of-band interface: the first one NCCL_SOCKET_IFNAME (or NCCL's
 * default order) and NCCL_SOCKET_FAMILY give, as NCCL's IB transport
 * takes it.
 */
static ferry_status_t ferry_ib_oob_pick(const ferry_config_t *cfg, ferry_ib_state_t *st)
{
    ferry_netif_t ifc;

    if (ferry_netif_find(cfg->socket_ifname, cfg->socket_family, &ifc, 1) != 1) {
        FERRY_WARN("ib: no IP interface found for the out-of-band connection "
                   "(NCCL_SOCKET_IFNAME=%s, NCCL_SOCKET_FAMILY=%s); the interface must be up "
                   "with an address; set NCCL_SOCKET_IFNAME to one that is (see `ip addr`)",
                   cfg->socket_ifname[0] ? cfg->socket_ifname : "<unset: NCCL's default order>",
                   cfg->socket_family == AF_INET    ? "AF_INET"
                   : cfg->socket_family == AF_INET6 ? "AF_INET6"
                                                    : "any");
        return FERRY_ERR_USAGE;
    }
    snprintf(st->oob_ifname, sizeof(st->oob_ifname), "%s", ifc.name);
    st->oob_sa = ifc.addr;
    st->oob_sa_len = (unsigned)ifc.addr_len;
    ferry_sockaddr_any_port(&st->oob_sa);
    if (getnameinfo((struct sockaddr *)&st->oob_sa, ifc.addr_len, st->oob_addr,
                    sizeof(st->oob_addr), NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(st->oob_addr, sizeof(st->oob_addr), "?");
    return FERRY_OK;
}

/* NCCL numbers ports of one PCI function apart: port + HCAs before it at the same path. */
static int ferry_ib_real_port(const ferry_ib_dev_t *dev)
{
    const ferry_ib_hca_t *hca;
    int n = 0;

    if (dev->hca->pci_path[0] == '\0')
        return 0;
    for (hca = ferry_ib_state.hcas; hca < dev->hca; hca++)
        n += strcmp(hca->pci_path, dev->hca->pci_path) == 0;
    return n;
}

/* Open every HCA with a usable port; "dev:port why; ..." of the rest in skipped. */
static ferry_status_t ferry_ib_open_all(ferry_ib_state_t *st, char *skipped, size_t len)
{
    ferry_status_t status = FERRY_OK;
    ferry_ib_hca_filter_t filter;
    struct ibv_device **list;
    char why[256];
    int n = 0, i;

    ferry_ib_hca_filter_parse(st->cfg.hca, &filter); /* Validated at config load. */
    list = ferry_ibv.get_device_list(&n);
    if (list == NULL) {
        FERRY_WARN("ib backend: ibv_get_device_list failed: %s; this host shows no RDMA "
                   "devices (is the ib_uverbs kernel module loaded? `ibv_devices` lists them); "
                   "use NCCL_FERRY_BACKEND=socket or auto", strerror(errno));
        return FERRY_ERR_UNSUPPORTED;
    }
    if (n == 0)
        snprintf(skipped, len, "no RDMA device (ibv_get_device_list found none in %s)",
                 ferry_ibv_loaded_path());
    if (n > FERRY_IB_MAX_HCAS)
        FERRY_WARN("ib backend: %d RDMA devices, ferry uses the first %d; NCCL_IB_HCA picks "
                   "which", n, FERRY_IB_MAX_HCAS);
    for (i = 0; i < n && i < FERRY_IB_MAX_HCAS && status == FERRY_OK; i++) {
        ferry_ib_hca_t *hca = &st->hcas[st->nhca];
        size_t off = strlen(skipped);
        int ndev_before = st->ndev;

        if (ferry_ib_hca_open(hca, list[i], st->cfg.merge_vfs, why, sizeof(why)) != FERRY_OK) {
            snprintf(skipped + off, len - off, "%s%s %s", off > 0 ? "; " : "",
                     ferry_ibv.get_device_name(list[i]), why);
            continue;
        }
        hca->index = st->nhca;
        hca->async_stop_fd = -1;
        status = ferry_ib_hca_add_ports(st, hca, &filter, skipped, len);
        if (status != FERRY_OK || st->ndev == ndev_before) {
            st->ndev = ndev_before;
            ferry_ib_hca_close(hca);
            continue;
        }
        ferry_ib_hca_probe(hca, &st->cfg);
        st->nhca++;
    }
    ferry_ibv.free_device_list(list);
    return status;
}

/* " rail R", " plane P", both or neither: what NCCL_IB_HCA told of a device. */
static void ferry_ib_ids_text(const ferry_ib_dev_t *d, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    if (d->rail_id >= 0)
        off = (size_t)snprintf(buf, len, " rail %d", d->rail_id);
    if (d->plane_id >= 0 && off < len)
        snprintf(buf + off, len - off, " plane %d", d->plane_id);
}

/* The one INFO line NCCL users look for: devices (rail, plane), [RO], out-of-band interface. */
static void ferry_ib_log_devices(const ferry_ib_state_t *st)
{
    char line[1024], ids[40];
    size_t off = 0;
    int i, ro = 0;

    line[0] = '\0';
    for (i = 0; i < st->ndev && off < sizeof(line); i++) {
        ferry_ib_ids_text(&st->devs[i], ids, sizeof(ids));
        off += (size_t)snprintf(line + off, sizeof(line) - off, " [%d]%s/%s%s%s%s", i,
                                st->devs[i].name,
                                st->devs[i].link_layer == IBV_LINK_LAYER_INFINIBAND ? "IB"
                                                                                    : "RoCE",
                                ids[0] ? "(" : "", ids[0] ? ids + 1 : "", ids[0] ? ")" : "");
    }
    for (i = 0; i < st->nhca; i++)
        ro |= st->hcas[i].relaxed_ordering;
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "ib backend using%s%s; OOB %s:%s", line,
               ro ? " [RO]" : "", st->oob_ifname, st->oob_addr);
}

ferry_status_t ferry_ib_init(const ferry_config_t *cfg)
{
    ferry_ib_state_t *st = &ferry_ib_state;
    ferry_status_t status;
    char err[1024], skipped[2048];
    int i;

    st->nhca = st->ndev = 0;
    status = ferry_ib_config_load(&st->cfg);
    if (status != FERRY_OK)
        return status;
    if (st->cfg.disable) {
        FERRY_WARN("ib backend: NCCL_IB_DISABLE=1 turns it off; unset it, or use "
                   "NCCL_FERRY_BACKEND=socket");
        return FERRY_ERR_UNSUPPORTED;
    }
    status = ferry_ibv_load(st->cfg.verbs_lib, err, sizeof(err));
    if (status != FERRY_OK) {
        FERRY_WARN("ib backend: %s", err);
        return status;
    }
    if (st->cfg.cm == FERRY_IB_CM_RDMACM && (status = ferry_ib_cm_init(&st->cfg)) != FERRY_OK)
        return status;
    if (ferry_ibv.fork_init() != 0)
        FERRY_WARN("ib backend: ibv_fork_init failed: %s; a fork() in this process may corrupt "
                   "registered memory", strerror(errno));
    status = ferry_ib_oob_pick(cfg, st);
    if (status != FERRY_OK)
        return status;
    skipped[0] = '\0';
    status = ferry_ib_open_all(st, skipped, sizeof(skipped));
    if (status == FERRY_OK && st->ndev == 0) {
        FERRY_WARN("ib backend: no usable port (%s); ports must be ACTIVE with an InfiniBand "
                   "or Ethernet link layer and pass the NCCL_IB_HCA filter ('%s'); check "
                   "`ibv_devinfo`", skipped, st->cfg.hca);
        status = FERRY_ERR_UNSUPPORTED;
    }
    for (i = 0; i < st->nhca && status == FERRY_OK; i++)
        status = ferry_ib_async_start(&st->hcas[i]);
    if (status != FERRY_OK) {
        ferry_ib_fini();
        return status;
    }
    if (skipped[0] != '\0')
        FERRY_INFO(FERRY_LOG_NET, "ib backend: not using %s", skipped);
    ferry_ib_vdev_init(st);
    ferry_ib_log_devices(st);
    ferry_ib_gdr_probe(st);
    return FERRY_OK;
}

void ferry_ib_fini(void)
{
    ferry_ib_state_t *st = &ferry_ib_state;
    int i;

    for (i = 0; i < st->nhca; i++)
        ferry_ib_async_stop(&st->hcas[i]);
    for (i = 0; i < st->nhca; i++)
        ferry_ib_hca_close(&st->hcas[i]);
    ferry_ib_cm_fini();
    /* Device names stay in place: NCCL may keep the pointers getProperties gave it. */
    st->nhca = 0;
    st->ndev = 0;
    atomic_store_explicit(&st->nvdev, 0, memory_order_release);
}

ferry_status_t ferry_ib_devices(int *ndev_p)
{
    *ndev_p = atomic_load_explicit(&ferry_ib_state.nvdev, memory_order_acquire);
    return FERRY_OK;
}

ferry_status_t ferry_ib_get_properties(int dev, ferry_props_t *props_p)
{
    const ferry_ib_vdev_t *v = ferry_ib_vdev_get(dev, "getProperties");
    const ferry_ib_dev_t *d;

    if (v == NULL)
        return FERRY_ERR_INVALID;
    d = &ferry_ib_state.devs[v->devs[0]];
    memset(props_p, 0, sizeof(*props_p));
    props_p->name = d->name;
    props_p->pci_path = d->hca->pci_path[0] ? d->hca->pci_path : NULL;
    props_p->guid = d->guid;
    props_p->ptr_support = ferry_ib_gdr_ptr_support(d); /* ib_gdr.c */
    props_p->reg_is_global = 1;
    props_p->force_flush = ferry_ib_state.cfg.force_flush; /* v9+ carry it. */
    props_p->speed_mbps = d->speed_mbps;
    props_p->port = d->port + ferry_ib_real_port(d);
    props_p->latency_us = 0;
    props_p->max_comms = d->hca->attr.max_qp;
    props_p->max_recvs = 8;                      /* NCCL_NET_IB_MAX_RECVS. */
    props_p->max_p2p_bytes = (size_t)1 << 40;    /* NCCL_MAX_NET_SIZE_BYTES. */
    props_p->max_coll_bytes = (size_t)512 << 20; /* MAX_COLLNET_SIZE. */
    props_p->max_multi_request_size = 1;
    props_p->rail_id = d->rail_id;
    props_p->plane_id = d->plane_id;
    if (dev >= ferry_ib_state.ndev)
        ferry_ib_vdev_props(v, props_p); /* ib_vdev.c */
    return FERRY_OK;
}

const char *ferry_ib_dev_name(int dev)
{
    int n = atomic_load_explicit(&ferry_ib_state.nvdev, memory_order_acquire);

    return dev >= 0 && dev < n ? ferry_ib_state.vdevs[dev].name : "?";
}
