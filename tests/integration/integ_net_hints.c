/*
 * integ_net_hints: NCCL's setNetAttr through the exported v11 and v12 tables,
 * as NCCL 2.30's proxy calls it (connection hints before connect; a
 * transfer's hints from the progress thread), then listen, connect and
 * accept in this process, and the streams the connection really has:
 * the ESTABLISHED sockets on the listen port, the connect and accept INFO
 * lines, and the data of a size sweep, byte for byte.
 *
 * With NCCL_FERRY_NET_HINTS=1 (and no explicit stream setting) a connection
 * gets 64 / (flows x peers) streams, at least 1, at most the listener's
 * offer; with 0 (or unset) every connection gets the offer whatever the
 * hints, the handle's flags stay zero, and the connect line reads as ever.
 * Both: garbage hints are ignored with a WARN naming the field, return
 * ncclSuccess, and leave the connection at its offer; a dead context and a
 * NULL struct are refused or ignored with a WARN; finalize sums them up.
 *
 *   integ_net_hints [--plugin PATH]   (ctest: NCCL_FERRY_THREADS=1, so 4 streams are offered
 *                                      on a 2-CPU runner without an explicit stream setting)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>

#include "harness.h"
#include "socket/sock_wire.h"

/* The sweep's largest message; an eighth under a sanitizer (FIT_TIME_SCALE > 1). */
#define HINTS_MAX_SIZE (fit_time_scale() > 1.0 ? 1u << 20 : 8u << 20)
#define HINTS_BUDGET   64 /* FERRY_SOCK_STREAM_BUDGET. */

/* One exported table, reached as NCCL reaches it; the members both versions share run the harness. */
typedef struct hints_net {
    int           version;
    const void   *table;
    fit_plugin_t  plugin;  /* plugin.net: the table, or v12's shared members in a v11 struct. */
    ncclNet_v11_t shim;
} hints_net_t;

static int hints_on;

/*
 * NCCL's progress thread: a transfer's hints whenever its shape changes,
 * while the proxy's service thread connects. Bounded by a count and a stop flag.
 */
#define HINTS_HAMMER_MAX 200000L

typedef struct hints_hammer {
    pthread_t    thread;
    void        *ctx;
    const void  *table;
    int          version;
    atomic_int   stop;
    long         calls;
    ncclResult_t rc;
} hints_hammer_t;

static void *hints_init(hints_net_t *n, uint64_t comm_id)
{
    void *ctx = NULL;

    if (n->version == 11)
        return fit_plugin_init(&n->plugin, comm_id);
    {
        const ncclNet_v12_t *t = n->table;
        ncclNetCommConfig_v12_t cfg = { .trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF };

        FIT_NCCL(t->init(&ctx, comm_id, &cfg, fit_logger, NULL));
    }
    return ctx;
}

/* The table's setNetAttr as NCCL sees it after init. */
static const void *hints_slot(const hints_net_t *n)
{
    return n->version == 11 ? (const void *)((const ncclNet_v11_t *)n->table)->setNetAttr
                            : (const void *)((const ncclNet_v12_t *)n->table)->setNetAttr;
}

/* NCCL's struct of the version, filled from the v11 one (same fields, other type names). */
static ncclResult_t hints_set(hints_net_t *n, void *ctx, const ncclNetAttr_v11_t *a)
{
    if (n->version == 11) {
        ncclNetAttr_v11_t copy;

        if (a == NULL)
            return ((const ncclNet_v11_t *)n->table)->setNetAttr(ctx, NULL);
        copy = *a;
        return ((const ncclNet_v11_t *)n->table)->setNetAttr(ctx, &copy);
    } else {
        ncclNetAttr_v12_t v;

        if (a == NULL)
            return ((const ncclNet_v12_t *)n->table)->setNetAttr(ctx, NULL);
        memcpy(&v.sendCommAttr, &a->sendCommAttr, sizeof(v.sendCommAttr));
        memcpy(&v.recvCommAttr, &a->recvCommAttr, sizeof(v.recvCommAttr));
        v.op = a->op;
        v.algo = a->algo;
        v.proto = a->proto;
        return ((const ncclNet_v12_t *)n->table)->setNetAttr(ctx, &v);
    }
}

static void *hints_hammer_main(void *arg)
{
    hints_hammer_t *hm = arg;
    hints_net_t n;

    memset(&n, 0, sizeof(n));
    n.version = hm->version;
    n.table = hm->table;
    while (!atomic_load(&hm->stop) && hm->calls < HINTS_HAMMER_MAX && hm->rc == ncclSuccess) {
        ncclNetAttr_v11_t a = NCCL_NET_ATTR_INIT;
        int k = (int)(hm->calls % 7) + 1;

        a.sendCommAttr.maxConcurrentPeers = a.sendCommAttr.minConcurrentPeers = k;
        a.sendCommAttr.maxFlowsPerPeer = a.sendCommAttr.minFlowsPerPeer = 8 - k;
        a.op = 1u << (hm->calls % 11);
        a.algo = 1u << (hm->calls % 7);
        a.proto = 1u << (hm->calls % 3);
        hm->rc = hints_set(&n, hm->ctx, &a);
        hm->calls++;
    }
    return NULL;
}

static void hints_open(hints_net_t *n, const char *path, int version)
{
    memset(n, 0, sizeof(*n));
    n->version = version;
    fit_plugin_open(&n->plugin, path);
    if (version == 11) {
        n->table = n->plugin.net;
    } else {
        const ncclNet_v12_t *t = dlsym(n->plugin.dl, "ncclNetPlugin_v12");

        FIT_CHECK(t != NULL, "no v12 table");
        n->table = t;
        /* Same C types in v11 and v12: the compiler checks each assignment. */
        n->shim.name = t->name;
        n->shim.devices = t->devices;
        n->shim.listen = t->listen;
        n->shim.connect = t->connect;
        n->shim.accept = t->accept;
        n->shim.regMr = t->regMr;
        n->shim.regMrDmaBuf = t->regMrDmaBuf;
        n->shim.deregMr = t->deregMr;
        n->shim.isend = t->isend;
        n->shim.irecv = t->irecv;
        n->shim.iflush = t->iflush;
        n->shim.test = t->test;
        n->shim.closeSend = t->closeSend;
        n->shim.closeRecv = t->closeRecv;
        n->shim.closeListen = t->closeListen;
        n->shim.finalize = t->finalize;
        n->plugin.net = &n->shim;
    }
}

/* What NCCL 2.30 passes before connecting: mins 1, the maxes, op as said, the rest unset. */
static ncclNetAttr_v11_t hints_conn(int peers, int flows, uint32_t op)
{
    ncclNetAttr_v11_t a = NCCL_NET_ATTR_INIT;

    a.sendCommAttr.maxConcurrentPeers = peers;
    a.sendCommAttr.minConcurrentPeers = 1;
    a.sendCommAttr.maxFlowsPerPeer = flows;
    a.sendCommAttr.minFlowsPerPeer = 1;
    a.recvCommAttr = a.sendCommAttr;
    a.op = op;
    return a;
}

/* The streams a connection gets: the offer, or with the variable on the budget over flows x peers. */
static int hints_expect(int peers, int flows, int offered)
{
    int n;

    if (!hints_on || peers == 0)
        return offered;
    n = HINTS_BUDGET / (peers * flows);
    if (n < 1)
        n = 1;
    return n < offered ? n : offered;
}

/*
 * One connection after the hints the caller gave ctx_c (peers x flows, 0:
 * none usable): its streams, checked three ways, and the data. `words`
 * must be in the connect line.
 */
static void hints_connect_check(hints_net_t *n, void *ctx_l, void *ctx_c, int peers, int flows,
                                const char *words, const char *what)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], addr[80], needle[128], line[4096];
    const ferry_sock_handle_t *h = (const ferry_sock_handle_t *)handle;
    void *listen_comm, *send_comm, *recv_comm;
    size_t sizes[96];
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    int from = fit_log_lines(), est, port, expect;

    listen_comm = fit_listen(&n->plugin, ctx_l, 0, handle);
    fit_handle_addr(handle, addr, sizeof(addr));
    port = fit_handle_port(handle);
    FIT_CHECK(h->flags == (hints_on ? FERRY_SOCK_HANDLE_TAKES_FEWER : 0u),
              "%s: handle flags 0x%x with NCCL_FERRY_NET_HINTS=%d", what, h->flags, hints_on);
    expect = hints_expect(peers, flows, h->nlanes);
    FIT_CHECK(!hints_on || peers == 0 || h->nlanes == 4, "%s: the listener offered %u streams, "
              "the test needs 4 (run it with NCCL_FERRY_THREADS=1 and no stream variable)",
              what, (unsigned)h->nlanes);
    fit_connect_accept(&n->plugin, ctx_c, 0, handle, listen_comm, &send_comm, &recv_comm, NULL);
    est = fit_count_established_local(port);
    FIT_CHECK(est == expect, "%s: %d ESTABLISHED streams on the listen port %d, expected %d "
              "(offered %u)", what, est, port, expect, (unsigned)h->nlanes);
    snprintf(needle, sizeof(needle), "connected to %s: %d stream%s", addr, expect,
             hints_on ? "s (" : "s, send comm");
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, needle, words, NULL, line, sizeof(line)) >= 0,
              "%s: no connect INFO line with '%s' and '%s'", what, needle, words ? words : "");
    printf("  %s\n", strstr(line, "connected to"));
    snprintf(needle, sizeof(needle), "on %s: %d streams", addr, expect);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, "accepted connection from", needle,
                           expect < h->nlanes ? "the connector's choice" : NULL, NULL, 0) >= 0,
              "%s: no accept INFO line with '%s'", what, needle);
    FIT_NCCL(n->plugin.net->closeListen(listen_comm));

    o.sizes = sizes;
    o.nmsgs = fit_sweep_sizes(sizes, 96, HINTS_MAX_SIZE);
    o.depth = 8;
    o.seed = 0x5157 + (uint64_t)expect;
    o.seconds = 60.0;
    o.tag = 3;
    fit_xfer_inproc(&n->plugin, send_comm, recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, what);
    FIT_NCCL(n->plugin.net->closeSend(send_comm));
    FIT_NCCL(n->plugin.net->closeRecv(recv_comm));
    fit_pass("v%d %s: %d stream(s) of %u offered (%d ESTABLISHED), %d messages 0..%u B "
             "intact in %.2f s", n->version, what, expect, (unsigned)h->nlanes, est, o.nmsgs,
             HINTS_MAX_SIZE, r.seconds);
}

static void hints_run(const char *path, int version)
{
    const uint32_t p2p_ops = (1u << 5) | (1u << 6) | (1u << 8) | (1u << 9) | (1u << 10);
    hints_net_t n;
    hints_hammer_t hammer;
    ncclNetAttr_v11_t a;
    void *ctx_l, *ctx_c, *ctx_plain, *dead;
    uint64_t cid = 0x2200 + (uint64_t)version;
    char line[4096], warn[160];
    int from;

    hints_open(&n, path, version);
    FIT_CHECK(hints_slot(&n) == NULL, "v%d setNetAttr is set before init", version);
    ctx_l = hints_init(&n, 0x1100 + (uint64_t)version);
    ctx_c = hints_init(&n, cid);
    /* Where the hints change nothing NCCL must see NULL, and builds none. */
    FIT_CHECK((hints_slot(&n) != NULL) == hints_on, "v%d setNetAttr after init is %s with "
              "NCCL_FERRY_NET_HINTS=%d", version, hints_slot(&n) != NULL ? "set" : "NULL",
              hints_on);
    if (!hints_on) {
        hints_connect_check(&n, ctx_l, ctx_c, 0, 0, NULL, "setNetAttr NULL, no hints");
        FIT_NCCL(n.plugin.net->finalize(ctx_c));
        FIT_NCCL(n.plugin.net->finalize(ctx_l));
        fit_log_check_clean("after the cases");
        fit_plugin_close(&n.plugin);
        fit_pass("v%d: setNetAttr NULL after init, connections take the offer", version);
        return;
    }

    /* A collective's hints, 8 x 8: the budget leaves 1 stream. */
    a = hints_conn(8, 8, (uint32_t)NCCL_NET_ATTR_UNDEF);
    FIT_NCCL(hints_set(&n, ctx_c, &a));
    hints_connect_check(&n, ctx_l, ctx_c, 8, 8,
                        hints_on ? "NCCL's hints: 8 flows per peer x 8 peers" : NULL,
                        "collective hints 8 flows x 8 peers");

    /* p2p hints, 4 x 8: 2 streams, while a thread gives transfer hints as NCCL's progress does. */
    a = hints_conn(8, 4, p2p_ops);
    FIT_NCCL(hints_set(&n, ctx_c, &a));
    memset(&hammer, 0, sizeof(hammer));
    hammer.ctx = ctx_c;
    hammer.table = n.table;
    hammer.version = version;
    FIT_CHECK(pthread_create(&hammer.thread, NULL, hints_hammer_main, &hammer) == 0,
              "pthread_create failed");
    hints_connect_check(&n, ctx_l, ctx_c, 8, 4,
                        hints_on ? "NCCL's hints: 4 flows per peer x 8 peers" : NULL,
                        "p2p hints 4 flows x 8 peers, transfer hints from another thread");
    atomic_store(&hammer.stop, 1);
    pthread_join(hammer.thread, NULL);
    FIT_CHECK(hammer.rc == ncclSuccess, "a transfer's setNetAttr returned %d", (int)hammer.rc);
    printf("  %ld transfer hints from another thread meanwhile, each ncclSuccess\n",
           hammer.calls);

    /* A transfer's hints after the connection's (one op, 1 peer x 1 channel): not for connect. */
    a = hints_conn(8, 8, (uint32_t)NCCL_NET_ATTR_UNDEF);
    FIT_NCCL(hints_set(&n, ctx_c, &a));
    a = hints_conn(1, 1, 1u << 5);
    a.algo = 1u << 1;
    a.proto = 1u << 2;
    FIT_NCCL(hints_set(&n, ctx_c, &a));
    hints_connect_check(&n, ctx_l, ctx_c, 8, 8,
                        hints_on ? "8 flows per peer x 8 peers" : NULL,
                        "connection hints 8 x 8, then a transfer's 1 x 1");

    /* Garbage: ignored with a WARN naming each field, still ncclSuccess, the offer. */
    a = hints_conn(8, 8, (uint32_t)NCCL_NET_ATTR_UNDEF);
    a.sendCommAttr.maxConcurrentPeers = 0;
    a.sendCommAttr.maxFlowsPerPeer = -5;
    a.recvCommAttr.maxFlowsPerPeer = 1 << 30;
    snprintf(warn, sizeof(warn), "setNetAttr(comm 0x%llx): ignored", (unsigned long long)cid);
    fit_log_expect(warn);
    from = fit_log_lines();
    FIT_NCCL(hints_set(&n, ctx_c, &a));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, warn,
                           "sendCommAttr.maxConcurrentPeers=0 (zero, not a count), "
                           "sendCommAttr.maxFlowsPerPeer=-5 (negative), "
                           "recvCommAttr.maxFlowsPerPeer=1073741824 (above 1024)", NULL, line,
                           sizeof(line)) >= 0, "no WARN names the three bad fields");
    hints_connect_check(&n, ctx_l, ctx_c, 0, 0, hints_on ? "no usable send hints" : NULL,
                        "garbage hints (0 peers, -5 flows)");

    /* A context that never got hints: the offer. */
    ctx_plain = hints_init(&n, 0x3300 + (uint64_t)version);
    hints_connect_check(&n, ctx_l, ctx_plain, 0, 0, hints_on ? "no usable send hints" : NULL,
                        "no setNetAttr on the context");

    /* A NULL struct: ignored with a WARN; a dead context: refused. */
    fit_log_expect("no attributes (NULL)");
    FIT_NCCL(hints_set(&n, ctx_c, NULL));
    dead = hints_init(&n, 0x4400);
    FIT_NCCL(n.plugin.net->finalize(dead));
    fit_log_expect("is not a live ferry context");
    a = hints_conn(2, 2, (uint32_t)NCCL_NET_ATTR_UNDEF);
    FIT_CHECK(hints_set(&n, dead, &a) == ncclInternalError, "setNetAttr on a finalized context "
              "did not return ncclInternalError");
    FIT_CHECK(hints_set(&n, NULL, &a) == ncclInternalError, "setNetAttr on a NULL context did "
              "not return ncclInternalError");
    fit_pass("v%d: NULL struct ignored, finalized and NULL contexts refused, each with a WARN",
             version);

    /* finalize says what the hints were. */
    from = fit_log_lines();
    FIT_NCCL(n.plugin.net->finalize(ctx_c));
    snprintf(warn, sizeof(warn), "finalize(comm 0x%llx): setNetAttr gave 4 connection hint(s)",
             (unsigned long long)cid);
    snprintf(line, sizeof(line), "(last: send none, recv none), 3 field(s) ignored; %ld "
             "per-transfer hint(s) (last: op 0x20 algo 0x2 proto 0x4, send 1 peers x 1 channels",
             hammer.calls + 1);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, warn, line, NULL, NULL, 0) >= 0,
              "no finalize summary '%s %s'", warn, line);
    FIT_NCCL(n.plugin.net->finalize(ctx_plain));
    FIT_NCCL(n.plugin.net->finalize(ctx_l));
    fit_log_expect_clear();
    fit_log_check_clean("after the cases");
    fit_plugin_close(&n.plugin);
    fit_pass("v%d: finalize summed up the hints", version);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *env = getenv("NCCL_FERRY_NET_HINTS");

    FIT_CHECK(argc == 1, "usage: integ_net_hints [--plugin PATH]");
    fit_set_role("net-hints");
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    hints_on = env != NULL && strcmp(env, "1") == 0;
    printf("  NCCL_FERRY_NET_HINTS=%d\n", hints_on);
    hints_run(path, 11);
    hints_run(path, 12);
    fit_check_no_ferry_threads("after finalize + dlclose");
    printf("integ_net_hints: all checks passed\n");
    return 0;
}
