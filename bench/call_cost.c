/*
 * ferry-call-cost: what one call into the plugin costs NCCL's proxy thread
 * when there is nothing for it to do, the case NCCL's proxy loop hits most:
 *  - test() of a receive whose data has not come;
 *  - isend() that finds no receive posted (it returns no request; NCCL
 *    calls it again on its next pass). A sender-driven backend (socket)
 *    never idles there: it sends at once, and only test() is timed.
 * NCCL calls both in a tight loop, so their cost adds to every pass of the
 * proxy loop, and so to the latency of small collectives.
 *
 * One process, one send/recv comm pair on the plugin's first device (or
 * FIT_MERGE), whichever backend NCCL_FERRY_BACKEND picks. Each round times
 * --calls calls of one kind; the table shows the median ns per call over
 * --reps rounds, interleaved. Run it on two builds (--plugin) side by side
 * to compare them; numbers from different machines do not compare.
 *
 * --comms N makes the calls on N comm pairs of each kind in turn, as NCCL's
 * proxy goes round its connections: the calls then find their comm's state
 * out of the nearest caches once N comms' state outgrows them.
 *
 *   ferry-call-cost [--plugin PATH] [--calls N] [--reps R] [--comms N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define CC_BUF 4096

#define CC_COMMS_MAX 1024

static double cc_round_test(const ncclNet_v11_t *net, void **reqs, int ncomms, long calls)
{
    double t0 = fit_now();
    int done = 0, size = 0, c = 0;
    long i;

    for (i = 0; i < calls; i++) {
        FIT_NCCL(net->test(reqs[c], &done, &size));
        c = c + 1 == ncomms ? 0 : c + 1;
        FIT_CHECK(!done, "test() of a receive with no sender reported it done");
    }
    return (fit_now() - t0) * 1e9 / (double)calls;
}

static double cc_round_isend(const ncclNet_v11_t *net, void **comms, void **mhs, int ncomms,
                             void *buf, long calls)
{
    double t0 = fit_now();
    void *req = NULL;
    int c = 0;
    long i;

    for (i = 0; i < calls; i++) {
        FIT_NCCL(net->isend(comms[c], buf, CC_BUF, 0, mhs[c], NULL, &req));
        c = c + 1 == ncomms ? 0 : c + 1;
        FIT_CHECK(req == NULL, "isend() with no receive posted returned a request");
    }
    return (fit_now() - t0) * 1e9 / (double)calls;
}

static int cc_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    long calls = 2000000;
    int reps = 7, ncomms = 1, i, c, dev, ndev = 0;
    fit_plugin_t p;
    const ncclNet_v11_t *net;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *ctx, *lc, *sreq = NULL;
    void **a_send, **a_recv, **mh_a, **reqs, **b_send, **b_recv, **mh_b;
    void *tags_buf[1], *mhs[1];
    size_t sizes[1] = {CC_BUF};
    int tags[1] = {0};
    double *t_test, *t_isend;
    static char rbuf[CC_BUF], sbuf[CC_BUF];

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc)
            calls = atol(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--comms") == 0 && i + 1 < argc)
            ncomms = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: ferry-call-cost [--plugin PATH] [--calls N] [--reps R] "
                    "[--comms N]\n");
            return 2;
        }
    }
    FIT_CHECK(calls > 0 && calls <= 100000000L && reps > 0 && reps <= 99 && ncomms >= 1 &&
              ncomms <= CC_COMMS_MAX, "--calls 1..1e8, --reps 1..99, --comms 1..%d",
              CC_COMMS_MAX);
    a_send = calloc((size_t)ncomms, sizeof(void *));
    a_recv = calloc((size_t)ncomms, sizeof(void *));
    mh_a = calloc((size_t)ncomms, sizeof(void *));
    reqs = calloc((size_t)ncomms, sizeof(void *));
    b_send = calloc((size_t)ncomms, sizeof(void *));
    b_recv = calloc((size_t)ncomms, sizeof(void *));
    mh_b = calloc((size_t)ncomms, sizeof(void *));
    FIT_CHECK(a_send != NULL && a_recv != NULL && mh_a != NULL && reqs != NULL &&
              b_send != NULL && b_recv != NULL && mh_b != NULL, "out of memory");
    t_test = calloc((size_t)reps, sizeof(double));
    t_isend = calloc((size_t)reps, sizeof(double));
    FIT_CHECK(t_test != NULL && t_isend != NULL, "out of memory");
    fit_plugin_open(&p, path);
    net = p.net;
    ctx = fit_plugin_init(&p, 0xca11);
    FIT_NCCL(net->devices(&ndev));
    FIT_CHECK(ndev >= 1, "the plugin found no device");
    dev = fit_device(&p);
    /* Pairs a: a receive posted on each, never sent to (test() on them). */
    for (c = 0; c < ncomms; c++) {
        lc = fit_listen(&p, ctx, dev, handle);
        fit_connect_accept(&p, ctx, dev, handle, lc, &a_send[c], &a_recv[c], NULL);
        FIT_NCCL(net->closeListen(lc));
    }
    /* Pairs b: no receive ever posted (isend() on them). */
    for (c = 0; c < ncomms; c++) {
        lc = fit_listen(&p, ctx, dev, handle);
        fit_connect_accept(&p, ctx, dev, handle, lc, &b_send[c], &b_recv[c], NULL);
        FIT_NCCL(net->closeListen(lc));
        FIT_NCCL(net->regMr(b_send[c], sbuf, sizeof(sbuf), NCCL_PTR_HOST, &mh_b[c]));
    }
    tags_buf[0] = rbuf;
    for (c = 0; c < ncomms; c++) {
        FIT_NCCL(net->regMr(a_recv[c], rbuf, sizeof(rbuf), NCCL_PTR_HOST, &mh_a[c]));
        mhs[0] = mh_a[c];
        for (i = 0; i < 1000 && reqs[c] == NULL; i++)
            FIT_NCCL(net->irecv(a_recv[c], 1, tags_buf, sizes, tags, mhs, NULL, &reqs[c]));
        FIT_CHECK(reqs[c] != NULL, "irecv() gave no request in 1000 calls");
    }
    /*
     * A sender-driven backend (socket) sends without waiting for a receive: its
     * isend() is never idle that way, and only test() is timed there.
     */
    FIT_NCCL(net->isend(b_send[0], sbuf, CC_BUF, 0, mh_b[0], NULL, &sreq));
    /* Warm up, then interleave the two kinds. */
    cc_round_test(net, reqs, ncomms, calls / 10 + 1);
    if (sreq == NULL)
        cc_round_isend(net, b_send, mh_b, ncomms, sbuf, calls / 10 + 1);
    for (i = 0; i < reps; i++) {
        t_test[i] = cc_round_test(net, reqs, ncomms, calls);
        if (sreq == NULL)
            t_isend[i] = cc_round_isend(net, b_send, mh_b, ncomms, sbuf, calls);
    }
    qsort(t_test, (size_t)reps, sizeof(double), cc_cmp);
    qsort(t_isend, (size_t)reps, sizeof(double), cc_cmp);
    printf("plugin %s, backend %s, %ld calls x %d rounds, over %d comm pair(s) of each kind\n", p.path,
           getenv("NCCL_FERRY_BACKEND") ? getenv("NCCL_FERRY_BACKEND") : "auto", calls, reps,
           ncomms);
    printf("call                      median ns   min ns   max ns\n");
    printf("test() pending recv      %10.1f %8.1f %8.1f\n", t_test[reps / 2], t_test[0],
           t_test[reps - 1]);
    if (sreq == NULL)
        printf("isend() no receive       %10.1f %8.1f %8.1f\n", t_isend[reps / 2], t_isend[0],
               t_isend[reps - 1]);
    else
        printf("isend() no receive       n/a: this backend sends without waiting for a receive\n");
    /* The pending receive (and a socket send) go with their comms: close discards them. */
    for (c = 0; c < ncomms; c++) {
        FIT_NCCL(net->deregMr(a_recv[c], mh_a[c]));
        FIT_NCCL(net->closeSend(a_send[c]));
        FIT_NCCL(net->closeRecv(a_recv[c]));
    }
    for (c = 0; c < ncomms; c++) {
        FIT_NCCL(net->deregMr(b_send[c], mh_b[c]));
        FIT_NCCL(net->closeSend(b_send[c]));
        FIT_NCCL(net->closeRecv(b_recv[c]));
    }
    FIT_NCCL(net->finalize(ctx));
    fit_plugin_close(&p);
    free(t_test);
    free(t_isend);
    free(a_send);
    free(a_recv);
    free(mh_a);
    free(reqs);
    free(b_send);
    free(b_recv);
    free(mh_b);
    return 0;
}
