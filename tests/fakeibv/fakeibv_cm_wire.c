/*
 * The CM exchange between two processes and the thread that drives it.
 *
 *   active (rdma_connect)                    passive (listener)
 *   TCP connect to the rdma_cm port  ---->   accept: internal id, FCM_WAIT_REQ
 *   REQ (qpn, psn, lid, gid, pd<=56) ---->   CONNECT_REQUEST (new id, private data)
 *                                            rdma_accept: QP -> RTR -> RTS
 *   QP -> RTR -> RTS                 <----   REP (pd<=196)     | rdma_reject: REJ (pd<=148)
 *   ESTABLISHED                      ---->   RTU: ESTABLISHED  | REJECTED (status 28, pd)
 *   DREQ                             <--->   DISCONNECTED; its rdma_disconnect sends the
 *                                            DREP, which is the DREQ sender's DISCONNECTED
 *   EOF (process gone)               <--->   DISCONNECTED
 *
 * What the active side gets when there is no answer: nobody listening on
 * the port is REJECTED with status 8 (IB_CM_REJ_INVALID_SERVICE_ID, as a
 * remote CM without a listener answers); a TCP connect that fails
 * otherwise is UNREACHABLE with -errno; no REP within the timeout is
 * UNREACHABLE with -ETIMEDOUT; the passive process closing before it
 * answered is REJECTED with status 28 (its kernel rejects for it).
 * "fakeibv-cm" runs while some id has a socket, and exits when none has.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fakeibv_cm_internal.h"

#define FCM_POLL_MAX   256 /* Sockets watched per round. */
#define FCM_ACCEPT_MAX 16  /* Connections taken from one listener per round. */

static int fcm_thread_up;
static int fcm_wake[2] = {-1, -1};

void fcm_msg_fill(struct fcm_id *id, struct fcm_msg *msg, int type, const void *pd, int pd_len)
{
    const struct fcm_port *p = id->dev >= 0 ? &fcm_devs[id->dev].ports[id->port - 1] : NULL;

    memset(msg, 0, sizeof(*msg));
    msg->magic = FCM_MAGIC;
    msg->type = (uint8_t)type;
    msg->pd_len = (uint8_t)pd_len;
    if (pd_len > 0)
        memcpy(msg->pd, pd, (size_t)pd_len);
    msg->qpn = id->id.qp != NULL ? id->id.qp->qp_num : id->param.qp_num;
    msg->psn = id->psn;
    msg->resp_res = id->param.responder_resources;
    msg->init_depth = id->param.initiator_depth;
    msg->retry_count = id->param.retry_count;
    msg->rnr_retry = id->param.rnr_retry_count;
    msg->srq = id->param.srq;
    if (p != NULL) {
        msg->link_layer = p->link_layer;
        msg->mtu = (uint8_t)p->mtu;
        msg->lid = p->lid;
        memcpy(msg->gid, p->gid.raw, 16);
    }
    memcpy(&msg->src, &id->id.route.addr.src_storage,
           fcm_sa_len(&id->id.route.addr.src_addr) <= sizeof(msg->src)
               ? fcm_sa_len(&id->id.route.addr.src_addr) : sizeof(msg->src));
}

int fcm_msg_send(struct fcm_id *id, struct fcm_msg *msg)
{
    size_t done = 0;
    int spins = 0;

    if (id->fd < 0)
        return ENOTCONN;
    /* A message is far smaller than a socket buffer; bounded in case the peer stalls. */
    while (done < sizeof(*msg) && spins++ < 1000) {
        ssize_t n = send(id->fd, (char *)msg + done, sizeof(*msg) - done, MSG_NOSIGNAL);

        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            return errno;
        } else {
            struct pollfd pfd = {.fd = id->fd, .events = POLLOUT};

            poll(&pfd, 1, 10);
        }
    }
    return done == sizeof(*msg) ? 0 : ETIMEDOUT;
}

/*
 * What came in on id's socket: 1 a whole message in *msg, 0 not yet (the
 * part is kept: a peer that sends a few bytes and stalls costs nothing),
 * -1 EOF, an error or garbage (the connection is done).
 */
static int fcm_msg_recv(struct fcm_id *id, struct fcm_msg *msg)
{
    ssize_t n = recv(id->fd, id->rbuf + id->rlen, sizeof(id->rbuf) - id->rlen, MSG_DONTWAIT);

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        return -1;
    if (n < 0)
        return 0;
    id->rlen += (size_t)n;
    /* Not a CM message: the connection is done as soon as its first bytes say so. */
    if (id->rlen >= sizeof(uint32_t) && *(uint32_t *)(void *)id->rbuf != FCM_MAGIC)
        return -1;
    if (id->rlen < sizeof(id->rbuf))
        return 0;
    memcpy(msg, id->rbuf, sizeof(*msg));
    id->rlen = 0;
    return msg->magic == FCM_MAGIC ? 1 : -1;
}

int fcm_qp_connect(struct fcm_id *id, const struct fcm_msg *peer, int initiator)
{
    const struct fcm_port *p = &fcm_devs[id->dev].ports[id->port - 1];
    struct ibv_device_attr da;
    struct ibv_qp_attr a;
    const struct fcm_msg *req = initiator ? &id->out : peer; /* The REQ carries the retries. */
    int rc;

    memset(&da, 0, sizeof(da));
    ibv_query_device(id->id.verbs, &da);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                        (id->param.responder_resources ? IBV_ACCESS_REMOTE_READ : 0);
    rc = ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
    if (rc != 0)
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = p->mtu < (enum ibv_mtu)peer->mtu ? p->mtu : (enum ibv_mtu)peer->mtu;
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.max_dest_rd_atomic = id->param.responder_resources < da.max_qp_rd_atom
                               ? id->param.responder_resources : (uint8_t)da.max_qp_rd_atom;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = peer->lid;
    a.ah_attr.port_num = (uint8_t)id->port;
    if (p->link_layer == IBV_LINK_LAYER_ETHERNET || memcmp(p->gid.raw, peer->gid, 8) != 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.grh.traffic_class = (uint8_t)id->tos;
    }
    rc = ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0)
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = req->retry_count < 7 ? req->retry_count : 7;
    a.rnr_retry = id->param.rnr_retry_count < 7 ? id->param.rnr_retry_count : 7;
    a.sq_psn = id->psn;
    a.max_rd_atomic = id->param.initiator_depth < da.max_qp_init_rd_atom
                          ? id->param.initiator_depth : (uint8_t)da.max_qp_init_rd_atom;
    return ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                            IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                            IBV_QP_MAX_QP_RD_ATOMIC);
}

void fcm_qp_to_err(struct fcm_id *id)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
}

static void fcm_fail(struct fcm_id *id, enum rdma_cm_event_type type, int status,
                     const struct fcm_msg *msg)
{
    fcm_id_close_fd(id);
    id->state = FCM_DONE;
    fcm_event_push(id, type, status, msg, NULL);
}

static void fcm_on_listener(struct fcm_id *l)
{
    int i;

    for (i = 0; i < FCM_ACCEPT_MAX; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        struct fcm_id *w;

        if (fd < 0)
            return;
        w = fcm_id_new((struct fcm_channel *)l->id.channel, l->id.context, l->id.ps);
        if (w == NULL) {
            close(fd);
            return;
        }
        w->fd = fd;
        w->state = FCM_WAIT_REQ;
        w->listener = l;
        w->deadline_ms = fcm_now_ms() + (uint64_t)w->timeout_ms;
    }
}

static void fcm_on_req(struct fcm_id *w)
{
    struct sockaddr_storage local;
    socklen_t len = sizeof(local);
    struct fcm_msg rej;
    int dev, port;

    int rc = fcm_msg_recv(w, &w->remote);

    if (rc == 0)
        return;
    if (rc < 0 || w->remote.type != FCM_MSG_REQ) {
        fcm_id_close_fd(w); /* Not a CM peer, or it went away: nothing to report. */
        w->state = FCM_DONE;
        return;
    }
    getsockname(w->fd, (struct sockaddr *)&local, &len);
    if (fcm_port_for_addr((struct sockaddr *)&local, &dev, &port) != 0) {
        fcm_msg_fill(w, &rej, FCM_MSG_REJ, NULL, 0);
        rej.status = FCM_REJ_NO_LISTENER;
        fcm_msg_send(w, &rej);
        fcm_id_close_fd(w);
        w->state = FCM_DONE;
        return;
    }
    fcm_id_set_port(w, dev, port);
    memcpy(&w->id.route.addr.src_storage, &local, len);
    /* The port the listener has, not the connection's. */
    if (local.ss_family == AF_INET)
        w->id.route.addr.src_sin.sin_port = w->listener->id.route.addr.src_sin.sin_port;
    else
        w->id.route.addr.src_sin6.sin6_port = w->listener->id.route.addr.src_sin6.sin6_port;
    memcpy(&w->id.route.addr.dst_storage, &w->remote.src, sizeof(w->remote.src));
    memcpy(w->id.route.addr.addr.ibaddr.dgid.raw, w->remote.gid, 16);
    w->id.route.num_paths = 1;
    w->state = FCM_REQ_RCVD;
    w->deadline_ms = 0;
    fcm_event_push(w, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &w->remote, w->listener);
    w->listener = NULL;
}

static void fcm_on_connected(struct fcm_id *id)
{
    int err = 0;
    socklen_t len = sizeof(err);

    getsockopt(id->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == ECONNRESET)
        err = ECONNREFUSED; /* A RST for the SYN: nobody listens (the listener just closed). */
    if (err == ECONNREFUSED && fcm_now_ms() < id->refused_until) {
        fcm_id_close_fd(id);
        id->retry_at_ms = fcm_now_ms() + 10;
        return;
    }
    if (err == ECONNREFUSED) {
        fcm_fail(id, RDMA_CM_EVENT_REJECTED, FCM_REJ_NO_LISTENER, NULL);
        return;
    }
    if (err != 0) {
        fcm_fail(id, RDMA_CM_EVENT_UNREACHABLE, -err, NULL);
        return;
    }
    err = fcm_msg_send(id, &id->out);
    if (err != 0) {
        fcm_fail(id, RDMA_CM_EVENT_UNREACHABLE, -err, NULL);
        return;
    }
    id->state = FCM_REQ_SENT;
}

/* A refused REQ, sent again from the same source address. */
static void fcm_reconnect(struct fcm_id *id)
{
    const struct sockaddr *src = &id->id.route.addr.src_addr;
    int one = 1, fd = socket(src->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    id->retry_at_ms = 0;
    if (fd < 0) {
        fcm_fail(id, RDMA_CM_EVENT_UNREACHABLE, -errno, NULL);
        return;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, src, fcm_sa_len(src)) != 0) {
        int err = errno;

        close(fd);
        fcm_fail(id, RDMA_CM_EVENT_UNREACHABLE, -err, NULL);
        return;
    }
    id->fd = fd;
    (void)!connect(fd, &id->id.route.addr.dst_addr, fcm_sa_len(&id->id.route.addr.dst_addr));
}

static void fcm_on_reply(struct fcm_id *id)
{
    struct fcm_msg rtu;
    int rc = fcm_msg_recv(id, &id->remote);

    if (rc == 0)
        return;
    if (rc < 0) {
        fcm_fail(id, RDMA_CM_EVENT_REJECTED, FCM_REJ_CONSUMER, NULL);
        return;
    }
    if (id->remote.type == FCM_MSG_REJ) {
        fcm_fail(id, RDMA_CM_EVENT_REJECTED, id->remote.status, &id->remote);
        return;
    }
    if (id->remote.type != FCM_MSG_REP) {
        fcm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO, NULL);
        return;
    }
    memcpy(id->id.route.addr.addr.ibaddr.dgid.raw, id->remote.gid, 16);
    rc = id->id.qp != NULL ? fcm_qp_connect(id, &id->remote, 1) : 0;
    fcm_msg_fill(id, &rtu, rc == 0 ? FCM_MSG_RTU : FCM_MSG_REJ, NULL, 0);
    if (rc == 0)
        rc = fcm_msg_send(id, &rtu);
    if (rc != 0) {
        fcm_msg_send(id, &rtu);
        fcm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -rc, NULL);
        return;
    }
    id->state = FCM_ESTABLISHED;
    id->deadline_ms = 0;
    fcm_event_push(id, RDMA_CM_EVENT_ESTABLISHED, 0, &id->remote, NULL);
}

static void fcm_on_rtu(struct fcm_id *id)
{
    struct fcm_msg m;
    int rc = fcm_msg_recv(id, &m);

    if (rc == 0)
        return;
    if (rc < 0 || m.type != FCM_MSG_RTU) {
        fcm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET, NULL);
        return;
    }
    id->state = FCM_ESTABLISHED;
    id->deadline_ms = 0;
    fcm_event_push(id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, NULL);
}

static void fcm_on_input(struct fcm_id *id)
{
    struct fcm_msg m;
    int rc;

    switch (id->state) {
    case FCM_LISTEN: fcm_on_listener(id); break;
    case FCM_WAIT_REQ: fcm_on_req(id); break;
    case FCM_REQ_SENT: fcm_on_reply(id); break;
    case FCM_REP_SENT: fcm_on_rtu(id); break;
    case FCM_REQ_RCVD:
        /* The active side went away before we answered: our answer will find nobody. */
        if (fcm_msg_recv(id, &m) < 0) {
            fcm_id_close_fd(id);
            id->peer_gone = 1;
        }
        break;
    case FCM_ESTABLISHED:
        /* DREQ, or EOF: the peer's kernel disconnects for a process that exits. */
        rc = fcm_msg_recv(id, &m);
        if (rc == 0)
            break;
        if (rc > 0 && m.type == FCM_MSG_DREQ) {
            id->state = FCM_DREQ_RCVD;
            fcm_event_push(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL);
        } else {
            fcm_fail(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
        }
        break;
    case FCM_DISCONNECTING: /* DREP or EOF. */
        if (fcm_msg_recv(id, &m) != 0)
            fcm_fail(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
        break;
    case FCM_DREQ_RCVD: /* Reported already; the peer closed. */
        fcm_id_close_fd(id);
        id->state = FCM_DONE;
        break;
    default: break;
    }
}

static void fcm_on_timeout(struct fcm_id *id)
{
    if (id->state == FCM_WAIT_REQ) {
        fcm_id_close_fd(id);
        id->state = FCM_DONE;
    } else if (id->state == FCM_CONNECTING || id->state == FCM_REQ_SENT) {
        fcm_fail(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL);
    } else if (id->state == FCM_REP_SENT) {
        fcm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT, NULL);
    } else if (id->state == FCM_DISCONNECTING) {
        fcm_fail(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL); /* No DREP: DREQ timeout. */
    }
}

/* Internal ids that are done (never reported) are freed here. */
static void fcm_reap_internal(void)
{
    struct fcm_id **pp = &fcm_ids;

    while (*pp != NULL) {
        struct fcm_id *w = *pp;

        if (w->state == FCM_DONE && w->listener != NULL) {
            *pp = w->next;
            free(w);
        } else {
            pp = &w->next;
        }
    }
}

static int fcm_retry_pending(void)
{
    const struct fcm_id *id;

    for (id = fcm_ids; id != NULL; id = id->next)
        if (id->state == FCM_CONNECTING && id->fd < 0)
            return 1;
    return 0;
}

static void *fcm_thread_main(void *arg)
{
    struct pollfd pfd[FCM_POLL_MAX + 1];
    struct fcm_id *who[FCM_POLL_MAX + 1];
    int fds[FCM_POLL_MAX + 1];

    pthread_mutex_lock(&fcm_lock);
    for (;;) {
        uint64_t now = fcm_now_ms();
        struct fcm_id *id;
        int n = 1, i, wait_ms = 100;
        char drain[64];

        fcm_reap_internal();
        pfd[0].fd = fcm_wake[0];
        pfd[0].events = POLLIN;
        for (id = fcm_ids; id != NULL && n <= FCM_POLL_MAX; id = id->next) {
            if (id->deadline_ms != 0 && now >= id->deadline_ms) {
                fcm_on_timeout(id);
                continue;
            }
            if (id->state == FCM_CONNECTING && id->fd < 0) {
                if (now >= id->retry_at_ms)
                    fcm_reconnect(id);
                else
                    wait_ms = 10;
                if (id->fd < 0)
                    continue;
            }
            if (id->fd < 0 || id->state == FCM_IDLE || id->state == FCM_ADDR_RESOLVED ||
                id->state == FCM_ROUTE_RESOLVED)
                continue;
            pfd[n].fd = id->fd;
            pfd[n].events = id->state == FCM_CONNECTING ? POLLOUT : POLLIN;
            pfd[n].revents = 0;
            who[n] = id;
            fds[n] = id->fd;
            n++;
        }
        if (n == 1 && !fcm_retry_pending()) {
            fcm_thread_up = 0;
            pthread_mutex_unlock(&fcm_lock);
            return arg;
        }
        pthread_mutex_unlock(&fcm_lock);
        poll(pfd, (nfds_t)n, wait_ms);
        pthread_mutex_lock(&fcm_lock);
        if (pfd[0].revents & POLLIN)
            (void)!read(fcm_wake[0], drain, sizeof(drain));
        for (i = 1; i < n; i++) {
            if (pfd[i].revents == 0)
                continue;
            /* The id may have been destroyed or moved on while we polled. */
            for (id = fcm_ids; id != NULL && id != who[i]; id = id->next)
                ;
            if (id == NULL || id->fd != fds[i])
                continue;
            if (id->state == FCM_CONNECTING)
                fcm_on_connected(id);
            else
                fcm_on_input(id);
        }
    }
}

void fcm_thread_kick(void)
{
    pthread_t thr;
    pthread_attr_t attr;
    sigset_t all, old;
    char b = 1;

    pthread_mutex_lock(&fcm_lock);
    if (fcm_wake[0] < 0 && pipe2(fcm_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        fcm_log(0, "pipe for the CM thread failed: %s", strerror(errno));
        pthread_mutex_unlock(&fcm_lock);
        return;
    }
    if (fcm_thread_up) {
        (void)!write(fcm_wake[1], &b, 1);
        pthread_mutex_unlock(&fcm_lock);
        return;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Signals belong to the consumer's threads, as with fakeibv's others. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&thr, &attr, fcm_thread_main, NULL) == 0) {
        fcm_thread_up = 1;
        pthread_setname_np(thr, "fakeibv-cm");
    } else {
        fcm_log(0, "the CM thread did not start: %s", strerror(errno));
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    pthread_mutex_unlock(&fcm_lock);
}
