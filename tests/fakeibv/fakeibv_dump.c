/*
 * fakeibv_dump (fakeibv.h): the emulated NIC's own state, for a test that
 * ran out of time. The plugin's dump says what each request waits for; this
 * says whether the emulated device still moves it: a send queue with WQEs
 * not transmitted, a responder waiting for a receive, a job no worker took.
 * Locks are tried, not waited on: one that stays held is itself the finding,
 * and must not hang the dump.
 */
#include <time.h>
#include <unistd.h>

#include "fakeibv_internal.h"

int fakeibv_trylock_ms(pthread_mutex_t *m, int ms)
{
    int i;

    for (i = 0; i < ms; i++) {
        struct timespec ts = {0, 1000 * 1000};

        if (pthread_mutex_trylock(m) == 0)
            return 1;
        nanosleep(&ts, NULL);
    }
    return 0;
}

static const char *fakeibv_dump_state(enum ibv_qp_state st)
{
    static const char *const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};

    return (unsigned)st < sizeof(names) / sizeof(names[0]) ? names[st] : "?";
}

static void fakeibv_dump_qp(struct fakeibv_qp *qp, void *arg)
{
    FILE *f = arg;
    int in = 0, busy = 0, ended = 0, k;
    char jobs[64];

    /* The engine's bookkeeping is under the engine's lock, not the QP's; read
     * before the QP's lock is taken, so that an engine lock that stays held
     * costs its 100 ms without the QP's lock held meanwhile. */
    fakeibv_engine_describe_qp(qp, jobs, sizeof(jobs));
    if (!fakeibv_trylock_ms(&qp->lock, 100)) {
        fprintf(f, "fakeibv[%d]: qpn 0x%x: lock held for 100 ms (a thread is stuck in it)\n",
                (int)getpid(), qp->qpx.qp_base.qp_num);
        return;
    }
    for (k = 0; k < FAKEIBV_MAX_INBOUND; k++) {
        in += qp->in[k].fd >= 0;
        busy += qp->in[k].fd >= 0 && qp->in[k].busy;
        ended += qp->in[k].fd >= 0 && qp->in[k].ended;
    }
    fprintf(f, "fakeibv[%d]: qpn 0x%x -> 0x%x %s port %d%s%s%s%s: sq head %u tx %u resp %u "
            "ack %u free %u%s, tx_busy %d rx_busy %d, wire_out %llu, rq posted %u taken %u "
            "(responders waiting %d), retry deadline %s, %s, out_fd %d, inbound %d (busy %d, "
            "ended %d)\n",
            (int)getpid(), qp->qpx.qp_base.qp_num, qp->attr.dest_qp_num,
            fakeibv_dump_state(qp->attr.qp_state), qp->data_port,
            qp->link_down ? " link-down" : "", qp->broken ? " broken" : "",
            qp->stopping ? " stopping" : "", qp->mode_known ? "" : " mode-unknown", qp->sq_head,
            qp->sq_tx, qp->sq_resp, qp->sq_ack, qp->sq_free, qp->sq_blocked ? " (blocked)" : "",
            qp->tx_busy, qp->rx_busy, (unsigned long long)qp->wire_out, qp->rq_head, qp->rq_tail,
            qp->rq_waiters, qp->deadline_set ? "set" : "none", jobs, qp->out_fd, in, busy,
            ended);
    pthread_mutex_unlock(&qp->lock);
}

FAKEIBV_EXPORT void fakeibv_dump(FILE *f)
{
    char line[256];

    fakeibv_engine_describe(line, sizeof(line));
    fprintf(f, "fakeibv[%d]: %s\n", (int)getpid(), line);
    if (fakeibv_qps_each(fakeibv_dump_qp, f) != 0)
        fprintf(f, "fakeibv[%d]: QP registry lock held for 100 ms; no QP dump\n", (int)getpid());
    fflush(f);
}
