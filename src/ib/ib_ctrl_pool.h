/*
 * Control blocks of ib comms (CTS FIFO, sizes FIFO) carved from shared
 * chunks, so that the comms of a chunk share one memory registration per
 * HCA instead of pinning and keying a region each (ib_ctrl_pool.c).
 */
#ifndef FERRY_IB_CTRL_POOL_H
#define FERRY_IB_CTRL_POOL_H

#include <stddef.h>

#include "core/status.h"
#include "ib/ib.h"

/* A zeroed, page-aligned block of len bytes (a multiple of the page); NULL when out of memory. */
void *ferry_ib_ctrl_alloc(size_t len);
/* Gives the block back; every registration taken on it must be put first. */
void ferry_ib_ctrl_free(void *ctrl);
/*
 * The registration covering the block's whole chunk on hca (one reference,
 * dropped with ferry_ib_mr_put), for local write and remote write, strictly
 * ordered.
 */
ferry_status_t ferry_ib_ctrl_mr_get(ferry_ib_hca_t *hca, void *ctrl, struct ibv_mr **mr_p,
                                    char *err, size_t len);

#endif
