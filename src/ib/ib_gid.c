#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ib/ib.h"
#include "ib/ib_gid.h"
#include "ib/ib_sysfs.h"

/* The four 32-bit words of a GID, host order. */
static uint32_t ferry_ib_gid_word(const union ibv_gid *gid, int i)
{
    uint32_t w;

    memcpy(&w, gid->raw + 4 * i, sizeof(w));
    return ntohl(w);
}

/* ::ffff:a.b.c.d, and NCCL's IPv4-mapped multicast ff0e::ffff:a.b.c.d. */
static int ferry_ib_gid_family(const union ibv_gid *gid)
{
    uint32_t w0 = ferry_ib_gid_word(gid, 0), w1 = ferry_ib_gid_word(gid, 1);
    uint32_t w2 = ferry_ib_gid_word(gid, 2);

    return ((w0 == 0 || w0 == 0xff0e0000u) && w1 == 0 && w2 == 0x0000ffffu) ? AF_INET
                                                                          : AF_INET6;
}

/* Not all zeros and not the bare fe80:: prefix (a port without addresses). */
static int ferry_ib_gid_configured(const union ibv_gid *gid)
{
    uint32_t w0 = ferry_ib_gid_word(gid, 0);
    uint32_t rest = ferry_ib_gid_word(gid, 1) | ferry_ib_gid_word(gid, 2) |
                    ferry_ib_gid_word(gid, 3);

    return !((w0 | rest) == 0 || (w0 == 0xfe800000u && rest == 0));
}

static int ferry_ib_gid_link_local(const union ibv_gid *gid)
{
    return ferry_ib_gid_word(gid, 0) == 0xfe800000u && ferry_ib_gid_word(gid, 1) == 0;
}

static int ferry_ib_gid_valid(const union ibv_gid *gid)
{
    return ferry_ib_gid_configured(gid) && !ferry_ib_gid_link_local(gid);
}

/* NCCL's matchGidAddrPrefix: AF_INET compares the last word, AF_INET6 word by word. */
static int ferry_ib_gid_in_range(const ferry_ib_gid_want_t *want, const union ibv_gid *gid)
{
    int left = want->prefixlen, i;

    if (!want->has_range || left == 0)
        return 1;
    if (want->family == AF_INET) {
        uint32_t base, mask = left >= 32 ? 0xffffffffu : ~(0xffffffffu >> left);

        memcpy(&base, want->range, sizeof(base));
        return ((ntohl(base) ^ ferry_ib_gid_word(gid, 3)) & mask) == 0;
    }
    for (i = 0; i < 4 && left > 0; i++, left -= 32) {
        uint32_t base, mask = left >= 32 ? 0xffffffffu : ~(0xffffffffu >> left);

        memcpy(&base, want->range + 4 * i, sizeof(base));
        if (((ntohl(base) ^ ferry_ib_gid_word(gid, i)) & mask) != 0)
            return 0;
    }
    return 1;
}

/*
 * NCCL's ncclUpdateGidIndex: move to the candidate when it brings the
 * wanted family (and range) that the current choice lacks, or, within the
 * family, when it is valid and has the wanted RoCE version where the
 * current one differs or is not valid.
 */
static int ferry_ib_gid_better(const ferry_ib_gid_entry_t *cur, const ferry_ib_gid_entry_t *cand,
                               const ferry_ib_gid_want_t *want)
{
    int cur_fam = ferry_ib_gid_family(&cur->gid), cand_fam = ferry_ib_gid_family(&cand->gid);
    int in_range = ferry_ib_gid_in_range(want, &cand->gid);

    if (cand_fam != cur_fam && cand_fam == want->family && in_range)
        return 1;
    if (cand_fam != want->family || !ferry_ib_gid_valid(&cand->gid) || !in_range)
        return 0;
    return (cur->roce_version != cand->roce_version || !ferry_ib_gid_valid(&cur->gid)) &&
           cand->roce_version == want->roce_version;
}

static const char *ferry_ib_gid_family_name(int family)
{
    return family == AF_INET ? "AF_INET" : "AF_INET6";
}

/* Why the scan's choice is what it is, or in what it falls short of the wish. */
static void ferry_ib_gid_scan_why(const ferry_ib_gid_entry_t *g, const ferry_ib_gid_want_t *want,
                                  char *why, size_t len)
{
    const char *version = g->roce_version == 1 ? "RoCE v1"
                          : g->roce_version == 2 ? "RoCE v2"
                                                 : "RoCE version unknown";

    if (ferry_ib_gid_family(&g->gid) != want->family || !ferry_ib_gid_valid(&g->gid) ||
        !ferry_ib_gid_in_range(want, &g->gid))
        snprintf(why, len, "no GID of NCCL_IB_ADDR_FAMILY=%s%s that is not link-local; "
                 "index 0 (%s)", ferry_ib_gid_family_name(want->family),
                 want->has_range ? " inside NCCL_IB_ADDR_RANGE" : "", version);
    else if (g->roce_version != want->roce_version)
        snprintf(why, len, "%s%s, but %s where NCCL_IB_ROCE_VERSION_NUM=%d is wanted",
                 ferry_ib_gid_family_name(want->family),
                 want->has_range ? " inside NCCL_IB_ADDR_RANGE" : "", version,
                 want->roce_version);
    else
        snprintf(why, len, "%s%s, %s", ferry_ib_gid_family_name(want->family),
                 want->has_range ? " inside NCCL_IB_ADDR_RANGE" : "", version);
}

int ferry_ib_gid_choose(int link_layer, const ferry_ib_gid_entry_t *gids, int n,
                        const ferry_ib_gid_want_t *want, char *why, size_t len)
{
    int best = 0, i;

    if (link_layer == IBV_LINK_LAYER_INFINIBAND) {
        int r = want->routable_flid_index;
        /* The FLID sits in bytes 4-5 of the GID's subnet prefix. */
        unsigned flid = r < n ? (unsigned)gids[r].gid.raw[4] << 8 | gids[r].gid.raw[5] : 0;

        if (flid != 0) {
            snprintf(why, len, "InfiniBand, routable FLID 0x%x at NCCL_IB_ROUTABLE_FLID_GID_INDEX=%d",
                     flid, r);
            return r;
        }
        snprintf(why, len, "InfiniBand, no routable FLID at NCCL_IB_ROUTABLE_FLID_GID_INDEX=%d", r);
        return 0;
    }
    if (want->gid_index >= 0) {
        snprintf(why, len, "NCCL_IB_GID_INDEX=%d", want->gid_index);
        return want->gid_index;
    }
    if (n <= 0) {
        snprintf(why, len, "empty GID table");
        return 0;
    }
    for (i = 1; i < n; i++)
        if (ferry_ib_gid_better(&gids[best], &gids[i], want))
            best = i;
    ferry_ib_gid_scan_why(&gids[best], want, why, len);
    return best;
}

void ferry_ib_gid_str(const union ibv_gid *gid, char *buf, size_t len)
{
    char text[INET6_ADDRSTRLEN];

    if (inet_ntop(AF_INET6, gid->raw, text, sizeof(text)) == NULL)
        snprintf(text, sizeof(text), "?");
    snprintf(buf, len, "%s", text);
}

/* Fill want from the backend's configuration. */
static void ferry_ib_gid_want(const ferry_ib_config_t *cfg, ferry_ib_gid_want_t *want)
{
    memset(want, 0, sizeof(*want));
    want->gid_index = cfg->gid_index;
    want->routable_flid_index = cfg->routable_flid_gid_index;
    want->family = cfg->addr_family;
    want->roce_version = cfg->roce_version;
    want->has_range = ferry_ib_config_addr_range(cfg, cfg->addr_family, want->range,
                                                 &want->prefixlen);
}

/* The RoCE version of one GID: sysfs first (as NCCL), then the verbs' own gid type. */
static int ferry_ib_gid_version(const ferry_ib_dev_t *dev, int index)
{
    int v = ferry_ib_sysfs_roce_version(dev->hca->ibdev_path, dev->port, index);

    if (v != 0)
        return v;
    switch (ferry_ibv_query_gid_type(dev->hca->ctx, (uint8_t)dev->port, index)) {
    case IBV_GID_TYPE_ROCE_V1: return 1;
    case IBV_GID_TYPE_ROCE_V2: return 2;
    default: return 0;
    }
}

/* The entries the choice reads: the whole table for a RoCE scan, up to the FLID index on IB. */
static ferry_status_t ferry_ib_gid_query_table(ferry_ib_dev_t *dev, ferry_ib_gid_entry_t *gids,
                                               int n)
{
    int i;

    for (i = 0; i < n; i++) {
        if (ferry_ibv.query_gid(dev->hca->ctx, (uint8_t)dev->port, i, &gids[i].gid) != 0) {
            FERRY_WARN("ib %s: ibv_query_gid(index %d) failed: %s; check the port with "
                       "`ibv_devinfo -v -d %s`", dev->name, i, strerror(errno), dev->hca->name);
            return FERRY_ERR_IO;
        }
        gids[i].roce_version =
            dev->link_layer == IBV_LINK_LAYER_ETHERNET ? ferry_ib_gid_version(dev, i) : 0;
    }
    return FERRY_OK;
}

ferry_status_t ferry_ib_gid_select(ferry_ib_dev_t *dev)
{
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    int tbl = dev->port_attr.gid_tbl_len, n = tbl, index;
    ferry_ib_gid_entry_t *gids;
    ferry_ib_gid_want_t want;
    ferry_status_t status;
    char why[256], text[INET6_ADDRSTRLEN];

    ferry_ib_gid_want(cfg, &want);
    if (dev->link_layer == IBV_LINK_LAYER_INFINIBAND)
        n = want.routable_flid_index < tbl ? want.routable_flid_index + 1 : (tbl > 0 ? 1 : 0);
    else if (want.gid_index >= 0)
        n = 0;
    gids = calloc(n > 0 ? (size_t)n : 1, sizeof(*gids));
    if (gids == NULL)
        return FERRY_ERR_NO_MEMORY;
    status = ferry_ib_gid_query_table(dev, gids, n);
    if (status != FERRY_OK)
        goto out_free;
    index = ferry_ib_gid_choose(dev->link_layer, gids, n, &want, why, sizeof(why));
    if (dev->link_layer == IBV_LINK_LAYER_ETHERNET && want.gid_index >= 0 && index >= tbl) {
        FERRY_WARN("ib %s: NCCL_IB_GID_INDEX=%d is past the port's GID table (%d entries); "
                   "unset it or pick an index from `show_gids` / `ibv_devinfo -v`", dev->name,
                   index, tbl);
        status = FERRY_ERR_USAGE;
        goto out_free;
    }
    if (index < n) {
        dev->gid = gids[index].gid;
    } else if (ferry_ibv.query_gid(dev->hca->ctx, (uint8_t)dev->port, index, &dev->gid) != 0) {
        FERRY_WARN("ib %s: ibv_query_gid(index %d from NCCL_IB_GID_INDEX) failed: %s; unset "
                   "NCCL_IB_GID_INDEX or pick an index from `show_gids`", dev->name, index,
                   strerror(errno));
        status = FERRY_ERR_IO;
        goto out_free;
    }
    dev->gid_index = index;
    ferry_ib_gid_str(&dev->gid, text, sizeof(text));
    FERRY_INFO(FERRY_LOG_NET, "ib %s: GID index %d %s (%s)", dev->name, index, text, why);
out_free:
    free(gids);
    return status;
}
