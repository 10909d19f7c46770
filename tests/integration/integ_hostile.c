/*
 * integ_hostile: strangers on the listen port. While a real peer connects,
 * this test opens TCP connections of its own to the port in the handle and
 * misbehaves on them: random bytes, a hello with a wrong magic, version or
 * token, impossible lane numbers, connect-then-close, a reset, nothing at all,
 * and half a hello followed by a stall.
 *
 * Expected of the acceptor: accept() never returns a comm for any of them;
 * a bad hello is dropped (the test sees EOF or a reset on its end); a stalled
 * one is dropped after NCCL_FERRY_HELLO_TIMEOUT_MS; the real peer's
 * connection completes meanwhile and its data arrives intact.
 *
 *   integ_hostile [--plugin PATH] [--case NAME]
 *     strangers  (default) the above
 *     flood      100 silent connections queue ahead of a real peer: the full
 *                pending table evicts its oldest streams, not the real
 *                peer's; the peer connects, its data arrives intact, and every
 *                silent stream is gone within the hello timeout
 *     wrap       a peer holding the token sends a chunk header whose offset +
 *                length wraps past 2^64: test() fails with ncclRemoteError and
 *                a WARN naming the peer, and no byte around the receive
 *                buffer changes
 *     half-groups 12 connectors die with 2 of their 4 streams open: the
 *                group table (8) evicts the oldest, the real peer connects,
 *                and an incomplete group expires after the hello timeout
 *     double-close closeSend, closeRecv, closeListen and deregMr twice, and
 *                closes of the wrong kind: refused with ncclInternalError and a
 *                WARN, without reading freed memory; a new connection works
 *     burst      10 real peers connect to one listener at once (the group
 *                table holds 8): all 10 are accepted, none refused
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

#include "harness.h"
#include "socket/sock_wire.h"

#define HOSTILE_MAX 128

typedef enum hostile_kind {
    HOSTILE_RANDOM,       /* 64 random bytes. */
    HOSTILE_BAD_MAGIC,    /* Hello, magic off by one bit. */
    HOSTILE_BAD_VERSION,  /* Hello, version 0x7777. */
    HOSTILE_BAD_TOKEN,    /* Hello, right magic, wrong token. */
    HOSTILE_BAD_LANE,     /* Hello, right token, lane >= nlanes. */
    HOSTILE_BAD_NLANES,   /* Hello, right token, nlanes 65535. */
    HOSTILE_CLOSE,        /* Connect, then close at once. */
    HOSTILE_RESET,        /* Connect, then RST (SO_LINGER 0). */
    HOSTILE_SILENT,       /* Connect, send nothing. */
    HOSTILE_HALF_HELLO,   /* First 16 bytes of a valid hello, then nothing. */
    HOSTILE_ORPHAN,       /* A valid hello for lane 0 of a connection whose other lanes never come. */
    HOSTILE_KIND_COUNT
} hostile_kind_t;

static const char *const hostile_names[HOSTILE_KIND_COUNT] = {
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
};

typedef struct hostile {
    hostile_kind_t kind;
    int            fd;       /* -1 once closed by us. */
    int            dropped;  /* The plugin closed its end (EOF or reset seen). */
    double         t_open;
    char           src[80];  /* Our end, "ip:port": the plugin's log line should name it. */
} hostile_t;

static hostile_t hostiles[HOSTILE_MAX];
static int nhostiles;

/* A stall is dropped by the plugin after the hello timeout; bad hellos right away. */
static int hostile_expect_drop(hostile_kind_t k)
{
    /* An orphan lane carries the right token: holding it for a while is legitimate. */
    return k != HOSTILE_CLOSE && k != HOSTILE_RESET && k != HOSTILE_ORPHAN;
}

static int hostile_is_stall(hostile_kind_t k)
{
    return k == HOSTILE_SILENT || k == HOSTILE_HALF_HELLO;
}

static int hostile_connect(const ferry_sock_handle_t *h)
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

static void hostile_name_src(hostile_t *x)
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
static void hostile_expect_logged(int from)
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

static void hostile_hello(const ferry_sock_handle_t *h, ferry_sock_hello_t *hello)
{
    memset(hello, 0, sizeof(*hello));
    hello->magic    = FERRY_SOCK_MAGIC;
    hello->version  = FERRY_SOCK_WIRE_VERSION;
    hello->hdr_size = sizeof(*hello);
    hello->lane     = 0;
    hello->nlanes   = h->nlanes;
    hello->token    = h->token;
    hello->conn_id  = 0x0badc0de0badc0deULL;
}

/* Open a stranger; an orphan says hello as lane `lane` of connection conn_id (0: its own). */
static hostile_t *hostile_open_lane(const ferry_sock_handle_t *h, hostile_kind_t kind, int lane,
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
    default:
        break;
    }
    FIT_CHECK(n >= 0, "hostile %s: send: %s", hostile_names[kind], strerror(errno));
    if (x->fd >= 0)
        fcntl(x->fd, F_SETFL, O_NONBLOCK);
    return x;
}

static void hostile_open(const ferry_sock_handle_t *h, hostile_kind_t kind)
{
    hostile_open_lane(h, kind, 0, 0);
}

/* Notice hostiles whose far end the plugin closed; returns how many are still open. */
static int hostile_poll(void)
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
        open_++;
    }
    return open_;
}

static void hostile_close_all(void)
{
    int i;

    for (i = 0; i < nhostiles; i++) {
        if (hostiles[i].fd >= 0)
            close(hostiles[i].fd);
        hostiles[i].fd = -1;
    }
}

/* accept() must keep returning NULL while only hostiles are around. */
static void hostile_pump_accept(const fit_plugin_t *p, void *listen_comm, double seconds,
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

static void hostile_expect_dropped(int stalls_too)
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

/* What every case shares: the plugin, a listening context and a connecting one. */
typedef struct hostile_env {
    fit_plugin_t               plugin;
    void                      *ctx_l, *ctx_c;
    void                      *listen_comm; /* NULL once a case closed it. */
    char                       handle[NCCL_NET_HANDLE_MAXSIZE];
    const ferry_sock_handle_t *h;
    double                     hello_timeout; /* Seconds (NCCL_FERRY_HELLO_TIMEOUT_MS). */
} hostile_env_t;

/* The real peer: connect() and accept() in turns until both comms exist. */
static int hostile_real_connect(hostile_env_t *e, void **send_p, void **recv_p)
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
static void hostile_real_xfer(hostile_env_t *e, void *send_comm, void *recv_comm,
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

static void hostile_case_strangers(hostile_env_t *e)
{
    const ferry_sock_handle_t *h = e->h;
    fit_plugin_t *plugin = &e->plugin;
    void *send_comm = NULL, *recv_comm = NULL;
    fit_bound_t b;
    int k, lines0, calls;

    /* Rejections may be WARN or INFO, in the plugin's words; they are counted, not matched. */
    fit_log_allow_warns(1);
    lines0 = fit_log_lines();

    /* Phase 1: only strangers. */
    for (k = 0; k < HOSTILE_KIND_COUNT; k++)
        hostile_open(h, (hostile_kind_t)k);
    hostile_pump_accept(plugin, e->listen_comm, 5.0, 1);
    hostile_expect_dropped(0);
    fit_pass("%d hostile connections: no comm from accept, every bad hello dropped",
             HOSTILE_KIND_COUNT);
    printf("  plugin logged %d line(s) (%d WARN) about them\n", fit_log_lines() - lines0,
           fit_log_warns());
    FIT_CHECK(fit_log_lines() > lines0, "the plugin logged nothing about %d rejected streams",
              HOSTILE_KIND_COUNT);

    /*
     * Phase 2: the real peer connects while more strangers arrive. They queue
     * in the listen backlog before, between and after the real streams: the
     * first connect() call starts the real streams, accept() has not run yet.
     */
    hostile_open(h, HOSTILE_BAD_TOKEN);
    hostile_open(h, HOSTILE_HALF_HELLO);
    hostile_open(h, HOSTILE_RANDOM);
    {
        ncclNetDeviceHandle_v11_t *dev_handle = NULL;
        char peer_handle[NCCL_NET_HANDLE_MAXSIZE];

        memcpy(peer_handle, e->handle, sizeof(peer_handle));
        fit_bound_init(&b, "real connect among hostiles", FIT_CONNECT_SECONDS,
                       FIT_CONNECT_ITERS);
        for (calls = 0; send_comm == NULL || recv_comm == NULL; calls++) {
            if (send_comm == NULL)
                FIT_NCCL(plugin->net->connect(e->ctx_c, 0, peer_handle, &send_comm,
                                              &dev_handle));
            if (calls == 0) {
                hostile_open(h, HOSTILE_RESET);
                hostile_open(h, HOSTILE_BAD_MAGIC);
                hostile_open(h, HOSTILE_SILENT);
                hostile_open(h, HOSTILE_ORPHAN);
            }
            if (recv_comm == NULL)
                FIT_NCCL(plugin->net->accept(e->listen_comm, &recv_comm, &dev_handle));
            hostile_poll();
            if (send_comm == NULL || recv_comm == NULL)
                fit_bound_step(&b);
        }
    }
    fit_pass("real peer connected among hostiles after %d connect/accept rounds", calls);

    /* Stalled strangers must be dropped after the hello timeout, not kept forever. */
    hostile_pump_accept(plugin, e->listen_comm, e->hello_timeout + 5.0, 2);
    hostile_expect_dropped(1);
    fit_pass("stalled hostiles dropped within NCCL_FERRY_HELLO_TIMEOUT_MS + 5 s");
    hostile_expect_logged(lines0);
    for (k = 0; k < nhostiles; k++)
        if (hostiles[k].kind == HOSTILE_ORPHAN)
            printf("  hostile #%d (%s): %s after %.1f s\n", k, hostile_names[hostiles[k].kind],
                   hostiles[k].dropped ? "dropped" : "still held", fit_now() - hostiles[k].t_open);
    FIT_NCCL(plugin->net->closeListen(e->listen_comm));
    e->listen_comm = NULL;
    /* closeListen must let go of every stream it still holds (no fd leak). */
    fit_bound_init(&b, "streams released by closeListen", 5.0, 100000000L);
    while (hostile_poll() > 0 && fit_bound_try_step(&b))
        ;
    for (k = 0; k < nhostiles; k++)
        FIT_CHECK(hostiles[k].fd < 0 || hostiles[k].dropped,
                  "after closeListen hostile #%d (%s) is still open on the plugin's side", k,
                  hostile_names[hostiles[k].kind]);
    fit_pass("closeListen released every pending stream");
    hostile_close_all();
    fit_log_allow_warns(0);

    /* The real connection carries data intact. */
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)16 << 20, 9000,
                      "on the real connection after the hostiles");
    FIT_NCCL(plugin->net->closeSend(send_comm));
    FIT_NCCL(plugin->net->closeRecv(recv_comm));
}

/*
 * More silent connections than the pending table holds (64) queue in the
 * listen backlog ahead of the real peer's streams. The table must make room
 * by evicting its oldest stream: evicting the newest arrival threw out the
 * real peer's streams as soon as the next one came, and accept() never
 * returned its comm.
 */
#define FLOOD_SILENT     100
#define FLOOD_TABLE      64 /* FERRY_SOCK_PENDING_MAX. */

static void hostile_case_flood(hostile_env_t *e)
{
    void *send_comm = NULL, *recv_comm = NULL;
    char line[4096], needle[128];
    int k, lines0, calls, dropped = 0;

    fit_log_allow_warns(1); /* Every silent stream that times out gets its WARN. */
    lines0 = fit_log_lines();
    for (k = 0; k < FLOOD_SILENT; k++)
        hostile_open(e->h, HOSTILE_SILENT);
    calls = hostile_real_connect(e, &send_comm, &recv_comm);
    fit_pass("real peer connected behind %d silent connections after %d connect/accept rounds",
             FLOOD_SILENT, calls);
    hostile_poll();
    for (k = 0; k < nhostiles; k++)
        dropped += hostiles[k].dropped;
    printf("  %d of %d silent connections dropped by then\n", dropped, FLOOD_SILENT);
    FIT_CHECK(dropped >= FLOOD_SILENT - FLOOD_TABLE, "only %d of %d silent connections were "
              "dropped, but %d cannot fit the %d-entry pending table", dropped, FLOOD_SILENT,
              FLOOD_SILENT - FLOOD_TABLE, FLOOD_TABLE);
    /* Oldest first: the first arrivals are the ones evicted, in order. */
    for (k = 0; k < FLOOD_SILENT - FLOOD_TABLE; k++) {
        snprintf(needle, sizeof(needle), "from %s after", hostiles[k].src);
        if (fit_log_find(lines0, NCCL_LOG_INFO, "evicting the oldest", needle, NULL, line,
                         sizeof(line)) < 0 &&
            fit_log_find(lines0, NCCL_LOG_WARN, "stalled in its hello", hostiles[k].src, NULL,
                         line, sizeof(line)) < 0)
            FIT_FAIL("silent connection #%d (%s), one of the oldest, was neither evicted nor "
                     "timed out", k, hostiles[k].src);
    }
    fit_pass("the %d oldest silent connections were the ones evicted",
             FLOOD_SILENT - FLOOD_TABLE);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)4 << 20, 7100,
                      "on the real connection behind the flood");

    /* The silent streams left in the table time out: accept() checks on every call. */
    hostile_pump_accept(&e->plugin, e->listen_comm, e->hello_timeout + 5.0, 2);
    hostile_expect_dropped(1);
    snprintf(needle, sizeof(needle), "rejected stream from %s ", hostiles[FLOOD_SILENT - 1].src);
    FIT_CHECK(fit_log_find(lines0, NCCL_LOG_WARN, needle, "stalled in its hello", NULL, line,
                           sizeof(line)) >= 0,
              "no WARN says the newest silent connection (%s) stalled in its hello",
              hostiles[FLOOD_SILENT - 1].src);
    printf("  %s\n", line);
    fit_pass("all %d silent connections dropped within NCCL_FERRY_HELLO_TIMEOUT_MS + 5 s",
             FLOOD_SILENT);
    hostile_close_all();
    fit_log_allow_warns(0);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 7200,
                      "on the real connection after the flood");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}

/* Blocking write of all of buf on a (non-blocking) stranger's socket, bounded. */
static void hostile_send_all(int fd, const void *buf, size_t len, const char *what)
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
static void *hostile_forge_connection(hostile_env_t *e, uint64_t conn_id, hostile_t **lanes)
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

/*
 * A peer holding the token sends a chunk header whose offset + len wraps
 * around 2^64 (offset 2^64 - 4096, len 4096, message 8 KiB). The unsigned
 * sum is 0, so the old check passed and the payload landed 4 KiB before the
 * receive buffer. The receive sits in the middle of a patterned arena: every
 * byte of it must be unchanged, and test() must fail the request.
 */
#define WRAP_MSG   8192
#define WRAP_LEN   4096

static void hostile_case_wrap(hostile_env_t *e)
{
    const fit_plugin_t *p = &e->plugin;
    hostile_t *lanes[FERRY_SOCK_MAX_LANES];
    ferry_sock_chunk_hdr_t hdr;
    unsigned char payload[WRAP_LEN];
    size_t arena_len = 3 * WRAP_MSG, size = WRAP_MSG;
    void *recv_comm, *mh = NULL, *req = NULL, *data;
    unsigned char *arena;
    char line[4096], expect[64];
    ncclResult_t rc = ncclSuccess;
    int done = 0, rsize = 0, tag = 5, l, named = 0;
    fit_bound_t b;

    recv_comm = hostile_forge_connection(e, 0x3a3a3a3a5c5c5c5cULL, lanes);
    fit_pass("accept returned a recv comm for %u forged streams", (unsigned)e->h->nlanes);
    arena = aligned_alloc(4096, arena_len);
    FIT_CHECK(arena != NULL, "no memory for the arena");
    fit_fill(arena, arena_len, 4242);
    data = arena + WRAP_MSG;
    FIT_NCCL(p->net->regMr(recv_comm, arena, arena_len, NCCL_PTR_HOST, &mh));
    FIT_NCCL(p->net->irecv(recv_comm, 1, &data, &size, &tag, &mh, NULL, &req));
    FIT_CHECK(req != NULL, "irecv returned no request");

    memset(&hdr, 0, sizeof(hdr));
    hdr.seq      = 0;
    hdr.nchunks  = 1;
    hdr.msg_size = WRAP_MSG;
    hdr.offset   = UINT64_MAX - (WRAP_LEN - 1); /* offset + len == 2^64 == 0. */
    hdr.len      = WRAP_LEN;
    hdr.check    = FERRY_SOCK_CHUNK_CHECK(hdr.seq, hdr.len);
    memset(payload, 0x5a, sizeof(payload));
    fit_log_expect("bad chunk header");
    fit_log_expect("request seq 0 failed");
    hostile_send_all(lanes[0]->fd, &hdr, sizeof(hdr), "wrapping chunk header");
    hostile_send_all(lanes[0]->fd, payload, sizeof(payload), "wrapping chunk payload");

    fit_bound_init(&b, "test() of the receive hit by the wrapping header", 10.0, 100000000L);
    while (rc == ncclSuccess && !done && fit_bound_try_step(&b))
        rc = p->net->test(req, &done, &rsize);
    fit_check_pattern(arena, arena_len, 4242, "receive arena around the wrapping chunk");
    fit_pass("no byte of the %zu-byte arena around the receive changed", arena_len);
    FIT_CHECK(!done, "test() reported the receive done (%d bytes) although its only chunk was "
              "bogus", rsize);
    FIT_CHECK(rc == ncclRemoteError, "test() returned %d (%s), expected ncclRemoteError",
              (int)rc, fit_result_str(rc));
    snprintf(expect, sizeof(expect), "offset %llu, len %u", (unsigned long long)hdr.offset,
             hdr.len);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "bad chunk header", expect, "stream 0 of", line,
                           sizeof(line)) >= 0,
              "no WARN names the bad chunk header (%s) on stream 0", expect);
    for (l = 0; l < e->h->nlanes; l++)
        named |= strstr(line, lanes[l]->src) != NULL;
    FIT_CHECK(named, "the WARN does not name the peer (one of our streams): %s", line);
    printf("  %s\n", line);
    fit_pass("test() failed the receive with ncclRemoteError; the WARN names peer and header");
    FIT_NCCL(p->net->deregMr(recv_comm, mh));
    FIT_NCCL(p->net->closeRecv(recv_comm));
    hostile_close_all();
    free(arena);
    fit_log_expect_clear();
}

/* accept() a few times: the streams that arrived are read and filed (never a comm here). */
static void hostile_accept_rounds(hostile_env_t *e, int rounds)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    int i;

    for (i = 0; i < rounds; i++) {
        void *comm = NULL;

        FIT_NCCL(e->plugin.net->accept(e->listen_comm, &comm, &dev_handle));
        FIT_CHECK(comm == NULL, "accept returned a comm (%p) for an incomplete connection", comm);
    }
}

/*
 * Connectors that die with some of their streams open (a rank killed while
 * it connects) each leave an incomplete group, and the listener assembles at
 * most 8 connections at once. Such groups used to stay forever: from the 9th
 * on every new connection was refused, a real peer's too, and accept()
 * returned NULL for good. A full table must evict its oldest incomplete
 * group, and an incomplete group must expire after the hello timeout.
 */
#define HALF_GROUPS     (8 + 4) /* More than FERRY_SOCK_GROUP_MAX. */
#define HALF_GROUP_BASE 0x6a6a6a6a00000000ULL

static void hostile_case_half_groups(hostile_env_t *e)
{
    int nl = e->h->nlanes, half = nl / 2, g, l, lines0;
    hostile_t *first[HALF_GROUPS], *late;
    void *send_comm = NULL, *recv_comm = NULL;
    char line[4096], needle[192], streams[64];
    fit_bound_t b;
    double t0;

    FIT_CHECK(nl >= 2, "needs connections of 2 or more streams (NCCL_FERRY_STREAMS), not %d", nl);
    fit_log_allow_warns(1);
    lines0 = fit_log_lines();
    for (g = 0; g < HALF_GROUPS; g++) {
        for (l = 0; l < half; l++) {
            hostile_t *x = hostile_open_lane(e->h, HOSTILE_ORPHAN, l,
                                             HALF_GROUP_BASE + (uint64_t)g);

            if (l == 0)
                first[g] = x;
        }
        hostile_accept_rounds(e, 3);
        /* The connector dies: its streams close, the listener's group stays incomplete. */
        for (l = nhostiles - half; l < nhostiles; l++) {
            close(hostiles[l].fd);
            hostiles[l].fd = -1;
        }
    }
    hostile_real_connect(e, &send_comm, &recv_comm);
    fit_pass("real peer connected after %d dead half-connections", HALF_GROUPS);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)4 << 20, 8100,
                      "on the real connection after the dead half-connections");

    snprintf(streams, sizeof(streams), "with %d of %d streams", half, nl);
    for (g = 0; g < HALF_GROUPS - 8; g++) {
        snprintf(needle, sizeof(needle), "from %s %s", first[g]->src, streams);
        FIT_CHECK(fit_log_find(lines0, NCCL_LOG_WARN, "dropped the oldest", needle, NULL, line,
                               sizeof(line)) >= 0,
                  "no WARN says the full group table dropped dead connection #%d (%s)", g,
                  needle);
    }
    printf("  %s\n", line);
    fit_pass("%d dead half-connections (%d of %d streams each): the oldest %d evicted, in order",
             HALF_GROUPS, half, nl, HALF_GROUPS - 8);

    /* One more, kept open: it must be closed by the listener after the hello timeout. */
    late = hostile_open_lane(e->h, HOSTILE_ORPHAN, 0, HALF_GROUP_BASE + 0xffff);
    t0 = fit_now();
    fit_bound_init(&b, "expiry of an incomplete connection", e->hello_timeout + 5.0, 100000000L);
    while (!late->dropped) {
        hostile_accept_rounds(e, 1);
        hostile_poll();
        if (!late->dropped)
            fit_bound_step(&b);
    }
    FIT_CHECK(fit_now() - t0 >= e->hello_timeout - 0.2, "the incomplete connection was closed "
              "after %.2f s, before the %.1f s hello timeout", fit_now() - t0, e->hello_timeout);
    snprintf(needle, sizeof(needle), "connection from %s has 1 of %d streams", late->src, nl);
    FIT_CHECK(fit_log_find(lines0, NCCL_LOG_WARN, needle, "NCCL_FERRY_HELLO_TIMEOUT_MS", NULL,
                           line, sizeof(line)) >= 0, "no WARN says '%s' expired", needle);
    printf("  %s\n", line);
    /* The dead ones still held expired too. */
    snprintf(needle, sizeof(needle), "connection from %s has %d of %d streams",
             first[HALF_GROUPS - 1]->src, half, nl);
    FIT_CHECK(fit_log_find(lines0, NCCL_LOG_WARN, needle, NULL, NULL, line, sizeof(line)) >= 0,
              "no WARN says the newest dead connection ('%s') expired", needle);
    fit_pass("incomplete connections expire after the hello timeout (%.2f s), fds closed",
             fit_now() - t0);
    hostile_close_all();
    fit_log_allow_warns(0);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 8200,
                      "on the real connection after the expiries");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}

/*
 * More real peers than the group table holds (8) connect to one listener at
 * once, all their streams in before accept() runs. Only one comm comes out
 * per accept() call, so 8 complete groups wait for theirs: the streams of
 * the 9th and 10th must wait for a slot, not be refused (nor evict a
 * complete group).
 */
#define BURST_PEERS 10

static void hostile_case_burst(hostile_env_t *e)
{
    const fit_plugin_t *p = &e->plugin;
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    static char handles[BURST_PEERS][NCCL_NET_HANDLE_MAXSIZE];
    void *send[BURST_PEERS] = { NULL }, *recv[BURST_PEERS] = { NULL };
    int k, nsend = 0, nrecv = 0;
    fit_bound_t b;

    for (k = 0; k < BURST_PEERS; k++)
        memcpy(handles[k], e->handle, sizeof(handles[k]));
    fit_bound_init(&b, "connects of the burst", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (nsend < BURST_PEERS) {
        for (k = 0; k < BURST_PEERS; k++)
            if (send[k] == NULL) {
                FIT_NCCL(p->net->connect(e->ctx_c, 0, handles[k], &send[k], &dev_handle));
                nsend += send[k] != NULL;
            }
        if (nsend < BURST_PEERS)
            fit_bound_step(&b);
    }
    fit_bound_init(&b, "accepts of the burst", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (nrecv < BURST_PEERS) {
        FIT_NCCL(p->net->accept(e->listen_comm, &recv[nrecv], &dev_handle));
        if (recv[nrecv] != NULL)
            nrecv++;
        else
            fit_bound_step(&b);
    }
    fit_pass("%d peers connected at once to one listener: %d comms accepted", BURST_PEERS,
             nrecv);
    for (k = 0; k < BURST_PEERS; k++) {
        FIT_NCCL(p->net->closeSend(send[k]));
        FIT_NCCL(p->net->closeRecv(recv[k]));
    }
}

/* A plugin call that must be refused with the code of FERRY_ERR_INVALID and a WARN saying why. */
static void hostile_expect_refused(ncclResult_t rc, const char *call, int from, const char *warn)
{
    char line[4096];

    FIT_CHECK(rc == ncclInternalError, "%s returned %d (%s), expected ncclInternalError (a "
              "pointer that is not a live ferry object)", call, (int)rc, fit_result_str(rc));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, warn, NULL, NULL, line, sizeof(line)) >= 0,
              "%s: no WARN says '%s'", call, warn);
    printf("  %s -> %s: %s\n", call, fit_result_str(rc), line);
}

/*
 * NCCL closing twice (or with the call of the wrong kind). The second close
 * used to find the magic still in the freed comm (the store clearing it
 * before free() is dead to the compiler) and freed it again: glibc aborted.
 * Every close, deregMr and accept now asks the backend's live list first, so
 * the second call is refused without reading freed memory (ASan builds run
 * this too) and the process goes on working.
 */
static void hostile_case_double_close(hostile_env_t *e)
{
    const fit_plugin_t *p = &e->plugin;
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    void *send_comm = NULL, *recv_comm = NULL, *mh = NULL, *comm = NULL, *listen2;
    char warn[192], handle2[NCCL_NET_HANDLE_MAXSIZE];
    static char buf[4096];
    /* The WARNs name the backend ("not a live ferry socket ...", "... ferry ib ..."). */
    const char *be = getenv("NCCL_FERRY_BACKEND") != NULL &&
                     strcmp(getenv("NCCL_FERRY_BACKEND"), "ib") == 0 ? "ib" : "socket";
    char expect[64];
    int from;

    hostile_real_connect(e, &send_comm, &recv_comm);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 6100, "before the closes");
    snprintf(expect, sizeof(expect), "not a live ferry %s", be);
    fit_log_expect(expect);

    /* The wrong kind is refused, and the comm is left alone. */
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "closeRecv(%p): not a live ferry %s recv comm (it is a "
             "live send comm: left open)", send_comm, be);
    hostile_expect_refused(p->net->closeRecv(send_comm), "closeRecv(send comm)", from, warn);
    snprintf(warn, sizeof(warn), "closeSend(%p): not a live ferry %s send comm (it is a "
             "live recv comm: left open)", recv_comm, be);
    hostile_expect_refused(p->net->closeSend(recv_comm), "closeSend(recv comm)", from, warn);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 6200,
                      "after closes of the wrong kind");

    FIT_NCCL(p->net->regMr(send_comm, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    FIT_NCCL(p->net->deregMr(send_comm, mh));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "deregMr(comm %p, %p): not a live ferry %s memory handle",
             send_comm, mh, be);
    hostile_expect_refused(p->net->deregMr(send_comm, mh), "second deregMr", from, warn);

    FIT_NCCL(p->net->closeSend(send_comm));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "closeSend(%p): not a live ferry %s send comm (closed "
             "already?)", send_comm, be);
    hostile_expect_refused(p->net->closeSend(send_comm), "second closeSend", from, warn);
    FIT_NCCL(p->net->closeRecv(recv_comm));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "closeRecv(%p): not a live ferry %s recv comm (closed "
             "already?)", recv_comm, be);
    hostile_expect_refused(p->net->closeRecv(recv_comm), "second closeRecv", from, warn);

    FIT_NCCL(p->net->closeListen(e->listen_comm));
    from = fit_log_lines();
    snprintf(warn, sizeof(warn), "accept(%p): not a live ferry %s listen comm",
             e->listen_comm, be);
    hostile_expect_refused(p->net->accept(e->listen_comm, &comm, &dev_handle),
                           "accept on a closed listen comm", from, warn);
    FIT_CHECK(comm == NULL, "accept on a closed listen comm gave a comm (%p)", comm);
    snprintf(warn, sizeof(warn), "closeListen(%p): not a live ferry %s listen comm",
             e->listen_comm, be);
    hostile_expect_refused(p->net->closeListen(e->listen_comm), "second closeListen", from, warn);
    e->listen_comm = NULL;
    fit_pass("second closeSend/closeRecv/closeListen/deregMr and a stale accept refused, "
             "process alive");

    /* Nothing broke: a new connection works and closes cleanly once. */
    listen2 = fit_listen(p, e->ctx_l, 0, handle2);
    fit_connect_accept(p, e->ctx_c, 0, handle2, listen2, &send_comm, &recv_comm, NULL);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 6300,
                      "on a new connection after the refused closes");
    FIT_NCCL(p->net->closeSend(send_comm));
    FIT_NCCL(p->net->closeRecv(recv_comm));
    FIT_NCCL(p->net->closeListen(listen2));
    fit_log_expect_clear();
}

static const struct {
    const char *name;
    void      (*run)(hostile_env_t *e);
} hostile_cases[] = {
    { "strangers", hostile_case_strangers },
    { "flood",     hostile_case_flood },
    { "wrap",      hostile_case_wrap },
    { "half-groups", hostile_case_half_groups },
    { "double-close", hostile_case_double_close },
    { "burst",     hostile_case_burst },
};

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *tmo_env = getenv("NCCL_FERRY_HELLO_TIMEOUT_MS");
    const char *which = "strangers";
    char addr[80];
    hostile_env_t e;
    size_t c;

    if (argc == 3 && strcmp(argv[1], "--case") == 0)
        which = argv[2];
    else
        FIT_CHECK(argc == 1, "usage: integ_hostile [--plugin PATH] [--case NAME]");
    for (c = 0; c < sizeof(hostile_cases) / sizeof(hostile_cases[0]); c++)
        if (strcmp(hostile_cases[c].name, which) == 0)
            break;
    FIT_CHECK(c < sizeof(hostile_cases) / sizeof(hostile_cases[0]), "unknown case '%s'", which);
    fit_set_role("hostile");
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    srand(12345);
    memset(&e, 0, sizeof(e));
    e.hello_timeout = (tmo_env ? atof(tmo_env) : 10000.0) / 1000.0;
    e.h = (const ferry_sock_handle_t *)e.handle;
    fit_plugin_open(&e.plugin, path);
    e.ctx_l = fit_plugin_init(&e.plugin, 0x3333);
    e.ctx_c = fit_plugin_init(&e.plugin, 0x4444);
    e.listen_comm = fit_listen(&e.plugin, e.ctx_l, 0, e.handle);
    fit_handle_addr(e.handle, addr, sizeof(addr));
    printf("  case %s: listen address %s, %u lane(s), hello timeout %.1f s\n", which, addr,
           (unsigned)e.h->nlanes, e.hello_timeout);

    hostile_cases[c].run(&e);

    if (e.listen_comm != NULL)
        FIT_NCCL(e.plugin.net->closeListen(e.listen_comm));
    FIT_NCCL(e.plugin.net->finalize(e.ctx_l));
    FIT_NCCL(e.plugin.net->finalize(e.ctx_c));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&e.plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
    printf("integ_hostile %s: all checks passed\n", which);
    return 0;
}
