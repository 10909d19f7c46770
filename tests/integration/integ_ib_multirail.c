/*
 * integ_ib_multirail: a merged device (makeVDevice of every port fakeibv
 * shows; FAKEIBV_NDEV x FAKEIBV_NPORTS from the environment) in one process.
 *
 *   spread     64 x 4 MiB, byte for byte; every port carried a fair share of
 *              the bytes and of the parts (the comm's per-port counters, and
 *              the emulated HCA's own port counters): whole messages taking
 *              turns by default, every message cut with NCCL_FERRY_IB_STRIPE_MIN=0
 *   failover   a stream of 64 MiB messages; after message 4 one port goes
 *              down (PORT_ERR): every message arrives once and intact, each
 *              comm WARNs once naming the port, the peer and the requests
 *              moved, and the rest of the stream runs on the other ports;
 *              then the port comes back (PORT_ACTIVE) and carries its half
 *              of the next messages again
 *   all-down   every port goes down with a message in flight: both sides get
 *              ncclRemoteError within seconds, the WARN says no port is left
 *   acked      a message cut over both ports is received and acknowledged, its
 *              completions unpolled, when a port goes down: nothing is moved or
 *              written a second time into the receive the application has back
 *   fence      a part moved by a failover is in flight: isend takes no new
 *              clear-to-send until it is acknowledged; both messages intact
 *   fork       (only with --case) two processes: the sender's port goes down after message 4 of 64
 *              x 64 MiB (the receiver's own port stays up, its QPs there just
 *              stop hearing), comes back after message 12; every message
 *              arrives intact, the sender's WARN names the port once, and the
 *              port carries data again before the stream ends
 *   alone-down (only with --case) two processes: every port of the sender's
 *              merged device goes down while the receiver waits in an irecv
 *              with its own ports fine; the sender's comm fails and stays
 *              open: the receiver's test() returns ncclRemoteError within
 *              5 s of it (printed), the WARN naming the peer and saying it
 *              has no usable port left
 *   alone-down-close  the same, the sender closing its comm at once
 *   refuse     makeVDevice of what cannot be merged: a device that is no port,
 *              one listed twice, a merged device, more than 4, none; each with
 *              its code and WARN, and the device count unchanged
 *   refuse-all NCCL_IB_MERGE_NICS=0 (set by the caller): every merge refused
 *
 *   integ_ib_multirail [--plugin PATH] [--case NAME]
 *
 * White-box where fakeibv needs an object or the counters are read: the
 * plugin's comm layout (ib/ib_comm.h, same build), as integ_ib_faults.
 */
#include <dlfcn.h>
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

void mr_open(mr_env_t *e, const char *path)
{
    void *h;

    memset(e, 0, sizeof(*e));
    fit_plugin_open(&e->plugin, path);
    e->ctx = fit_plugin_init(&e->plugin, 0x4d52);
    e->dev = fit_device(&e->plugin);
    FIT_CHECK(e->dev > 0, "FIT_MERGE must name the ports to merge (got device %d)", e->dev);
    h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    FIT_CHECK(h != NULL, "libibverbs.so.1 is not loaded by the plugin: %s", dlerror());
    e->inject = (mr_inject_fn)dlvsym(h, "fakeibv_inject", "FAKEIBV_1.0");
    FIT_CHECK(e->inject != NULL, "the loaded libibverbs.so.1 is not fakeibv (no fakeibv_inject)");
    e->counters = (mr_counters_fn)dlvsym(h, "fakeibv_port_counters", "FAKEIBV_1.0");
    FIT_CHECK(e->counters != NULL, "the loaded fakeibv has no fakeibv_port_counters");
    e->qp_stats = (mr_qp_stats_fn)dlvsym(h, "fakeibv_qp_stats", "FAKEIBV_1.0");
    FIT_CHECK(e->qp_stats != NULL, "the loaded fakeibv has no fakeibv_qp_stats");
}

/* Payload bytes member m's port has sent, as the (emulated) HCA counts them. */
static uint64_t mr_port_xmit(mr_env_t *e, int m)
{
    const ferry_ib_member_t *mem = &((const ferry_ib_comm_t *)e->send_comm)->conn.mem[m];
    struct fakeibv_port_counters pc;

    FIT_CHECK(e->counters(mem->dev->hca->ctx, (uint8_t)mem->dev->port, &pc) == 0,
              "fakeibv_port_counters(%s)", mem->dev->name);
    return pc.xmit_bytes;
}

static void mr_pair(mr_env_t *e)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = fit_listen(&e->plugin, e->ctx, e->dev, handle);

    fit_connect_accept(&e->plugin, e->ctx, e->dev, handle, lc, &e->send_comm, &e->recv_comm,
                       NULL);
    FIT_NCCL(e->plugin.net->closeListen(lc));
}

static void mr_close(mr_env_t *e)
{
    FIT_NCCL(e->plugin.net->closeSend(e->send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(e->recv_comm));
    FIT_NCCL(e->plugin.net->finalize(e->ctx));
    fit_plugin_close(&e->plugin);
}

const ferry_ib_conn_t *mr_conn(void *comm)
{
    return &((const ferry_ib_comm_t *)comm)->conn; /* Same build: the plugin's layout. */
}

void mr_port(mr_env_t *e, int m, enum fakeibv_fault_kind kind)
{
    const ferry_ib_member_t *mem = &mr_conn(e->send_comm)->mem[m];

    FIT_CHECK(e->inject(mem->dev->hca->ctx, kind, (uint32_t)mem->dev->port, 0, 0, 0) == 0,
              "fakeibv_inject(%s, port %d)", mem->dev->name, mem->dev->port);
}

static void mr_run(mr_env_t *e, const size_t *sizes, int n, int depth, const char *what,
                   void (*on_done)(fit_role_t, int, void *))
{
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;

    o.sizes = sizes;
    o.nmsgs = n;
    o.depth = depth;
    o.seed = 0x5eed;
    o.seconds = 120.0;
    o.tag = 3;
    o.on_done = on_done;
    o.on_done_arg = e;
    fit_xfer_inproc(&e->plugin, e->send_comm, e->recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, what);
    FIT_CHECK(r.done[FIT_SEND] == n && r.done[FIT_RECV] == n, "%s: %d/%d messages done", what,
              r.done[FIT_SEND], r.done[FIT_RECV]);
    printf("  %s: %d messages in %.2f s\n", what, n, r.seconds);
}

static void mr_spread(const char *path)
{
    static size_t sizes[64];
    const ferry_ib_conn_t *sconn, *rconn;
    uint64_t total = 0, hw0[FERRY_IB_MAX_MEMBERS];
    int i, m, parts;
    mr_env_t e;

    for (i = 0; i < 64; i++)
        sizes[i] = ((size_t)4 << 20) - (size_t)(i % 3) * 4096 - (size_t)i; /* Unaligned too. */
    for (i = 0; i < 64; i++)
        total += sizes[i];
    mr_open(&e, path);
    mr_pair(&e);
    sconn = mr_conn(e.send_comm);
    rconn = mr_conn(e.recv_comm);
    parts = sconn->stripe_min <= ((size_t)4 << 20) - 8192 ? 64 : 64 / sconn->nmem;
    FIT_CHECK(sconn->nmem >= 2 && sconn->multi && rconn->multi,
              "the comms run on %d port(s), multi %d/%d", sconn->nmem, sconn->multi,
              rconn->multi);
    for (m = 0; m < sconn->nmem; m++)
        hw0[m] = mr_port_xmit(&e, m);
    mr_run(&e, sizes, 64, 8, "64 x 4 MiB over the merged device", NULL);
    for (m = 0; m < sconn->nmem; m++) {
        uint64_t hw = mr_port_xmit(&e, m) - hw0[m];

        printf("  port %s: %llu bytes sent (the HCA counted %llu), %llu/%llu chains "
               "(send/recv)\n", sconn->mem[m].dev->name, (unsigned long long)sconn->mem[m].bytes,
               (unsigned long long)hw, (unsigned long long)sconn->mem[m].chains,
               (unsigned long long)rconn->mem[m].chains);
        /* The HCA's own count: the data, plus the little control traffic on the port. */
        FIT_CHECK(hw >= sconn->mem[m].bytes && hw * 10 >= total * 9 / (uint64_t)sconn->nmem,
                  "port %s sent %llu bytes by the HCA's counters, ferry says %llu of %llu",
                  sconn->mem[m].dev->name, (unsigned long long)hw,
                  (unsigned long long)sconn->mem[m].bytes, (unsigned long long)total);
        /* Each message is striped over every port: a fair share each, within 10 %. */
        FIT_CHECK(sconn->mem[m].bytes * 10 >= total * 9 / (uint64_t)sconn->nmem,
                  "port %s carried %llu of %llu bytes", sconn->mem[m].dev->name,
                  (unsigned long long)sconn->mem[m].bytes, (unsigned long long)total);
        /* 4 MiB goes whole on one port, ports taking turns; cut on every port with
         * NCCL_FERRY_IB_STRIPE_MIN=0. Either way a fair share of the parts lands on each. */
        FIT_CHECK(rconn->mem[m].chains * 10 >= (uint64_t)parts * 9,
                  "port %s: the receiver saw %llu parts land, %d expected",
                  rconn->mem[m].dev->name, (unsigned long long)rconn->mem[m].chains, parts);
    }
    fit_log_check_clean("spread");
    fit_pass("64 x 4 MiB byte for byte, every one of %d ports carried its share", sconn->nmem);
    mr_close(&e);
}

static void mr_down_after(fit_role_t role, int i, void *arg)
{
    mr_env_t *e = arg;

    if (role == FIT_RECV && i == e->down_after && !e->downed) {
        e->downed = 1;
        mr_port(e, 1, FAKEIBV_FAULT_PORT_ERR);
        printf("  port %s down after message %d\n", mr_conn(e->send_comm)->mem[1].dev->name, i);
    }
}

static void mr_failover(const char *path)
{
    static size_t sizes[16];
    const ferry_ib_conn_t *sconn, *rconn;
    char needle[160], line[4096];
    uint64_t bytes_at_end, hw_dead, hw_live;
    int i, from, at, n;
    mr_env_t e;

    for (i = 0; i < 16; i++)
        sizes[i] = (size_t)64 << 20;
    mr_open(&e, path);
    mr_pair(&e);
    sconn = mr_conn(e.send_comm);
    rconn = mr_conn(e.recv_comm);
    e.down_after = 4;
    snprintf(needle, sizeof(needle), "port %s failed for this comm", sconn->mem[1].dev->name);
    fit_log_expect(needle);
    fit_log_expect("async event port error"); /* The device thread's own WARN. */
    from = fit_log_lines();
    mr_run(&e, sizes, 16, 4, "16 x 64 MiB, one port down after message 4", mr_down_after);
    FIT_CHECK(e.downed, "the port was never taken down");
    FIT_CHECK(sconn->mem[1].down && rconn->mem[1].down && !sconn->mem[0].down,
              "after the port went down: send comm port states %d/%d, recv comm %d/%d",
              sconn->mem[0].down, sconn->mem[1].down, rconn->mem[0].down, rconn->mem[1].down);
    /* One WARN per comm, naming the port, the peer and the requests moved. */
    for (n = 0, at = from; (at = fit_log_find(at, NCCL_LOG_WARN, needle, NULL, NULL, line,
                                               sizeof(line))) >= 0; at++, n++) {
        FIT_CHECK(strstr(line, "127.0.0.1") != NULL && strstr(line, "moved to") != NULL &&
                  strstr(line, sconn->mem[0].dev->name) != NULL,
                  "the WARN names the peer, the requests moved and the port left: %s", line);
        printf("  WARN: %.400s\n", line);
    }
    FIT_CHECK(n == 2, "%d WARNs name the failed port (one per comm expected)", n);
    /* The rest of the stream ran on the port left: 8 more messages, none through the dead one. */
    bytes_at_end = sconn->mem[1].bytes;
    hw_dead = mr_port_xmit(&e, 1);
    hw_live = mr_port_xmit(&e, 0);
    mr_run(&e, sizes, 8, 4, "8 x 64 MiB more on the port left", NULL);
    FIT_CHECK(sconn->mem[1].bytes == bytes_at_end && mr_port_xmit(&e, 1) == hw_dead,
              "the failed port carried %llu more bytes (the HCA counted %llu)",
              (unsigned long long)(sconn->mem[1].bytes - bytes_at_end),
              (unsigned long long)(mr_port_xmit(&e, 1) - hw_dead));
    FIT_CHECK(mr_port_xmit(&e, 0) - hw_live >= (uint64_t)8 * (64 << 20),
              "the port left sent %llu bytes of 8 x 64 MiB",
              (unsigned long long)(mr_port_xmit(&e, 0) - hw_live));
    fit_pass("a port down mid-stream: 24 x 64 MiB arrived once and intact, one WARN per comm, "
             "%llu chains moved", (unsigned long long)sconn->mem[1].moved);

    /* The port comes back: the comms take it into use again for new messages. */
    mr_port(&e, 1, FAKEIBV_FAULT_PORT_ACTIVE);
    from = fit_log_lines();
    for (i = 0; i < 40 && (sconn->mem[1].down || rconn->mem[1].down); i++)
        mr_run(&e, sizes + 8, 2, 2, "2 x 64 MiB while the port comes back", NULL);
    FIT_CHECK(!sconn->mem[1].down && !rconn->mem[1].down,
              "the port did not come back into use (send comm %d, recv comm %d) after %d "
              "rounds", sconn->mem[1].down, rconn->mem[1].down, i);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, "port", sconn->mem[1].dev->name,
                           "is back in use", line, sizeof(line)) >= 0,
              "no INFO says the port is back");
    printf("  INFO: %.300s\n", line);
    bytes_at_end = sconn->mem[1].bytes;
    mr_run(&e, sizes, 8, 4, "8 x 64 MiB with the port back", NULL);
    FIT_CHECK(sconn->mem[1].bytes - bytes_at_end >= (uint64_t)8 * (32 << 20) * 9 / 10,
              "the port back in use carried %llu bytes of 8 x 64 MiB",
              (unsigned long long)(sconn->mem[1].bytes - bytes_at_end));
    fit_log_expect_clear();
    fit_log_check_clean("failover");
    fit_pass("the port back up: in use again on both comms, carrying half of every message");
    mr_close(&e);
}

static void mr_all_down(const char *path)
{
    size_t size = (size_t)64 << 20;
    char *sbuf = aligned_alloc(4096, size), *rbuf = aligned_alloc(4096, size);
    void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL, *data;
    const ferry_ib_conn_t *sconn;
    ncclResult_t rc;
    double took;
    int tag = 3, m, from;
    fit_bound_t b;
    mr_env_t e;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc");
    fit_graveyard_add(rbuf); /* The plugin may still write into it when the comms fail. */
    memset(sbuf, 7, size);
    mr_open(&e, path);
    mr_pair(&e);
    sconn = mr_conn(e.send_comm);
    FIT_NCCL(e.plugin.net->regMr(e.send_comm, sbuf, size, NCCL_PTR_HOST, &smh));
    FIT_NCCL(e.plugin.net->regMr(e.recv_comm, rbuf, size, NCCL_PTR_HOST, &rmh));
    fit_log_expect("failed for this comm");
    fit_log_expect("still up");
    fit_log_expect("async event port error");
    fit_log_expect("no usable port left"); /* Each side tells the other. */
    from = fit_log_lines();
    data = rbuf;
    FIT_NCCL(e.plugin.net->irecv(e.recv_comm, 1, &data, &size, &tag, &rmh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv returned no request");
    for (m = 0; m < sconn->nmem; m++)
        mr_port(&e, m, FAKEIBV_FAULT_PORT_ERR);
    fit_bound_init(&b, "isend", 10.0, 100000000L);
    while ((rc = e.plugin.net->isend(e.send_comm, sbuf, size, tag, smh, NULL, &sreq)) ==
               ncclSuccess && sreq == NULL)
        fit_bound_step(&b);
    if (rc == ncclSuccess)
        rc = fit_wait(&e.plugin, sreq, 20.0, &took);
    FIT_CHECK(rc == ncclRemoteError, "send with every port down: %d (%s)", rc,
              fit_result_str(rc));
    rc = fit_wait(&e.plugin, rreq, 20.0, &took);
    FIT_CHECK(rc == ncclRemoteError, "receive with every port down: %d (%s)", rc,
              fit_result_str(rc));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "it was the last of", "ports", "ncclRemoteError",
                           NULL, 0) >= 0, "no WARN says the last port is gone");
    for (m = 0; m < sconn->nmem; m++)
        mr_port(&e, m, FAKEIBV_FAULT_PORT_ACTIVE);
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, smh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rmh));
    fit_log_expect_clear();
    fit_pass("every port down: both sides ncclRemoteError (receive after %.2f s)", took);
    mr_close(&e);
    free(sbuf);
}

/* RDMA writes the sender's QPs on member m have put on the wire, as the emulated HCA counts. */
static uint64_t mr_member_writes(const mr_env_t *e, const ferry_ib_conn_t *conn, int m)
{
    struct fakeibv_qp_stats st;
    uint64_t n = 0;
    int q;

    for (q = 0; q < conn->nqps; q++) {
        if (ferry_ib_qp_mem(conn, q) != m)
            continue;
        FIT_CHECK(e->qp_stats(conn->qps[q]->qp_num, &st) == 0, "fakeibv_qp_stats(0x%x)",
                  conn->qps[q]->qp_num);
        n += st.writes + st.writes_imm;
    }
    return n;
}

/*
 * acked: a message cut over both ports has landed whole and the receiver has
 * its buffer back; the sender's completions wait in its CQ, unpolled, when
 * port 1 goes down. The failover takes them first and moves nothing: no
 * write goes out again, the buffer the receiver has back (poisoned after
 * its check) stays untouched, the WARN says 0 requests moved. Before, the
 * acknowledged part went again on port 0 and landed a second time.
 */
static void mr_acked(const char *path)
{
    size_t size = (size_t)64 << 20, bad = 0;
    char *sbuf = aligned_alloc(4096, size), *rbuf = aligned_alloc(4096, size);
    void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL, *data;
    const ferry_ib_conn_t *sconn;
    char needle[160];
    uint64_t writes0;
    ncclResult_t rc;
    double took;
    int tag = 5, from;
    fit_bound_t b;
    mr_env_t e;

    FIT_CHECK(sbuf != NULL && rbuf != NULL, "malloc");
    fit_fill(sbuf, size, 0xacced);
    memset(rbuf, FIT_POISON, size);
    mr_open(&e, path);
    mr_pair(&e);
    sconn = mr_conn(e.send_comm);
    FIT_CHECK(sconn->nmem == 2 && size >= sconn->stripe_min, "%d ports, stripe_min %zu",
              sconn->nmem, sconn->stripe_min);
    FIT_NCCL(e.plugin.net->regMr(e.send_comm, sbuf, size, NCCL_PTR_HOST, &smh));
    FIT_NCCL(e.plugin.net->regMr(e.recv_comm, rbuf, size, NCCL_PTR_HOST, &rmh));
    data = rbuf;
    FIT_NCCL(e.plugin.net->irecv(e.recv_comm, 1, &data, &size, &tag, &rmh, NULL, &rreq));
    FIT_CHECK(rreq != NULL, "irecv returned no request");
    fit_bound_init(&b, "isend", 10.0, 100000000L);
    while ((rc = e.plugin.net->isend(e.send_comm, sbuf, size, tag, smh, NULL, &sreq)) ==
               ncclSuccess && sreq == NULL)
        fit_bound_step(&b);
    FIT_NCCL(rc);
    /* Only the receiver is polled: the sender's completions stay in its CQ. */
    FIT_NCCL(fit_wait(&e.plugin, rreq, 20.0, &took));
    fit_check_pattern(rbuf, size, 0xacced, "the message before the port went down");
    FIT_CHECK(sconn->mem[0].bytes > 0 && sconn->mem[1].bytes > 0,
              "the message was not cut over both ports (%llu + %llu bytes)",
              (unsigned long long)sconn->mem[0].bytes, (unsigned long long)sconn->mem[1].bytes);
    memset(rbuf, FIT_POISON, size); /* The application's again: nothing may land here now. */
    /* The responder acknowledges right after the receive completes; give the ACKs time. */
    usleep(200000);
    writes0 = mr_member_writes(&e, sconn, 0);
    snprintf(needle, sizeof(needle), "port %s failed for this comm", sconn->mem[1].dev->name);
    fit_log_expect(needle);
    fit_log_expect("async event port error");
    from = fit_log_lines();
    mr_port(&e, 1, FAKEIBV_FAULT_PORT_ERR);
    /* The send comm's next poll must see the port down (ferry's async thread sets it). */
    fit_bound_init(&b, "PORT_ERR seen", 10.0, 100000000L);
    while (!atomic_load((_Atomic int *)&sconn->mem[1].dev->port_down))
        fit_bound_step(&b);
    FIT_NCCL(fit_wait(&e.plugin, sreq, 20.0, &took));
    FIT_CHECK(sconn->mem[1].down && sconn->mem[1].moved == 0,
              "port %s: down %d, %llu part(s) moved off it after they were acknowledged",
              sconn->mem[1].dev->name, sconn->mem[1].down,
              (unsigned long long)sconn->mem[1].moved);
    FIT_CHECK(mr_member_writes(&e, sconn, 0) == writes0,
              "port %s wrote %llu more time(s) after the failover", sconn->mem[0].dev->name,
              (unsigned long long)(mr_member_writes(&e, sconn, 0) - writes0));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, needle, "0 request(s) in flight there moved",
                           NULL, NULL, 0) >= 0, "no WARN says port %s failed with 0 moved",
              sconn->mem[1].dev->name);
    for (data = rbuf; (size_t)((char *)data - rbuf) < size; data = (char *)data + 1)
        if (*(unsigned char *)data != FIT_POISON && bad++ == 0)
            printf("  first byte written again at offset %zu\n", (size_t)((char *)data - rbuf));
    FIT_CHECK(bad == 0, "%zu byte(s) of the finished receive were written again", bad);
    mr_port(&e, 1, FAKEIBV_FAULT_PORT_ACTIVE);
    FIT_NCCL(e.plugin.net->deregMr(e.send_comm, smh));
    FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rmh));
    fit_log_expect_clear();
    fit_pass("acknowledged parts stay done: port down after the receive, nothing moved or "
             "written again");
    mr_close(&e);
    free(sbuf);
    free(rbuf);
}

/*
 * fence: the sender's QP on port 1 stops reaching the peer (QP_DROP) with a
 * message cut over both ports in flight; its part fails over to port 0.
 * Until that moved part is acknowledged, isend takes no new clear-to-send
 * (the next message's is there): a part acknowledged on the failed port
 * after it failed lands twice, and the second copy must not overtake a
 * later message into a buffer the receiver reused. Then both messages
 * arrive intact.
 */
static void mr_fence(const char *path)
{
    size_t size = (size_t)64 << 20;
    char *sa = aligned_alloc(4096, size), *sb = aligned_alloc(4096, size);
    char *ra = aligned_alloc(4096, size), *rb = aligned_alloc(4096, size);
    void *smh[2] = {NULL, NULL}, *rmh[2] = {NULL, NULL}, *sreq[2] = {NULL, NULL};
    void *rreq[2] = {NULL, NULL}, *data;
    const ferry_ib_send_comm_t *sc;
    const ferry_ib_conn_t *sconn;
    char needle[160];
    ncclResult_t rc;
    double took;
    int tag = 9, done = 0, q, i, moved_out;
    fit_bound_t b;
    mr_env_t e;

    FIT_CHECK(sa != NULL && sb != NULL && ra != NULL && rb != NULL, "malloc");
    fit_fill(sa, size, 0xfe1ce);
    fit_fill(sb, size, 0xfe1cf);
    memset(ra, FIT_POISON, size);
    memset(rb, FIT_POISON, size);
    mr_open(&e, path);
    mr_pair(&e);
    sc = e.send_comm; /* Same build: the plugin's layout. */
    sconn = mr_conn(e.send_comm);
    FIT_CHECK(sconn->nmem == 2 && size >= sconn->stripe_min, "%d ports, stripe_min %zu",
              sconn->nmem, sconn->stripe_min);
    FIT_NCCL(e.plugin.net->regMr(e.send_comm, sa, size, NCCL_PTR_HOST, &smh[0]));
    FIT_NCCL(e.plugin.net->regMr(e.send_comm, sb, size, NCCL_PTR_HOST, &smh[1]));
    FIT_NCCL(e.plugin.net->regMr(e.recv_comm, ra, size, NCCL_PTR_HOST, &rmh[0]));
    FIT_NCCL(e.plugin.net->regMr(e.recv_comm, rb, size, NCCL_PTR_HOST, &rmh[1]));
    for (i = 0; i < 2; i++) {
        data = i == 0 ? ra : rb;
        FIT_NCCL(e.plugin.net->irecv(e.recv_comm, 1, &data, &size, &tag, &rmh[i], NULL, &rreq[i]));
        FIT_CHECK(rreq[i] != NULL, "irecv %d returned no request", i);
    }
    for (q = 0; q < sconn->nqps; q++)
        if (ferry_ib_qp_mem(sconn, q) == 1)
            FIT_CHECK(e.inject(sconn->mem[1].dev->hca->ctx, FAKEIBV_FAULT_QP_DROP,
                               sconn->qps[q]->qp_num, 0, 1, 0) == 0, "inject QP_DROP on 0x%x",
                      sconn->qps[q]->qp_num);
    snprintf(needle, sizeof(needle), "port %s failed for this comm", sconn->mem[1].dev->name);
    fit_log_expect(needle);
    fit_bound_init(&b, "isend of the first message", 10.0, 100000000L);
    while ((rc = e.plugin.net->isend(e.send_comm, sa, size, tag, smh[0], NULL, &sreq[0])) ==
               ncclSuccess && sreq[0] == NULL)
        fit_bound_step(&b);
    FIT_NCCL(rc);
    /* The sender's polls until its part on port 1 fails over: then it is posted on port 0. */
    fit_bound_init(&b, "the failover", 20.0, 1000000000L);
    while (!sconn->mem[1].down) {
        FIT_NCCL(e.plugin.net->test(sreq[0], &done, NULL));
        FIT_CHECK(!done, "the first message completed before its part on port 1 failed over");
        fit_bound_step(&b);
    }
    moved_out = sc->moved_out;
    FIT_CHECK(sconn->mem[1].moved >= 1 && (uint64_t)moved_out == sconn->mem[1].moved,
              "%llu part(s) moved off port 1, %d moved chain(s) outstanding; expected the same, "
              "at least 1", (unsigned long long)sconn->mem[1].moved, moved_out);
    FIT_CHECK(__atomic_load_n(&sc->fifo[sc->fifo_head % FERRY_IB_FIFO_SLOTS][0].idx,
                              __ATOMIC_ACQUIRE) == sc->fifo_head + 1,
              "the second message's clear-to-send is not there");
    FIT_NCCL(e.plugin.net->isend(e.send_comm, sb, size, tag, smh[1], NULL, &sreq[1]));
    FIT_CHECK(sreq[1] == NULL && sc->moved_out == moved_out,
              "isend took the next clear-to-send while a moved part was in flight");
    fit_pass("a failover's moved part in flight: isend waits (NULL) with the next "
             "clear-to-send there");
    FIT_NCCL(fit_wait(&e.plugin, sreq[0], 20.0, &took));
    FIT_CHECK(sc->moved_out == 0, "%d moved chain(s) still counted after their message completed",
              sc->moved_out);
    fit_bound_init(&b, "isend of the second message", 10.0, 100000000L);
    while ((rc = e.plugin.net->isend(e.send_comm, sb, size, tag, smh[1], NULL, &sreq[1])) ==
               ncclSuccess && sreq[1] == NULL)
        fit_bound_step(&b);
    FIT_NCCL(rc);
    FIT_NCCL(fit_wait(&e.plugin, sreq[1], 20.0, &took));
    FIT_NCCL(fit_wait(&e.plugin, rreq[0], 20.0, &took));
    FIT_NCCL(fit_wait(&e.plugin, rreq[1], 20.0, &took));
    fit_check_pattern(ra, size, 0xfe1ce, "the message whose part moved");
    fit_check_pattern(rb, size, 0xfe1cf, "the message after the moved part");
    fit_pass("the moved part acknowledged, isend goes on: both messages intact");
    for (i = 0; i < 2; i++) {
        FIT_NCCL(e.plugin.net->deregMr(e.send_comm, smh[i]));
        FIT_NCCL(e.plugin.net->deregMr(e.recv_comm, rmh[i]));
    }
    mr_close(&e);
    fit_log_expect_clear();
    free(sa);
    free(sb);
    free(ra);
    free(rb);
}

#define MR_FORK_MSGS 64
#define MR_FORK_DOWN 4
#define MR_FORK_UP   12

typedef struct mr_fork {
    mr_env_t *e;
    uint64_t  bytes_up; /* The port's bytes when it came back (sender). */
} mr_fork_t;

static void mr_fork_hook(fit_role_t role, int i, void *arg)
{
    mr_fork_t *f = arg;

    if (role != FIT_SEND)
        return;
    if (i == MR_FORK_DOWN)
        mr_port(f->e, 1, FAKEIBV_FAULT_PORT_ERR);
    if (i == MR_FORK_UP) {
        mr_port(f->e, 1, FAKEIBV_FAULT_PORT_ACTIVE);
        f->bytes_up = mr_conn(f->e->send_comm)->mem[1].bytes;
    }

}

/* One side of the fork case; the handle goes through fd. */
static void mr_fork_side(const char *path, fit_role_t role, int fd)
{
    static size_t sizes[MR_FORK_MSGS];
    char handle[NCCL_NET_HANDLE_MAXSIZE], needle[160];
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    mr_fork_t f = { 0 };
    mr_env_t e;
    int i;

    for (i = 0; i < MR_FORK_MSGS; i++)
        sizes[i] = (size_t)64 << 20;
    mr_open(&e, path);
    if (role == FIT_RECV) {
        void *lc = fit_listen(&e.plugin, e.ctx, e.dev, handle);

        FIT_CHECK(write(fd, handle, sizeof(handle)) == (ssize_t)sizeof(handle), "write handle");
        e.recv_comm = fit_accept_loop(&e.plugin, lc);
        FIT_NCCL(e.plugin.net->closeListen(lc));
    } else {
        FIT_CHECK(read(fd, handle, sizeof(handle)) == (ssize_t)sizeof(handle), "read handle");
        e.send_comm = fit_connect_loop(&e.plugin, e.ctx, e.dev, handle);
        snprintf(needle, sizeof(needle), "port %s failed for this comm",
                 mr_conn(e.send_comm)->mem[1].dev->name);
        fit_log_expect(needle);
        fit_log_expect("async event port error");
    }
    f.e = &e;
    o.sizes = sizes;
    o.nmsgs = MR_FORK_MSGS;
    o.depth = 4;
    o.seed = 0xf0f0;
    o.seconds = 120.0;
    o.tag = 9;
    o.on_done = mr_fork_hook;
    o.on_done_arg = &f;
    fit_xfer_side(&e.plugin, role, role == FIT_RECV ? e.recv_comm : e.send_comm, &o, &r);
    fit_xfer_expect_ok(&r, "64 x 64 MiB across two processes, a port down and back");
    if (role == FIT_SEND) {
        const ferry_ib_conn_t *c = mr_conn(e.send_comm);
        uint64_t after = c->mem[1].bytes - f.bytes_up;

        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, needle, "127.0.0.1", "moved to", NULL, 0) >= 0,
                  "no WARN names the failed port");
        FIT_CHECK(!c->mem[1].down && c->mem[1].rejoins == 1 && after > 0,
                  "the port came back %llu time(s), down %d, %llu bytes after it came back",
                  (unsigned long long)c->mem[1].rejoins, c->mem[1].down,
                  (unsigned long long)after);
        FIT_NCCL(e.plugin.net->closeSend(e.send_comm));
        fit_pass("sender: port down after message %d, back after %d; it carried %llu bytes "
                 "after it came back", MR_FORK_DOWN, MR_FORK_UP, (unsigned long long)after);
    } else {
        FIT_NCCL(e.plugin.net->closeRecv(e.recv_comm));
        fit_pass("receiver: 64 x 64 MiB intact while the sender's port went down and back");
    }
    fit_log_expect_clear();
    fit_log_check_clean("fork");
    FIT_NCCL(e.plugin.net->finalize(e.ctx));
    fit_plugin_close(&e.plugin);
}

static void mr_fork(const char *path)
{
    int pfd[2], status = 0;
    pid_t pid;

    FIT_CHECK(pipe(pfd) == 0, "pipe: %s", strerror(errno));
    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(pfd[0]);
        fit_set_role("multirail-recv");
        alarm(150);
        mr_fork_side(path, FIT_RECV, pfd[1]);
        fit_child_exit(0);
    }
    close(pfd[1]);
    mr_fork_side(path, FIT_SEND, pfd[0]);
    close(pfd[0]);
    FIT_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the receiver ended with status 0x%x", status);
    fit_pass("two processes: a port down and back in a stream of 64 MiB messages");
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *only = NULL;
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
            only = argv[++i];
        else
            FIT_FAIL("usage: integ_ib_multirail [--plugin PATH] [--case NAME] (got '%s')",
                     argv[i]);
    }
    fit_set_role("multirail");
    setenv("NCCL_SOCKET_IFNAME", "=lo", 0);
    /*
     * Alone (its own ctest entry): both processes must find fakeibv's ports
     * themselves (a child forked after the parent did would share its LIDs).
     */
    if (only != NULL && strcmp(only, "fork") == 0)
        mr_fork(path);
    if (only != NULL && strcmp(only, "alone-down") == 0)
        mr_alone(path, 0);
    if (only != NULL && strcmp(only, "alone-down-close") == 0)
        mr_alone(path, 1);
    if (only == NULL || strcmp(only, "spread") == 0)
        mr_spread(path);
    if (only == NULL || strcmp(only, "failover") == 0)
        mr_failover(path);
    if (only == NULL || strcmp(only, "all-down") == 0)
        mr_all_down(path);
    if (only == NULL || strcmp(only, "acked") == 0)
        mr_acked(path);
    if (only == NULL || strcmp(only, "fence") == 0)
        mr_fence(path);
    if (only == NULL || strcmp(only, "refuse") == 0)
        mr_refuse(path, 0);
    if (only != NULL && strcmp(only, "refuse-all") == 0)
        mr_refuse(path, 1);
    fit_check_no_ferry_threads("after the last case");
    printf("integ_ib_multirail: all cases passed\n");
    return 0;
}
