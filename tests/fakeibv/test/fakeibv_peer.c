/*
 * fakeibv_peer: the far end of the cross-process tests. It opens the fake
 * device, registers a 1 MiB buffer for remote read/write, prints
 * "<lid> <qpn> <addr> <rkey>", reads "<lid> <qpn>" of its peer, connects an
 * RC QP, prints "ready", then serves one-sided traffic until stdin closes
 * (or the test kills it to emulate a crashed peer). Commands on stdin, one
 * a line, each answered with one line:
 *   "portdown"               injects FAKEIBV_FAULT_PORT_ERR on its port 1: "down"
 *   "write <addr> <rkey> <len>"  a signalled RDMA WRITE of its buffer there,
 *                            polled for 10 s at most: "wc <status> <ms>"
 *                            (status -1: no completion)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

static void peer_command(struct fx *f, struct ibv_qp *qp, struct ibv_mr *mr, const char *line)
{
    uint64_t addr;
    unsigned rkey, len;
    struct ibv_wc wc;
    struct timespec t0;

    if (strncmp(line, "portdown", 8) == 0) {
        printf(fakeibv_inject(f->ctx, FAKEIBV_FAULT_PORT_ERR, 1, 0, 0, 0) == 0 ? "down\n"
                                                                                : "error\n");
    } else if (sscanf(line, "write %" SCNu64 " %u %u", &addr, &rkey, &len) == 3) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (fx_write(qp, 1, IBV_WR_RDMA_WRITE, mr->addr, len, mr->lkey, addr, rkey,
                     IBV_SEND_SIGNALED, 0) != 0 || fx_poll(f->cq, &wc, 1, 10000) != 1)
            printf("wc -1 %ld\n", fx_ms_since(&t0));
        else
            printf("wc %d %ld\n", (int)wc.status, fx_ms_since(&t0));
    } else {
        return;
    }
    fflush(stdout);
}

int main(void)
{
    static char buf[1 << 20];
    struct fx f;
    struct ibv_mr *mr;
    struct ibv_qp *qp;
    unsigned lid, qpn;
    char line[128];

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
        peer_command(&f, qp, mr, line);
    ibv_destroy_qp(qp);
    ibv_dereg_mr(mr);
    fx_close(&f);
    return 0;
}
