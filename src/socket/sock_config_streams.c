/*
 * Streams per connection that shrink as the process' connections grow
 * (sock_config.h: ferry_sock_config_streams_for). The listener decides: its
 * handle carries the count, the connector opens that many and every hello
 * repeats it (sock_wire.h), so the count known at listen() is the one both
 * sides use. With NCCL_FERRY_NET_HINTS=1 the count is an offer: the connector
 * may open fewer from NCCL's hints (sock_hints.h).
 */
#include "socket/sock_config.h"

/*
 * Streams the process' connections may hold together before each new one is
 * cut to fewer than the default: streams = budget / (live + 1), between 1
 * and the default. Extra streams exist to spread one connection's bytes
 * over several TCP flows and cores; a process with many connections already
 * has that many flows, which NCCL drives side by side, and each extra
 * stream is then one more socket to poll and one more buffer to keep warm,
 * times the peers: an 8-rank node's all-to-all at the default 4 streams
 * opens thousands of sockets, past the usual 1024-descriptor limit. The
 * budget is the most streams one connection may have (FERRY_SOCK_MAX_STREAMS):
 * the process as a whole gets the parallelism one connection could ask for.
 * Connections opened one after another (live 0, 1, 2, ...) keep the
 * default up to budget / default of them and get one stream each from half
 * the budget on: the streams beyond one per connection add up to at most
 * 3 x 16 + 2 x 5 + 1 x 11 = 69 for a budget of 64 and a default of 4, however
 * many connections follow. The live count is every socket comm of the
 * process, sends and receives, and its open listens (a listen is a receive
 * comm on its way: NCCL listens for all of a round's peers before it
 * connects any). The budget is FERRY_SOCK_STREAM_BUDGET (sock_config.h).
 */
int ferry_sock_config_streams_for(const ferry_sock_config_t *cfg, int live_conns)
{
    int n;

    /* The user chose the streams (ferry's variable or NCCL's pair): every connection gets them. */
    if (cfg->src[FERRY_SOCK_CFG_STREAMS] == FERRY_CFG_ENV ||
        cfg->src[FERRY_SOCK_CFG_SOCKET_NTHREADS] == FERRY_CFG_ENV ||
        cfg->src[FERRY_SOCK_CFG_NSOCKS_PERTHREAD] == FERRY_CFG_ENV)
        return cfg->streams;
    if (live_conns < 0)
        live_conns = 0;
    n = FERRY_SOCK_STREAM_BUDGET / (live_conns + 1);
    if (n > cfg->streams)
        n = cfg->streams;
    return n < 1 ? 1 : n;
}
