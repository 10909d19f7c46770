/*
 * NCCL_FERRY_NET_HINTS (sock_hints.h): the variable, and the streams a
 * connector opens from NCCL's hints.
 *
 * NCCL says a connection is one of maxFlowsPerPeer connections to its peer
 * (its channels) and that up to maxConcurrentPeers peers are driven at once,
 * so up to flows x peers connections of this side move data together. The
 * process' stream budget (FERRY_SOCK_STREAM_BUDGET, the same budget the
 * listener divides over the comms already open) is shared over those: a
 * connection NCCL drives beside many others gets fewer streams, since the
 * others already spread the bytes over flows and cores, and one driven
 * alone keeps the per-connection default. Unlike the listener's count,
 * which depends on the order comms happen to open in, this one is the same
 * for every connection of one kind.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/config_table.h"
#include "socket/sock_hints.h"

static const ferry_cfg_var_t ferry_sock_hints_vars[1] = {
    {"NCCL_FERRY_NET_HINTS", FERRY_CFG_KIND_INT,
     .offset = offsetof(ferry_sock_hints_config_t, net_hints),
     .width = sizeof(((ferry_sock_hints_config_t *)0)->net_hints), .def = 0, .min = 0, .max = 1,
     .help = "0 or 1 (1: a connection's TCP streams follow NCCL's setNetAttr hints, the "
             "stream budget shared over its flows per peer x concurrent peers, where the "
             "listener also runs with 1)"},
};

ferry_status_t ferry_sock_hints_load(ferry_sock_hints_config_t *cfg)
{
    return ferry_cfg_table_load(ferry_sock_hints_vars, 1, cfg, cfg->src);
}

void ferry_sock_hints_format(const ferry_sock_hints_config_t *cfg, char *buf, size_t len)
{
    size_t off = strlen(buf);

    if (off + 1 >= len)
        return;
    snprintf(buf + off, len - off, " net_hints=%d(%s)", cfg->net_hints,
             ferry_cfg_src_name(cfg->src[0]));
}

int ferry_sock_hints_streams(const ferry_sock_config_t *cfg, int hints_on, int takes_fewer,
                             ferry_net_hint_t hint, int offered, ferry_sock_streams_why_t *why_p)
{
    long long n, conns;

    *why_p = FERRY_SOCK_STREAMS_OFFERED;
    if (!hints_on)
        return offered;
    /* The user chose the streams: the listener offered exactly those. */
    *why_p = FERRY_SOCK_STREAMS_EXPLICIT;
    if (cfg->src[FERRY_SOCK_CFG_STREAMS] == FERRY_CFG_ENV ||
        cfg->src[FERRY_SOCK_CFG_SOCKET_NTHREADS] == FERRY_CFG_ENV ||
        cfg->src[FERRY_SOCK_CFG_NSOCKS_PERTHREAD] == FERRY_CFG_ENV)
        return offered;
    *why_p = FERRY_SOCK_STREAMS_OLD_LISTENER;
    if (!takes_fewer)
        return offered;
    *why_p = FERRY_SOCK_STREAMS_NO_HINTS;
    if (hint.flows <= 0 || hint.peers <= 0)
        return offered;
    *why_p = FERRY_SOCK_STREAMS_HINTS;
    conns = (long long)hint.flows * hint.peers;
    n = FERRY_SOCK_STREAM_BUDGET / conns;
    if (n > cfg->streams)
        n = cfg->streams;
    if (n > offered)
        n = offered;
    return n < 1 ? 1 : (int)n;
}

void ferry_sock_hints_words(ferry_sock_streams_why_t why, ferry_net_hint_t hint, int offered,
                            char *buf, size_t len)
{
    switch (why) {
    case FERRY_SOCK_STREAMS_OFFERED:
        buf[0] = '\0';
        return;
    case FERRY_SOCK_STREAMS_EXPLICIT:
        snprintf(buf, len, " (the listener's %d: NCCL_FERRY_STREAMS, NCCL_SOCKET_NTHREADS or "
                 "NCCL_NSOCKS_PERTHREAD is set, and wins over NCCL's hints)", offered);
        return;
    case FERRY_SOCK_STREAMS_OLD_LISTENER:
        snprintf(buf, len, " (the listener's %d: it takes no fewer; it runs without "
                 "NCCL_FERRY_NET_HINTS=1, or an older ferry)", offered);
        return;
    case FERRY_SOCK_STREAMS_NO_HINTS:
        snprintf(buf, len, " (the listener's %d, from its budget: NCCL gave no usable send "
                 "hints on this context)", offered);
        return;
    case FERRY_SOCK_STREAMS_HINTS:
        snprintf(buf, len, " (NCCL's hints: %d flows per peer x %d peers share a budget of %d "
                 "streams; the listener offered %d)", hint.flows, hint.peers,
                 FERRY_SOCK_STREAM_BUDGET, offered);
        return;
    }
    buf[0] = '\0';
}
