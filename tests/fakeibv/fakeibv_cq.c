/*
 * fakeibv completion queues and completion channels.
 *
 * A CQ is a locked ring. Producers are the fake's transfer threads and the
 * posting thread (flush completions); the consumer is ibv_poll_cq. Overflow
 * raises IBV_EVENT_CQ_ERR and drops the CQE, as real HCAs do.
 *
 * A channel is a pipe plus a list of CQs with a pending event: each event
 * writes one byte, ibv_get_cq_event reads one (so a consumer may poll() the
 * channel fd or make it non-blocking, as with the real kernel fd).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakeibv_internal.h"

struct fakeibv_channel {
    struct ibv_comp_channel ch;   /* Must be first. */
    int wfd;                      /* Write end; ch.fd is the read end. */
    pthread_mutex_t lock;         /* Protects the pending list. */
    struct fakeibv_cq *ev_head, *ev_tail;
};

FAKEIBV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    struct fakeibv_channel *c = calloc(1, sizeof(*c));
    int fds[2];

    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int rc = errno;

        free(c);
        errno = rc;
        return NULL;
    }
    c->ch.context = context;
    c->ch.fd = fds[0];
    c->ch.refcnt = 0;
    c->wfd = fds[1];
    pthread_mutex_init(&c->lock, NULL);
    return &c->ch;
}

FAKEIBV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct fakeibv_channel *c = (struct fakeibv_channel *)channel;

    if (channel->refcnt != 0)
        return EBUSY;
    close(c->wfd);
    close(channel->fd);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return 0;
}

struct fakeibv_cq *fakeibv_cq_create(struct ibv_context *context, int cqe, void *cq_context,
                                     struct ibv_comp_channel *channel, int comp_vector)
{
    struct fakeibv_cq *cq;
    int rc = fakeibv_fault_check(FAKEIBV_FAULT_CREATE_CQ);

    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    if (cqe < 1 || (uint32_t)cqe > fakeibv_config()->max_cqe || comp_vector < 0 ||
        comp_vector >= context->num_comp_vectors) {
        errno = EINVAL;
        return NULL;
    }
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL || (cq->ring = calloc((size_t)cqe, sizeof(*cq->ring))) == NULL) {
        free(cq);
        errno = ENOMEM;
        return NULL;
    }
    cq->size = (uint32_t)cqe;
    cq->cq.context = context;
    cq->cq.channel = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    cq->cq.handle = 1;
    pthread_mutex_init(&cq->cq.mutex, NULL);
    pthread_cond_init(&cq->cq.cond, NULL);
    pthread_mutex_init(&cq->lock, NULL);
    if (channel != NULL)
        __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
    fakeibv_live_add(&fakeibv_live.cqs, 1);
    fakeibv_live_add(&fakeibv_live_cqes, cqe);
    return cq;
}

FAKEIBV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                            struct ibv_comp_channel *channel, int comp_vector)
{
    struct fakeibv_cq *cq = fakeibv_cq_create(context, cqe, cq_context, channel, comp_vector);

    return cq != NULL ? &cq->cq : NULL;
}

FAKEIBV_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    struct fakeibv_cq *cq = (struct fakeibv_cq *)ibcq;

    pthread_mutex_lock(&cq->lock);
    if (cq->users != 0) {
        pthread_mutex_unlock(&cq->lock);
        return EBUSY; /* A QP still uses it, as the kernel says. */
    }
    pthread_mutex_unlock(&cq->lock);
    if (ibcq->channel != NULL) {
        struct fakeibv_channel *c = (struct fakeibv_channel *)ibcq->channel;
        struct fakeibv_cq **pp;

        /* Drop a pending event so the channel never hands out a dead CQ. */
        pthread_mutex_lock(&c->lock);
        for (pp = &c->ev_head; *pp != NULL; pp = &(*pp)->ev_next) {
            if (*pp == cq) {
                *pp = cq->ev_next;
                break;
            }
        }
        c->ev_tail = NULL;
        for (pp = &c->ev_head; *pp != NULL; pp = &(*pp)->ev_next)
            c->ev_tail = *pp;
        pthread_mutex_unlock(&c->lock);
        __atomic_sub_fetch(&ibcq->channel->refcnt, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_destroy(&cq->lock);
    fakeibv_live_add(&fakeibv_live_cqes, -(int)cq->size);
    free(cq->ring);
    free(cq->trace_ts);
    free(cq);
    fakeibv_live_add(&fakeibv_live.cqs, -1);
    return 0;
}

FAKEIBV_EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
    struct fakeibv_cq *cq = (struct fakeibv_cq *)ibcq;
    struct ibv_wc *ring;
    uint32_t i, n;

    if (cqe < 1 || (uint32_t)cqe > fakeibv_config()->max_cqe)
        return EINVAL;
    pthread_mutex_lock(&cq->lock);
    n = cq->head - cq->tail;
    if ((uint32_t)cqe < n) {
        pthread_mutex_unlock(&cq->lock);
        return EINVAL;
    }
    ring = calloc((size_t)cqe, sizeof(*ring));
    if (ring == NULL) {
        pthread_mutex_unlock(&cq->lock);
        return ENOMEM;
    }
    for (i = 0; i < n; i++)
        ring[i] = cq->ring[(cq->tail + i) % cq->size];
    free(cq->ring);
    cq->ring = ring;
    free(cq->trace_ts); /* Its stamps no longer match the entries' positions. */
    cq->trace_ts = NULL;
    fakeibv_live_add(&fakeibv_live_cqes, cqe - (int)cq->size);
    cq->size = (uint32_t)cqe;
    __atomic_store_n(&cq->tail, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cq->head, n, __ATOMIC_RELEASE);
    ibcq->cqe = cqe;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

static void fakeibv_channel_event(struct fakeibv_cq *cq)
{
    struct fakeibv_channel *c = (struct fakeibv_channel *)cq->cq.channel;
    char b = 1;

    pthread_mutex_lock(&c->lock);
    cq->ev_next = NULL;
    if (c->ev_tail != NULL)
        c->ev_tail->ev_next = cq;
    else
        c->ev_head = cq;
    c->ev_tail = cq;
    if (write(c->wfd, &b, 1) != 1)
        FAKEIBV_WARN("completion event for CQ %p lost: %s", (void *)cq, strerror(errno));
    pthread_mutex_unlock(&c->lock);
}

void fakeibv_cq_push(struct fakeibv_cq *cq, const struct ibv_wc *wc)
{
    int notify = 0, overflow = 0;

    pthread_mutex_lock(&cq->lock);
    if (cq->overflowed) {
        pthread_mutex_unlock(&cq->lock);
        return;
    }
    if (cq->head - cq->tail >= cq->size) {
        cq->overflowed = 1;
        overflow = 1;
    } else {
        cq->ring[cq->head % cq->size] = *wc;
        if (fakeibv_trace.on) {
            if (cq->trace_ts == NULL)
                cq->trace_ts = calloc(FAKEIBV_TRACE_CQ_TS, sizeof(*cq->trace_ts));
            if (cq->trace_ts != NULL)
                cq->trace_ts[cq->head % FAKEIBV_TRACE_CQ_TS] = fakeibv_trace_now_ns();
        }
        /* Published after the entry: fakeibv_poll_cq peeks at head unlocked. */
        __atomic_store_n(&cq->head, cq->head + 1, __ATOMIC_RELEASE);
        if (cq->armed && cq->cq.channel != NULL) {
            cq->armed = 0;
            notify = 1;
        }
    }
    pthread_mutex_unlock(&cq->lock);
    if (notify)
        fakeibv_channel_event(cq);
    if (overflow) {
        struct ibv_async_event ev = { .event_type = IBV_EVENT_CQ_ERR };

        FAKEIBV_WARN("CQ %p overrun (%u entries): CQE for wr_id 0x%llx dropped, "
                     "IBV_EVENT_CQ_ERR raised; poll faster or create a bigger CQ",
                     (void *)cq, cq->size, (unsigned long long)wc->wr_id);
        ev.element.cq = &cq->cq;
        fakeibv_async_raise(fakeibv_ctx(cq->cq.context), &ev);
    }
}

int fakeibv_cq_pop_locked(struct fakeibv_cq *cq, struct ibv_wc *wc)
{
    if (cq->tail == cq->head)
        return 0;
    *wc = cq->ring[cq->tail % cq->size];
    if (cq->trace_ts != NULL && cq->head - cq->tail <= FAKEIBV_TRACE_CQ_TS) {
        uint64_t d = fakeibv_trace_now_ns() - cq->trace_ts[cq->tail % FAKEIBV_TRACE_CQ_TS];
        int recv = (wc->opcode & IBV_WC_RECV) != 0;

        fakeibv_trace_add(recv ? &fakeibv_trace.cqe_recv_ns : &fakeibv_trace.cqe_send_ns, d);
        fakeibv_trace_add(recv ? &fakeibv_trace.cqe_recv_n : &fakeibv_trace.cqe_send_n, 1);
    }
    __atomic_store_n(&cq->tail, cq->tail + 1, __ATOMIC_RELAXED);
    return 1;
}

int fakeibv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    struct fakeibv_cq *cq = (struct fakeibv_cq *)ibcq;
    int i = 0;

    if (n < 0)
        return -EINVAL;
    /*
     * An empty CQ answers without the lock, as a HCA's CQ does (the
     * consumer reads the CQE ring the device writes; they share no lock).
     * Consumers spin here; taking the lock every time made the thread that
     * delivers completions (the "device") sleep on it and wait for a wake.
     */
    if (!fakeibv_cq_looks_empty(cq)) {
        pthread_mutex_lock(&cq->lock);
        while (i < n && fakeibv_cq_pop_locked(cq, &wc[i]))
            i++;
        pthread_mutex_unlock(&cq->lock);
    }
    if (fakeibv_trace.on)
        fakeibv_trace_polled(cq, i);
    return i;
}

/* Solicited-only is treated like "any": the fake has no solicited bit, and
 * waking more often than asked is allowed. Arming a CQ without a channel
 * succeeds and does nothing, as on mlx5. */
int fakeibv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    struct fakeibv_cq *cq = (struct fakeibv_cq *)ibcq;

    pthread_mutex_lock(&cq->lock);
    cq->armed = 1;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

FAKEIBV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                                    void **cq_context)
{
    struct fakeibv_channel *c = (struct fakeibv_channel *)channel;
    struct fakeibv_cq *fcq;
    char b;
    ssize_t n;

    do {
        n = read(channel->fd, &b, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1)
        return -1;
    pthread_mutex_lock(&c->lock);
    fcq = c->ev_head;
    if (fcq != NULL) {
        c->ev_head = fcq->ev_next;
        if (c->ev_head == NULL)
            c->ev_tail = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (fcq == NULL) {
        errno = EAGAIN; /* The CQ was destroyed after its event fired. */
        return -1;
    }
    *cq = &fcq->cq;
    *cq_context = fcq->cq.cq_context;
    return 0;
}

FAKEIBV_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}
