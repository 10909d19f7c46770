/*
 * The emulated librdmacm's API: devices, event channels, ids and their
 * events, address and route resolution, connect/accept/reject/disconnect,
 * and QPs on ids. The exchange with the peer is fakeibv_cm_wire.c's.
 *
 * FAKEIBV_RDMA_CM_DEV names the device file real librdmacm opens
 * (/dev/infiniband/rdma_cm): when set and missing, every entry point fails
 * with ENODEV as the real library does; unset, the device is taken to be
 * there. FAKEIBV_CM_TIMEOUT_MS bounds the CM exchange (default 5000).
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fakeibv_cm_internal.h"

pthread_mutex_t fcm_lock = PTHREAD_MUTEX_INITIALIZER;
struct fcm_id *fcm_ids;
struct fcm_dev fcm_devs[FCM_MAX_DEVS];
int fcm_ndevs;
static int fcm_init_rc = -1;

void fcm_log(int level, const char *fmt, ...)
{
    const char *d = getenv("FAKEIBV_DEBUG");
    char buf[512];
    va_list ap;

    if (level > (d != NULL ? atoi(d) : 0))
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakeibv-cm[%d]: %s\n", (int)getpid(), buf);
}

uint64_t fcm_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000ULL + (uint64_t)ts.tv_nsec / 1000000ULL;
}

long fcm_timeout_ms(void)
{
    const char *s = getenv("FAKEIBV_CM_TIMEOUT_MS");
    long v = s != NULL ? strtol(s, NULL, 0) : 0;

    return v > 0 ? v : 5000;
}

/*
 * A REQ that finds no listener is sent again for this long before it is
 * REJECTED with status 8. On a fabric, address and route resolution take
 * milliseconds (ARP, an SA path query), and perftest -R's client relies on
 * that to find the server's second listener; the emulation resolves at
 * once, so it gives the listener the same head start here.
 */
long fcm_nolisten_retry_ms(void)
{
    const char *s = getenv("FAKEIBV_CM_NOLISTEN_RETRY_MS");

    return s != NULL && *s != '\0' ? strtol(s, NULL, 0) : 1000;
}

static void fcm_port_init(struct fcm_dev *d, int p)
{
    struct fcm_port *port = &d->ports[p - 1];
    struct ibv_port_attr attr;
    struct ibv_gid_entry entry;

    memset(&attr, 0, sizeof(attr));
    ibv_query_port(d->ctx, (uint8_t)p, &attr);
    port->lid = attr.lid;
    port->link_layer = attr.link_layer;
    port->mtu = attr.active_mtu;
    port->ipv4[0] = 127;
    port->ipv4[2] = (uint8_t)(attr.lid >> 8);
    port->ipv4[3] = (uint8_t)attr.lid;
    port->ifindex = if_nametoindex("lo");
    port->gid_index = 0;
    if (attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        /* RoCE v2 on the IPv4-mapped GID, as rdma_cm's default. */
        port->gid_index = 3;
        if (ibv_query_gid_ex(d->ctx, (uint32_t)p, 3, &entry, 0) == 0) {
            memcpy(port->ipv4, &entry.gid.raw[12], 4);
            port->ifindex = entry.ndev_ifindex;
        }
    }
    ibv_query_gid(d->ctx, (uint8_t)p, port->gid_index, &port->gid);
}

static int fcm_devices_open(void)
{
    const char *dev = getenv("FAKEIBV_RDMA_CM_DEV");
    struct ibv_device **list;
    int n = 0, i;

    if (dev != NULL && *dev != '\0' && access(dev, F_OK) != 0)
        return ENODEV; /* librdmacm: "could not open rdma_cm device". */
    list = ibv_get_device_list(&n);
    if (list == NULL)
        return ENODEV;
    for (i = 0; i < n && fcm_ndevs < FCM_MAX_DEVS; i++) {
        struct fcm_dev *d = &fcm_devs[fcm_ndevs];
        struct ibv_device_attr da;
        int p;

        d->ctx = ibv_open_device(list[i]);
        if (d->ctx == NULL || ibv_query_device(d->ctx, &da) != 0)
            continue;
        d->nports = da.phys_port_cnt < FCM_MAX_PORTS ? da.phys_port_cnt : FCM_MAX_PORTS;
        for (p = 1; p <= d->nports; p++)
            fcm_port_init(d, p);
        fcm_ndevs++;
    }
    ibv_free_device_list(list);
    return fcm_ndevs > 0 ? 0 : ENODEV;
}

int fcm_init(void)
{
    /* Called with fcm_lock held. */
    if (fcm_init_rc < 0)
        fcm_init_rc = fcm_devices_open();
    return fcm_init_rc;
}

static int fcm_init_locked_or_errno(void)
{
    int rc;

    pthread_mutex_lock(&fcm_lock);
    rc = fcm_init();
    pthread_mutex_unlock(&fcm_lock);
    if (rc != 0)
        errno = rc;
    return rc;
}

FCM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
    struct ibv_context **list;
    int i;

    if (fcm_init_locked_or_errno() != 0) {
        if (num_devices != NULL)
            *num_devices = 0;
        return NULL;
    }
    list = calloc((size_t)fcm_ndevs + 1, sizeof(*list));
    if (list == NULL)
        return NULL;
    for (i = 0; i < fcm_ndevs; i++)
        list[i] = fcm_devs[i].ctx;
    if (num_devices != NULL)
        *num_devices = fcm_ndevs;
    return list;
}

FCM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
    free(list);
}

/* ---- event channels --------------------------------------------------- */

FCM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
    struct fcm_channel *ch;
    int fds[2];

    if (fcm_init_locked_or_errno() != 0)
        return NULL;
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        free(ch);
        return NULL;
    }
    ch->ch.fd = fds[0];
    ch->wfd = fds[1];
    return &ch->ch;
}

FCM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    struct fcm_channel *ch = (struct fcm_channel *)channel;

    if (ch == NULL)
        return;
    pthread_mutex_lock(&fcm_lock);
    while (ch->head != NULL) {
        struct fcm_event *e = ch->head;

        ch->head = e->next;
        free(e);
    }
    pthread_mutex_unlock(&fcm_lock);
    close(ch->ch.fd);
    close(ch->wfd);
    free(ch);
}

/* The fd is readable exactly while events are queued: one byte in the pipe. */
static void fcm_channel_append(struct fcm_channel *ch, struct fcm_event *e)
{
    char b = 1;

    e->next = NULL;
    if (ch->head == NULL) {
        ch->head = e;
        if (write(ch->wfd, &b, 1) != 1)
            fcm_log(0, "event pipe write failed: %s", strerror(errno));
    } else {
        ch->tail->next = e;
    }
    ch->tail = e;
}

static struct fcm_event *fcm_channel_pop(struct fcm_channel *ch)
{
    struct fcm_event *e = ch->head;
    char b;

    if (e == NULL)
        return NULL;
    ch->head = e->next;
    if (ch->head == NULL) {
        ch->tail = NULL;
        if (read(ch->ch.fd, &b, 1) != 1)
            fcm_log(0, "event pipe read failed: %s", strerror(errno));
    }
    return e;
}

void fcm_event_push(struct fcm_id *id, enum rdma_cm_event_type type, int status,
                    const struct fcm_msg *msg, struct fcm_id *listen_id)
{
    struct fcm_event *e = calloc(1, sizeof(*e));

    if (e == NULL) {
        fcm_log(0, "no memory for a %s event; dropped", rdma_event_str(type));
        return;
    }
    e->ev.id = &id->id;
    e->ev.listen_id = listen_id != NULL ? &listen_id->id : NULL;
    e->ev.event = type;
    e->ev.status = status;
    if (msg != NULL) {
        memcpy(e->pd, msg->pd, msg->pd_len);
        e->ev.param.conn.private_data = msg->pd_len > 0 ? e->pd : NULL;
        e->ev.param.conn.private_data_len = msg->pd_len;
        e->ev.param.conn.responder_resources = msg->resp_res;
        e->ev.param.conn.initiator_depth = msg->init_depth;
        e->ev.param.conn.retry_count = msg->retry_count;
        e->ev.param.conn.rnr_retry_count = msg->rnr_retry;
        e->ev.param.conn.srq = msg->srq;
        e->ev.param.conn.qp_num = msg->qpn;
    }
    fcm_log(1, "event %s status %d on id %p", rdma_event_str(type), status, (void *)id);
    fcm_channel_append((struct fcm_channel *)id->id.channel, e);
}

FCM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel,
                                 struct rdma_cm_event **event)
{
    struct fcm_channel *ch = (struct fcm_channel *)channel;
    int nonblock = (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) != 0;

    for (;;) {
        struct fcm_event *e;
        struct pollfd pfd = {.fd = channel->fd, .events = POLLIN};

        pthread_mutex_lock(&fcm_lock);
        e = fcm_channel_pop(ch);
        pthread_mutex_unlock(&fcm_lock);
        if (e != NULL) {
            *event = &e->ev;
            return 0;
        }
        if (nonblock) {
            errno = EAGAIN;
            return -1;
        }
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
            return -1;
    }
}

FCM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    free(event);
    return 0;
}

FCM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
    static const char *const names[] = {
        "RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
        "RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
        "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
        "RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
        "RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED",
        "RDMA_CM_EVENT_DEVICE_REMOVAL", "RDMA_CM_EVENT_MULTICAST_JOIN",
        "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
        "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    };

    return (unsigned)event < sizeof(names) / sizeof(names[0]) ? names[event]
                                                              : "UNKNOWN EVENT";
}

/* ---- ids -------------------------------------------------------------- */

struct fcm_id *fcm_id_new(struct fcm_channel *ch, void *context, enum rdma_port_space ps)
{
    struct fcm_id *id = calloc(1, sizeof(*id));

    if (id == NULL)
        return NULL;
    id->id.channel = &ch->ch;
    id->id.context = context;
    id->id.ps = ps;
    id->id.qp_type = IBV_QPT_RC;
    id->fd = -1;
    id->dev = -1;
    id->port = -1;
    id->timeout_ms = (int)fcm_timeout_ms();
    if (getrandom(&id->psn, sizeof(id->psn), GRND_NONBLOCK) != (ssize_t)sizeof(id->psn))
        id->psn = (uint32_t)fcm_now_ms();
    id->psn &= 0xffffff;
    id->next = fcm_ids;
    fcm_ids = id;
    return id;
}

void fcm_id_close_fd(struct fcm_id *id)
{
    if (id->fd >= 0)
        close(id->fd);
    id->fd = -1;
}

FCM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id_p,
                              void *context, enum rdma_port_space ps)
{
    struct fcm_id *id;

    if (channel == NULL) {
        errno = ENOSYS; /* Synchronous ids are not emulated. */
        return -1;
    }
    if (ps != RDMA_PS_TCP) {
        errno = EINVAL; /* Only RC connections over RDMA_PS_TCP. */
        return -1;
    }
    pthread_mutex_lock(&fcm_lock);
    id = fcm_id_new((struct fcm_channel *)channel, context, ps);
    pthread_mutex_unlock(&fcm_lock);
    if (id == NULL) {
        errno = ENOMEM;
        return -1;
    }
    *id_p = &id->id;
    return 0;
}

FCM_EXPORT int rdma_destroy_id(struct rdma_cm_id *cm_id)
{
    struct fcm_id *id = (struct fcm_id *)cm_id, **pp;
    struct fcm_channel *ch = (struct fcm_channel *)cm_id->channel;
    struct fcm_event **ep, *e;

    pthread_mutex_lock(&fcm_lock);
    for (pp = &fcm_ids; *pp != NULL; pp = &(*pp)->next)
        if (*pp == id) {
            *pp = id->next;
            break;
        }
    /* Events not yet fetched must not name a freed id. */
    for (ep = &ch->head; (e = *ep) != NULL;) {
        if (e->ev.id == cm_id || e->ev.listen_id == cm_id) {
            *ep = e->next;
            free(e);
        } else {
            ep = &e->next;
        }
    }
    ch->tail = NULL;
    for (e = ch->head; e != NULL; e = e->next)
        ch->tail = e;
    if (ch->head == NULL) {
        struct pollfd pfd = {.fd = ch->ch.fd, .events = POLLIN};
        char b;

        if (poll(&pfd, 1, 0) == 1 && read(ch->ch.fd, &b, 1) != 1)
            fcm_log(0, "event pipe read failed: %s", strerror(errno));
    }
    /* Waiting ids of a listener go with it (their peers see the connection close). */
    for (pp = &fcm_ids; *pp != NULL;) {
        struct fcm_id *w = *pp;

        if (w->listener == id) { /* Internal: never handed to the user. */
            *pp = w->next;
            fcm_id_close_fd(w);
            free(w);
        } else {
            pp = &w->next;
        }
    }
    /*
     * The CM thread may be in poll() on this fd, and poll holds the socket
     * until it returns (up to 100 ms): close() alone would leave a listener
     * listening that long, and a rebind of its port (perftest -R binds it
     * again for the data connection) would fail with EADDRINUSE. rdma_cm
     * frees the port on return; shutdown() stops the listening now.
     */
    if (id->state == FCM_LISTEN && id->fd >= 0)
        shutdown(id->fd, SHUT_RDWR);
    fcm_id_close_fd(id);
    pthread_mutex_unlock(&fcm_lock);
    free(id);
    return 0;
}

FCM_EXPORT int rdma_migrate_id(struct rdma_cm_id *cm_id, struct rdma_event_channel *channel)
{
    struct fcm_channel *from = (struct fcm_channel *)cm_id->channel;
    struct fcm_channel *to = (struct fcm_channel *)channel;
    struct fcm_event *keep = NULL, *e;

    pthread_mutex_lock(&fcm_lock);
    /* Its queued events move with it, in order. */
    while ((e = fcm_channel_pop(from)) != NULL) {
        if (e->ev.id == cm_id) {
            fcm_channel_append(to, e);
        } else {
            e->next = keep;
            keep = e;
        }
    }
    while (keep != NULL) { /* Back in their original order. */
        struct fcm_event *rev = NULL;

        while (keep != NULL) {
            e = keep;
            keep = e->next;
            e->next = rev;
            rev = e;
        }
        while (rev != NULL) {
            e = rev;
            rev = e->next;
            fcm_channel_append(from, e);
        }
    }
    cm_id->channel = channel;
    pthread_mutex_unlock(&fcm_lock);
    return 0;
}

FCM_EXPORT int rdma_set_option(struct rdma_cm_id *cm_id, int level, int optname, void *optval,
                               size_t optlen)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;

    if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_TOS && optlen >= 1) {
        id->tos = *(uint8_t *)optval;
        return 0;
    }
    /* REUSEADDR, AFONLY, ACK_TIMEOUT, ...: accepted, nothing to emulate. */
    return 0;
}

/* ---- addresses -------------------------------------------------------- */

static int fcm_bind_locked(struct fcm_id *id, const struct sockaddr *addr)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int one = 1, dev, port;
    int fd;

    fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, addr, fcm_sa_len(addr)) != 0 || getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        int rc = errno;

        close(fd);
        return rc;
    }
    fcm_id_close_fd(id);
    id->fd = fd;
    memcpy(&id->id.route.addr.src_storage, &ss, len);
    if (fcm_port_for_addr((struct sockaddr *)&ss, &dev, &port) == 0)
        fcm_id_set_port(id, dev, port);
    return 0;
}

FCM_EXPORT int rdma_bind_addr(struct rdma_cm_id *cm_id, struct sockaddr *addr)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    int rc;

    pthread_mutex_lock(&fcm_lock);
    rc = id->state == FCM_IDLE ? fcm_bind_locked(id, addr) : EINVAL;
    pthread_mutex_unlock(&fcm_lock);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

FCM_EXPORT int rdma_listen(struct rdma_cm_id *cm_id, int backlog)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    int rc = 0;

    pthread_mutex_lock(&fcm_lock);
    if (id->fd < 0 || id->state != FCM_IDLE)
        rc = EINVAL;
    else if (listen(id->fd, backlog > 0 ? backlog : 128) != 0)
        rc = errno;
    if (rc == 0) {
        fcntl(id->fd, F_SETFL, fcntl(id->fd, F_GETFL) | O_NONBLOCK);
        id->state = FCM_LISTEN;
        id->backlog = backlog;
    }
    pthread_mutex_unlock(&fcm_lock);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    fcm_thread_kick();
    return 0;
}

FCM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *cm_id, struct sockaddr *src_addr,
                                 struct sockaddr *dst_addr, int timeout_ms)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    struct sockaddr_storage src;
    int rc = 0, dev, port;

    pthread_mutex_lock(&fcm_lock);
    if (id->state != FCM_IDLE || dst_addr == NULL) {
        pthread_mutex_unlock(&fcm_lock);
        errno = EINVAL;
        return -1;
    }
    memcpy(&id->id.route.addr.dst_storage, dst_addr, fcm_sa_len(dst_addr));
    /* Resolution is instant here; timeout_ms bounds nothing. The CM's own timeout is the knob. */
    if (src_addr != NULL)
        memcpy(&src, src_addr, fcm_sa_len(src_addr));
    else if (id->fd < 0)
        rc = fcm_route_src(dst_addr, &src);
    if (rc == 0 && id->fd < 0)
        rc = fcm_bind_locked(id, (struct sockaddr *)&src);
    if (rc == 0 && (rc = fcm_port_for_addr(&id->id.route.addr.src_addr, &dev, &port)) == 0) {
        fcm_id_set_port(id, dev, port);
        if (fcm_devs[dev].ports[port - 1].link_layer == IBV_LINK_LAYER_ETHERNET &&
            dst_addr->sa_family == AF_INET) {
            /* RoCE: the destination GID is the IPv4-mapped address (IB learns it from the REP). */
            union ibv_gid *dgid = &id->id.route.addr.addr.ibaddr.dgid;

            memset(dgid, 0, sizeof(*dgid));
            dgid->raw[10] = dgid->raw[11] = 0xff;
            memcpy(&dgid->raw[12], &((struct sockaddr_in *)(void *)dst_addr)->sin_addr, 4);
        }
        id->state = FCM_ADDR_RESOLVED;
    }
    /* Real rdma_cm reports a route it cannot map to a device as an event, not a return. */
    fcm_event_push(id, rc == 0 ? RDMA_CM_EVENT_ADDR_RESOLVED : RDMA_CM_EVENT_ADDR_ERROR,
                   rc == 0 ? 0 : -rc, NULL, NULL);
    pthread_mutex_unlock(&fcm_lock);
    return 0;
}

FCM_EXPORT int rdma_resolve_route(struct rdma_cm_id *cm_id, int timeout_ms)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;

    pthread_mutex_lock(&fcm_lock);
    if (id->state != FCM_ADDR_RESOLVED) {
        pthread_mutex_unlock(&fcm_lock);
        errno = EINVAL;
        return -1;
    }
    id->state = FCM_ROUTE_RESOLVED;
    id->id.route.num_paths = 1;
    fcm_event_push(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, NULL);
    pthread_mutex_unlock(&fcm_lock);
    return 0;
}

/* ---- QPs -------------------------------------------------------------- */

FCM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cm_id, struct ibv_qp_init_attr_ex *attr)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    struct ibv_qp_attr qa;
    struct ibv_qp *qp;
    int rc;

    if (id->dev < 0 || cm_id->qp != NULL) {
        errno = EINVAL;
        return -1;
    }
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == NULL) {
        pthread_mutex_lock(&fcm_lock);
        if (fcm_devs[id->dev].pd == NULL)
            fcm_devs[id->dev].pd = ibv_alloc_pd(fcm_devs[id->dev].ctx);
        pthread_mutex_unlock(&fcm_lock);
        attr->pd = fcm_devs[id->dev].pd;
        attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    }
    if (attr->pd == NULL || attr->pd->context != cm_id->verbs ||
        attr->send_cq == NULL || attr->recv_cq == NULL) {
        errno = EINVAL; /* CQs are the caller's: the emulation does not make them. */
        return -1;
    }
    qp = ibv_create_qp_ex(cm_id->verbs, attr);
    if (qp == NULL)
        return -1;
    /* As librdmacm: INIT with no remote access; connect/accept widen it. */
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    qa.port_num = cm_id->port_num;
    rc = ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                                    IBV_QP_PORT);
    if (rc != 0) {
        ibv_destroy_qp(qp);
        errno = rc;
        return -1;
    }
    cm_id->qp = qp;
    cm_id->pd = attr->pd;
    cm_id->send_cq = attr->send_cq;
    cm_id->recv_cq = attr->recv_cq;
    return 0;
}

FCM_EXPORT int rdma_create_qp(struct rdma_cm_id *cm_id, struct ibv_pd *pd,
                              struct ibv_qp_init_attr *qp_init_attr)
{
    struct ibv_qp_init_attr_ex ax;
    int rc;

    memset(&ax, 0, sizeof(ax));
    memcpy(&ax, qp_init_attr, sizeof(*qp_init_attr));
    ax.comp_mask = pd != NULL ? IBV_QP_INIT_ATTR_PD : 0;
    ax.pd = pd;
    rc = rdma_create_qp_ex(cm_id, &ax);
    if (rc == 0)
        qp_init_attr->cap = ax.cap;
    return rc;
}

FCM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *cm_id)
{
    if (cm_id->qp != NULL)
        ibv_destroy_qp(cm_id->qp);
    cm_id->qp = NULL;
}

/* ---- connect, accept, reject, disconnect ------------------------------ */

static void fcm_param_keep(struct fcm_id *id, const struct rdma_conn_param *param)
{
    memset(&id->param, 0, sizeof(id->param));
    id->param.retry_count = 7;
    id->param.rnr_retry_count = 7;
    if (param != NULL) {
        id->param = *param;
        id->param.private_data = NULL;
        id->param.private_data_len = 0;
    }
}

FCM_EXPORT int rdma_connect(struct rdma_cm_id *cm_id, struct rdma_conn_param *param)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    int rc = 0;

    if (param != NULL && param->private_data_len > FCM_REQ_PD_MAX) {
        errno = EINVAL; /* The REQ holds 56 bytes of private data on an RC id. */
        return -1;
    }
    pthread_mutex_lock(&fcm_lock);
    if (id->state != FCM_ROUTE_RESOLVED) {
        rc = EINVAL;
    } else {
        fcm_param_keep(id, param);
        fcm_msg_fill(id, &id->out, FCM_MSG_REQ, param != NULL ? param->private_data : NULL,
                     param != NULL ? param->private_data_len : 0);
        fcntl(id->fd, F_SETFL, fcntl(id->fd, F_GETFL) | O_NONBLOCK);
        /* Refused or unreachable is the CM's answer, reported by the thread. */
        (void)!connect(id->fd, &cm_id->route.addr.dst_addr,
                       fcm_sa_len(&cm_id->route.addr.dst_addr));
        id->state = FCM_CONNECTING;
        id->deadline_ms = fcm_now_ms() + (uint64_t)id->timeout_ms;
        id->refused_until = fcm_now_ms() + (uint64_t)fcm_nolisten_retry_ms();
    }
    pthread_mutex_unlock(&fcm_lock);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    fcm_thread_kick();
    return 0;
}

FCM_EXPORT int rdma_accept(struct rdma_cm_id *cm_id, struct rdma_conn_param *param)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    struct fcm_msg rep;
    int rc = 0;

    if (param != NULL && param->private_data_len > FCM_REP_PD_MAX) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&fcm_lock);
    if (id->state != FCM_REQ_RCVD) {
        rc = EINVAL;
    } else if (id->peer_gone) {
        /* Accepted into the void: the REP times out on a fabric; here it fails at once. */
        id->state = FCM_DONE;
        fcm_event_push(id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT, NULL, NULL);
    } else {
        fcm_param_keep(id, param);
        if (cm_id->qp != NULL)
            rc = fcm_qp_connect(id, &id->remote, 0);
        if (rc == 0) {
            fcm_msg_fill(id, &rep, FCM_MSG_REP, param != NULL ? param->private_data : NULL,
                         param != NULL ? param->private_data_len : 0);
            rc = fcm_msg_send(id, &rep);
        }
        if (rc == 0) {
            id->state = FCM_REP_SENT;
            id->deadline_ms = fcm_now_ms() + (uint64_t)id->timeout_ms;
        }
    }
    pthread_mutex_unlock(&fcm_lock);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    fcm_thread_kick();
    return 0;
}

FCM_EXPORT int rdma_reject(struct rdma_cm_id *cm_id, const void *private_data,
                           uint8_t private_data_len)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    struct fcm_msg rej;
    int rc = 0;

    if (private_data_len > FCM_REJ_PD_MAX) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&fcm_lock);
    if (id->state != FCM_REQ_RCVD) {
        rc = EINVAL;
    } else {
        fcm_msg_fill(id, &rej, FCM_MSG_REJ, private_data, private_data_len);
        rej.status = FCM_REJ_CONSUMER;
        fcm_msg_send(id, &rej); /* A peer already gone needs no answer. */
        fcm_id_close_fd(id);
        id->state = FCM_DONE;
    }
    pthread_mutex_unlock(&fcm_lock);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

FCM_EXPORT int rdma_disconnect(struct rdma_cm_id *cm_id)
{
    struct fcm_id *id = (struct fcm_id *)cm_id;
    struct fcm_msg m;

    pthread_mutex_lock(&fcm_lock);
    if (cm_id->qp != NULL)
        fcm_qp_to_err(id);
    if (id->state == FCM_ESTABLISHED || id->state == FCM_REP_SENT) {
        /* DISCONNECTED comes when the peer answers (its disconnect or its exit), as on a fabric. */
        fcm_msg_fill(id, &m, FCM_MSG_DREQ, NULL, 0);
        if (fcm_msg_send(id, &m) == 0) {
            id->state = FCM_DISCONNECTING;
            id->deadline_ms = fcm_now_ms() + (uint64_t)id->timeout_ms;
        } else {
            fcm_id_close_fd(id);
            id->state = FCM_DONE;
            fcm_event_push(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL);
        }
    } else if (id->state == FCM_DREQ_RCVD) {
        fcm_msg_fill(id, &m, FCM_MSG_DREP, NULL, 0);
        fcm_msg_send(id, &m);
        fcm_id_close_fd(id);
        id->state = FCM_DONE;
    } else if (id->state != FCM_LISTEN && id->state != FCM_IDLE &&
               id->state != FCM_DISCONNECTING) {
        fcm_id_close_fd(id);
        id->state = FCM_DONE;
    }
    pthread_mutex_unlock(&fcm_lock);
    fcm_thread_kick();
    return 0;
}
