/*
 * Case off (NCCL_FERRY_RMA=0): ferry's RMA plugin declines, so NCCL takes
 * its own RMA. Every rank: init refuses with ncclInvalidUsage and no
 * context, devices() says 0, the INFO line names the variable (once, not as
 * a WARN). Rank 0 first opens a net comm pair of the same library, and
 * after the refusal moves messages over it, byte for byte: the declined RMA
 * init takes nothing from the net plugin.
 */
#include <stdio.h>
#include <string.h>

#include "test_rma.h"

#define OFF_MSGS 8

void case_off(void)
{
    static const size_t sizes[OFF_MSGS] = {0, 1, 4096, 65536, 1 << 20, 3, 8 << 20, 17};
    fit_plugin_t p;
    void *net_ctx = NULL, *lc, *send = NULL, *recv = NULL, *ctx = (void *)1;
    char handle[NCCL_NET_HANDLE_MAXSIZE], line[512];
    int ndev = -1, at;

    if (my_rank == 0) {
        fit_plugin_open(&p, plugin_path);
        net_ctx = fit_plugin_init(&p, 0x0ff0);
        lc = fit_listen(&p, net_ctx, 0, handle);
        fit_connect_accept(&p, net_ctx, 0, handle, lc, &send, &recv, NULL);
        FIT_NCCL(p.net->closeListen(lc));
    }
    FIT_CHECK(rma_init(&ctx) == ncclInvalidUsage, "RMA init with NCCL_FERRY_RMA=0 did not "
              "decline with ncclInvalidUsage");
    FIT_CHECK(ctx == NULL, "the declined RMA init left a context (%p)", ctx);
    FIT_NCCL(use_v13 ? v13->devices(&ndev) : v14->devices(&ndev));
    FIT_CHECK(ndev == 0, "devices() says %d after the declined init, not 0", ndev);
    at = fit_log_find(0, NCCL_LOG_INFO, "RMA init: NCCL_FERRY_RMA=0", "NCCL carries its one-sided",
                      "net plugin is unaffected", line, sizeof(line));
    FIT_CHECK(at >= 0, "no INFO line saying why the RMA plugin declined");
    printf("rank %d: %s\n", my_rank, line);
    ctx = (void *)1;
    FIT_CHECK(rma_init(&ctx) == ncclInvalidUsage && ctx == NULL, "a second RMA init did not "
              "decline the same way");
    FIT_CHECK(fit_log_find(at + 1, NCCL_LOG_INFO, "RMA init: NCCL_FERRY_RMA=0", NULL, NULL, NULL,
                           0) < 0, "the decline was said twice (NCCL asks every communicator)");
    if (my_rank == 0) {
        fit_xfer_opts_t o = {0};
        fit_xfer_result_t r;

        o.sizes = sizes;
        o.nmsgs = OFF_MSGS;
        o.depth = 4;
        o.seed = 0x0ff;
        o.seconds = 30.0 * fit_time_scale();
        fit_xfer_inproc(&p, send, recv, &o, &r);
        fit_xfer_expect_ok(&r, "net messages after the declined RMA init");
        FIT_NCCL(p.net->closeSend(send));
        FIT_NCCL(p.net->closeRecv(recv));
        fit_plugin_close(&p);
        printf("rank 0: %d net messages byte for byte after the decline\n", r.done[1]);
    }
    fit_log_check_clean("off case");
}
