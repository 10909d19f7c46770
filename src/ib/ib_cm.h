/*
 * NCCL_FERRY_IB_CM=rdmacm, the device half's view: librdmacm loaded and
 * checked at init, and the device contexts it opened, which the HCAs use
 * instead of their own so that every PD, CQ and MR matches the rdma_cm
 * ids' verbs context. The connection half is declared in ib_comm.h.
 */
#ifndef FERRY_IB_CM_H
#define FERRY_IB_CM_H

#include "ferry/verbs_abi.h"

#include "core/status.h"
#include "ib/ib_config.h"

/* Init: librdmacm loads and its device answers; else a WARN naming NCCL_FERRY_IB_CM=oob. */
ferry_status_t ferry_ib_cm_init(const ferry_ib_config_t *cfg);
void ferry_ib_cm_fini(void);
/* librdmacm's context for device, or NULL (oob mode, or librdmacm does not list it). */
struct ibv_context *ferry_ib_cm_device_ctx(struct ibv_device *device);

#endif
