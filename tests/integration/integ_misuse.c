/*
 * integ_misuse: NCCL (or a plugin user) calling the ABI wrong, for whichever
 * backend NCCL_FERRY_BACKEND names. Each case runs in a fresh child process
 * with its own plugin load, checks the exact code and the WARN of every
 * refused call, and ends with the fds and threads it started with (ASan
 * builds: no leak, no use-after-free). The codes are the ones
 * tests/RELIABILITY.md lists.
 *
 *   bad-device        getProperties, listen and connect with device -1 and
 *                     ndev: ncclInternalError + WARN naming the index
 *   garbage-handle    connect with a zeroed handle (ncclInvalidUsage) and
 *                     with random bytes (ncclInternalError): WARN, no crash,
 *                     no connection
 *   after-finalize    devices, getProperties, listen and connect after the
 *                     last finalize, and a second finalize: refused + WARN
 *   send-larger       a 64 KiB isend into a 16 KiB irecv: the receiver's
 *                     test gets ncclInvalidUsage and a WARN naming both
 *                     sizes; the sender's request ends (done or failed, as
 *                     the backend documents) and the comm stays closable
 *   send-larger-refused  a 1 MiB isend into a 4 KiB irecv after three that
 *                     fit (misuse_truncate.c): both sides' test() fail within
 *                     1 s, each with its WARN; the earlier messages intact
 *   test-bad-request  test() on NULL, garbage, a request already reported
 *                     done (also after its slot was reused) and one of a
 *                     closed comm (misuse_requests.c): ncclInvalidUsage + a
 *                     WARN naming which, nothing of the comm read; 1000
 *                     test(NULL) calls stay within the WARN limit
 *   too-many          isends with no receive posted: at most 32 requests
 *                     come back non-NULL (then NULL: retry later); once the
 *                     receives are posted all complete intact
 *   n-above-max       irecv with n = maxRecvs + 1 and n = 0: ncclInternalError
 *                     + WARN naming maxRecvs
 *   finalize-open     finalize with a listen, send and recv comm and a memory
 *                     handle open: ncclSuccess + INFO counting them; closing
 *                     them afterwards works (the backend stayed up for them),
 *                     and the next init + finalize leave no thread
 *   finalize-open-dlclose  the same, never closed, then dlclose: the library
 *                     pinned itself, its threads run on for 2 s, no crash
 *   reg-bounds        regMr of a range whose end wraps the address space
 *                     (near the top, and a size of -1): ncclInvalidArgument
 *                     + WARN naming address and size; then messages through
 *                     good registrations arrive intact
 *   reg-dmabuf        (ib with DMA-BUF: tests/fakecuda; skipped otherwise)
 *                     regMrDmaBuf of type NCCL_PTR_HOST, of a pipe, a socket,
 *                     /dev/null, a plain file, a closed fd and a wrapping
 *                     range: ncclInvalidArgument + WARN naming type or fd;
 *                     then a good DMA-BUF registration works
 *
 *   integ_misuse [--plugin PATH] [--case NAME]
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "harness_cuda.h"
#include "misuse.h"

static void mis_open(mis_env_t *e, const char *path)
{
    memset(e, 0, sizeof(*e));
    fit_plugin_open(&e->plugin, path);
    e->ctx = fit_plugin_init(&e->plugin, 0x5151);
    e->backend = getenv("NCCL_FERRY_BACKEND") != NULL ? getenv("NCCL_FERRY_BACKEND") : "socket";
}

static void mis_close(mis_env_t *e)
{
    if (e->ctx != NULL)
        FIT_NCCL(e->plugin.net->finalize(e->ctx));
    fit_plugin_close(&e->plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
}

void mis_refused(const char *call, ncclResult_t rc, ncclResult_t want, int from, const char *n1,
                 const char *n2)
{
    char line[4096];

    FIT_CHECK(rc == want, "%s returned %d (%s), expected %d (%s)", call, (int)rc,
              fit_result_str(rc), (int)want, fit_result_str(want));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, n1, n2, NULL, line, sizeof(line)) >= 0,
              "%s: no WARN with '%s'%s%s", call, n1, n2 ? " and " : "", n2 ? n2 : "");
    printf("  %s -> %s: %s\n", call, fit_result_str(rc), line);
    printf("MISUSE call=\"%s\" code=%s\n", call, fit_result_str(rc));
}

void mis_pair(mis_env_t *e, void **lc_p, void **send_p, void **recv_p)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];

    *lc_p = fit_listen(&e->plugin, e->ctx, 0, handle);
    fit_connect_accept(&e->plugin, e->ctx, 0, handle, *lc_p, send_p, recv_p, NULL);
}

static void mis_bad_device(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    ncclNetDeviceHandle_v11_t *dh = NULL;
    ncclNetProperties_v11_t props;
    char handle[NCCL_NET_HANDLE_MAXSIZE], call[96], idx[32];
    void *comm = NULL;
    int ndev = 0, bad[2], i, from;

    FIT_NCCL(n->devices(&ndev));
    bad[0] = -1;
    bad[1] = ndev;
    fit_log_expect("device");
    for (i = 0; i < 2; i++) {
        snprintf(idx, sizeof(idx), "%d", bad[i]);
        from = fit_log_lines();
        snprintf(call, sizeof(call), "getProperties(%d) of %d devices", bad[i], ndev);
        mis_refused(call, n->getProperties(bad[i], &props), ncclInternalError, from, "device",
                    idx);
        from = fit_log_lines();
        snprintf(call, sizeof(call), "listen(dev %d) of %d devices", bad[i], ndev);
        mis_refused(call, n->listen(e->ctx, bad[i], handle, &comm), ncclInternalError, from,
                    "device", idx);
        FIT_CHECK(comm == NULL, "listen on a bad device gave a comm");
        /* A real handle, so only the device index is wrong. */
        {
            void *lc = fit_listen(&e->plugin, e->ctx, 0, handle);

            from = fit_log_lines();
            snprintf(call, sizeof(call), "connect(dev %d) of %d devices", bad[i], ndev);
            mis_refused(call, n->connect(e->ctx, bad[i], handle, &comm, &dh), ncclInternalError,
                        from, "device", idx);
            FIT_CHECK(comm == NULL, "connect on a bad device gave a comm");
            FIT_NCCL(n->closeListen(lc));
        }
    }
    fit_log_expect_clear();
    fit_pass("device -1 and %d (of %d): getProperties, listen, connect refused", ndev, ndev);
}

static void mis_garbage_handle(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    ncclNetDeviceHandle_v11_t *dh = NULL;
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
    const char *what[2] = { "connect with a zeroed handle", "connect with a random handle" };
    /* No ferry magic either way: a usage error, before any connect state is looked at. */
    const ncclResult_t want[2] = { ncclInvalidUsage, ncclInvalidUsage };
    void *comm = NULL;
    size_t k;
    int i, from;

    fit_log_allow_warns(1);
    for (i = 0; i < 2; i++) {
        ncclResult_t rc;

        if (i == 0)
            memset(handle, 0, sizeof(handle));
        else
            for (k = 0; k < sizeof(handle); k++)
                handle[k] = (unsigned char)(rand() & 0xff);
        from = fit_log_lines();
        rc = n->connect(e->ctx, 0, handle, &comm, &dh);
        FIT_CHECK(comm == NULL, "connect with a %s gave a comm", what[i]);
        mis_refused(what[i], rc, want[i], from, "handle", NULL);
    }
    fit_log_allow_warns(0);
    fit_pass("connect with a zeroed and a random handle: refused, no connection");
}

static void mis_after_finalize(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    ncclNetDeviceHandle_v11_t *dh = NULL;
    ncclNetProperties_v11_t props;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *comm = NULL, *stale = e->ctx;
    int ndev = -1, from;

    FIT_NCCL(n->listen(e->ctx, 0, handle, &comm));
    FIT_NCCL(n->closeListen(comm));
    /* A finalized context while another one lives: refused by address, never read. */
    {
        void *other = fit_plugin_init(&e->plugin, 0x5454);

        FIT_NCCL(n->finalize(e->ctx));
        fit_log_expect("not a live ferry context");
        from = fit_log_lines();
        comm = NULL;
        mis_refused("listen with a finalized ctx (another one live)",
                    n->listen(stale, 0, handle, &comm), ncclInternalError, from,
                    "listen: context", "is not a live ferry context");
        FIT_CHECK(comm == NULL, "listen with a finalized ctx gave a comm");
        e->ctx = other;
    }
    FIT_NCCL(n->finalize(e->ctx));
    e->ctx = NULL;
    fit_log_expect("after the last finalize");
    fit_log_expect("not a live ferry context");
    from = fit_log_lines();
    mis_refused("devices after finalize", n->devices(&ndev), ncclInternalError, from,
                "devices called before a successful init (or after the last finalize)", NULL);
    FIT_CHECK(ndev == 0, "devices after finalize said %d devices", ndev);
    from = fit_log_lines();
    mis_refused("getProperties after finalize", n->getProperties(0, &props), ncclInternalError,
                from, "getProperties called before a successful init", NULL);
    from = fit_log_lines();
    comm = NULL;
    mis_refused("listen with a finalized ctx", n->listen(stale, 0, handle, &comm),
                ncclInternalError, from, "listen called before a successful init", NULL);
    FIT_CHECK(comm == NULL, "listen after finalize gave a comm");
    from = fit_log_lines();
    mis_refused("connect with a finalized ctx", n->connect(stale, 0, handle, &comm, &dh),
                ncclInternalError, from, "connect called before a successful init", NULL);
    from = fit_log_lines();
    mis_refused("second finalize", n->finalize(stale), ncclInternalError, from,
                "not a live ferry context (finalized twice?)", NULL);
    /* A new init works: the process can start over. */
    e->ctx = fit_plugin_init(&e->plugin, 0x5252);
    FIT_NCCL(n->devices(&ndev));
    FIT_CHECK(ndev > 0, "no device after a new init");
    fit_log_expect_clear();
    fit_pass("calls after finalize refused; a new init works");
}

ncclResult_t mis_wait(const fit_plugin_t *p, void *req, double seconds, int *done_p, int *size_p)
{
    fit_bound_t b;
    ncclResult_t rc = ncclSuccess;

    *done_p = 0;
    fit_bound_init(&b, "a request's end", seconds, 2000000000L);
    while (rc == ncclSuccess && !*done_p && fit_bound_try_step(&b))
        rc = p->net->test(req, done_p, size_p);
    return rc;
}

static void mis_send_larger(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    size_t ssize = 65536, rsize = 16384;
    void *lc, *sc, *rc_comm, *smh, *rmh, *sreq = NULL, *rreq = NULL;
    char *sbuf = malloc(ssize), *rbuf = malloc(rsize * 2), line[4096];
    int tag = 3, sdone = 0, rdone = 0, ssz = 0, rsz = 0, from;
    ncclResult_t src = ncclSuccess, rrc = ncclSuccess;
    fit_bound_t b;
    void *rdata = rbuf;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc");
    mis_pair(e, &lc, &sc, &rc_comm);
    fit_fill(sbuf, ssize, 77);
    fit_fill(rbuf, rsize * 2, 78);
    FIT_NCCL(n->regMr(sc, sbuf, ssize, NCCL_PTR_HOST, &smh));
    FIT_NCCL(n->regMr(rc_comm, rbuf, rsize * 2, NCCL_PTR_HOST, &rmh));
    fit_log_allow_warns(1);
    from = fit_log_lines();
    FIT_NCCL(n->irecv(rc_comm, 1, &rdata, &rsize, &tag, &rmh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv gave no request");
    fit_bound_init(&b, "isend of the larger message", 10.0, 2000000000L);
    while (sreq == NULL && src == ncclSuccess && fit_bound_try_step(&b)) {
        src = n->isend(sc, sbuf, ssize, tag, smh, NULL, &sreq);
        if (sreq == NULL && src == ncclSuccess)
            (void)n->test(rreq, &rdone, &rsz); /* ib: the receive's progress writes the CTS. */
    }
    FIT_CHECK(src == ncclSuccess && sreq != NULL, "isend: %d (%s), request %p", (int)src,
              fit_result_str(src), sreq);
    rrc = rdone ? ncclSuccess : mis_wait(&e->plugin, rreq, 10.0, &rdone, &rsz);
    FIT_CHECK(rrc == ncclInvalidUsage && !rdone, "receiver: test returned %d (%s), done %d "
              "(%d bytes), expected ncclInvalidUsage", (int)rrc, fit_result_str(rrc), rdone, rsz);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "65536", "16384", NULL, line,
                           sizeof(line)) >= 0, "no WARN names both sizes (65536, 16384)");
    printf("  receiver: %s: %s\n", fit_result_str(rrc), line);
    printf("MISUSE call=\"test of a 16 KiB irecv hit by a 64 KiB isend (receiver)\" code=%s\n",
           fit_result_str(rrc));
    /* Nothing landed: not in the posted 16 KiB, not past it. */
    fit_check_pattern(rbuf, rsize * 2, 78, "the 16 KiB receive and the 16 KiB after it");
    src = mis_wait(&e->plugin, sreq, 10.0, &sdone, &ssz);
    printf("  sender: test -> %s, done %d\n", fit_result_str(src), sdone);
    printf("MISUSE call=\"test of the 64 KiB isend (sender)\" code=%s done=%d\n",
           fit_result_str(src), sdone);
    FIT_CHECK(src == ncclInvalidUsage || (src == ncclSuccess && sdone),
              "sender: test returned %d (%s), done %d: neither an error nor the end",
              (int)src, fit_result_str(src), sdone);
    fit_log_allow_warns(0);
    FIT_NCCL(n->deregMr(sc, smh));
    FIT_NCCL(n->deregMr(rc_comm, rmh));
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeRecv(rc_comm));
    FIT_NCCL(n->closeListen(lc));
    free(sbuf);
    free(rbuf);
    fit_pass("64 KiB into 16 KiB: receiver ncclInvalidUsage naming both sizes, sender %s",
             src == ncclSuccess ? "done" : "ncclInvalidUsage");
}

/*
 * NCCL_NET_MAX_REQUESTS (32) per comm: isends with no receive posted. The
 * ones beyond what the comm holds come back NULL (NCCL retries them), never
 * an error and never a 33rd request; once the receives are posted every
 * message arrives intact.
 */
#define MIS_MANY   40
#define MIS_MAXREQ 32

static void mis_too_many(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    size_t size = 4096;
    void *lc, *sc, *rcm, *smh, *rmh, *sreq[MIS_MANY] = { NULL }, *rreq[MIS_MANY] = { NULL };
    char *sbuf = malloc(size * MIS_MANY), *rbuf = malloc(size * MIS_MANY);
    int i, nsent = 0, nulls = 0, tag = 4, done, sz;
    fit_bound_t b;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc");
    mis_pair(e, &lc, &sc, &rcm);
    FIT_NCCL(n->regMr(sc, sbuf, size * MIS_MANY, NCCL_PTR_HOST, &smh));
    FIT_NCCL(n->regMr(rcm, rbuf, size * MIS_MANY, NCCL_PTR_HOST, &rmh));
    for (i = 0; i < MIS_MANY; i++)
        fit_fill(sbuf + (size_t)i * size, size, 500 + (uint64_t)i);
    memset(rbuf, FIT_POISON, size * MIS_MANY);
    /* Every isend once, no receive anywhere: how many does the comm take? */
    for (i = 0; i < MIS_MANY; i++) {
        FIT_NCCL(n->isend(sc, sbuf + (size_t)i * size, size, tag, smh, NULL, &sreq[nsent]));
        if (sreq[nsent] != NULL)
            nsent++;
        else
            nulls++;
    }
    printf("  %d isends without receives: %d requests, %d NULL (retry later)\n", MIS_MANY,
           nsent, nulls);
    printf("MISUSE call=\"%d isends, no receive posted\" code=ncclSuccess requests=%d null=%d\n",
           MIS_MANY, nsent, nulls);
    FIT_CHECK(nsent <= MIS_MAXREQ, "%d requests in flight on one comm (at most %d)", nsent,
              MIS_MAXREQ);
    FIT_CHECK(nulls >= MIS_MANY - MIS_MAXREQ, "only %d of %d isends were turned away", nulls,
              MIS_MANY);
    /* Now the receives, and the rest of the isends as NCCL retries them. */
    fit_bound_init(&b, "every message after the receives", 30.0, 2000000000L);
    for (i = 0; i < MIS_MANY; i++) {
        void *data = rbuf + (size_t)i * size;

        while (rreq[i] == NULL) {
            FIT_NCCL(n->irecv(rcm, 1, &data, &size, &tag, &rmh, NULL, &rreq[i]));
            if (rreq[i] == NULL)
                fit_bound_step(&b);
        }
        while (i >= nsent) {
            FIT_NCCL(n->isend(sc, sbuf + (size_t)nsent * size, size, tag, smh, NULL,
                              &sreq[nsent]));
            if (sreq[nsent] != NULL)
                nsent++;
            else
                fit_bound_step(&b);
        }
        for (done = 0; !done; fit_bound_step(&b))
            FIT_NCCL(n->test(sreq[i], &done, &sz));
        for (done = 0; !done; fit_bound_step(&b))
            FIT_NCCL(n->test(rreq[i], &done, &sz));
        FIT_CHECK(sz == (int)size, "message %d: %d bytes, expected %zu", i, sz, size);
        fit_check_pattern(rbuf + (size_t)i * size, size, 500 + (uint64_t)i, "message");
    }
    FIT_NCCL(n->deregMr(sc, smh));
    FIT_NCCL(n->deregMr(rcm, rmh));
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeRecv(rcm));
    FIT_NCCL(n->closeListen(lc));
    free(sbuf);
    free(rbuf);
    fit_pass("%d isends without receives: %d taken, the rest NULL; then all %d intact",
             MIS_MANY, MIS_MANY - nulls, MIS_MANY);
}

static void mis_n_above_max(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    ncclNetProperties_v11_t props;
    void *lc, *sc, *rcm, *mh, *req = NULL, *data[16], *mhs[16];
    size_t sizes[16];
    int tags[16], i, from, nrecv;
    static char buf[4096];
    char call[96], expect[64];

    FIT_NCCL(n->getProperties(0, &props));
    nrecv = props.maxRecvs + 1;
    FIT_CHECK(nrecv <= 16, "maxRecvs %d", props.maxRecvs);
    mis_pair(e, &lc, &sc, &rcm);
    FIT_NCCL(n->regMr(rcm, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    for (i = 0; i < nrecv; i++) {
        data[i] = buf + i * 64;
        sizes[i] = 64;
        tags[i] = i;
        mhs[i] = mh;
    }
    snprintf(call, sizeof(call), "irecv with n %d (maxRecvs %d)", nrecv, props.maxRecvs);
    snprintf(expect, sizeof(expect), "%d", nrecv);
    fit_log_expect("maxRecvs");
    from = fit_log_lines();
    mis_refused(call, n->irecv(rcm, nrecv, data, sizes, tags, mhs, NULL, &req),
                ncclInternalError, from, "maxRecvs", expect);
    FIT_CHECK(req == NULL, "the refused irecv gave a request");
    from = fit_log_lines();
    mis_refused("irecv with n 0", n->irecv(rcm, 0, data, sizes, tags, mhs, NULL, &req),
                ncclInternalError, from, "maxRecvs", NULL);
    fit_log_expect_clear();
    FIT_NCCL(n->deregMr(rcm, mh));
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeRecv(rcm));
    FIT_NCCL(n->closeListen(lc));
    fit_pass("irecv with n above maxRecvs (%d) and n 0: refused", props.maxRecvs);
}

/* finalize with a listen, send and recv comm and a memory handle open: WARN, then closable. */
static void mis_finalize_with_open(mis_env_t *e, void **lc, void **sc, void **rcm, void **mh)
{
    const ncclNet_v11_t *n = e->plugin.net;
    static char buf[4096];
    char line[4096];
    ncclResult_t rc;
    int from;

    mis_pair(e, lc, sc, rcm);
    FIT_NCCL(n->regMr(*sc, buf, sizeof(buf), NCCL_PTR_HOST, mh));
    from = fit_log_lines();
    rc = n->finalize(e->ctx);
    e->ctx = NULL;
    FIT_CHECK(rc == ncclSuccess, "finalize with comms open returned %d (%s)", (int)rc,
              fit_result_str(rc));
    /* INFO, not WARN: NCCL may close comms after the last finalize. */
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, "with 1 send, 1 recv and 1 listen comm(s) and 1 "
                           "memory handle(s) still open", NULL, NULL, line, sizeof(line)) >= 0,
              "no INFO line counts what finalize left open");
    printf("  finalize with comms open -> ncclSuccess: %s\n", line);
    printf("MISUSE call=\"finalize with comms open\" code=ncclSuccess\n");
}

/* The comms left open at finalize, closed afterwards (NCCL may close after finalize). */
static void mis_finalize_open(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    void *lc, *sc, *rcm, *mh;

    mis_finalize_with_open(e, &lc, &sc, &rcm, &mh);
    FIT_NCCL(n->deregMr(sc, mh));
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeRecv(rcm));
    FIT_NCCL(n->closeListen(lc));
    /* The backend stayed up for them; the next init takes it back, its finalize ends it. */
    e->ctx = fit_plugin_init(&e->plugin, 0x5353);
    fit_pass("finalize with comms open: ncclSuccess + INFO; they close afterwards; init + "
             "finalize again leave no thread");
}

/*
 * Never closed, then dlclose: the library pinned itself at finalize, so the
 * comms' helper threads (woken by their timers meanwhile) do not run
 * unmapped code. Their threads and sockets stay until exit, by design.
 */
static void mis_finalize_open_dlclose(mis_env_t *e)
{
    void *lc, *sc, *rcm, *mh;
    char names[512];
    int n;

    mis_finalize_with_open(e, &lc, &sc, &rcm, &mh);
    n = fit_count_threads("ferry-", names, sizeof(names));
    fit_plugin_close(&e->plugin);
    sleep(2);
    FIT_CHECK(dlopen(e->plugin.path, RTLD_NOW | RTLD_NOLOAD) != NULL,
              "the plugin was unmapped by dlclose although comms were left open");
    printf("  %d ferry thread(s) of the open comms ran 2 s past dlclose; the library stays "
           "mapped\n", n);
    fit_pass("finalize with comms open, then dlclose: no crash (library pinned)");
}

/* A few messages, byte-checked, through the pair's own fresh registrations. */
static void mis_xfer_ok(mis_env_t *e, void *sc, void *rcm, const char *what)
{
    static const size_t sizes[] = {0, 1, 4096, 65537, 1 << 20};
    fit_xfer_opts_t o = {0};
    fit_xfer_result_t r;

    o.sizes = sizes;
    o.nmsgs = (int)(sizeof(sizes) / sizeof(sizes[0]));
    o.depth = 4;
    o.seed = 91;
    o.seconds = 20.0;
    o.tag = 5;
    fit_xfer_inproc(&e->plugin, sc, rcm, &o, &r);
    fit_xfer_expect_ok(&r, what);
}

/* One refused registration: the code, no handle, and a WARN with both needles. */
static void mis_reg_refused(const char *call, ncclResult_t rc, void *mh, const char *n1,
                            const char *n2, int from)
{
    FIT_CHECK(mh == NULL, "%s gave a handle %p although refused", call, mh);
    mis_refused(call, rc, ncclInvalidArgument, from, n1, n2);
}

/* regMr of ranges whose end wraps: refused on either comm; good ones still carry data. */
static void mis_reg_bounds(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    static char buf[4096];
    void *lc, *sc, *rcm, *mh, *comms[2];
    struct {
        void  *data;
        size_t size;
    } bad[2];
    char call[160], addr[32], size[32];
    int i, j, from;

    mis_pair(e, &lc, &sc, &rcm);
    comms[0] = sc;
    comms[1] = rcm;
    bad[0].data = (void *)(UINTPTR_MAX - 4095); /* The last page, 8 KiB long. */
    bad[0].size = 8192;
    bad[1].data = buf;                          /* A size of -1. */
    bad[1].size = SIZE_MAX;
    fit_log_expect("wraps around to 0");
    for (i = 0; i < 2; i++)
        for (j = 0; j < 2; j++) {
            mh = NULL;
            snprintf(call, sizeof(call), "regMr(%s comm, %p, %zu bytes)", j ? "recv" : "send",
                     bad[i].data, bad[i].size);
            snprintf(addr, sizeof(addr), "address %p", bad[i].data);
            snprintf(size, sizeof(size), "size %zu", bad[i].size);
            from = fit_log_lines();
            mis_reg_refused(call, n->regMr(comms[j], bad[i].data, bad[i].size, NCCL_PTR_HOST,
                                           &mh), mh, addr, size, from);
        }
    fit_log_expect_clear();
    FIT_NCCL(n->regMr(sc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    FIT_CHECK(mh != NULL, "a good regMr after the refusals gave no handle");
    FIT_NCCL(n->deregMr(sc, mh));
    mis_xfer_ok(e, sc, rcm, "after the refused registrations");
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeRecv(rcm));
    FIT_NCCL(n->closeListen(lc));
    fit_pass("regMr of 2 wrapping ranges on both comms: ncclInvalidArgument naming address and "
             "size; good registrations after them carry 5 messages intact");
}

/* GPU memory, fakecuda's: NULL (the case skips) where the plugin offers no DMA-BUF. */
static int mis_cuda_open(mis_env_t *e, fit_cu_t *cu, int (**dmabuf_fd)(void *, unsigned long long,
                                                                       size_t, int,
                                                                       unsigned long long))
{
    ncclNetProperties_v11_t props;
    void *dl;

    FIT_NCCL(e->plugin.net->getProperties(0, &props));
    if (strcmp(e->backend, "ib") != 0 || !(props.ptrSupport & NCCL_PTR_DMABUF))
        return 0;
    dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    FIT_CHECK(dl != NULL, "DMA-BUF offered but no libcuda.so.1 loaded");
    fit_cu_open(dl, cu);
    *(void **)dmabuf_fd = fit_cu_sym(dl, "cuMemGetHandleForAddressRange");
    return 1;
}

#define MIS_GPU_BYTES (1 << 20)

/* regMrDmaBuf with a type or an fd that is no dma-buf of GPU memory: each refused. */
static void mis_reg_dmabuf(mis_env_t *e)
{
    const ncclNet_v11_t *n = e->plugin.net;
    int (*dmabuf_fd)(void *, unsigned long long, size_t, int, unsigned long long);
    unsigned long long dev = 0;
    void *lc, *sc, *rcm, *mh = NULL;
    char call[160], fdw[32], tmpl[] = "/tmp/ferry-misuse-XXXXXX";
    int pfd[2], sfd[2], nullfd, filefd, closedfd, good = -1, from, i;
    fit_cu_t cu;
    static char host[4096];
    struct {
        const char *what, *needle;
        int         fd;
    } fds[5];

    if (!mis_cuda_open(e, &cu, &dmabuf_fd)) {
        printf("  skipped: this backend offers no DMA-BUF (ib over tests/fakecuda runs it: "
               "integ_ib_misuse_gpu)\n");
        fit_pass("reg-dmabuf skipped: no DMA-BUF here");
        return;
    }
    mis_pair(e, &lc, &sc, &rcm);
    FIT_CHECK(cu.alloc(&dev, MIS_GPU_BYTES) == 0, "cuMemAlloc");
    FIT_CHECK(dmabuf_fd(&good, dev, MIS_GPU_BYTES, 1, 0) == 0 && good >= 0,
              "cuMemGetHandleForAddressRange");
    /* Host memory through regMrDmaBuf, even with a real dma-buf fd. */
    from = fit_log_lines();
    fit_log_expect("regMrDmaBuf");
    mis_reg_refused("regMrDmaBuf(host memory, NCCL_PTR_HOST)",
                    n->regMrDmaBuf(rcm, host, sizeof(host), NCCL_PTR_HOST, 0, good, &mh), mh,
                    "NCCL_PTR_HOST", "regMr(NCCL_PTR_HOST)", from);
    FIT_CHECK(pipe(pfd) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sfd) == 0, "pipe");
    nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);
    filefd = mkstemp(tmpl);
    FIT_CHECK(nullfd >= 0 && filefd >= 0, "open /dev/null, mkstemp");
    unlink(tmpl);
    /*
     * A number far above those in use: the lowest free one goes to the next
     * open of any thread (the emulated device's sockets), so a closed low
     * number may be open again by the time the plugin looks at it.
     */
    closedfd = fcntl(nullfd, F_DUPFD_CLOEXEC, 900);
    if (closedfd < 0)
        closedfd = fcntl(nullfd, F_DUPFD_CLOEXEC, 200);
    FIT_CHECK(closedfd >= 0, "fcntl(F_DUPFD)");
    close(closedfd);
    fds[0].what = "a pipe";           fds[0].needle = "is a pipe";           fds[0].fd = pfd[0];
    fds[1].what = "a socket";         fds[1].needle = "is a socket";         fds[1].fd = sfd[0];
    fds[2].what = "/dev/null";        fds[2].needle = "is a character device"; fds[2].fd = nullfd;
    fds[3].what = "a plain file";     fds[3].needle = "for no dma-buf";      fds[3].fd = filefd;
    fds[4].what = "a closed fd";      fds[4].needle = "is not open";         fds[4].fd = closedfd;
    for (i = 0; i < 5; i++) {
        mh = NULL;
        snprintf(call, sizeof(call), "regMrDmaBuf(GPU memory, fd %d: %s)", fds[i].fd,
                 fds[i].what);
        snprintf(fdw, sizeof(fdw), "fd %d", fds[i].fd);
        from = fit_log_lines();
        mis_reg_refused(call, n->regMrDmaBuf(rcm, (void *)(uintptr_t)dev, MIS_GPU_BYTES,
                                             NCCL_PTR_CUDA, 0, fds[i].fd, &mh), mh, fdw,
                        fds[i].needle, from);
    }
    from = fit_log_lines();
    mis_reg_refused("regMrDmaBuf(a range that wraps)",
                    n->regMrDmaBuf(rcm, (void *)(UINTPTR_MAX - 4095), 8192, NCCL_PTR_CUDA, 0,
                                   good, &mh), mh, "wraps around to 0", "size 8192", from);
    fit_log_expect_clear();
    /* The good one, fd closed right after as NCCL does. */
    FIT_NCCL(n->regMrDmaBuf(rcm, (void *)(uintptr_t)dev, MIS_GPU_BYTES, NCCL_PTR_CUDA, 0, good,
                            &mh));
    FIT_CHECK(mh != NULL, "the good regMrDmaBuf gave no handle");
    close(good);
    FIT_NCCL(n->deregMr(rcm, mh));
    mis_xfer_ok(e, sc, rcm, "after the refused DMA-BUF registrations");
    close(pfd[0]);
    close(pfd[1]);
    close(sfd[0]);
    close(sfd[1]);
    close(nullfd);
    close(filefd);
    FIT_CHECK(cu.free_(dev) == 0, "cuMemFree");
    FIT_NCCL(n->closeSend(sc));
    FIT_NCCL(n->closeRecv(rcm));
    FIT_NCCL(n->closeListen(lc));
    fit_pass("regMrDmaBuf of host memory, a pipe, a socket, /dev/null, a plain file, a closed "
             "fd and a wrapping range: ncclInvalidArgument naming each; a good one after them "
             "works");
}

static const struct {
    const char *name;
    void      (*run)(mis_env_t *e);
} mis_cases[] = {
    { "bad-device",     mis_bad_device },
    { "garbage-handle", mis_garbage_handle },
    { "after-finalize", mis_after_finalize },
    { "send-larger",    mis_send_larger },
    { "send-larger-refused", mis_send_larger_refused },
    { "test-bad-request", mis_test_bad_request },
    { "too-many",       mis_too_many },
    { "n-above-max",    mis_n_above_max },
    { "finalize-open",  mis_finalize_open },
    { "finalize-open-dlclose", mis_finalize_open_dlclose },
    { "reg-bounds",     mis_reg_bounds },
    { "reg-dmabuf",     mis_reg_dmabuf },
};
#define MIS_NCASES ((int)(sizeof(mis_cases) / sizeof(mis_cases[0])))

static void mis_child(const char *path, int i)
{
    fit_leaks_t before;
    mis_env_t e;

    fit_set_role(mis_cases[i].name);
    alarm(60);
    /*
     * libibverbs stays loaded once opened (as NCCL keeps it), and the
     * emulator keeps its fabric socket: count after a first connection.
     */
    mis_open(&e, path);
    {
        void *lc, *sc, *rcm;

        mis_pair(&e, &lc, &sc, &rcm);
        FIT_NCCL(e.plugin.net->closeSend(sc));
        FIT_NCCL(e.plugin.net->closeRecv(rcm));
        FIT_NCCL(e.plugin.net->closeListen(lc));
    }
    mis_close(&e);
    fit_leaks_snap(&before);
    mis_open(&e, path);
    mis_cases[i].run(&e);
    if (mis_cases[i].run == mis_finalize_open_dlclose) {
        fit_log_check_clean("after the case");
        fit_child_exit(0); /* Its threads stay by design (above); LSan still checks memory. */
    }
    mis_close(&e);
    fit_log_check_clean("after the case");
    fit_leaks_check(&before, "after the case");
    fit_child_exit(0);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *only = argc == 3 && strcmp(argv[1], "--case") == 0 ? argv[2] : NULL;
    int i, ran = 0, failed = 0;

    FIT_CHECK(argc == 1 || only != NULL, "usage: integ_misuse [--plugin PATH] [--case NAME]");
    fit_set_role("misuse");
    srand(4711);
    for (i = 0; i < MIS_NCASES; i++) {
        int status;
        pid_t pid;

        if (only != NULL && strcmp(only, mis_cases[i].name) != 0)
            continue;
        printf("case %s\n", mis_cases[i].name);
        fflush(NULL);
        pid = fork();
        FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            mis_child(path, i);
        }
        FIT_CHECK(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
        ran++;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "FAIL case %s: status 0x%x\n", mis_cases[i].name, status);
            failed++;
        }
    }
    FIT_CHECK(ran > 0, "no case named %s", only);
    printf("integ_misuse: %d case(s), %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
