/*
 * fakeibv devices, contexts, port and GID queries, async events.
 *
 * Each emulated device port gets a LID that is unique on the fabric: it is
 * the name of the port's Unix listener, so binding the listener is what
 * reserves the LID (fakeibv_wire.c). The listeners are bound when the
 * device list is first built, together with the sysfs tree
 * (fakeibv_sysfs.c), so that what a client reads there before opening a
 * device (LIDs, GIDs, node GUID) is already final. Made-up GIDs carry the
 * LID in their last two bytes, so a peer addressed by GID is found the same
 * way; a GID carrying a real interface address (FAKEIBV_NETDEV) has a
 * listener of its own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>

#include "fakeibv_internal.h"

#undef ibv_query_port

static struct fakeibv_device fakeibv_devs[FAKEIBV_MAX_DEVS];
static pthread_once_t fakeibv_devs_once = PTHREAD_ONCE_INIT;
static int fakeibv_devs_rc;       /* errno of a failed set-up: the list is then empty. */

/* The netdev a RoCE port's GIDs belong to: FAKEIBV_NETDEV, else lo (the
 * made-up ::ffff:127.0.x.y addresses are loopback ones). */
const char *fakeibv_ndev_name(const struct fakeibv_port *p)
{
    return p->netdev[0] != '\0' ? p->netdev : "lo";
}

/* FAKEIBV_NETDEV names interfaces in port order (fakeib0 port 1, port 2,
 * ..., fakeib1 port 1, ...); ports past the list keep loopback GIDs. The
 * IPv4 address is read in the process's own network namespace. */
static void fakeibv_netdevs_init(void)
{
    const struct fakeibv_config *cfg = fakeibv_config();
    unsigned lo = if_nametoindex("lo");
    struct ifaddrs *ifa = NULL, *it;
    char *list = NULL, *save = NULL, *name;
    int i, p;

    for (i = 0; i < cfg->ndev; i++)
        for (p = 0; p < cfg->nports; p++)
            fakeibv_devs[i].ports[p].ifindex =
                cfg->link_layer == IBV_LINK_LAYER_ETHERNET ? (lo ? lo : 1) : 0;
    if (cfg->netdev == NULL || (list = strdup(cfg->netdev)) == NULL)
        return;
    if (getifaddrs(&ifa) != 0) {
        FAKEIBV_WARN("FAKEIBV_NETDEV: getifaddrs failed: %s; ports keep loopback GIDs",
                     strerror(errno));
        free(list);
        return;
    }
    name = strtok_r(list, ",", &save);
    for (i = 0; i < cfg->ndev && name != NULL; i++) {
        for (p = 0; p < cfg->nports && name != NULL; p++, name = strtok_r(NULL, ",", &save)) {
            struct fakeibv_port *port = &fakeibv_devs[i].ports[p];

            for (it = ifa; it != NULL; it = it->ifa_next)
                if (it->ifa_addr != NULL && it->ifa_addr->sa_family == AF_INET &&
                    strcmp(it->ifa_name, name) == 0)
                    break;
            if (it == NULL || strlen(name) >= sizeof(port->netdev)) {
                FAKEIBV_WARN("FAKEIBV_NETDEV: interface %s has no IPv4 address in this network "
                             "namespace; fakeib%d port %d keeps ::ffff:127.0.x.y GIDs", name, i,
                             p + 1);
                continue;
            }
            memcpy(port->ipv4, &((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr, 4);
            snprintf(port->netdev, sizeof(port->netdev), "%s", name);
            port->ifindex = if_nametoindex(name);
        }
    }
    freeifaddrs(ifa);
    free(list);
}

static void fakeibv_devs_init(void)
{
    const struct fakeibv_config *cfg = fakeibv_config();
    const char *root;
    int i, p, rc;

    rc = fakeibv_sysfs_pick_root();
    if (rc != 0) {
        fakeibv_devs_rc = rc;
        return;
    }
    root = fakeibv_sysfs_root();
    fakeibv_netdevs_init();
    for (i = 0; i < cfg->ndev; i++) {
        struct fakeibv_device *d = &fakeibv_devs[i];

        d->index = i;
        d->dev.node_type = IBV_NODE_CA;
        d->dev.transport_type = IBV_TRANSPORT_IB;
        snprintf(d->dev.name, sizeof(d->dev.name), "fakeib%d", i);
        snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
        snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s/class/infiniband_verbs/uverbs%d",
                 root, i);
        snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s/class/infiniband/fakeib%d",
                 root, i);
        /* One PCI function per device, each on a bus of its own (as a NIC
         * behind its own switch port is): device and function 0, so NCCL's
         * pciPath (function digit and, with NCCL_IB_MERGE_VFS, device digits
         * zeroed) is the function itself and differs per device. Its ports
         * share it (like mlx4). */
        snprintf(d->pci, sizeof(d->pci), "0000:%02x:00.0", (unsigned)(uint8_t)(0xf0 + i));
        for (p = 0; p < FAKEIBV_MAX_PORTS; p++) {
            d->ports[p].listen_fd = -1;
            d->ports[p].gid_fd = -1;
            d->ports[p].state = IBV_PORT_ACTIVE;
        }
        for (p = 1; p <= cfg->nports; p++) {
            rc = fakeibv_port_bind(d, p);
            if (rc != 0) {
                fakeibv_devs_rc = rc;
                return;
            }
            if (d->ports[p - 1].netdev[0] != '\0') {
                union ibv_gid gid;
                uint32_t type;

                fakeibv_gid_fill(d, p, 3, &gid, &type);
                fakeibv_port_bind_gid(d, p, &gid);
            }
        }
        /* Node GUID: fixed OUI-like prefix, port 1's LID (unique on the
         * fabric, so two processes never report the same GUID) and the
         * device index. */
        d->node_guid = htobe64(0xfa4e000000000000ULL | ((uint64_t)d->ports[0].lid << 16) |
                               (uint64_t)i << 8);
    }
    fakeibv_sysfs_build(fakeibv_devs, cfg->ndev);
}

/* Runs at exit (and dlclose): the per-process sysfs tree and the fabric
 * dir's socket files go; a killed process leaves them for the next one to
 * sweep. */
__attribute__((destructor)) void fakeibv_cleanup_at_exit(void)
{
    fakeibv_wire_cleanup();
    fakeibv_sysfs_cleanup();
}

/* Builds the devices once; 0 or the errno that set-up failed with. */
static int fakeibv_devs_ready(void)
{
    pthread_once(&fakeibv_devs_once, fakeibv_devs_init);
    return fakeibv_devs_rc;
}

static struct fakeibv_device *fakeibv_dev(struct ibv_device *d)
{
    return (struct fakeibv_device *)d;
}

FAKEIBV_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
    const struct fakeibv_config *cfg = fakeibv_config();
    struct ibv_device **list;
    int i, rc = fakeibv_devs_ready();

    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    list = calloc((size_t)cfg->ndev + 1, sizeof(*list));
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    for (i = 0; i < cfg->ndev; i++)
        list[i] = &fakeibv_devs[i].dev;
    if (num_devices != NULL)
        *num_devices = cfg->ndev;
    return list;
}

/* rdma-core returns "/sys" (or $SYSFS_PATH); here it is the root of
 * fakeibv's own tree, so paths built from it find the emulated devices. */
FAKEIBV_EXPORT const char *ibv_get_sysfs_path(void)
{
    if (fakeibv_devs_ready() != 0)
        return NULL;
    return fakeibv_sysfs_root();
}

FAKEIBV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

FAKEIBV_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

FAKEIBV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
    return fakeibv_dev(device)->node_guid;
}

FAKEIBV_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
    return fakeibv_dev(device)->index;
}

/* ---- GIDs -------------------------------------------------------------- */

uint16_t fakeibv_lid_from_gid(const union ibv_gid *gid)
{
    return (uint16_t)((gid->raw[14] << 8) | gid->raw[15]);
}

void fakeibv_gid_fill(const struct fakeibv_device *dev, int port, int index, union ibv_gid *gid,
                      uint32_t *type_p)
{
    uint16_t lid = dev->ports[port - 1].lid;
    int eth = fakeibv_config()->link_layer == IBV_LINK_LAYER_ETHERNET;

    memset(gid, 0, sizeof(*gid));
    *type_p = eth ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_IB;
    if (!eth && index != 0)
        return;
    if (index < 2) {
        /* Link-local: fe80::fa4e:1b<dev>:<port>00:<lid>. */
        gid->raw[0] = 0xfe;
        gid->raw[1] = 0x80;
        gid->raw[8] = 0xfa;
        gid->raw[9] = 0x4e;
        gid->raw[10] = 0x1b;
        gid->raw[11] = (uint8_t)dev->index;
        gid->raw[12] = (uint8_t)port;
    } else if (index < FAKEIBV_GID_TBL_LEN) {
        /* IPv4-mapped: the netdev's address (FAKEIBV_NETDEV), else
         * ::ffff:127.0.<lid>, a loopback address as a RoCE v2 device on lo
         * would carry. */
        gid->raw[10] = 0xff;
        gid->raw[11] = 0xff;
        gid->raw[12] = 127;
        if (dev->ports[port - 1].netdev[0] != '\0') {
            memcpy(&gid->raw[12], dev->ports[port - 1].ipv4, 4);
            if (index & 1)
                *type_p = IBV_GID_TYPE_ROCE_V2;
            return;
        }
    } else {
        return;
    }
    gid->raw[14] = (uint8_t)(lid >> 8);
    gid->raw[15] = (uint8_t)lid;
    if (eth && (index & 1))
        *type_p = IBV_GID_TYPE_ROCE_V2;
}

static int fakeibv_port_ok(struct ibv_context *c, uint8_t port)
{
    return c != NULL && port >= 1 && port <= fakeibv_config()->nports;
}

FAKEIBV_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                                 union ibv_gid *gid)
{
    uint32_t type;

    if (!fakeibv_port_ok(context, port_num) || index < 0 || index >= FAKEIBV_GID_TBL_LEN)
        return -1; /* rdma-core returns -1 here, not an errno. */
    fakeibv_gid_fill(fakeibv_ctx(context)->dev, port_num, index, gid, &type);
    return 0;
}

static int fakeibv_gid_entry(struct ibv_context *context, uint32_t port, uint32_t index,
                             struct ibv_gid_entry *entry)
{
    uint32_t type;
    static const union ibv_gid zero;

    if (!fakeibv_port_ok(context, (uint8_t)port) || index >= FAKEIBV_GID_TBL_LEN)
        return EINVAL;
    fakeibv_gid_fill(fakeibv_ctx(context)->dev, (int)port, (int)index, &entry->gid, &type);
    if (memcmp(&entry->gid, &zero, sizeof(zero)) == 0)
        return ENODATA;
    entry->gid_index = index;
    entry->port_num = port;
    entry->gid_type = type;
    entry->ndev_ifindex = fakeibv_ctx(context)->dev->ports[port - 1].ifindex;
    return 0;
}

FAKEIBV_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                                     uint32_t gid_index, struct ibv_gid_entry *entry,
                                     uint32_t flags, size_t entry_size)
{
    if (flags != 0 || entry_size < sizeof(*entry))
        return EINVAL;
    return fakeibv_gid_entry(context, port_num, gid_index, entry);
}

FAKEIBV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
                                            struct ibv_gid_entry *entries, size_t max_entries,
                                            uint32_t flags, size_t entry_size)
{
    size_t n = 0;
    uint32_t port, idx;

    if (flags != 0 || entry_size < sizeof(*entries))
        return -EINVAL;
    for (port = 1; port <= (uint32_t)fakeibv_config()->nports; port++) {
        for (idx = 0; idx < FAKEIBV_GID_TBL_LEN; idx++) {
            struct ibv_gid_entry e;

            if (fakeibv_gid_entry(context, port, idx, &e) != 0)
                continue;
            if (n == max_entries)
                return -EINVAL;
            memcpy((char *)entries + n * entry_size, &e, sizeof(e));
            n++;
        }
    }
    return (ssize_t)n;
}

FAKEIBV_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
                                  __be16 *pkey)
{
    if (!fakeibv_port_ok(context, port_num) || index != 0)
        return -1;
    *pkey = htobe16(0xffff);
    return 0;
}

FAKEIBV_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
    if (!fakeibv_port_ok(context, port_num))
        return -EINVAL;
    return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -ENOENT;
}

/* ---- device and port attributes --------------------------------------- */

static void fakeibv_fill_device_attr(struct fakeibv_device *d, struct ibv_device_attr *a)
{
    const struct fakeibv_config *cfg = fakeibv_config();

    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "fakeibv-1.0");
    a->node_guid = d->node_guid;
    a->sys_image_guid = d->node_guid;
    a->max_mr_size = cfg->max_mr_size;
    a->page_size_cap = 0xfffff000;
    a->vendor_id = 0xfa4e; /* Not Mellanox: consumers must not assume mlx5. */
    a->vendor_part_id = 1;
    a->hw_ver = 1;
    a->max_qp = (int)cfg->max_qp;
    a->max_qp_wr = (int)cfg->max_qp_wr;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                          IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT;
    a->max_sge = FAKEIBV_MAX_SGE;
    a->max_sge_rd = FAKEIBV_MAX_SGE;
    a->max_cq = 1 << 16;
    a->max_cqe = (int)cfg->max_cqe;
    a->max_mr = (int)cfg->max_mr;
    a->max_pd = 1 << 16;
    a->max_qp_rd_atom = 16;
    a->max_qp_init_rd_atom = 16;
    a->max_res_rd_atom = 16 * (int)cfg->max_qp;
    a->atomic_cap = IBV_ATOMIC_HCA; /* fakeibv_xfer.c: fetch-and-add, compare-and-swap. */
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = (uint8_t)cfg->nports;
}

FAKEIBV_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    if (context == NULL || attr == NULL)
        return EINVAL;
    fakeibv_fill_device_attr(fakeibv_ctx(context)->dev, attr);
    return 0;
}

static int fakeibv_query_device_ex(struct ibv_context *context,
                                   const struct ibv_query_device_ex_input *input,
                                   struct ibv_device_attr_ex *attr, size_t attr_size)
{
    struct ibv_device_attr_ex full;

    if (input != NULL && input->comp_mask != 0)
        return EINVAL;
    if (attr_size < sizeof(attr->orig_attr))
        return EINVAL;
    memset(&full, 0, sizeof(full));
    fakeibv_fill_device_attr(fakeibv_ctx(context)->dev, &full.orig_attr);
    full.max_dm_size = 0;
    memcpy(attr, &full, attr_size < sizeof(full) ? attr_size : sizeof(full));
    return 0;
}

int fakeibv_query_port_attr(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    const struct fakeibv_config *cfg = fakeibv_config();
    struct fakeibv_port *p;
    int eth = cfg->link_layer == IBV_LINK_LAYER_ETHERNET;

    if (!fakeibv_port_ok(c, port))
        return EINVAL;
    p = &fakeibv_ctx(c)->dev->ports[port - 1];
    memset(a, 0, sizeof(*a));
    a->state = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = cfg->mtu;
    a->gid_tbl_len = eth ? FAKEIBV_GID_TBL_LEN : 1;
    a->port_cap_flags = eth ? IBV_PORT_IP_BASED_GIDS : IBV_PORT_CM_SUP;
    a->max_msg_sz = cfg->max_msg_sz;
    a->pkey_tbl_len = 1;
    a->lid = eth ? 0 : p->lid;
    a->sm_lid = eth ? 0 : 1;
    a->max_vl_num = 4;
    a->active_width = cfg->active_width;
    a->active_speed = cfg->active_speed;
    a->phys_state = a->state == IBV_PORT_ACTIVE ? 5 /* LinkUp */ : 3 /* Disabled */;
    a->link_layer = cfg->link_layer;
    return 0;
}

static int fakeibv_vctx_query_port(struct ibv_context *c, uint8_t port,
                                   struct ibv_port_attr *attr, size_t attr_len)
{
    struct ibv_port_attr full;
    int rc = fakeibv_query_port_attr(c, port, &full);

    if (rc != 0)
        return rc;
    /* A consumer built against newer headers passes a bigger struct (NCCL
     * reads active_speed_ex): fields we do not know must read as 0. */
    memset(attr, 0, attr_len);
    memcpy(attr, &full, attr_len < sizeof(full) ? attr_len : sizeof(full));
    return 0;
}

/* The exported symbol takes the old (compat) layout, which ends at `flags`;
 * new callers come through verbs_context::query_port instead. */
FAKEIBV_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                                  struct _compat_ibv_port_attr *port_attr)
{
    return fakeibv_vctx_query_port(context, port_num, (struct ibv_port_attr *)(void *)port_attr,
                                   offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* ---- open / close ------------------------------------------------------ */

struct ibv_qp *fakeibv_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);

FAKEIBV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct fakeibv_device *d = fakeibv_dev(device);
    struct fakeibv_context *ctx;
    struct ibv_context *c;
    int pipefd[2], rc;

    /* The listeners exist since the device list was built; no thread runs
     * until a QP reaches RTR. */
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        rc = errno;
        FAKEIBV_WARN("ibv_open_device(%s): pipe for async events failed: %s", device->name,
                     strerror(rc));
        free(ctx);
        errno = rc;
        return NULL;
    }
    ctx->dev = d;
    ctx->async_wfd = pipefd[1];
    pthread_mutex_init(&ctx->async_lock, NULL);
    pthread_cond_init(&ctx->async_acked, NULL);
    ctx->vctx.sz = sizeof(struct verbs_context);
    ctx->vctx.query_port = fakeibv_vctx_query_port;
    ctx->vctx.query_device_ex = fakeibv_query_device_ex;
    ctx->vctx.create_qp_ex = fakeibv_create_qp_ex;
    ctx->vctx.create_cq_ex = fakeibv_create_cq_ex;
    c = &ctx->vctx.context;
    c->device = device;
    c->cmd_fd = -1;
    c->async_fd = pipefd[0];
    c->num_comp_vectors = 1;
    c->abi_compat = __VERBS_ABI_IS_EXTENDED;
    pthread_mutex_init(&c->mutex, NULL);
    c->ops.poll_cq = fakeibv_poll_cq;
    c->ops.req_notify_cq = fakeibv_req_notify_cq;
    c->ops.post_send = fakeibv_post_send;
    c->ops.post_recv = fakeibv_post_recv;
    FAKEIBV_INFO("opened %s, port 1 lid %u", device->name, d->ports[0].lid);
    fakeibv_live_add(&fakeibv_live.contexts, 1);
    return c;
}

FAKEIBV_EXPORT int ibv_close_device(struct ibv_context *context)
{
    struct fakeibv_context *ctx = fakeibv_ctx(context);

    /* Closing the write end first wakes a thread blocked in
     * ibv_get_async_event() with EOF instead of leaving it asleep. */
    close(ctx->async_wfd);
    close(context->async_fd);
    pthread_mutex_destroy(&ctx->async_lock);
    pthread_cond_destroy(&ctx->async_acked);
    free(ctx);
    fakeibv_live_add(&fakeibv_live.contexts, -1);
    return 0;
}

FAKEIBV_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
    errno = EOPNOTSUPP;
    return NULL;
}

FAKEIBV_EXPORT uint16_t fakeibv_port_lid(struct ibv_context *ctx, uint8_t port)
{
    if (!fakeibv_port_ok(ctx, port))
        return 0;
    return fakeibv_ctx(ctx)->dev->ports[port - 1].lid;
}

/* ---- async events ------------------------------------------------------ */

void fakeibv_async_raise(struct fakeibv_context *ctx, const struct ibv_async_event *ev)
{
    char b = 1;

    pthread_mutex_lock(&ctx->async_lock);
    if (ctx->async_tail - ctx->async_head < FAKEIBV_ASYNC_QLEN) {
        ctx->async_q[ctx->async_tail % FAKEIBV_ASYNC_QLEN] = *ev;
        ctx->async_tail++;
        if (write(ctx->async_wfd, &b, 1) != 1)
            FAKEIBV_WARN("async event %s lost: %s", ibv_event_type_str(ev->event_type),
                         strerror(errno));
    } else {
        FAKEIBV_WARN("async event queue full; dropping %s", ibv_event_type_str(ev->event_type));
    }
    pthread_mutex_unlock(&ctx->async_lock);
}

/* The events whose element is a QP (verbs.h). */
static int fakeibv_event_is_qp(enum ibv_event_type type)
{
    switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return 1;
    default:
        return 0;
    }
}

FAKEIBV_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
    struct fakeibv_context *ctx = fakeibv_ctx(context);
    char b;
    ssize_t n;

    for (;;) {
        do {
            n = read(context->async_fd, &b, 1);
        } while (n < 0 && errno == EINTR);
        if (n != 1) {
            if (n == 0)
                errno = EIO; /* Context closed. */
            return -1;
        }
        pthread_mutex_lock(&ctx->async_lock);
        if (ctx->async_head != ctx->async_tail)
            break;
        /* Its event left with its QP (fakeibv_async_forget_qp): wait for the next one. */
        pthread_mutex_unlock(&ctx->async_lock);
    }
    *event = ctx->async_q[ctx->async_head % FAKEIBV_ASYNC_QLEN];
    ctx->async_head++;
    if (fakeibv_event_is_qp(event->event_type))
        fakeibv_qp(event->element.qp)->events_reported++;
    pthread_mutex_unlock(&ctx->async_lock);
    return 0;
}

FAKEIBV_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
    struct fakeibv_qp *qp;

    if (event == NULL || !fakeibv_event_is_qp(event->event_type))
        return; /* Only QPs are reference-counted against their events here. */
    qp = fakeibv_qp(event->element.qp);
    pthread_mutex_lock(&qp->ctx->async_lock);
    qp->events_completed++;
    pthread_cond_broadcast(&qp->ctx->async_acked);
    pthread_mutex_unlock(&qp->ctx->async_lock);
}

/* How long ibv_destroy_qp waits for an acknowledgement before it gives up with a warning. */
#define FAKEIBV_ACK_WAIT_S 30

void fakeibv_async_forget_qp(struct fakeibv_qp *qp)
{
    struct fakeibv_context *ctx = qp->ctx;
    struct ibv_qp *ibqp = &qp->qpx.qp_base;
    unsigned i, kept;
    struct timespec until;

    pthread_mutex_lock(&ctx->async_lock);
    /* Unread events about it go, the others keep their order. The pipe's extra bytes
     * make a reader find the queue empty and read on (ibv_get_async_event). */
    for (i = kept = ctx->async_head; i != ctx->async_tail; i++) {
        const struct ibv_async_event *ev = &ctx->async_q[i % FAKEIBV_ASYNC_QLEN];

        if (fakeibv_event_is_qp(ev->event_type) && ev->element.qp == ibqp)
            continue;
        ctx->async_q[kept++ % FAKEIBV_ASYNC_QLEN] = *ev;
    }
    ctx->async_tail = kept;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += FAKEIBV_ACK_WAIT_S;
    while (qp->events_completed != qp->events_reported) {
        if (pthread_cond_timedwait(&ctx->async_acked, &ctx->async_lock, &until) == ETIMEDOUT) {
            /* rdma-core would block for good: the consumer never acknowledged the event. */
            FAKEIBV_WARN("ibv_destroy_qp(0x%x): %u async event(s) handed out were not "
                         "acknowledged with ibv_ack_async_event after %d s; destroying anyway",
                         ibqp->qp_num, qp->events_reported - qp->events_completed,
                         FAKEIBV_ACK_WAIT_S);
            break;
        }
    }
    pthread_mutex_unlock(&ctx->async_lock);
}

/* ---- fork support: nothing to do, there is no pinned DMA memory --------- */

FAKEIBV_EXPORT int ibv_fork_init(void)
{
    return 0;
}

FAKEIBV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
    return IBV_FORK_UNNEEDED;
}

/* Not in verbs.h (rdma-core's driver.h), but exported by libibverbs. */
FAKEIBV_EXPORT int ibv_dontfork_range(void *base, size_t size);
FAKEIBV_EXPORT int ibv_dofork_range(void *base, size_t size);

FAKEIBV_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
    return 0;
}

FAKEIBV_EXPORT int ibv_dofork_range(void *base, size_t size)
{
    return 0;
}
