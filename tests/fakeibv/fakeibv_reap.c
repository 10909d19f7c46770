/*
 * fakeibv: who reads a QP's outbound stream (its responses), and a poster
 * that finds the send queue full taking the ACKs already waiting there.
 *
 * A NIC turns the responder's ACK into a completion in hardware, whatever
 * the host CPUs are doing: a requester's send queue is full only while its
 * WRs are really unanswered. fakeibv reads ACKs in a job of its worker pool
 * (fakeibv_rx_run), and on a loaded machine that job can lag far behind the
 * ones placing the peer's data; a consumer that posts one request per
 * message it received (ferry's clear-to-send, signalled every Nth) then sees
 * ENOMEM although the ACKs that would free the queue have arrived. So
 * before post_send reports a full queue it takes, without blocking, the
 * responses that wait whole on the stream; it reports ENOMEM only when none
 * frees a slot.
 *
 * One reader at a time (qp->rx_busy): messages are taken whole and in order,
 * and sq_resp moves one response at a time. The RX job still owns the
 * stream's epoll registration: the poster never re-arms it, and the RX job
 * checks the stream is readable before each message, so one woken for
 * messages a poster already took just re-arms.
 */
#include <errno.h>
#include <sys/socket.h>
#include <time.h>

#include "fakeibv_internal.h"
#include "fakeibv_wire.h"

/* Waits for the other reader to finish, then takes the stream. Returns 0
 * when the QP stops or has no stream (qp->lock held; may drop it meanwhile). */
int fakeibv_rx_claim_locked(struct fakeibv_qp *qp)
{
    while (qp->rx_busy && !qp->stopping) {
        qp->rx_waiters++;
        pthread_cond_wait(&qp->cond, &qp->lock);
        qp->rx_waiters--;
    }
    if (qp->stopping || qp->out_fd < 0)
        return 0;
    qp->rx_busy = 1;
    return 1;
}

void fakeibv_rx_unclaim_locked(struct fakeibv_qp *qp)
{
    qp->rx_busy = 0;
    /* The stop path waits for rx_busy too, and it sets stopping first. */
    if (qp->rx_waiters > 0 || qp->stopping)
        pthread_cond_broadcast(&qp->cond);
}

/*
 * The send queue is full (qp->lock held; dropped meanwhile): takes the
 * responses waiting whole on the stream. A READ response that carries its
 * data is left to the RX job, since reading it could block; a message not
 * yet whole too. The caller looks at sq_free again.
 */
void fakeibv_sq_reap_locked(struct fakeibv_qp *qp)
{
    uint32_t n, limit = qp->sq_depth;
    int fd;

    /* Nothing sent waits for an answer: the queue is really full. Broken:
     * the retry timer decides, and a stream out of step is read no more. */
    if (qp->sq_resp == qp->sq_tx || qp->broken || !fakeibv_rx_claim_locked(qp))
        return;
    fd = qp->out_fd;
    pthread_mutex_unlock(&qp->lock);
    for (n = 0; n < limit; n++) {
        struct fakeibv_wire_hdr h;
        ssize_t got = recv(fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);

        if (got != (ssize_t)sizeof(h))
            break;
        if (h.op == FAKEIBV_OP_READ_RESP && !(h.flags & (FAKEIBV_HDR_DESC | FAKEIBV_HDR_NULL)))
            break;
        if (fakeibv_rx_one(qp, fd) != 0)
            break;
    }
    pthread_mutex_lock(&qp->lock);
    fakeibv_rx_unclaim_locked(qp);
}

/* ---- fakeibv_test_hold_acks, fakeibv_test_hold_tx (fakeibv.h) -------------- */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int acks_on, tx_on;
    unsigned long jobs; /* ACK jobs run (FAKEIBV_TEST_ACK_LAG_US). */
} fakeibv_hold = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };

static void fakeibv_hold_set(int *flag, int on)
{
    pthread_mutex_lock(&fakeibv_hold.lock);
    __atomic_store_n(flag, on, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&fakeibv_hold.cond);
    pthread_mutex_unlock(&fakeibv_hold.lock);
}

FAKEIBV_EXPORT void fakeibv_test_hold_acks(int on)
{
    fakeibv_hold_set(&fakeibv_hold.acks_on, on);
}

FAKEIBV_EXPORT void fakeibv_test_hold_tx(int on)
{
    fakeibv_hold_set(&fakeibv_hold.tx_on, on);
}

/* Waits while *flag is on (no lock held). Bounded, so a test that forgets
 * to let go cannot hang a QP's destruction for ever. */
static void fakeibv_hold_wait(const int *flag)
{
    struct timespec until;

    if (!__atomic_load_n(flag, __ATOMIC_RELAXED))
        return;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&fakeibv_hold.lock);
    while (__atomic_load_n(flag, __ATOMIC_RELAXED) &&
           pthread_cond_timedwait(&fakeibv_hold.cond, &fakeibv_hold.lock, &until) == 0)
        ;
    pthread_mutex_unlock(&fakeibv_hold.lock);
}

/* The RX job, before it claims the stream (no lock held). */
void fakeibv_rx_hold_wait(void)
{
    long lag = fakeibv_config()->test_ack_lag_us;

    /* FAKEIBV_TEST_ACK_LAG_US: a worker left behind by the scheduler now
     * and then (every 256th ACK job of the process), for end-to-end runs of
     * a consumer (ferry-bench); on every job it would slow all QPs alike. */
    if (lag > 0 && __atomic_add_fetch(&fakeibv_hold.jobs, 1, __ATOMIC_RELAXED) % 256 == 0) {
        struct timespec d = { lag / 1000000, (lag % 1000000) * 1000 };

        nanosleep(&d, NULL);
    }
    fakeibv_hold_wait(&fakeibv_hold.acks_on);
}

/* The transmit job, taken off the queue and not yet at the QP's lock. */
void fakeibv_tx_hold_wait(void)
{
    fakeibv_hold_wait(&fakeibv_hold.tx_on);
}
