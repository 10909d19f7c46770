/*
 * integ_profiler: ferry's NCCL profiler events, through ncclNetPlugin_v10
 * or _v11 in one process, with a fake profiler callback in place of
 * NCCL's (it records every call; Start hands out its record as eHandle).
 *
 *   integ_profiler [--plugin PATH] --abi v10|v11 --expect on|off [--warn TEXT]
 *
 * on: every isend/irecv buffer given a phandle gets exactly one Start
 * (with that phandle, pluginId SOCK|1 or IB|1 by backend, a descriptor whose
 * NCCL prefix and ferry part hold the right size, direction, tag, peer,
 * backend and message number) and exactly one Stop with the eHandle Start
 * returned, after which the descriptor says the bytes test() reported. A
 * request without phandle gets none; Stop never comes for an event the
 * callback did not open. Grouped receives (maxRecvs > 1: ib) get one event
 * per buffer. off (a callback given, no reason to profile): no call at all.
 * Either way every byte arrives intact and the INFO line says on or off.
 * --warn TEXT: a WARN containing TEXT must be logged (a bad NCCL_FERRY_PROFILER).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nccl/prof_descr.h"

#define PR_MSGS     8
#define PR_DEPTH    4
#define PR_BUF      (8u << 20)
#define PR_MAX_RECS 128
#define PR_TAG      3

/* ---- the fake profiler ---------------------------------------------------- */

typedef struct pr_rec {
    void                          *phandle;
    int64_t                        plugin_id;
    ferry_nccl_prof_descr_t        at_start; /* Copied at Start. */
    const ferry_nccl_prof_descr_t *live;     /* The plugin's descriptor, read at Stop. */
    int                            stops;
    uint64_t                       done_size;
    int                            failed;
} pr_rec_t;

static pthread_mutex_t pr_lock = PTHREAD_MUTEX_INITIALIZER;
static pr_rec_t pr_recs[PR_MAX_RECS];
static int pr_nrecs, pr_bad;
static char pr_bad_why[256];

static void pr_bad_call(const char *why)
{
    if (pr_bad++ == 0)
        snprintf(pr_bad_why, sizeof(pr_bad_why), "%s", why);
}

static ncclResult_t pr_callback(void **eHandle, int type, void *pHandle, int64_t pluginId,
                                void *extData)
{
    pthread_mutex_lock(&pr_lock);
    if (type == ncclProfilerNetEventStart) {
        if (pHandle == NULL)
            pr_bad_call("Start with a NULL pHandle (NCCL's core dereferences it)");
        else if (*eHandle != NULL)
            pr_bad_call("Start with *eHandle not NULL");
        else if (extData == NULL)
            pr_bad_call("Start without a descriptor");
        else if (pr_nrecs >= PR_MAX_RECS)
            pr_bad_call("more Starts than the test makes requests");
        else {
            pr_rec_t *r = &pr_recs[pr_nrecs++];

            r->phandle = pHandle;
            r->plugin_id = pluginId;
            memcpy(&r->at_start, extData, sizeof(r->at_start));
            r->live = extData;
            *eHandle = r;
        }
    } else if (type == ncclProfilerNetEventStop) {
        pr_rec_t *r = *eHandle;

        if (r < pr_recs || r >= pr_recs + pr_nrecs)
            pr_bad_call("Stop with an eHandle no Start returned");
        else if (pHandle != NULL || extData != NULL)
            pr_bad_call("Stop with a pHandle or descriptor");
        else {
            r->stops++;
            r->done_size = r->live->done_size;
            r->failed = r->live->failed;
        }
    } else {
        pr_bad_call("an Update event (ferry sends only Start and Stop)");
    }
    pthread_mutex_unlock(&pr_lock);
    return ncclSuccess;
}

/* ---- the ABI, v10 or v11 --------------------------------------------------- */

typedef struct pr_net {
    const fit_plugin_t  *fp;
    const ncclNet_v10_t *v10; /* NULL: v11 (fp->net). */
    void                *ctx;
} pr_net_t;

#define PR_CALL(_n, _m, ...) ((_n)->v10 != NULL ? (_n)->v10->_m(__VA_ARGS__) \
                                                : (_n)->fp->net->_m(__VA_ARGS__))

static void pr_init(pr_net_t *n)
{
    if (n->v10 != NULL) {
        FIT_NCCL(n->v10->init(fit_logger, pr_callback));
    } else {
        ncclNetCommConfig_v11_t cfg = {.trafficClass = -1};

        FIT_NCCL(n->fp->net->init(&n->ctx, 0x9f0f, &cfg, fit_logger, pr_callback));
    }
}

static void pr_connect(pr_net_t *n, void **sc, void **rc)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ncclNetCommConfig_v10_t cfg = {.trafficClass = -1};
    ncclNetDeviceHandle_v11_t *dh = NULL;
    void *lc = NULL;
    fit_bound_t b;

    memset(handle, 0, sizeof(handle));
    if (n->v10 != NULL)
        FIT_NCCL(n->v10->listen(0, handle, &lc));
    else
        FIT_NCCL(n->fp->net->listen(n->ctx, 0, handle, &lc));
    FIT_CHECK(lc != NULL, "listen gave no comm");
    *sc = *rc = NULL;
    fit_bound_init(&b, "connect/accept", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (*sc == NULL || *rc == NULL) {
        if (*sc == NULL && n->v10 != NULL)
            FIT_NCCL(n->v10->connect(0, &cfg, handle, sc, &dh));
        else if (*sc == NULL)
            FIT_NCCL(n->fp->net->connect(n->ctx, 0, handle, sc, &dh));
        if (*rc == NULL)
            FIT_NCCL(PR_CALL(n, accept, lc, rc, &dh));
        if (*sc == NULL || *rc == NULL)
            fit_bound_step(&b);
    }
    FIT_NCCL(PR_CALL(n, closeListen, lc));
}

/* ---- the traffic ---------------------------------------------------------- */

/* What the test expects of each event it caused. */
typedef struct pr_want {
    void  *phandle;
    int    send;
    int    sub;
    int    tag;
    size_t size;     /* Posted (recv) or sent bytes. */
    size_t done;     /* What test() reports. */
} pr_want_t;

static pr_want_t pr_wants[PR_MAX_RECS];
static int pr_nwants;
/* Fake NCCL proxy-step handles: distinct addresses, never dereferenced. */
static char pr_steps[PR_MAX_RECS];

static void *pr_expect(int send, int sub, int tag, size_t size, size_t done)
{
    pr_want_t *w = &pr_wants[pr_nwants];

    FIT_CHECK(pr_nwants < PR_MAX_RECS, "too many expected events");
    w->phandle = &pr_steps[pr_nwants];
    w->send = send;
    w->sub = sub;
    w->tag = tag;
    w->size = size;
    w->done = done;
    pr_nwants++;
    return w->phandle;
}

typedef struct pr_pair {
    pr_net_t *n;
    void     *sc, *rc, *smh, *rmh;
    char     *sbuf, *rbuf;
} pr_pair_t;

/* test() until done; the sizes it reported (n of them). */
static void pr_wait(pr_pair_t *pp, void *req, int *sizes, const char *what)
{
    fit_bound_t b;
    int done = 0;

    fit_bound_init(&b, what, 30.0, 200000000L);
    for (;;) {
        FIT_NCCL(PR_CALL(pp->n, test, req, &done, sizes));
        if (done)
            return;
        fit_bound_step(&b);
    }
}

static void *pr_isend(pr_pair_t *pp, void *buf, size_t size, int tag, void *ph)
{
    void *req = NULL;
    fit_bound_t b;

    fit_bound_init(&b, "isend", 30.0, 200000000L);
    for (;;) {
        FIT_NCCL(PR_CALL(pp->n, isend, pp->sc, buf, size, tag, pp->smh, ph, &req));
        if (req != NULL)
            return req;
        fit_bound_step(&b);
    }
}

/* PR_MSGS messages, PR_DEPTH in flight; message PR_MSGS - 1 carries no phandles. */
static void pr_stream(pr_pair_t *pp, int profiled)
{
    static const size_t sizes[PR_MSGS] = {0, 1, 4096, 65539, 1u << 20, 4u << 20, 777, 8192};
    void *sreq[PR_MSGS], *rreq[PR_MSGS];
    size_t off[PR_MSGS], o = 0;
    int i, k, got;

    for (i = 0; i < PR_MSGS; i++) {
        off[i] = o;
        o += sizes[i];
    }
    FIT_CHECK(o <= PR_BUF, "the sizes overflow the buffers");
    fit_fill(pp->sbuf, PR_BUF, 41);
    memset(pp->rbuf, FIT_POISON, PR_BUF);
    for (i = 0, k = 0; k < PR_MSGS; ) {
        /* Post up to PR_DEPTH ahead, then complete the oldest (NCCL's order). */
        while (i < PR_MSGS && i - k < PR_DEPTH) {
            int with = profiled && i != PR_MSGS - 1;
            void *rph = with ? pr_expect(0, 0, PR_TAG, sizes[i], sizes[i]) : NULL;
            void *sph = with ? pr_expect(1, 0, PR_TAG, sizes[i], sizes[i]) : NULL;
            void *datas[1] = {pp->rbuf + off[i]}, *mhs[1] = {pp->rmh}, *phs[1] = {rph};
            size_t caps[1] = {sizes[i]};
            int tags[1] = {PR_TAG};

            rreq[i] = NULL;
            FIT_NCCL(PR_CALL(pp->n, irecv, pp->rc, 1, datas, caps, tags, mhs,
                             with ? phs : NULL, &rreq[i]));
            FIT_CHECK(rreq[i] != NULL, "irecv %d gave no request", i);
            sreq[i] = pr_isend(pp, pp->sbuf + off[i], sizes[i], PR_TAG, sph);
            i++;
        }
        pr_wait(pp, sreq[k], &got, "send");
        FIT_CHECK(got == (int)sizes[k], "send %d: test says %d bytes, %zu sent", k, got, sizes[k]);
        pr_wait(pp, rreq[k], &got, "recv");
        FIT_CHECK(got == (int)sizes[k], "recv %d: test says %d bytes, %zu sent", k, got, sizes[k]);
        FIT_CHECK(memcmp(pp->rbuf + off[k], pp->sbuf + off[k], sizes[k]) == 0,
                  "message %d (%zu bytes) differs", k, sizes[k]);
        k++;
    }
}

/* One receive of two buffers (tags 11, 12), the sends in the other order; test() with NULL sizes
 * on the sends, as NCCL may. */
static void pr_grouped(pr_pair_t *pp)
{
    void *rph0 = pr_expect(0, 0, 11, 5000, 3000), *rph1 = pr_expect(0, 1, 12, 5000, 4000);
    void *sph1 = pr_expect(1, 0, 12, 4000, 4000), *sph0 = pr_expect(1, 0, 11, 3000, 3000);
    void *datas[2] = {pp->rbuf, pp->rbuf + 8192}, *mhs[2] = {pp->rmh, pp->rmh};
    void *phs[2] = {rph0, rph1}, *rreq = NULL, *s1, *s0;
    size_t caps[2] = {5000, 5000};
    int tags[2] = {11, 12}, sizes[2] = {-1, -1};

    fit_fill(pp->sbuf, 16384, 7);
    FIT_NCCL(PR_CALL(pp->n, irecv, pp->rc, 2, datas, caps, tags, mhs, phs, &rreq));
    FIT_CHECK(rreq != NULL, "grouped irecv gave no request");
    s1 = pr_isend(pp, pp->sbuf + 8192, 4000, 12, sph1);
    s0 = pr_isend(pp, pp->sbuf, 3000, 11, sph0);
    pr_wait(pp, s1, NULL, "grouped send 1");
    pr_wait(pp, s0, NULL, "grouped send 0");
    pr_wait(pp, rreq, sizes, "grouped recv");
    FIT_CHECK(sizes[0] == 3000 && sizes[1] == 4000, "grouped sizes %d %d", sizes[0], sizes[1]);
    FIT_CHECK(memcmp(pp->rbuf, pp->sbuf, 3000) == 0, "grouped buffer 0 differs");
    FIT_CHECK(memcmp(pp->rbuf + 8192, pp->sbuf + 8192, 4000) == 0, "grouped buffer 1 differs");
}

/* ---- the checks ----------------------------------------------------------- */

static void pr_check_event(const pr_want_t *w, const pr_rec_t *r, const char *backend,
                           uint32_t *last_seq)
{
    const ferry_nccl_prof_descr_t *d = &r->at_start;
    int ib = strcmp(backend, "ib") == 0;
    int64_t id = ib ? (int64_t)(NCCL_PROFILER_NET_TYPE_IB | 1) : (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | 1);
    const char *dir = w->send ? "send" : "recv";

    FIT_CHECK(r->stops == 1, "%s event (tag %d, %zu bytes): %d Stops", dir, w->tag, w->size,
              r->stops);
    FIT_CHECK(r->plugin_id == id, "%s event: pluginId 0x%llx, want 0x%llx", dir,
              (unsigned long long)r->plugin_id, (unsigned long long)id);
    FIT_CHECK(d->magic == FERRY_NCCL_PROF_MAGIC && d->version == FERRY_NCCL_PROF_VERSION,
              "%s event: magic 0x%x version %u", dir, d->magic, d->version);
    FIT_CHECK(d->send == w->send && d->sub == w->sub && d->tag == w->tag && d->size == w->size,
              "%s event: send %u sub %u tag %d size %llu; want %d %d %d %zu", dir, d->send,
              d->sub, d->tag, (unsigned long long)d->size, w->send, w->sub, w->tag, w->size);
    FIT_CHECK(strcmp(d->backend, backend) == 0, "%s event: backend '%s', want '%s'", dir,
              d->backend, backend);
    FIT_CHECK(strstr(d->peer, "127.0.0.1") != NULL, "%s event: peer '%s'", dir, d->peer);
    FIT_CHECK(d->comm > 0, "%s event: comm serial 0", dir);
    if (ib) {
        FIT_CHECK(d->nccl.ib.type == ncclProfileQp && d->nccl.ib.qp.length == w->size &&
                      d->nccl.ib.qp.opcode ==
                          (w->send ? FERRY_NCCL_PROF_IB_SEND : FERRY_NCCL_PROF_IB_RECV) &&
                      d->nccl.ib.qp.wr_id == d->seq,
                  "%s event: IB prefix type %u length %zu opcode %d wr_id %llu", dir,
                  d->nccl.ib.type, d->nccl.ib.qp.length, d->nccl.ib.qp.opcode,
                  (unsigned long long)d->nccl.ib.qp.wr_id);
    } else {
        FIT_CHECK(d->nccl.sock.type == ncclProfileSocket && d->nccl.sock.sock.length == w->size &&
                      d->nccl.sock.sock.op ==
                          (w->send ? FERRY_NCCL_PROF_SOCK_SEND : FERRY_NCCL_PROF_SOCK_RECV),
                  "%s event: socket prefix type %u length %zu op %d", dir, d->nccl.sock.type,
                  d->nccl.sock.sock.length, d->nccl.sock.sock.op);
    }
    FIT_CHECK(r->done_size == w->done && r->failed == 0,
              "%s event: done_size %llu failed %d at Stop, want %zu", dir,
              (unsigned long long)r->done_size, r->failed, w->done);
    /* Message numbers grow per direction (the buffers of one grouped receive share one). */
    if (w->sub == 0) {
        FIT_CHECK(last_seq[w->send] == UINT32_MAX || d->seq > last_seq[w->send],
                  "%s event: seq %u after %u", dir, d->seq, last_seq[w->send]);
        last_seq[w->send] = d->seq;
    }
}

static void pr_check_events(const char *backend)
{
    uint32_t last_seq[2] = {UINT32_MAX, UINT32_MAX};
    int i, j;

    FIT_CHECK(pr_bad == 0, "%d bad callback call(s), first: %s", pr_bad, pr_bad_why);
    FIT_CHECK(pr_nrecs == pr_nwants, "%d events started, %d requests had phandles", pr_nrecs,
              pr_nwants);
    for (i = 0; i < pr_nwants; i++) {
        const pr_rec_t *r = NULL;

        for (j = 0; j < pr_nrecs; j++) {
            if (pr_recs[j].phandle != pr_wants[i].phandle)
                continue;
            FIT_CHECK(r == NULL, "two events for the phandle of buffer %d", i);
            r = &pr_recs[j];
        }
        FIT_CHECK(r != NULL, "no event for %s buffer %d (tag %d, %zu bytes)",
                  pr_wants[i].send ? "send" : "recv", i, pr_wants[i].tag, pr_wants[i].size);
        pr_check_event(&pr_wants[i], r, backend, last_seq);
    }
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv), *abi = "v11", *expect = "on", *warn = NULL;
    const char *backend = getenv("NCCL_FERRY_BACKEND");
    fit_plugin_t p;
    pr_net_t n = {.fp = &p};
    pr_pair_t pp = {.n = &n};
    ncclNetProperties_v10_t props10;
    ncclNetProperties_v11_t props11;
    int i, ndev = 0, max_recvs;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--abi") == 0)
            abi = argv[i + 1];
        else if (strcmp(argv[i], "--expect") == 0)
            expect = argv[i + 1];
        else if (strcmp(argv[i], "--warn") == 0)
            warn = argv[i + 1];
    }
    if (warn != NULL)
        fit_log_expect(warn);
    FIT_CHECK(backend != NULL, "NCCL_FERRY_BACKEND (socket or ib) is not set");
    fit_set_role("profiler");
    fit_plugin_open(&p, path);
    if (strcmp(abi, "v10") == 0) {
        n.v10 = dlsym(p.dl, "ncclNetPlugin_v10");
        FIT_CHECK(n.v10 != NULL, "no ncclNetPlugin_v10");
    }
    pr_init(&n);
    FIT_NCCL(PR_CALL(&n, devices, &ndev));
    FIT_CHECK(ndev >= 1, "no device");
    if (n.v10 != NULL) {
        FIT_NCCL(n.v10->getProperties(0, &props10));
        max_recvs = props10.maxRecvs;
    } else {
        FIT_NCCL(p.net->getProperties(0, &props11));
        max_recvs = props11.maxRecvs;
    }
    FIT_CHECK(warn == NULL || fit_log_find(0, NCCL_LOG_WARN, warn, NULL, NULL, NULL, 0) >= 0,
              "no WARN saying '%s'", warn);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "NCCL profiler net events",
                           strcmp(expect, "on") == 0 ? "events on (" : "events off (", NULL, NULL,
                           0) >= 0,
              "no INFO line saying the events are %s", expect);
    pr_connect(&n, &pp.sc, &pp.rc);
    pp.sbuf = malloc(PR_BUF);
    pp.rbuf = malloc(PR_BUF);
    FIT_CHECK(pp.sbuf != NULL && pp.rbuf != NULL, "out of memory");
    FIT_NCCL(PR_CALL(&n, regMr, pp.sc, pp.sbuf, PR_BUF, NCCL_PTR_HOST, &pp.smh));
    FIT_NCCL(PR_CALL(&n, regMr, pp.rc, pp.rbuf, PR_BUF, NCCL_PTR_HOST, &pp.rmh));
    pr_stream(&pp, strcmp(expect, "on") == 0);
    if (max_recvs > 1 && strcmp(expect, "on") == 0)
        pr_grouped(&pp);
    if (strcmp(expect, "on") == 0) {
        pr_check_events(backend);
        fit_pass("%s %s: %d events, one Start and one Stop each, sizes, tags, peer, seq%s", abi,
                 backend, pr_nrecs, max_recvs > 1 ? ", grouped receive per buffer" : "");
    } else {
        FIT_CHECK(pr_nrecs == 0 && pr_bad == 0, "events off, yet %d Start(s) and %d bad call(s)",
                  pr_nrecs, pr_bad);
        fit_pass("%s %s: callback given, events off: no call, data intact", abi, backend);
    }
    FIT_NCCL(PR_CALL(&n, deregMr, pp.sc, pp.smh));
    FIT_NCCL(PR_CALL(&n, deregMr, pp.rc, pp.rmh));
    FIT_NCCL(PR_CALL(&n, closeSend, pp.sc));
    FIT_NCCL(PR_CALL(&n, closeRecv, pp.rc));
    if (n.v10 == NULL)
        FIT_NCCL(p.net->finalize(n.ctx));
    fit_log_check_clean("profiler");
    free(pp.sbuf);
    free(pp.rbuf);
    fit_plugin_close(&p);
    return 0;
}
