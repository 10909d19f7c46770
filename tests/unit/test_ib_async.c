/*
 * Async events over fakeibv (FAKEIBV_NDEV=2 FAKEIBV_NPORTS=2): each reaches
 * the watches it concerns, in words, within a second; removal is final;
 * the threads end with fini.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <cmocka.h>

#include "core/config.h"
#include "ib/ib.h"
#include "test_ib_util.h"

/* fakeibv.h's kinds. */
#define FAKE_FAULT_QP_FATAL 17
#define FAKE_FAULT_PORT_ERR 18
#define FAKE_FAULT_PORT_ACTIVE 19
#define FAKE_FAULT_DEVICE_FATAL 20

typedef struct rec {
    ferry_ib_watch_t w;
    _Atomic int      calls;
    _Atomic int      in_fn, done;
    int              block_ms;    /* fn sleeps this long (to race removal against it). */
    int              remove_self; /* fn removes its own watch. */
    pthread_mutex_t  lock;
    char             what[256];
    int              fatal;
} rec_t;

static rec_t recs[3]; /* On fakeib0:1, fakeib0:2, fakeib1:1. */
static test_ib_inject_fn_t inject;
static int barriers;

static void rec_fn(ferry_ib_watch_t *w, const char *what, int fatal)
{
    rec_t *r = w->arg;

    atomic_store(&r->in_fn, 1);
    pthread_mutex_lock(&r->lock);
    snprintf(r->what, sizeof(r->what), "%s", what);
    r->fatal = fatal;
    pthread_mutex_unlock(&r->lock);
    if (r->block_ms > 0)
        test_ib_sleep_ms(r->block_ms);
    if (r->remove_self)
        ferry_ib_watch_remove(w);
    atomic_fetch_add(&r->calls, 1);
    atomic_store(&r->done, 1);
}

static int wait_calls(rec_t *r, int n)
{
    int i;

    for (i = 0; i < 100 && atomic_load(&r->calls) < n; i++)
        test_ib_sleep_ms(10);
    return atomic_load(&r->calls);
}

/*
 * Every event injected on hca before this one has been handled once it
 * returns: the HCA's thread reads them in order, and PORT_ACTIVE on port 2
 * logs a line of its own.
 */
static void barrier(ferry_ib_hca_t *hca)
{
    int want = test_ib_log_count(FERRY_LOG_INFO, "(IBV_EVENT_PORT_ACTIVE) on port 2") + 1, i;

    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ACTIVE, 2, 0, 0, 0), 0);
    for (i = 0; i < 100 && test_ib_log_count(FERRY_LOG_INFO, "(IBV_EVENT_PORT_ACTIVE) on port 2") <
                               want; i++)
        test_ib_sleep_ms(10);
    assert_int_equal(test_ib_log_count(FERRY_LOG_INFO, "(IBV_EVENT_PORT_ACTIVE) on port 2"), want);
    barriers++;
}

static int setup(void **state)
{
    ferry_config_t cfg;
    int i;

    (void)state;
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(ferry_ib_init(&cfg), FERRY_OK);
    assert_int_equal(ferry_ib_state.ndev, 4);
    inject = test_ib_inject_fn();
    assert_non_null(inject);
    test_ib_log_reset();
    for (i = 0; i < 3; i++) {
        memset(&recs[i], 0, sizeof(recs[i]));
        pthread_mutex_init(&recs[i].lock, NULL);
        recs[i].w.dev = &ferry_ib_state.devs[i];
        recs[i].w.fn = rec_fn;
        recs[i].w.arg = &recs[i];
        ferry_ib_watch_add(&recs[i].w);
    }
    return 0;
}

static int teardown(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < 3; i++)
        ferry_ib_watch_remove(&recs[i].w);
    ferry_ib_fini();
    return 0;
}

static void test_port_err_reaches_its_port(void **state)
{
    ferry_ib_hca_t *hca = &ferry_ib_state.hcas[0];
    char what[256], warn[512], info[512];

    (void)state;
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    assert_int_equal(wait_calls(&recs[0], 1), 1);
    snprintf(what, sizeof(what), "%s (IBV_EVENT_PORT_ERR) on port 1",
             ferry_ibv.event_type_str(IBV_EVENT_PORT_ERR));
    assert_string_equal(recs[0].what, what);
    assert_int_equal(recs[0].fatal, 0);
    assert_int_equal(atomic_load(&ferry_ib_state.devs[0].port_down), 1);
    snprintf(warn, sizeof(warn), "NET/ferry : ib fakeib0:1 async event %s; connections over it "
             "stall until the transport's retries run out; check the link (`ibstat`, cable, "
             "switch port)", what);
    assert_true(test_ib_log_has(FERRY_LOG_WARN, warn));
    /* Back up: the flag clears, nobody is called. */
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    barrier(hca);
    assert_int_equal(atomic_load(&ferry_ib_state.devs[0].port_down), 0);
    snprintf(info, sizeof(info), "NET/ferry : ib fakeib0:1 async event %s (IBV_EVENT_PORT_ACTIVE) "
             "on port 1: the port is back", ferry_ibv.event_type_str(IBV_EVENT_PORT_ACTIVE));
    assert_true(test_ib_log_has(FERRY_LOG_INFO, info));
    assert_int_equal(atomic_load(&recs[0].calls), 1);
    assert_int_equal(atomic_load(&recs[1].calls), 0);
    assert_int_equal(atomic_load(&recs[2].calls), 0);
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, NULL), 1);
}

static void test_qp_fatal_reaches_the_qps_watch(void **state)
{
    ferry_ib_hca_t *hca = &ferry_ib_state.hcas[0];
    struct ibv_qp_init_attr init;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    char what[256], warn[512];

    (void)state;
    cq = ferry_ibv.create_cq(hca->ctx, 4, NULL, NULL, 0);
    assert_non_null(cq);
    memset(&init, 0, sizeof(init));
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp = ferry_ibv.create_qp(hca->pd, &init);
    assert_non_null(qp);
    /* The second watch holds the QP; the first is on the same HCA without it. */
    recs[1].w.qpn[0] = 0xabcdef;
    recs[1].w.qpn[1] = qp->qp_num;
    recs[1].w.nqp = 2;
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_QP_FATAL, qp->qp_num, 0, 0, 0), 0);
    assert_int_equal(wait_calls(&recs[1], 1), 1);
    snprintf(what, sizeof(what), "%s (IBV_EVENT_QP_FATAL) on QP 0x%x",
             ferry_ibv.event_type_str(IBV_EVENT_QP_FATAL), qp->qp_num);
    assert_string_equal(recs[1].what, what);
    assert_int_equal(recs[1].fatal, 1);
    snprintf(warn, sizeof(warn), "NET/ferry : ib fakeib0:2 async event %s; the communicator "
             "using it fails", what);
    assert_true(test_ib_log_has(FERRY_LOG_WARN, warn));
    barrier(hca);
    assert_int_equal(atomic_load(&recs[0].calls), 0);
    ferry_ibv.destroy_qp(qp);
    ferry_ibv.destroy_cq(cq);
}

static void test_device_fatal_reaches_the_hca(void **state)
{
    ferry_ib_hca_t *hca = &ferry_ib_state.hcas[0];
    char what[256];

    (void)state;
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_DEVICE_FATAL, 0, 0, 0, 0), 0);
    assert_int_equal(wait_calls(&recs[0], 1), 1);
    assert_int_equal(wait_calls(&recs[1], 1), 1);
    snprintf(what, sizeof(what), "%s (IBV_EVENT_DEVICE_FATAL) on the device",
             ferry_ibv.event_type_str(IBV_EVENT_DEVICE_FATAL));
    assert_string_equal(recs[0].what, what);
    assert_string_equal(recs[1].what, what);
    assert_int_equal(recs[0].fatal, 1);
    assert_int_equal(atomic_load(&hca->fatal), 1);
    assert_int_equal(atomic_load(&ferry_ib_state.hcas[1].fatal), 0);
    barrier(&ferry_ib_state.hcas[1]);
    assert_int_equal(atomic_load(&recs[2].calls), 0);
    /* Exactly one WARN for the event, however many watches it reaches. */
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, what), 1);
}

static void test_removed_watch_is_not_called(void **state)
{
    ferry_ib_hca_t *hca = &ferry_ib_state.hcas[0];

    (void)state;
    ferry_ib_watch_remove(&recs[0].w);
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    barrier(hca);
    assert_int_equal(atomic_load(&recs[0].calls), 0);
    /* Removing twice is harmless. */
    ferry_ib_watch_remove(&recs[0].w);
}

static void test_remove_waits_for_a_running_fn(void **state)
{
    ferry_ib_hca_t *hca = &ferry_ib_state.hcas[0];
    int i;

    (void)state;
    recs[0].block_ms = 300;
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    for (i = 0; i < 100 && !atomic_load(&recs[0].in_fn); i++)
        test_ib_sleep_ms(10);
    assert_int_equal(atomic_load(&recs[0].in_fn), 1);
    ferry_ib_watch_remove(&recs[0].w);
    assert_int_equal(atomic_load(&recs[0].done), 1);
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    barrier(hca);
}

static void test_fn_may_remove_its_own_watch(void **state)
{
    ferry_ib_hca_t *hca = &ferry_ib_state.hcas[0];

    (void)state;
    recs[0].remove_self = 1;
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    assert_int_equal(wait_calls(&recs[0], 1), 1);
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    assert_int_equal(inject(hca->ctx, FAKE_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    barrier(hca);
    assert_int_equal(atomic_load(&recs[0].calls), 1);
    assert_int_equal(recs[0].w.linked, 0);
}

static void test_fini_ends_the_threads(void **state)
{
    ferry_config_t cfg;
    int before, during, after, named;

    (void)state;
    teardown(NULL);
    before = test_ib_threads(NULL, &named);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(ferry_ib_init(&cfg), FERRY_OK);
    during = test_ib_threads(NULL, &named);
    ferry_ib_fini();
    /* Threads of earlier tests' emulated QPs may still be on their way out: bounded wait. */
    for (int i = 0; i < 200 && (after = test_ib_threads(NULL, &named)) > before; i++)
        usleep(10000);
    assert_int_equal(during, before + 2);
    assert_int_equal(after, before);
    setup(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_port_err_reaches_its_port, setup, teardown),
        cmocka_unit_test_setup_teardown(test_qp_fatal_reaches_the_qps_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_fatal_reaches_the_hca, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_watch_is_not_called, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_waits_for_a_running_fn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fn_may_remove_its_own_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fini_ends_the_threads, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
