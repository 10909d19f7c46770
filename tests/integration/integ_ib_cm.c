/*
 * integ_ib_cm: the ib backend's rdmacm connection mode (NCCL_FERRY_IB_CM=
 * rdmacm) on fakeibv's emulated librdmacm, where it differs from the oob
 * mode. Each case runs in a fresh child process (its own plugin, fakeibv
 * and librdmacm) under a watchdog and checks codes and WARN text:
 *
 *   stranger      a CONNECT_REQUEST with a wrong token, and one with private
 *                 data too short, are rejected (REJECTED 28 with ferry's
 *                 reason at the stranger) and logged; the real peer still
 *                 connects and moves data byte for byte
 *   no-listener   connect to a handle whose listener is closed: REJECTED
 *                 status 8 -> ncclRemoteError naming the peer and the event
 *   unreachable   connect to a port whose "CM" never answers: UNREACHABLE
 *                 (ETIMEDOUT) -> ncclRemoteError naming the peer and the event
 *   addr-error    connect to an address no RDMA port owns: ADDR_ERROR ->
 *                 ncclSystemError naming the peer and NCCL_FERRY_IB_CM=oob
 *                 (skipped where the host has no non-loopback IPv4 address)
 *   no-lib        NCCL_FERRY_RDMACM_LIB names a missing file: init fails with
 *                 a WARN naming the file and the fallback NCCL_FERRY_IB_CM=oob
 *   no-device     the rdma_cm device is missing (FAKEIBV_RDMA_CM_DEV): init
 *                 fails with a WARN naming /dev/infiniband/rdma_cm and the fallback
 *
 *   integ_ib_cm [--plugin PATH] [--case NAME]
 *
 * The stranger talks to the emulated librdmacm directly (dlopen, as ferry).
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ferry/rdma_cm_abi.h"

#include "harness.h"
#include "ib/ib_handle.h"

#define CM_SKIP 77

/* The entry points of librdmacm the stranger uses. */
typedef struct cm_lib {
    struct rdma_event_channel *(*create_event_channel)(void);
    int (*create_id)(struct rdma_event_channel *, struct rdma_cm_id **, void *,
                     enum rdma_port_space);
    int (*resolve_addr)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int);
    int (*resolve_route)(struct rdma_cm_id *, int);
    int (*connect)(struct rdma_cm_id *, struct rdma_conn_param *);
    int (*get_cm_event)(struct rdma_event_channel *, struct rdma_cm_event **);
    int (*ack_cm_event)(struct rdma_cm_event *);
    int (*destroy_id)(struct rdma_cm_id *);
    void (*destroy_event_channel)(struct rdma_event_channel *);
} cm_lib_t;

static void cm_lib_open(cm_lib_t *l)
{
    void *h = dlopen("librdmacm.so.1", RTLD_NOW);

    FIT_CHECK(h != NULL, "dlopen librdmacm.so.1: %s", dlerror());
#define CM_SYM(_m) FIT_CHECK((*(void **)&l->_m = dlsym(h, "rdma_" #_m)) != NULL, "rdma_" #_m)
    CM_SYM(create_event_channel);
    CM_SYM(create_id);
    CM_SYM(resolve_addr);
    CM_SYM(resolve_route);
    CM_SYM(connect);
    CM_SYM(get_cm_event);
    CM_SYM(ack_cm_event);
    CM_SYM(destroy_id);
    CM_SYM(destroy_event_channel);
#undef CM_SYM
}

static void cm_open(fit_plugin_t *p, void **ctx, const char *path)
{
    fit_plugin_open(p, path);
    *ctx = fit_plugin_init(p, 0x6363);
}

static void cm_close(fit_plugin_t *p, void *ctx)
{
    FIT_NCCL(p->net->finalize(ctx));
    fit_plugin_close(p);
}

static void cm_handle_sockaddr(const void *handle, struct sockaddr_in *sin)
{
    const ferry_ib_handle_t *h = handle;

    FIT_CHECK(h->magic == FERRY_IB_MAGIC && h->family == AF_INET, "not an IPv4 ferry ib handle");
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = h->port;
    memcpy(&sin->sin_addr, h->addr, 4);
}

/*
 * One stranger connection to the handle's rdma_cm listener with private
 * data pd[0..len), while ferry's accept runs; returns the event it ends
 * with (REJECTED expected) and its private data in *reply.
 */
static int cm_stranger(const cm_lib_t *l, const fit_plugin_t *p, void *lc, const void *handle,
                       const void *pd, int len, ferry_ib_cm_priv_t *reply, int *status_p)
{
    struct rdma_event_channel *ch = l->create_event_channel();
    struct rdma_conn_param param;
    struct rdma_cm_event *ev;
    struct rdma_cm_id *id;
    struct sockaddr_in sin;
    void *rc_comm = NULL;
    ncclNetDeviceHandle_v11_t *dh = NULL;
    fit_bound_t b;
    int last = -1;

    FIT_CHECK(ch != NULL, "stranger: rdma_create_event_channel: %s", strerror(errno));
    FIT_CHECK(fcntl(ch->fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
    FIT_CHECK(l->create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "stranger: rdma_create_id");
    cm_handle_sockaddr(handle, &sin);
    FIT_CHECK(l->resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000) == 0, "resolve_addr");
    memset(reply, 0, sizeof(*reply));
    fit_bound_init(&b, "stranger's connection", 20.0, 200000000L);
    while (last != RDMA_CM_EVENT_REJECTED && last != RDMA_CM_EVENT_ESTABLISHED) {
        FIT_NCCL(p->net->accept(lc, &rc_comm, &dh));
        FIT_CHECK(rc_comm == NULL, "accept returned a comm for a stranger");
        if (l->get_cm_event(ch, &ev) != 0) {
            fit_bound_step(&b);
            continue;
        }
        last = ev->event;
        *status_p = ev->status;
        if (last == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data_len >= sizeof(*reply))
            memcpy(reply, ev->param.conn.private_data, sizeof(*reply));
        l->ack_cm_event(ev);
        if (last == RDMA_CM_EVENT_ADDR_RESOLVED) {
            FIT_CHECK(l->resolve_route(id, 2000) == 0, "resolve_route");
        } else if (last == RDMA_CM_EVENT_ROUTE_RESOLVED) {
            memset(&param, 0, sizeof(param));
            param.private_data = pd;
            param.private_data_len = (uint8_t)len;
            param.qp_num = 0x123; /* No QP: the stranger never gets that far. */
            param.retry_count = 7;
            FIT_CHECK(l->connect(id, &param) == 0, "stranger: rdma_connect: %s", strerror(errno));
        } else if (last != RDMA_CM_EVENT_REJECTED) {
            FIT_FAIL("stranger: unexpected event %d (status %d)", last, *status_p);
        }
    }
    l->destroy_id(id);
    l->destroy_event_channel(ch);
    return last;
}

static void cm_expect_warn(int from, const char *a, const char *b, const char *c)
{
    char line[2048];

    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, a, b, c, line, sizeof(line)) >= 0,
              "no WARN containing '%s', '%s' and '%s'", a, b ? b : "", c ? c : "");
    printf("  WARN: %s\n", line);
}

static void cm_case_stranger(const char *path)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    const ferry_ib_handle_t *h = (const ferry_ib_handle_t *)handle;
    static const size_t sizes[] = {0, 1, 4096, 65536, 1 << 20, (4 << 20) + 3};
    void *ctx, *lc, *sc = NULL, *rcomm = NULL;
    ferry_ib_cm_priv_t bad, reply;
    fit_xfer_opts_t o = {0};
    fit_xfer_result_t r;
    fit_plugin_t p;
    cm_lib_t l;
    int from, ev, status = 0;

    cm_open(&p, &ctx, path);
    cm_lib_open(&l);
    lc = fit_listen(&p, ctx, 0, handle);
    fit_log_allow_warns(1);

    /* Looks like ferry, carries another token. */
    memset(&bad, 0, sizeof(bad));
    bad.magic = FERRY_IB_CM_MAGIC;
    bad.version = FERRY_IB_WIRE_VERSION;
    bad.token = h->token ^ 0x5a5a;
    bad.nqps = 1;
    from = fit_log_lines();
    ev = cm_stranger(&l, &p, lc, handle, &bad, sizeof(bad), &reply, &status);
    FIT_CHECK(ev == RDMA_CM_EVENT_REJECTED && status == 28, "wrong token: event %d status %d "
              "(want REJECTED, 28)", ev, status);
    FIT_CHECK(reply.magic == FERRY_IB_CM_MAGIC && reply.reason == FERRY_IB_CM_REJ_STRANGER,
              "the reject's private data: magic 0x%x reason %u", reply.magic, reply.reason);
    cm_expect_warn(from, "rejected connection request from 127.0.0.1", "wrong token",
                   "still accepting real peers");
    fit_pass("stranger with a wrong token -> REJECTED 28 (reason stranger) + WARN");

    /* Not ferry at all: 8 bytes of private data. */
    from = fit_log_lines();
    ev = cm_stranger(&l, &p, lc, handle, "garbage!", 8, &reply, &status);
    FIT_CHECK(ev == RDMA_CM_EVENT_REJECTED && status == 28, "short private data: event %d", ev);
    cm_expect_warn(from, "rejected connection request from", "private data too short", NULL);
    fit_pass("stranger with 8 bytes of private data -> REJECTED + WARN");

    /* The real peer still connects on the same listener, and data moves. */
    fit_log_allow_warns(0);
    fit_connect_accept(&p, ctx, 0, handle, lc, &sc, &rcomm, NULL);
    o.sizes = sizes;
    o.nmsgs = (int)(sizeof(sizes) / sizeof(sizes[0]));
    o.depth = 4;
    o.seed = 0x2101;
    o.seconds = 60;
    o.tag = 7;
    fit_xfer_inproc(&p, sc, rcomm, &o, &r);
    fit_xfer_expect_ok(&r, "after the strangers");
    FIT_NCCL(p.net->closeSend(sc));
    FIT_NCCL(p.net->closeRecv(rcomm));
    FIT_NCCL(p.net->closeListen(lc));
    fit_pass("the real peer connects after the strangers; %d messages 0 B..4 MiB byte for byte",
             o.nmsgs);
    cm_close(&p, ctx);
}

/* connect() until it fails (bounded); returns the error. */
static ncclResult_t cm_connect_fails(const fit_plugin_t *p, void *ctx, const void *handle,
                                     double *took_p)
{
    char peer[NCCL_NET_HANDLE_MAXSIZE];
    ncclNetDeviceHandle_v11_t *dh = NULL;
    ncclResult_t rc;
    void *sc = NULL;
    fit_bound_t b;
    double t0 = fit_now();

    memcpy(peer, handle, sizeof(peer));
    fit_bound_init(&b, "connect that must fail", 30.0, 2000000000L);
    while ((rc = p->net->connect(ctx, 0, peer, &sc, &dh)) == ncclSuccess) {
        FIT_CHECK(sc == NULL, "connect returned a comm");
        fit_bound_step(&b);
    }
    *took_p = fit_now() - t0;
    return rc;
}

static void cm_case_no_listener(const char *path)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], addr[64];
    ncclResult_t rc;
    fit_plugin_t p;
    void *ctx, *lc;
    double took;
    int from;

    cm_open(&p, &ctx, path);
    lc = fit_listen(&p, ctx, 0, handle);
    FIT_NCCL(p.net->closeListen(lc));
    fit_handle_addr(handle, addr, sizeof(addr));
    fit_log_allow_warns(1);
    from = fit_log_lines();
    rc = cm_connect_fails(&p, ctx, handle, &took);
    FIT_CHECK(rc == ncclRemoteError, "connect to a closed listener: %s", fit_result_str(rc));
    cm_expect_warn(from, "ib connect to", addr, "RDMA_CM_EVENT_REJECTED (status 8: nobody listens");
    fit_pass("closed listener -> ncclRemoteError in %.2f s + WARN naming the peer and REJECTED",
             took);
    cm_close(&p, ctx);
}

static void cm_case_unreachable(const char *path)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], addr[64];
    ferry_ib_handle_t *h = (ferry_ib_handle_t *)handle;
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    ncclResult_t rc;
    fit_plugin_t p;
    void *ctx, *lc;
    double took;
    int from, hole;

    cm_open(&p, &ctx, path);
    lc = fit_listen(&p, ctx, 0, handle);
    FIT_NCCL(p.net->closeListen(lc));
    /* A black hole where the CM should be: the kernel accepts, nobody ever answers. */
    hole = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FIT_CHECK(hole >= 0 && bind(hole, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
              listen(hole, 4) == 0 && getsockname(hole, (struct sockaddr *)&sin, &len) == 0,
              "black-hole listener: %s", strerror(errno));
    h->port = sin.sin_port;
    memcpy(h->addr, &sin.sin_addr, 4);
    fit_handle_addr(handle, addr, sizeof(addr));
    fit_log_allow_warns(1);
    from = fit_log_lines();
    rc = cm_connect_fails(&p, ctx, handle, &took);
    FIT_CHECK(rc == ncclRemoteError, "connect to a silent CM: %s", fit_result_str(rc));
    cm_expect_warn(from, addr, "RDMA_CM_EVENT_UNREACHABLE", "Connection timed out");
    FIT_CHECK(took < 15.0, "the timeout took %.1f s", took);
    fit_pass("no answer from the CM -> ncclRemoteError in %.2f s + WARN naming UNREACHABLE",
             took);
    close(hole);
    cm_close(&p, ctx);
}

/* An IPv4 address of this host that is not loopback, or 0. */
static int cm_other_ipv4(struct in_addr *a)
{
    struct ifaddrs *ifa, *it;
    int found = 0;

    if (getifaddrs(&ifa) != 0)
        return 0;
    for (it = ifa; it != NULL && !found; it = it->ifa_next)
        if (it->ifa_addr != NULL && it->ifa_addr->sa_family == AF_INET &&
            (ntohl(((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr.s_addr) >> 24) != 127) {
            *a = ((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr;
            found = 1;
        }
    freeifaddrs(ifa);
    return found;
}

static void cm_case_addr_error(const char *path)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], addr[64];
    ferry_ib_handle_t *h = (ferry_ib_handle_t *)handle;
    struct in_addr other;
    ncclResult_t rc;
    fit_plugin_t p;
    void *ctx, *lc;
    double took;
    int from;

    if (!cm_other_ipv4(&other)) {
        printf("SKIP addr-error: this host has no IPv4 address besides loopback\n");
        fit_child_exit(CM_SKIP);
    }
    cm_open(&p, &ctx, path);
    lc = fit_listen(&p, ctx, 0, handle);
    /* fakeibv's ports are all on lo: nothing owns that interface. */
    memcpy(h->addr, &other, 4);
    fit_handle_addr(handle, addr, sizeof(addr));
    fit_log_allow_warns(1);
    from = fit_log_lines();
    rc = cm_connect_fails(&p, ctx, handle, &took);
    FIT_CHECK(rc == ncclSystemError, "connect to an address no RDMA port owns: %s",
              fit_result_str(rc));
    cm_expect_warn(from, addr, "RDMA_CM_EVENT_ADDR_ERROR", "NCCL_FERRY_IB_CM=oob");
    FIT_NCCL(p.net->closeListen(lc));
    fit_pass("no RDMA port for the address -> ncclSystemError + WARN naming ADDR_ERROR");
    cm_close(&p, ctx);
}

/* init must fail with a WARN holding both texts. */
static void cm_init_fails(const char *path, const char *a, const char *b)
{
    ncclNetCommConfig_v11_t cfg;
    ncclResult_t rc;
    fit_plugin_t p;
    void *ctx = NULL;
    int from;

    fit_plugin_open(&p, path);
    fit_log_allow_warns(1);
    from = fit_log_lines();
    memset(&cfg, 0, sizeof(cfg));
    cfg.trafficClass = -1;
    rc = p.net->init(&ctx, 0x6363, &cfg, fit_logger, NULL);
    FIT_CHECK(rc != ncclSuccess, "init succeeded without a usable rdma_cm");
    cm_expect_warn(from, a, b, "NCCL_FERRY_IB_CM=oob");
    fit_pass("init -> %s + WARN naming the cause and the fallback", fit_result_str(rc));
    fit_plugin_close(&p);
}

static void cm_case_no_lib(const char *path)
{
    setenv("NCCL_FERRY_RDMACM_LIB", "/nonexistent/librdmacm.so.1", 1);
    cm_init_fails(path, "cannot load /nonexistent/librdmacm.so.1", NULL);
}

static void cm_case_no_device(const char *path)
{
    setenv("FAKEIBV_RDMA_CM_DEV", "/nonexistent/infiniband/rdma_cm", 1);
    cm_init_fails(path, "rdma_create_event_channel failed", "/dev/infiniband/rdma_cm");
}

static const struct {
    const char *name;
    void (*fn)(const char *path);
} cm_cases[] = {
    {"stranger", cm_case_stranger},       {"no-listener", cm_case_no_listener},
    {"unreachable", cm_case_unreachable}, {"addr-error", cm_case_addr_error},
    {"no-lib", cm_case_no_lib},           {"no-device", cm_case_no_device},
};

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *only = argc == 3 && strcmp(argv[1], "--case") == 0 ? argv[2] : NULL;
    int i, failed = 0, ran = 0, skipped = 0, n = (int)(sizeof(cm_cases) / sizeof(cm_cases[0]));

    FIT_CHECK(argc == 1 || only != NULL, "usage: integ_ib_cm [--plugin PATH] [--case NAME]");
    setenv("NCCL_SOCKET_IFNAME", "=lo", 0);
    setenv("NCCL_FERRY_IB_CM", "rdmacm", 1);
    for (i = 0; i < n; i++) {
        int status;
        pid_t pid;

        if (only != NULL && strcmp(only, cm_cases[i].name) != 0)
            continue;
        printf("case %s\n", cm_cases[i].name);
        fflush(NULL);
        pid = fork();
        FIT_CHECK(pid >= 0, "fork");
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            fit_set_role(cm_cases[i].name);
            alarm(100);
            cm_cases[i].fn(path);
            fit_child_exit(0);
        }
        FIT_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
        ran++;
        if (WIFEXITED(status) && WEXITSTATUS(status) == CM_SKIP) {
            skipped++;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "FAIL case %s: status 0x%x\n", cm_cases[i].name, status);
            failed++;
        }
    }
    FIT_CHECK(ran > 0, "no case named %s", only);
    printf("integ_ib_cm: %d case(s), %d failed, %d skipped\n", ran, failed, skipped);
    if (failed == 0 && only != NULL && skipped == ran)
        return CM_SKIP;
    return failed ? 1 : 0;
}
