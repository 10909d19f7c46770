/*
 * fakeibv unit tests, ACKs that lag behind: the engine's job that reads a
 * QP's responses is held (fakeibv_test_hold_acks, as a worker the scheduler
 * left behind under CPU load), the send queue is filled with unsignalled
 * RDMA WRITEs and one signalled last, and the peer places all of them.
 * A NIC would have retired the queue by then, so the next ibv_post_send
 * must succeed, the signalled WR must complete, and every byte must land
 * where it was written. A queue of only unsignalled WRs stays full (ENOMEM,
 * bad pointing at the WR): an unsignalled completion frees no slot, on a
 * NIC as here. fakeibv_dump shows such a queue: every WR on the wire, the
 * peer's queue empty. A transmit job held the same way (fakeibv_test_hold_tx)
 * while the QP's retry timer runs out stays queued or running once, and
 * the jobs queued behind it while every worker lags
 * (fakeibv_test_stall_workers) all run. A response out of step with its
 * request completes nothing.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define DEPTH 32u
#define CHUNK 64u
#define BUF ((DEPTH + 1) * CHUNK)
#define WAIT_MS 3000

static int setup(void **state)
{
    static struct fx_pair x;

    if (fx_pair_open(&x, BUF, DEPTH, 256) != 0)
        return -1;
    *state = &x;
    return 0;
}

/* Set while a case may leave a QP whose job count never drains (a job lost
 * from the engine's queue): destroying it would wait for ever, so the
 * teardown leaves the pair to the process's exit. */
static int qps_wedged;

static int teardown(void **state)
{
    fakeibv_test_stall_workers(0);
    fakeibv_test_hold_acks(0);
    fakeibv_test_hold_tx(0);
    if (qps_wedged) {
        printf("a QP's jobs never drained: the pair is left to the exit, not destroyed\n");
        return 0;
    }
    fx_pair_close(*state);
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };

    nanosleep(&d, NULL);
}

/* WRITE i puts chunk i of src at chunk i of dst. */
static int write_chunk(struct fx_pair *x, uint32_t i, unsigned flags)
{
    return fx_write(x->a, 1000 + i, IBV_WR_RDMA_WRITE, x->src + (size_t)i * CHUNK, CHUNK,
                    x->src_mr->lkey, (uintptr_t)(x->dst + (size_t)i * CHUNK), x->dst_mr->rkey,
                    flags, 0);
}

/* Waits until chunks [0, n) of dst equal src's; returns 1 if they do. */
static int wait_placed(struct fx_pair *x, uint32_t n)
{
    struct timespec t0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (fx_ms_since(&t0) < WAIT_MS) {
        if (memcmp(x->dst, x->src, (size_t)n * CHUNK) == 0)
            return 1;
        sleep_ms(1);
    }
    return 0;
}

/* WR 1001 fails when the retry timer runs out, 1002 is flushed, nothing else completes. */
static void expect_retry_then_flush(struct fx_pair *x)
{
    struct ibv_wc wc[3];

    assert_int_equal(fx_poll(x->f.cq, wc, 2, WAIT_MS), 2);
    assert_int_equal(wc[0].wr_id, 1001);
    assert_int_equal(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    assert_int_equal(wc[1].wr_id, 1002);
    assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(fx_poll(x->f.cq, wc, 3, 50), 0);
}

static void fill_queue(struct fx_pair *x, int signal_last)
{
    uint32_t i;

    struct ibv_wc wc;

    fx_fill(x->src, BUF, 7);
    memset(x->dst, 0, BUF);
    /* One answered WRITE first: the responder's mode message, which the
     * ACK job reads too, must be in before the job is held. */
    assert_int_equal(write_chunk(x, 0, IBV_SEND_SIGNALED), 0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, WAIT_MS), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    fakeibv_test_hold_acks(1);
    for (i = 0; i < DEPTH; i++) {
        unsigned flags = signal_last && i == DEPTH - 1 ? IBV_SEND_SIGNALED : 0;

        assert_int_equal(write_chunk(x, i, flags), 0);
    }
    assert_true(wait_placed(x, DEPTH));
}

/* Full of unsignalled WRITEs and one signalled: placed, so not full. */
static void test_full_queue_takes_waiting_acks(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_wc wc[4];
    struct timespec t0;
    int rc = ENOMEM, tries = 0;

    fill_queue(x, 1);
    /* The responder writes its ACK just after placing the data: give it a
     * moment, while the ACK job stays held throughout. */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (rc == ENOMEM && fx_ms_since(&t0) < WAIT_MS) {
        tries++;
        rc = write_chunk(x, DEPTH, IBV_SEND_SIGNALED);
        if (rc == ENOMEM)
            sleep_ms(5);
    }
    printf("full send queue (%u WRs, last signalled), ACK job held: next post %s after %d "
           "tries\n",
           DEPTH, rc == 0 ? "accepted" : strerror(rc), tries);
    assert_int_equal(rc, 0);
    /* The signalled WR completed while the ACK job was still held. */
    assert_int_equal(fx_poll(x->f.cq, wc, 1, WAIT_MS), 1);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].wr_id, 1000 + DEPTH - 1);
    assert_int_equal(wc[0].opcode, IBV_WC_RDMA_WRITE);
    fakeibv_test_hold_acks(0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, WAIT_MS), 1);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].wr_id, 1000 + DEPTH);
    assert_int_equal(fx_poll(x->f.cq, wc, 4, 50), 0);
    assert_memory_equal(x->dst, x->src, BUF);
}

/* Full of unsignalled WRITEs only: still full once placed. */
static void test_unsignalled_queue_stays_full(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_sge sge = { .addr = (uintptr_t)x->src, .length = CHUNK, .lkey = x->src_mr->lkey };
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_wc wc[2];
    int rc;

    fill_queue(x, 0);
    sleep_ms(20);
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 77;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)(x->dst + (size_t)DEPTH * CHUNK);
    wr.wr.rdma.rkey = x->dst_mr->rkey;
    rc = ibv_post_send(x->a, &wr, &bad);
    printf("full send queue (%u unsignalled WRs), all placed: next post %s\n", DEPTH,
           rc == 0 ? "accepted" : strerror(rc));
    assert_int_equal(rc, ENOMEM);
    assert_ptr_equal(bad, &wr);
    fakeibv_test_hold_acks(0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 100), 0);
    assert_memory_equal(x->dst, x->src, (size_t)DEPTH * CHUNK);
}

/* What fakeibv_dump writes, in a string. The stream's buffer pointer lives on
 * the heap, not in this frame, so that no caller's pointer looks to the
 * compiler as if it could still point at a local of this function. */
static char *dump_text(void)
{
    struct { char *text; size_t len; } *m = calloc(1, sizeof(*m));
    FILE *f;
    char *text;

    assert_non_null(m);
    f = open_memstream(&m->text, &m->len);
    assert_non_null(f);
    fakeibv_dump(f);
    fclose(f);
    text = m->text;
    free(m);
    assert_non_null(text);
    return text;
}

/* The dump's line for qp, or NULL; points into text. */
static const char *dump_line(const char *text, const struct ibv_qp *qp, const struct ibv_qp *peer)
{
    char want[64];

    snprintf(want, sizeof(want), "qpn 0x%x -> 0x%x ", qp->qp_num, peer->qp_num);
    return strstr(text, want);
}

/* line (of a dump, up to its newline; NULL: none) holds what. */
static int line_holds(const char *line, const char *what)
{
    const char *end = line != NULL ? strchr(line, '\n') : NULL;
    const char *at = line != NULL ? strstr(line, what) : NULL;

    return at != NULL && (end == NULL || at < end);
}

/* The dump's line of qp (towards peer) holds what. */
static int line_has(const char *text, const struct ibv_qp *qp, const struct ibv_qp *peer,
                    const char *what)
{
    return line_holds(dump_line(text, qp, peer), what);
}

/* The dump of a full queue whose ACKs are held: both QPs, what was sent, what waits. */
static void test_dump_shows_the_queue(void **state)
{
    struct fx_pair *x = *state;
    char want[160], *text;

    fill_queue(x, 0);
    text = dump_text();
    printf("%s", text);
    assert_non_null(strstr(text, "engine running: workers "));
    /* Chunk 0 answered, then DEPTH unsignalled: all on the wire, none completed. */
    snprintf(want, sizeof(want), "qpn 0x%x -> 0x%x RTS port 1: sq head %u tx %u ",
             x->a->qp_num, x->b->qp_num, DEPTH + 1, DEPTH + 1);
    assert_non_null(strstr(text, want));
    /* The peer sent nothing; until the first request reached it, its own
     * stream's mode may still read "mode-unknown" before the colon. */
    assert_true(line_has(text, x->b, x->a, "RTS port 1"));
    assert_true(line_has(text, x->b, x->a, ": sq head 0 tx 0 "));
    free(text);
    fakeibv_test_hold_acks(0);
    assert_memory_equal(x->dst, x->src, (size_t)DEPTH * CHUNK);
}

/* Waits until ready(text, arg) holds for a dump's text; returns 1 if it did,
 * else prints the last dump with what was waited for. */
static int wait_dump_until(int (*ready)(const char *text, const void *arg), const void *arg,
                           const char *what)
{
    struct timespec t0;
    int found = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!found && fx_ms_since(&t0) < WAIT_MS) {
        char *text = dump_text();

        found = ready(text, arg);
        free(text);
        if (!found)
            sleep_ms(2);
    }
    if (!found) {
        char *text = dump_text();

        printf("no %s after %d ms; the dump:\n%s", what, WAIT_MS, text);
        free(text);
    }
    return found;
}

struct dump_want {
    const struct ibv_qp *qp, *peer; /* qp NULL: the engine's line. */
    const char          *what;
};

static int dump_has(const char *text, const void *arg)
{
    const struct dump_want *w = arg;

    return w->qp != NULL ? line_has(text, w->qp, w->peer, w->what)
                         : line_holds(strstr(text, "engine "), w->what);
}

/* Waits until the dump line of qp (towards peer; NULL: the engine's line)
 * holds what; returns 1 if it did. */
static int wait_dump_line(const struct ibv_qp *qp, const struct ibv_qp *peer, const char *what)
{
    struct dump_want w = {qp, peer, what};

    return wait_dump_until(dump_has, &w, what);
}

/*
 * x->a's transmit run ended: its job is neither queued nor running, or it
 * is one job queued again behind the healthy pair's (the engine holds 2).
 * A job running with a copy queued is 2 of x->a's jobs: not ended.
 */
static int run_ended(const char *text, const void *arg)
{
    const struct fx_pair *x = arg;

    return line_has(text, x->a, x->b, "(tx queued 0,") ||
           (line_has(text, x->a, x->b, "jobs 1 (tx queued 1,") &&
            line_holds(strstr(text, "engine "), "jobs queued 2,"));
}

static int wait_run_ended(struct fx_pair *x)
{
    return wait_dump_until(run_ended, x, "end of the held transmit run");
}

/* Waits until the dump line of x->a holds what; returns 1 if it did. */
static int wait_dump(struct fx_pair *x, const char *what)
{
    return wait_dump_line(x->a, x->b, what);
}

/*
 * The retry timer runs out while the QP's transmit job is taken by a worker
 * that has not run it yet (fakeibv_test_hold_tx, as the scheduler leaves a
 * worker behind on a loaded machine). The job is queued or running at most
 * once: the timer must not queue it a second time. A second copy queued
 * while the first runs is still queued when the first ends, and the next
 * post then links the queued job in again, cutting off the jobs behind it
 * (their streams are never served again: a stalled QP elsewhere).
 */
static void test_retry_timer_while_tx_held(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_wc wc[3];
    char *text;

    fx_fill(x->src, BUF, 3);
    assert_int_equal(write_chunk(x, 0, IBV_SEND_SIGNALED), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, WAIT_MS), 1);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    /* Its requests stop reaching the peer: the first WR arms the retry timer. */
    assert_int_equal(fakeibv_inject(x->f.ctx, FAKEIBV_FAULT_QP_DROP, x->a->qp_num, 0, 0, 0), 0);
    assert_int_equal(write_chunk(x, 1, IBV_SEND_SIGNALED), 0);
    assert_true(wait_dump(x, "jobs 0 (tx queued 0, timer 1)"));
    /* The second WR's transmit job is taken and held until past the deadline. */
    fakeibv_test_hold_tx(1);
    assert_int_equal(write_chunk(x, 2, IBV_SEND_SIGNALED), 0);
    sleep_ms(3 * 135);
    text = dump_text();
    printf("%s", text);
    assert_non_null(dump_line(text, x->a, x->b));
    assert_non_null(strstr(dump_line(text, x->a, x->b), "jobs 1 (tx queued 1, timer 0)"));
    free(text);
    fakeibv_test_hold_tx(0);
    expect_retry_then_flush(x);
    assert_true(wait_dump(x, "jobs 0 (tx queued 0, timer 0)"));
}

/*
 * A response out of step with its request (fakeibv_test_skew_response: its
 * wire sequence one off) completes nothing: crediting it by position would
 * report a WR done whose answer never came. The QP stops as if its peer
 * were gone: the WR fails when the retry timer runs out, the next one is
 * flushed, and neither completes with success.
 */
static void test_response_out_of_step(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_wc wc[3];

    fx_fill(x->src, BUF, 5);
    assert_int_equal(write_chunk(x, 0, IBV_SEND_SIGNALED), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, WAIT_MS), 1);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    fakeibv_test_skew_response();
    assert_int_equal(write_chunk(x, 1, IBV_SEND_SIGNALED), 0);
    assert_int_equal(write_chunk(x, 2, IBV_SEND_SIGNALED), 0);
    expect_retry_then_flush(x);
}

/* WRITE of chunk i of src to chunk i of dst on qp, signalled. */
static int write_chunk_on(struct fx_pair *x, struct ibv_qp *qp, uint64_t wr_id, uint32_t i)
{
    return fx_write(qp, wr_id, IBV_WR_RDMA_WRITE, x->src + (size_t)i * CHUNK, CHUNK,
                    x->src_mr->lkey, (uintptr_t)(x->dst + (size_t)i * CHUNK), x->dst_mr->rkey,
                    IBV_SEND_SIGNALED, 0);
}

/*
 * The retry timer of a QP whose peer is unreachable runs out while its
 * transmit job runs (taken by a worker and held, fakeibv_test_hold_tx) and
 * every worker lags (fakeibv_test_stall_workers). Meanwhile a WRITE of
 * another, healthy QP pair arrives: its responder job is queued. The held
 * run ends, and the QP is kicked right after (its stream cut once more).
 * The timer must not have queued the running job a second time: that copy,
 * still queued at the kick, would be linked in again at the queue's tail,
 * cutting off the healthy pair's job behind it, and that pair would never
 * be served again (RELIABILITY 8, bug 18: a surviving QP pair that stops).
 * Once the workers go on, the healthy pair's WRITE completes and its bytes
 * land; the unreachable QP's WRs end in RETRY_EXC_ERR and WR_FLUSH_ERR and
 * place nothing; every job drains.
 */
static void test_retry_copy_cuts_no_queued_job(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_qp *c = fx_qp(&x->f, DEPTH, 64), *d = fx_qp(&x->f, DEPTH, 64);
    unsigned char zero[2 * CHUNK];
    struct ibv_wc wc[4];
    int n, i, at_retry = -1, at_flush = -1, at_healthy = -1;
    char *text;

    assert_non_null(c);
    assert_non_null(d);
    assert_int_equal(fx_connect(c, x->f.lid, d->qp_num, 7), 0);
    assert_int_equal(fx_connect(d, x->f.lid, c->qp_num, 7), 0);
    fx_fill(x->src, BUF, 9);
    memset(x->dst, 0, BUF);
    memset(zero, 0, sizeof(zero));
    /* The healthy pair: one WRITE answered (the responder's mode message in). */
    assert_int_equal(write_chunk_on(x, c, 2000, DEPTH - 1), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, WAIT_MS), 1);
    assert_int_equal(wc[0].wr_id, 2000);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    /* The other QP: answered once, then its requests stop reaching the peer;
     * its next WR arms the retry timer. */
    assert_int_equal(write_chunk(x, 0, IBV_SEND_SIGNALED), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, WAIT_MS), 1);
    assert_int_equal(wc[0].wr_id, 1000);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(fakeibv_inject(x->f.ctx, FAKEIBV_FAULT_QP_DROP, x->a->qp_num, 0, 0, 0), 0);
    assert_int_equal(write_chunk(x, 1, IBV_SEND_SIGNALED), 0);
    assert_true(wait_dump(x, "jobs 0 (tx queued 0, timer 1)"));
    /* Its next transmit job taken by a worker and held; then no worker takes a job. */
    qps_wedged = 1;
    fakeibv_test_hold_tx(1);
    assert_int_equal(write_chunk(x, 2, IBV_SEND_SIGNALED), 0);
    assert_true(wait_dump(x, "jobs 1 (tx queued 1, timer 1)"));
    assert_true(wait_dump_line(NULL, NULL, "jobs queued 0,"));
    fakeibv_test_stall_workers(1);
    /* The deadline passes while the job runs. */
    assert_true(wait_dump(x, ", timer 0)"));
    /* The healthy pair's next WRITE goes out; its responder's job is queued. */
    assert_int_equal(write_chunk_on(x, c, 2001, DEPTH), 0);
    assert_true(wait_dump_line(d, c, "jobs 1 (tx queued 0, timer 0)"));
    /*
     * The held run goes on and ends: the oldest WR fails and the QP errs,
     * or, where the cut stream's end was seen late (a loaded machine), the
     * retry timeout started again then and the run sets the timer anew,
     * whose job may already be queued once more behind the healthy pair's
     * (run_ended).
     */
    fakeibv_test_hold_tx(0);
    assert_true(wait_run_ended(x));
    /* The kick right after: the stream's end seen once more. */
    assert_int_equal(fakeibv_inject(x->f.ctx, FAKEIBV_FAULT_QP_DROP, x->a->qp_num, 0, 0, 0), 0);
    fakeibv_test_stall_workers(0);
    n = fx_poll(x->f.cq, wc, 3, WAIT_MS);
    for (i = 0; i < n; i++) {
        if (wc[i].wr_id == 1001 && wc[i].status == IBV_WC_RETRY_EXC_ERR)
            at_retry = i;
        else if (wc[i].wr_id == 1002 && wc[i].status == IBV_WC_WR_FLUSH_ERR)
            at_flush = i;
        else if (wc[i].wr_id == 2001 && wc[i].status == IBV_WC_SUCCESS &&
                 wc[i].opcode == IBV_WC_RDMA_WRITE)
            at_healthy = i;
        else
            fail_msg("unexpected completion wr_id %llu status %s (%d)",
                     (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status),
                     (int)wc[i].status);
    }
    if (at_healthy < 0) {
        text = dump_text();
        printf("the healthy pair's WRITE never completed (%d completion(s)):\n%s", n, text);
        free(text);
    }
    assert_true(at_healthy >= 0);
    assert_true(at_retry >= 0);
    assert_true(at_flush > at_retry);
    assert_int_equal(fx_poll(x->f.cq, wc, 4, 50), 0);
    /* Byte for byte: both WRITEs of the healthy pair and the first of the
     * other QP landed; the two that failed placed nothing. */
    assert_memory_equal(x->dst, x->src, CHUNK);
    assert_memory_equal(x->dst + CHUNK, zero, 2 * CHUNK);
    assert_memory_equal(x->dst + (size_t)(DEPTH - 1) * CHUNK, x->src + (size_t)(DEPTH - 1) * CHUNK,
                        2 * CHUNK);
    /* Every job ran once: the job counts drain. */
    assert_true(wait_dump(x, "jobs 0 (tx queued 0, timer 0)"));
    assert_true(wait_dump_line(d, c, "jobs 0 (tx queued 0, timer 0)"));
    assert_true(wait_dump_line(c, d, "jobs 0 (tx queued 0, timer 0)"));
    qps_wedged = 0;
    assert_int_equal(ibv_destroy_qp(c), 0);
    assert_int_equal(ibv_destroy_qp(d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_queue_takes_waiting_acks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsignalled_queue_stays_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dump_shows_the_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_timer_while_tx_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_response_out_of_step, setup, teardown),
        /* Last: on an engine that loses a queued job, its QPs are left undestroyed. */
        cmocka_unit_test_setup_teardown(test_retry_copy_cuts_no_queued_job, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
