/*
 * integ_ib_grouped: grouped receives (irecv with n > 1 buffers, NCCL's
 * maxRecvs), through ncclNetPlugin_v11 in one process, for any backend.
 *
 *   integ_ib_grouped [--plugin PATH]
 *
 * Where getProperties says maxRecvs > 1 (ib: 8): n = 1..maxRecvs with
 * distinct tags, sends posted in another order than the buffers (tags pick
 * the buffer), duplicate tags (matched in send order), zero-byte buffers,
 * several grouped receives in flight, per-buffer sizes from test() and every
 * byte; and a send larger than its buffer: ncclInvalidUsage on that send and
 * on the receive, with a WARN naming both sizes, while the other sends of the
 * group complete.
 *
 * Where it says 1 (socket): a 2-buffer irecv is refused with an error and a
 * WARN naming the count and maxRecvs, no request is returned, and the same
 * comm then carries the one-buffer rounds above byte for byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GR_MAX    8
#define GR_BUF    (256 * 1024)
#define GR_DEPTH  4

typedef struct gr_pair {
    const fit_plugin_t *p;
    void *send_comm, *recv_comm;
    char *sbuf, *rbuf;      /* GR_DEPTH x GR_MAX buffers of GR_BUF bytes each. */
    void *smh, *rmh;
} gr_pair_t;

typedef struct gr_msg {
    int    n;
    size_t size[GR_MAX], cap[GR_MAX];
    int    tag[GR_MAX];
    int    order[GR_MAX];   /* Send k goes to buffer order[k]. */
    void  *rreq, *sreq[GR_MAX];
    int    sdone[GR_MAX], rdone;
    int    rsizes[GR_MAX];
} gr_msg_t;

static char *gr_sbuf(const gr_pair_t *g, int slot, int i)
{
    return g->sbuf + ((size_t)slot * GR_MAX + (size_t)i) * GR_BUF;
}

static char *gr_rbuf(const gr_pair_t *g, int slot, int i)
{
    return g->rbuf + ((size_t)slot * GR_MAX + (size_t)i) * GR_BUF;
}

/* Message r: n buffers, sizes (some 0), tags distinct or all equal, a send order. */
static void gr_plan(gr_msg_t *m, int r, int nmax)
{
    int i, dup = r % 4 == 3;

    memset(m, 0, sizeof(*m));
    m->n = 1 + r % nmax;
    for (i = 0; i < m->n; i++) {
        m->size[i] = (r + i) % 5 == 0 ? 0 : ((size_t)r * 7919 + (size_t)i * 104729) % (GR_BUF - 512);
        m->cap[i] = m->size[i] + (i % 2 ? 0 : 333);
        m->tag[i] = dup ? 7 : 100 + i;
        /* Duplicate tags pair up in send order; distinct ones in any order. */
        m->order[i] = dup ? i : (i * 5 + r) % m->n;
    }
    if (!dup) { /* (i * 5 + r) % n is a permutation only when gcd(5, n) == 1: fix n == 5. */
        int seen[GR_MAX] = { 0 }, ok = 1;

        for (i = 0; i < m->n; i++)
            ok &= !seen[m->order[i]]++;
        for (i = 0; !ok && i < m->n; i++)
            m->order[i] = m->n - 1 - i;
    }
}

static void gr_post_recv(gr_pair_t *g, gr_msg_t *m, int slot, int r)
{
    void *data[GR_MAX], *mhs[GR_MAX];
    fit_bound_t b;
    int i;

    for (i = 0; i < m->n; i++) {
        data[i] = gr_rbuf(g, slot, i);
        mhs[i] = g->rmh;
        memset(data[i], FIT_POISON, m->cap[i]);
    }
    fit_bound_init(&b, "grouped irecv", 10.0, 100000000L);
    do {
        m->rreq = NULL;
        FIT_NCCL(g->p->net->irecv(g->recv_comm, m->n, data, m->cap, m->tag, mhs, NULL, &m->rreq));
        if (m->rreq == NULL)
            fit_bound_step(&b);
    } while (m->rreq == NULL);
    (void)r;
}

/* Send k of message m; drives the receive meanwhile. Returns the rc of isend. */
static ncclResult_t gr_post_send(gr_pair_t *g, gr_msg_t *m, int slot, int k, uint64_t seed)
{
    int i = m->order[k];
    char *buf = gr_sbuf(g, slot, i);
    fit_bound_t b;
    ncclResult_t rc;

    fit_fill(buf, m->size[i], seed + (uint64_t)i);
    fit_bound_init(&b, "grouped isend", 10.0, 100000000L);
    for (;;) {
        m->sreq[k] = NULL;
        rc = g->p->net->isend(g->send_comm, buf, m->size[i], m->tag[i], g->smh, NULL, &m->sreq[k]);
        if (rc != ncclSuccess || m->sreq[k] != NULL)
            return rc;
        fit_bound_step(&b);
    }
}

/* Test everything of m until done; returns the first error (and who) or success. */
static ncclResult_t gr_wait(gr_pair_t *g, gr_msg_t *m, const char **who)
{
    fit_bound_t b;
    int k, left;

    fit_bound_init(&b, "grouped completion", 30.0, 2000000000L);
    for (;;) {
        ncclResult_t rc;
        int done, sz;

        left = 0;
        for (k = 0; k < m->n; k++) {
            if (m->sdone[k])
                continue;
            done = 0;
            rc = g->p->net->test(m->sreq[k], &done, &sz);
            if (rc != ncclSuccess) {
                *who = "send test";
                m->sdone[k] = -1;
                return rc;
            }
            if (done) {
                FIT_CHECK((size_t)sz == m->size[m->order[k]], "send %d reported %d bytes, sent %zu",
                          k, sz, m->size[m->order[k]]);
                m->sdone[k] = 1;
            }
            left += !done;
        }
        if (!m->rdone) {
            done = 0;
            rc = g->p->net->test(m->rreq, &done, m->rsizes);
            if (rc != ncclSuccess) {
                *who = "recv test";
                m->rdone = -1;
                return rc;
            }
            m->rdone = done;
            left += !done;
        }
        if (left == 0)
            return ncclSuccess;
        fit_bound_step(&b);
    }
}

static void gr_check(const gr_pair_t *g, const gr_msg_t *m, int slot, uint64_t seed, int r)
{
    char what[96];
    size_t off;
    int i;

    for (i = 0; i < m->n; i++) {
        const unsigned char *buf = (const unsigned char *)gr_rbuf(g, slot, i);

        FIT_CHECK((size_t)m->rsizes[i] == m->size[i], "message %d buffer %d (tag %d): test "
                  "reported %d bytes, %zu were sent", r, i, m->tag[i], m->rsizes[i], m->size[i]);
        snprintf(what, sizeof(what), "message %d buffer %d of %d (tag %d, %zu B)", r, i, m->n,
                 m->tag[i], m->size[i]);
        fit_check_pattern(buf, m->size[i], seed + (uint64_t)i, what);
        for (off = m->size[i]; off < m->cap[i]; off++)
            FIT_CHECK(buf[off] == FIT_POISON, "%s: byte %zu past the size overwritten", what, off);
    }
}

/* Rounds of grouped receives, `depth` in flight, every send after all receives of a batch. */
static void gr_rounds(gr_pair_t *g, int nmax, int rounds, int depth)
{
    gr_msg_t m[GR_DEPTH];
    const char *who = NULL;
    int r, d, k;

    for (r = 0; r < rounds; r += depth) {
        for (d = 0; d < depth; d++) {
            gr_plan(&m[d], r + d, nmax);
            gr_post_recv(g, &m[d], d, r + d);
        }
        for (d = 0; d < depth; d++)
            for (k = 0; k < m[d].n; k++)
                FIT_NCCL(gr_post_send(g, &m[d], d, k, 1000 * (uint64_t)(r + d)));
        for (d = 0; d < depth; d++) {
            ncclResult_t rc = gr_wait(g, &m[d], &who);

            FIT_CHECK(rc == ncclSuccess, "message %d: %s returned %d (%s)", r + d, who, (int)rc,
                      fit_result_str(rc));
            gr_check(g, &m[d], d, 1000 * (uint64_t)(r + d), r + d);
        }
    }
    fit_pass("%d grouped receives of 1..%d buffers, %d in flight: tags, sizes, bytes intact",
             rounds, nmax, depth);
}

/* Buffer 1 of 3 is too small for its send: both sides get ncclInvalidUsage, the others land. */
static void gr_truncation(gr_pair_t *g)
{
    gr_msg_t m;
    const char *who = NULL;
    char line[4096];
    ncclResult_t rc;
    int from = fit_log_lines(), k, errs = 0;

    memset(&m, 0, sizeof(m));
    m.n = 3;
    m.size[0] = 500;  m.cap[0] = 1000; m.tag[0] = 1;
    m.size[1] = 5000; m.cap[1] = 100;  m.tag[1] = 2;
    m.size[2] = 700;  m.cap[2] = 1000; m.tag[2] = 3;
    m.order[0] = 2; m.order[1] = 1; m.order[2] = 0;
    fit_log_allow_warns(1);
    gr_post_recv(g, &m, 0, 0);
    for (k = 0; k < 3; k++)
        FIT_NCCL(gr_post_send(g, &m, 0, k, 777));
    /* Collect every outcome: the receive and the oversized send fail, the other sends succeed. */
    while ((rc = gr_wait(g, &m, &who)) != ncclSuccess) {
        FIT_CHECK(rc == ncclInvalidUsage, "truncated group: %s returned %d (%s), expected "
                  "ncclInvalidUsage", who, (int)rc, fit_result_str(rc));
        errs++;
        FIT_CHECK(errs <= 2, "more than two failures in a group with one oversized send");
    }
    FIT_CHECK(m.rdone == -1, "the receive of a group with an oversized send did not fail");
    for (k = 0; k < 3; k++)
        FIT_CHECK(m.sdone[k] == (m.order[k] == 1 ? -1 : 1), "send %d (buffer %d) ended %d", k,
                  m.order[k], m.sdone[k]);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "5000", "100", NULL, line, sizeof(line)) >= 0,
              "no WARN names both sizes 5000 and 100");
    printf("  WARN: %s\n", line);
    fit_log_allow_warns(0);
    fit_pass("5000 B send into a 100 B buffer of a 3-buffer receive -> ncclInvalidUsage on both "
             "sides, the other two sends complete");
}

/* A backend with maxRecvs 1 refuses a 2-buffer receive and its comm goes on working. */
static void gr_refused(gr_pair_t *g)
{
    void *data[2] = { gr_rbuf(g, 0, 0), gr_rbuf(g, 0, 1) }, *mhs[2] = { g->rmh, g->rmh };
    size_t sizes[2] = { 1000, 1000 };
    int tags[2] = { 1, 2 }, from = fit_log_lines();
    void *req = (void *)&req;
    char line[4096];
    ncclResult_t rc;

    fit_log_allow_warns(1);
    rc = g->p->net->irecv(g->recv_comm, 2, data, sizes, tags, mhs, NULL, &req);
    FIT_CHECK(rc != ncclSuccess, "a 2-buffer irecv on a maxRecvs 1 backend returned ncclSuccess");
    FIT_CHECK(req == NULL, "a refused irecv left a request behind");
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "2 grouped receives", "maxRecvs=1", NULL, line,
                           sizeof(line)) >= 0,
              "no WARN names the 2 buffers and maxRecvs=1");
    printf("  WARN: %s\n", line);
    fit_log_allow_warns(0);
    fit_pass("2-buffer irecv on a maxRecvs 1 backend -> %d (%s), no request, a WARN", (int)rc,
             fit_result_str(rc));
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    size_t arena = (size_t)GR_DEPTH * GR_MAX * GR_BUF;
    ncclNetProperties_v11_t props;
    fit_plugin_t plugin;
    gr_pair_t g;
    void *ctx, *lc;
    int nmax;

    FIT_CHECK(argc == 1, "usage: integ_ib_grouped [--plugin PATH]");
    fit_set_role("grouped");
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    fit_plugin_open(&plugin, path);
    ctx = fit_plugin_init(&plugin, 0x6666);
    memset(&props, 0, sizeof(props));
    FIT_NCCL(plugin.net->getProperties(0, &props));
    FIT_CHECK(props.maxRecvs >= 1, "device 0 (%s) has maxRecvs %d", props.name, props.maxRecvs);
    nmax = props.maxRecvs < GR_MAX ? props.maxRecvs : GR_MAX;
    memset(&g, 0, sizeof(g));
    g.p = &plugin;
    g.sbuf = aligned_alloc(4096, arena);
    g.rbuf = aligned_alloc(4096, arena);
    FIT_CHECK(g.sbuf != NULL && g.rbuf != NULL, "malloc");
    lc = fit_listen(&plugin, ctx, fit_device(&plugin), handle);
    fit_connect_accept(&plugin, ctx, fit_device(&plugin), handle, lc, &g.send_comm, &g.recv_comm,
                       NULL);
    FIT_NCCL(plugin.net->closeListen(lc));
    FIT_NCCL(plugin.net->regMr(g.send_comm, g.sbuf, arena, NCCL_PTR_HOST, &g.smh));
    FIT_NCCL(plugin.net->regMr(g.recv_comm, g.rbuf, arena, NCCL_PTR_HOST, &g.rmh));
    printf("  device %s: maxRecvs %d\n", props.name, props.maxRecvs);

    if (nmax == 1)
        gr_refused(&g);
    gr_rounds(&g, nmax, 48, 1);
    gr_rounds(&g, nmax, 64, GR_DEPTH);
    if (nmax > 1) /* A one-buffer receive has no other sends to see through. */
        gr_truncation(&g);

    FIT_NCCL(plugin.net->deregMr(g.send_comm, g.smh));
    FIT_NCCL(plugin.net->deregMr(g.recv_comm, g.rmh));
    FIT_NCCL(plugin.net->closeSend(g.send_comm));
    FIT_NCCL(plugin.net->closeRecv(g.recv_comm));
    FIT_NCCL(plugin.net->finalize(ctx));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&plugin);
    free(g.sbuf);
    free(g.rbuf);
    printf("integ_ib_grouped: all checks passed\n");
    return 0;
}
