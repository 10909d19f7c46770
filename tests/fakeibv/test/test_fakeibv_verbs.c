/*
 * fakeibv unit tests, control path: device model, QP state machine, MR
 * rules, verb fault injection, async events, completion channels, and the
 * symbol versions consumers resolve with dlvsym.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

static int setup(void **state)
{
    static struct fx f;

    if (fx_open(&f) != 0)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fx_close(*state);
    return 0;
}

static void test_device_model(void **state)
{
    struct fx *f = *state;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    union ibv_gid gid;
    struct ibv_gid_entry ge;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);

    assert_non_null(list);
    assert_int_equal(n, 1);
    assert_string_equal(ibv_get_device_name(list[0]), "fakeib0");
    ibv_free_device_list(list);
    assert_int_equal(ibv_query_device(f->ctx, &da), 0);
    assert_int_equal(da.phys_port_cnt, 1);
    assert_true(da.max_qp_wr > 0);
    /* ibv_query_port is a macro; this goes through verbs_context. */
    assert_int_equal(ibv_query_port(f->ctx, 1, &pa), 0);
    assert_int_equal(pa.state, IBV_PORT_ACTIVE);
    assert_int_equal(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    assert_int_equal(pa.lid, f->lid);
    assert_int_equal(pa.active_mtu, IBV_MTU_4096);
    assert_int_not_equal(ibv_query_port(f->ctx, 2, &pa), 0);
    assert_int_equal(ibv_query_gid(f->ctx, 1, 0, &gid), 0);
    assert_int_equal(gid.raw[0], 0xfe);
    assert_int_equal((gid.raw[14] << 8) | gid.raw[15], f->lid);
    assert_int_equal(ibv_query_gid_ex(f->ctx, 1, 0, &ge, 0), 0);
    assert_int_equal(ge.gid_type, IBV_GID_TYPE_IB);
}

static void test_qp_state_machine(void **state)
{
    struct fx *f = *state;
    struct ibv_qp *qp = fx_qp(f, 8, 64);
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    struct ibv_recv_wr rwr = { .wr_id = 1 }, *rbad;
    char buf[8];

    assert_non_null(qp);
    assert_int_equal(qp->state, IBV_QPS_RESET);
    /* Receives are illegal in RESET (C10-97.2.1); sends before RTS. */
    assert_int_equal(ibv_post_recv(qp, &rwr, &rbad), EINVAL);
    assert_ptr_equal(rbad, &rwr);
    /* RESET -> RTR skips INIT. */
    assert_int_equal(fx_to_rtr(qp, f->lid, qp->qp_num, 1), EINVAL);
    /* RESET -> INIT without the required ACCESS_FLAGS. */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);
    /* ... or with a bit that transition does not allow. */
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                               IBV_QP_ACCESS_FLAGS | IBV_QP_TIMEOUT),
                     EINVAL);
    /* Bad port number. */
    a.port_num = 9;
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                               IBV_QP_ACCESS_FLAGS),
                     EINVAL);
    assert_int_equal(fx_to_init(qp, IBV_ACCESS_REMOTE_WRITE), 0);
    assert_int_equal(qp->state, IBV_QPS_INIT);
    assert_int_equal(ibv_post_recv(qp, &rwr, &rbad), 0);
    assert_int_equal(fx_write(qp, 1, IBV_WR_RDMA_WRITE, buf, 0, 0, 0, 0, 0, 0), EINVAL);
    /* INIT -> RTS skips RTR. */
    assert_int_equal(fx_to_rts(qp, FX_TIMEOUT, FX_RETRY, 7), EINVAL);
    /* INIT -> RTR missing MIN_RNR_TIMER. */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;
    a.ah_attr.dlid = f->lid;
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                               IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                               IBV_QP_MAX_DEST_RD_ATOMIC),
                     EINVAL);
    assert_int_equal(fx_to_rtr(qp, f->lid, qp->qp_num, 12), 0);
    assert_int_equal(qp->state, IBV_QPS_RTR);
    assert_int_equal(fx_write(qp, 1, IBV_WR_RDMA_WRITE, buf, 0, 0, 0, 0, 0, 0), EINVAL);
    assert_int_equal(fx_to_rts(qp, 14, 3, 6), 0);
    assert_int_equal(qp->state, IBV_QPS_RTS);
    assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
    assert_int_equal(a.qp_state, IBV_QPS_RTS);
    assert_int_equal(a.timeout, 14);
    assert_int_equal(a.retry_cnt, 3);
    assert_int_equal(a.rnr_retry, 6);
    assert_int_equal(a.dest_qp_num, qp->qp_num);
    assert_int_equal(ia.cap.max_send_wr, 8);
    /* RTS -> RTS may change access flags, not the path MTU. */
    memset(&a, 0, sizeof(a));
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_ACCESS_FLAGS), 0);
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_PATH_MTU), EINVAL);
    /* Any state -> ERR, with no attribute but the state; the posted
     * receive flushes. */
    a.qp_state = IBV_QPS_ERR;
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT), EINVAL);
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    assert_int_equal(qp->state, IBV_QPS_ERR);
    {
        struct ibv_wc wc;

        assert_int_equal(fx_poll(f->cq, &wc, 1, 1000), 1);
        assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
        assert_int_equal(wc.wr_id, 1);
    }
    /* ERR -> RTS is not a transition; ERR -> RESET -> INIT is. */
    assert_int_equal(fx_to_rts(qp, FX_TIMEOUT, FX_RETRY, 7), EINVAL);
    a.qp_state = IBV_QPS_RESET;
    assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    assert_int_equal(qp->state, IBV_QPS_RESET);
    assert_int_equal(fx_to_init(qp, 0), 0);
    assert_int_equal(ibv_destroy_qp(qp), 0);
}

static void test_mr_rules(void **state)
{
    struct fx *f = *state;
    static char buf[4096];
    struct ibv_mr *mr, *mr2;

    /* Remote write requires local write (IB spec). */
    errno = 0;
    assert_null(ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE));
    assert_int_equal(errno, EINVAL);
    mr = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    assert_non_null(mr);
    assert_int_not_equal(mr->lkey, 0);
    assert_int_equal(mr->lkey, mr->rkey);
    assert_ptr_equal(mr->addr, buf);
    assert_int_equal(mr->length, sizeof(buf));
    /* A variable access mask routes through ibv_reg_mr_iova2. */
    mr2 = ibv_reg_mr_iova2(f->pd, buf, 64, 0x1000, IBV_ACCESS_LOCAL_WRITE |
                                                       IBV_ACCESS_RELAXED_ORDERING);
    assert_non_null(mr2);
    assert_int_not_equal(mr2->lkey, mr->lkey);
    assert_int_equal(ibv_dereg_mr(mr2), 0);
    assert_int_equal(ibv_dereg_mr(mr), 0);
}

static void test_dmabuf_probe(void **state)
{
    struct fx *f = *state;

    /* NCCL's probe: fd -1 must fail with EBADF, meaning "supported". */
    errno = 0;
    assert_null(ibv_reg_dmabuf_mr(f->pd, 0, 0, 0, -1, 0));
    assert_int_equal(errno, EBADF);
}

static void test_verb_faults(void **state)
{
    struct fx *f = *state;
    static char buf[64];
    struct ibv_mr *mr;
    struct ibv_qp *qp;

    assert_int_equal(fakeibv_inject(NULL, FAKEIBV_FAULT_REG_MR, 0, 1, 1, ENOSPC), 0);
    mr = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    assert_non_null(mr);
    errno = 0;
    assert_null(ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));
    assert_int_equal(errno, ENOSPC);
    ibv_dereg_mr(mr);
    mr = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    assert_non_null(mr);
    ibv_dereg_mr(mr);

    assert_int_equal(fakeibv_inject(NULL, FAKEIBV_FAULT_CREATE_QP, 0, 0, 1, 0), 0);
    errno = 0;
    assert_null(fx_qp(f, 4, 0));
    assert_int_equal(errno, ENOMEM);
    qp = fx_qp(f, 4, 0);
    assert_non_null(qp);

    /* NCCL retries ETIMEDOUT from modify_qp: two failures, then success. */
    assert_int_equal(fakeibv_inject(NULL, FAKEIBV_FAULT_MODIFY_QP, 0, 0, 2, 0), 0);
    assert_int_equal(fx_to_init(qp, 0), ETIMEDOUT);
    assert_int_equal(fx_to_init(qp, 0), ETIMEDOUT);
    assert_int_equal(fx_to_init(qp, 0), 0);
    assert_int_equal(ibv_destroy_qp(qp), 0);

    assert_int_equal(fakeibv_inject(NULL, FAKEIBV_FAULT_CREATE_CQ, 0, 0, 1, EAGAIN), 0);
    assert_null(ibv_create_cq(f->ctx, 4, NULL, NULL, 0));
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(fakeibv_inject(NULL, (enum fakeibv_fault_kind)999, 0, 0, 1, 0), EINVAL);
}

static void test_async_events(void **state)
{
    struct fx *f = *state;
    struct ibv_async_event ev;
    struct ibv_port_attr pa;
    struct ibv_qp *qp = fx_qp(f, 4, 0);
    struct ibv_wc wc;
    struct ibv_recv_wr rwr = { .wr_id = 77 }, *rbad;

    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_PORT_ERR);
    assert_int_equal(ev.element.port_num, 1);
    ibv_ack_async_event(&ev);
    assert_int_equal(ibv_query_port(f->ctx, 1, &pa), 0);
    assert_int_equal(pa.state, IBV_PORT_DOWN);
    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    assert_int_equal(ibv_query_port(f->ctx, 1, &pa), 0);
    assert_int_equal(pa.state, IBV_PORT_ACTIVE);

    assert_non_null(qp);
    assert_int_equal(fx_to_init(qp, 0), 0);
    assert_int_equal(ibv_post_recv(qp, &rwr, &rbad), 0);
    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_QP_FATAL, qp->qp_num, 0, 0, 0), 0);
    assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_QP_FATAL);
    assert_ptr_equal(ev.element.qp, qp);
    assert_int_equal(fx_state(qp), IBV_QPS_ERR);
    assert_int_equal(qp->state, IBV_QPS_INIT); /* Written by modify_qp only. */
    assert_int_equal(fx_poll(f->cq, &wc, 1, 1000), 1);
    assert_int_equal(wc.wr_id, 77);
    assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_QP_FATAL, 0xabcdef, 0, 0, 0), ENOENT);
    ibv_ack_async_event(&ev);
    assert_int_equal(ibv_destroy_qp(qp), 0);
}

struct destroy_arg {
    struct ibv_qp *qp;
    int rc;
    _Atomic int done;
};

static void *destroy_main(void *p)
{
    struct destroy_arg *a = p;

    a->rc = ibv_destroy_qp(a->qp);
    atomic_store(&a->done, 1);
    return NULL;
}

/*
 * rdma-core's contract for events about a QP: ibv_destroy_qp drops those not
 * yet read, and blocks until the ones handed out are acknowledged (a consumer
 * may still be reading ev.element.qp).
 */
static void test_async_qp_destroy(void **state)
{
    struct fx *f = *state;
    struct ibv_async_event ev;
    struct ibv_qp *qp = fx_qp(f, 4, 0);
    struct destroy_arg a = { 0 };
    pthread_t t;

    /* Raised, never read: it leaves with its QP; the next event is the port's. */
    assert_non_null(qp);
    assert_int_equal(fx_to_init(qp, 0), 0);
    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_QP_FATAL, qp->qp_num, 0, 0, 0), 0);
    assert_int_equal(ibv_destroy_qp(qp), 0);
    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_PORT_ERR);
    ibv_ack_async_event(&ev);
    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_PORT_ACTIVE);

    /* Read and not acknowledged: destroy waits for the acknowledgement. */
    a.qp = fx_qp(f, 4, 0);
    assert_non_null(a.qp);
    assert_int_equal(fx_to_init(a.qp, 0), 0);
    assert_int_equal(fakeibv_inject(f->ctx, FAKEIBV_FAULT_QP_FATAL, a.qp->qp_num, 0, 0, 0), 0);
    assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
    assert_ptr_equal(ev.element.qp, a.qp);
    assert_int_equal(pthread_create(&t, NULL, destroy_main, &a), 0);
    usleep(200000);
    assert_int_equal(atomic_load(&a.done), 0);
    assert_int_equal(ev.element.qp->qp_num, a.qp->qp_num); /* Still there to read. */
    ibv_ack_async_event(&ev);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(atomic_load(&a.done), 1);
    assert_int_equal(a.rc, 0);
}

static void test_cq_rules(void **state)
{
    struct fx *f = *state;
    struct ibv_comp_channel *ch = ibv_create_comp_channel(f->ctx);
    struct ibv_cq *cq, *ev_cq;
    struct ibv_qp *qp;
    struct ibv_qp_init_attr a;
    struct ibv_wc wc;
    void *ev_ctx;
    static char buf[16];
    struct ibv_mr *mr = ibv_reg_mr(f->pd, buf, sizeof(buf),
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

    assert_non_null(ch);
    assert_non_null(mr);
    cq = ibv_create_cq(f->ctx, 4, (void *)0x1234, ch, 0);
    assert_non_null(cq);
    assert_int_equal(ibv_destroy_comp_channel(ch), EBUSY);
    memset(&a, 0, sizeof(a));
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    qp = ibv_create_qp(f->pd, &a);
    assert_non_null(qp);
    assert_int_equal(ibv_destroy_cq(cq), EBUSY); /* The QP still uses it. */
    assert_int_equal(fx_connect(qp, f->lid, qp->qp_num, 7), 0);
    assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
    assert_int_equal(fx_write(qp, 5, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf + 8,
                              mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    assert_ptr_equal(ev_cq, cq);
    assert_ptr_equal(ev_ctx, (void *)0x1234);
    ibv_ack_cq_events(cq, 1);
    assert_int_equal(fx_poll(cq, &wc, 1, 1000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.opcode, IBV_WC_RDMA_WRITE);
    assert_int_equal(wc.wr_id, 5);
    assert_int_equal(ibv_destroy_qp(qp), 0);
    assert_int_equal(ibv_destroy_cq(cq), 0);
    assert_int_equal(ibv_destroy_comp_channel(ch), 0);
    ibv_dereg_mr(mr);
}

static void test_dlvsym_versions(void **state)
{
    /* The test links the fake; a consumer dlopen()ing the SONAME (as NCCL
     * does) must get this very library, not the system one. */
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);

    assert_non_null(h);
    assert_non_null(dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1"));
    assert_non_null(dlvsym(h, "ibv_create_comp_channel", "IBVERBS_1.0"));
    assert_non_null(dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8"));
    assert_non_null(dlvsym(h, "ibv_query_ece", "IBVERBS_1.10"));
    assert_non_null(dlvsym(h, "_ibv_query_gid_ex", "IBVERBS_1.11"));
    assert_non_null(dlvsym(h, "ibv_reg_dmabuf_mr", "IBVERBS_1.12"));
    assert_non_null(dlvsym(h, "fakeibv_inject", "FAKEIBV_1.0"));
    assert_ptr_equal(dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1"),
                     (void *)ibv_get_device_list);
    /* Internal helpers must stay hidden. */
    assert_null(dlsym(h, "fakeibv_config"));
    dlclose(h);
}

/* NCCL falls back to the exported ibv_query_port, which takes the old
 * (compat) struct: it must fill that much and not a byte more. */
static void test_compat_query_port(void **state)
{
    struct fx *f = *state;
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*qp_compat)(struct ibv_context *, uint8_t, void *);
    union {
        struct ibv_port_attr a;
        unsigned char raw[sizeof(struct ibv_port_attr) + 16];
    } u;
    size_t end = offsetof(struct ibv_port_attr, port_cap_flags2), i;

    assert_non_null(h);
    qp_compat = (int (*)(struct ibv_context *, uint8_t, void *))dlvsym(h, "ibv_query_port",
                                                                       "IBVERBS_1.1");
    assert_non_null(qp_compat);
    memset(&u, 0xee, sizeof(u));
    assert_int_equal(qp_compat(f->ctx, 1, &u), 0);
    assert_int_equal(u.a.state, IBV_PORT_ACTIVE);
    assert_int_equal(u.a.lid, f->lid);
    for (i = end; i < sizeof(u.raw); i++)
        assert_int_equal(u.raw[i], 0xee);
    dlclose(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_model),
        cmocka_unit_test(test_qp_state_machine),
        cmocka_unit_test(test_mr_rules),
        cmocka_unit_test(test_dmabuf_probe),
        cmocka_unit_test(test_verb_faults),
        cmocka_unit_test(test_async_events),
        cmocka_unit_test(test_async_qp_destroy),
        cmocka_unit_test(test_cq_rules),
        cmocka_unit_test(test_dlvsym_versions),
        cmocka_unit_test(test_compat_query_port),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
