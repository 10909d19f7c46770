/*
 * integ_ib_faults: the ib backend on fakeibv when things break. Each case
 * runs in a fresh child process (its own plugin, fakeibv and faults) under
 * a watchdog, and checks the return code and the WARN that explains it:
 *
 *   reg-mr        regMr fails (FAKEIBV_FAULT_REG_MR): an error + WARN, then works
 *   create-qp     QP creation fails at connect, then at accept: errors, no hang
 *   modify-qp     INIT fails at connect; RTR fails at the connector after the
 *                 acceptor is up: connect errors, the acceptor errors too
 *   rem-access    the receiver deregisters its buffer before the data comes:
 *                 the sender's test -> ncclRemoteError naming the remote access error
 *   qp-drop       the link of the data QPs dies: RETRY_EXC_ERR -> ncclRemoteError
 *   qp-fatal      QP_FATAL async event on the receiver's QP -> ncclRemoteError
 *   port-err      PORT_ERR async event -> ncclRemoteError naming the port
 *   killed-in-accept   the receiver dies with the handshake half done
 *   killed-in-connect  the sender dies with the handshake half done
 *
 *   integ_ib_faults [--plugin PATH] [--case NAME]
 *
 * White-box where fakeibv needs an object: the test reads the plugin's
 * comm layout (ib/ib_comm.h, same build) for the QP numbers and context.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "fakeibv.h"
#include "harness.h"
#include "ib/ib_comm.h"

typedef int (*flt_inject_fn)(struct ibv_context *, enum fakeibv_fault_kind, uint32_t, unsigned,
                             unsigned, int);

typedef struct flt_env {
    fit_plugin_t  plugin;
    void         *ctx;
    flt_inject_fn inject;
    void         *send_comm, *recv_comm;
    char         *sbuf, *rbuf;
    void         *smh, *rmh;
} flt_env_t;

#define FLT_BUF ((size_t)1 << 20)

static void flt_open(flt_env_t *e, const char *path)
{
    memset(e, 0, sizeof(*e));
    void *h;

    memset(e, 0, sizeof(*e));
    fit_plugin_open(&e->plugin, path);
    e->ctx = fit_plugin_init(&e->plugin, 0x7777);
    h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    FIT_CHECK(h != NULL, "libibverbs.so.1 is not loaded by the plugin: %s", dlerror());
    e->inject = (flt_inject_fn)dlvsym(h, "fakeibv_inject", "FAKEIBV_1.0");
    FIT_CHECK(e->inject != NULL, "the loaded libibverbs.so.1 is not fakeibv (no fakeibv_inject)");
}

static void flt_pair(flt_env_t *e)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = fit_listen(&e->plugin, e->ctx, 0, handle);

    fit_connect_accept(&e->plugin, e->ctx, 0, handle, lc, &e->send_comm, &e->recv_comm, NULL);
    FIT_NCCL(e->plugin.net->closeListen(lc));
    e->sbuf = aligned_alloc(4096, FLT_BUF);
    e->rbuf = aligned_alloc(4096, FLT_BUF);
    FIT_CHECK(e->sbuf != NULL && e->rbuf != NULL, "malloc");
    memset(e->sbuf, 1, FLT_BUF);
    FIT_NCCL(e->plugin.net->regMr(e->send_comm, e->sbuf, FLT_BUF, NCCL_PTR_HOST, &e->smh));
    FIT_NCCL(e->plugin.net->regMr(e->recv_comm, e->rbuf, FLT_BUF, NCCL_PTR_HOST, &e->rmh));
}

/*
 * Everything a case opened goes back, failed comms included: a comm that
 * failed must still close cleanly, and the sanitizer build checks nothing
 * leaks.
 */
static void flt_close(flt_env_t *e)
{
    if (e->smh != NULL)
        FIT_NCCL(e->plugin.net->deregMr(e->send_comm, e->smh));
    if (e->rmh != NULL)
        FIT_NCCL(e->plugin.net->deregMr(e->recv_comm, e->rmh));
    if (e->send_comm != NULL)
        FIT_NCCL(e->plugin.net->closeSend(e->send_comm));
    if (e->recv_comm != NULL)
        FIT_NCCL(e->plugin.net->closeRecv(e->recv_comm));
    FIT_NCCL(e->plugin.net->finalize(e->ctx));
    free(e->sbuf);
    free(e->rbuf);
    fit_plugin_close(&e->plugin);
}

static void *flt_irecv(flt_env_t *e)
{
    void *req = NULL, *data = e->rbuf, *mh = e->rmh;
    size_t size = FLT_BUF;
    int tag = 1;

    FIT_NCCL(e->plugin.net->irecv(e->recv_comm, 1, &data, &size, &tag, &mh, NULL, &req));
    FIT_CHECK(req != NULL, "irecv returned no request");
    return req;
}

/* isend until a request comes back; drives recv_req meanwhile. */
static ncclResult_t flt_isend(flt_env_t *e, void **req_p)
{
    fit_bound_t b;
    ncclResult_t rc;

    fit_bound_init(&b, "isend", 10.0, 100000000L);
    for (;;) {
        *req_p = NULL;
        rc = e->plugin.net->isend(e->send_comm, e->sbuf, FLT_BUF, 1, e->smh, NULL, req_p);
        if (rc != ncclSuccess || *req_p != NULL)
            return rc;
        fit_bound_step(&b);
    }
}

static void flt_expect_warn(int from, const char *a, const char *b)
{
    char line[4096];

    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, a, b, NULL, line, sizeof(line)) >= 0,
              "no WARN contains '%s'%s%s", a, b ? " and " : "", b ? b : "");
    printf("  WARN: %.600s\n", line);
}

static ferry_ib_comm_t *flt_comm(void *comm)
{
    return comm; /* Same build: the plugin's comm layout (ib/ib_comm.h). */
}

static void flt_reg_mr(const char *path)
{
    flt_env_t e;
    void *mh = NULL;
    int from;
    ncclResult_t rc;

    char *buf = aligned_alloc(4096, 65536);

    flt_open(&e, path);
    flt_pair(&e);
    fit_log_allow_warns(1);
    from = fit_log_lines();
    /* A buffer of its own: the MR cache must really call ibv_reg_mr. */
    FIT_CHECK(buf != NULL && e.inject(NULL, FAKEIBV_FAULT_REG_MR, 0, 0, 1, 0) == 0, "inject");
    rc = e.plugin.net->regMr(e.recv_comm, buf, 65536, NCCL_PTR_HOST, &mh);
    FIT_CHECK(rc != ncclSuccess && mh == NULL, "regMr with ibv_reg_mr failing returned %d", rc);
    flt_expect_warn(from, "regMr", "127.0.0.1");
    FIT_NCCL(e.plugin.net->regMr(e.recv_comm, buf, 65536, NCCL_PTR_HOST, &mh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, mh));
    rc = e.plugin.net->regMr(e.recv_comm, buf, 65536, NCCL_PTR_CUDA, &mh);
    /* No peer-memory module and no NCCL_FERRY_IB_GDR: GPU pointers are refused, saying why. */
    FIT_CHECK(rc != ncclSuccess && mh == NULL, "regMr(CUDA) without GPUDirect: %d", rc);
    flt_expect_warn(from, "takes no GPU pointers here: no peer-memory module", "nvidia-peermem");
    free(buf);
    flt_close(&e);
    fit_pass("regMr: ibv_reg_mr failure -> %s + WARN; the next regMr works", fit_result_str(rc));
}

/* A connect whose comm creation fails returns the error on its first call. */
static void flt_create_qp(const char *path)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
    ncclNetDeviceHandle_v11_t *dh = NULL;
    void *lc, *sc = NULL, *rc_comm = NULL;
    fit_bound_t b;
    ncclResult_t rc = ncclSuccess;
    flt_env_t e;
    int from;

    flt_open(&e, path);
    fit_log_allow_warns(1);
    lc = fit_listen(&e.plugin, e.ctx, 0, handle);
    memcpy(peer, handle, sizeof(peer));
    from = fit_log_lines();
    FIT_CHECK(e.inject(NULL, FAKEIBV_FAULT_CREATE_QP, 0, 0, 1, 0) == 0, "inject");
    rc = e.plugin.net->connect(e.ctx, 0, peer, &sc, &dh);
    FIT_CHECK(rc != ncclSuccess && sc == NULL, "connect with ibv_create_qp failing: %d", rc);
    flt_expect_warn(from, "creating the QPs", "127.0.0.1");
    fit_pass("create-qp at connect -> %s + WARN naming the step and the peer", fit_result_str(rc));

    /* Now at the acceptor: the connector's QP is created, then the next creation fails. */
    memcpy(peer, handle, sizeof(peer));
    from = fit_log_lines();
    FIT_NCCL(e.plugin.net->connect(e.ctx, 0, peer, &sc, &dh));
    FIT_CHECK(e.inject(NULL, FAKEIBV_FAULT_CREATE_QP, 0, 0, 1, 0) == 0, "inject");
    fit_bound_init(&b, "accept with create_qp failing", 10.0, 100000000L);
    while ((rc = e.plugin.net->accept(lc, &rc_comm, &dh)) == ncclSuccess && rc_comm == NULL) {
        FIT_NCCL(e.plugin.net->connect(e.ctx, 0, peer, &sc, &dh));
        FIT_CHECK(sc == NULL, "connect completed although the acceptor failed");
        fit_bound_step(&b);
    }
    FIT_CHECK(rc != ncclSuccess, "accept with ibv_create_qp failing returned a comm");
    flt_expect_warn(from, "accept from", "creating the QPs");
    fit_bound_init(&b, "connect after the acceptor failed", 10.0, 100000000L);
    while ((rc = e.plugin.net->connect(e.ctx, 0, peer, &sc, &dh)) == ncclSuccess && sc == NULL)
        fit_bound_step(&b);
    FIT_CHECK(rc == ncclRemoteError, "connect to a failed acceptor: %d (%s)", rc,
              fit_result_str(rc));
    flt_expect_warn(from, "ib connect to", "waiting for the acceptor's metadata");
    FIT_NCCL(e.plugin.net->closeListen(lc));
    flt_close(&e);
    fit_pass("create-qp at accept -> accept errors, the connector gets ncclRemoteError");
}

static void flt_modify_qp(const char *path)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
    ncclNetDeviceHandle_v11_t *dh = NULL;
    void *lc, *sc = NULL, *rcomm = NULL;
    ncclResult_t rc, arc = ncclSuccess;
    fit_bound_t b;
    flt_env_t e;
    int from;

    flt_open(&e, path);
    fit_log_allow_warns(1);
    lc = fit_listen(&e.plugin, e.ctx, 0, handle);
    memcpy(peer, handle, sizeof(peer));
    from = fit_log_lines();
    FIT_CHECK(e.inject(NULL, FAKEIBV_FAULT_MODIFY_QP, 0, 0, 1, 0) == 0, "inject");
    rc = e.plugin.net->connect(e.ctx, 0, peer, &sc, &dh);
    FIT_CHECK(rc != ncclSuccess, "connect with INIT failing: %d", rc);
    flt_expect_warn(from, "INIT", NULL);
    /* Connector INIT, acceptor INIT, RTR, RTS pass; the connector's RTR fails. */
    memcpy(peer, handle, sizeof(peer));
    from = fit_log_lines();
    FIT_CHECK(e.inject(NULL, FAKEIBV_FAULT_MODIFY_QP, 0, 4, 1, 0) == 0, "inject");
    fit_bound_init(&b, "connect with RTR failing", 10.0, 100000000L);
    for (;;) {
        rc = e.plugin.net->connect(e.ctx, 0, peer, &sc, &dh);
        if (arc == ncclSuccess && rcomm == NULL)
            arc = e.plugin.net->accept(lc, &rcomm, &dh);
        if (rc != ncclSuccess)
            break;
        FIT_CHECK(sc == NULL, "connect completed although RTR failed");
        fit_bound_step(&b);
    }
    flt_expect_warn(from, "RTR", "127.0.0.1");
    fit_bound_init(&b, "accept after the connector failed", 10.0, 100000000L);
    while (arc == ncclSuccess && rcomm == NULL) {
        arc = e.plugin.net->accept(lc, &rcomm, &dh);
        fit_bound_step(&b);
    }
    FIT_CHECK(arc != ncclSuccess, "accept returned a comm although the connector failed");
    flt_expect_warn(from, "waiting for the peer's ready byte", NULL);
    FIT_NCCL(e.plugin.net->closeListen(lc));
    flt_close(&e);
    fit_pass("modify-qp: INIT failure -> connect %s; RTR failure -> both sides error",
             fit_result_str(rc));
}

static void flt_rem_access(const char *path)
{
    void *rreq, *sreq;
    double took;
    ncclResult_t rc;
    flt_env_t e;
    int from;

    flt_open(&e, path);
    flt_pair(&e);
    fit_log_allow_warns(1);
    from = fit_log_lines();
    rreq = flt_irecv(&e);
    /* The receive is posted; its buffer's registration goes away before the data comes. */
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, e.rmh));
    e.rmh = NULL;
    FIT_NCCL(flt_isend(&e, &sreq));
    rc = fit_wait(&e.plugin, sreq, 20.0, &took);
    FIT_CHECK(rc == ncclRemoteError, "send into a deregistered buffer: %d (%s)", rc,
              fit_result_str(rc));
    flt_expect_warn(from, "refused the RDMA write", "127.0.0.1");
    printf("  sender: ncclRemoteError after %.2f s\n", took);
    rc = fit_wait(&e.plugin, rreq, 20.0, &took);
    FIT_CHECK(rc == ncclRemoteError, "receiver of the refused write: %d (%s)", rc,
              fit_result_str(rc));
    printf("  receiver: ncclRemoteError after %.2f s\n", took);
    flt_close(&e);
    fit_pass("remote access error -> ncclRemoteError on both sides + WARN explaining it");
}

/* fault on every data QP of one comm (kind QP_DROP or QP_FATAL). */
static void flt_qp_event(const char *path, enum fakeibv_fault_kind kind)
{
    ferry_ib_comm_t *c;
    void *rreq, *sreq = NULL;
    double took;
    ncclResult_t rc;
    flt_env_t e;
    int from, i;

    flt_open(&e, path);
    flt_pair(&e);
    fit_log_allow_warns(1);
    from = fit_log_lines();
    c = flt_comm(kind == FAKEIBV_FAULT_QP_DROP ? e.send_comm : e.recv_comm);
    for (i = 0; i < c->conn.nqps; i++)
        FIT_CHECK(e.inject(NULL, kind, c->conn.qps[i]->qp_num, 0, 0, 0) == 0, "inject qp 0x%x",
                  c->conn.qps[i]->qp_num);
    if (kind == FAKEIBV_FAULT_QP_DROP) {
        rreq = flt_irecv(&e);
        FIT_NCCL(flt_isend(&e, &sreq));
        rc = fit_wait(&e.plugin, sreq, 20.0, &took);
        FIT_CHECK(rc == ncclRemoteError, "send on a dropped QP: %d (%s)", rc, fit_result_str(rc));
        flt_expect_warn(from, "no answer from the peer", "127.0.0.1");
    } else {
        void *data = e.rbuf, *mh = e.rmh;
        size_t size = FLT_BUF;
        int tag = 1;

        /* The async thread may fail the comm before the irecv: then irecv says so itself. */
        rreq = NULL;
        took = 0;
        rc = e.plugin.net->irecv(e.recv_comm, 1, &data, &size, &tag, &mh, NULL, &rreq);
        if (rc == ncclSuccess) {
            FIT_CHECK(rreq != NULL, "irecv returned no request");
            rc = fit_wait(&e.plugin, rreq, 20.0, &took);
        }
        FIT_CHECK(rc == ncclRemoteError, "receive on a QP_FATAL QP: %d (%s)", rc,
                  fit_result_str(rc));
        flt_expect_warn(from, "127.0.0.1", NULL);
    }
    flt_close(&e);
    fit_pass("%s -> ncclRemoteError after %.2f s", kind == FAKEIBV_FAULT_QP_DROP ? "QP drop"
             : "QP_FATAL", took);
}

static void flt_port_err(const char *path)
{
    ferry_ib_comm_t *c;
    void *rreq;
    double took;
    ncclResult_t rc;
    flt_env_t e;
    int from;

    flt_open(&e, path);
    flt_pair(&e);
    fit_log_allow_warns(1);
    from = fit_log_lines();
    c = flt_comm(e.recv_comm);
    rreq = flt_irecv(&e);
    FIT_CHECK(e.inject(c->conn.dev->hca->ctx, FAKEIBV_FAULT_PORT_ERR, (uint32_t)c->conn.dev->port,
                       0, 0, 0) == 0, "inject PORT_ERR");
    rc = fit_wait(&e.plugin, rreq, 20.0, &took);
    FIT_CHECK(rc == ncclRemoteError, "receive on a port that went down: %d (%s)", rc,
              fit_result_str(rc));
    flt_expect_warn(from, c->conn.dev->name, "127.0.0.1");
    e.inject(c->conn.dev->hca->ctx, FAKEIBV_FAULT_PORT_ACTIVE, (uint32_t)c->conn.dev->port, 0, 0, 0);
    fit_pass("PORT_ERR -> ncclRemoteError after %.2f s naming %s", took, c->conn.dev->name);
    flt_close(&e);
}

/*
 * regIsGlobal: a handle registered on the send comm is used for a receive on
 * the receive comm of the same device; the peer's write must land (the
 * handle gains remote write access on that first use).
 */
static void flt_shared_handle(const char *path)
{
    void *buf = aligned_alloc(4096, FLT_BUF), *mh = NULL, *rreq = NULL, *sreq = NULL;
    size_t size = FLT_BUF;
    double took;
    int tag = 1, i;
    flt_env_t e;

    FIT_CHECK(buf != NULL, "malloc");
    memset(buf, 0, FLT_BUF);
    flt_open(&e, path);
    flt_pair(&e);
    FIT_NCCL(e.plugin.net->regMr(e.send_comm, buf, FLT_BUF, NCCL_PTR_HOST, &mh));
    FIT_NCCL(e.plugin.net->irecv(e.recv_comm, 1, &buf, &size, &tag, &mh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv with a send comm's handle returned no request");
    for (i = 0; i < (int)FLT_BUF; i++)
        e.sbuf[i] = (char)(i * 7 + 3);
    FIT_NCCL(flt_isend(&e, &sreq));
    FIT_NCCL(fit_wait(&e.plugin, sreq, 20.0, &took));
    FIT_NCCL(fit_wait(&e.plugin, rreq, 20.0, &took));
    FIT_CHECK(memcmp(buf, e.sbuf, FLT_BUF) == 0, "the receive into the shared handle's buffer "
              "differs from what was sent");
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, mh));
    flt_close(&e);
    free(buf);
    fit_pass("a send comm's handle used for a receive: the data lands, byte for byte");
}

/* Two processes; `victim` (FIT_RECV: the acceptor, FIT_SEND: the connector) dies mid-handshake. */
static void flt_killed(const char *path, fit_role_t victim)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ncclNetDeviceHandle_v11_t *dh = NULL;
    int pfd[2], status, from;
    void *comm = NULL, *lc = NULL;
    fit_bound_t b;
    ncclResult_t rc = ncclSuccess;
    flt_env_t e;
    double t0;
    pid_t pid;

    FIT_CHECK(pipe(pfd) == 0, "pipe");
    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork");
    if (pid == 0) { /* The receiver: listens, hands over the handle. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fit_set_role("receiver");
        flt_open(&e, path);
        lc = fit_listen(&e.plugin, e.ctx, 0, handle);
        FIT_CHECK(write(pfd[1], handle, sizeof(handle)) == (ssize_t)sizeof(handle), "write");
        if (victim == FIT_RECV) {
            /* Let the hello arrive, take it (comm built, metadata sent), then die. */
            usleep(300000);
            FIT_NCCL(e.plugin.net->accept(lc, &comm, &dh));
            raise(SIGKILL);
        }
        fit_log_allow_warns(1);
        from = fit_log_lines();
        usleep(400000); /* The connector dies waiting for our metadata. */
        t0 = fit_now();
        fit_bound_init(&b, "accept from a connector that died", 20.0, 2000000000L);
        while ((rc = e.plugin.net->accept(lc, &comm, &dh)) == ncclSuccess && comm == NULL)
            fit_bound_step(&b);
        FIT_CHECK(rc == ncclRemoteError, "accept from a dead connector: %d (%s)", rc,
                  fit_result_str(rc));
        flt_expect_warn(from, "accept from", "127.0.0.1");
        printf("  receiver: accept -> ncclRemoteError %.2f s after the connector died\n",
               fit_now() - t0);
        fit_child_exit(0);
    }
    FIT_CHECK(read(pfd[0], handle, sizeof(handle)) == (ssize_t)sizeof(handle), "read handle");
    if (victim == FIT_SEND) { /* The connector: hello and metadata out, then die. */
        pid_t c = fork();

        if (c == 0) {
            fit_set_role("sender");
            flt_open(&e, path);
            fit_bound_init(&b, "connect before dying", 5.0, 2000000000L);
            t0 = fit_now();
            while (fit_now() - t0 < 0.2 && comm == NULL) {
                FIT_NCCL(e.plugin.net->connect(e.ctx, 0, handle, &comm, &dh));
                fit_bound_step(&b);
            }
            raise(SIGKILL);
        }
        FIT_CHECK(waitpid(c, &status, 0) == c && WIFSIGNALED(status), "sender child");
    } else {
        fit_set_role("sender");
        flt_open(&e, path);
        fit_log_allow_warns(1);
        from = fit_log_lines();
        t0 = fit_now();
        fit_bound_init(&b, "connect to an acceptor that dies", 20.0, 2000000000L);
        while ((rc = e.plugin.net->connect(e.ctx, 0, handle, &comm, &dh)) == ncclSuccess &&
               comm == NULL)
            fit_bound_step(&b);
        if (rc == ncclSuccess) { /* Its ready byte went out before the death: the data path finds out. */
            void *req = NULL;

            e.send_comm = comm;
            e.sbuf = malloc(16);
            FIT_NCCL(e.plugin.net->regMr(comm, e.sbuf, 16, NCCL_PTR_HOST, &e.smh));
            fit_bound_init(&b, "isend to a dead acceptor", 20.0, 2000000000L);
            while ((rc = e.plugin.net->isend(comm, e.sbuf, 16, 1, e.smh, NULL, &req)) ==
                   ncclSuccess && req == NULL)
                fit_bound_step(&b);
        }
        FIT_CHECK(rc == ncclRemoteError, "sender facing a dead acceptor: %d (%s)", rc,
                  fit_result_str(rc));
        flt_expect_warn(from, "127.0.0.1", NULL);
        printf("  sender: ncclRemoteError %.2f s after connecting started\n", fit_now() - t0);
        flt_close(&e);
    }
    FIT_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    FIT_CHECK(victim == FIT_RECV ? WIFSIGNALED(status) : WIFEXITED(status) && !WEXITSTATUS(status),
              "receiver child ended with status 0x%x", status);
    fit_pass("%s killed mid-handshake -> the survivor got ncclRemoteError + WARN",
             victim == FIT_RECV ? "acceptor" : "connector");
}

static const char *const flt_cases[] = {
    "reg-mr", "create-qp", "modify-qp", "rem-access", "qp-drop", "qp-fatal", "port-err",
    "killed-in-accept", "killed-in-connect", "shared-handle",
};

static void flt_run(const char *path, int i)
{
    fit_set_role(flt_cases[i]);
    alarm(100);
    switch (i) {
    case 0: flt_reg_mr(path); break;
    case 1: flt_create_qp(path); break;
    case 2: flt_modify_qp(path); break;
    case 3: flt_rem_access(path); break;
    case 4: flt_qp_event(path, FAKEIBV_FAULT_QP_DROP); break;
    case 5: flt_qp_event(path, FAKEIBV_FAULT_QP_FATAL); break;
    case 6: flt_port_err(path); break;
    case 7: flt_killed(path, FIT_RECV); break;
    case 8: flt_killed(path, FIT_SEND); break;
    case 9: flt_shared_handle(path); break;
    }
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *only = argc == 3 && strcmp(argv[1], "--case") == 0 ? argv[2] : NULL;
    int i, failed = 0, ran = 0, n = (int)(sizeof(flt_cases) / sizeof(flt_cases[0]));

    FIT_CHECK(argc == 1 || only != NULL, "usage: integ_ib_faults [--plugin PATH] [--case NAME]");
    setenv("NCCL_SOCKET_IFNAME", "=lo", 0);
    for (i = 0; i < n; i++) {
        int status;
        pid_t pid;

        if (only != NULL && strcmp(only, flt_cases[i]) != 0)
            continue;
        printf("case %s\n", flt_cases[i]);
        fflush(NULL);
        pid = fork();
        FIT_CHECK(pid >= 0, "fork");
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            flt_run(path, i);
            fit_child_exit(0);
        }
        FIT_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
        ran++;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "FAIL case %s: status 0x%x\n", flt_cases[i], status);
            failed++;
        }
    }
    FIT_CHECK(ran > 0, "no case named %s", only);
    printf("integ_ib_faults: %d case(s), %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
