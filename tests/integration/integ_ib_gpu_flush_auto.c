/*
 * integ_ib_gpu --mode autoflush: NCCL_FERRY_IB_FLUSH=auto's choice between
 * the 1-byte RDMA READ and cuFlushGPUDirectRDMAWrites, seen from outside:
 * each method's count after the trial, the INFO line naming the winner with
 * both medians, the chosen CUDA flush failing later, closeRecv's summary.
 * A file of its own since it tests the choice, not the data path the other
 * modes share; it runs on integ_ib_gpu_env.c's helpers (integ_ib_gpu.h) and
 * counts both methods' flushes itself (gg_reads_flush -1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib/ib_comm.h"
#include "integ_ib_gpu.h"

/*
 * NCCL_FERRY_IB_FLUSH=auto (the default): the comm's first flushes take turns,
 * READ first, FERRY_IB_FLUSH_TRIAL of each; then the one with the lower median
 * flushes alone. FIT_AUTO_EXPECT names the case: cuda (fakecuda's flush costs
 * next to nothing, fakeibv's READ a round trip through its threads), read
 * (FAKECUDA_FLUSH_DELAY_US makes the CUDA flush slow), cudafail (the first
 * CUDA flush fails: it and every later flush go as READs, no WARN).
 */
void gg_mode_autoflush(const char *path)
{
    const char *expect = getenv("FIT_AUTO_EXPECT");
    int trial = FERRY_IB_FLUSH_TRIAL, after = 5, i, n;
    int fail = expect != NULL && strcmp(expect, "cudafail") == 0;
    int cuda_wins = expect != NULL && strcmp(expect, "cuda") == 0;
    long f0, want_cuda;
    uint64_t want_reads;
    double mine = 0, other = 0;
    size_t sizes[32];
    gg_env_t e;
    gg_buf_t sg, rg;
    char line[1024], needle[256];
    uint32_t qpn;

    FIT_CHECK(expect != NULL && (fail || cuda_wins || strcmp(expect, "read") == 0),
              "FIT_AUTO_EXPECT must be cuda, read or cudafail");
    gg_reads_flush = -1;
    n = gg_sizes(sizes);
    gg_open(&e, path, 1);
    gg_check_props(&e, NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 0,
                   "flush auto (each receive comm times a 1-byte RDMA READ and "
                   "cuFlushGPUDirectRDMAWrites on its first flushes and keeps the cheaper)");
    gg_buf_open(&e.plugin, &sg, e.send_comm, 1, GG_SLOT);
    gg_buf_open(&e.plugin, &rg, e.recv_comm, 1, GG_SLOT);
    f0 = gg_cu.flushes();
    if (fail)
        gg_cu.fail_flush(700); /* The comm's first CUDA flush, its second flush. */
    for (i = 0; i < 2 * trial + after; i++)
        gg_one(&e, &sg, &rg, sizes[1 + i % (n - 1)], 600 + (uint64_t)i, "GPU->GPU (auto flush)");
    qpn = gg_flush_qpn();
    want_reads = fail ? (uint64_t)(2 * trial + after)
                      : (uint64_t)trial + (cuda_wins ? 0u : (uint64_t)after);
    want_cuda = fail ? 0 : trial + (cuda_wins ? after : 0);
    FIT_CHECK(gg_reads(qpn, NULL) == want_reads && gg_cu.flushes() - f0 == want_cuda,
              "%s: after %d flushes, %llu READs on flush QP 0x%x and %ld CUDA flushes; "
              "expected %llu and %ld", expect, 2 * trial + after,
              (unsigned long long)gg_reads(qpn, NULL), qpn, gg_cu.flushes() - f0,
              (unsigned long long)want_reads, want_cuda);
    if (fail) {
        FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "GDR flush by RDMA READ: NCCL_FERRY_IB_FLUSH=auto, "
                               "and the CUDA flush cannot run here: cuFlushGPUDirectRDMAWrites: "
                               "CUDA_ERROR_ILLEGAL_ADDRESS (700)", NULL, NULL, NULL, 0) >= 0,
                  "no INFO line saying the CUDA flush failed and READs flush instead");
        fit_pass("auto, the CUDA flush failing: that flush and every later one went as a READ "
                 "(%llu READs, data byte for byte), one INFO line with the CUDA error, no WARN",
                 (unsigned long long)want_reads);
    } else {
        snprintf(needle, sizeof(needle), "GDR flush by %s: median ",
                 cuda_wins ? "cuFlushGPUDirectRDMAWrites" : "RDMA READ");
        FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, needle, cuda_wins ? "for the RDMA READ, over 8 "
                               "flushes of each" : "for cuFlushGPUDirectRDMAWrites, over 8 "
                               "flushes of each", NULL, line, sizeof(line)) >= 0,
                  "no INFO line '%s...' naming the other method", needle);
        FIT_CHECK(sscanf(strstr(line, "median "), "median %lf us from iflush to done, against "
                         "%lf us", &mine, &other) == 2 && mine <= other,
                  "the chosen method's median is not the lower: '%s'", line);
        fit_pass("auto: %d flushes of each method (READ first, taking turns), then %d more by "
                 "%s alone, the one with the lower median (%.1f against %.1f us); data byte "
                 "for byte", trial, after, expect, mine, other);
    }
    if (cuda_wins) {
        /* The chosen CUDA flush failing later: that flush and the next go as READs. */
        gg_cu.fail_flush(700);
        for (i = 0; i < 2; i++)
            gg_one(&e, &sg, &rg, 4096 + (size_t)i, 700 + (uint64_t)i, "GPU->GPU (cuda failed)");
        want_reads += 2;
        FIT_CHECK(gg_reads(qpn, NULL) == want_reads && gg_cu.flushes() - f0 == want_cuda,
                  "after the chosen CUDA flush failed: %llu READs, %ld CUDA flushes; expected "
                  "%llu and %ld", (unsigned long long)gg_reads(qpn, NULL), gg_cu.flushes() - f0,
                  (unsigned long long)want_reads, want_cuda);
        FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "GDR flush by RDMA READ from now on: "
                               "cuFlushGPUDirectRDMAWrites: CUDA_ERROR_ILLEGAL_ADDRESS (700)",
                               "(NCCL_FERRY_IB_FLUSH=auto had chosen cuFlushGPUDirectRDMAWrites)",
                               NULL, NULL, 0) >= 0,
                  "no INFO line saying the chosen CUDA flush failed and READs took over");
        fit_pass("auto, the chosen CUDA flush failing later: that flush and the next went as "
                 "READs, data byte for byte, one INFO line, no WARN");
    }
    gg_close_comms(&e);
    snprintf(needle, sizeof(needle), "closed; GDR flush QP 0x%x (to itself): READs posted %llu, "
             "completed %llu; %llu flushes done in", qpn, (unsigned long long)want_reads,
             (unsigned long long)want_reads, (unsigned long long)want_reads);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, needle, fail ? "; flush method read (NCCL_FERRY_IB_"
                           "FLUSH=auto, and the CUDA flush cannot run here" : "; flush method "
                           "", NULL, line, sizeof(line)) >= 0,
              "closeRecv did not log the flushes ('%s')", needle);
    if (!fail) {
        snprintf(needle, sizeof(needle), "; GDR flushes by cuFlushGPUDirectRDMAWrites %ld, ",
                 want_cuda);
        FIT_CHECK(strstr(line, needle) != NULL && strstr(line, cuda_wins ? "flush method read "
                  "(median" : "flush method read (median") != NULL &&
                  (!cuda_wins || strstr(line, "then the CUDA flush failed and the READ took "
                                        "over") != NULL),
                  "closeRecv's line lacks the CUDA flushes or the method: '%s'", line);
    }
    fit_pass("closeRecv logs both methods' counts and times and the method chosen");
    gg_finish(&e, &sg, &rg, "autoflush");
}
