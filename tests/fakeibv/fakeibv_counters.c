/*
 * fakeibv port counters: the traffic each port of this process moved, as a
 * real HCA counts it in /sys/class/infiniband/<dev>/ports/<p>/counters/
 * (port_xmit_data and port_rcv_data in units of 4 octets, port_xmit_packets,
 * port_rcv_packets). The data path counts into the port's atomics; the
 * sysfs files follow whenever a QP on the port is reset or destroyed, the
 * port changes state, or fakeibv_port_counters() is called. Not from the
 * data path: writing them opens files, which a process counting its own
 * descriptors (ferry's soak) would see come and go, and costs a clock read
 * per work request.
 *
 * Only payload is counted (no headers): a WRITE, WRITE_WITH_IMM or SEND
 * where it leaves and where it arrives, READ data where the response leaves
 * and arrives. A message of n bytes is max(1, ceil(n / path MTU)) packets;
 * a READ request, an ACK or a NAK is one.
 */
#include <errno.h>

#include "fakeibv_internal.h"

void fakeibv_port_count(struct fakeibv_qp *qp, int xmit, uint64_t bytes, int64_t pkts_len)
{
    struct fakeibv_port *p;
    uint64_t pkts = 1;

    if (qp->data_port < 1 || qp->data_port > FAKEIBV_MAX_PORTS)
        return;
    p = &qp->ctx->dev->ports[qp->data_port - 1];
    if (pkts_len > 0 && qp->mtu_bytes > 0)
        pkts = ((uint64_t)pkts_len + qp->mtu_bytes - 1) / qp->mtu_bytes;
    __atomic_add_fetch(xmit ? &p->ctr_xmit_bytes : &p->ctr_rcv_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(xmit ? &p->ctr_xmit_pkts : &p->ctr_rcv_pkts, pkts, __ATOMIC_RELAXED);
}

void fakeibv_port_counters_flush(struct fakeibv_qp *qp)
{
    if (qp->data_port >= 1 && qp->data_port <= FAKEIBV_MAX_PORTS)
        fakeibv_sysfs_port_counters(qp->ctx->dev, qp->data_port);
}

FAKEIBV_EXPORT int fakeibv_port_counters(struct ibv_context *ctx, uint8_t port,
                                         struct fakeibv_port_counters *c)
{
    struct fakeibv_device *dev;
    const struct fakeibv_port *p;

    if (ctx == NULL || c == NULL || port < 1 || port > fakeibv_config()->nports)
        return EINVAL;
    dev = fakeibv_ctx(ctx)->dev;
    p = &dev->ports[port - 1];
    c->xmit_bytes = __atomic_load_n(&p->ctr_xmit_bytes, __ATOMIC_RELAXED);
    c->rcv_bytes = __atomic_load_n(&p->ctr_rcv_bytes, __ATOMIC_RELAXED);
    c->xmit_packets = __atomic_load_n(&p->ctr_xmit_pkts, __ATOMIC_RELAXED);
    c->rcv_packets = __atomic_load_n(&p->ctr_rcv_pkts, __ATOMIC_RELAXED);
    c->xmit_data = c->xmit_bytes / 4;
    c->rcv_data = c->rcv_bytes / 4;
    fakeibv_sysfs_port_counters(dev, port);
    return 0;
}
