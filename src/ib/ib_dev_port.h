/*
 * The device half's internals between ib_dev.c (the backend's entry points)
 * and ib_dev_port.c (opening HCAs, turning their ports into devices).
 */
#ifndef FERRY_IB_DEV_PORT_H
#define FERRY_IB_DEV_PORT_H

#include <stddef.h>

#include "ib/ib.h"
#include "ib/ib_hca_filter.h"

/* NCCL's ibvSpeeds x ibvWidths: Mbps of a port from its active_speed(_ex) and active_width codes. */
int ferry_ib_port_speed_mbps(unsigned active_speed, unsigned active_speed_ex, unsigned width);

/*
 * Why port `port` of HCA `hca` is not used ("port state DOWN", "filtered
 * out by NCCL_IB_HCA", "link layer 3 is neither InfiniBand nor Ethernet"),
 * or NULL when it is usable.
 */
const char *ferry_ib_port_skip_reason(const char *hca, int port, const struct ibv_port_attr *attr,
                                      const ferry_ib_hca_filter_t *filter);

/*
 * Open `device` into hca: context, device attributes, protection domain,
 * sysfs facts, the MR cache's lock. On failure the verb and errno in why
 * and nothing left open.
 */
ferry_status_t ferry_ib_hca_open(ferry_ib_hca_t *hca, struct ibv_device *device, int merge_vfs,
                                 char *why, size_t len);
/* Release what ferry_ib_hca_open (and the MR cache) hold; the async thread must be stopped. */
void ferry_ib_hca_close(ferry_ib_hca_t *hca);

/*
 * Append a device to st for every usable port of hca (GID chosen, speed,
 * AR, ...); "name:port why; " for every other port in skipped. An error,
 * with its WARN logged, when a port could not be set up (a failed query:
 * FERRY_ERR_IO; an NCCL_IB_GID_INDEX past the table: FERRY_ERR_USAGE).
 */
ferry_status_t ferry_ib_hca_add_ports(ferry_ib_state_t *st, ferry_ib_hca_t *hca,
                                      const ferry_ib_hca_filter_t *filter, char *skipped,
                                      size_t len);

/* NCCL's DMA-BUF probe and the relaxed-ordering choice, once the HCA is open. */
void ferry_ib_hca_probe(ferry_ib_hca_t *hca, const ferry_ib_config_t *cfg);

#endif
