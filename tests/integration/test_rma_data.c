/*
 * test_rma_socket's data cases (test_rma.h): data, v13 and threads. Every
 * round, each rank puts with a signal to the next rank (checked the moment
 * the signal is seen), gets from the next rank and puts + flushes to the
 * rank after; 8 B .. 64 MiB checked byte for byte.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_rma.h"

static void round_trip(rank_state_t *s, int round, size_t size, int step)
{
    int next = (my_rank + 1) % NRANKS, prev = (my_rank + NRANKS - 1) % NRANKS;
    int far = (my_rank + 2) % NRANKS, from_far = (my_rank + NRANKS - 2) % NRANKS;
    size_t plain = size < PLAIN_SIZE ? size : PLAIN_SIZE;
    uint64_t add = (uint64_t)(round + 1) * 1000u + (uint64_t)my_rank;
    uint64_t want_add = 0;
    void *req = NULL;
    double t0, t_put, t_get;
    int done = 0;

    for (int k = 0; k <= round; k++)
        want_add += (uint64_t)(k + 1) * 1000u + (uint64_t)prev;
    fill(s->src, size, my_rank, round);
    /* Put with ADD signal to the next rank; its data must be there once the signal is. */
    t0 = fit_now();
    FIT_NCCL(rma_iput_signal(0, s->src_mh, size, 0, s->win_mh, (uint32_t)next,
                             8u * (uint64_t)my_rank, s->sig_mh, add, NCCL_NET_SIGNAL_OP_ADD,
                             &req));
    FIT_NCCL(wait_req(s->coll, req, "iputSignal"));
    if (round == 0) {
        /* A finished request is no request any more. */
        fit_log_expect("must be tested until it reports done");
        FIT_CHECK(rma_test(s->coll, req, &done) == ncclInvalidUsage && !done,
                  "test() of a finished request did not say ncclInvalidUsage");
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "RMA test(", "must be tested until it "
                               "reports done", NULL, NULL, 0) >= 0, "no WARN for the finished "
                  "request");
    }
    wait_word(&s->sig[prev], want_add, "ADD signal");
    check_bytes(s->win, size, prev, round, "iputSignal payload at the signal");
    t_put = fit_now() - t0;
    /* Signal only (no payload), INC: the word counts rounds. */
    FIT_NCCL(rma_iput_signal(0, NULL, 0, 0, NULL, (uint32_t)next,
                             8u * (uint64_t)(NRANKS + my_rank), s->sig_mh, 12345,
                             NCCL_NET_SIGNAL_OP_INC, &req));
    FIT_NCCL(wait_req(s->coll, req, "signal-only iputSignal"));
    wait_word(&s->sig[NRANKS + prev], (uint64_t)round + 1, "INC signal");
    barrier(step);
    /* Get back from the next rank what we put there. */
    memset(s->src, 0, size);
    t0 = fit_now();
    FIT_NCCL(rma_iget(0, s->win_mh, size, 0, s->src_mh, (uint32_t)next, &req));
    FIT_NCCL(wait_req(s->coll, req, "iget"));
    t_get = fit_now() - t0;
    check_bytes(s->src, size, my_rank, round, "iget");
    /* Plain put to the rank after next, then a flush: applied once the flush is done. */
    fill(s->src, plain, my_rank, round + 100);
    FIT_NCCL(rma_iput(0, s->src_mh, plain, PLAIN_OFF, s->win_mh, (uint32_t)far, &req));
    FIT_NCCL(wait_req(s->coll, req, "iput"));
    FIT_NCCL(rma_iflush(s->win_mh, (uint32_t)far, &req));
    FIT_NCCL(wait_req(s->coll, req, "iflush"));
    barrier(step + 1);
    /*
     * The put was applied here by whichever thread drove progress, under the
     * group's lock; taking it orders those writes before the check (the
     * barrier is shared memory between processes, which TSan cannot see).
     */
    rma_progress();
    check_bytes(s->win + PLAIN_OFF, plain, from_far, round + 100, "iput after iflush");
    for (size_t i = 0; i < GUARD; i++)
        FIT_CHECK(s->win[WIN_SIZE + i] == 0xee, "guard byte %zu after the window written", i);
    if (my_rank == 0)
        printf("rank 0: %zu B: iputSignal+check %.4f s, iget %.4f s\n", size, t_put, t_get);
    barrier(step + 2);
}

/* What NCCL's RMA progress thread does while other threads post and test. */
static _Atomic int thread_stop;

static void *progress_thread(void *arg)
{
    (void)arg;
    for (long i = 0; i < 100000000L && !atomic_load(&thread_stop); i++) {
        rma_progress();
        FIT_CHECK(!rma_has_error(), "queryLastError in the progress thread");
        usleep(20);
    }
    return NULL;
}

void case_data(void)
{
    static const size_t sizes[] = { 8, 4096, (1u << 20) + 3, MAX_SIZE };
    /*
     * ib threads (TSan): 8 B and 4 KiB; every byte an emulated NIC thread wrote
     * is a (suppressed) TSan report, which at 1 MiB outlasts the barriers.
     */
    const int nsizes = use_v13 || with_thread ? (with_thread ? (on_ib ? 2 : 3) : 2) : 4;
    pthread_t th;
    rank_state_t s;

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    if (with_thread)
        FIT_CHECK(pthread_create(&th, NULL, progress_thread, NULL) == 0, "pthread_create");
    for (int i = 0; i < nsizes; i++)
        round_trip(&s, i, sizes[i + (use_v13 ? 1 : 0)], 1 + 3 * i);
    if (my_rank == 0) {
        /* Beyond the size rank 1 registered: refused here, before anything leaves. */
        void *req = (void *)0x1;
        char text[512];

        fit_log_expect("registered as region");
        FIT_CHECK(rma_iput(0, s.src_mh, 8192, WIN_SIZE - 4096, s.win_mh, 1, &req) ==
                  (on_ib ? ncclInvalidArgument : ncclInvalidUsage) && req == NULL,
                  "an iput beyond rank 1's window was not refused with %s",
                  on_ib ? "ncclInvalidArgument" : "ncclInvalidUsage");
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "offset 68153344 + size 8192 is beyond the "
                               "68157440 bytes rank 1", "registered as region 1",
                               "nothing was sent", text, sizeof(text)) >= 0,
                  "no WARN naming the refused range");
        FIT_CHECK(!on_ib || (strstr(text, ", QP 0x") != NULL && strstr(text, "127.0.0.1:") !=
                             NULL), "the ib WARN names no peer address and QP: %s", text);
        printf("rank 0: source check said: %s\n", text);
    }
    if (with_thread) {
        /* A registration while the progress thread runs, then it stops before the close. */
        void *extra;
        char *buf = calloc(1, 4096);

        FIT_NCCL(rma_reg(s.coll, buf, 4096, 0, &extra));
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, extra) : v14->deregMrSym(s.coll, extra));
        free(buf);
        barrier(30);
        atomic_store(&thread_stop, 1);
        pthread_join(th, NULL);
    }
    /* Close order: rank 0 leaves first; the others keep progressing and see no error. */
    if (my_rank == 0) {
        rank_teardown(&s);
        atomic_fetch_add(&sh->arrived[40], 1);
    } else {
        double end = fit_now() + WAIT_S;

        while (atomic_load(&sh->arrived[40]) == 0) {
            FIT_CHECK(fit_now() < end, "rank 0 did not close");
            rma_progress();
            usleep(100);
        }
        for (int i = 0; i < 200; i++) {
            rma_progress();
            usleep(500);
        }
        FIT_CHECK(!rma_has_error(), "queryLastError reports an error after rank 0 closed in "
                  "order");
        /* Ranks 1 and 2 leave together (rank 0 is gone: no barrier of three). */
        atomic_fetch_add(&sh->arrived[41], 1);
        end = fit_now() + WAIT_S;
        while (atomic_load(&sh->arrived[41]) < NRANKS - 1) {
            FIT_CHECK(fit_now() < end, "ranks 1 and 2 did not both reach the close");
            rma_progress();
            usleep(100);
        }
        rank_teardown(&s);
    }
    fit_log_check_clean("data case");
}
