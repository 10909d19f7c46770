/*
 * NCCL_FERRY_NET_HINTS: streams per connection from NCCL's setNetAttr
 * hints (core/net_hints.h) instead of the listener's budget alone.
 *
 * The listener fixes the streams it offers at listen(), in the handle
 * (sock_config_streams.c), before NCCL gives the hints of the connection:
 * NCCL's proxy applies them in its connect step, after the receiver's
 * listen and before the sender's connect. So the connector chooses: it
 * opens n <= offered streams and says n in every hello's stream count, and
 * the acceptor takes a connection of any 1..offered streams whose hellos
 * agree. A listener only takes fewer where its handle says so
 * (FERRY_SOCK_HANDLE_TAKES_FEWER, set with NCCL_FERRY_NET_HINTS=1): a
 * listener without the flag (the variable off, or a ferry that predates
 * it) gets exactly what it offered, as before, and a connector that
 * predates the flag opens what was offered, which such a listener takes.
 */
#ifndef FERRY_SOCK_HINTS_H
#define FERRY_SOCK_HINTS_H

#include <stddef.h>

#include "core/net_hints.h"
#include "socket/sock_config.h"

/* The variable as parsed, with its source for the effective-config line. */
typedef struct ferry_sock_hints_config {
    int             net_hints; /* NCCL_FERRY_NET_HINTS: 0 off (default), 1 on. */
    ferry_cfg_src_t src[1];
} ferry_sock_hints_config_t;

/* Parse NCCL_FERRY_NET_HINTS (WARN and FERRY_ERR_USAGE on a bad value). */
ferry_status_t ferry_sock_hints_load(ferry_sock_hints_config_t *cfg);
/* " net_hints=1(env)" appended to the effective-config line. */
void ferry_sock_hints_format(const ferry_sock_hints_config_t *cfg, char *buf, size_t len);

/* Why a connector opens the streams it opens. */
typedef enum ferry_sock_streams_why {
    FERRY_SOCK_STREAMS_OFFERED,      /* NCCL_FERRY_NET_HINTS=0: the listener's count, as always. */
    FERRY_SOCK_STREAMS_EXPLICIT,     /* NCCL_FERRY_STREAMS or NCCL's pair set: the listener's. */
    FERRY_SOCK_STREAMS_OLD_LISTENER, /* The handle has no TAKES_FEWER: the listener's. */
    FERRY_SOCK_STREAMS_NO_HINTS,     /* No usable send hints on the context: the listener's. */
    FERRY_SOCK_STREAMS_HINTS         /* The budget over flows x peers, within the offer. */
} ferry_sock_streams_why_t;

/*
 * Streams a connector opens to a listener that offered `offered`
 * (1..FERRY_SOCK_MAX_LANES): with hints_on, a listener that takes fewer,
 * no explicit stream setting in cfg and a usable send hint,
 * FERRY_SOCK_STREAM_BUDGET / (hint.flows x hint.peers), at least 1 and at
 * most cfg->streams and offered; otherwise offered. *why_p says which.
 */
int ferry_sock_hints_streams(const ferry_sock_config_t *cfg, int hints_on, int takes_fewer,
                             ferry_net_hint_t hint, int offered, ferry_sock_streams_why_t *why_p);

/*
 * The words for the connect INFO line: " (NCCL's hints: 4 flows per peer x
 * 6 peers share a budget of 64 streams; the listener offered 4)"; "" for
 * FERRY_SOCK_STREAMS_OFFERED, so that line reads as it always has.
 */
void ferry_sock_hints_words(ferry_sock_streams_why_t why, ferry_net_hint_t hint, int offered,
                            char *buf, size_t len);

#endif
