/*
 * The strangers of integ_hostile: TCP connections this process opens to a
 * ferry listener and misbehaves on (hostile_open_lane), what the plugin did
 * with them (hostile_poll), and the real peer that must still get through
 * (hostile_real_connect, hostile_real_xfer).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "hostile.h"

hostile_t hostiles[HOSTILE_MAX];
int nhostiles;

const char *const hostile_names[HOSTILE_KIND_COUNT] = {
    [HOSTILE_RANDOM]      = "random bytes",
    [HOSTILE_BAD_MAGIC]   = "wrong magic",
    [HOSTILE_BAD_VERSION] = "wrong version",
    [HOSTILE_BAD_TOKEN]   = "right magic, wrong token",
    [HOSTILE_BAD_LANE]    = "lane >= nlanes",
    [HOSTILE_BAD_NLANES]  = "nlanes 65535",
    [HOSTILE_CLOSE]       = "connect then close",
    [HOSTILE_RESET]       = "connect then reset",
    [HOSTILE_SILENT]      = "connect, say nothing",
    [HOSTILE_HALF_HELLO]  = "half a hello, stall",
    [HOSTILE_ORPHAN]      = "valid lane 0, no other lanes",
    [HOSTILE_HUGE_HELLO]  = "right token, hdr_size 65535",
    [HOSTILE_TRICKLE]     = "valid hello, one byte a second",
};

int hostile_backend_ib(void)
{
    const char *be = getenv("NCCL_FERRY_BACKEND");

    return be != NULL && strcmp(be, "ib") == 0;
}


/* A stall is dropped by the plugin after the hello timeout; bad hellos right away. */
int hostile_expect_drop(hostile_kind_t k)
{
    /* An orphan lane carries the right token: holding it for a while is legitimate. */
    return k != HOSTILE_CLOSE && k != HOSTILE_RESET && k != HOSTILE_ORPHAN;
}

int hostile_is_stall(hostile_kind_t k)
{
    return k == HOSTILE_SILENT || k == HOSTILE_HALF_HELLO || k == HOSTILE_TRICKLE;
}

int hostile_connect(const ferry_sock_handle_t *h)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd;

    memset(&ss, 0, sizeof(ss));
    if (h->family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family   = AF_INET6;
        s6->sin6_port     = h->port;
        s6->sin6_scope_id = h->scope_id;
        memcpy(&s6->sin6_addr, h->addr, 16);
        len = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        s4->sin_port   = h->port;
        memcpy(&s4->sin_addr, h->addr, 4);
        len = sizeof(*s4);
    }
    fd = socket(h->family == AF_INET6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FIT_CHECK(fd >= 0, "socket: %s", strerror(errno));
    /* Blocking connect to a listening loopback socket completes from the backlog at once. */
    FIT_CHECK(connect(fd, (struct sockaddr *)&ss, len) == 0, "hostile connect: %s",
              strerror(errno));
    return fd;
}

void hostile_name_src(hostile_t *x)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    FIT_CHECK(getsockname(x->fd, (struct sockaddr *)&ss, &len) == 0, "getsockname: %s",
              strerror(errno));
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;

        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        port = ntohs(s6->sin6_port);
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;

        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        port = ntohs(s4->sin_port);
    }
    snprintf(x->src, sizeof(x->src), "%s:%d", ip, port);
}

/* Every stranger must show up in the log, named by its address and port. */
void hostile_expect_logged(int from)
{
    int i;

    for (i = 0; i < nhostiles; i++) {
        char line[4096];

        if (hostiles[i].kind == HOSTILE_ORPHAN && !hostiles[i].dropped)
            continue;
        FIT_CHECK(fit_log_find(from, -1, hostiles[i].src, NULL, NULL, line, sizeof(line)) >= 0,
                  "no log line names hostile #%d (%s) from %s", i, hostile_names[hostiles[i].kind],
                  hostiles[i].src);
    }
    printf("  every hostile's address:port appears in the plugin log\n");
}

void hostile_hello(const ferry_sock_handle_t *h, ferry_sock_hello_t *hello)
{
    memset(hello, 0, sizeof(*hello));
    /* The handle's magic and version are the hello's, for either backend (ib_handle.h). */
    hello->magic    = h->magic;
    hello->version  = h->version;
    hello->hdr_size = sizeof(*hello);
    hello->lane     = 0;
    hello->nlanes   = h->nlanes;
    hello->token    = h->token;
    hello->conn_id  = 0x0badc0de0badc0deULL;
}

/* Open a stranger; an orphan says hello as lane `lane` of connection conn_id (0: its own). */
hostile_t *hostile_open_lane(const ferry_sock_handle_t *h, hostile_kind_t kind, int lane,
                             uint64_t conn_id)
{
    hostile_t *x = &hostiles[nhostiles];
    ferry_sock_hello_t hello;
    unsigned char junk[64];
    struct linger lg = { .l_onoff = 1, .l_linger = 0 };
    size_t i;
    ssize_t n = 0;

    FIT_CHECK(nhostiles < HOSTILE_MAX, "too many hostiles");
    nhostiles++;
    x->kind    = kind;
    x->fd      = hostile_connect(h);
    x->dropped = 0;
    x->sent    = 0;
    x->t_open  = fit_now();
    hostile_name_src(x);
    hostile_hello(h, &hello);
    switch (kind) {
    case HOSTILE_RANDOM:
        for (i = 0; i < sizeof(junk); i++)
            junk[i] = (unsigned char)(rand() & 0xff);
        n = send(x->fd, junk, sizeof(junk), MSG_NOSIGNAL);
        break;
    case HOSTILE_BAD_MAGIC:
        hello.magic ^= 0x100;
        n = send(x->fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        break;
    case HOSTILE_BAD_VERSION:
        hello.version = 0x7777;
        n = send(x->fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        break;
    case HOSTILE_BAD_TOKEN:
        hello.token ^= 0x123456789ULL;
        n = send(x->fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        break;
    case HOSTILE_BAD_LANE:
        hello.lane = (uint16_t)(h->nlanes + 3);
        n = send(x->fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        break;
    case HOSTILE_BAD_NLANES:
        hello.nlanes = 65535;
        n = send(x->fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        break;
    case HOSTILE_CLOSE:
        close(x->fd);
        x->fd = -1;
        break;
    case HOSTILE_RESET:
        setsockopt(x->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(x->fd);
        x->fd = -1;
        break;
    case HOSTILE_SILENT:
        break;
    case HOSTILE_HALF_HELLO:
        n = send(x->fd, &hello, sizeof(hello) / 2, MSG_NOSIGNAL);
        break;
    case HOSTILE_ORPHAN:
        hello.lane    = (uint16_t)lane;
        hello.conn_id = conn_id != 0 ? conn_id : 0x0f0f0f0f12345678ULL ^ (uint64_t)nhostiles;
        n = send(x->fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        break;
    case HOSTILE_HUGE_HELLO:
        hello.hdr_size = 65535;
        n = send(x->fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        break;
    case HOSTILE_TRICKLE:
        memcpy(x->hello, &hello, sizeof(x->hello));
        n = send(x->fd, x->hello, 1, MSG_NOSIGNAL);
        x->sent = 1;
        x->t_byte = fit_now();
        break;
    default:
        break;
    }
    FIT_CHECK(n >= 0, "hostile %s: send: %s", hostile_names[kind], strerror(errno));
    if (x->fd >= 0)
        fcntl(x->fd, F_SETFL, O_NONBLOCK);
    return x;
}

void hostile_open(const ferry_sock_handle_t *h, hostile_kind_t kind)
{
    hostile_open_lane(h, kind, 0, 0);
}

/* Notice hostiles whose far end the plugin closed; returns how many are still open. */
int hostile_poll(void)
{
    int open_ = 0, i;

    for (i = 0; i < nhostiles; i++) {
        hostile_t *x = &hostiles[i];
        char buf[256];
        ssize_t n;

        if (x->fd < 0 || x->dropped)
            continue;
        n = recv(x->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            x->dropped = 1;
            printf("  hostile #%d (%s) dropped by the plugin after %.2f s\n", i,
                   hostile_names[x->kind], fit_now() - x->t_open);
            continue;
        }
        if (n > 0)
            printf("  note: plugin wrote %zd byte(s) to hostile #%d (%s)\n", n, i,
                   hostile_names[x->kind]);
        if (x->kind == HOSTILE_TRICKLE && x->sent < sizeof(x->hello) &&
            fit_now() - x->t_byte >= 1.0) {
            n = send(x->fd, x->hello + x->sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n == 1) {
                x->sent++;
                x->t_byte = fit_now();
            }
        }
        open_++;
    }
    return open_;
}

void hostile_close_all(void)
{
    int i;

    for (i = 0; i < nhostiles; i++) {
        if (hostiles[i].fd >= 0)
            close(hostiles[i].fd);
        hostiles[i].fd = -1;
    }
}

/* accept() must keep returning NULL while only hostiles are around. */
void hostile_pump_accept(const fit_plugin_t *p, void *listen_comm, double seconds,
                         int until_dropped)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    fit_bound_t b;

    fit_bound_init(&b, "hostile-only accept", seconds + 1.0, 100000000L);
    while (fit_now() < b.deadline - 1.0) {
        void *comm = NULL;
        int i, pending = 0;

        FIT_NCCL(p->net->accept(listen_comm, &comm, &dev_handle));
        FIT_CHECK(comm == NULL, "accept returned a comm (%p) although only hostile "
                  "connections exist", comm);
        hostile_poll();
        for (i = 0; i < nhostiles; i++)
            pending += hostiles[i].fd >= 0 && !hostiles[i].dropped &&
                       hostile_expect_drop(hostiles[i].kind) &&
                       (until_dropped > 1 || !hostile_is_stall(hostiles[i].kind));
        if (until_dropped && pending == 0)
            return;
        fit_bound_step(&b);
    }
}

void hostile_expect_dropped(int stalls_too)
{
    int i;

    for (i = 0; i < nhostiles; i++) {
        const hostile_t *x = &hostiles[i];

        if (x->fd < 0 || !hostile_expect_drop(x->kind))
            continue;
        if (hostile_is_stall(x->kind) && !stalls_too)
            continue;
        FIT_CHECK(x->dropped, "hostile #%d (%s) is still open on the plugin's side after %.1f s",
                  i, hostile_names[x->kind], fit_now() - x->t_open);
    }
}

/* The real peer: connect() and accept() in turns until both comms exist. */
int hostile_real_connect(hostile_env_t *e, void **send_p, void **recv_p)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    char peer_handle[NCCL_NET_HANDLE_MAXSIZE];
    void *send_comm = NULL, *recv_comm = NULL;
    fit_bound_t b;
    int calls = 0;

    memcpy(peer_handle, e->handle, sizeof(peer_handle));
    fit_bound_init(&b, "real connect behind strangers", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (send_comm == NULL || recv_comm == NULL) {
        if (send_comm == NULL)
            FIT_NCCL(e->plugin.net->connect(e->ctx_c, 0, peer_handle, &send_comm, &dev_handle));
        if (recv_comm == NULL)
            FIT_NCCL(e->plugin.net->accept(e->listen_comm, &recv_comm, &dev_handle));
        calls++;
        hostile_poll();
        if (send_comm == NULL || recv_comm == NULL)
            fit_bound_step(&b);
    }
    *send_p = send_comm;
    *recv_p = recv_comm;
    return calls;
}

/* The size sweep up to max_size over the real connection, checked byte for byte. */
void hostile_real_xfer(hostile_env_t *e, void *send_comm, void *recv_comm,
                       size_t max_size, uint64_t seed, const char *what)
{
    size_t sizes[96];
    fit_xfer_opts_t o = { 0 };
    fit_xfer_result_t r;
    int n = fit_sweep_sizes(sizes, 96, max_size);

    o.sizes   = sizes;
    o.nmsgs   = n;
    o.depth   = 8;
    o.seed    = seed;
    o.seconds = 60.0;
    o.tag     = 2;
    fit_xfer_inproc(&e->plugin, send_comm, recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, what);
    fit_pass("%d messages 0 B..%zu B intact %s", n, max_size, what);
}

/* Blocking write of all of buf on a (non-blocking) stranger's socket, bounded. */
void hostile_send_all(int fd, const void *buf, size_t len, const char *what)
{
    const char *p = buf;
    fit_bound_t b;

    fit_bound_init(&b, what, 10.0, 10000000L);
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            fit_bound_step(&b);
            continue;
        }
        FIT_CHECK(n > 0, "%s: send: %s", what, strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* A whole connection of valid hellos from us; returns the recv comm accept() made of it. */
void *hostile_forge_connection(hostile_env_t *e, uint64_t conn_id, hostile_t **lanes)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    void *recv_comm = NULL;
    fit_bound_t b;
    int l;

    for (l = 0; l < e->h->nlanes; l++)
        lanes[l] = hostile_open_lane(e->h, HOSTILE_ORPHAN, l, conn_id);
    fit_bound_init(&b, "accept of a forged connection", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (recv_comm == NULL) {
        FIT_NCCL(e->plugin.net->accept(e->listen_comm, &recv_comm, &dev_handle));
        if (recv_comm == NULL)
            fit_bound_step(&b);
    }
    return recv_comm;
}

/* accept() a few times: the streams that arrived are read and filed (never a comm here). */
void hostile_accept_rounds(hostile_env_t *e, int rounds)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    int i;

    for (i = 0; i < rounds; i++) {
        void *comm = NULL;

        FIT_NCCL(e->plugin.net->accept(e->listen_comm, &comm, &dev_handle));
        FIT_CHECK(comm == NULL, "accept returned a comm (%p) for an incomplete connection", comm);
    }
}
