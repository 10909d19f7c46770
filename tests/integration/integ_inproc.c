/*
 * integ_inproc: both ends of a ferry connection in one process, driven
 * through ncclNetPlugin_v11 the way NCCL's proxy threads drive it.
 *
 *   integ_inproc [--plugin PATH] [--min-streams N]
 *
 * --min-streams N: after the 64 MiB transfer, at least N ESTABLISHED TCP
 * connections must end at the listen port (ctest sets the stream count
 * through NCCL_FERRY_STREAMS or NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define INPROC_MAX_SIZES 160

typedef struct inproc_pair {
    void *listen_comm;
    void *send_comm;
    void *recv_comm;
    char  handle[NCCL_NET_HANDLE_MAXSIZE];
    int   port;
} inproc_pair_t;

static const char *inproc_env(const char *name)
{
    const char *v = getenv(name);

    return v != NULL ? v : "unset";
}

static void inproc_check_props(const fit_plugin_t *p, int ndev)
{
    ncclNetProperties_v11_t props;
    int dev;

    for (dev = 0; dev < ndev; dev++) {
        memset(&props, 0, sizeof(props));
        FIT_NCCL(p->net->getProperties(dev, &props));
        FIT_CHECK(props.name != NULL && props.name[0] != '\0', "dev %d has no name", dev);
        FIT_CHECK(props.ptrSupport & NCCL_PTR_HOST, "dev %d: ptrSupport 0x%x lacks HOST", dev,
                  props.ptrSupport);
        FIT_CHECK(props.speed > 0, "dev %d: speed %d Mbps", dev, props.speed);
        FIT_CHECK(props.maxComms > 0, "dev %d: maxComms %d", dev, props.maxComms);
        FIT_CHECK(props.maxRecvs >= 1 && props.maxRecvs <= 64, "dev %d: maxRecvs %d", dev,
                  props.maxRecvs);
        FIT_CHECK(props.netDeviceType == NCCL_NET_DEVICE_HOST, "dev %d: netDeviceType %d", dev,
                  (int)props.netDeviceType);
        FIT_CHECK(props.maxP2pBytes > 0 && props.maxP2pBytes <= ((size_t)1 << 40),
                  "dev %d: maxP2pBytes %zu", dev, props.maxP2pBytes);
        FIT_CHECK(props.vProps.ndevs == 1 && props.vProps.devs[0] == dev,
                  "dev %d: vProps {%d, %d}", dev, props.vProps.ndevs, props.vProps.devs[0]);
        FIT_CHECK(props.maxMultiRequestSize == 1, "dev %d: maxMultiRequestSize %d", dev,
                  props.maxMultiRequestSize);
        printf("  dev %d: name %s pci %s speed %d Mbps maxComms %d maxRecvs %d\n", dev,
               props.name, props.pciPath ? props.pciPath : "(null)", props.speed,
               props.maxComms, props.maxRecvs);
    }
    /* NCCL_SOCKET_IFNAME=lo (set by ctest) leaves exactly the loopback device. */
    memset(&props, 0, sizeof(props));
    FIT_NCCL(p->net->getProperties(0, &props));
    if (getenv("NCCL_SOCKET_IFNAME") != NULL && strcmp(getenv("NCCL_SOCKET_IFNAME"), "lo") == 0)
        FIT_CHECK(ndev == 1 && strcmp(props.name, "lo") == 0,
                  "NCCL_SOCKET_IFNAME=lo gave %d device(s), first '%s'", ndev, props.name);
}

/*
 * FIT_MERGE: the merged device lists its members in vProps, is named after
 * them, is as fast as they are together, and counts among the devices.
 */
static void inproc_check_merged(const fit_plugin_t *p, int ndev_phys)
{
    ncclNetProperties_v11_t props, mp;
    int d = fit_device(p), ndev = 0, speed = 0, i;

    FIT_CHECK(d == ndev_phys, "the merged device is %d, expected %d (after the ports)", d,
              ndev_phys);
    FIT_CHECK(fit_device(p) == d, "merging the same ports again made another device");
    FIT_NCCL(p->net->devices(&ndev));
    FIT_CHECK(ndev == ndev_phys + 1, "devices() = %d after one merge of %d ports", ndev,
              ndev_phys);
    memset(&props, 0, sizeof(props));
    FIT_NCCL(p->net->getProperties(d, &props));
    FIT_CHECK(props.vProps.ndevs >= 2 && strchr(props.name, '+') != NULL,
              "merged device %d: vProps.ndevs %d, name %s", d, props.vProps.ndevs, props.name);
    for (i = 0; i < props.vProps.ndevs; i++) {
        memset(&mp, 0, sizeof(mp));
        FIT_NCCL(p->net->getProperties(props.vProps.devs[i], &mp));
        FIT_CHECK(strstr(props.name, mp.name) != NULL, "merged name %s lacks member %s",
                  props.name, mp.name);
        speed += mp.speed;
    }
    FIT_CHECK(props.speed == speed, "merged speed %d Mbps, members sum to %d", props.speed,
              speed);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "device", props.name, "ports merged: ", NULL, 0) >= 0 &&
              fit_log_find(0, NCCL_LOG_INFO, props.name, "ACTIVE", "Mbps", NULL, 0) >= 0,
              "no INFO line names merged device %s with its ports' states and speeds", props.name);
    printf("  merged dev %d: %s, %d ports, %d Mbps\n", d, props.name, props.vProps.ndevs,
           props.speed);
}

/* listen on ctx_l, connect from ctx_c; accept before any connect must not return a comm. */
static void inproc_pair_open(const fit_plugin_t *p, void *ctx_l, void *ctx_c, inproc_pair_t *pr,
                             long *nulls_p)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    void *early = NULL;
    char addr[80];

    memset(pr, 0, sizeof(*pr));
    pr->listen_comm = fit_listen(p, ctx_l, fit_device(p), pr->handle);
    pr->port        = fit_handle_port(pr->handle);
    fit_handle_addr(pr->handle, addr, sizeof(addr));
    FIT_CHECK(pr->port != 0, "listen handle carries port 0");
    FIT_CHECK(strncmp(addr, "127.", 4) == 0 || strncmp(addr, "[::1]", 5) == 0,
              "with NCCL_SOCKET_IFNAME=lo the handle should name loopback, it names %s", addr);
    FIT_NCCL(p->net->accept(pr->listen_comm, &early, &dev_handle));
    FIT_CHECK(early == NULL, "accept returned a comm before anybody connected");
    fit_connect_accept(p, ctx_c, fit_device(p), pr->handle, pr->listen_comm, &pr->send_comm,
                       &pr->recv_comm, nulls_p);
    /* NCCL closes the listen comm right after accept; the connection must not care. */
    FIT_NCCL(p->net->closeListen(pr->listen_comm));
    pr->listen_comm = NULL;
}

static void inproc_pair_close(const fit_plugin_t *p, inproc_pair_t *pr)
{
    FIT_NCCL(p->net->closeSend(pr->send_comm));
    FIT_NCCL(p->net->closeRecv(pr->recv_comm));
    pr->send_comm = pr->recv_comm = NULL;
}

static int inproc_run(const fit_plugin_t *p, inproc_pair_t *pr, const size_t *sizes, int n,
                      int depth, size_t recv_extra, int hint, uint64_t seed, const char *what,
                      int *sized_p)
{
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    size_t bytes = 0;
    int i;

    o.sizes      = sizes;
    o.nmsgs      = n;
    o.depth      = depth;
    o.recv_extra = recv_extra;
    o.use_hint   = hint;
    o.seed       = seed;
    o.seconds    = 60.0;
    o.tag        = 1;
    fit_xfer_inproc(p, pr->send_comm, pr->recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, what);
    FIT_CHECK(r.done[FIT_SEND] == n && r.done[FIT_RECV] == n, "%s: %d/%d messages done", what,
              r.done[FIT_SEND], r.done[FIT_RECV]);
    for (i = 0; i < n; i++)
        bytes += sizes[i];
    fit_pass("%s: %d messages, %zu bytes in %.3f s (%d NULL-request retries, %d receives "
             "done before their data)", what, n, bytes, r.seconds,
             r.retries[FIT_SEND] + r.retries[FIT_RECV], r.early);
    if (sized_p != NULL)
        *sized_p = r.sized;
    return r.early;
}

static void inproc_sweep(const fit_plugin_t *p, inproc_pair_t *pr)
{
    size_t sizes[INPROC_MAX_SIZES];
    int n = fit_sweep_sizes(sizes, INPROC_MAX_SIZES, (size_t)64 << 20);
    int nsmall = 0;

    while (nsmall < n && sizes[nsmall] <= ((size_t)1 << 20))
        nsmall++;
    FIT_CHECK(sizes[0] == 0 && sizes[1] == 1 && sizes[n - 1] == ((size_t)64 << 20),
              "sweep covers 0..64 MiB");
    inproc_run(p, pr, sizes, nsmall, 8, 0, 0, 1000, "sweep 0 B..1 MiB, 8 in flight, exact receives",
               NULL);
    inproc_run(p, pr, sizes + nsmall, n - nsmall, 8, 0, 0, 2000,
               "sweep 1 MiB..64 MiB, exact receives", NULL);
    inproc_run(p, pr, sizes, nsmall, 8, 4096 + 13, 0, 3000,
               "sweep 0 B..1 MiB, receives posted 4109 B larger", NULL);
    inproc_run(p, pr, sizes + nsmall, n - nsmall, 4, (size_t)3 << 20, 0, 4000,
               "sweep 1..64 MiB, receives posted 3 MiB larger", NULL);
}

/*
 * A run under NCCL's optional-completion hint (hint: 1 every receive, 2 every other one; more
 * than min_sized hinted receives tested with sizes). The
 * ib backend reports a hinted single-QP receive done as soon as its clear-to-send is out
 * (FIT_EXPECT_EARLY=1), the socket backend only once its bytes are in (0). Either way irecv
 * overwrites *request and every byte arrives.
 */
static void inproc_hint_run(const fit_plugin_t *p, inproc_pair_t *pr, const size_t *sizes, int n,
                            int hint, int min_sized, uint64_t seed, const char *what)
{
    const char *expect = getenv("FIT_EXPECT_EARLY");
    int sized, early = inproc_run(p, pr, sizes, n, 8, 0, hint, seed, what, &sized);

    FIT_CHECK(sized > min_sized && (expect == NULL || early == (atoi(expect) ? sized : 0)),
              "%s: %d of the %d hinted non-empty receives tested with sizes completed before "
              "their data (size 0), expected %s", what, early, sized,
              expect != NULL && atoi(expect) ? "all" : "none");
}

static void inproc_zero_and_hint(const fit_plugin_t *p, inproc_pair_t *pr)
{
    size_t zeros[32], small[64], mixed[96];
    int i;

    for (i = 0; i < 32; i++)
        zeros[i] = 0;
    inproc_run(p, pr, zeros, 32, 8, 0, 0, 5000, "32 zero-byte messages, 8 in flight", NULL);
    inproc_run(p, pr, zeros, 16, 8, 65536, 0, 5100, "zero-byte sends into 64 KiB receives", NULL);
    for (i = 0; i < 64; i++)
        small[i] = (size_t)(i * 977) % 70000;
    inproc_hint_run(p, pr, small, 64, 1, 40, 5200,
                    "optional-completion hint in *request: overwritten, data right");
    /*
     * Every other receive hinted, as when NCCL alternates LL and Simple on one comm: a plain
     * receive may land in a FIFO slot whose hinted receive's data has not been seen yet (it
     * waits for it); hinted ones complete early, plain ones with their size.
     */
    for (i = 0; i < 96; i++)
        mixed[i] = (size_t)(i * 1237) % 9000 + 1;
    inproc_hint_run(p, pr, mixed, 96, 2, 30, 5250,
                    "every other receive hinted: data right, sizes right");
    /* Deep window: 32 in flight (NCCL_NET_MAX_REQUESTS), receives posted first. */
    for (i = 0; i < 64; i++)
        small[i] = (size_t)(i * 4099) % 300000 + 1;
    inproc_run(p, pr, small, 64, 32, 0, 0, 5300, "32 requests in flight per comm", NULL);
}

static void inproc_big_streams(const fit_plugin_t *p, inproc_pair_t *pr, int min_streams)
{
    size_t sizes[3] = { (size_t)64 << 20, (size_t)64 << 20, ((size_t)64 << 20) - 1 };
    int established;

    inproc_run(p, pr, sizes, 3, 2, 0, 0, 6000, "3 x 64 MiB", NULL);
    established = fit_count_established_local(pr->port);
    printf("  %d ESTABLISHED TCP connection(s) on listen port %d\n", established, pr->port);
    if (min_streams > 0)
        FIT_CHECK(established >= min_streams,
                  "expected >= %d TCP streams to listen port %d (NCCL_FERRY_STREAMS=%s "
                  "NCCL_SOCKET_NTHREADS=%s NCCL_NSOCKS_PERTHREAD=%s), found %d",
                  min_streams, pr->port, inproc_env("NCCL_FERRY_STREAMS"),
                  inproc_env("NCCL_SOCKET_NTHREADS"),
                  inproc_env("NCCL_NSOCKS_PERTHREAD"), established);
    fit_pass("64 MiB over %d stream(s) (required >= %d)", established, min_streams);
}

#define INPROC_NPAR 4

/* One "proxy progress thread": its own comm pair, driven concurrently with the others. */
typedef struct inproc_par {
    const fit_plugin_t *p;
    void               *ctx_l;
    void               *ctx_c;
    inproc_pair_t       pair;
    size_t              sizes[INPROC_MAX_SIZES];
    int                 n;
    fit_xfer_result_t   r;
    int                 idx;
} inproc_par_t;

static void *inproc_par_main(void *arg)
{
    inproc_par_t *t = arg;
    fit_xfer_opts_t o = { 0 };

    /* Connection setup runs concurrently too, as on several NCCL service threads. */
    inproc_pair_open(t->p, t->ctx_l, t->ctx_c, &t->pair, NULL);
    o.sizes      = t->sizes;
    o.nmsgs      = t->n;
    o.depth      = 8;
    o.recv_extra = (size_t)t->idx * 100;
    o.seed       = 10000 + (uint64_t)t->idx * 1000;
    o.seconds    = 90.0;
    o.tag        = t->idx;
    fit_xfer_inproc(t->p, t->pair.send_comm, t->pair.recv_comm, &o, &t->r);
    return NULL;
}

/* Several comms at once from several threads, as NCCL's per-GPU proxy threads do. */
static void inproc_parallel(const fit_plugin_t *p, void *ctx_a, void *ctx_b)
{
    inproc_par_t t[INPROC_NPAR];
    pthread_t tid[INPROC_NPAR];
    int i;

    for (i = 0; i < INPROC_NPAR; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        t[i].p   = p;
        t[i].idx = i;
        t[i].n   = fit_sweep_sizes(t[i].sizes, INPROC_MAX_SIZES, (size_t)4 << 20);
        /* Alternate which context listens, so both contexts carry both directions. */
        t[i].ctx_l = i % 2 ? ctx_a : ctx_b;
        t[i].ctx_c = i % 2 ? ctx_b : ctx_a;
    }
    for (i = 0; i < INPROC_NPAR; i++)
        FIT_CHECK(pthread_create(&tid[i], NULL, inproc_par_main, &t[i]) == 0, "pthread_create");
    for (i = 0; i < INPROC_NPAR; i++) {
        char what[64];

        pthread_join(tid[i], NULL);
        snprintf(what, sizeof(what), "parallel comm %d", i);
        fit_xfer_expect_ok(&t[i].r, what);
    }
    for (i = 0; i < INPROC_NPAR; i++)
        inproc_pair_close(p, &t[i].pair);
    fit_pass("%d threads at once, each listen/connect/accept + 0 B..4 MiB, intact", INPROC_NPAR);
}

/* NCCL closes comms with requests still posted when it aborts: no hang, no crash. */
static void inproc_close_busy(const fit_plugin_t *p, void *ctx_l, void *ctx_c)
{
    size_t len = (size_t)8 << 20, cap = len;
    /* The send buffer, then one buffer per receive: two receives never share bytes, as in NCCL. */
    char *buf = malloc(len * 5);
    void *smh = NULL, *rmh = NULL, *req;
    inproc_pair_t pr;
    int i, tag = 1, posted = 0;

    FIT_CHECK(buf != NULL, "malloc");
    inproc_pair_open(p, ctx_l, ctx_c, &pr, NULL);
    FIT_NCCL(p->net->regMr(pr.send_comm, buf, len, NCCL_PTR_HOST, &smh));
    FIT_NCCL(p->net->regMr(pr.recv_comm, buf + len, len * 4, NCCL_PTR_HOST, &rmh));
    for (i = 0; i < 4; i++) {
        void *data = buf + len * (size_t)(1 + i);

        req = NULL;
        FIT_NCCL(p->net->irecv(pr.recv_comm, 1, &data, &cap, &tag, &rmh, NULL, &req));
        posted += req != NULL;
    }
    /* Two sends: the first matches a receive, the second is still moving at close. */
    for (i = 0; i < 2; i++) {
        req = NULL;
        FIT_NCCL(p->net->isend(pr.send_comm, buf, len, 1, smh, NULL, &req));
        posted += req != NULL;
    }
    fit_log_allow_warns(1); /* Closing under traffic may be worth a WARN; it must not hang. */
    FIT_NCCL(p->net->deregMr(pr.send_comm, smh));
    FIT_NCCL(p->net->deregMr(pr.recv_comm, rmh));
    inproc_pair_close(p, &pr);
    fit_log_allow_warns(0);
    free(buf);
    fit_pass("closeSend/closeRecv with %d requests still in flight", posted);
}

/* A send larger than the posted receive: ncclInvalidUsage on the receiver, WARN with both sizes. */
static void inproc_truncation(const fit_plugin_t *p, void *ctx_l, void *ctx_c)
{
    const size_t send_size = 40999, recv_size = 12345;
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    inproc_pair_t pr;
    char line[4096];
    char s1[32], s2[32];
    int from;

    inproc_pair_open(p, ctx_l, ctx_c, &pr, NULL);
    from = fit_log_lines();
    o.sizes      = &send_size;
    o.recv_sizes = &recv_size;
    o.nmsgs      = 1;
    o.depth      = 1;
    o.seed       = 7000;
    o.seconds    = 20.0;
    o.tag        = 1;
    /* The wording is the plugin's; the sizes in it are what this test pins. */
    fit_log_allow_warns(1);
    fit_xfer_inproc(p, pr.send_comm, pr.recv_comm, &o, &r);
    FIT_CHECK(r.rc == ncclInvalidUsage && r.err_role == FIT_RECV && strcmp(r.err_call, "test") == 0,
              "send of %zu B into a %zu B receive: expected the receiver's test() to return "
              "ncclInvalidUsage, got %s %s -> %d (%s)",
              send_size, recv_size, r.err_role == FIT_SEND ? "sender" : "receiver",
              r.err_call ? r.err_call : "(nothing failed)", (int)r.rc, fit_result_str(r.rc));
    snprintf(s1, sizeof(s1), "%zu", send_size);
    snprintf(s2, sizeof(s2), "%zu", recv_size);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, s1, s2, NULL, line, sizeof(line)) >= 0,
              "no WARN names both sizes %s and %s", s1, s2);
    printf("  WARN: %s\n", line);
    /* Closing both ends of a failed connection must work and not hang. */
    inproc_pair_close(p, &pr);
    fit_log_allow_warns(0);
    fit_pass("send %zu B > posted %zu B -> ncclInvalidUsage + WARN naming both sizes", send_size,
             recv_size);
}

/*
 * NCCL's hint on a receive too small for its send (FIT_EXPECT_EARLY=1: the ib backend): the
 * receive completes at once, size unknown (0); the sender fails its send; the data's late
 * completion fails the receive comm, so a following irecv returns ncclInvalidUsage, with a
 * WARN naming both sizes.
 */
static void inproc_truncation_early(const fit_plugin_t *p, void *ctx_l, void *ctx_c)
{
    const size_t send_size = 40999, recv_size = 12345;
    char *buf = calloc(1, send_size + 2 * recv_size);
    void *smh = NULL, *rmh = NULL, *rreq, *sreq = NULL, *data;
    size_t cap = recv_size;
    ncclResult_t rc = ncclSuccess;
    int tag = 1, done = 0, size = -1, from;
    char line[4096], s1[32], s2[32];
    inproc_pair_t pr;
    fit_bound_t b;

    FIT_CHECK(buf != NULL, "calloc");
    inproc_pair_open(p, ctx_l, ctx_c, &pr, NULL);
    FIT_NCCL(p->net->regMr(pr.send_comm, buf, send_size, NCCL_PTR_HOST, &smh));
    FIT_NCCL(p->net->regMr(pr.recv_comm, buf + send_size, 2 * recv_size, NCCL_PTR_HOST, &rmh));
    from = fit_log_lines();
    fit_log_allow_warns(1);
    data = buf + send_size;
    rreq = (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION;
    FIT_NCCL(p->net->irecv(pr.recv_comm, 1, &data, &cap, &tag, &rmh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv with the hint returned no request");
    FIT_NCCL(p->net->test(rreq, &done, &size));
    FIT_CHECK(done == 1 && size == 0, "a receive under the hint completes when posted, size 0 "
              "(done %d, size %d)", done, size);
    fit_bound_init(&b, "the oversized send", 10.0, 2000000000L);
    while (sreq == NULL) {
        FIT_NCCL(p->net->isend(pr.send_comm, buf, send_size, tag, smh, NULL, &sreq));
        fit_bound_step(&b);
    }
    for (done = 0; !done && rc == ncclSuccess; fit_bound_step(&b))
        rc = p->net->test(sreq, &done, &size);
    FIT_CHECK(rc == ncclInvalidUsage, "send of %zu B into a %zu B receive: test() -> %d (%s)",
              send_size, recv_size, (int)rc, fit_result_str(rc));
    /* The receiver learns it from the data's completion, which the next irecv takes. */
    data = buf + send_size + recv_size;
    fit_bound_init(&b, "the receiver's irecv after the oversized send", 10.0, 2000000000L);
    for (rc = ncclSuccess; rc == ncclSuccess; fit_bound_step(&b)) {
        rreq = (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION;
        rc = p->net->irecv(pr.recv_comm, 1, &data, &cap, &tag, &rmh, NULL, &rreq);
        FIT_CHECK(rc != ncclSuccess || rreq != NULL, "irecv returned no request");
        if (rc == ncclSuccess)
            FIT_NCCL(p->net->test(rreq, &done, NULL));
    }
    FIT_CHECK(rc == ncclInvalidUsage, "the receiver's irecv after the oversized send -> %d (%s)",
              (int)rc, fit_result_str(rc));
    snprintf(s1, sizeof(s1), "%zu", send_size);
    snprintf(s2, sizeof(s2), "%zu", recv_size);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, s1, s2, "early", line, sizeof(line)) >= 0,
              "no WARN names both sizes %s and %s and the early completion", s1, s2);
    printf("  WARN: %s\n", line);
    FIT_NCCL(p->net->deregMr(pr.send_comm, smh));
    FIT_NCCL(p->net->deregMr(pr.recv_comm, rmh));
    inproc_pair_close(p, &pr);
    fit_log_allow_warns(0);
    free(buf);
    fit_pass("hint: receive of %zu B done at post; send of %zu B -> ncclInvalidUsage on both "
             "sides, WARN naming both sizes", recv_size, send_size);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    fit_plugin_t plugin;
    inproc_pair_t pair;
    void *ctx_a, *ctx_b;
    int min_streams = 0, ndev = 0, i, nthreads;
    long nulls = 0;
    char names[1024];

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--min-streams") == 0 && i + 1 < argc)
            min_streams = atoi(argv[++i]);
        else
            FIT_FAIL("usage: integ_inproc [--plugin PATH] [--min-streams N] (got '%s')", argv[i]);
    }
    fit_set_role("inproc");
    /* The tests talk over loopback only, whatever the caller's environment says. */
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    fit_check_no_ferry_threads("before dlopen");

    fit_plugin_open(&plugin, path);
    /* Two inits, like two communicators; the second must not redo or break device discovery. */
    ctx_a = fit_plugin_init(&plugin, 0x1111);
    ctx_b = fit_plugin_init(&plugin, 0x2222);
    FIT_NCCL(plugin.net->devices(&ndev));
    FIT_CHECK(ndev >= 1, "devices() reported %d", ndev);
    inproc_check_props(&plugin, ndev);
    fit_pass("2 x init, devices = %d, getProperties sane", ndev);
    if (getenv("FIT_MERGE") != NULL) {
        inproc_check_merged(&plugin, ndev);
        fit_pass("makeVDevice(%s): merged device listed, named and sped up", getenv("FIT_MERGE"));
    }

    inproc_pair_open(&plugin, ctx_a, ctx_b, &pair, &nulls);
    fit_pass("listen/connect/accept (%ld NULL returns before both comms were ready)", nulls);

    inproc_zero_and_hint(&plugin, &pair);
    inproc_sweep(&plugin, &pair);
    inproc_big_streams(&plugin, &pair, min_streams);
    nthreads = fit_count_threads("ferry-", names, sizeof(names));
    printf("  helper threads while connected: %d [%s]\n", nthreads, names);
    /* The ib backend's async-event thread is one per device, not a helper. */
    if (nthreads - fit_count_threads("ferry-ibasync", NULL, 0) > 0) {
        int eps = fit_count_fds_to("anon_inode:[eventpoll]");
        int pool = fit_count_threads("ferry-pool-", NULL, 0);

        /*
         * The helpers are the process' pool, each waiting in its epoll set
         * (NCCL_FERRY_EPOLL is accepted and has no effect): the sweep above
         * ran through them.
         */
        FIT_CHECK(eps == pool && pool == nthreads, "%d epoll fds for %d pool threads (%d ferry-* "
                  "threads: %s)", eps, pool, nthreads, names);
        fit_pass("%d helper threads (the pool), each waiting in its epoll set", eps);
    }

    inproc_parallel(&plugin, ctx_a, ctx_b);
    inproc_truncation(&plugin, ctx_b, ctx_a);
    if (getenv("FIT_EXPECT_EARLY") != NULL && atoi(getenv("FIT_EXPECT_EARLY")) == 1)
        inproc_truncation_early(&plugin, ctx_b, ctx_a);
    inproc_close_busy(&plugin, ctx_a, ctx_b);

    inproc_pair_close(&plugin, &pair);
    FIT_NCCL(plugin.net->finalize(ctx_a));
    FIT_NCCL(plugin.net->finalize(ctx_b));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
    fit_pass("close, finalize, dlclose: no ferry-* thread left");
    printf("integ_inproc: all checks passed\n");
    return 0;
}
