#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/config_table.h"
#include "core/log.h"
#include "ib/ib_config.h"
#include "ib/ib_hca_filter.h"

_Static_assert(FERRY_IB_CFG_COUNT <= sizeof(((ferry_ib_config_t *)0)->src) /
                                         sizeof(((ferry_ib_config_t *)0)->src[0]),
               "ferry_ib_config_t.src holds a source per variable");

#define FERRY_IB_CFG_FIELD(_f) .offset = offsetof(ferry_ib_config_t, _f), \
                               .width = sizeof(((ferry_ib_config_t *)0)->_f)

static const ferry_cfg_choice_t ferry_ib_cfg_families[] = {
    {"AF_INET", AF_INET}, {"AF_INET6", AF_INET6}, {NULL, 0},
};

/* NCCL_IB_ADAPTIVE_ROUTING: -2 auto, or a forced 0/1; anything else would read as "on" in NCCL. */
static const ferry_cfg_choice_t ferry_ib_cfg_ar[] = {
    {"-2", -2}, {"0", 0}, {"1", 1}, {NULL, 0},
};

static const ferry_cfg_choice_t ferry_ib_cfg_cm[] = {
    {"oob", FERRY_IB_CM_OOB}, {"rdmacm", FERRY_IB_CM_RDMACM}, {NULL, 0},
};

/* "addr/len" of either family; the family is known once the address parses. */
static int ferry_ib_cfg_parse_cidr(const char *text, int *family_p, unsigned char addr[16],
                                   int *prefixlen_p)
{
    char copy[64], *slash, *end;
    long len;

    if (strlen(text) >= sizeof(copy))
        return -1;
    strcpy(copy, text);
    slash = strchr(copy, '/');
    if (slash == NULL || slash[1] == '\0')
        return -1;
    *slash = '\0';
    if (inet_pton(AF_INET, copy, addr) == 1)
        *family_p = AF_INET;
    else if (inet_pton(AF_INET6, copy, addr) == 1)
        *family_p = AF_INET6;
    else
        return -1;
    len = strtol(slash + 1, &end, 10);
    if (*end != '\0' || len < 0 || len > (*family_p == AF_INET ? 32 : 128))
        return -1;
    *prefixlen_p = (int)len;
    return 0;
}

static int ferry_ib_cfg_check_cidr(const char *text, char *why, size_t why_len)
{
    unsigned char addr[16];
    int family, prefixlen;

    (void)why;
    (void)why_len;
    return ferry_ib_cfg_parse_cidr(text, &family, addr, &prefixlen);
}

static int ferry_ib_cfg_check_hca(const char *text, char *why, size_t why_len)
{
    ferry_ib_hca_filter_t filter;

    return ferry_ib_hca_filter_parse_why(text, &filter, why, why_len);
}

/* GPU memory: NCCL_FERRY_IB_GDR and NCCL_FERRY_IB_FLUSH. */
static const ferry_cfg_choice_t ferry_ib_cfg_gdr[] = {
    {"-1", -1}, {"0", 0}, {"1", 1}, {NULL, 0},
};
static const ferry_cfg_choice_t ferry_ib_cfg_flush[] = {
    {"auto", FERRY_IB_FLUSH_AUTO}, {"read", FERRY_IB_FLUSH_READ}, {"cuda", FERRY_IB_FLUSH_CUDA},
    {NULL, 0},
};

static const ferry_cfg_var_t ferry_ib_cfg_vars[FERRY_IB_CFG_COUNT] = {
    [FERRY_IB_CFG_HCA] = {"NCCL_IB_HCA", FERRY_CFG_KIND_TEXT, FERRY_IB_CFG_FIELD(hca), 0, 0, 0,
        "HCA names as prefixes with optional :port, :rail and :plane "
        "(name[:port[:rail[:plane]]], rail and plane 0..32767 or empty for none), "
        "comma-separated; ^ first excludes, = (after ^ if both) wants exact names; names of at "
        "most 63 characters",
        .check = ferry_ib_cfg_check_hca, .unset = "<all>"},
    [FERRY_IB_CFG_DISABLE] = {"NCCL_IB_DISABLE", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(disable), 0, 0, 1, "0 or 1 (1: no ib backend)"},
    [FERRY_IB_CFG_GID_INDEX] = {"NCCL_IB_GID_INDEX", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(gid_index), -1, -1, 65535,
        "-1 (choose the RoCE GID automatically) or a GID table index up to 65535"},
    [FERRY_IB_CFG_ADDR_FAMILY] = {"NCCL_IB_ADDR_FAMILY", FERRY_CFG_KIND_CHOICE,
        FERRY_IB_CFG_FIELD(addr_family), AF_INET, 0, 0, "AF_INET or AF_INET6",
        .choices = ferry_ib_cfg_families},
    [FERRY_IB_CFG_ADDR_RANGE] = {"NCCL_IB_ADDR_RANGE", FERRY_CFG_KIND_TEXT,
        FERRY_IB_CFG_FIELD(addr_range), 0, 0, 0,
        "a CIDR block such as 10.0.0.0/8 or fd00::/16 (RoCE GIDs are chosen inside it)",
        .check = ferry_ib_cfg_check_cidr, .unset = "<any>"},
    [FERRY_IB_CFG_ROCE_VERSION] = {"NCCL_IB_ROCE_VERSION_NUM", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(roce_version), 2, 1, 2, "1 or 2 (the RoCE version of the GID chosen)"},
    [FERRY_IB_CFG_ROUTABLE_FLID_GID_INDEX] = {"NCCL_IB_ROUTABLE_FLID_GID_INDEX",
        FERRY_CFG_KIND_INT, FERRY_IB_CFG_FIELD(routable_flid_gid_index), 1, 0, 65535,
        "a GID table index up to 65535 (InfiniBand: used when its GID has a routable FLID)"},
    [FERRY_IB_CFG_TC] = {"NCCL_IB_TC", FERRY_CFG_KIND_INT, FERRY_IB_CFG_FIELD(tc), -1, -1, 255,
        "-1 (the communicator's traffic class, else 0) or a traffic class 0..255"},
    [FERRY_IB_CFG_FIFO_TC] = {"NCCL_IB_FIFO_TC", FERRY_CFG_KIND_INT, FERRY_IB_CFG_FIELD(fifo_tc),
        -1, -1, 255, "-1 (same as NCCL_IB_TC) or a traffic class 0..255 for clear-to-send writes"},
    [FERRY_IB_CFG_SL] = {"NCCL_IB_SL", FERRY_CFG_KIND_INT, FERRY_IB_CFG_FIELD(sl), -1, -1, 15,
        "-1 (the communicator's, else 0) or a service level 0..15"},
    [FERRY_IB_CFG_TIMEOUT] = {"NCCL_IB_TIMEOUT", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(timeout), 20, 0, 31,
        "0..31 (QP ack timeout, 4.096 us x 2^value; 0 waits forever)"},
    [FERRY_IB_CFG_RETRY_CNT] = {"NCCL_IB_RETRY_CNT", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(retry_cnt), 7, 0, 7, "0..7 (QP transport retries)"},
    [FERRY_IB_CFG_PKEY] = {"NCCL_IB_PKEY", FERRY_CFG_KIND_INT, FERRY_IB_CFG_FIELD(pkey), 0, 0,
        65535, "a partition key table index 0..65535"},
    [FERRY_IB_CFG_USE_INLINE] = {"NCCL_IB_USE_INLINE", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(use_inline), 0, 0, 1, "0 or 1 (1: clear-to-send entries go inline)"},
    [FERRY_IB_CFG_QPS_PER_CONN] = {"NCCL_IB_QPS_PER_CONNECTION", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(qps_per_conn), 1, 1, 128, "1..128 (data QPs per connection)"},
    [FERRY_IB_CFG_SPLIT_DATA_ON_QPS] = {"NCCL_IB_SPLIT_DATA_ON_QPS", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(split_data_on_qps), 0, 0, 1,
        "0 or 1 (1: every message is split across all QPs)"},
    [FERRY_IB_CFG_AR_THRESHOLD] = {"NCCL_IB_AR_THRESHOLD", FERRY_CFG_KIND_SIZE,
        FERRY_IB_CFG_FIELD(ar_threshold), 8192, 0, 1LL << 40,
        "a size up to 1T (with adaptive routing, larger messages get a separate completion write)"},
    [FERRY_IB_CFG_ADAPTIVE_ROUTING] = {"NCCL_IB_ADAPTIVE_ROUTING", FERRY_CFG_KIND_CHOICE,
        FERRY_IB_CFG_FIELD(adaptive_routing), -2, 0, 0,
        "-2 (auto: on for InfiniBand, off for RoCE), 0 or 1", .choices = ferry_ib_cfg_ar},
    [FERRY_IB_CFG_RELAXED_ORDERING] = {"NCCL_IB_PCI_RELAXED_ORDERING", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(relaxed_ordering), 2, 0, 2,
        "0, 1 or 2 (2: relaxed ordering where libibverbs has ibv_reg_mr_iova2)"},
    [FERRY_IB_CFG_RETURN_ASYNC_EVENTS] = {"NCCL_IB_RETURN_ASYNC_EVENTS", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(return_async_events), 1, 0, 1,
        "0 or 1 (1: a fatal async event fails the communicators it touches)"},
    [FERRY_IB_CFG_GDR_FLUSH_DISABLE] = {"NCCL_GDR_FLUSH_DISABLE", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(gdr_flush_disable), 0, 0, 1, "0 or 1 (1: no flush after GPU receives)"},
    [FERRY_IB_CFG_VERBS_LIB] = {"NCCL_FERRY_IBVERBS_LIB", FERRY_CFG_KIND_TEXT,
        FERRY_IB_CFG_FIELD(verbs_lib), 0, 0, 0, "the path of a libibverbs.so.1, up to 255 characters",
        .unset = "<libibverbs.so.1>"},
    [FERRY_IB_CFG_PEER_TIMEOUT_S] = {"NCCL_FERRY_IB_PEER_TIMEOUT_S", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(peer_timeout_s), 10, 0, 86400,
        "0..86400 (s without a sign of life from a peer before its comms fail; 0: never)"},
    [FERRY_IB_CFG_MERGE_VFS] = {"NCCL_IB_MERGE_VFS", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(merge_vfs), 1, 0, 1,
        "0 or 1 (1: virtual functions report their physical function's PCI path)"},
    [FERRY_IB_CFG_MERGE_NICS] = {"NCCL_IB_MERGE_NICS", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(merge_nics), 1, 0, 1,
        "0 or 1 (1: NCCL may merge ports into one device that stripes over them)"},
    [FERRY_IB_CFG_STRIPE_MIN] = {"NCCL_FERRY_IB_STRIPE_MIN", FERRY_CFG_KIND_SIZE,
        FERRY_IB_CFG_FIELD(stripe_min), 8 << 20, 0, 1LL << 40,
        "a size up to 1T (on a merged device, messages this big are cut over every port, smaller "
        "ones go whole on one port, ports taking turns; 0: cut every message)"},
    /* GPU memory (ib_gdr.c, ib_flush.c). */
    [FERRY_IB_CFG_GDR] = {"NCCL_FERRY_IB_GDR", FERRY_CFG_KIND_CHOICE, FERRY_IB_CFG_FIELD(gdr), -1,
        0, 0, "-1 (GPU memory when a peer-memory module is loaded), 0 (never) or 1 (always)",
        .choices = ferry_ib_cfg_gdr},
    [FERRY_IB_CFG_FLUSH] = {"NCCL_FERRY_IB_FLUSH", FERRY_CFG_KIND_CHOICE,
        FERRY_IB_CFG_FIELD(flush), FERRY_IB_FLUSH_AUTO, 0, 0,
        "auto (per receive comm, the cheaper of the two, timed over its first flushes), read (a "
        "1-byte RDMA READ on a QP connected to itself) or cuda (cuFlushGPUDirectRDMAWrites)",
        .choices = ferry_ib_cfg_flush},
    [FERRY_IB_CFG_FORCE_FLUSH] = {"NCCL_FERRY_IB_FORCE_FLUSH", FERRY_CFG_KIND_INT,
        FERRY_IB_CFG_FIELD(force_flush), 0, 0, 1,
        "0 or 1 (1: the forceFlush property, NCCL flushes every GPU receive)"},
    [FERRY_IB_CFG_SYSFS_ROOT] = {"NCCL_FERRY_IB_SYSFS_ROOT", FERRY_CFG_KIND_TEXT,
        FERRY_IB_CFG_FIELD(sysfs_root), 0, 0, 0,
        "a directory up to 255 characters holding module/ and kernel/mm/ as /sys does",
        .unset = "</sys>"},
    [FERRY_IB_CFG_CM] = {"NCCL_FERRY_IB_CM", FERRY_CFG_KIND_CHOICE, FERRY_IB_CFG_FIELD(cm),
        FERRY_IB_CM_OOB, 0, 0, "oob (connect out of band over TCP) or rdmacm (librdmacm)",
        .choices = ferry_ib_cfg_cm},
    [FERRY_IB_CFG_RDMACM_LIB] = {"NCCL_FERRY_RDMACM_LIB", FERRY_CFG_KIND_TEXT,
        FERRY_IB_CFG_FIELD(rdmacm_lib), 0, 0, 0, "the path of a librdmacm.so.1, up to 255 "
        "characters", .unset = "<librdmacm.so.1>"},
};

ferry_status_t ferry_ib_config_load(ferry_ib_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    return ferry_cfg_table_load(ferry_ib_cfg_vars, FERRY_IB_CFG_COUNT, cfg, cfg->src);
}

void ferry_ib_config_format(const ferry_ib_config_t *cfg, char *buf, size_t len)
{
    ferry_cfg_table_format(ferry_ib_cfg_vars, FERRY_IB_CFG_COUNT, cfg, cfg->src, buf, len);
}

int ferry_ib_config_addr_range(const ferry_ib_config_t *cfg, int family, unsigned char addr[16],
                               int *prefixlen_p)
{
    int range_family;

    memset(addr, 0, 16);
    *prefixlen_p = 0;
    if (cfg->addr_range[0] == '\0' ||
        ferry_ib_cfg_parse_cidr(cfg->addr_range, &range_family, addr, prefixlen_p) != 0 ||
        range_family != family) {
        memset(addr, 0, 16);
        *prefixlen_p = 0;
        return 0;
    }
    return 1;
}
