/*
 * The ib comm's out-of-band TCP connection (oob mode), in one process:
 *   join-flood  the connector's end writes 3,000 JOIN requests ('J' port
 *               seq) to a comm of one port, which cannot rejoin ports: the
 *               receiver reads them all (its socket drains), logs at most
 *               the per-site burst of WARNs plus a suppressed-count line,
 *               and then still moves a message byte for byte;
 *   oob-loss    after a message moved, only the OOB connection is shut down
 *               (shutdown() on the connector's socket, found by its peer
 *               port: the listener's); a receive then pending fails with
 *               ncclRemoteError after the grace for in-flight completions,
 *               and the WARN says the out-of-band connection closed while
 *               RDMA did not fail, and why the comm fails anyway.
 */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define OOB_MSG   65536
#define OOB_JOINS 3000

typedef struct oob_pair {
    fit_plugin_t plugin;
    void        *ctx, *lc, *send, *recv;
    char         handle[NCCL_NET_HANDLE_MAXSIZE];
    int          port;          /* The listener's. */
    int          send_fd;       /* The connector's OOB socket (peer port == port). */
    int          recv_fd;       /* The acceptor's (local port == port). */
    unsigned char *sbuf, *rbuf;
    void        *smh, *rmh;
} oob_pair_t;

static int oob_port(const struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
           : ss->ss_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)ss)->sin6_port)
                                       : -1;
}

/* The two ends of the pair's OOB connection, among this process' fds. */
static void oob_find_fds(oob_pair_t *op)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    op->send_fd = op->recv_fd = -1;
    FIT_CHECK(d != NULL, "opendir /proc/self/fd: %s", strerror(errno));
    while ((e = readdir(d)) != NULL) {
        struct sockaddr_storage me, peer;
        socklen_t ml = sizeof(me), pl = sizeof(peer);
        int fd = atoi(e->d_name), type = 0;
        socklen_t tl = sizeof(type);

        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
            getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
            getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
            continue;
        if (oob_port(&peer) == op->port)
            op->send_fd = fd;
        else if (oob_port(&me) == op->port)
            op->recv_fd = fd;
    }
    closedir(d);
    FIT_CHECK(op->send_fd >= 0 && op->recv_fd >= 0, "OOB sockets to port %d not found (%d, %d)",
              op->port, op->send_fd, op->recv_fd);
}

static void oob_pair_open(oob_pair_t *op, const char *path)
{
    int dev;

    memset(op, 0, sizeof(*op));
    fit_plugin_open(&op->plugin, path);
    op->ctx = fit_plugin_init(&op->plugin, 0x00B);
    dev = fit_device(&op->plugin);
    op->lc = fit_listen(&op->plugin, op->ctx, dev, op->handle);
    op->port = fit_handle_port(op->handle);
    fit_connect_accept(&op->plugin, op->ctx, dev, op->handle, op->lc, &op->send, &op->recv,
                       NULL);
    oob_find_fds(op);
    op->sbuf = malloc(OOB_MSG);
    op->rbuf = malloc(OOB_MSG);
    FIT_CHECK(op->sbuf != NULL && op->rbuf != NULL, "malloc");
    FIT_NCCL(op->plugin.net->regMr(op->send, op->sbuf, OOB_MSG, NCCL_PTR_HOST, &op->smh));
    FIT_NCCL(op->plugin.net->regMr(op->recv, op->rbuf, OOB_MSG, NCCL_PTR_HOST, &op->rmh));
}

static void *oob_irecv(oob_pair_t *op)
{
    void *data = op->rbuf, *req = NULL;
    size_t size = OOB_MSG;
    int tag = 7;

    memset(op->rbuf, 0xEE, OOB_MSG);
    FIT_NCCL(op->plugin.net->irecv(op->recv, 1, &data, &size, &tag, &op->rmh, NULL, &req));
    FIT_CHECK(req != NULL, "irecv gave no request");
    return req;
}

/* One message, checked byte for byte, on a receive already posted (rreq). */
static void oob_xfer(oob_pair_t *op, void *rreq, uint64_t seed, const char *what)
{
    void *sreq = NULL;
    int sdone = 0, rdone = 0, size;
    fit_bound_t b;

    fit_fill(op->sbuf, OOB_MSG, seed);
    fit_bound_init(&b, what, 10.0, 100000000L);
    while (!sdone || !rdone) {
        if (sreq == NULL)
            FIT_NCCL(op->plugin.net->isend(op->send, op->sbuf, OOB_MSG, 7, op->smh, NULL, &sreq));
        if (sreq != NULL && !sdone)
            FIT_NCCL(op->plugin.net->test(sreq, &sdone, &size));
        if (!rdone)
            FIT_NCCL(op->plugin.net->test(rreq, &rdone, &size));
        if (!sdone || !rdone)
            fit_bound_step(&b);
    }
    fit_check_pattern(op->rbuf, OOB_MSG, seed, what);
}

static void oob_pair_close(oob_pair_t *op, int failed)
{
    FIT_NCCL(op->plugin.net->deregMr(op->send, op->smh));
    FIT_NCCL(op->plugin.net->deregMr(op->recv, op->rmh));
    FIT_NCCL(op->plugin.net->closeSend(op->send));
    FIT_NCCL(op->plugin.net->closeRecv(op->recv));
    FIT_NCCL(op->plugin.net->closeListen(op->lc));
    FIT_NCCL(op->plugin.net->finalize(op->ctx));
    if (!failed)
        fit_log_check_clean("after finalize");
    fit_plugin_close(&op->plugin);
    free(op->sbuf);
    free(op->rbuf);
}

static int oob_count_warns(int from, const char *needle)
{
    int n = 0, i = from;

    while ((i = fit_log_find(i, NCCL_LOG_WARN, needle, NULL, NULL, NULL, 0)) >= 0) {
        n++;
        i++;
    }
    return n;
}

static void oob_case_join_flood(const char *path)
{
    static unsigned char joins[OOB_JOINS * 3];
    oob_pair_t op;
    fit_bound_t b;
    void *rreq;
    int i, queued = 1, lines0, warns, done = 0, size;
    size_t off = 0;
    double t0;

    oob_pair_open(&op, path);
    for (i = 0; i < OOB_JOINS; i++) {
        joins[3 * i] = 'J';             /* FERRY_IB_OOB_JOIN */
        joins[3 * i + 1] = 0;           /* Port 0: this comm has one and does not rejoin. */
        joins[3 * i + 2] = (unsigned char)i;
    }
    fit_log_expect("the peer names port");
    fit_log_expect("more warnings like the next were suppressed");
    lines0 = fit_log_lines();
    rreq = oob_irecv(&op); /* The receiver reads its OOB socket while a request waits. */
    t0 = fit_now();
    fit_bound_init(&b, "the JOIN flood read by the receiver", 30.0, 100000000L);
    while (off < sizeof(joins) || queued > 0) {
        if (off < sizeof(joins)) {
            ssize_t n = send(op.send_fd, joins + off, sizeof(joins) - off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);

            FIT_CHECK(n > 0 || errno == EAGAIN, "flood send: %s", strerror(errno));
            off += n > 0 ? (size_t)n : 0;
        }
        FIT_NCCL(op.plugin.net->test(rreq, &done, &size));
        FIT_CHECK(!done, "the receive completed with no send");
        FIT_CHECK(ioctl(op.recv_fd, FIONREAD, &queued) == 0, "FIONREAD: %s", strerror(errno));
        fit_bound_step(&b);
    }
    warns = oob_count_warns(lines0, "NET/ferry");
    fit_pass("%d JOINs on a one-port comm's OOB socket read in %.2f s: %d WARN lines (limit: "
             "%d + 1 per 10 s)", OOB_JOINS, fit_now() - t0, warns, 10);
    /* A burst and a suppressed-count line per 10 s interval begun (a loaded box is slow). */
    FIT_CHECK(warns >= 1 && warns <= 11 * (1 + (int)((fit_now() - t0) / 10.0)),
              "%d WARN lines for %d JOINs", warns, OOB_JOINS);
    FIT_CHECK(fit_log_find(lines0, NCCL_LOG_WARN, "names port 0", "does not rejoin ports", NULL,
                           NULL, 0) >= 0, "no WARN names the JOIN and the port");
    printf("HOSTILE ib join flood: %d JOINs, %d WARN lines, comm still moves data\n",
           OOB_JOINS, warns);
    oob_xfer(&op, rreq, 0x10F1, "a message after the JOIN flood");
    fit_pass("the comm moved %d B byte for byte after the flood", OOB_MSG);
    fit_log_expect_clear();
    oob_pair_close(&op, 0);
}

static void oob_case_loss(const char *path)
{
    oob_pair_t op;
    fit_bound_t b;
    char line[2048];
    void *rreq;
    int done = 0, size, lines0;
    ncclResult_t rc = ncclSuccess;
    double t0;

    oob_pair_open(&op, path);
    oob_xfer(&op, oob_irecv(&op), 0x1055, "a message before the OOB loss");
    fit_pass("%d B moved byte for byte before the OOB connection is cut", OOB_MSG);
    fit_log_expect("out-of-band TCP connection to peer");
    lines0 = fit_log_lines();
    rreq = oob_irecv(&op);
    FIT_CHECK(shutdown(op.send_fd, SHUT_RDWR) == 0, "shutdown: %s", strerror(errno));
    t0 = fit_now();
    fit_bound_init(&b, "the receive after the OOB loss", 10.0, 100000000L);
    while ((rc = op.plugin.net->test(rreq, &done, &size)) == ncclSuccess && !done)
        fit_bound_step(&b);
    FIT_CHECK(rc == ncclRemoteError, "test after the OOB loss: %s (done %d), expected "
              "ncclRemoteError", fit_result_str(rc), done);
    FIT_CHECK(fit_log_find(lines0, NCCL_LOG_WARN, "out-of-band TCP connection to peer",
                           "did not fail", "how ferry learns that a peer died", line,
                           sizeof(line)) >= 0, "no WARN says the OOB connection alone was lost");
    FIT_CHECK(strstr(line, "recv comm") != NULL && strstr(line, "127.0.0.1:") != NULL,
              "the WARN names no comm or peer address: %s", line);
    fit_pass("OOB connection shut down, RDMA intact: the pending receive fails with "
             "ncclRemoteError in %.2f s; WARN: %s", fit_now() - t0, line);
    printf("HOSTILE ib oob loss: receive failed in %.2f s, comm failed (chosen)\n",
           fit_now() - t0);
    fit_log_expect("recv comm");
    fit_log_expect("send comm");
    oob_pair_close(&op, 1);
    fit_log_expect_clear();
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);

    FIT_CHECK(argc == 3 && strcmp(argv[1], "--case") == 0,
              "usage: integ_ib_oob [--plugin PATH] --case join-flood|oob-loss");
    if (strcmp(argv[2], "join-flood") == 0)
        oob_case_join_flood(path);
    else if (strcmp(argv[2], "oob-loss") == 0)
        oob_case_loss(path);
    else
        FIT_FAIL("no case %s", argv[2]);
    return 0;
}
