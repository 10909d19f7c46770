/*
 * A job's start against one ib listener (oob mode): every rank connects at
 * once. --count N connectors (default 1024) call connect() in a new random
 * order each round while accept() is called a random 0..2 times between
 * them, and --junk J strangers (silent, random bytes, half a hello, a wrong
 * token, a connect-and-close) are opened among the first connects. Checks:
 *   - every connector gets a comm and the listener returns exactly N comms
 *     (none is dropped after its connector counted itself connected: the
 *     failure was N connected, 33 accepted);
 *   - each pair then moves one message, checked byte for byte, and each
 *     receiver gets exactly one sender's message (a bijection);
 *   - the strangers the listener closed are counted (evicted or rejected);
 *   - WARN lines stay bounded (the per-site limit).
 * Prints "HOSTILE ib crowd: N connects, N accepted, 0 lost, E junk evicted, X s".
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "socket/sock_wire.h"

#define CROWD_MAX     4096
#define CROWD_MSG     4096
#define CROWD_SECONDS 60.0

typedef enum junk_kind {
    JUNK_SILENT, /* Connect, send nothing. */
    JUNK_RANDOM, /* 48 random bytes. */
    JUNK_HALF,   /* The first 16 bytes of a hello, then nothing. */
    JUNK_TOKEN,  /* A hello's magic and version, then a random token. */
    JUNK_CLOSE,  /* Connect, close at once. */
    JUNK_KINDS
} junk_kind_t;

typedef struct crowd {
    const fit_plugin_t *p;
    void               *ctx, *lc;
    int                 dev, n, njunk;
    /* 8-byte aligned as NCCL's handle buffers are (its own IB transport reads 64-bit fields). */
    _Alignas(8) char    handle[NCCL_NET_HANDLE_MAXSIZE];
    char              (*handles)[NCCL_NET_HANDLE_MAXSIZE]; /* Each connector's own copy. */
    void              **send, **recv;
    int                 nsend, nrecv, lost;
    int                 told;     /* Strangers that read the listener's EVICTED byte ('E'). */
    int                *junk_fd;
    int                *perm;
} crowd_t;

static unsigned crowd_seed = 12345;

static unsigned crowd_rand(void)
{
    crowd_seed = crowd_seed * 1103515245U + 12345U;
    return crowd_seed >> 8;
}

static void crowd_shuffle(int *a, int n)
{
    int i;

    for (i = n - 1; i > 0; i--) {
        int j = (int)(crowd_rand() % (unsigned)(i + 1)), t = a[i];

        a[i] = a[j];
        a[j] = t;
    }
}

static void crowd_raise_nofile(int need)
{
    struct rlimit rl;

    FIT_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit: %s", strerror(errno));
    if (rl.rlim_cur < (rlim_t)need) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)need ? rl.rlim_max : (rlim_t)need;
        FIT_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
    }
    FIT_CHECK(rl.rlim_cur >= (rlim_t)need, "RLIMIT_NOFILE %llu < %d fds this test needs",
              (unsigned long long)rl.rlim_cur, need);
}

/* A stranger: a TCP connection to the listener that never completes a valid hello. */
static int crowd_junk_open(const crowd_t *cw, junk_kind_t kind)
{
    const ferry_sock_handle_t *h = (const ferry_sock_handle_t *)cw->handle;
    struct sockaddr_in sa;
    unsigned char bytes[64];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), i;

    FIT_CHECK(fd >= 0 && h->family == AF_INET, "junk socket: %s", strerror(errno));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = h->port;
    memcpy(&sa.sin_addr, h->addr, 4);
    FIT_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "junk connect: %s",
              strerror(errno));
    for (i = 0; i < (int)sizeof(bytes); i++)
        bytes[i] = (unsigned char)crowd_rand();
    memcpy(bytes, cw->handle, 16); /* The handle starts as the hello does: magic, version. */
    switch (kind) {
    case JUNK_SILENT:
        break;
    case JUNK_RANDOM:
        FIT_CHECK(send(fd, bytes + 16, 48, MSG_NOSIGNAL) == 48, "junk send");
        break;
    case JUNK_HALF:
        FIT_CHECK(send(fd, bytes, 16, MSG_NOSIGNAL) == 16, "junk send");
        break;
    case JUNK_TOKEN:
        FIT_CHECK(send(fd, bytes, 64, MSG_NOSIGNAL) == 64, "junk send"); /* Random token. */
        break;
    default:
        close(fd);
        return -1;
    }
    return fd;
}

/* Strangers the listener has closed (EOF or reset on our end). */
static int crowd_junk_closed(crowd_t *cw)
{
    int i, closed = 0;

    for (i = 0; i < cw->njunk; i++) {
        char b[64];
        ssize_t r;

        if (cw->junk_fd[i] == -2) {
            closed++;
            continue;
        }
        if (cw->junk_fd[i] < 0)
            continue; /* Closed by us at once (JUNK_CLOSE). */
        r = recv(cw->junk_fd[i], b, sizeof(b), MSG_DONTWAIT);
        if (r > 0 && b[0] == 'E') /* FERRY_IB_OOB_EVICTED: a real connector would retry. */
            cw->told++;
        if (r > 0)
            r = recv(cw->junk_fd[i], b, sizeof(b), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            close(cw->junk_fd[i]);
            cw->junk_fd[i] = -2;
            closed++;
        }
    }
    return closed;
}

static void crowd_accept_some(crowd_t *cw, int times)
{
    int k;

    for (k = 0; k < times && cw->nrecv < cw->n; k++) {
        void *rc = NULL;
        ncclNetDeviceHandle_v11_t *dh = NULL;

        FIT_NCCL(cw->p->net->accept(cw->lc, &rc, &dh));
        if (rc != NULL)
            cw->recv[cw->nrecv++] = rc;
    }
}

static void crowd_connect(crowd_t *cw)
{
    fit_bound_t b;
    double all_connected = 0;
    int i, j, round = 0, junk_every = cw->njunk > 0 ? cw->n / cw->njunk : 0;

    if (junk_every < 1)
        junk_every = 1;
    fit_bound_init(&b, "crowd connect/accept", CROWD_SECONDS, 100000000L);
    while (cw->nrecv < cw->n || cw->nsend + cw->lost < cw->n) {
        crowd_shuffle(cw->perm, cw->n);
        for (j = 0; j < cw->n; j++) {
            ncclNetDeviceHandle_v11_t *dh = NULL;
            ncclResult_t rc;

            i = cw->perm[j];
            if (round == 0 && cw->njunk > 0 && i % junk_every == 0 && i / junk_every < cw->njunk)
                cw->junk_fd[i / junk_every] =
                    crowd_junk_open(cw, (junk_kind_t)((i / junk_every) % JUNK_KINDS));
            if (cw->send[i] == NULL) {
                rc = cw->p->net->connect(cw->ctx, cw->dev, cw->handles[i], &cw->send[i], &dh);
                if (rc != ncclSuccess) {
                    printf("  connector %d failed: %s\n", i, fit_result_str(rc));
                    cw->send[i] = (void *)-1;
                    cw->lost++;
                } else if (cw->send[i] != NULL) {
                    cw->nsend++;
                }
            }
            if (j % 8 == 0)
                crowd_accept_some(cw, (int)(crowd_rand() % 3));
        }
        crowd_accept_some(cw, 1 + (int)(crowd_rand() % 3));
        round++;
        /* The old failure: connectors all done while the listener has dropped some. */
        if (cw->nsend + cw->lost == cw->n && all_connected == 0)
            all_connected = fit_now();
        FIT_CHECK(all_connected == 0 || fit_now() - all_connected < 5.0,
                  "%d connectors say connected, %d lost, but the listener returned only %d "
                  "comms in 5 s after", cw->nsend, cw->lost, cw->nrecv);
        if (!fit_bound_try_step(&b))
            FIT_FAIL("%d connects: %d connected, %d lost, %d accepted after %.0f s", cw->n,
                     cw->nsend, cw->lost, cw->nrecv, CROWD_SECONDS);
    }
}

/* Sender id's message: its id, then seed id's pattern. */
static void crowd_expect(unsigned char *buf, uint32_t id)
{
    fit_fill(buf, CROWD_MSG, 0xC0DE0000ULL + id);
    memcpy(buf, &id, sizeof(id));
}

/* One message per pair: sender i's message carries i and seed i's pattern. */
static void crowd_xfer(crowd_t *cw)
{
    unsigned char expect[CROWD_MSG];
    unsigned char *sbuf = malloc((size_t)cw->n * CROWD_MSG);
    unsigned char *rbuf = malloc((size_t)cw->n * CROWD_MSG);
    void **smh = calloc((size_t)cw->n, sizeof(void *));
    void **rmh = calloc((size_t)cw->n, sizeof(void *));
    void **sreq = calloc((size_t)cw->n, sizeof(void *));
    void **rreq = calloc((size_t)cw->n, sizeof(void *));
    int *seen = calloc((size_t)cw->n, sizeof(int)), *sdone = calloc((size_t)cw->n, sizeof(int));
    int *rdone = calloc((size_t)cw->n, sizeof(int)), left = 2 * cw->n, i;
    fit_bound_t b;

    FIT_CHECK(sbuf && rbuf && smh && rmh && sreq && rreq && seen && sdone && rdone, "malloc");
    for (i = 0; i < cw->n; i++) {
        int tag = 0;
        size_t size = CROWD_MSG;
        void *data = rbuf + (size_t)i * CROWD_MSG;
        uint32_t id = (uint32_t)i;

        crowd_expect(sbuf + (size_t)i * CROWD_MSG, id);
        memset(data, 0xEE, CROWD_MSG);
        FIT_NCCL(cw->p->net->regMr(cw->send[i], sbuf + (size_t)i * CROWD_MSG, CROWD_MSG,
                                   NCCL_PTR_HOST, &smh[i]));
        FIT_NCCL(cw->p->net->regMr(cw->recv[i], data, CROWD_MSG, NCCL_PTR_HOST, &rmh[i]));
        FIT_NCCL(cw->p->net->irecv(cw->recv[i], 1, &data, &size, &tag, &rmh[i], NULL, &rreq[i]));
        FIT_CHECK(rreq[i] != NULL, "irecv on recv comm %d gave no request", i);
    }
    fit_bound_init(&b, "crowd transfers", CROWD_SECONDS, 100000000L);
    while (left > 0) {
        for (i = 0; i < cw->n; i++) {
            int done = 0, size = 0;

            if (sreq[i] == NULL)
                FIT_NCCL(cw->p->net->isend(cw->send[i], sbuf + (size_t)i * CROWD_MSG, CROWD_MSG,
                                           0, smh[i], NULL, &sreq[i]));
            if (sreq[i] != NULL && !sdone[i]) {
                FIT_NCCL(cw->p->net->test(sreq[i], &done, &size));
                if (done) {
                    sdone[i] = 1;
                    left--;
                }
            }
            if (!rdone[i]) {
                FIT_NCCL(cw->p->net->test(rreq[i], &done, &size));
                if (done) {
                    unsigned char *got = rbuf + (size_t)i * CROWD_MSG;
                    uint32_t id;

                    memcpy(&id, got, sizeof(id));
                    FIT_CHECK(size == CROWD_MSG && id < (uint32_t)cw->n && !seen[id],
                              "recv comm %d: size %d, sender id %u (seen before: %d)", i, size,
                              id, id < (uint32_t)cw->n ? seen[id] : -1);
                    seen[id] = 1;
                    crowd_expect(expect, id);
                    FIT_CHECK(memcmp(got, expect, CROWD_MSG) == 0,
                              "recv comm %d: the message of sender %u differs", i, id);
                    rdone[i] = 1;
                    left--;
                }
            }
        }
        if (left > 0 && !fit_bound_try_step(&b))
            FIT_FAIL("crowd transfers: %d of %d requests not done", left, 2 * cw->n);
    }
    for (i = 0; i < cw->n; i++) {
        FIT_NCCL(cw->p->net->deregMr(cw->send[i], smh[i]));
        FIT_NCCL(cw->p->net->deregMr(cw->recv[i], rmh[i]));
    }
    free(sbuf), free(rbuf), free(smh), free(rmh), free(sreq), free(rreq);
    free(seen), free(sdone), free(rdone);
}

static int crowd_count_lines(int from, const char *needle)
{
    int n = 0, i = from;

    while ((i = fit_log_find(i, -1, needle, NULL, NULL, NULL, 0)) >= 0) {
        n++;
        i++;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    fit_plugin_t plugin;
    crowd_t cw;
    int i, evicted, warns0, lines0;
    double t0;

    memset(&cw, 0, sizeof(cw));
    cw.n = 1024;
    cw.njunk = -1;
    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--count") == 0)
            cw.n = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--junk") == 0)
            cw.njunk = atoi(argv[i + 1]);
        else
            FIT_FAIL("usage: integ_ib_crowd [--plugin PATH] [--count N] [--junk J]");
    }
    if (cw.njunk < 0)
        cw.njunk = cw.n / 8;
    FIT_CHECK(cw.n > 0 && cw.n <= CROWD_MAX && cw.njunk <= cw.n, "--count 1..%d, --junk <= count",
              CROWD_MAX);
    /* Each pair: 2 OOB sockets plus fakeibv's per-QP sockets; strangers; slack. */
    crowd_raise_nofile(cw.n * 16 + cw.njunk + 256);
    cw.handles = calloc((size_t)cw.n, sizeof(*cw.handles));
    cw.send = calloc((size_t)cw.n, sizeof(void *));
    cw.recv = calloc((size_t)cw.n, sizeof(void *));
    cw.perm = calloc((size_t)cw.n, sizeof(int));
    cw.junk_fd = calloc((size_t)cw.njunk + 1, sizeof(int));
    FIT_CHECK(cw.handles && cw.send && cw.recv && cw.perm && cw.junk_fd, "calloc");
    for (i = 0; i < cw.n; i++)
        cw.perm[i] = i;
    for (i = 0; i < cw.njunk; i++)
        cw.junk_fd[i] = -1;

    fit_plugin_open(&plugin, path);
    cw.p = &plugin;
    cw.ctx = fit_plugin_init(&plugin, 0xC0DE);
    cw.dev = fit_device(&plugin);
    cw.lc = fit_listen(&plugin, cw.ctx, cw.dev, cw.handle);
    for (i = 0; i < cw.n; i++)
        memcpy(cw.handles[i], cw.handle, sizeof(cw.handle));
    fit_log_allow_warns(1); /* The strangers' WARNs; counted below. */
    warns0 = fit_log_warns();
    lines0 = fit_log_lines();
    t0 = fit_now();
    crowd_connect(&cw);
    evicted = crowd_junk_closed(&cw);
    fit_pass("%d concurrent connects with %d strangers among them: %d connected, %d accepted, "
             "%d lost in %.2f s", cw.n, cw.njunk, cw.nsend, cw.nrecv, cw.lost, fit_now() - t0);
    FIT_CHECK(cw.lost == 0 && cw.nrecv == cw.n, "%d lost, %d of %d accepted", cw.lost, cw.nrecv,
              cw.n);
    crowd_xfer(&cw);
    fit_pass("%d pairs moved one %d B message each, byte for byte, one sender per receiver",
             cw.n, CROWD_MSG);
    evicted = crowd_junk_closed(&cw);
    /* Each WARN site prints at most a burst per interval: a crowd of strangers is not a flood
     * of lines. */
    /* Three sites a stranger reaches (rejected, evicted, a handshake step): each a burst and a
     * suppressed-count line per interval begun. */
    FIT_CHECK(fit_log_warns() - warns0 <=
                  3 * 11 * (1 + (int)((fit_now() - t0) / 10.0)),
              "%d WARN lines for %d strangers in %.1f s", fit_log_warns() - warns0, cw.njunk,
              fit_now() - t0);
    printf("HOSTILE ib crowd: %d connects, %d accepted, %d lost, %d junk evicted, %.2f s "
           "(%d strangers, %d told EVICTED, %d WARN lines, %d reconnects after an eviction)\n",
           cw.n, cw.nrecv, cw.lost, evicted, fit_now() - t0, cw.njunk, cw.told,
           fit_log_warns() - warns0,
           crowd_count_lines(lines0, "by the crowded listener before our hello"));
    t0 = fit_now();
    for (i = 0; i < cw.n; i++) {
        FIT_NCCL(plugin.net->closeSend(cw.send[i]));
        FIT_NCCL(plugin.net->closeRecv(cw.recv[i]));
    }
    printf("  %d comms closed in %.2f s\n", 2 * cw.n, fit_now() - t0);
    for (i = 0; i < cw.njunk; i++)
        if (cw.junk_fd[i] >= 0)
            close(cw.junk_fd[i]);
    FIT_NCCL(plugin.net->closeListen(cw.lc));
    FIT_NCCL(plugin.net->finalize(cw.ctx));
    fit_log_allow_warns(0);
    fit_plugin_close(&plugin);
    free(cw.handles), free(cw.send), free(cw.recv), free(cw.perm), free(cw.junk_fd);
    return 0;
}
