/*
 * Which GID a port's connections use, chosen as NCCL 2.28 chooses it
 * (ncclIbGetGidIndex): on InfiniBand the routable-FLID index when its GID
 * carries a FLID, else 0; on RoCE NCCL_IB_GID_INDEX, or a scan of the table
 * for a configured, non-link-local GID of NCCL_IB_ADDR_FAMILY inside
 * NCCL_IB_ADDR_RANGE with NCCL_IB_ROCE_VERSION_NUM. The choice itself is a
 * pure function over a copy of the table, so tests need no device.
 */
#ifndef FERRY_IB_GID_H
#define FERRY_IB_GID_H

#include <stddef.h>

#include "ferry/verbs_abi.h"

#include "core/status.h"

typedef struct ferry_ib_gid_entry {
    union ibv_gid gid;
    int           roce_version; /* 1 or 2; 0 unknown (no sysfs, no ibv_query_gid_ex). */
} ferry_ib_gid_entry_t;

/* What the user asks for (NCCL_IB_* variables). */
typedef struct ferry_ib_gid_want {
    int           gid_index;           /* NCCL_IB_GID_INDEX, -1 = scan. */
    int           routable_flid_index; /* NCCL_IB_ROUTABLE_FLID_GID_INDEX. */
    int           family;              /* AF_INET or AF_INET6. */
    int           has_range;           /* NCCL_IB_ADDR_RANGE applies... */
    unsigned char range[16];           /* ...network order, 4 bytes for AF_INET... */
    int           prefixlen;           /* ...and its length. */
    int           roce_version;        /* NCCL_IB_ROCE_VERSION_NUM. */
} ferry_ib_gid_want_t;

/*
 * Index chosen among gids[0..n) of a port with link_layer, and in why the
 * reason in words ("routable FLID 0x12 at NCCL_IB_ROUTABLE_FLID_GID_INDEX=1",
 * "AF_INET, RoCE v2", ...). NCCL_IB_GID_INDEX is returned as given, even
 * beyond n (the caller checks it against the table).
 */
int ferry_ib_gid_choose(int link_layer, const ferry_ib_gid_entry_t *gids, int n,
                        const ferry_ib_gid_want_t *want, char *why, size_t len);

/* "fe80::1" or "::ffff:10.0.0.1" of a GID. */
void ferry_ib_gid_str(const union ibv_gid *gid, char *buf, size_t len);

struct ferry_ib_dev;
/*
 * Query the port's GID table (types from sysfs, else ibv_query_gid_ex),
 * choose, set dev->gid_index and dev->gid, log the choice (INFO, NET). On
 * failure a WARN naming dev, the verb and errno: FERRY_ERR_IO, or
 * FERRY_ERR_USAGE for an NCCL_IB_GID_INDEX past the table.
 */
ferry_status_t ferry_ib_gid_select(struct ferry_ib_dev *dev);

#endif
