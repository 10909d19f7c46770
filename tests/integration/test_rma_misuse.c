/*
 * test_rma_socket's misuse case (test_rma.h): strangers at a listener, and
 * calls NCCL should not make, each refused with its return code and text
 * while the group keeps working.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib/ib_rma.h"         /* FERRY_IB_RMA_MAX_RANKS */
#include "socket/sock_rma.h" /* The listen handle's layout, for the strangers. */
#include "test_rma.h"

/* The most ranks one group takes (the WARN quotes it). */
#define RMA_CAP (on_ib ? FERRY_IB_RMA_MAX_RANKS : FERRY_SOCK_RMA_MAX_RANKS)
#define RMA_CAP_MAX (FERRY_IB_RMA_MAX_RANKS > FERRY_SOCK_RMA_MAX_RANKS ? FERRY_IB_RMA_MAX_RANKS \
                                                                  : FERRY_SOCK_RMA_MAX_RANKS)

void case_misuse(void)
{
    rank_state_t s;
    void *req = (void *)0x1;
    int done = 0, line;
    char text[512];

    /* The target's own check is what the second half is about. */
    setenv("FERRY_TEST_RMA_NO_SOURCE_CHECK", "1", 1);
    memset(&s, 0, sizeof(s));
    if (my_rank == 2)
        fit_log_expect("closed a connection from");
    if (my_rank == 1) /* Its progress may meet rank 0's bad put while it still registers. */
        fit_log_expect("refused PUT");
    wait_strangers = 1;
    rank_setup(&s, 0);
    unsetenv("FERRY_TEST_RMA_NO_SOURCE_CHECK");
    if (my_rank == 2) {
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "closed a connection from", "wrong magic",
                               "still waiting for the group's ranks", text, sizeof(text)) >= 0,
                  "no WARN for the junk stranger");
        printf("rank 2: junk stranger: %s\n", text);
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "closed a connection from",
                               "no complete hello (it hung up", NULL, NULL, 0) >= 0,
                  "no WARN for the stranger that hung up");
    }
    if (my_rank == 0) {
        /* A group position past the cap (or none) is refused before anything is dialed. */
        static void *many[RMA_CAP_MAX + 1];
        int cap = RMA_CAP, bad[] = {RMA_CAP + 1, 0, -1};
        char h2[NCCL_NET_HANDLE_MAXSIZE];
        void *c2 = NULL, *lc2 = NULL, *coll2;

        for (int i = 0; i <= RMA_CAP; i++)
            many[i] = sh->handles[i % NRANKS];
        FIT_NCCL(rma_init(&c2));
        FIT_NCCL(v14->listen(c2, 0, h2, &lc2));
        fit_log_expect("is no valid group position");
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            coll2 = (void *)0x1;
            line = fit_log_lines();
            FIT_CHECK(v14->connect(c2, many, bad[i], 0, lc2, &coll2) != ncclSuccess,
                      "connect of a group of %d ranks was accepted", bad[i]);
            FIT_CHECK(fit_log_find(line, NCCL_LOG_WARN, "is no valid group position",
                                   "nranks must be 1..", NULL, text, sizeof(text)) >= 0,
                      "no WARN for a group of %d ranks", bad[i]);
            snprintf(h2, sizeof(h2), "1..%d", cap);
            FIT_CHECK(strstr(text, h2) != NULL, "the WARN does not give the cap %d: %s", cap,
                      text);
            FIT_CHECK((strstr(text, "NCCL_FERRY_RMA=0") != NULL) == (bad[i] > cap),
                      "the WARN for %d ranks %s the way out: %s", bad[i],
                      bad[i] > cap ? "lacks" : "offers", text);
        }
        printf("rank 0: group size refused: %s\n", text);
        FIT_NCCL(v14->closeListen(lc2));
        FIT_NCCL(v14->finalize(c2));
        fit_log_expect("is out of range");
        FIT_CHECK(rma_iput(0, s.src_mh, 8, 0, s.win_mh, NRANKS, &req) == ncclInvalidArgument &&
                  req == NULL, "iput to rank %d was not refused as ncclInvalidArgument", NRANKS);
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "RMA iput", "rank 3 is out of range",
                               "ranks 0..2", NULL, 0) >= 0, "no WARN naming the bad rank");
        fit_log_expect("is none NCCL defines");
        FIT_CHECK(rma_iput_signal(0, s.src_mh, 8, 0, s.win_mh, 1, 0, s.sig_mh, 1, 7, &req) ==
                  ncclInvalidArgument, "signal op 7 accepted");
        fit_log_expect("test(");
        FIT_CHECK(rma_test(s.coll, (void *)0x12345, &done) == ncclInvalidUsage && !done,
                  "test() of a foreign handle accepted");
    }
    if (my_rank == 0 && on_ib) {
        /* ib: refused at the source (an HCA would fail the QP on a bad range). */
        fit_log_expect("registered as region");
        FIT_CHECK(rma_iput(0, s.src_mh, 8192, WIN_SIZE - 4096, s.win_mh, 1, &req) ==
                  ncclInvalidArgument && req == NULL, "the out-of-bounds put was not refused "
                  "with ncclInvalidArgument");
        FIT_CHECK(rma_iget(WIN_SIZE, s.win_mh, 1, 0, s.src_mh, 1, &req) == ncclInvalidArgument &&
                  req == NULL, "an iget one byte beyond rank 1's window was not refused");
        fit_log_expect("64-bit aligned word");
        FIT_CHECK(rma_iput_signal(0, NULL, 0, 0, NULL, 1, 4, s.sig_mh, 1,
                                  NCCL_NET_SIGNAL_OP_INC, &req) == ncclInvalidArgument &&
                  req == NULL, "a signal at offset 4 was not refused");
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "RMA iput", "offset 68153344 + size 8192 is "
                               "beyond the 68157440 bytes rank 1 (127.0.0.1:",
                               "registered as region 1; nothing was sent", text,
                               sizeof(text)) >= 0 && strstr(text, ", QP 0x") != NULL,
                  "no source WARN naming rank, region, offset, size, address and QP");
        printf("rank 0: source check said: %s\n", text);
        fill(s.src, 4096, 0, 7);
        FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iput after the refusal"));
        FIT_NCCL(rma_iflush(s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iflush after the refusal"));
        FIT_CHECK(!rma_has_error(), "queryLastError reports an error after refusals");
    } else if (my_rank == 0) {
        /* Beyond the target's window: refused by the target, which writes nothing. */
        fit_log_expect("was refused by the target");
        line = fit_log_lines();
        FIT_NCCL(rma_iput(0, s.src_mh, 8192, WIN_SIZE - 4096, s.win_mh, 1, &req));
        FIT_CHECK(wait_req(s.coll, req, "out-of-bounds iput") == ncclInvalidUsage,
                  "the out-of-bounds put did not end with ncclInvalidUsage");
        FIT_CHECK(fit_log_find(line, NCCL_LOG_WARN, "PUT to rank 1", "refused by the target",
                               "offset 68153344, size 8192", text, sizeof(text)) >= 0,
                  "no initiator WARN naming the put");
        printf("rank 0: initiator said: %s\n", text);
        /* The group still works afterwards. */
        fill(s.src, 4096, 0, 7);
        FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iput after the refusal"));
        FIT_NCCL(rma_iflush(s.win_mh, 1, &req));
        FIT_NCCL(wait_req(s.coll, req, "iflush after the refusal"));
    }
    barrier(1);
    if (my_rank == 1 && on_ib) {
        for (size_t i = 0; i < 4096; i++)
            FIT_CHECK(s.win[WIN_SIZE - 4096 + i] == 0xee && s.win[WIN_SIZE + i] == 0xee,
                      "the refused put wrote byte %zu", i);
        check_bytes(s.win, 4096, 0, 7, "put after the refusal");
        for (int i = 0; i < NSIG_WORDS; i++)
            FIT_CHECK(s.sig[i] == 0, "signal word %d is %llu after refused signals", i,
                      (unsigned long long)s.sig[i]);
    } else if (my_rank == 1) {
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "refused PUT seq", "from rank 0",
                               "offset 68153344 + size 8192 is beyond region 1", text,
                               sizeof(text)) >= 0, "no target WARN naming the refused put");
        printf("rank 1: target said: %s\n", text);
        for (size_t i = 0; i < 4096; i++)
            FIT_CHECK(s.win[WIN_SIZE - 4096 + i] == 0xee && s.win[WIN_SIZE + i] == 0xee,
                      "the refused put wrote byte %zu", i);
        check_bytes(s.win, 4096, 0, 7, "put after the refusal");
    }
    barrier(2);
    if (on_ib) {
        /* A failed QP: rank 1 drops its window's registration, rank 0's put to it fails. */
        if (my_rank == 1) {
            /* Its QP to rank 0 takes the access error too (an async event). */
            fit_log_expect("async event");
            fit_log_expect("IBV_EVENT_QP_ACCESS_ERR");
            FIT_NCCL(v14->deregMrSym(s.coll, s.win_mh));
            s.win_mh = NULL;
        }
        barrier(3);
        if (my_rank == 0) {
            fit_log_expect("completed with");
            fit_log_expect("RMA rank 1 (");
            fill(s.src, 4096, 0, 8);
            FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 1, &req));
            FIT_CHECK(wait_req(s.coll, req, "iput to a dropped registration") == ncclRemoteError,
                      "a put the target's HCA refused did not end with ncclRemoteError");
            FIT_CHECK(rma_has_error(), "queryLastError silent after a failed QP");
            FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "rank 1 (127.0.0.1:", "completed with "
                                   "remote access error", "the target refused the rkey or "
                                   "range", text, sizeof(text)) >= 0 &&
                      strstr(text, "QP 0x") != NULL && strstr(text, "region 1, offset 0") != NULL,
                      "no WARN naming the failed QP, the peer and the operation");
            printf("rank 0: failed QP: %s\n", text);
            fit_log_expect("failed earlier");
            FIT_CHECK(rma_iput(0, s.src_mh, 8, 0, s.win_mh, 1, &req) == ncclRemoteError &&
                      req == NULL, "a put to the failed peer was not refused");
            /* Rank 2 is unaffected. */
            FIT_NCCL(rma_iput(0, s.src_mh, 4096, 0, s.win_mh, 2, &req));
            FIT_NCCL(wait_req(s.coll, req, "iput to rank 2 after rank 1's QP failed"));
        }
        barrier(4);
        if (my_rank == 2)
            check_bytes(s.win, 4096, 0, 8, "put to rank 2 after rank 1's QP failed");
        if (my_rank == 1) {
            double end = fit_now() + WAIT_S;

            while (!rma_has_error())
                FIT_CHECK(fit_now() < end && usleep(1000) == 0, "queryLastError on rank 1 "
                          "silent after its QP to rank 0 took an access error");
            /* The async thread marks the peer failed, then says why: the WARN may trail. */
            while (fit_log_find(0, NCCL_LOG_WARN, "rank 0 (127.0.0.1:", "IBV_EVENT_QP_ACCESS_ERR",
                                "queryLastError reports it", text, sizeof(text)) < 0)
                FIT_CHECK(fit_now() < end && usleep(1000) == 0,
                          "no WARN on rank 1 naming its failed QP");
            printf("rank 1: failed QP: %s\n", text);
        }
        barrier(5);
    }
    rank_teardown(&s);
    fit_log_check_clean("misuse case");
}

/* Two strangers at rank 2's listener: 64 junk bytes, and 10 bytes then a hang-up. */
void knock_on_rank2(void)
{
    const ferry_sock_rma_handle_t *h = (const void *)sh->handles[2];
    double end = fit_now() + WAIT_S;
    struct sockaddr_in sa;
    char junk[64];

    while (atomic_load(&sh->arrived[0]) < NRANKS)
        FIT_CHECK(fit_now() < end && usleep(1000) == 0, "the ranks never listened");
    FIT_CHECK(h->family == AF_INET, "rank 2 listens on family %d, not IPv4", h->family);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = h->port;
    memcpy(&sa.sin_addr, h->addr, 4);
    memset(junk, 'J', sizeof(junk));
    for (int i = 0; i < 2; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        FIT_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
                  "stranger %d could not connect", i);
        FIT_CHECK(send(fd, junk, i == 0 ? sizeof(junk) : 10, MSG_NOSIGNAL) > 0, "send");
        usleep(100000); /* Rank 2 reads it while the connection is still up. */
        close(fd);
    }
    atomic_store(&sh->strangers_done, 1);
}
