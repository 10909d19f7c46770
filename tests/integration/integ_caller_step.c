/*
 * NCCL's thread reads one step per test() of a receive (src/socket/sock_stream.h,
 * FERRY_SOCK_CALLER_BURST). NCCL's proxy hands a received step to the GPU
 * only after test() returns done; a test() that went on to read the steps
 * that arrived behind it would hold that step back by their copies. Without
 * helper threads (NCCL_FERRY_THREADS=0, one stream), three 16 KiB messages
 * are sent and wait in the socket; test() on the first receive reads that
 * one and leaves the other two in the kernel (their buffers still poisoned);
 * each later test() reads its own. Data is checked byte for byte.
 *
 * With NCCL_FERRY_CALLER_RECV_CHUNKS=N (N < STEPS) the first test() reads
 * exactly N steps: the N-1 behind it arrive whole, the rest stay in the kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define STEPS     3
#define STEP_SIZE 16384

static int untouched(const unsigned char *buf, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (buf[i] != FIT_POISON)
            return 0;
    return 1;
}

static void wait_done(const fit_plugin_t *p, void *req, const char *what)
{
    double took;
    ncclResult_t rc = fit_wait(p, req, 10.0 * fit_time_scale(), &took);

    FIT_CHECK(rc == ncclSuccess, "%s: test returned %s", what, fit_result_str(rc));
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    static unsigned char sbuf[STEPS][STEP_SIZE], rbuf[STEPS][STEP_SIZE];
    void *ctx_l, *ctx_c, *listen_comm, *send_comm, *recv_comm, *smh, *rmh;
    void *sreq[STEPS], *rreq[STEPS];
    char handle[128], what[64];
    fit_plugin_t plugin;
    int i, k;

    const char *chunks_env = getenv("NCCL_FERRY_CALLER_RECV_CHUNKS");
    int burst = chunks_env != NULL ? atoi(chunks_env) : 1;

    fit_set_role("caller-step");
    FIT_CHECK(burst >= 1 && burst < STEPS, "NCCL_FERRY_CALLER_RECV_CHUNKS=%s: this test takes "
              "1..%d", chunks_env, STEPS - 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    fit_plugin_open(&plugin, path);
    ctx_l = fit_plugin_init(&plugin, 0x5151);
    ctx_c = fit_plugin_init(&plugin, 0x5252);
    memset(handle, 0, sizeof(handle));
    listen_comm = fit_listen(&plugin, ctx_l, fit_device(&plugin), handle);
    fit_connect_accept(&plugin, ctx_c, fit_device(&plugin), handle, listen_comm, &send_comm,
                       &recv_comm, NULL);
    FIT_NCCL(plugin.net->closeListen(listen_comm));
    FIT_NCCL(plugin.net->regMr(send_comm, sbuf, sizeof(sbuf), NCCL_PTR_HOST, &smh));
    FIT_NCCL(plugin.net->regMr(recv_comm, rbuf, sizeof(rbuf), NCCL_PTR_HOST, &rmh));
    memset(rbuf, FIT_POISON, sizeof(rbuf));
    for (i = 0; i < STEPS; i++) {
        void *data = rbuf[i];
        size_t size = STEP_SIZE;
        int tag = 7;

        rreq[i] = NULL;
        FIT_NCCL(plugin.net->irecv(recv_comm, 1, &data, &size, &tag, &rmh, NULL, &rreq[i]));
        FIT_CHECK(rreq[i] != NULL, "irecv %d returned no request", i);
    }
    for (i = 0; i < STEPS; i++) {
        fit_fill(sbuf[i], STEP_SIZE, 7000 + (uint64_t)i);
        sreq[i] = NULL;
        FIT_NCCL(plugin.net->isend(send_comm, sbuf[i], STEP_SIZE, 7, smh, NULL, &sreq[i]));
        FIT_CHECK(sreq[i] != NULL, "isend %d returned no request", i);
    }
    for (i = 0; i < STEPS; i++) {
        snprintf(what, sizeof(what), "isend %d", i);
        wait_done(&plugin, sreq[i], what);
    }
    /*
     * Every byte is in the receiver's socket now; each test() takes its own
     * step, or with a burst of N the first takes N and the others are done.
     */
    for (i = 0; i < STEPS; i++) {
        snprintf(what, sizeof(what), "irecv %d", i);
        wait_done(&plugin, rreq[i], what);
        snprintf(what, sizeof(what), "step %d", i);
        fit_check_pattern(rbuf[i], STEP_SIZE, 7000 + (uint64_t)i, what);
        if (burst > 1 && i > 0)
            continue;
        for (k = i + 1; k < STEPS; k++) {
            if (k < i + burst) {
                snprintf(what, sizeof(what), "step %d, read ahead by test() on step %d", k, i);
                fit_check_pattern(rbuf[k], STEP_SIZE, 7000 + (uint64_t)k, what);
                continue;
            }
            FIT_CHECK(untouched(rbuf[k], STEP_SIZE),
                      "test() on step %d also read step %d: NCCL's thread went on past the "
                      "%d step(s) it may read per call", i, k, burst);
        }
    }
    FIT_NCCL(plugin.net->deregMr(send_comm, smh));
    FIT_NCCL(plugin.net->deregMr(recv_comm, rmh));
    FIT_NCCL(plugin.net->closeSend(send_comm));
    FIT_NCCL(plugin.net->closeRecv(recv_comm));
    FIT_NCCL(plugin.net->finalize(ctx_l));
    FIT_NCCL(plugin.net->finalize(ctx_c));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&plugin);
    if (burst == 1)
        fit_pass("NCCL's thread read one 16 KiB step per test(), the later ones left in the socket");
    else
        fit_pass("NCCL's thread read the first %d 16 KiB steps in one test(), the last left in "
                 "the socket", burst);
    printf("integ_caller_step: all checks passed\n");
    return 0;
}
