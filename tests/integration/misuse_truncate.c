/*
 * send-larger-refused: an isend larger than the irecv it meets, after three
 * messages that fit. The receiver's test() fails with ncclInvalidUsage and a
 * WARN naming both sizes; the sender must learn it too, within a second
 * (the socket sender used to wait until the receiver closed its comm).
 * Socket: ncclRemoteError and a WARN that the peer refused the message as
 * larger than its receive; ib: the sender sees the receive's size itself,
 * ncclInvalidUsage. The messages before arrive byte for byte, and nothing
 * lands in or past the receive.
 *
 * 1 MiB into 4 KiB on a comm that carried 1 MiB before: its bytes may all
 * fit the kernel's buffers and the isend end well before the receiver reads
 * its header; then the sender's next isend must fail instead, still within
 * the second. 16 MiB into 4 KiB on a fresh comm cannot fit them: that isend
 * itself must fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "misuse.h"

#define TR_BIG   ((size_t)1 << 20)
#define TR_SMALL ((size_t)4096)
#define TR_GOOD  3

/* Post the receive, then the send (ib: once the receive's clear-to-send is out). */
static void tr_post(mis_env_t *e, void *sc, void *rcm, void *sbuf, size_t ssize, void *smh,
                    void *rbuf, size_t rsize, void *rmh, void **sreq_p, void **rreq_p)
{
    const ncclNet_v11_t *n = e->plugin.net;
    int tag = 9, done = 0, size = 0;
    fit_bound_t b;

    *sreq_p = *rreq_p = NULL;
    FIT_NCCL(n->irecv(rcm, 1, &rbuf, &rsize, &tag, &rmh, NULL, rreq_p));
    FIT_CHECK(*rreq_p != NULL, "irecv of %zu bytes gave no request", rsize);
    fit_bound_init(&b, "isend", 10.0, 2000000000L);
    while (*sreq_p == NULL) {
        FIT_NCCL(n->isend(sc, sbuf, ssize, tag, smh, NULL, sreq_p));
        if (*sreq_p == NULL) {
            /* ib: the receive's progress writes the clear-to-send. */
            FIT_NCCL(n->test(*rreq_p, &done, &size));
            FIT_CHECK(!done, "a receive completed before its isend");
            fit_bound_step(&b);
        }
    }
}

typedef struct tr_end {
    ncclResult_t rc;
    int          done, size;
    double       took; /* Seconds from the isend until test() said how it ended. */
} tr_end_t;

/* test() both requests in turns until each has ended or the deadline passed (from t0). */
static void tr_run(mis_env_t *e, void *sreq, void *rreq, double t0, double seconds, tr_end_t *s,
                   tr_end_t *r)
{
    const ncclNet_v11_t *n = e->plugin.net;
    int s_end = 0, r_end = 0;
    fit_bound_t b;

    memset(s, 0, sizeof(*s));
    memset(r, 0, sizeof(*r));
    s->took = r->took = -1.0;
    fit_bound_init(&b, "both ends of the message", seconds, 2000000000L);
    while ((!s_end || !r_end) && fit_bound_try_step(&b)) {
        if (!r_end) {
            r->rc = n->test(rreq, &r->done, &r->size);
            r_end = r->rc != ncclSuccess || r->done;
            if (r_end)
                r->took = fit_now() - t0;
        }
        if (!s_end) {
            s->rc = n->test(sreq, &s->done, &s->size);
            s_end = s->rc != ncclSuccess || s->done;
            if (s_end)
                s->took = fit_now() - t0;
        }
    }
}

/*
 * The refused isend ended as if all was well: its bytes had all left into the
 * kernel's buffers. 4 KiB isends after it until one fails (bounded by the
 * second from t0); returns how many ended first.
 */
static int tr_next_sends(mis_env_t *e, void *sc, void *sbuf, void *smh, double t0, tr_end_t *s)
{
    const ncclNet_v11_t *n = e->plugin.net;
    int tag = 9, sent = 0;
    fit_bound_t b;

    fit_bound_init(&b, "an isend after the refused one failing", 10.0, 2000000000L);
    while (fit_bound_try_step(&b)) {
        void *req = NULL;

        s->rc = n->isend(sc, sbuf, TR_SMALL, tag, smh, NULL, &req);
        if (s->rc != ncclSuccess || req == NULL)
            continue; /* Refused at once, or 32 in flight: test() tells. */
        s->done = 0;
        s->rc = mis_wait(&e->plugin, req, 10.0, &s->done, &s->size);
        if (s->rc != ncclSuccess || !s->done)
            break;
        sent++;
    }
    s->took = fit_now() - t0;
    return sent;
}

/* A fresh pair: three messages that fit, then big bytes into a 4 KiB receive. */
static void tr_refused(mis_env_t *e, size_t big, const size_t *good, int ngood, int may_fit)
{
    const ncclNet_v11_t *n = e->plugin.net;
    int ib = strcmp(e->backend, "ib") == 0, i, from, after = -1;
    size_t rlen = TR_BIG * 2;
    char *sbuf = malloc(big), *rbuf = malloc(rlen), line[4096], bigs[32], small[32];
    void *lc, *sc, *rcm, *smh, *rmh, *sreq, *rreq;
    tr_end_t s, r;
    double t0;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc");
    mis_pair(e, &lc, &sc, &rcm);
    FIT_NCCL(n->regMr(sc, sbuf, big, NCCL_PTR_HOST, &smh));
    FIT_NCCL(n->regMr(rcm, rbuf, rlen, NCCL_PTR_HOST, &rmh));
    /* The messages before the bad one: delivered whole. */
    for (i = 0; i < ngood; i++) {
        fit_fill(sbuf, good[i], 300 + (uint64_t)i);
        memset(rbuf, FIT_POISON, good[i]);
        tr_post(e, sc, rcm, sbuf, good[i], smh, rbuf, good[i], rmh, &sreq, &rreq);
        tr_run(e, sreq, rreq, fit_now(), 10.0, &s, &r);
        FIT_CHECK(s.rc == ncclSuccess && s.done && r.rc == ncclSuccess && r.done,
                  "message %d (%zu bytes): sender %s done %d, receiver %s done %d", i, good[i],
                  fit_result_str(s.rc), s.done, fit_result_str(r.rc), r.done);
        FIT_CHECK(r.size == (int)good[i], "message %d: %d bytes, expected %zu", i, r.size,
                  good[i]);
        fit_check_pattern(rbuf, good[i], 300 + (uint64_t)i, "a message before the refused one");
    }
    fit_pass("%d messages of %zu..%zu bytes delivered byte for byte", ngood, good[0],
             good[ngood - 1]);

    /* The bad one, and nothing may land in or past the receive. */
    fit_fill(sbuf, big, 399);
    fit_fill(rbuf, rlen, 398);
    fit_log_allow_warns(1);
    from = fit_log_lines();
    t0 = fit_now();
    tr_post(e, sc, rcm, sbuf, big, smh, rbuf, TR_SMALL, rmh, &sreq, &rreq);
    tr_run(e, sreq, rreq, t0, 10.0, &s, &r);
    printf("  %zu into %zu: receiver test -> %s after %.3f s; sender test -> %s (done %d) "
           "after %.3f s\n", big, TR_SMALL, fit_result_str(r.rc), r.took, fit_result_str(s.rc),
           s.done, s.took);
    if (s.rc == ncclSuccess && s.done && may_fit && !ib) {
        after = tr_next_sends(e, sc, sbuf, smh, t0, &s);
        printf("  its bytes had all left: %d isend(s) of 4 KiB ended after it, the next -> %s "
               "after %.3f s\n", after, fit_result_str(s.rc), s.took);
    }
    FIT_CHECK(r.rc == ncclInvalidUsage && !r.done, "receiver: test returned %d (%s), done %d "
              "(%d bytes) within %.1f s, expected ncclInvalidUsage", (int)r.rc,
              fit_result_str(r.rc), r.done, r.size, r.took);
    FIT_CHECK(r.took >= 0 && r.took < 1.0, "receiver: its error took %.3f s (at most 1 s)",
              r.took);
    FIT_CHECK(s.rc == (ib ? ncclInvalidUsage : ncclRemoteError) && !s.done,
              "sender: test returned %d (%s), done %d within %.1f s, expected %s", (int)s.rc,
              fit_result_str(s.rc), s.done, s.took, ib ? "ncclInvalidUsage" : "ncclRemoteError");
    FIT_CHECK(s.took >= 0 && s.took < 1.0, "sender: its error took %.3f s (at most 1 s)", s.took);
    snprintf(bigs, sizeof(bigs), "%zu", big);
    snprintf(small, sizeof(small), "%zu", TR_SMALL);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, bigs, small, ib ? "recv comm" : "stream", line,
                           sizeof(line)) >= 0, "no receiver WARN names both sizes (%s, %s)",
              bigs, small);
    printf("  receiver WARN: %s\n", line);
    if (!ib)
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, bigs, small, "request state POSTED", NULL,
                               0) >= 0, "the receiver WARN does not say the request's state");
    if (ib)
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "does not fit", bigs, NULL, line,
                               sizeof(line)) >= 0, "no sender WARN says the isend does not fit");
    else
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "refused", "larger than its receive", bigs,
                               line, sizeof(line)) >= 0 &&
                      strstr(line, small) != NULL,
                  "no sender WARN says the peer refused the %s-byte message as larger than its "
                  "%s-byte receive", bigs, small);
    printf("  sender WARN: %s\n", line);
    fit_check_pattern(rbuf, rlen, 398, "the 4 KiB receive and what follows it");
    printf("MISUSE call=\"%zu-byte isend into a 4 KiB irecv\" receiver=%s receiver_s=%.3f "
           "sender=%s sender_s=%.3f sends_after=%d\n", big, fit_result_str(r.rc), r.took,
           fit_result_str(s.rc), s.took, after < 0 ? 0 : after);
    fit_log_allow_warns(0);
    FIT_NCCL(n->deregMr(sc, smh));
    FIT_NCCL(n->deregMr(rcm, rmh));
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeRecv(rcm));
    FIT_NCCL(n->closeListen(lc));
    free(sbuf);
    free(rbuf);
    fit_pass("%zu into 4 KiB: receiver %s in %.3f s, sender %s in %.3f s%s, each with its WARN",
             big, fit_result_str(r.rc), r.took, fit_result_str(s.rc), s.took,
             after >= 0 ? " (on a later isend)" : "");
}

void mis_send_larger_refused(mis_env_t *e)
{
    const size_t good[TR_GOOD] = { TR_SMALL, 65536, TR_BIG };
    const size_t fresh[TR_GOOD] = { TR_SMALL, 4096, 8192 };

    tr_refused(e, TR_BIG, good, TR_GOOD, 1);
    tr_refused(e, (size_t)16 << 20, fresh, TR_GOOD, 0);
}
