/*
 * The handle's reference to the connect in progress, for both connection
 * modes (ib_connect.c, ib_cm_connect.c). The handle's bytes come from the
 * peer's listen() through NCCL's bootstrap, so the reference is checked
 * against this process's table (core/stage_table.h), never followed.
 */
#include <stdio.h>

#include "core/log.h"
#include "ib/ib_comm.h"

ferry_status_t ferry_ib_handle_stage(ferry_ib_handle_t *h, int dev, ferry_stage_kind_t kind,
                                     void **stage_p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    ferry_status_t status;
    char why[320], peer[64];

    *stage_p = NULL;
    status = ferry_ib_handle_check(h, dev);
    if (status != FERRY_OK || ferry_stage_ref_none(&h->stage))
        return status;
    *stage_p = ferry_stage_get(&h->stage, kind, h->token, why, sizeof(why));
    if (*stage_p != NULL)
        return FERRY_OK;
    if (ferry_ib_handle_sockaddr(h, &ss, &len) == 0)
        ferry_ib_addr_str((struct sockaddr *)&ss, peer, sizeof(peer));
    else
        snprintf(peer, sizeof(peer), "an address of family %u", h->family);
    FERRY_WARN_LIMITED("ib connect(dev=%d) to %s: handle %p is not one that listen() produced, "
                       "nor one that a connect() in this process is still working on (stale, "
                       "forged, or from another process): %s; pass connect() the peer's handle "
                       "exactly as its listen() produced it (connect-state bytes zero), and the "
                       "same handle again on each call until it returns a comm", dev, peer,
                       (void *)h, why);
    return FERRY_ERR_USAGE;
}

ferry_status_t ferry_ib_handle_set_stage(ferry_ib_handle_t *h, ferry_stage_kind_t kind,
                                         void *stage, const char *peer)
{
    if (ferry_stage_put(stage, kind, h->token, &h->stage) == FERRY_OK)
        return FERRY_OK;
    FERRY_WARN("ib connect to %s: no room to keep the connect's state (too many connects in "
               "progress in this process)", peer);
    return FERRY_ERR_NO_MEMORY;
}

void ferry_ib_handle_clear_stage(ferry_ib_handle_t *h)
{
    ferry_stage_drop(&h->stage);
}
