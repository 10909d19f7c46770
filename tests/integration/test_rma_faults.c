/*
 * test_rma_socket's fault cases (test_rma.h): stall (a target that stops
 * answering, then resumes) and killed (a rank that dies with operations in
 * flight).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_rma.h"

/* Bounded wait for a log line with both needles from line `from` on; its index or -1. */
static int wait_log(int from, const char *n1, const char *n2, double seconds, void *coll,
                    void *req, int *done)
{
    double end = fit_now() + seconds;
    int line;

    while ((line = fit_log_find(from, -1, n1, n2, NULL, NULL, 0)) < 0 && fit_now() < end) {
        if (req != NULL && !*done)
            FIT_NCCL(rma_test(coll, req, done));
        usleep(1000);
    }
    return line;
}

/* ib stall: rank 1 has stopped itself (state T in /proc), bounded. */
static void wait_stopped(void)
{
    double end = fit_now() + WAIT_S;
    char path[64], buf[256];

    for (;;) {
        int pid = atomic_load(&sh->stopped_pid);
        FILE *f;

        FIT_CHECK(fit_now() < end, "rank 1 did not stop");
        if (pid != 0) {
            snprintf(path, sizeof(path), "/proc/%d/stat", pid);
            f = fopen(path, "r");
            if (f != NULL) {
                char *paren = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;

                fclose(f);
                if (paren != NULL && paren[1] == ' ' && paren[2] == 'T')
                    return;
            }
        }
        usleep(1000);
    }
}

void case_stall(void)
{
    rank_state_t s;
    void *req = NULL;
    int done = 0, line;
    char text[1024];

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    barrier(1);
    if (my_rank == 1) {
        /* No progress here until rank 0 has seen the stall and the dump. */
        double end = fit_now() + WAIT_S;

        if (on_ib) {
            /* Our HCA answers without us: stop the whole process (rank 0 resumes it). */
            atomic_store(&sh->stopped_pid, (int)getpid());
            raise(SIGSTOP);
        }
        while (atomic_load(&sh->ready_to_die) == 0 && fit_now() < end)
            usleep(1000);
    } else if (my_rank == 0) {
        fit_log_expect("has made no progress");
        if (on_ib)
            wait_stopped();
        fill(s.src, 4096, 0, 9);
        FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
        line = wait_log(0, "rma rank 0->1", "has made no progress", 5.0, s.coll, req, &done);
        FIT_CHECK(line >= 0 && !done, "no stall WARN for the unanswered put (done %d)", done);
        fit_log_find(line, -1, "rma rank 0->1", NULL, NULL, text, sizeof(text));
        FIT_CHECK(on_ib ? strstr(text, "no completion yet") != NULL &&
                              strstr(text, "work requests posted 1") != NULL &&
                              strstr(text, "(region 1, offset 0, 4096 bytes at the target)") != NULL
                        : strstr(text, "Its frame left, no answer yet") != NULL &&
                              strstr(text, "frames posted 1") != NULL,
                  "stall WARN: %s", text);
        printf("rank 0: stall WARN: %s\n", text);
        line = fit_log_lines();
        raise(SIGUSR1);
        line = wait_log(line, "rma rank 0->1", "messages posted 1", 5.0, NULL, NULL, NULL);
        FIT_CHECK(line >= 0, "the dump shows no RMA ring towards rank 1");
        fit_log_find(line, -1, "rma rank 0->1", NULL, NULL, text, sizeof(text));
        printf("rank 0: dump: %s\n", text);
        /* The dump reaches the logger a line at a time: the request's line may follow later. */
        FIT_CHECK(wait_log(line, on_ib ? "work requests posted 1" : "frames posted 1", NULL, 5.0,
                           NULL, NULL, NULL) >= 0,
                  "the dump does not show the put's counters");
        atomic_store(&sh->ready_to_die, 1);
        if (on_ib)
            kill((pid_t)atomic_load(&sh->stopped_pid), SIGCONT);
        FIT_NCCL(wait_req(s.coll, req, "the put once rank 1 progresses"));
    }
    barrier(2);
    if (my_rank == 1)
        check_bytes(s.win, 4096, 0, 9, "the put after the stall");
    barrier(3);
    rank_teardown(&s);
    fit_log_check_clean("stall case");
}

void case_killed(void)
{
    rank_state_t s;
    void *req = NULL;
    double t0, seen;
    ncclResult_t rc;

    void *inflight = NULL;
    int done = 0;

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    barrier(1);
    if (my_rank == 2) {
        /* No progress here any more: the survivors' puts stay unanswered until we die. */
        double end = fit_now() + WAIT_S;

        while (!on_ib && atomic_load(&sh->arrived[51]) < 2 && fit_now() < end)
            usleep(1000);
        /* ib: the parent stops us first (our HCA would answer the puts otherwise). */
        atomic_store(&sh->ready_to_die, 1);
        for (;;)
            pause(); /* The parent kills us. */
    }
    while (on_ib && atomic_load(&sh->ready_to_die) != 3)
        usleep(1000);
    fill(s.src, 1 << 20, my_rank, 5);
    FIT_NCCL(rma_iput(0, s.src_mh, 1 << 20, 0, s.win_mh, 2, &inflight));
    atomic_fetch_add(&sh->arrived[51], 1);
    while (atomic_load(&sh->ready_to_die) != 2)
        usleep(1000);
    fit_log_expect("the connection to rank 2");
    fit_log_expect("failed earlier");
    fit_log_expect("connection to rank 2");
    fit_log_expect("rank 2 (");
    fit_log_expect("RMA rank 2 (");
    /* The put in flight when rank 2 died ends with an error, within a bound. */
    t0 = fit_now();
    for (rc = ncclSuccess; rc == ncclSuccess && !done;) {
        FIT_CHECK(fit_now() - t0 < 10.0, "the put in flight to the killed rank still pending "
                  "after 10 s");
        rc = rma_test(s.coll, inflight, &done);
    }
    FIT_CHECK(rc == ncclRemoteError && !done, "the put in flight to the killed rank gave %d "
              "(done %d), not ncclRemoteError", (int)rc, done);
    printf("rank %d: rank 2 killed: its put in flight failed after %.3f s\n", my_rank,
           fit_now() - t0);
    t0 = fit_now();
    while (!rma_has_error()) {
        FIT_CHECK(fit_now() - t0 < 10.0, "queryLastError silent 10 s after rank 2 was killed");
        usleep(200);
    }
    seen = fit_now() - t0;
    /* The failure is marked before its WARN is written: the WARN may trail a little. */
    while (on_ib ? fit_log_find(0, NCCL_LOG_WARN, "rank 2 (127.0.0.1:", "failed: ",
                                "queryLastError reports it", NULL, 0) < 0
                 : fit_log_find(0, NCCL_LOG_WARN, "the connection to rank 2", "failed",
                                "check that rank 2 is alive", NULL, 0) < 0) {
        FIT_CHECK(fit_now() - t0 < 10.0, "no WARN naming the dead rank");
        usleep(200);
    }
    rc = rma_iput(0, s.src_mh, 64, 0, s.win_mh, 2, &req);
    if (rc == ncclSuccess)
        rc = wait_req(s.coll, req, "iput to the dead rank");
    FIT_CHECK(rc == ncclRemoteError, "a put to the dead rank gave %d, not ncclRemoteError",
              (int)rc);
    printf("rank %d: rank 2 killed: queryLastError reported it after %.3f s\n", my_rank, seen);
    /* The survivors still talk to each other. */
    fill(s.src, 4096, my_rank, 3);
    FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, (uint32_t)(1 - my_rank), &req));
    FIT_NCCL(wait_req(s.coll, req, "iput between survivors"));
    FIT_NCCL(rma_iflush(s.win_mh, (uint32_t)(1 - my_rank), &req));
    FIT_NCCL(wait_req(s.coll, req, "iflush between survivors"));
    {
        double end = fit_now() + WAIT_S;

        atomic_fetch_add(&sh->arrived[50], 1);
        while (atomic_load(&sh->arrived[50]) < 2) {
            FIT_CHECK(fit_now() < end, "survivor barrier");
            rma_progress();
            usleep(100);
        }
    }
    check_bytes(s.win, 4096, 1 - my_rank, 3, "survivor put");
    rank_teardown(&s);
}
