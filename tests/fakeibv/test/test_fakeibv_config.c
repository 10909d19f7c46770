/*
 * fakeibv unit tests, the environment interface. ctest runs this binary
 * with a non-default device model (see CMakeLists.txt):
 *   FAKEIBV_NDEV=2 FAKEIBV_NPORTS=2 FAKEIBV_LINK=eth FAKEIBV_MTU=1024
 *   FAKEIBV_SPEED=NDR FAKEIBV_WIDTH=2 FAKEIBV_MAX_QP_WR=64
 *   FAKEIBV_RETRY_TIMEOUT_MS=50 FAKEIBV_FAIL_MODIFY_QP=1:2:EAGAIN
 * and checks that the device reports exactly that, that RoCE addressing
 * (GRH, IPv4-mapped GIDs) connects ports of two devices, and that the env
 * fault and timeout knobs act.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

static struct fx fxd[2]; /* The two emulated devices. */

static int setup(void **state)
{
    int i;

    for (i = 0; i < 2; i++)
        if (fx_open_index(&fxd[i], i, 2, 64) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    int i;

    for (i = 0; i < 2; i++)
        fx_close(&fxd[i]);
    return 0;
}

static void test_model_from_env(void **state)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    struct ibv_gid_entry ge;
    union ibv_gid gid;
    uint16_t lids[4];
    int d, p, i, j;

    assert_string_equal(ibv_get_device_name(fxd[1].ctx->device), "fakeib1");
    for (d = 0; d < 2; d++) {
        assert_int_equal(ibv_query_device(fxd[d].ctx, &da), 0);
        assert_int_equal(da.phys_port_cnt, 2);
        assert_int_equal(da.max_qp_wr, 64);
        for (p = 1; p <= 2; p++) {
            assert_int_equal(ibv_query_port(fxd[d].ctx, p, &pa), 0);
            assert_int_equal(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
            assert_int_equal(pa.lid, 0); /* RoCE has no LIDs. */
            assert_int_equal(pa.active_mtu, IBV_MTU_1024);
            assert_int_equal(pa.active_speed, 128); /* NDR */
            assert_int_equal(pa.active_width, 16);  /* 2x */
            assert_int_equal(pa.gid_tbl_len, 4);
            lids[d * 2 + p - 1] = fakeibv_port_lid(fxd[d].ctx, p);
            /* Index 3: RoCE v2, IPv4-mapped 127.0.x.y carrying the LID. */
            assert_int_equal(ibv_query_gid_ex(fxd[d].ctx, p, 3, &ge, 0), 0);
            assert_int_equal(ge.gid_type, IBV_GID_TYPE_ROCE_V2);
            assert_int_equal(ge.gid.raw[10], 0xff);
            assert_int_equal(ge.gid.raw[11], 0xff);
            assert_int_equal(ge.gid.raw[12], 127);
            assert_int_equal((ge.gid.raw[14] << 8) | ge.gid.raw[15], lids[d * 2 + p - 1]);
            assert_int_equal(ibv_query_gid_ex(fxd[d].ctx, p, 2, &ge, 0), 0);
            assert_int_equal(ge.gid_type, IBV_GID_TYPE_ROCE_V1);
            assert_int_equal(ibv_query_gid(fxd[d].ctx, p, 0, &gid), 0);
            assert_int_equal(gid.raw[0], 0xfe);
        }
    }
    for (i = 0; i < 4; i++)
        for (j = i + 1; j < 4; j++)
            assert_int_not_equal(lids[i], lids[j]);
    {
        struct ibv_gid_entry all[16];

        assert_int_equal(ibv_query_gid_table(fxd[0].ctx, all, 16, 0), 8); /* 2 ports x 4 */
    }
}

static struct ibv_qp *mkqp(int d, uint32_t depth)
{
    struct ibv_qp_init_attr a;

    memset(&a, 0, sizeof(a));
    a.send_cq = a.recv_cq = fxd[d].cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = depth;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    return ibv_create_qp(fxd[d].pd, &a);
}

/* INIT -> RTR over RoCE: the address is a GRH naming the peer's GID. */
static int rtr_roce(struct ibv_qp *qp, int port, int is_global, const union ibv_gid *dgid,
                    uint32_t dqpn)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = (uint8_t)port;
    a.ah_attr.is_global = (uint8_t)is_global;
    a.ah_attr.grh.dgid = *dgid;
    a.ah_attr.grh.sgid_index = 3;
    a.ah_attr.grh.hop_limit = 64;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                     IBV_QP_MIN_RNR_TIMER);
}

static int init_port(struct ibv_qp *qp, int port)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = (uint8_t)port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS);
}

static void test_roce_between_devices_and_env_knobs(void **state)
{
    /* dev0 port 2 <-> dev1 port 1, addressed by IPv4-mapped GIDs. */
    struct ibv_qp *a = mkqp(0, 8), *b = mkqp(1, 8);
    union ibv_gid ga, gb;
    static char src[4096], dst[4096];
    struct ibv_mr *smr = ibv_reg_mr(fxd[0].pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *dmr = ibv_reg_mr(fxd[1].pd, dst, sizeof(dst),
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_wc wc;
    struct timespec t0;
    long ms;

    assert_non_null(a);
    assert_non_null(b);
    /* FAKEIBV_MAX_QP_WR=64. */
    errno = 0;
    assert_null(mkqp(0, 65));
    assert_int_equal(errno, EINVAL);
    assert_int_equal(ibv_query_gid(fxd[0].ctx, 2, 3, &ga), 0);
    assert_int_equal(ibv_query_gid(fxd[1].ctx, 1, 3, &gb), 0);
    /* FAKEIBV_FAIL_MODIFY_QP=1:2:EAGAIN: one passes, two fail, then fine. */
    assert_int_equal(init_port(a, 2), 0);
    assert_int_equal(init_port(b, 1), EAGAIN);
    assert_int_equal(init_port(b, 1), EAGAIN);
    assert_int_equal(init_port(b, 1), 0);
    /* RoCE without a GRH is rejected, as mlx5 does. */
    assert_int_equal(rtr_roce(a, 2, 0, &gb, b->qp_num), EINVAL);
    assert_int_equal(rtr_roce(a, 2, 1, &gb, b->qp_num), 0);
    assert_int_equal(rtr_roce(b, 1, 1, &ga, a->qp_num), 0);
    assert_int_equal(fx_to_rts(a, 0, 7, 7), 0); /* timeout 0: infinite unless the env says */
    assert_int_equal(fx_to_rts(b, 14, 7, 7), 0);
    memset(src, 0x3c, sizeof(src));
    assert_int_equal(fx_write(a, 1, IBV_WR_RDMA_WRITE, src, sizeof(src), smr->lkey,
                              (uintptr_t)dst, dmr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(fxd[0].cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(dst, src, sizeof(src));
    /* FAKEIBV_RETRY_TIMEOUT_MS=50 overrides the QP's (infinite) timeout. */
    assert_int_equal(fakeibv_inject(fxd[0].ctx, FAKEIBV_FAULT_QP_DROP, a->qp_num, 0, 0, 0), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(fx_write(a, 2, IBV_WR_RDMA_WRITE, src, 16, smr->lkey, (uintptr_t)dst,
                              dmr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(fxd[0].cq, &wc, 1, 5000), 1);
    ms = fx_ms_since(&t0);
    assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
    assert_true(ms >= 40 && ms < 2000);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_from_env),
        cmocka_unit_test(test_roce_between_devices_and_env_knobs),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
