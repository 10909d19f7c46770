/* The per-HCA async-event thread (the watch list is declared in ib.h). */
#ifndef FERRY_IB_ASYNC_H
#define FERRY_IB_ASYNC_H

#include "ib/ib.h"

/* Start "ferry-ibasync<hca->index>" on an open HCA. WARN and FERRY_ERR_IO on failure. */
ferry_status_t ferry_ib_async_start(ferry_ib_hca_t *hca);
/* Stop and join it (within about a poll interval at worst); no-op when not started. */
void ferry_ib_async_stop(ferry_ib_hca_t *hca);

#endif
