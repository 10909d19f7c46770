/*
 * test-bad-request: test() on what is no live request. NULL, garbage (an
 * odd number, a heap address, a handle-shaped value out of range), a
 * request test() already reported done (also once its slot carried newer
 * messages), and a request of a comm already closed (whose memory is gone:
 * the ASan build shows any read of it). Each gets ncclInvalidUsage and a
 * WARN saying which it is, without touching the comm; then a driver looping
 * on test(NULL) 1000 times gets no more than the limit's 10 WARN lines of
 * that call site, and the comms that stay open still carry data.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "misuse.h"

#define RQ_SIZE  4096
#define RQ_LOOP  1000
#define RQ_BURST 10 /* FERRY_LOG_LIMIT_BURST. */
#define RQ_SITE  "never after its comm is closed"

/* One message through the pair; the requests' handles, both reported done. */
static void rq_message(mis_env_t *e, void *sc, void *rcm, char *sbuf, char *rbuf, void *smh,
                       void *rmh, uint64_t seed, void **sreq_p, void **rreq_p)
{
    const ncclNet_v11_t *n = e->plugin.net;
    size_t size = RQ_SIZE;
    int tag = 5, sdone = 0, rdone = 0, sz = 0;
    void *rdata = rbuf;
    fit_bound_t b;

    fit_fill(sbuf, RQ_SIZE, seed);
    memset(rbuf, FIT_POISON, RQ_SIZE);
    *sreq_p = *rreq_p = NULL;
    FIT_NCCL(n->irecv(rcm, 1, &rdata, &size, &tag, &rmh, NULL, rreq_p));
    FIT_CHECK(*rreq_p != NULL, "irecv gave no request");
    fit_bound_init(&b, "one message", 10.0, 2000000000L);
    while (*sreq_p == NULL) {
        FIT_NCCL(n->isend(sc, sbuf, RQ_SIZE, tag, smh, NULL, sreq_p));
        if (*sreq_p == NULL) {
            FIT_NCCL(n->test(*rreq_p, &rdone, &sz));
            fit_bound_step(&b);
        }
    }
    while (!sdone || !rdone) {
        if (!sdone)
            FIT_NCCL(n->test(*sreq_p, &sdone, &sz));
        if (!rdone)
            FIT_NCCL(n->test(*rreq_p, &rdone, &sz));
        fit_bound_step(&b);
    }
    fit_check_pattern(rbuf, RQ_SIZE, seed, "a message around the bad test() calls");
}

/* WARN lines of test()'s refusal since from. */
static int rq_count(int from)
{
    int i = from, n = 0;

    while ((i = fit_log_find(i, NCCL_LOG_WARN, RQ_SITE, NULL, NULL, NULL, 0)) >= 0) {
        n++;
        i++;
    }
    return n;
}

/* test(req) refused with ncclInvalidUsage and a WARN holding why. */
static void rq_refused(mis_env_t *e, const char *what, void *req, const char *why)
{
    int done = 1, size = -1, from = fit_log_lines();
    ncclResult_t rc = e->plugin.net->test(req, &done, &size);

    mis_refused(what, rc, ncclInvalidUsage, from, why, RQ_SITE);
    FIT_CHECK(done == 0, "%s: done came back %d", what, done);
}

void mis_test_bad_request(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    static char sbuf[RQ_SIZE], rbuf[RQ_SIZE];
    void *lc, *sc, *rcm, *smh, *rmh, *sreq, *rreq, *old_s, *old_r, *pending = NULL;
    void *heap = malloc(64), *shaped = (void *)(uintptr_t)(((uint64_t)1 << 32) | 0x7fffffffU);
    size_t size = RQ_SIZE;
    int i, tag = 5, warns, from;
    void *rdata = rbuf;
    double t0;

    FIT_CHECK(heap != NULL, "malloc");
    mis_pair(e, &lc, &sc, &rcm);
    FIT_NCCL(n->regMr(sc, sbuf, sizeof(sbuf), NCCL_PTR_HOST, &smh));
    FIT_NCCL(n->regMr(rcm, rbuf, sizeof(rbuf), NCCL_PTR_HOST, &rmh));
    fit_log_expect(RQ_SITE);
    from = fit_log_lines();

    rq_refused(e, "test(NULL)", NULL, "a NULL request");
    rq_refused(e, "test(0xdeadbeef)", (void *)(uintptr_t)0xdeadbeef, "not a ferry request handle");
    rq_refused(e, "test(a heap address)", heap, "not a ferry request handle");
    rq_refused(e, "test(a handle-shaped value out of range)", shaped,
               "not a ferry request handle");

    /* Reported done once: a second test() of either side is refused... */
    rq_message(e, sc, rcm, sbuf, rbuf, smh, rmh, 610, &old_s, &old_r);
    rq_refused(e, "test(a send already reported done)", old_s, "already reported done");
    rq_refused(e, "test(a receive already reported done)", old_r, "already reported done");
    /* ...also after its slot carried the 32 messages since (NCCL_NET_MAX_REQUESTS). */
    for (i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
        rq_message(e, sc, rcm, sbuf, rbuf, smh, rmh, 611 + (uint64_t)i, &sreq, &rreq);
    rq_refused(e, "test(a receive reported done, its slot reused since)", old_r,
               "already reported done");

    /* A receive still pending when its comm closed: the comm's memory is gone. */
    FIT_NCCL(n->irecv(rcm, 1, &rdata, &size, &tag, &rmh, NULL, &pending));
    FIT_CHECK(pending != NULL, "irecv gave no request");
    FIT_NCCL(n->deregMr(rcm, rmh));
    FIT_NCCL(n->closeRecv(rcm));
    rq_refused(e, "test(a pending receive of a closed comm)", pending, "comm already closed");
    rq_refused(e, "test(a send of a closed peer's comm, reported done)", sreq,
               "already reported done");
    warns = rq_count(from);
    printf("  %d refused test() calls, each with its WARN\n", warns);
    FIT_CHECK(warns == 9, "%d WARN lines for the 9 refused test() calls", warns);

    /* A driver looping on test(NULL): refused each time, WARNs within the site's limit. */
    t0 = fit_now();
    for (i = 0; i < RQ_LOOP; i++) {
        int done = 1, sz = 0;
        ncclResult_t rc = n->test(NULL, &done, &sz);

        FIT_CHECK(rc == ncclInvalidUsage && done == 0, "test(NULL) call %d returned %s, done %d",
                  i, fit_result_str(rc), done);
    }
    warns = rq_count(from);
    printf("  %d more test(NULL) calls in %.3f s: %d WARN lines of that call site in all (its "
           "limit: %d per 10 s)\n", RQ_LOOP, fit_now() - t0, warns, RQ_BURST);
    FIT_CHECK(warns == RQ_BURST, "9 + %d refused test() calls gave %d WARN lines, expected the "
              "limit's %d", RQ_LOOP, warns, RQ_BURST);
    printf("MISUSE call=\"test() on NULL, garbage, reported and closed-comm requests, then %d x "
           "test(NULL)\" code=ncclInvalidUsage calls=%d warn_lines=%d\n", RQ_LOOP, RQ_LOOP + 9,
           warns);
    fit_log_expect_clear();
    FIT_NCCL(n->deregMr(sc, smh));
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeListen(lc));
    free(heap);
    fit_pass("test() on NULL, garbage, reported and closed-comm requests: ncclInvalidUsage + "
             "WARN each; %d more test(NULL): within the WARN limit", RQ_LOOP);
}
