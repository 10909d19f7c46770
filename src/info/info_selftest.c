/*
 * Loopback self-test of one device, through the ABI as NCCL drives it: two
 * connections from the device to its own listen handle (one per
 * direction), 1 MiB each way at once, every byte compared, then 8-byte
 * round trips timed. The verdict is one line: "OK", or "FAIL: " with the
 * step that failed, the call's result and the plugin's own WARN.
 *
 * Every wait is bounded twice: by a deadline and by an iteration count.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "info/info.h"

#define FERRY_INFO_ST_BYTES     (1u << 20)
#define FERRY_INFO_ST_PING      8
#define FERRY_INFO_ST_RTT_ITERS 200
#define FERRY_INFO_ST_PHASE_S   10.0
#define FERRY_INFO_ST_MAX_ITERS 20000000L

typedef struct ferry_info_st {
    const ferry_info_plugin_t *p;
    ferry_info_run_t          *run;
    ferry_info_dev_t          *d;
    int                        warns_before; /* WARNs logged before the current step. */
    int                        failed;
} ferry_info_st_t;

/* One direction: a send comm, the recv comm it reached, their buffers and registrations. */
typedef struct ferry_info_st_conn {
    void          *sc, *rc;
    unsigned char *sbuf, *rbuf;
    void          *smr, *rmr;
} ferry_info_st_conn_t;

typedef struct ferry_info_st_req {
    void *req;
    int   done;
    int   size;
} ferry_info_st_req_t;

static void ferry_info_st_fail(ferry_info_st_t *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void ferry_info_st_fail(ferry_info_st_t *st, const char *fmt, ...)
{
    char what[600];
    va_list ap;

    if (st->failed)
        return;
    st->failed = 1;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    /* The plugin's first WARN of this step says why in its own words. */
    if (st->run->nwarns > st->warns_before)
        snprintf(st->d->verdict, sizeof(st->d->verdict), "FAIL: %s; plugin: %.380s", what,
                 st->run->warns[st->warns_before]);
    else
        snprintf(st->d->verdict, sizeof(st->d->verdict), "FAIL: %s", what);
}

static int ferry_info_st_ok(ferry_info_st_t *st, ncclResult_t rc, const char *call)
{
    if (rc == ncclSuccess)
        return 1;
    ferry_info_st_fail(st, "%s returned %s", call, ferry_info_result_str(rc));
    return 0;
}

/* Listen on dev, then connect to that handle and accept, non-blocking as NCCL does. */
static int ferry_info_st_connect(ferry_info_st_t *st, void *ctx, int dev,
                                 ferry_info_st_conn_t *c, const char *dir)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    double deadline = ferry_info_now() + FERRY_INFO_ST_PHASE_S;
    void *lc = NULL;
    long iters;
    int ok = 1;

    memset(handle, 0, sizeof(handle));
    st->warns_before = st->run->nwarns;
    if (!ferry_info_st_ok(st, ferry_info_net_listen(st->p, ctx, dev, handle, &lc), "listen"))
        return 0;
    for (iters = 0; ok && (c->sc == NULL || c->rc == NULL); iters++) {
        if (c->sc == NULL)
            ok = ferry_info_st_ok(st, ferry_info_net_connect(st->p, ctx, dev, handle, &c->sc),
                                  "connect");
        if (ok && c->rc == NULL)
            ok = ferry_info_st_ok(st, ferry_info_net_accept(st->p, lc, &c->rc), "accept");
        if (ok && (c->sc == NULL || c->rc == NULL)) {
            if (ferry_info_now() > deadline || iters > FERRY_INFO_ST_MAX_ITERS) {
                ferry_info_st_fail(st, "%s connection to the device's own handle not up after "
                                   "%.0f s (connect %s, accept %s); a firewall on the "
                                   "interface, or NCCL_SOCKET_IFNAME naming the wrong one?",
                                   dir, FERRY_INFO_ST_PHASE_S, c->sc ? "done" : "pending",
                                   c->rc ? "done" : "pending");
                ok = 0;
            }
            sched_yield();
        }
    }
    if (lc != NULL)
        (void)ferry_info_net_close_listen(st->p, lc);
    return ok;
}

static int ferry_info_st_register(ferry_info_st_t *st, ferry_info_st_conn_t *c)
{
    c->sbuf = malloc(FERRY_INFO_ST_BYTES);
    c->rbuf = malloc(FERRY_INFO_ST_BYTES);
    if (c->sbuf == NULL || c->rbuf == NULL) {
        ferry_info_st_fail(st, "out of memory for two %u-byte buffers", FERRY_INFO_ST_BYTES);
        return 0;
    }
    st->warns_before = st->run->nwarns;
    return ferry_info_st_ok(st, ferry_info_net_reg_mr(st->p, c->sc, c->sbuf, FERRY_INFO_ST_BYTES,
                                                      &c->smr), "regMr (send side)") &&
           ferry_info_st_ok(st, ferry_info_net_reg_mr(st->p, c->rc, c->rbuf, FERRY_INFO_ST_BYTES,
                                                      &c->rmr), "regMr (recv side)");
}

/* test() every request not done yet; 1 if any finished. */
static int ferry_info_st_progress(ferry_info_st_t *st, ferry_info_st_req_t *reqs, int n)
{
    int i, moved = 0;

    for (i = 0; i < n && !st->failed; i++) {
        int done = 0, size = -1;

        if (reqs[i].req == NULL || reqs[i].done)
            continue;
        if (!ferry_info_st_ok(st, ferry_info_net_test(st->p, reqs[i].req, &done, &size), "test"))
            return moved;
        if (done) {
            reqs[i].done = 1;
            reqs[i].size = size;
            moved = 1;
        }
    }
    return moved;
}

static int ferry_info_st_all_done(const ferry_info_st_req_t *reqs, int n)
{
    int i;

    for (i = 0; i < n; i++)
        if (!reqs[i].done)
            return 0;
    return 1;
}

/*
 * One message over each conn of conns at once: receives first (a
 * receiver-driven backend sends only after the clear-to-send), then the
 * sends, retried while isend says "not yet", then test until all are done.
 * reqs holds 2 per conn: [2i] the send, [2i+1] the receive.
 */
static int ferry_info_st_exchange(ferry_info_st_t *st, ferry_info_st_conn_t *conns, int nconn,
                                  size_t size, const char *what)
{
    ferry_info_st_req_t reqs[4];
    double deadline = ferry_info_now() + FERRY_INFO_ST_PHASE_S;
    long iters = 0;
    int i;

    memset(reqs, 0, sizeof(reqs));
    st->warns_before = st->run->nwarns;
    for (i = 0; i < nconn; i++) {
        if (!ferry_info_st_ok(st, ferry_info_net_irecv(st->p, conns[i].rc, conns[i].rbuf, size, 1,
                                                       conns[i].rmr, &reqs[2 * i + 1].req),
                              "irecv"))
            return 0;
        if (reqs[2 * i + 1].req == NULL) {
            ferry_info_st_fail(st, "%s: irecv returned no request with nothing in flight", what);
            return 0;
        }
    }
    while (!st->failed && !ferry_info_st_all_done(reqs, 2 * nconn)) {
        int moved = 0;

        for (i = 0; i < nconn && !st->failed; i++) {
            if (reqs[2 * i].req != NULL)
                continue;
            if (!ferry_info_st_ok(st, ferry_info_net_isend(st->p, conns[i].sc, conns[i].sbuf, size,
                                                           1, conns[i].smr, &reqs[2 * i].req),
                                  "isend"))
                return 0;
            moved |= reqs[2 * i].req != NULL;
        }
        moved |= ferry_info_st_progress(st, reqs, 2 * nconn);
        if (!moved && (ferry_info_now() > deadline || ++iters > FERRY_INFO_ST_MAX_ITERS)) {
            ferry_info_st_fail(st, "%s not complete after %.0f s (sends %s, receives %s)", what,
                               FERRY_INFO_ST_PHASE_S,
                               reqs[0].done && (nconn < 2 || reqs[2].done) ? "done" : "pending",
                               reqs[1].done && (nconn < 2 || reqs[3].done) ? "done" : "pending");
            return 0;
        }
        if (!moved)
            sched_yield();
    }
    for (i = 0; i < 2 * nconn && !st->failed; i++)
        if (reqs[i].size != (int)size)
            ferry_info_st_fail(st, "%s: test reported %d bytes for the %s, %zu were sent", what,
                               reqs[i].size, i % 2 ? "receive" : "send", size);
    return !st->failed;
}

static void ferry_info_st_fill(unsigned char *buf, size_t n, unsigned seed)
{
    size_t i;

    for (i = 0; i < n; i++)
        buf[i] = (unsigned char)((i * 131u + seed) ^ (i >> 9));
}

static int ferry_info_st_check(ferry_info_st_t *st, const ferry_info_st_conn_t *c, size_t n,
                               const char *dir)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (c->rbuf[i] != c->sbuf[i]) {
            ferry_info_st_fail(st, "%s: byte %zu of %zu is 0x%02x, 0x%02x was sent", dir, i, n,
                               c->rbuf[i], c->sbuf[i]);
            return 0;
        }
    }
    st->d->bytes_checked += n;
    return 1;
}

static int ferry_info_st_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* 8 bytes there over conns[0], back over conns[1]; the median round trip. */
static void ferry_info_st_rtt(ferry_info_st_t *st, ferry_info_st_conn_t *conns)
{
    double t[FERRY_INFO_ST_RTT_ITERS], end = ferry_info_now() + FERRY_INFO_ST_PHASE_S;
    int i;

    for (i = 0; i < FERRY_INFO_ST_RTT_ITERS && ferry_info_now() < end; i++) {
        double t0 = ferry_info_now();

        conns[0].sbuf[0] = (unsigned char)i;
        if (!ferry_info_st_exchange(st, &conns[0], 1, FERRY_INFO_ST_PING, "round trip (there)"))
            return;
        conns[1].sbuf[0] = conns[0].rbuf[0];
        if (!ferry_info_st_exchange(st, &conns[1], 1, FERRY_INFO_ST_PING, "round trip (back)"))
            return;
        if (conns[1].rbuf[0] != (unsigned char)i) {
            ferry_info_st_fail(st, "round trip %d: byte 0x%02x came back, 0x%02x was sent", i,
                               conns[1].rbuf[0], (unsigned char)i);
            return;
        }
        t[i] = (ferry_info_now() - t0) * 1e6;
    }
    st->d->rtt_iters = i;
    if (i > 0) {
        qsort(t, (size_t)i, sizeof(t[0]), ferry_info_st_cmp_double);
        st->d->rtt_us = t[i / 2];
    }
}

static void ferry_info_st_close(ferry_info_st_t *st, ferry_info_st_conn_t *c)
{
    if (c->smr != NULL)
        (void)ferry_info_net_dereg_mr(st->p, c->sc, c->smr);
    if (c->rmr != NULL)
        (void)ferry_info_net_dereg_mr(st->p, c->rc, c->rmr);
    if (c->sc != NULL)
        (void)ferry_info_net_close_send(st->p, c->sc);
    if (c->rc != NULL)
        (void)ferry_info_net_close_recv(st->p, c->rc);
    free(c->sbuf);
    free(c->rbuf);
}

void ferry_info_selftest(const ferry_info_plugin_t *p, void *ctx, int dev, ferry_info_run_t *run,
                         ferry_info_dev_t *d)
{
    ferry_info_st_t st = {.p = p, .run = run, .d = d};
    ferry_info_st_conn_t conns[2];
    double t0;

    memset(conns, 0, sizeof(conns));
    if (!ferry_info_st_connect(&st, ctx, dev, &conns[0], "first") ||
        !ferry_info_st_connect(&st, ctx, dev, &conns[1], "second") ||
        !ferry_info_st_register(&st, &conns[0]) || !ferry_info_st_register(&st, &conns[1]))
        goto out_close;
    /* With comms open: the threads ferry started for them. */
    ferry_info_threads_snapshot(run);
    ferry_info_st_fill(conns[0].sbuf, FERRY_INFO_ST_BYTES, 0x5au + (unsigned)dev);
    ferry_info_st_fill(conns[1].sbuf, FERRY_INFO_ST_BYTES, 0xa5u + (unsigned)dev);
    t0 = ferry_info_now();
    if (!ferry_info_st_exchange(&st, conns, 2, FERRY_INFO_ST_BYTES, "1 MiB each way"))
        goto out_close;
    d->bw_gbps = 2.0 * FERRY_INFO_ST_BYTES * 8 / ((ferry_info_now() - t0) * 1e9);
    ferry_info_threads_snapshot(run); /* Threads that start with the first message, too. */
    if (!ferry_info_st_check(&st, &conns[0], FERRY_INFO_ST_BYTES, "first direction") ||
        !ferry_info_st_check(&st, &conns[1], FERRY_INFO_ST_BYTES, "second direction"))
        goto out_close;
    ferry_info_st_rtt(&st, conns);
out_close:
    ferry_info_st_close(&st, &conns[0]);
    ferry_info_st_close(&st, &conns[1]);
    d->ok = !st.failed;
    if (d->ok)
        snprintf(d->verdict, sizeof(d->verdict), "OK");
}
