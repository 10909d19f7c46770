/*
 * fakeibv_peer: the far end of the cross-process tests. It opens the fake
 * device, registers a 1 MiB buffer for remote read/write, prints
 * "<lid> <qpn> <addr> <rkey>", reads "<lid> <qpn>" of its peer, connects an
 * RC QP, prints "ready", then serves one-sided traffic until stdin closes
 * (or the test kills it to emulate a crashed peer).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "fakeibv_test_util.h"

int main(void)
{
    static char buf[1 << 20];
    struct fx f;
    struct ibv_mr *mr;
    struct ibv_qp *qp;
    unsigned lid, qpn;
    char line[64];

    if (fx_open(&f) != 0) {
        fprintf(stderr, "fakeibv_peer: cannot open fakeib0\n");
        return 1;
    }
    mr = ibv_reg_mr(f.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                IBV_ACCESS_REMOTE_READ);
    qp = fx_qp(&f, 16, 0);
    if (mr == NULL || qp == NULL) {
        fprintf(stderr, "fakeibv_peer: cannot create MR/QP\n");
        return 1;
    }
    printf("%u %u %" PRIu64 " %u\n", f.lid, qp->qp_num, (uint64_t)(uintptr_t)buf, mr->rkey);
    fflush(stdout);
    if (scanf("%u %u", &lid, &qpn) != 2 || fx_connect(qp, (uint16_t)lid, qpn, 7) != 0) {
        fprintf(stderr, "fakeibv_peer: cannot connect\n");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin) != NULL)
        ;
    ibv_destroy_qp(qp);
    ibv_dereg_mr(mr);
    fx_close(&f);
    return 0;
}
