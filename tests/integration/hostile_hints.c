/*
 * A listener that takes fewer streams (NCCL_FERRY_NET_HINTS=1: its handle
 * says FERRY_SOCK_HANDLE_TAKES_FEWER), met by hellos written by hand: an
 * older connector's (the offer itself, no proposal), a connection of fewer
 * streams, and token holders whose proposal is garbage.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostile.h"

#define HINTS_CHUNK (64u << 10)

/* One stream of a connection forged here: lane `lane` of `nlanes` streams of conn_id. */
static hostile_t *hints_lane(const ferry_sock_handle_t *h, hostile_kind_t kind, int lane,
                             int nlanes, uint64_t conn_id)
{
    hostile_t *x = &hostiles[nhostiles];
    ferry_sock_hello_t hello;

    FIT_CHECK(nhostiles < HOSTILE_MAX, "too many hostiles");
    nhostiles++;
    memset(x, 0, sizeof(*x));
    x->kind = kind;
    x->fd = hostile_connect(h);
    x->t_open = fit_now();
    hostile_name_src(x);
    fcntl(x->fd, F_SETFL, O_NONBLOCK);
    hostile_hello(h, &hello);
    hello.lane = (uint16_t)lane;
    hello.nlanes = (uint16_t)nlanes;
    hello.conn_id = conn_id;
    hostile_send_all(x->fd, &hello, sizeof(hello), "hello of a forged stream");
    return x;
}

static void *hints_accept(hostile_env_t *e, const char *what)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    void *recv_comm = NULL;
    fit_bound_t b;

    fit_bound_init(&b, what, FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (recv_comm == NULL) {
        FIT_NCCL(e->plugin.net->accept(e->listen_comm, &recv_comm, &dev_handle));
        if (recv_comm == NULL)
            fit_bound_step(&b);
    }
    return recv_comm;
}

/*
 * Message seq of nchunks chunks of HINTS_CHUNK bytes, chunk c on stream
 * lanes[c % nlanes], into a receive posted on recv_comm: checked byte for byte.
 */
static void hints_message(hostile_env_t *e, void *recv_comm, hostile_t **lanes, int nlanes,
                          uint32_t seq, int nchunks, const char *what)
{
    const fit_plugin_t *p = &e->plugin;
    size_t size = (size_t)nchunks * HINTS_CHUNK;
    unsigned char *buf = aligned_alloc(4096, size), *src = malloc(size);
    void *mh = NULL, *req = NULL, *data = buf;
    int tag = 9, done = 0, rsize = -1, c;
    fit_bound_t b;

    FIT_CHECK(buf != NULL && src != NULL, "no memory for %zu bytes", size);
    memset(buf, FIT_POISON, size);
    fit_fill(src, size, 0x4817 + seq);
    FIT_NCCL(p->net->regMr(recv_comm, buf, size, NCCL_PTR_HOST, &mh));
    FIT_NCCL(p->net->irecv(recv_comm, 1, &data, &size, &tag, &mh, NULL, &req));
    FIT_CHECK(req != NULL, "%s: irecv returned no request", what);
    for (c = 0; c < nchunks; c++) {
        ferry_sock_chunk_hdr_t hdr;

        memset(&hdr, 0, sizeof(hdr));
        hdr.seq = seq;
        hdr.nchunks = (uint32_t)nchunks;
        hdr.msg_size = size;
        hdr.offset = (uint64_t)c * HINTS_CHUNK;
        hdr.len = HINTS_CHUNK;
        hdr.check = FERRY_SOCK_CHUNK_CHECK(hdr.seq, hdr.len);
        hostile_send_all(lanes[c % nlanes]->fd, &hdr, sizeof(hdr), "chunk header");
        hostile_send_all(lanes[c % nlanes]->fd, src + hdr.offset, HINTS_CHUNK, "chunk payload");
    }
    fit_bound_init(&b, what, 10.0, 100000000L);
    while (!done) {
        FIT_NCCL(p->net->test(req, &done, &rsize));
        if (!done)
            fit_bound_step(&b);
    }
    FIT_CHECK(rsize == (int)size, "%s: test() reported %d bytes, sent %zu", what, rsize, size);
    FIT_CHECK(memcmp(buf, src, size) == 0, "%s: the received bytes differ from the sent", what);
    FIT_NCCL(p->net->deregMr(recv_comm, mh));
    free(buf);
    free(src);
    fit_pass("%s: message %u, %d chunks over %d stream(s), %zu bytes intact", what, seq,
             nchunks, nlanes, size);
}

/* The accept INFO line of the last connection from one of lanes[0..n-1]: it must hold words. */
static void hints_accept_line(int from, hostile_t **lanes, int n, const char *words)
{
    char line[4096];
    int i, at = -1;

    for (i = 0; i < n && at < 0; i++)
        at = fit_log_find(from, NCCL_LOG_INFO, "accepted connection from", lanes[i]->src, words,
                          line, sizeof(line));
    FIT_CHECK(at >= 0, "no accept INFO line with '%s' names our streams", words);
    printf("  %s\n", strstr(line, "accepted"));
}

static void hints_close(hostile_t **lanes, int n)
{
    int i;

    for (i = 0; i < n; i++) {
        close(lanes[i]->fd);
        lanes[i]->fd = -1;
    }
}

static void hints_old_and_fewer(hostile_env_t *e)
{
    const ferry_sock_handle_t *h = e->h;
    hostile_t *lanes[FERRY_SOCK_MAX_LANES];
    void *recv_comm;
    char words[96];
    int l, from;

    FIT_CHECK(h->flags == FERRY_SOCK_HANDLE_TAKES_FEWER, "the handle's flags are 0x%x, not "
              "TAKES_FEWER: run this case with NCCL_FERRY_NET_HINTS=1", h->flags);
    /* An older connector: no proposal, every hello says the offer. */
    from = fit_log_lines();
    for (l = 0; l < h->nlanes; l++)
        lanes[l] = hints_lane(h, HOSTILE_ORPHAN, l, h->nlanes, 0x01d01d01d0ULL);
    recv_comm = hints_accept(e, "accept of an older connector's streams");
    snprintf(words, sizeof(words), ": %u streams, recv comm", (unsigned)h->nlanes);
    hints_accept_line(from, lanes, h->nlanes, words);
    hints_message(e, recv_comm, lanes, h->nlanes, 0, 2 * h->nlanes, "older connector's hello");
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
    hints_close(lanes, h->nlanes);

    /* A connector that chose 2 of the 4. */
    from = fit_log_lines();
    for (l = 0; l < 2; l++)
        lanes[l] = hints_lane(h, HOSTILE_ORPHAN, l, 2, 0xfe7e2ULL);
    recv_comm = hints_accept(e, "accept of 2 proposed streams");
    snprintf(words, sizeof(words), ": 2 streams (the connector's choice from NCCL's hints; %u "
             "offered)", (unsigned)h->nlanes);
    hints_accept_line(from, lanes, 2, words);
    hints_message(e, recv_comm, lanes, 2, 0, 3, "2 of 4 streams");
    hints_message(e, recv_comm, lanes, 2, 1, 1, "2 of 4 streams");
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
    hints_close(lanes, 2);
}

/* A rejection line names the stream's address, the comm and the reason. */
static void hints_expect_rejected(int from, const hostile_t *x, const char *comm,
                                  const char *reason)
{
    char line[4096];

    FIT_CHECK(x->dropped, "the stream from %s (%s) is still open", x->src, reason);
    FIT_CHECK(fit_log_find(from, -1, x->src, comm, reason, line, sizeof(line)) >= 0,
              "no line names %s, %s and '%s'", x->src, comm, reason);
    printf("  %s\n", strstr(line, "listener"));
}

static void hints_garbage(hostile_env_t *e)
{
    const ferry_sock_handle_t *h = e->h;
    hostile_t *zero, *more, *huge, *lane, *first, *second;
    int from = fit_log_lines();
    char more_words[64];
    const char *comm = "(comm 0x3333)";

    fit_log_expect("rejected stream from");
    zero = hints_lane(h, HOSTILE_BAD_NLANES, 0, 0, 0x7001);
    more = hints_lane(h, HOSTILE_BAD_NLANES, 0, h->nlanes + 1, 0x7002);
    huge = hints_lane(h, HOSTILE_BAD_NLANES, 0, 65535, 0x7003);
    lane = hints_lane(h, HOSTILE_BAD_LANE, 2, 2, 0x7004);
    /* One connection whose streams disagree: the first is filed, the second refused. */
    first = hints_lane(h, HOSTILE_ORPHAN, 0, 2, 0x7005);
    hostile_accept_rounds(e, 5);
    second = hints_lane(h, HOSTILE_BAD_LANE, 1, 3, 0x7005);
    hostile_pump_accept(&e->plugin, e->listen_comm, 5.0, 1);
    hostile_expect_dropped(0);
    hints_expect_rejected(from, zero, comm, "proposes 0 streams for its connection, where this "
                                            "listener takes 1..4");
    snprintf(more_words, sizeof(more_words), "proposes %u streams", (unsigned)h->nlanes + 1);
    hints_expect_rejected(from, more, comm, more_words);
    hints_expect_rejected(from, huge, comm, "proposes 65535 streams");
    hints_expect_rejected(from, lane, comm, "says it is stream 2 of a connection of 2 streams");
    hints_expect_rejected(from, second, comm, "says its connection has 3 streams, where the "
                                              "connection's first stream said 2");
    FIT_CHECK(!first->dropped, "the first stream of the disagreeing connection was dropped");
    fit_pass("proposals of 0, %u and 65535 streams, a lane past its count and a count that "
             "differs within one connection: no comm, each dropped and named with its address "
             "and comm", (unsigned)h->nlanes + 1);
    /* The orphan's group expires after the hello timeout if the real peer takes that long. */
    fit_log_expect("no new one for");
}

void hostile_case_hints(hostile_env_t *e)
{
    void *send_comm = NULL, *recv_comm = NULL;
    int from;

    hints_old_and_fewer(e);
    hints_garbage(e);
    /* The real peer after them all; NCCL_FERRY_STREAMS is set, so it opens the offer. */
    from = fit_log_lines();
    hostile_real_connect(e, &send_comm, &recv_comm);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_INFO, "connected to", "wins over NCCL's hints", NULL,
                           NULL, 0) >= 0, "the real connect's line does not say the stream "
              "variable wins");
    hostile_real_xfer(e, send_comm, recv_comm, 4u << 20, 0x4411, "real peer after them");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
    hostile_close_all();
    fit_log_expect_clear();
}
