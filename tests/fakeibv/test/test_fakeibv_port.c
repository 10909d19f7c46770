/*
 * fakeibv port failure and port counters, as multi-rail failover tests need
 * them: two devices x two ports (FAKEIBV_NDEV=2, FAKEIBV_NPORTS=2), one RC
 * pair per port ("rail"): fakeib0 port P <-> fakeib1 port P. Port 1 of
 * fakeib0 goes down in the middle of a stream of WRITEs: its QP's WRs end in
 * RETRY_EXC_ERR after the retry timeout (FAKEIBV_RETRY_TIMEOUT_MS=200), the
 * rest flush, the QP is in ERR, and its peer's own requests time out too;
 * the rail on port 2 keeps moving data byte for byte. A QP connected on the
 * down port moves nothing either way. After PORT_ACTIVE a fresh pair on
 * port 1 works, the old QP stays in ERR. Counters grow on the port that
 * moved the bytes and only there. Last, the same across processes with
 * fakeibv_peer: our port down makes the peer's WRITE time out, and the
 * peer's port down makes ours time out.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define BUF (1 << 20)
#define RETRY_MS 200   /* FAKEIBV_RETRY_TIMEOUT_MS of this test. */
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* One side of the fabric: a device with its PD and a buffer. */
struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    char *buf;
    struct ibv_mr *mr;
};

/* A connected pair on one port: end 0 on fakeib0, end 1 on fakeib1. */
struct rail {
    int port;
    struct ibv_cq *cq[2];
    struct ibv_qp *qp[2];
};

static struct side dev[2];

static int side_open(struct side *s, int index)
{
    struct ibv_device **list = ibv_get_device_list(NULL);

    memset(s, 0, sizeof(*s));
    if (list == NULL || list[0] == NULL || list[1] == NULL)
        return -1;
    s->ctx = ibv_open_device(list[index]);
    ibv_free_device_list(list);
    if (s->ctx == NULL)
        return -1;
    s->pd = ibv_alloc_pd(s->ctx);
    s->buf = calloc(1, BUF);
    s->mr = s->pd != NULL && s->buf != NULL ? ibv_reg_mr(s->pd, s->buf, BUF, ACC) : NULL;
    return s->mr != NULL ? 0 : -1;
}

static void side_close(struct side *s)
{
    if (s->mr != NULL)
        ibv_dereg_mr(s->mr);
    free(s->buf);
    if (s->pd != NULL)
        ibv_dealloc_pd(s->pd);
    if (s->ctx != NULL)
        ibv_close_device(s->ctx);
    memset(s, 0, sizeof(*s));
}

/* RESET -> RTS on `port`, towards (dlid, dqpn) on the peer's same port. */
static int qp_up(struct ibv_qp *qp, int port, uint16_t dlid, uint32_t dqpn)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = (uint8_t)port;
    a.qp_access_flags = ACC;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS) != 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = (uint8_t)port;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER) != 0)
        return -1;
    return fx_to_rts(qp, FX_TIMEOUT, FX_RETRY, 7);
}

static struct ibv_qp *qp_new(struct side *s, struct ibv_cq *cq)
{
    struct ibv_qp_init_attr a;

    memset(&a, 0, sizeof(a));
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 64;
    a.cap.max_recv_wr = 64;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 2;
    return ibv_create_qp(s->pd, &a);
}

static void rail_open(struct rail *r, int port)
{
    int i;

    r->port = port;
    for (i = 0; i < 2; i++) {
        r->cq[i] = ibv_create_cq(dev[i].ctx, 256, NULL, NULL, 0);
        assert_non_null(r->cq[i]);
        r->qp[i] = qp_new(&dev[i], r->cq[i]);
        assert_non_null(r->qp[i]);
    }
    assert_int_equal(qp_up(r->qp[0], port, fakeibv_port_lid(dev[1].ctx, (uint8_t)port),
                           r->qp[1]->qp_num), 0);
    assert_int_equal(qp_up(r->qp[1], port, fakeibv_port_lid(dev[0].ctx, (uint8_t)port),
                           r->qp[0]->qp_num), 0);
}

static void rail_close(struct rail *r)
{
    int i;

    for (i = 0; i < 2; i++) {
        assert_int_equal(ibv_destroy_qp(r->qp[i]), 0);
        assert_int_equal(ibv_destroy_cq(r->cq[i]), 0);
    }
}

static void fill(char *p, size_t n, unsigned seed)
{
    size_t i;

    for (i = 0; i < n; i++)
        p[i] = (char)(i * 13 + seed);
}

/* A signalled WRITE of `len` bytes at `off` from end `from` into the same
 * offset of the other end's buffer. */
static int rail_write(struct rail *r, int from, uint64_t wr_id, size_t off, uint32_t len)
{
    struct side *s = &dev[from], *d = &dev[1 - from];

    return fx_write(r->qp[from], wr_id, IBV_WR_RDMA_WRITE, s->buf + off, len, s->mr->lkey,
                    (uintptr_t)(d->buf + off), d->mr->rkey, IBV_SEND_SIGNALED, 0);
}

/* Moves `len` bytes at `base` of end 0's buffer to the same place in end
 * 1's and checks them, then READs them back into end 0 right after them
 * (base + len) and checks again. */
static void rail_roundtrip(struct rail *r, size_t base, uint32_t len, unsigned seed)
{
    char *src = dev[0].buf + base, *dst = dev[1].buf + base, *back = src + len;
    struct ibv_wc wc;

    assert_true(base + 2 * (size_t)len <= BUF);
    fill(src, len, seed);
    memset(dst, 0, len);
    memset(back, 0, len);
    assert_int_equal(rail_write(r, 0, seed, base, len), 0);
    assert_int_equal(fx_poll(r->cq[0], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(dst, src, len);
    assert_int_equal(fx_write(r->qp[0], seed + 1, IBV_WR_RDMA_READ, back, len, dev[0].mr->lkey,
                              (uintptr_t)dst, dev[1].mr->rkey, IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(r->cq[0], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(back, src, len);
}

static struct fakeibv_port_counters ctr(int d, int port)
{
    struct fakeibv_port_counters c;

    assert_int_equal(fakeibv_port_counters(dev[d].ctx, (uint8_t)port, &c), 0);
    return c;
}

static enum ibv_port_state port_state(int d, int port)
{
    struct ibv_port_attr a;

    assert_int_equal(ibv_query_port(dev[d].ctx, (uint8_t)port, &a), 0);
    return a.state;
}

/* The next async event of dev 0 must be `type` on `port` (1 s at most). */
static void expect_port_event(enum ibv_event_type type, int port)
{
    struct pollfd p = { .fd = dev[0].ctx->async_fd, .events = POLLIN };
    struct ibv_async_event ev;

    assert_int_equal(poll(&p, 1, 1000), 1);
    assert_int_equal(ibv_get_async_event(dev[0].ctx, &ev), 0);
    assert_int_equal(ev.event_type, type);
    assert_int_equal(ev.element.port_num, port);
    ibv_ack_async_event(&ev);
}

static int setup(void **state)
{
    (void)state;
    return side_open(&dev[0], 0) != 0 || side_open(&dev[1], 1) != 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    side_close(&dev[0]);
    side_close(&dev[1]);
    return 0;
}

/*
 * Counters: a WRITE of 3 x 4096 + 1 bytes is 4 packets (path MTU 4096) out
 * of the requester's port and into the responder's, its ACK one packet the
 * other way; a READ of n bytes is one request packet out and n bytes in on
 * the requester's port. Nothing moves on the other ports. sysfs shows the
 * same numbers, data in units of 4 octets.
 */
static void test_counters_per_port(void **state)
{
    struct fakeibv_port_counters a0, a1, o0, o1, b0, b1, p0, p1;
    struct rail r;
    struct ibv_wc wc;
    const uint32_t len = 3 * 4096 + 1;
    char dir[512], text[64];

    (void)state;
    rail_open(&r, 2);
    o0 = ctr(0, 1);
    o1 = ctr(1, 1);
    b0 = ctr(0, 2);
    b1 = ctr(1, 2);
    fill(dev[0].buf, len, 5);
    assert_int_equal(rail_write(&r, 0, 1, 0, len), 0);
    assert_int_equal(fx_poll(r.cq[0], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(dev[1].buf, dev[0].buf, len);
    a0 = ctr(0, 2);
    a1 = ctr(1, 2);
    assert_int_equal(a0.xmit_bytes - b0.xmit_bytes, len);
    assert_int_equal(a0.xmit_packets - b0.xmit_packets, 4);
    assert_int_equal(a0.rcv_bytes - b0.rcv_bytes, 0);
    assert_int_equal(a0.rcv_packets - b0.rcv_packets, 1);
    assert_int_equal(a1.rcv_bytes - b1.rcv_bytes, len);
    assert_int_equal(a1.rcv_packets - b1.rcv_packets, 4);
    assert_int_equal(a1.xmit_bytes - b1.xmit_bytes, 0);
    assert_int_equal(a1.xmit_packets - b1.xmit_packets, 1);
    assert_int_equal(a0.xmit_data, a0.xmit_bytes / 4);
    assert_int_equal(a1.rcv_data, a1.rcv_bytes / 4);

    /* READ back 8192 bytes: data flows from end 1's port into end 0's. */
    assert_int_equal(fx_write(r.qp[0], 2, IBV_WR_RDMA_READ, dev[0].buf + BUF / 2, 8192,
                              dev[0].mr->lkey, (uintptr_t)dev[1].buf, dev[1].mr->rkey,
                              IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(r.cq[0], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    p0 = ctr(0, 2);
    p1 = ctr(1, 2);
    assert_int_equal(p0.xmit_bytes - a0.xmit_bytes, 0);
    assert_int_equal(p0.xmit_packets - a0.xmit_packets, 1);
    assert_int_equal(p0.rcv_bytes - a0.rcv_bytes, 8192);
    assert_int_equal(p0.rcv_packets - a0.rcv_packets, 2);
    assert_int_equal(p1.xmit_bytes - a1.xmit_bytes, 8192);
    assert_int_equal(p1.rcv_packets - a1.rcv_packets, 1);

    /* Port 1 of either device moved nothing. */
    a0 = ctr(0, 1);
    a1 = ctr(1, 1);
    assert_memory_equal(&a0, &o0, sizeof(a0));
    assert_memory_equal(&a1, &o1, sizeof(a1));

    /* sysfs, refreshed by the call above. */
    snprintf(dir, sizeof(dir), "%s/ports/2/counters", dev[0].ctx->device->ibdev_path);
    assert_true(ibv_read_sysfs_file(dir, "port_xmit_data", text, sizeof(text)) > 0);
    assert_int_equal(strtoull(text, NULL, 10), p0.xmit_bytes / 4);
    assert_true(ibv_read_sysfs_file(dir, "port_rcv_data", text, sizeof(text)) > 0);
    assert_int_equal(strtoull(text, NULL, 10), p0.rcv_bytes / 4);
    assert_true(ibv_read_sysfs_file(dir, "port_xmit_packets", text, sizeof(text)) > 0);
    assert_int_equal(strtoull(text, NULL, 10), p0.xmit_packets);
    assert_true(ibv_read_sysfs_file(dir, "port_rcv_packets", text, sizeof(text)) > 0);
    assert_int_equal(strtoull(text, NULL, 10), p0.rcv_packets);
    assert_int_equal(fakeibv_port_counters(dev[0].ctx, 3, &p0), EINVAL);
    assert_int_equal(fakeibv_port_counters(dev[0].ctx, 0, &p0), EINVAL);
    rail_close(&r);
}

/*
 * Port 1 of fakeib0 goes down between two bursts of WRITEs on rail 1 while
 * rail 2 streams: rail 1's WRs end (after any that made it) in one
 * RETRY_EXC_ERR no sooner than the retry timeout after the fault, the rest
 * in WR_FLUSH_ERR, its QP in ERR; the peer QP's WRITE times out too; rail 2
 * moves every byte; the down port's counters stand still. A pair connected
 * on the down port gets to RTS, and its WRs time out in both directions.
 * Then PORT_ACTIVE: a fresh pair on port 1 works, the old QP stays in ERR.
 */
static void test_port_down_then_up(void **state)
{
    struct rail r1, r2, rn;
    struct ibv_wc wc[16];
    struct fakeibv_port_counters c01, c11, c02;
    struct timespec t0;
    long ms;
    int i, n, k;

    (void)state;
    rail_open(&r1, 1);
    rail_open(&r2, 2);
    rail_roundtrip(&r1, 0, 65536, 1);
    rail_roundtrip(&r2, BUF / 2, 65536, 2);

    /* Four WRITEs, two of them seen complete, the port goes down, four
     * more. */
    fill(dev[0].buf, 8 * 4096, 3);
    for (i = 0; i < 4; i++)
        assert_int_equal(rail_write(&r1, 0, 100 + (uint64_t)i, (size_t)i * 4096, 4096), 0);
    assert_int_equal(fx_poll(r1.cq[0], wc, 2, 5000), 2);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(fakeibv_inject(dev[0].ctx, FAKEIBV_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    for (; i < 8; i++)
        assert_int_equal(rail_write(&r1, 0, 100 + (uint64_t)i, (size_t)i * 4096, 4096), 0);
    expect_port_event(IBV_EVENT_PORT_ERR, 1);
    assert_int_equal(port_state(0, 1), IBV_PORT_DOWN);
    assert_int_equal(port_state(0, 2), IBV_PORT_ACTIVE);
    assert_int_equal(port_state(1, 1), IBV_PORT_ACTIVE);

    /* Meanwhile rail 2 moves 256 KiB, byte for byte (its own part of the
     * buffers: rail 1's WRITEs from before the fault may still land, as
     * packets already on the wire do). */
    rail_roundtrip(&r2, BUF / 2, BUF / 4, 4);

    n = fx_poll(r1.cq[0], wc + 2, 6, 5000);
    ms = fx_ms_since(&t0);
    assert_int_equal(n, 6);
    for (k = 0; k < 8 && wc[k].status == IBV_WC_SUCCESS; k++)
        assert_int_equal(wc[k].wr_id, 100 + (uint64_t)k);
    assert_true(k >= 2 && k <= 4); /* Nothing posted after the fault got through. */
    assert_int_equal(wc[k].wr_id, 100 + (uint64_t)k);
    assert_int_equal(wc[k].status, IBV_WC_RETRY_EXC_ERR);
    for (i = k + 1; i < 8; i++) {
        assert_int_equal(wc[i].wr_id, 100 + (uint64_t)i);
        assert_int_equal(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    }
    assert_true(ms >= RETRY_MS - 20);
    assert_true(ms < 3000);
    assert_int_equal(fx_state(r1.qp[0]), IBV_QPS_ERR);
    c01 = ctr(0, 1);
    c11 = ctr(1, 1);

    /* The peer (fakeib1 port 1, which is up) hears nothing back either. */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(rail_write(&r1, 1, 200, 0, 4096), 0);
    assert_int_equal(fx_poll(r1.cq[1], wc, 1, 5000), 1);
    assert_int_equal(wc[0].wr_id, 200);
    assert_int_equal(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    ms = fx_ms_since(&t0);
    assert_true(ms >= RETRY_MS - 20 && ms < 3000);
    assert_int_equal(fx_state(r1.qp[1]), IBV_QPS_ERR);

    /* A pair connected on the down port: modify_qp succeeds (as on an HCA),
     * nothing moves in either direction. */
    rail_open(&rn, 1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(rail_write(&rn, 0, 300, 0, 64), 0);
    assert_int_equal(rail_write(&rn, 1, 301, 0, 64), 0);
    assert_int_equal(fx_poll(rn.cq[0], wc, 1, 5000), 1);
    assert_int_equal(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    assert_int_equal(fx_poll(rn.cq[1], wc, 1, 5000), 1);
    assert_int_equal(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    assert_true(fx_ms_since(&t0) >= RETRY_MS - 20);
    rail_close(&rn);

    /* Rail 2 still works; port 1 of both devices moved nothing since. */
    c02 = ctr(0, 2);
    rail_roundtrip(&r2, BUF / 2, 65536, 5);
    assert_true(ctr(0, 2).xmit_bytes >= c02.xmit_bytes + 65536);
    assert_true(ctr(0, 2).rcv_bytes >= c02.rcv_bytes + 65536);
    assert_int_equal(ctr(0, 1).xmit_bytes, c01.xmit_bytes);
    assert_int_equal(ctr(0, 1).rcv_bytes, c01.rcv_bytes);
    assert_int_equal(ctr(1, 1).rcv_bytes, c11.rcv_bytes);

    /* Back up: the old QP stays in ERR (a new WR flushes at once), a fresh
     * pair on port 1 moves data and the counters of port 1 grow. */
    assert_int_equal(fakeibv_inject(dev[0].ctx, FAKEIBV_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    expect_port_event(IBV_EVENT_PORT_ACTIVE, 1);
    assert_int_equal(port_state(0, 1), IBV_PORT_ACTIVE);
    assert_int_equal(rail_write(&r1, 0, 400, 0, 64), 0);
    assert_int_equal(fx_poll(r1.cq[0], wc, 1, 1000), 1);
    assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(fx_state(r1.qp[0]), IBV_QPS_ERR);
    rail_open(&rn, 1);
    rail_roundtrip(&rn, 0, BUF / 4, 6);
    assert_true(ctr(0, 1).xmit_bytes >= c01.xmit_bytes + BUF / 4);
    assert_true(ctr(0, 1).rcv_bytes >= c01.rcv_bytes + BUF / 4);
    assert_true(ctr(1, 1).rcv_bytes >= c11.rcv_bytes + BUF / 4);
    rail_close(&rn);

    /* The old pair, reset and connected again, works too. */
    for (i = 0; i < 2; i++) {
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

        assert_int_equal(ibv_modify_qp(r1.qp[i], &a, IBV_QP_STATE), 0);
        while (fx_poll(r1.cq[i], wc, 16, 10) > 0)
            ;
    }
    assert_int_equal(qp_up(r1.qp[0], 1, fakeibv_port_lid(dev[1].ctx, 1), r1.qp[1]->qp_num), 0);
    assert_int_equal(qp_up(r1.qp[1], 1, fakeibv_port_lid(dev[0].ctx, 1), r1.qp[0]->qp_num), 0);
    rail_roundtrip(&r1, 0, 65536, 7);
    rail_close(&r1);
    rail_close(&r2);
}

/* QP_LINK_DOWN cuts both directions: the QP's sends and its peer's time
 * out. QP_DROP cuts one: the peer's requests still get through. */
static void test_qp_link_down_both_ways(void **state)
{
    struct rail r;
    struct ibv_wc wc;

    (void)state;
    rail_open(&r, 2);
    rail_roundtrip(&r, 0, 4096, 8);
    assert_int_equal(fakeibv_inject(NULL, FAKEIBV_FAULT_QP_LINK_DOWN, r.qp[0]->qp_num, 0, 0, 0),
                     0);
    assert_int_equal(rail_write(&r, 1, 500, 0, 64), 0);
    assert_int_equal(fx_poll(r.cq[1], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
    assert_int_equal(rail_write(&r, 0, 501, 0, 64), 0);
    assert_int_equal(fx_poll(r.cq[0], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
    assert_int_equal(port_state(0, 2), IBV_PORT_ACTIVE);
    rail_close(&r);

    rail_open(&r, 2);
    assert_int_equal(fakeibv_inject(NULL, FAKEIBV_FAULT_QP_DROP, r.qp[0]->qp_num, 0, 0, 0), 0);
    assert_int_equal(rail_write(&r, 1, 502, 0, 64), 0);
    assert_int_equal(fx_poll(r.cq[1], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(rail_write(&r, 0, 503, 0, 64), 0);
    assert_int_equal(fx_poll(r.cq[0], &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
    rail_close(&r);
}

/* ---- two processes: fakeibv_peer at the far end -------------------------- */

struct peer {
    pid_t pid;
    FILE *in;
    int to;
    unsigned lid, qpn, rkey;
    uint64_t addr;
};

static void peer_start(struct peer *p, struct ibv_qp *q, uint16_t our_lid)
{
    char path[4096], line[128];
    int to_peer[2], from_peer[2];
    posix_spawn_file_actions_t fa;
    char *argv[] = { (char *)"fakeibv_peer", NULL };
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);

    assert_true(n > 0);
    path[n] = '\0';
    strcpy(strrchr(path, '/') + 1, "fakeibv_peer");
    assert_int_equal(pipe(to_peer), 0);
    assert_int_equal(pipe(from_peer), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_peer[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_peer[1], 1);
    posix_spawn_file_actions_addclose(&fa, to_peer[1]);
    posix_spawn_file_actions_addclose(&fa, from_peer[0]);
    assert_int_equal(posix_spawn(&p->pid, path, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(to_peer[0]);
    close(from_peer[1]);
    p->to = to_peer[1];
    p->in = fdopen(from_peer[0], "r");
    assert_non_null(fgets(line, sizeof(line), p->in));
    assert_int_equal(sscanf(line, "%u %u %" SCNu64 " %u", &p->lid, &p->qpn, &p->addr, &p->rkey),
                     4);
    snprintf(line, sizeof(line), "%u %u\n", our_lid, q->qp_num);
    assert_int_equal(write(p->to, line, strlen(line)), (ssize_t)strlen(line));
    assert_int_equal(qp_up(q, 1, (uint16_t)p->lid, p->qpn), 0);
    assert_non_null(fgets(line, sizeof(line), p->in));
    assert_string_equal(line, "ready\n");
}

/* Sends one command line, returns the peer's answer line. */
static void peer_cmd(struct peer *p, const char *cmd, char *answer, size_t n)
{
    assert_int_equal(write(p->to, cmd, strlen(cmd)), (ssize_t)strlen(cmd));
    assert_non_null(fgets(answer, (int)n, p->in));
}

static void peer_stop(struct peer *p)
{
    int status;

    close(p->to);
    assert_int_equal(waitpid(p->pid, &status, 0), p->pid);
    fclose(p->in);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The peer's WRITE into our buffer, as "wc <status> <ms>". */
static void peer_write(struct peer *p, int *status, long *ms)
{
    char cmd[128], ans[128];

    snprintf(cmd, sizeof(cmd), "write %" PRIu64 " %u 4096\n", (uint64_t)(uintptr_t)dev[0].buf,
             dev[0].mr->rkey);
    peer_cmd(p, cmd, ans, sizeof(ans));
    assert_int_equal(sscanf(ans, "wc %d %ld", status, ms), 2);
}

static void test_two_process(void **state)
{
    struct ibv_cq *cq = ibv_create_cq(dev[0].ctx, 64, NULL, NULL, 0);
    struct ibv_qp *q;
    struct peer p;
    struct ibv_wc wc;
    char ans[64];
    int st;
    long ms;

    (void)state;
    assert_non_null(cq);

    /* Our port goes down: the peer's WRITE to us times out. */
    q = qp_new(&dev[0], cq);
    assert_non_null(q);
    peer_start(&p, q, fakeibv_port_lid(dev[0].ctx, 1));
    memset(dev[0].buf, 0, 4096);
    peer_write(&p, &st, &ms);
    assert_int_equal(st, IBV_WC_SUCCESS);
    assert_int_equal(fakeibv_inject(dev[0].ctx, FAKEIBV_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    expect_port_event(IBV_EVENT_PORT_ERR, 1);
    peer_write(&p, &st, &ms);
    assert_int_equal(st, IBV_WC_RETRY_EXC_ERR);
    assert_true(ms >= RETRY_MS - 20 && ms < 5000);
    assert_int_equal(fx_write(q, 1, IBV_WR_RDMA_WRITE, dev[0].buf, 64, dev[0].mr->lkey, p.addr,
                              p.rkey, IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
    peer_stop(&p);
    assert_int_equal(ibv_destroy_qp(q), 0);
    assert_int_equal(fakeibv_inject(dev[0].ctx, FAKEIBV_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    expect_port_event(IBV_EVENT_PORT_ACTIVE, 1);

    /* The peer's port goes down: our WRITE times out, its own too. */
    q = qp_new(&dev[0], cq);
    assert_non_null(q);
    peer_start(&p, q, fakeibv_port_lid(dev[0].ctx, 1));
    fill(dev[0].buf, 4096, 9);
    assert_int_equal(fx_write(q, 2, IBV_WR_RDMA_WRITE, dev[0].buf, 4096, dev[0].mr->lkey, p.addr,
                              p.rkey, IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    peer_cmd(&p, "portdown\n", ans, sizeof(ans));
    assert_string_equal(ans, "down\n");
    assert_int_equal(fx_write(q, 3, IBV_WR_RDMA_WRITE, dev[0].buf, 64, dev[0].mr->lkey, p.addr,
                              p.rkey, IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.wr_id, 3);
    assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
    peer_write(&p, &st, &ms);
    assert_int_equal(st, IBV_WC_RETRY_EXC_ERR);
    peer_stop(&p);
    assert_int_equal(ibv_destroy_qp(q), 0);
    assert_int_equal(ibv_destroy_cq(cq), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters_per_port),
        cmocka_unit_test(test_port_down_then_up),
        cmocka_unit_test(test_qp_link_down_both_ways),
        cmocka_unit_test(test_two_process),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
