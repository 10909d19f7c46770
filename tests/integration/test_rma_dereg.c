/*
 * test_rma_socket's dereg case (test_rma.h), socket backend only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_rma.h"

/*
 * deregMrSym while operations on the region are still moving, the memory
 * unmapped right after (so a late write would crash the rank):
 *  A. rank 1's window leaves while rank 0's 8 MiB put into it is arriving:
 *     the rest is dropped, rank 1 writes nothing more, rank 0's put fails;
 *  B. rank 1's source leaves while its own 8 MiB put from it is queued and
 *     partly sent: the put still completes, rank 0 gets every byte;
 *  C. rank 0's landing region leaves (unmapped) while its 8 MiB get from
 *     rank 1 waits for the answer: nothing lands, the get fails with
 *     ncclInvalidUsage, and the WARN names the
 *     group, the peer's address, the request's state and what to do.
 * Rank 2 only takes part in the collective calls.
 */
#define DEREG_SIZE (8u << 20)

static void *map_region(void)
{
    void *m = mmap(NULL, DEREG_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    FIT_CHECK(m != MAP_FAILED, "mmap %u bytes", DEREG_SIZE);
    return m;
}

static void wait_flag(int k, int want)
{
    double end = fit_now() + WAIT_S * fit_time_scale();

    while (atomic_load(&sh->arrived[k]) < want) { /* No progress here, on purpose. */
        FIT_CHECK(fit_now() < end, "flag %d: %d of %d after %.0f s", k,
                  atomic_load(&sh->arrived[k]), want, WAIT_S);
        usleep(200);
    }
}

/* C: rank 0's get from rank 1, its landing region deregistered before rank 1 answers. */
static void get_into_gone_region(rank_state_t *s)
{
    unsigned char *mland = map_region();
    void *mland_mh, *req = NULL;
    char line[1024], size[64];
    ncclResult_t rc;
    int from;

    memset(mland, 0xee, DEREG_SIZE);
    FIT_NCCL(rma_reg(s->coll, mland, DEREG_SIZE, 0, &mland_mh)); /* Collective. */
    barrier(6);
    if (my_rank == 0) {
        fit_log_expect("deregistered before the answer was in");
        from = fit_log_lines();
        /* Rank 1 moves nothing until the flag: the GET frame waits there unanswered. */
        FIT_NCCL(rma_iget(0, s->win_mh, DEREG_SIZE, 0, mland_mh, 1, &req));
        FIT_NCCL(use_v13 ? v13->deregMrSym(s->coll, mland_mh) : v14->deregMrSym(s->coll, mland_mh));
        FIT_CHECK(munmap(mland, DEREG_SIZE) == 0, "munmap");
        mland = NULL;
        atomic_fetch_add(&sh->arrived[42], 1);
        rc = wait_req(s->coll, req, "get into a region deregistered before its answer");
        FIT_CHECK(rc == ncclInvalidUsage, "the get into a deregistered region ended with %d, "
                  "not ncclInvalidUsage (%d)", (int)rc, (int)ncclInvalidUsage);
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "deregistered before the answer was in",
                               NULL, NULL, line, sizeof(line)) >= 0,
                  "no WARN about the get into a deregistered region");
        /* The group, the peer and its address, the request's state, what to do. */
        snprintf(size, sizeof(size), "all %u bytes of its answer read", DEREG_SIZE);
        FIT_CHECK(strstr(line, "socket RMA group") != NULL && strstr(line, "rank 0 of 3") != NULL,
                  "the WARN does not name the group: %s", line);
        FIT_CHECK(strstr(line, "from rank 1 (127.0.0.1:") != NULL,
                  "the WARN does not name the peer and its address: %s", line);
        FIT_CHECK(strstr(line, "request ACTIVE") != NULL && strstr(line, size) != NULL,
                  "the WARN does not give the request's state: %s", line);
        FIT_CHECK(strstr(line, "deregister a region only after test() reported every get into "
                               "it done") != NULL, "the WARN says nothing to try: %s", line);
        printf("rank 0: the get into a region deregistered before its answer ended with %d; "
               "WARN: %s\n", (int)rc, line);
    } else if (my_rank == 1) {
        wait_flag(42, 1);
    }
    barrier(7); /* Rank 1 answers the get in here. */
    if (mland != NULL) { /* Ranks 1 and 2: the collective deregistration. */
        FIT_NCCL(use_v13 ? v13->deregMrSym(s->coll, mland_mh) : v14->deregMrSym(s->coll, mland_mh));
        munmap(mland, DEREG_SIZE);
    }
    barrier(8);
}

void case_dereg(void)
{
    rank_state_t s;
    unsigned char *mwin, *msrc;
    void *mwin_mh, *msrc_mh, *req = NULL;
    ncclResult_t rc;
    double end;

    memset(&s, 0, sizeof(s));
    rank_setup(&s, 0);
    mwin = map_region();
    msrc = map_region();
    memset(mwin, 0xee, DEREG_SIZE);
    FIT_NCCL(rma_reg(s.coll, mwin, DEREG_SIZE, 0, &mwin_mh));
    FIT_NCCL(rma_reg(s.coll, msrc, DEREG_SIZE, 0, &msrc_mh));
    barrier(1);

    /* A: the target's window leaves mid-payload. */
    if (my_rank == 0) {
        fill(msrc, DEREG_SIZE, 0, 11);
        fit_log_expect("was refused by the target");
        FIT_NCCL(rma_iput(0, msrc_mh, DEREG_SIZE, 0, mwin_mh, 1, &req));
        atomic_fetch_add(&sh->arrived[40], 1);
        rc = wait_req(s.coll, req, "put into a window deregistered under it");
        FIT_CHECK(rc != ncclSuccess, "the put into a window deregistered while its payload "
                  "arrived reported success");
        printf("rank 0: the put into the window rank 1 deregistered mid-payload ended with %d\n",
               (int)rc);
    } else if (my_rank == 1) {
        wait_flag(40, 1);
        fit_log_expect("was deregistered while the payload of rank 0's");
        /* One progress call reads at most 4 MiB: once the first byte landed, more is to come. */
        end = fit_now() + WAIT_S * fit_time_scale();
        while (mwin[0] == 0xee) {
            FIT_CHECK(fit_now() < end, "rank 0's put never started landing");
            rma_progress();
        }
        FIT_CHECK(mwin[DEREG_SIZE - 1] == 0xee, "the whole 8 MiB landed in one progress call");
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, mwin_mh) : v14->deregMrSym(s.coll, mwin_mh));
        FIT_CHECK(munmap(mwin, DEREG_SIZE) == 0, "munmap");
        mwin = NULL;
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "was deregistered while the payload of rank 0's",
                               "the rest is dropped", NULL, NULL, 0) >= 0,
                  "no WARN about the put cut short");
    }
    barrier(2);
    if (mwin != NULL) { /* Ranks 0 and 2: the collective deregistration. */
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, mwin_mh) : v14->deregMrSym(s.coll, mwin_mh));
        munmap(mwin, DEREG_SIZE);
    }
    barrier(3);

    /* B: the source leaves while its put is queued and partly sent. */
    if (my_rank == 1) {
        fill(msrc, DEREG_SIZE, 1, 12);
        FIT_NCCL(rma_iput(0, msrc_mh, DEREG_SIZE, 0, s.win_mh, 0, &req));
        rma_progress(); /* Some of it leaves; rank 0 reads nothing yet. */
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, msrc_mh) : v14->deregMrSym(s.coll, msrc_mh));
        FIT_CHECK(munmap(msrc, DEREG_SIZE) == 0, "munmap");
        msrc = NULL;
        atomic_fetch_add(&sh->arrived[41], 1);
        FIT_NCCL(wait_req(s.coll, req, "put from a source deregistered while queued"));
        printf("rank 1: the put from a source deregistered while queued completed\n");
    } else if (my_rank == 0) {
        wait_flag(41, 1);
    }
    barrier(4);
    if (my_rank == 0) {
        check_bytes(s.win, DEREG_SIZE, 1, 12, "put from a deregistered source");
        printf("rank 0: all %u bytes of rank 1's put arrived intact\n", DEREG_SIZE);
    }
    if (msrc != NULL) {
        FIT_NCCL(use_v13 ? v13->deregMrSym(s.coll, msrc_mh) : v14->deregMrSym(s.coll, msrc_mh));
        munmap(msrc, DEREG_SIZE);
    }
    barrier(5);
    get_into_gone_region(&s);
    fit_log_check_clean("dereg case");
    rank_teardown(&s);
}
