/*
 * Devices as NCCL numbers them. Each port is a device of one member; NCCL's
 * topology code may merge ports (NCCL_NET_MERGE_LEVEL, NCCL_NET_FORCE_MERGE)
 * through makeVDevice into a device whose comms stripe every message over
 * QPs on each member. Merged devices are appended and never removed: NCCL
 * keeps their numbers and names for the process's life.
 *
 * NCCL may call makeVDevice from several threads at once (a communicator's
 * init each). One lock makes the look-up of an existing merge and the
 * append one step: two calls never fill the same slot, and two calls for
 * the same ports get the same device. Readers take no lock: a slot is
 * complete before nvdev's release store publishes it, and is not written
 * again until fini.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib.h"

void ferry_ib_vdev_init(ferry_ib_state_t *st)
{
    int i;

    for (i = 0; i < st->ndev; i++) {
        st->vdevs[i].ndevs = 1;
        st->vdevs[i].devs[0] = i;
        snprintf(st->vdevs[i].name, sizeof(st->vdevs[i].name), "%s", st->devs[i].name);
    }
    atomic_store_explicit(&st->nvdev, st->ndev, memory_order_release);
}

const ferry_ib_vdev_t *ferry_ib_vdev_get(int dev, const char *fn)
{
    int n = atomic_load_explicit(&ferry_ib_state.nvdev, memory_order_acquire);

    if (dev >= 0 && dev < n)
        return &ferry_ib_state.vdevs[dev];
    FERRY_WARN("%s(dev=%d): the ib backend has %d device(s) (0..%d)", fn, dev, n, n - 1);
    return NULL;
}

/* Why devs[] cannot be merged, or NULL. */
static const char *ferry_ib_vdev_refuse(int ndevs, const int *devs, char *why, size_t len)
{
    const ferry_ib_state_t *st = &ferry_ib_state;
    int i, j;

    if (ndevs > 1 && !st->cfg.merge_nics)
        return "NCCL_IB_MERGE_NICS=0 forbids merging ports";
    for (i = 0; i < ndevs; i++) {
        if (devs[i] < 0 || devs[i] >= st->ndev) {
            snprintf(why, len, "device %d is not a port (ports are 0..%d; a merged device "
                     "cannot be merged again)", devs[i], st->ndev - 1);
            return why;
        }
        for (j = 0; j < i; j++)
            if (devs[j] == devs[i]) {
                snprintf(why, len, "device %d (%s) is listed twice", devs[i],
                         st->devs[devs[i]].name);
                return why;
            }
        if (st->devs[devs[i]].link_layer != st->devs[devs[0]].link_layer) {
            snprintf(why, len, "incompatible devices: %s is %s, %s is %s (every member needs "
                     "the same link layer)", st->devs[devs[0]].name,
                     st->devs[devs[0]].link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
                     st->devs[devs[i]].name,
                     st->devs[devs[i]].link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB");
            return why;
        }
    }
    if (ndevs > 1 && st->cfg.cm == FERRY_IB_CM_RDMACM)
        return "NCCL_FERRY_IB_CM=rdmacm connects one port per comm (merged devices need the "
               "default oob mode)";
    return NULL;
}

static pthread_mutex_t ferry_ib_vdev_lock = PTHREAD_MUTEX_INITIALIZER;

static ferry_status_t ferry_ib_make_vdevice_locked(int *dev_p, int ndevs, const int *devs)
{
    ferry_ib_state_t *st = &ferry_ib_state;
    int n = atomic_load_explicit(&st->nvdev, memory_order_acquire), i;
    char why[256], list[4 * (IBV_SYSFS_NAME_MAX + 48)];
    const char *refuse;
    ferry_ib_vdev_t *v;
    size_t off = 0;

    for (i = 0; i < ndevs && off < sizeof(list); i++)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%d", i ? "," : "", devs[i]);
    refuse = ferry_ib_vdev_refuse(ndevs, devs, why, sizeof(why));
    /* NCCL asks again at every communicator's init: the same ports give the same device. */
    for (i = 0; refuse == NULL && i < n; i++)
        if (st->vdevs[i].ndevs == ndevs &&
            memcmp(st->vdevs[i].devs, devs, sizeof(int) * (size_t)ndevs) == 0) {
            *dev_p = i;
            return FERRY_OK;
        }
    if (refuse == NULL && n >= FERRY_IB_MAX_VDEVS) {
        snprintf(why, sizeof(why), "%d devices exist already, the most ferry numbers", n);
        refuse = why;
    }
    if (refuse != NULL) {
        FERRY_WARN("makeVDevice(%s): not merged: %s; NCCL then uses the ports one by one",
                   list, refuse);
        return FERRY_ERR_USAGE;
    }
    v = &st->vdevs[n];
    memset(v, 0, sizeof(*v));
    v->ndevs = ndevs;
    for (i = 0, off = 0; i < ndevs; i++) {
        char member[sizeof(st->devs[0].name)];

        v->devs[i] = devs[i];
        memcpy(member, st->devs[devs[i]].name, sizeof(member)); /* Not a part of v: no overlap. */
        off += (size_t)snprintf(v->name + off, sizeof(v->name) - off, "%s%.*s", i ? "+" : "",
                                (int)sizeof(member), member);
    }
    atomic_store_explicit(&st->nvdev, n + 1, memory_order_release);
    for (i = 0, off = 0; i < ndevs && off < sizeof(list); i++) {
        const ferry_ib_dev_t *d = &st->devs[devs[i]];

        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s %s %d Mbps", i ? ", " : "",
                                d->name, atomic_load(&d->port_down) ? "DOWN" : "ACTIVE",
                                d->speed_mbps);
    }
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "ib backend: device %d = %s (%d ports merged: "
               "%s; each message is striped over them, and a port that fails leaves its work to "
               "the others)", n, v->name, ndevs, list);
    *dev_p = n;
    return FERRY_OK;
}

ferry_status_t ferry_ib_make_vdevice(int *dev_p, int ndevs, const int *devs)
{
    ferry_status_t status;

    pthread_mutex_lock(&ferry_ib_vdev_lock);
    status = ferry_ib_make_vdevice_locked(dev_p, ndevs, devs);
    pthread_mutex_unlock(&ferry_ib_vdev_lock);
    return status;
}

/*
 * A merged device's rail and plane: the members' own when all have the same
 * one, else unknown (-1). NCCL's graph search then holds a channel to that
 * rail/plane when every member is on it, and to nothing when they differ.
 * (NCCL's IB gives a merge across planes a plane id of its own, a bit per
 * member plane; ferry says "unknown" rather than invent an id.)
 */
static int ferry_ib_vdev_common_id(int have, int id)
{
    return have == id ? have : -1;
}

void ferry_ib_vdev_props(const ferry_ib_vdev_t *v, ferry_props_t *props_p)
{
    int i, speed = 0;

    props_p->name = v->name;
    for (i = 0; i < v->ndevs; i++) {
        const ferry_ib_dev_t *d = &ferry_ib_state.devs[v->devs[i]];

        speed += d->speed_mbps;
        /* props_p holds the first member's: any member unlike it (or unknown) unsets it. */
        props_p->rail_id = ferry_ib_vdev_common_id(props_p->rail_id, d->rail_id);
        props_p->plane_id = ferry_ib_vdev_common_id(props_p->plane_id, d->plane_id);
        props_p->ptr_support &= ferry_ib_gdr_ptr_support(d);
        if (d->hca->attr.max_qp < props_p->max_comms)
            props_p->max_comms = d->hca->attr.max_qp;
        props_p->vdevs[i] = v->devs[i];
    }
    props_p->speed_mbps = speed;
    props_p->vdevs_n = v->ndevs;
}
