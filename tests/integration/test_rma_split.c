/*
 * test_rma_socket's split cases (test_rma.h): operations larger than one
 * message of the transport.
 *
 *   split       rank 0 puts with a signal, puts + flushes and gets to / from
 *               rank 1, each larger than the largest message: on ib the
 *               port's max_msg_sz, lowered by FAKEIBV_MAX_MSG_SZ (fakeibv
 *               refuses a longer WR at post, as an HCA does), at N*max,
 *               N*max + 1 and max + 1 with offsets not aligned, and with a
 *               1 KiB max 100*max + 1 (more parts than a send queue holds:
 *               the rest posted from progress, in order); over TCP,
 *               where the wire's frame size is 64-bit and nothing cuts
 *               operations, one size over 1 GiB (skipped under sanitizers:
 *               its gigabytes of pattern take minutes there). Data checked
 *               byte for byte when the signal is seen, bytes around the
 *               range untouched.
 *   split-fail  (ib) rank 0's QP towards rank 2 loses its way there
 *               (fakeibv's QP_DROP fault), so rank 0's put of N parts to it
 *               fails after the retry timeout with ncclRemoteError and a
 *               WARN naming the rank, region, offset, part k of N and the QP.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_rma.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif
#if defined(__SANITIZE_THREAD__)
/* Every byte an emulated NIC thread writes is a (suppressed) TSan report: sizes stay small. */
#define TSAN_MAX_SIZE ((size_t)256 << 10)
#else
#define TSAN_MAX_SIZE SIZE_MAX
#endif

#define EDGE 4096 /* Room before and after each range, checked untouched. */

typedef struct big {
    unsigned char *src, *win;
    size_t         len; /* Of each region. */
    void          *src_mh, *win_mh;
} big_t;

/* The largest message this run's transport takes in one piece (ib: fakeibv's knob). */
static size_t max_msg(void)
{
    const char *s = getenv("FAKEIBV_MAX_MSG_SZ");

    if (!on_ib)
        return (size_t)1 << 30; /* ib's bound before splitting; TCP has none. */
    FIT_CHECK(s != NULL && atol(s) > 0, "the split case on ib needs FAKEIBV_MAX_MSG_SZ=<bytes>");
    return (size_t)atol(s);
}

/* Lazily backed: rank 2 registers the same sizes but never touches them. */
static void big_setup(rank_state_t *s, big_t *b, size_t len)
{
    b->len = len;
    b->src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    b->win = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FIT_CHECK(b->src != MAP_FAILED && b->win != MAP_FAILED, "mmap of 2 x %zu bytes", len);
    /* Fewer page faults over the gigabyte of the TCP case (advice only: may be refused). */
    (void)madvise(b->src, len, MADV_HUGEPAGE);
    (void)madvise(b->win, len, MADV_HUGEPAGE);
    FIT_NCCL(rma_reg(s->coll, b->src, len, 0, &b->src_mh));
    FIT_NCCL(rma_reg(s->coll, b->win, len, 0, &b->win_mh));
}

static void big_teardown(rank_state_t *s, big_t *b)
{
    FIT_NCCL(use_v13 ? v13->deregMrSym(s->coll, b->src_mh) : v14->deregMrSym(s->coll, b->src_mh));
    FIT_NCCL(use_v13 ? v13->deregMrSym(s->coll, b->win_mh) : v14->deregMrSym(s->coll, b->win_mh));
    munmap(b->src, b->len);
    munmap(b->win, b->len);
}

static void check_edges(const unsigned char *buf, size_t off, size_t size, unsigned char v,
                        const char *what)
{
    for (size_t i = off - (off < EDGE ? off : EDGE); i < off; i++)
        FIT_CHECK(buf[i] == v, "%s: byte %zu before the range (offset %zu) was written", what,
                  i, off);
    for (size_t i = off + size; i < off + size + EDGE; i++)
        FIT_CHECK(buf[i] == v, "%s: byte %zu after the range (offset %zu + %zu) was written",
                  what, i, off, size);
}

/* barrier() with room for a gigabyte's fill, move and check by the other ranks. */
static void split_barrier(int k)
{
    double end = fit_now() + 4 * WAIT_S * fit_time_scale();

    atomic_fetch_add(&sh->arrived[k], 1);
    while (atomic_load(&sh->arrived[k]) < NRANKS) {
        FIT_CHECK(fit_now() < end, "barrier %d: %d of %d ranks in %.0f s", k,
                  atomic_load(&sh->arrived[k]), NRANKS, 4 * WAIT_S);
        rma_progress();
        usleep(100);
    }
}

/* Rank 0 to rank 1: iputSignal, iput + iflush, iget of size at (soff, doff). */
static void split_round(rank_state_t *s, big_t *b, int round, size_t size, size_t soff,
                        size_t doff, int step)
{
    static uint64_t want; /* The ADD signals of every round run so far. */
    uint64_t add = 1000u + (uint64_t)round;
    void *req = NULL;
    double t0 = fit_now(), t_sig = 0, t_put = 0, t_get = 0;

    if (my_rank == 1) {
        memset(b->win + (doff - (doff < EDGE ? doff : EDGE)), 0xee,
               size + 2 * EDGE);
    }
    split_barrier(step);
    if (my_rank == 0) {
        fill(b->src + soff, size, 0, round);
        t0 = fit_now();
        FIT_NCCL(rma_iput_signal(soff, b->src_mh, size, doff, b->win_mh, 1, 0, s->sig_mh, add,
                                 NCCL_NET_SIGNAL_OP_ADD, &req));
        FIT_NCCL(wait_req(s->coll, req, "split iputSignal"));
        t_sig = fit_now() - t0;
        /* The next put's pattern, while rank 1 checks this one. */
        fill(b->src + soff, size, 0, round + 50);
    } else if (my_rank == 1) {
        /* All of the data is there the moment the signal is. */
        /* The word adds up over the rounds (only the NIC writes it: TSan sees no race). */
        want += add;
        wait_word(&s->sig[0], want, "split ADD signal");
        check_bytes(b->win + doff, size, 0, round, "split iputSignal payload at the signal");
        check_edges(b->win, doff, size, 0xee, "split iputSignal");
    }
    split_barrier(step + 1);
    if (my_rank == 0) {
        t0 = fit_now();
        FIT_NCCL(rma_iput(soff, b->src_mh, size, doff, b->win_mh, 1, &req));
        FIT_NCCL(wait_req(s->coll, req, "split iput"));
        FIT_NCCL(rma_iflush(b->win_mh, 1, &req));
        FIT_NCCL(wait_req(s->coll, req, "iflush after the split iput"));
        t_put = fit_now() - t0;
    }
    split_barrier(step + 2);
    if (my_rank == 1) {
        rma_progress(); /* Orders the socket side's writes (under the group lock) before this. */
        check_bytes(b->win + doff, size, 0, round + 50, "split iput after iflush");
        check_edges(b->win, doff, size, 0xee, "split iput");
    }
    if (my_rank == 0) {
        /* Back again: a get of the same range into a cleared buffer. */
        memset(b->src + (soff - (soff < EDGE ? soff : EDGE)), 0x5a, size + 2 * EDGE);
        t0 = fit_now();
        FIT_NCCL(rma_iget(doff, b->win_mh, size, soff, b->src_mh, 1, &req));
        FIT_NCCL(wait_req(s->coll, req, "split iget"));
        t_get = fit_now() - t0;
        check_bytes(b->src + soff, size, 0, round + 50, "split iget");
        check_edges(b->src, soff, size, 0x5a, "split iget");
        if (on_ib)
            printf("rank 0: split %zu B (%zu data parts of at most %zu B) at source offset "
                   "%zu, target offset %zu: iputSignal %.3f s, iput+iflush %.3f s, iget %.3f s, "
                   "checked\n", size, (size - 1) / max_msg() + 1, max_msg(), soff, doff, t_sig,
                   t_put, t_get);
        else
            printf("rank 0: %zu B over TCP (more than %zu B) at source offset %zu, target "
                   "offset %zu: iputSignal %.3f s, iput+iflush %.3f s, iget %.3f s, checked\n",
                   size, max_msg(), soff, doff, t_sig, t_put, t_get);
    }
    split_barrier(step + 3);
}

void case_split(void)
{
    size_t m = max_msg();
    /* ib: N*max, N*max + 1, max + 1, offsets not aligned; TCP: one size over 1 GiB. */
    size_t sizes[] = { 3 * m, 3 * m + 1, m + 1, 100 * m + 1 };
    size_t soffs[] = { 0, 5, 4093, 1 }, doffs[] = { 0, 3, 1, 4095 };
    /*
     * With a small max (1 KiB), 100 * max + 1 takes more WRs than a send
     * queue holds: the rest go from progress, and the flush after the plain
     * put must not overtake them.
     */
    const int nsizes = on_ib ? (m <= 4096 ? 4 : 3) : 1;
    size_t len = 0;
    rank_state_t s;
    big_t b;

    if (!on_ib && UNDER_SANITIZER) {
        if (my_rank == 0)
            printf("SKIP: the socket split case moves over 1 GiB, which takes minutes under "
                   "sanitizers; it runs in the plain build\n");
        return;
    }
    if (!on_ib) {
        /* One size over 1 GiB, offsets not aligned. */
        sizes[0] = m + 1;
        soffs[0] = 5;
        doffs[0] = 3;
    }
    for (int i = 0; i < nsizes; i++) {
        size_t need = sizes[i] + (soffs[i] > doffs[i] ? soffs[i] : doffs[i]) + 2 * EDGE;

        if (need > len)
            len = need;
    }
    memset(&s, 0, sizeof(s));
    memset(&b, 0, sizeof(b));
    rank_setup(&s, 0);
    big_setup(&s, &b, len);
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] > TSAN_MAX_SIZE) {
            if (my_rank == 0)
                printf("SKIP: %zu B under TSan (every byte the emulated NIC writes is a "
                       "suppressed report: too slow)\n", sizes[i]);
            continue;
        }
        split_round(&s, &b, i, sizes[i], EDGE + soffs[i], EDGE + doffs[i], 1 + 4 * i);
    }
    split_barrier(20);
    big_teardown(&s, &b);
    split_barrier(21);
    rank_teardown(&s);
    fit_log_check_clean("split case");
}

/* fakeibv.h's FAKEIBV_FAULT_QP_DROP: the QP's outbound stream is cut, its WRs time out. */
#define FAKEIBV_QP_DROP 16
typedef int (*inject_fn)(void *ctx, int kind, uint32_t target, unsigned after, unsigned count,
                         int err);

/* Rank 0's QP towards rank 2: rank 2's refusal of a range beyond rank 0's window names it. */
static void tell_qpn_of_rank0(rank_state_t *s)
{
    void *req = NULL;
    char text[512];
    const char *q;

    fit_log_expect("registered as region");
    FIT_CHECK(rma_iput(0, s->src_mh, 8192, WIN_SIZE - 4096, s->win_mh, 0, &req) ==
              ncclInvalidArgument, "an iput beyond rank 0's window was not refused");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "registered as region 1", "QP 0x", NULL, text,
                           sizeof(text)) >= 0, "no refusal WARN naming rank 0's QP");
    q = strstr(text, "QP 0x");
    atomic_store(&sh->split_qpn, (uint32_t)strtoul(q + 5, NULL, 16));
}

void case_split_fail(void)
{
    size_t m = max_msg(), size = 3 * m + 1;
    rank_state_t s;
    void *req = NULL;
    char text[1024];
    big_t b;

    FIT_CHECK(on_ib, "split-fail runs on ib (fakeibv's fault injection)");
    memset(&s, 0, sizeof(s));
    memset(&b, 0, sizeof(b));
    rank_setup(&s, 0);
    big_setup(&s, &b, size + EDGE);
    barrier(1);
    if (my_rank == 2) {
        tell_qpn_of_rank0(&s);
    } else if (my_rank == 0) {
        double end = fit_now() + WAIT_S;
        void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
        inject_fn inject = h != NULL ? (inject_fn)dlvsym(h, "fakeibv_inject", "FAKEIBV_1.0")
                                     : NULL;
        uint32_t qpn;
        ncclResult_t rc;
        double t0;

        FIT_CHECK(inject != NULL, "the loaded libibverbs.so.1 is not fakeibv");
        while ((qpn = atomic_load(&sh->split_qpn)) == 0)
            FIT_CHECK(fit_now() < end && usleep(1000) == 0, "rank 2 did not name the QP");
        /* Cut before the put: its first part is the first to time out. */
        FIT_CHECK(inject(NULL, FAKEIBV_QP_DROP, qpn, 0, 1, 0) == 0, "fakeibv_inject(QP_DROP, "
                  "0x%x)", qpn);
        fill(b.src + 7, size, 0, 9);
        fit_log_expect("failed:");
        t0 = fit_now();
        FIT_NCCL(rma_iput_signal(7, b.src_mh, size, 3, b.win_mh, 2, 0, s.sig_mh, 1,
                                 NCCL_NET_SIGNAL_OP_ADD, &req));
        rc = wait_req(s.coll, req, "split iputSignal on the cut QP");
        FIT_CHECK(rc == ncclRemoteError, "the split put on the cut QP gave %d, not "
                  "ncclRemoteError", (int)rc);
        FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "rank 2 (", "region 4, offset 3 at the "
                               "target, part 1 of 5)", "the target did not answer", text,
                               sizeof(text)) >= 0,
                  "no WARN naming rank 2, region 4, offset 3, part 1 of 5");
        FIT_CHECK(strstr(text, "QP 0x") != NULL, "the WARN names no QP: %s", text);
        printf("rank 0: a %zu B put in 5 parts on a cut QP failed in %.2f s: %s\n", size,
               fit_now() - t0, text);
    }
    /* Everyone leaves together (rank 0's group has rank 2 failed; nothing more goes to it). */
    atomic_fetch_add(&sh->arrived[30], 1);
    {
        double end = fit_now() + WAIT_S;

        while (atomic_load(&sh->arrived[30]) < NRANKS) {
            FIT_CHECK(fit_now() < end, "the ranks did not all come back");
            usleep(1000);
        }
    }
    big_teardown(&s, &b);
    rank_teardown(&s);
}
