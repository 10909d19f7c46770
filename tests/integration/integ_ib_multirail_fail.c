/*
 * integ_ib_multirail's cases where the merged device fails whole or is
 * refused: alone-down, alone-down-close and refuse, refuse-all (what each
 * checks: integ_ib_multirail.c's header).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "integ_ib_multirail.h"

#define MR_ALONE_SIZE   ((size_t)1 << 20)
#define MR_ALONE_WITHIN 5.0 /* Seconds the healthy side may take to fail. */

/*
 * alone-down, the sender (side A): every port of its device goes down, its
 * own isend fails; it tells the receiver over ctl when the ports went down,
 * then keeps the comm open until the receiver is done (or closes it at
 * once: close_at_once).
 */
static void mr_alone_sender(const char *path, int ctl, int close_at_once)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], *sbuf = aligned_alloc(4096, MR_ALONE_SIZE), go = 0;
    void *smh = NULL, *sreq = NULL;
    const ferry_ib_conn_t *conn;
    ncclResult_t rc;
    double took, down_at;
    fit_bound_t b;
    mr_env_t e;
    int m;

    FIT_CHECK(sbuf != NULL, "malloc");
    mr_open(&e, path);
    FIT_CHECK(read(ctl, handle, sizeof(handle)) == (ssize_t)sizeof(handle), "read handle");
    e.send_comm = fit_connect_loop(&e.plugin, e.ctx, e.dev, handle);
    conn = mr_conn(e.send_comm);
    FIT_NCCL(e.plugin.net->regMr(e.send_comm, sbuf, MR_ALONE_SIZE, NCCL_PTR_HOST, &smh));
    FIT_CHECK(read(ctl, &go, 1) == 1 && go == 'p', "the receiver's irecv is not posted");
    fit_log_allow_warns(1); /* This side's own failure: the all-down case checks its words. */
    down_at = fit_now();
    for (m = 0; m < conn->nmem; m++)
        mr_port(&e, m, FAKEIBV_FAULT_PORT_ERR);
    fit_bound_init(&b, "isend with every port down", 10.0, 100000000L);
    while ((rc = e.plugin.net->isend(e.send_comm, sbuf, MR_ALONE_SIZE, 4, smh, NULL, &sreq)) ==
               ncclSuccess && sreq == NULL)
        fit_bound_step(&b);
    if (rc == ncclSuccess)
        rc = fit_wait(&e.plugin, sreq, 20.0, &took);
    FIT_CHECK(rc == ncclRemoteError, "sender, every port down: %d (%s)", rc, fit_result_str(rc));
    /* When its ports went down: the receiver measures from there. */
    FIT_CHECK(write(ctl, &down_at, sizeof(down_at)) == (ssize_t)sizeof(down_at), "write");
    if (close_at_once) {
        FIT_NCCL(e.plugin.net->deregMr(e.send_comm, smh));
        FIT_NCCL(e.plugin.net->closeSend(e.send_comm));
    }
    /* The receiver's verdict; meanwhile this comm stays open (unless closed above). */
    FIT_CHECK(read(ctl, &go, 1) == 1 && go == 'd', "the receiver did not finish");
    if (!close_at_once) {
        FIT_NCCL(e.plugin.net->deregMr(e.send_comm, smh));
        FIT_NCCL(e.plugin.net->closeSend(e.send_comm));
    }
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_plugin_close(&e.plugin);
    free(sbuf);
}

/* alone-down, the receiver (side B, every port fine): its irecv must fail, and soon. */
static void mr_alone_receiver(const char *path, int ctl, int close_at_once)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], *rbuf = aligned_alloc(4096, MR_ALONE_SIZE), line[4096];
    void *lc, *rmh = NULL, *rreq = NULL, *data;
    size_t size = MR_ALONE_SIZE;
    double down_at = 0, got;
    ncclResult_t rc = ncclSuccess;
    int tag = 4, done = 0, rsize = 0;
    fit_bound_t b;
    mr_env_t e;

    FIT_CHECK(rbuf != NULL, "malloc");
    fit_graveyard_add(rbuf);
    mr_open(&e, path);
    lc = fit_listen(&e.plugin, e.ctx, e.dev, handle);
    FIT_CHECK(write(ctl, handle, sizeof(handle)) == (ssize_t)sizeof(handle), "write handle");
    e.recv_comm = fit_accept_loop(&e.plugin, lc);
    FIT_NCCL(e.plugin.net->closeListen(lc));
    FIT_NCCL(e.plugin.net->regMr(e.recv_comm, rbuf, MR_ALONE_SIZE, NCCL_PTR_HOST, &rmh));
    data = rbuf;
    FIT_NCCL(e.plugin.net->irecv(e.recv_comm, 1, &data, &size, &tag, &rmh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv returned no request");
    fit_log_expect("reports it has no usable port left");
    if (close_at_once)
        fit_log_expect("closed"); /* The close may be seen first: its own words. */
    /*
     * Progress writes the clear-to-send: let it land while every port is up,
     * so nothing of this side is in flight when the peer's ports go down
     * (else its timeout would find the peer gone, the easy case).
     */
    fit_bound_init(&b, "the clear-to-send on its way", 0.3, 2000000000L);
    while (rc == ncclSuccess && !done && fit_bound_try_step(&b))
        rc = e.plugin.net->test(rreq, &done, &rsize);
    FIT_CHECK(rc == ncclSuccess && !done, "the irecv ended before the sender sent: %d", rc);
    FIT_CHECK(write(ctl, "p", 1) == 1, "write");
    FIT_CHECK(read(ctl, &down_at, sizeof(down_at)) == (ssize_t)sizeof(down_at),
              "the sender never failed (or said when its ports went down)");
    fit_bound_init(&b, "the receive of a peer with no port left", 15.0, 2000000000L);
    while (rc == ncclSuccess && !done && fit_bound_try_step(&b))
        rc = e.plugin.net->test(rreq, &done, &rsize);
    got = fit_now();
    FIT_CHECK(rc == ncclRemoteError && !done, "receiver with every port fine, the sender's all "
              "down%s: test() gave %d (%s), done %d, %.2f s after the sender's ports went down",
              close_at_once ? " and its comm closed" : " and its comm open", rc,
              fit_result_str(rc), done, got - down_at);
    FIT_CHECK(got - down_at < MR_ALONE_WITHIN, "the receiver took %.2f s (more than %.0f s)",
              got - down_at, MR_ALONE_WITHIN);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "peer 127.0.0.1", "no usable port left",
                           "ncclRemoteError", line, sizeof(line)) >= 0 ||
              (close_at_once && fit_log_find(0, NCCL_LOG_WARN, "peer 127.0.0.1", "closed",
                                             "ncclRemoteError", line, sizeof(line)) >= 0),
              "no WARN names the peer and says it has no usable port left");
    printf("  %s\n", line);
    printf("MULTIRAIL alone-down%s: the healthy receiver got ncclRemoteError %.3f s after the "
           "sender's ports went down\n", close_at_once ? "-close" : "", got - down_at);
    FIT_CHECK(write(ctl, "d", 1) == 1, "write");
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rmh));
    FIT_NCCL(e.plugin.net->closeRecv(e.recv_comm));
    fit_log_expect_clear();
    fit_log_check_clean("alone-down receiver");
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_plugin_close(&e.plugin);
    fit_pass("receiver: ncclRemoteError %.2f s after the sender lost every port (its comm %s)",
             got - down_at, close_at_once ? "closed" : "kept open");
}

void mr_alone(const char *path, int close_at_once)
{
    int sv[2], status = 0;
    pid_t pid;

    FIT_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(sv[0]);
        fit_set_role("alone-recv");
        alarm(60);
        mr_alone_receiver(path, sv[1], close_at_once);
        fit_child_exit(0);
    }
    close(sv[1]);
    fit_set_role("alone-send");
    mr_alone_sender(path, sv[0], close_at_once);
    close(sv[0]);
    FIT_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the receiver ended with status 0x%x", status);
    fit_pass("two processes: the healthy side failed soon after its peer lost every port");
}

/* makeVDevice(devs) must fail with rc and a WARN containing why. */
static void mr_refused(mr_env_t *e, const int *devs, int n, ncclResult_t rc, const char *why)
{
    ncclNetVDeviceProps_v11_t vp;
    int d = -1, before = 0, after = 0, from = fit_log_lines(), i;
    ncclResult_t got;

    memset(&vp, 0, sizeof(vp));
    vp.ndevs = n;
    for (i = 0; i < n && i < NCCL_NET_MAX_DEVS_PER_NIC; i++)
        vp.devs[i] = devs[i];
    FIT_NCCL(e->plugin.net->devices(&before));
    fit_log_expect(why);
    got = e->plugin.net->makeVDevice(&d, &vp);
    fit_log_expect_clear();
    FIT_NCCL(e->plugin.net->devices(&after));
    FIT_CHECK(got == rc, "makeVDevice (%s): returned %d (%s), expected %s", why, (int)got,
              fit_result_str(got), fit_result_str(rc));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, why, NULL, NULL, NULL, 0) >= 0,
              "no WARN says '%s'", why);
    FIT_CHECK(after == before, "a refused merge changed the device count %d -> %d", before,
              after);
}

void mr_refuse(const char *path, int all)
{
    const int bad[] = {0, 7}, twice[] = {1, 1}, five[] = {0, 1, 0, 1, 0}, pair[] = {0, 1};
    int merged[2];
    mr_env_t e;

    memset(&e, 0, sizeof(e));
    fit_plugin_open(&e.plugin, path);
    e.ctx = fit_plugin_init(&e.plugin, 0x4d53);
    if (all) {
        mr_refused(&e, pair, 2, ncclInvalidUsage, "NCCL_IB_MERGE_NICS=0 forbids merging ports");
        fit_pass("NCCL_IB_MERGE_NICS=0: merging refused with ncclInvalidUsage and a WARN");
    } else {
        mr_refused(&e, bad, 2, ncclInvalidUsage, "device 7 is not a port");
        mr_refused(&e, twice, 2, ncclInvalidUsage, "is listed twice");
        mr_refused(&e, five, 5, ncclInternalError, "5 device(s) to merge; ferry merges 1..4");
        mr_refused(&e, pair, 0, ncclInternalError, "0 device(s) to merge");
        merged[0] = fit_device(&e.plugin); /* FIT_MERGE's device... */
        merged[1] = 0;
        mr_refused(&e, merged, 2, ncclInvalidUsage, "a merged device cannot be merged again");
        fit_pass("makeVDevice refusals: no port, twice, 5 devices, none, a merged device");
    }
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_plugin_close(&e.plugin);
}
