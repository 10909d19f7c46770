/*
 * NCCL's thread reads at most NCCL_FERRY_CALLER_RECV_CHUNKS chunks (default
 * 1) per test() of a receive, and its call ends at the chunk that completes a
 * message (src/socket/sock_stream.h, FERRY_SOCK_CALLER_BURST). NCCL's proxy
 * hands a received step to the GPU only after test() returns done; a test()
 * that went on to read the steps that arrived behind it would hold that step
 * back by their copies. Without helper threads (NCCL_FERRY_THREADS=0, one
 * stream), three 16 KiB messages are sent and wait in the receiver's socket.
 * The first test() on the first receive reads min(N, C) of its C chunks
 * (NCCL_FERRY_CHUNK_SIZE sets C), byte for byte, the rest of that message
 * still poisoned, and reports done only when that was all of it. Each later
 * receive is read by its own test()s: after a message is done, the ones
 * behind it are still poisoned, whatever N.
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

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);

    return v != NULL ? atoi(v) : dflt;
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

    int burst = env_int("NCCL_FERRY_CALLER_RECV_CHUNKS", 1);
    int chunk = env_int("NCCL_FERRY_CHUNK_SIZE", STEP_SIZE);
    int nchunks, first, done = 0, got = 0;

    fit_set_role("caller-step");
    FIT_CHECK(burst >= 1 && chunk >= 4096 && STEP_SIZE % chunk == 0,
              "NCCL_FERRY_CALLER_RECV_CHUNKS=%d, NCCL_FERRY_CHUNK_SIZE=%d: this test takes 1.. "
              "chunks and a chunk of 4 KiB or more that divides %d", burst, chunk, STEP_SIZE);
    nchunks = STEP_SIZE / chunk;
    first = burst < nchunks ? burst : nchunks;
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
     * Every byte is in the receiver's socket now. One test() on the first
     * receive reads min(N, C) chunks of it and nothing of the others.
     */
    FIT_NCCL(plugin.net->test(rreq[0], &done, &got));
    fit_check_pattern(rbuf[0], (size_t)first * chunk, 7000, "step 0, the chunks one test() read");
    FIT_CHECK(untouched(rbuf[0] + (size_t)first * chunk, STEP_SIZE - (size_t)first * chunk),
              "one test() on step 0 read more than %d of its %d chunk(s) of %d bytes: NCCL's "
              "thread went past the chunks it may read per call", first, nchunks, chunk);
    FIT_CHECK(done == (first == nchunks), "one test() on step 0 read %d of %d chunk(s) and "
              "reported done=%d", first, nchunks, done);
    for (i = 0; i < STEPS; i++) {
        snprintf(what, sizeof(what), "irecv %d", i);
        if (i > 0 || !done) /* A request reported done is gone. */
            wait_done(&plugin, rreq[i], what);
        snprintf(what, sizeof(what), "step %d", i);
        fit_check_pattern(rbuf[i], STEP_SIZE, 7000 + (uint64_t)i, what);
        for (k = i + 1; k < STEPS; k++)
            FIT_CHECK(untouched(rbuf[k], STEP_SIZE),
                      "test() on step %d also read step %d: NCCL's thread went on past the "
                      "message it completed (up to %d chunk(s) per call)", i, k, burst);
    }
    FIT_NCCL(plugin.net->deregMr(send_comm, smh));
    FIT_NCCL(plugin.net->deregMr(recv_comm, rmh));
    FIT_NCCL(plugin.net->closeSend(send_comm));
    FIT_NCCL(plugin.net->closeRecv(recv_comm));
    FIT_NCCL(plugin.net->finalize(ctx_l));
    FIT_NCCL(plugin.net->finalize(ctx_c));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&plugin);
    fit_pass("NCCL's thread read %d of a 16 KiB step's %d chunk(s) in one test() (up to %d "
             "per call), and each test() stopped at the message it completed", first, nchunks,
             burst);
    printf("integ_caller_step: all checks passed\n");
    return 0;
}
