/*
 * One thread per HCA reads its async events and hands the ones that touch
 * a comm to that comm's watch. The thread polls the context's async fd
 * (made non-blocking) together with an eventfd, so fini can stop it
 * without an event arriving.
 *
 * Watches are called outside the list's lock, pinned by a count: fn may
 * take the comm's locks (ring fail) while another thread, holding those,
 * removes a different watch. ferry_ib_watch_remove unlinks and then waits
 * for the pins on its watch to drop, which makes "fn is not running and
 * will not run" true when it returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib_async.h"

#define FERRY_IB_ASYNC_POLL_MS 1000 /* Bound on each wait; the eventfd ends it sooner. */

static pthread_mutex_t ferry_ib_watch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ferry_ib_watch_idle = PTHREAD_COND_INITIALIZER;
static ferry_ib_watch_t *ferry_ib_watches;
/* The watch whose fn this thread is running, so fn may remove its own watch. */
static _Thread_local ferry_ib_watch_t *ferry_ib_watch_running;

void ferry_ib_watch_add(ferry_ib_watch_t *w)
{
    pthread_mutex_lock(&ferry_ib_watch_lock);
    w->prev = NULL;
    w->next = ferry_ib_watches;
    if (w->next != NULL)
        w->next->prev = w;
    ferry_ib_watches = w;
    w->linked = 1;
    w->calls = 0;
    pthread_mutex_unlock(&ferry_ib_watch_lock);
}

void ferry_ib_watch_remove(ferry_ib_watch_t *w)
{
    pthread_mutex_lock(&ferry_ib_watch_lock);
    if (w->linked) {
        if (w->prev != NULL)
            w->prev->next = w->next;
        else
            ferry_ib_watches = w->next;
        if (w->next != NULL)
            w->next->prev = w->prev;
        w->next = w->prev = NULL;
        w->linked = 0;
    }
    while (w->calls > 0 && ferry_ib_watch_running != w)
        pthread_cond_wait(&ferry_ib_watch_idle, &ferry_ib_watch_lock);
    pthread_mutex_unlock(&ferry_ib_watch_lock);
}

/* Which watches an event reaches. */
typedef struct ferry_ib_async_target {
    ferry_ib_hca_t *hca;
    int             port;  /* > 0: watches on this port. */
    int             has_qp;
    uint32_t        qpn;
    struct ibv_cq  *cq;    /* Non-NULL: the watch with this CQ. */
} ferry_ib_async_target_t;

static int ferry_ib_async_hits(const ferry_ib_watch_t *w, const ferry_ib_async_target_t *t)
{
    int i;

    if (w->dev == NULL || w->dev->hca != t->hca)
        return 0;
    if (t->port > 0)
        return w->dev->port == t->port;
    if (t->cq != NULL)
        return w->cq == t->cq;
    if (t->has_qp) {
        for (i = 0; i < w->nqp && i < FERRY_IB_WATCH_QPS; i++)
            if (w->qpn[i] == t->qpn)
                return 1;
        return 0;
    }
    return 1; /* The whole device. */
}

/* The device of the first watch an event reaches, for the WARN line; NULL if none. */
static const ferry_ib_dev_t *ferry_ib_async_watched_dev(const ferry_ib_async_target_t *t)
{
    const ferry_ib_dev_t *dev = NULL;
    ferry_ib_watch_t *w;

    pthread_mutex_lock(&ferry_ib_watch_lock);
    for (w = ferry_ib_watches; w != NULL && dev == NULL; w = w->next)
        if (ferry_ib_async_hits(w, t))
            dev = w->dev;
    pthread_mutex_unlock(&ferry_ib_watch_lock);
    return dev;
}

/* Call fn of every watch the event reaches; returns how many. */
static int ferry_ib_async_notify(const ferry_ib_async_target_t *t, const char *what, int fatal)
{
    ferry_ib_watch_t **hit = NULL, *w;
    int n = 0, cap = 0, i;

    pthread_mutex_lock(&ferry_ib_watch_lock);
    for (w = ferry_ib_watches; w != NULL; w = w->next)
        cap += ferry_ib_async_hits(w, t);
    if (cap > 0)
        hit = malloc((size_t)cap * sizeof(*hit));
    for (w = ferry_ib_watches; w != NULL && hit != NULL; w = w->next) {
        if (ferry_ib_async_hits(w, t)) {
            w->calls++;
            hit[n++] = w;
        }
    }
    pthread_mutex_unlock(&ferry_ib_watch_lock);
    if (cap > 0 && hit == NULL) {
        FERRY_WARN("ib %s: out of memory dispatching async event %s to %d communicator(s); "
                   "they will fail on their own errors instead", t->hca->name, what, cap);
        return 0;
    }
    for (i = 0; i < n; i++) {
        int live;

        w = hit[i];
        pthread_mutex_lock(&ferry_ib_watch_lock);
        live = w->linked;
        pthread_mutex_unlock(&ferry_ib_watch_lock);
        if (live) {
            ferry_ib_watch_running = w;
            w->fn(w, what, fatal);
            ferry_ib_watch_running = NULL;
        }
        pthread_mutex_lock(&ferry_ib_watch_lock);
        if (--w->calls == 0)
            pthread_cond_broadcast(&ferry_ib_watch_idle);
        pthread_mutex_unlock(&ferry_ib_watch_lock);
    }
    free(hit);
    return n;
}

static const char *ferry_ib_async_enum_name(enum ibv_event_type type)
{
    static const char *const names[] = {
        [IBV_EVENT_CQ_ERR] = "IBV_EVENT_CQ_ERR",
        [IBV_EVENT_QP_FATAL] = "IBV_EVENT_QP_FATAL",
        [IBV_EVENT_QP_REQ_ERR] = "IBV_EVENT_QP_REQ_ERR",
        [IBV_EVENT_QP_ACCESS_ERR] = "IBV_EVENT_QP_ACCESS_ERR",
        [IBV_EVENT_COMM_EST] = "IBV_EVENT_COMM_EST",
        [IBV_EVENT_SQ_DRAINED] = "IBV_EVENT_SQ_DRAINED",
        [IBV_EVENT_PATH_MIG] = "IBV_EVENT_PATH_MIG",
        [IBV_EVENT_PATH_MIG_ERR] = "IBV_EVENT_PATH_MIG_ERR",
        [IBV_EVENT_DEVICE_FATAL] = "IBV_EVENT_DEVICE_FATAL",
        [IBV_EVENT_PORT_ACTIVE] = "IBV_EVENT_PORT_ACTIVE",
        [IBV_EVENT_PORT_ERR] = "IBV_EVENT_PORT_ERR",
        [IBV_EVENT_LID_CHANGE] = "IBV_EVENT_LID_CHANGE",
        [IBV_EVENT_PKEY_CHANGE] = "IBV_EVENT_PKEY_CHANGE",
        [IBV_EVENT_SM_CHANGE] = "IBV_EVENT_SM_CHANGE",
        [IBV_EVENT_SRQ_ERR] = "IBV_EVENT_SRQ_ERR",
        [IBV_EVENT_SRQ_LIMIT_REACHED] = "IBV_EVENT_SRQ_LIMIT_REACHED",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "IBV_EVENT_QP_LAST_WQE_REACHED",
        [IBV_EVENT_CLIENT_REREGISTER] = "IBV_EVENT_CLIENT_REREGISTER",
        [IBV_EVENT_GID_CHANGE] = "IBV_EVENT_GID_CHANGE",
        [IBV_EVENT_WQ_FATAL] = "IBV_EVENT_WQ_FATAL",
    };

    return (unsigned)type < sizeof(names) / sizeof(names[0]) && names[type] != NULL
               ? names[type]
               : "IBV_EVENT_?";
}

/* The device of port `port` on hca, NULL when that port is not in use. */
static ferry_ib_dev_t *ferry_ib_async_dev(const ferry_ib_hca_t *hca, int port)
{
    int i;

    for (i = 0; i < ferry_ib_state.ndev; i++)
        if (ferry_ib_state.devs[i].hca == hca && ferry_ib_state.devs[i].port == port)
            return &ferry_ib_state.devs[i];
    return NULL;
}

/* What a user can do about an event; NULL for the ones only logged. */
static const char *ferry_ib_async_advice(enum ibv_event_type type)
{
    switch (type) {
    case IBV_EVENT_PORT_ERR:
        return "connections over it stall until the transport's retries run out; check the "
               "link (`ibstat`, cable, switch port)";
    case IBV_EVENT_DEVICE_FATAL:
        return "every connection on this HCA fails; the HCA needs a reset (check `dmesg`)";
    case IBV_EVENT_CQ_ERR:
        return "the communicator fails (a completion queue overran: a ferry bug, please report it)";
    case IBV_EVENT_QP_ACCESS_ERR:
        return "the communicator fails (the peer wrote outside a registered buffer or with a "
               "stale key)";
    default:
        return "the communicator using it fails";
    }
}

static void ferry_ib_async_handle(ferry_ib_hca_t *hca, const struct ibv_async_event *ev)
{
    ferry_ib_async_target_t t = {.hca = hca};
    const ferry_ib_dev_t *dev = NULL;
    ferry_ib_dev_t *port_dev;
    const char *words = ferry_ibv.event_type_str(ev->event_type);
    char what[160], where[96];
    int fatal = 1;

    snprintf(where, sizeof(where), "%s", hca->name);
    switch (ev->event_type) {
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return; /* Part of normal QP life. */
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
        fatal = 0;
        /* fall through */
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
        t.has_qp = 1;
        t.qpn = ev->element.qp->qp_num;
        snprintf(what, sizeof(what), "%s (%s) on QP 0x%x", words,
                 ferry_ib_async_enum_name(ev->event_type), t.qpn);
        break;
    case IBV_EVENT_CQ_ERR:
        t.cq = ev->element.cq;
        snprintf(what, sizeof(what), "%s (%s) on a completion queue", words,
                 ferry_ib_async_enum_name(ev->event_type));
        break;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
        t.port = ev->element.port_num;
        snprintf(where, sizeof(where), "%s:%d", hca->name, t.port);
        snprintf(what, sizeof(what), "%s (%s) on port %d", words,
                 ferry_ib_async_enum_name(ev->event_type), t.port);
        port_dev = ferry_ib_async_dev(hca, t.port);
        if (ev->event_type == IBV_EVENT_PORT_ACTIVE) {
            if (port_dev != NULL)
                atomic_store(&port_dev->port_down, 0);
            FERRY_INFO(FERRY_LOG_NET, "ib %s async event %s: the port is back", where, what);
            return;
        }
        if (port_dev != NULL)
            atomic_store(&port_dev->port_down, 1);
        fatal = 0; /* The link may return before the QPs' retries run out. */
        break;
    case IBV_EVENT_DEVICE_FATAL:
        atomic_store(&hca->fatal, 1);
        snprintf(what, sizeof(what), "%s (%s) on the device", words,
                 ferry_ib_async_enum_name(ev->event_type));
        break;
    default:
        FERRY_WARN("ib %s:%d async event %s (%s); no communicator is failed for it", hca->name,
                   ev->element.port_num, words, ferry_ib_async_enum_name(ev->event_type));
        return;
    }
    /* Name the device:port of the comm for QP/CQ events (the event itself carries no port). */
    if (t.has_qp || t.cq != NULL) {
        dev = ferry_ib_async_watched_dev(&t);
        FERRY_WARN("ib %s async event %s; %s", dev != NULL ? dev->name : where, what,
                   dev != NULL ? ferry_ib_async_advice(ev->event_type)
                               : "no communicator of ferry's uses it");
        ferry_ib_async_notify(&t, what, fatal);
        return;
    }
    FERRY_WARN("ib %s async event %s; %s", where, what, ferry_ib_async_advice(ev->event_type));
    ferry_ib_async_notify(&t, what, fatal);
}

/* Read every queued event; 0 when the queue is drained, -1 when the context is unusable. */
static int ferry_ib_async_drain(ferry_ib_hca_t *hca)
{
    struct ibv_async_event ev;

    for (;;) {
        if (ferry_ibv.get_async_event(hca->ctx, &ev) != 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            FERRY_WARN("ib %s: ibv_get_async_event failed: %s; async events of this HCA are "
                       "no longer reported (connections still fail on their own errors)",
                       hca->name, strerror(errno));
            return -1;
        }
        ferry_ib_async_handle(hca, &ev);
        ferry_ibv.ack_async_event(&ev);
    }
}

static void *ferry_ib_async_main(void *arg)
{
    ferry_ib_hca_t *hca = arg;
    struct pollfd fds[2] = {{.fd = hca->ctx->async_fd, .events = POLLIN},
                            {.fd = hca->async_stop_fd, .events = POLLIN}};
    char name[16];

    snprintf(name, sizeof(name), "ferry-ibasync%d", hca->index);
    pthread_setname_np(pthread_self(), name);
    for (;;) {
        int n = poll(fds, 2, FERRY_IB_ASYNC_POLL_MS);

        if (n < 0 && errno != EINTR) {
            FERRY_WARN("ib %s: poll on the async event fd failed: %s; async events of this HCA "
                       "are no longer reported", hca->name, strerror(errno));
            break;
        }
        if (n <= 0)
            continue;
        if (fds[1].revents != 0)
            break;
        if (fds[0].revents & POLLIN) {
            if (ferry_ib_async_drain(hca) != 0)
                break;
        } else if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
            break; /* Context gone: nothing more will come. */
        }
    }
    return NULL;
}

ferry_status_t ferry_ib_async_start(ferry_ib_hca_t *hca)
{
    int flags = fcntl(hca->ctx->async_fd, F_GETFL), rc;

    if (flags < 0 || fcntl(hca->ctx->async_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        FERRY_WARN("ib %s: cannot make the async event fd non-blocking: %s", hca->name,
                   strerror(errno));
        return FERRY_ERR_IO;
    }
    hca->async_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (hca->async_stop_fd < 0) {
        FERRY_WARN("ib %s: eventfd for the async thread failed: %s; raise the open-file "
                   "limit (ulimit -n)", hca->name, strerror(errno));
        return FERRY_ERR_IO;
    }
    rc = pthread_create(&hca->async_thread, NULL, ferry_ib_async_main, hca);
    if (rc != 0) {
        FERRY_WARN("ib %s: cannot start the async event thread: %s", hca->name, strerror(rc));
        close(hca->async_stop_fd);
        hca->async_stop_fd = -1;
        return FERRY_ERR_IO;
    }
    hca->async_started = 1;
    return FERRY_OK;
}

void ferry_ib_async_stop(ferry_ib_hca_t *hca)
{
    uint64_t one = 1;

    if (!hca->async_started)
        return;
    if (write(hca->async_stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        FERRY_WARN("ib %s: waking the async thread failed: %s", hca->name, strerror(errno));
    pthread_join(hca->async_thread, NULL);
    close(hca->async_stop_fd);
    hca->async_stop_fd = -1;
    hca->async_started = 0;
}
