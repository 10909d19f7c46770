/*
 * The size of the process' helper pool (proxy/pool.h) from the socket
 * backend's variables. The per-connection thread settings keep their
 * meaning (over how many helper threads one connection's streams spread,
 * 0: NCCL's thread moves that side); the pool they draw from is sized once,
 * here:
 *
 *  - NCCL_FERRY_POOL_THREADS, when set, is the size.
 *  - Else, where a per-connection count was set (NCCL_FERRY_THREADS,
 *    NCCL_SOCKET_NTHREADS, NCCL_FERRY_SEND_THREADS/RECV_THREADS), the
 *    largest effective one: whoever asked for N threads per connection
 *    asked for N threads working at once, and a pool that size lets one
 *    connection spread fully without growing with the connections.
 *  - Else the CPU budget (cfg->ncpus, the same budget that chose the
 *    per-connection threads): none on one or two CPUs, except the send
 *    helper of two CPUs a launcher gave (one thread, sends only); from three
 *    CPUs, one thread per CPU but one, at most 16. The CPU left over is
 *    NCCL's proxy thread's, which posts, tests and moves small messages
 *    itself; a thread per CPU beyond that can only take turns with the
 *    others. 16 is the per-connection maximum, so a connection's streams
 *    can still spread as wide as before.
 *
 * Never 0 while a side wants helpers: a pool of one serves them all.
 */
#include <stdio.h>
#include <string.h>

#include "socket/sock_config.h"

static int ferry_sock_cfg_per_conn_set(const ferry_sock_config_t *cfg)
{
    return cfg->src[FERRY_SOCK_CFG_THREADS] == FERRY_CFG_ENV ||
           cfg->src[FERRY_SOCK_CFG_SOCKET_NTHREADS] == FERRY_CFG_ENV ||
           cfg->src[FERRY_SOCK_CFG_SEND_THREADS] == FERRY_CFG_ENV ||
           cfg->src[FERRY_SOCK_CFG_RECV_THREADS] == FERRY_CFG_ENV;
}

void ferry_sock_config_derive_pool(ferry_sock_config_t *cfg)
{
    int side = cfg->send_threads > cfg->recv_threads ? cfg->send_threads : cfg->recv_threads;

    if (cfg->pool_threads > 0)
        return; /* NCCL_FERRY_POOL_THREADS. */
    if (ferry_sock_cfg_per_conn_set(cfg))
        cfg->pool_threads = side;
    else if (cfg->ncpus >= 3)
        cfg->pool_threads = cfg->ncpus - 1 < FERRY_SOCK_MAX_THREADS ? cfg->ncpus - 1
                                                                     : FERRY_SOCK_MAX_THREADS;
    else
        cfg->pool_threads = side; /* 0, or the send helper of two CPUs: 1. */
    if (cfg->pool_threads < 1 && side > 0)
        cfg->pool_threads = 1;
    cfg->src[FERRY_SOCK_CFG_POOL_THREADS] = FERRY_CFG_DERIVED;
}

void ferry_sock_config_pool_words(const ferry_sock_config_t *cfg, char *buf, size_t len)
{
    size_t off = strlen(buf);
    const char *s = cfg->pool_threads == 1 ? "" : "s";

    if (off >= len)
        return;
    if (cfg->send_threads == 0 && cfg->recv_threads == 0)
        return; /* No helpers: no pool to speak of. */
    if (cfg->src[FERRY_SOCK_CFG_POOL_THREADS] == FERRY_CFG_ENV)
        snprintf(buf + off, len - off, "; one pool of %d helper thread%s serves every "
                 "connection, set by NCCL_FERRY_POOL_THREADS", cfg->pool_threads, s);
    else if (ferry_sock_cfg_per_conn_set(cfg))
        snprintf(buf + off, len - off, "; one pool of %d helper thread%s serves every "
                 "connection, the largest per-connection setting", cfg->pool_threads, s);
    else if (cfg->ncpus >= 3)
        snprintf(buf + off, len - off, "; one pool of %d helper thread%s serves every "
                 "connection, one per CPU of the budget but NCCL's thread's, at most %d",
                 cfg->pool_threads, s, FERRY_SOCK_MAX_THREADS);
    else
        snprintf(buf + off, len - off, "; one pool of %d helper thread%s serves every "
                 "connection, the sends' helper", cfg->pool_threads, s);
}
