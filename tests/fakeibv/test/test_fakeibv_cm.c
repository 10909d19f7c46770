/*
 * The emulated librdmacm.so.1, both sides in one process: rdma_cm's event
 * order with private data, a connection that moves data, reject with
 * private data, no listener, the private data limits, the pollable
 * non-blocking channel, and (run with FAKEIBV_RDMA_CM_DEV naming a missing
 * file) the missing rdma_cm device.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "ferry/rdma_cm_abi.h"

#include "fakeibv_test_util.h"

#define CM_WAIT_MS 5000

/* The next event on ch within CM_WAIT_MS; its type, status and private data are copied. */
typedef struct cm_ev {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id *id, *listen_id;
    uint8_t pd[256];
    int pd_len;
    uint32_t qp_num;
} cm_ev_t;

static void cm_next(struct rdma_event_channel *ch, cm_ev_t *out)
{
    struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
    struct rdma_cm_event *ev;

    assert_int_equal(poll(&pfd, 1, CM_WAIT_MS), 1);
    assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
    memset(out, 0, sizeof(*out));
    out->type = ev->event;
    out->status = ev->status;
    out->id = ev->id;
    out->listen_id = ev->listen_id;
    out->pd_len = ev->param.conn.private_data_len;
    out->qp_num = ev->param.conn.qp_num;
    if (out->pd_len > 0)
        memcpy(out->pd, ev->param.conn.private_data, (size_t)out->pd_len);
    assert_int_equal(rdma_ack_cm_event(ev), 0);
}

static void cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type, cm_ev_t *out)
{
    cm_next(ch, out);
    if (out->type != type)
        fail_msg("got %s (status %d), expected %s", rdma_event_str(out->type), out->status,
                 rdma_event_str(type));
}

typedef struct cm_side {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
} cm_side_t;

static void cm_side_qp(cm_side_t *s, struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr ia;

    s->pd = ibv_alloc_pd(id->verbs);
    s->cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
    assert_non_null(s->pd);
    assert_non_null(s->cq);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = s->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    assert_int_equal(rdma_create_qp(id, s->pd, &ia), 0);
    assert_non_null(id->qp);
}

static void cm_side_free(cm_side_t *s)
{
    if (s->id != NULL) {
        rdma_destroy_qp(s->id);
        rdma_destroy_id(s->id);
    }
    if (s->cq != NULL)
        ibv_destroy_cq(s->cq);
    if (s->pd != NULL)
        ibv_dealloc_pd(s->pd);
    if (s->ch != NULL)
        rdma_destroy_event_channel(s->ch);
}

/* A listener on 127.0.0.1, port chosen by the kernel. */
static struct rdma_cm_id *cm_listener(struct rdma_event_channel *ch, struct sockaddr_in *where)
{
    struct sockaddr_in sin;
    struct rdma_cm_id *l;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP), 0);
    assert_int_equal(rdma_bind_addr(l, (struct sockaddr *)&sin), 0);
    assert_int_equal(rdma_listen(l, 8), 0);
    memcpy(where, &l->route.addr.src_sin, sizeof(*where));
    assert_int_not_equal(where->sin_port, 0);
    return l;
}

/* Active side up to ROUTE_RESOLVED with a QP, as ferry and perftest do. */
static void cm_active(cm_side_t *a, const struct sockaddr_in *dst)
{
    cm_ev_t e;

    a->ch = rdma_create_event_channel();
    assert_non_null(a->ch);
    assert_int_equal(rdma_create_id(a->ch, &a->id, (void *)0x1234, RDMA_PS_TCP), 0);
    assert_int_equal(rdma_resolve_addr(a->id, NULL, (struct sockaddr *)dst, 1000), 0);
    cm_expect(a->ch, RDMA_CM_EVENT_ADDR_RESOLVED, &e);
    assert_ptr_equal(e.id, a->id);
    assert_non_null(a->id->verbs);
    assert_string_equal(ibv_get_device_name(a->id->verbs->device), "fakeib0");
    assert_int_equal(a->id->port_num, 1);
    assert_int_equal(rdma_resolve_route(a->id, 1000), 0);
    cm_expect(a->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, &e);
    cm_side_qp(a, a->id);
}

static void test_connect_accept_data_disconnect(void **state)
{
    cm_side_t a = {0}, p = {0};
    struct rdma_conn_param param;
    struct sockaddr_in where;
    struct rdma_cm_id *l;
    uint8_t req_pd[56], rep_pd[196], src[4096], dst[4096];
    struct ibv_mr *smr, *dmr;
    struct ibv_wc wc;
    cm_ev_t e;
    size_t i;

    (void)state;
    p.ch = rdma_create_event_channel();
    assert_non_null(p.ch);
    l = cm_listener(p.ch, &where);
    cm_active(&a, &where);
    for (i = 0; i < sizeof(req_pd); i++)
        req_pd[i] = (uint8_t)(i * 7 + 1);
    for (i = 0; i < sizeof(rep_pd); i++)
        rep_pd[i] = (uint8_t)(i * 13 + 5);
    memset(&param, 0, sizeof(param));
    param.private_data = req_pd;
    param.private_data_len = sizeof(req_pd);
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    assert_int_equal(rdma_connect(a.id, &param), 0);

    /* The passive side: CONNECT_REQUEST on a new id, the REQ's private data byte for byte. */
    cm_expect(p.ch, RDMA_CM_EVENT_CONNECT_REQUEST, &e);
    assert_ptr_equal(e.listen_id, l);
    assert_ptr_not_equal(e.id, l);
    assert_int_equal(e.pd_len, sizeof(req_pd));
    assert_memory_equal(e.pd, req_pd, sizeof(req_pd));
    assert_int_equal(e.qp_num, a.id->qp->qp_num);
    p.id = e.id;
    assert_ptr_equal(p.id->verbs, a.id->verbs); /* One context per device, shared. */
    cm_side_qp(&p, p.id);
    param.private_data = rep_pd;
    param.private_data_len = sizeof(rep_pd);
    assert_int_equal(rdma_accept(p.id, &param), 0);

    /* ESTABLISHED on both sides; the active one carries the REP's private data. */
    cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED, &e);
    assert_int_equal(e.pd_len, sizeof(rep_pd));
    assert_memory_equal(e.pd, rep_pd, sizeof(rep_pd));
    assert_int_equal(e.qp_num, p.id->qp->qp_num);
    cm_expect(p.ch, RDMA_CM_EVENT_ESTABLISHED, &e);
    assert_ptr_equal(e.id, p.id);

    /* rdma_cm brought the QPs to RTS with remote write: an RDMA WRITE lands byte for byte. */
    for (i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i ^ 0x5a);
    memset(dst, 0, sizeof(dst));
    smr = ibv_reg_mr(a.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
    dmr = ibv_reg_mr(p.pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    assert_non_null(smr);
    assert_non_null(dmr);
    assert_int_equal(fx_write(a.id->qp, 77, IBV_WR_RDMA_WRITE, src, sizeof(src), smr->lkey,
                              (uint64_t)(uintptr_t)dst, dmr->rkey, IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(a.cq, &wc, 1, CM_WAIT_MS), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.wr_id, 77);
    assert_memory_equal(dst, src, sizeof(src));

    /* DISCONNECTED: the peer at once, the disconnecting side when the peer answers. */
    assert_int_equal(rdma_disconnect(a.id), 0);
    cm_expect(p.ch, RDMA_CM_EVENT_DISCONNECTED, &e);
    assert_ptr_equal(e.id, p.id);
    assert_int_equal(rdma_disconnect(p.id), 0);
    cm_expect(a.ch, RDMA_CM_EVENT_DISCONNECTED, &e);
    assert_ptr_equal(e.id, a.id);

    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    rdma_destroy_id(l); /* Ids go before their channel. */
    cm_side_free(&a);
    cm_side_free(&p);
}

static void test_reject_with_private_data(void **state)
{
    cm_side_t a = {0}, p = {0};
    struct rdma_conn_param param;
    struct sockaddr_in where;
    struct rdma_cm_id *l;
    const char why[] = "not today";
    cm_ev_t e;

    (void)state;
    p.ch = rdma_create_event_channel();
    l = cm_listener(p.ch, &where);
    cm_active(&a, &where);
    memset(&param, 0, sizeof(param));
    param.private_data = "hello";
    param.private_data_len = 5;
    assert_int_equal(rdma_connect(a.id, &param), 0);
    cm_expect(p.ch, RDMA_CM_EVENT_CONNECT_REQUEST, &e);
    assert_int_equal(e.pd_len, 5);
    assert_memory_equal(e.pd, "hello", 5);
    assert_int_equal(rdma_reject(e.id, why, sizeof(why)), 0);
    cm_expect(a.ch, RDMA_CM_EVENT_REJECTED, &e);
    assert_int_equal(e.status, 28); /* IB_CM_REJ_CONSUMER_DEFINED */
    assert_int_equal(e.pd_len, sizeof(why));
    assert_memory_equal(e.pd, why, sizeof(why));
    rdma_destroy_id(l);
    cm_side_free(&a);
    cm_side_free(&p);
}

static void test_no_listener_and_limits(void **state)
{
    cm_side_t a = {0};
    struct rdma_conn_param param;
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct sockaddr_in where;
    struct rdma_cm_id *l;
    uint8_t big[57] = {0};
    cm_ev_t e;

    (void)state;
    l = cm_listener(ch, &where);
    rdma_destroy_id(l); /* Nobody listens there any more. */
    cm_active(&a, &where);
    memset(&param, 0, sizeof(param));
    param.private_data = big;
    param.private_data_len = sizeof(big);
    errno = 0;
    assert_int_equal(rdma_connect(a.id, &param), -1); /* The REQ holds 56 bytes. */
    assert_int_equal(errno, EINVAL);
    param.private_data_len = 56;
    assert_int_equal(rdma_connect(a.id, &param), 0);
    cm_expect(a.ch, RDMA_CM_EVENT_REJECTED, &e);
    assert_int_equal(e.status, 8); /* IB_CM_REJ_INVALID_SERVICE_ID */
    cm_side_free(&a);
    rdma_destroy_event_channel(ch);
}

/*
 * perftest -R binds its port a second time right after destroying the first
 * listener. The CM thread is then in poll() on that listener's fd (it waits
 * 100 ms at a time); the port must be free when rdma_destroy_id returns all
 * the same. Several rounds, so that some land in the middle of a poll.
 */
static void test_rebind_after_destroy(void **state)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct sockaddr_in where;
    struct rdma_cm_id *l, *again;
    int i;

    (void)state;
    assert_non_null(ch);
    l = cm_listener(ch, &where);
    for (i = 0; i < 5; i++) {
        usleep(20 * 1000); /* The thread is in poll() with the listener in its set. */
        assert_int_equal(rdma_destroy_id(l), 0);
        assert_int_equal(rdma_create_id(ch, &again, NULL, RDMA_PS_TCP), 0);
        assert_int_equal(rdma_bind_addr(again, (struct sockaddr *)&where), 0);
        assert_int_equal(rdma_listen(again, 8), 0);
        l = again;
    }
    rdma_destroy_id(l);
    rdma_destroy_event_channel(ch);
}

static void test_channel_nonblocking(void **state)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct pollfd pfd;
    struct rdma_cm_event *ev;
    struct rdma_cm_id *id;
    struct sockaddr_in dst;

    (void)state;
    assert_non_null(ch);
    assert_int_equal(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
    errno = 0;
    assert_int_equal(rdma_get_cm_event(ch, &ev), -1);
    assert_int_equal(errno, EAGAIN);
    pfd.fd = ch->fd;
    pfd.events = POLLIN;
    assert_int_equal(poll(&pfd, 1, 0), 0);
    memset(&dst, 0, sizeof(dst));
    dst.sin_family = AF_INET;
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    dst.sin_port = htons(9);
    assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
    assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000), 0);
    assert_int_equal(poll(&pfd, 1, CM_WAIT_MS), 1); /* Readable while an event waits... */
    assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
    assert_int_equal(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_int_equal(rdma_ack_cm_event(ev), 0);
    assert_int_equal(poll(&pfd, 1, 0), 0); /* ...and not after. */
    assert_string_equal(rdma_event_str(RDMA_CM_EVENT_UNREACHABLE), "RDMA_CM_EVENT_UNREACHABLE");
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
}

/* FAKEIBV_RDMA_CM_DEV names a missing file: as librdmacm without /dev/infiniband/rdma_cm. */
static void test_no_rdma_cm_device(void **state)
{
    int n = -1;

    (void)state;
    errno = 0;
    assert_null(rdma_create_event_channel());
    assert_int_equal(errno, ENODEV);
    assert_null(rdma_get_devices(&n));
    assert_int_equal(n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connect_accept_data_disconnect),
        cmocka_unit_test(test_reject_with_private_data),
        cmocka_unit_test(test_no_listener_and_limits),
        cmocka_unit_test(test_rebind_after_destroy),
        cmocka_unit_test(test_channel_nonblocking),
    };
    const struct CMUnitTest nodev[] = {
        cmocka_unit_test(test_no_rdma_cm_device),
    };

    /* The refused-REQ grace is for perftest's second listener; here it would only wait. */
    setenv("FAKEIBV_CM_NOLISTEN_RETRY_MS", "0", 0);
    if (getenv("FAKEIBV_RDMA_CM_DEV") != NULL)
        return cmocka_run_group_tests(nodev, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
