/*
 * fakeibv GPU-mode self-test (no NCCL): RDMA WRITE from host memory into
 * cudaMalloc memory, RDMA READ back (the 1-byte flush READ included), on a
 * QP connected to itself, through ibv_reg_mr on a device pointer and
 * through ibv_reg_dmabuf_mr with the device pointer as iova.
 * Prints "SELFTEST <case>: OK|FAIL ..." lines; exits 0 when all pass.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include "ferry/verbs_abi.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakeibv.h"

#define N (4u << 20)

static struct ibv_cq *cq;

static int post_wait(struct ibv_qp *qp, enum ibv_wr_opcode op, void *laddr, uint32_t len,
                     uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
    struct ibv_sge sge = { (uintptr_t)laddr, len, lkey };
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc;
    time_t t0 = time(NULL);
    int n;

    memset(&wr, 0, sizeof(wr));
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(qp, &wr, &bad) != 0)
        return -1;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) - t0 < 30)
        usleep(100);
    if (n != 1 || wc.status != IBV_WC_SUCCESS) {
        printf("  completion: n=%d status=%s\n", n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
        return -1;
    }
    return 0;
}

static int connect_self(struct ibv_context *ctx, struct ibv_qp *qp)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = qp->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = fakeibv_port_lid(ctx, 1);
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int run_case(const char *name, struct ibv_qp *qp, struct ibv_mr *hmr, char *hsrc,
                    char *hdst, struct ibv_mr *dmr, void *dptr)
{
    size_t i;

    for (i = 0; i < N; i++)
        hsrc[i] = (char)(i * 31 + 7);
    memset(hdst, 0, N);
    if (cudaMemset(dptr, 0, N) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        printf("SELFTEST %s: FAIL (cudaMemset)\n", name);
        return 0;
    }
    if (post_wait(qp, IBV_WR_RDMA_WRITE, hsrc, N, hmr->lkey, (uintptr_t)dptr, dmr->rkey) != 0) {
        printf("SELFTEST %s: FAIL (RDMA WRITE host -> GPU)\n", name);
        return 0;
    }
    if (post_wait(qp, IBV_WR_RDMA_READ, hdst, N, hmr->lkey, (uintptr_t)dptr, dmr->rkey) != 0 ||
        memcmp(hsrc, hdst, N) != 0) {
        printf("SELFTEST %s: FAIL (RDMA READ GPU -> host, or data mismatch)\n", name);
        return 0;
    }
    /* NCCL's flush: one byte READ from GPU memory into a host MR. */
    if (post_wait(qp, IBV_WR_RDMA_READ, hdst + N - 1, 1, hmr->lkey, (uintptr_t)dptr + 5,
                  dmr->rkey) != 0 || hdst[N - 1] != hsrc[5]) {
        printf("SELFTEST %s: FAIL (1-byte flush READ)\n", name);
        return 0;
    }
    printf("SELFTEST %s: OK (%u bytes each way through GPU memory)\n", name, N);
    return 1;
}

int main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_qp *qp;
    struct ibv_qp_init_attr ia;
    struct ibv_mr *hmr, *dmr;
    char *h;
    void *d;
    int ok = 1, fd;
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

    if (list == NULL || list[0] == NULL || strcmp(list[0]->name, "fakeib0") != 0) {
        printf("SELFTEST setup: FAIL (fakeib0 not found: is LD_LIBRARY_PATH the fakeibv lib dir?)\n");
        return 1;
    }
    if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&d, N) != cudaSuccess) {
        printf("SELFTEST setup: FAIL (cudaMalloc)\n");
        return 1;
    }
    ctx = ibv_open_device(list[0]);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &ia);
    h = malloc(2 * (size_t)N);
    hmr = ibv_reg_mr(pd, h, 2 * (size_t)N, acc);
    if (qp == NULL || hmr == NULL || connect_self(ctx, qp) != 0) {
        printf("SELFTEST setup: FAIL (QP/MR)\n");
        return 1;
    }
    dmr = ibv_reg_mr(pd, d, N, acc);
    if (dmr == NULL) {
        printf("SELFTEST reg_mr_gpu: FAIL (ibv_reg_mr on a device pointer)\n");
        ok = 0;
    } else {
        ok &= run_case("reg_mr_gpu", qp, hmr, h, h + N, dmr, d);
        ibv_dereg_mr(dmr);
    }
    /* The fake cannot map a dma-buf; a memfd named as tests/fakecuda's stands in for one. */
    fd = memfd_create("fakecuda-dmabuf", MFD_CLOEXEC);
    dmr = ibv_reg_dmabuf_mr(pd, 0, N, (uintptr_t)d, fd, acc);
    if (dmr == NULL) {
        printf("SELFTEST dmabuf_gpu: FAIL (ibv_reg_dmabuf_mr with iova = device pointer)\n");
        ok = 0;
    } else {
        ok &= run_case("dmabuf_gpu", qp, hmr, h, h + N, dmr, d);
        ibv_dereg_mr(dmr);
    }
    close(fd);
    ibv_destroy_qp(qp);
    ibv_dereg_mr(hmr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    cudaFree(d);
    printf("SELFTEST overall: %s\n", ok ? "OK" : "FAIL");
    return ok ? 0 : 1;
}
