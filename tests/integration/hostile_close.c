/*
 * NCCL closing twice, or with the call of the wrong kind.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "hostile.h"

/* A plugin call that must be refused with the code of FERRY_ERR_INVALID and a WARN saying why. */
static void hostile_expect_refused(ncclResult_t rc, const char *call, int from, const char *warn)
{
    char line[4096];

    FIT_CHECK(rc == ncclInternalError, "%s returned %d (%s), expected ncclInternalError (a "
              "pointer that is not a live ferry object)", call, (int)rc, fit_result_str(rc));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, warn, NULL, NULL, line, sizeof(line)) >= 0,
              "%s: no WARN says '%s'", call, warn);
    printf("  %s -> %s: %s\n", call, fit_result_str(rc), line);
}

/*
 * NCCL closing twice (or with the call of the wrong kind). The second close
 * used to find the magic still in the freed comm (the store clearing it
 * before free() is dead to the compiler) and freed it again: glibc aborted.
 * Every close, deregMr and accept now asks the backend's live list first, so
 * the second call is refused without reading freed memory (ASan builds run
 * this too) and the process goes on working.
 */
void hostile_case_double_close(hostile_env_t *e)
{
    const fit_plugin_t *p = &e->plugin;
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    void *send_comm = NULL, *recv_comm = NULL, *mh = NULL, *comm = NULL, *listen2;
    char warn[192], handle2[NCCL_NET_HANDLE_MAXSIZE];
    static char buf[4096];
    /* The WARNs name the backend ("not a live ferry socket ...", "... ferry ib ..."). */
    const char *be = getenv("NCCL_FERRY_BACKEND") != NULL &&
                     strcmp(getenv("NCCL_FERRY_BACKEND"), "ib") == 0 ? "ib" : "socket";
    char expect[64];
    int from;

    hostile_real_connect(e, &send_comm, &recv_comm);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 6100, "before the closes");
    snprintf(expect, sizeof(expect), "not a live ferry %s", be);
    fit_log_expect(expect);

    /* The wrong kind is refused, and the comm is left alone. */
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "closeRecv(%p): not a live ferry %s recv comm (it is a "
             "live send comm: left open)", send_comm, be);
    hostile_expect_refused(p->net->closeRecv(send_comm), "closeRecv(send comm)", from, warn);
    snprintf(warn, sizeof(warn), "closeSend(%p): not a live ferry %s send comm (it is a "
             "live recv comm: left open)", recv_comm, be);
    hostile_expect_refused(p->net->closeSend(recv_comm), "closeSend(recv comm)", from, warn);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 6200,
                      "after closes of the wrong kind");

    FIT_NCCL(p->net->regMr(send_comm, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    FIT_NCCL(p->net->deregMr(send_comm, mh));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "deregMr(comm %p, %p): not a live ferry %s memory handle",
             send_comm, mh, be);
    hostile_expect_refused(p->net->deregMr(send_comm, mh), "second deregMr", from, warn);

    FIT_NCCL(p->net->closeSend(send_comm));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "closeSend(%p): not a live ferry %s send comm (closed "
             "already?)", send_comm, be);
    hostile_expect_refused(p->net->closeSend(send_comm), "second closeSend", from, warn);
    FIT_NCCL(p->net->closeRecv(recv_comm));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "closeRecv(%p): not a live ferry %s recv comm (closed "
             "already?)", recv_comm, be);
    hostile_expect_refused(p->net->closeRecv(recv_comm), "second closeRecv", from, warn);

    FIT_NCCL(p->net->closeListen(e->listen_comm));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "accept(%p): not a live ferry %s listen comm",
             e->listen_comm, be);
    hostile_expect_refused(p->net->accept(e->listen_comm, &comm, &dev_handle),
                           "accept on a closed listen comm", from, warn);
    FIT_CHECK(comm == NULL, "accept on a closed listen comm gave a comm (%p)", comm);
    snprintf(warn, sizeof(warn), "closeListen(%p): not a live ferry %s listen comm",
             e->listen_comm, be);
    hostile_expect_refused(p->net->closeListen(e->listen_comm), "second closeListen", from, warn);
    e->listen_comm = NULL;
    fit_pass("second closeSend/closeRecv/closeListen/deregMr and a stale accept refused, "
             "process alive");

    /* Nothing broke: a new connection works and closes cleanly once. */
    listen2 = fit_listen(p, e->ctx_l, 0, handle2);
    fit_connect_accept(p, e->ctx_c, 0, handle2, listen2, &send_comm, &recv_comm, NULL);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 6300,
                      "on a new connection after the refused closes");
    FIT_NCCL(p->net->closeSend(send_comm));
    FIT_NCCL(p->net->closeRecv(recv_comm));
    FIT_NCCL(p->net->closeListen(listen2));
    fit_log_expect_clear();
}
