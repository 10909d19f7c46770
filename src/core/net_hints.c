/* NCCL's setNetAttr hints on a context: checked, kept, summarised (core/net_hints.h). */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/net_hints.h"

#define FERRY_NET_ATTR_ALL_ONES ((uint32_t)FERRY_NET_ATTR_UNDEF)

int ferry_net_attr_is_xfer(const ferry_net_attr_t *attr)
{
    uint32_t op = attr->op;

    return op != FERRY_NET_ATTR_ALL_ONES && op != 0 && (op & (op - 1)) == 0;
}

/* Append "name=value (what)" to why, comma-separated. */
static void ferry_net_attr_refuse(char *why, size_t why_len, const char *side_name,
                                  const char *field, int32_t value, const char *what)
{
    size_t off = strlen(why);

    if (off + 1 >= why_len)
        return;
    snprintf(why + off, why_len - off, "%s%s.%s=%d (%s)", off > 0 ? ", " : "", side_name,
             field, (int)value, what);
}

/* 1 if value is a count within [1, max]; unset is 0 without a word, anything else refused. */
static int ferry_net_attr_count_ok(int32_t value, int32_t max, const char *side_name,
                                   const char *field, char *why, size_t why_len, int *refused)
{
    const char *what = NULL;
    char above[48];

    if (value == FERRY_NET_ATTR_UNDEF)
        return 0;
    if (value < 0)
        what = "negative";
    else if (value == 0)
        what = "zero, not a count";
    else if (value > max) {
        snprintf(above, sizeof(above), "above %d", (int)max);
        what = above;
    }
    if (what == NULL)
        return 1;
    ferry_net_attr_refuse(why, why_len, side_name, field, value, what);
    (*refused)++;
    return 0;
}

int ferry_net_attr_side_check(const ferry_net_attr_side_t *side, const char *side_name,
                              ferry_net_hint_t *hint, char *why, size_t why_len)
{
    int refused = 0;
    int max_peers = ferry_net_attr_count_ok(side->max_peers, FERRY_NET_HINT_PEERS_MAX, side_name,
                                            "maxConcurrentPeers", why, why_len, &refused);
    int min_peers = ferry_net_attr_count_ok(side->min_peers, FERRY_NET_HINT_PEERS_MAX, side_name,
                                            "minConcurrentPeers", why, why_len, &refused);
    int max_flows = ferry_net_attr_count_ok(side->max_flows, FERRY_NET_HINT_FLOWS_MAX, side_name,
                                            "maxFlowsPerPeer", why, why_len, &refused);
    int min_flows = ferry_net_attr_count_ok(side->min_flows, FERRY_NET_HINT_FLOWS_MAX, side_name,
                                            "minFlowsPerPeer", why, why_len, &refused);

    /* The mins are not used; one above its max still says the struct is not what it seems. */
    if (min_peers && max_peers && side->min_peers > side->max_peers) {
        ferry_net_attr_refuse(why, why_len, side_name, "minConcurrentPeers", side->min_peers,
                              "above maxConcurrentPeers");
        refused++;
    }
    if (min_flows && max_flows && side->min_flows > side->max_flows) {
        ferry_net_attr_refuse(why, why_len, side_name, "minFlowsPerPeer", side->min_flows,
                              "above maxFlowsPerPeer");
        refused++;
    }
    hint->flows = max_peers && max_flows ? side->max_flows : 0;
    hint->peers = max_peers && max_flows ? side->max_peers : 0;
    return refused;
}

static uint64_t ferry_net_hint_pack(ferry_net_hint_t h)
{
    return (uint64_t)(uint32_t)h.flows | ((uint64_t)(uint32_t)h.peers << 32);
}

static ferry_net_hint_t ferry_net_hint_unpack(uint64_t word)
{
    ferry_net_hint_t h = { (int)(uint32_t)word, (int)(uint32_t)(word >> 32) };

    return h;
}

/* A transfer's counts for the summary only: 16 bits each, an unset or odd one as 0. */
static uint64_t ferry_net_attr_u16(int32_t v)
{
    return v > 0 && v <= 0xffff ? (uint64_t)v : 0;
}

static void ferry_net_hints_set_xfer(ferry_net_hints_t *hints, const ferry_net_attr_t *attr)
{
    uint64_t shape = ferry_net_attr_u16(attr->send.max_peers) |
                     ferry_net_attr_u16(attr->send.max_flows) << 16 |
                     ferry_net_attr_u16(attr->recv.max_peers) << 32 |
                     ferry_net_attr_u16(attr->recv.max_flows) << 48;

    atomic_store_explicit(&hints->xfer_shape, shape, memory_order_relaxed);
    atomic_store_explicit(&hints->xfer_op, attr->op, memory_order_relaxed);
    atomic_store_explicit(&hints->xfer_algo, attr->algo, memory_order_relaxed);
    atomic_store_explicit(&hints->xfer_proto, attr->proto, memory_order_relaxed);
    atomic_fetch_add_explicit(&hints->xfer_calls, 1, memory_order_relaxed);
}

void ferry_net_hints_set(ferry_net_hints_t *hints, const ferry_net_attr_t *attr,
                         uint64_t comm_id)
{
    ferry_net_hint_t send, recv;
    char why[512] = "";
    int refused;

    if (ferry_net_attr_is_xfer(attr)) {
        ferry_net_hints_set_xfer(hints, attr);
        return;
    }
    refused = ferry_net_attr_side_check(&attr->send, "sendCommAttr", &send, why, sizeof(why));
    refused += ferry_net_attr_side_check(&attr->recv, "recvCommAttr", &recv, why, sizeof(why));
    atomic_store_explicit(&hints->send, ferry_net_hint_pack(send), memory_order_relaxed);
    atomic_store_explicit(&hints->recv, ferry_net_hint_pack(recv), memory_order_relaxed);
    atomic_fetch_add_explicit(&hints->conn_calls, 1, memory_order_relaxed);
    if (refused == 0)
        return;
    atomic_fetch_add_explicit(&hints->ignored, (uint32_t)refused, memory_order_relaxed);
    /* NCCL's proxy calls this for every connection: a broken struct would repeat per call. */
    FERRY_WARN_LIMITED("setNetAttr(comm 0x%llx): ignored %s; hints are counts of 1 or more, or "
                       "NCCL_NET_ATTR_UNDEF (-1) where unset; a side without both its "
                       "maxConcurrentPeers and maxFlowsPerPeer gets its streams as without "
                       "hints (an NCCL of another net ABI version than the table it loaded?)",
                       (unsigned long long)comm_id, why);
}

ferry_net_hint_t ferry_net_hints_send(ferry_net_hints_t *hints)
{
    return ferry_net_hint_unpack(atomic_load_explicit(&hints->send, memory_order_relaxed));
}

ferry_net_hint_t ferry_net_hints_recv(ferry_net_hints_t *hints)
{
    return ferry_net_hint_unpack(atomic_load_explicit(&hints->recv, memory_order_relaxed));
}

/* "4 flows x 6 peers" or "none". */
static void ferry_net_hint_words(ferry_net_hint_t h, char *buf, size_t len)
{
    if (h.flows > 0)
        snprintf(buf, len, "%d flows x %d peers", h.flows, h.peers);
    else
        snprintf(buf, len, "none");
}

void ferry_net_hints_summary(ferry_net_hints_t *hints, char *buf, size_t len)
{
    uint32_t conn = atomic_load_explicit(&hints->conn_calls, memory_order_relaxed);
    uint32_t xfer = atomic_load_explicit(&hints->xfer_calls, memory_order_relaxed);
    uint64_t shape = atomic_load_explicit(&hints->xfer_shape, memory_order_relaxed);
    char send[48], recv[48];

    buf[0] = '\0';
    if (conn == 0 && xfer == 0)
        return;
    ferry_net_hint_words(ferry_net_hints_send(hints), send, sizeof(send));
    ferry_net_hint_words(ferry_net_hints_recv(hints), recv, sizeof(recv));
    snprintf(buf, len, "%u connection hint(s) (last: send %s, recv %s), %u field(s) ignored; "
             "%u per-transfer hint(s) (last: op 0x%x algo 0x%x proto 0x%x, send %u peers x %u "
             "channels, recv %u peers x %u channels)", conn, send, recv,
             atomic_load_explicit(&hints->ignored, memory_order_relaxed), xfer,
             atomic_load_explicit(&hints->xfer_op, memory_order_relaxed),
             atomic_load_explicit(&hints->xfer_algo, memory_order_relaxed),
             atomic_load_explicit(&hints->xfer_proto, memory_order_relaxed),
             (unsigned)(shape & 0xffff), (unsigned)(shape >> 16 & 0xffff),
             (unsigned)(shape >> 32 & 0xffff), (unsigned)(shape >> 48 & 0xffff));
}
