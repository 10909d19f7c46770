/*
 * Peers that hold the token (they read the handle) and lie after the hello:
 * a chunk header that wraps around, lengths no receive can hold,
 * connections that die half open, ib metadata no ferry sends.
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
#include "ib/ib_handle.h"

/*
 * A peer holding the token sends a chunk header whose offset + len wraps
 * around 2^64 (offset 2^64 - 4096, len 4096, message 8 KiB). The unsigned
 * sum is 0, so the old check passed and the payload landed 4 KiB before the
 * receive buffer. The receive sits in the middle of a patterned arena: every
 * byte of it must be unchanged, and test() must fail the request.
 */
#define WRAP_MSG   8192
#define WRAP_LEN   4096

void hostile_case_wrap(hostile_env_t *e)
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

void hostile_case_half_groups(hostile_env_t *e)
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

/* One forged chunk header at a posted 8 KiB receive in a patterned arena: the code test() gives. */
static ncclResult_t hostile_forged_header(hostile_env_t *e, uint64_t conn_id,
                                          const ferry_sock_chunk_hdr_t *hdr, uint64_t seed)
{
    const fit_plugin_t *p = &e->plugin;
    hostile_t *lanes[FERRY_SOCK_MAX_LANES];
    size_t arena_len = 3 * WRAP_MSG, size = WRAP_MSG;
    void *recv_comm, *mh = NULL, *req = NULL, *data;
    unsigned char *arena;
    ncclResult_t rc = ncclSuccess;
    int done = 0, rsize = 0, tag = 5;
    fit_bound_t b;

    recv_comm = hostile_forge_connection(e, conn_id, lanes);
    arena = aligned_alloc(4096, arena_len);
    FIT_CHECK(arena != NULL, "no memory for the arena");
    fit_fill(arena, arena_len, seed);
    data = arena + WRAP_MSG;
    FIT_NCCL(p->net->regMr(recv_comm, arena, arena_len, NCCL_PTR_HOST, &mh));
    FIT_NCCL(p->net->irecv(recv_comm, 1, &data, &size, &tag, &mh, NULL, &req));
    FIT_CHECK(req != NULL, "irecv returned no request");
    hostile_send_all(lanes[0]->fd, hdr, sizeof(*hdr), "forged chunk header");
    fit_bound_init(&b, "test() of the receive hit by the forged header", 10.0, 100000000L);
    while (rc == ncclSuccess && !done && fit_bound_try_step(&b))
        rc = p->net->test(req, &done, &rsize);
    fit_check_pattern(arena, arena_len, seed, "receive arena around the forged chunk");
    FIT_CHECK(!done, "test() reported the forged receive done (%d bytes)", rsize);
    FIT_NCCL(p->net->deregMr(recv_comm, mh));
    FIT_NCCL(p->net->closeRecv(recv_comm));
    hostile_close_all();
    free(arena);
    return rc;
}

/*
 * Lengths a token holder may lie about: a message of 2^62 bytes (more than
 * any receive: both sides' sizes disagree, ncclInvalidUsage, nothing
 * allocated for it), and a chunk of 4 GiB - 1 in a message of 8 KiB (a bad
 * header: ncclRemoteError). The receive's arena stays untouched, and a real
 * peer connects afterwards.
 */
void hostile_case_huge(hostile_env_t *e)
{
    ferry_sock_chunk_hdr_t hdr;
    void *send_comm = NULL, *recv_comm = NULL;
    char line[4096];
    ncclResult_t rc;

    memset(&hdr, 0, sizeof(hdr));
    hdr.nchunks  = 1;
    hdr.msg_size = (uint64_t)1 << 62;
    hdr.len      = 65536;
    hdr.check    = FERRY_SOCK_CHUNK_CHECK(hdr.seq, hdr.len);
    fit_log_expect("but the posted receive holds only 8192 bytes");
    fit_log_expect("truncated to a 8192-byte receive");
    rc = hostile_forged_header(e, 0x4848484811111111ULL, &hdr, 4343);
    FIT_CHECK(rc == ncclInvalidUsage, "a 2^62-byte message: test() returned %d (%s), expected "
              "ncclInvalidUsage", (int)rc, fit_result_str(rc));
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "message seq 0 is 4611686018427387904 bytes",
                           "holds only 8192 bytes", NULL, line, sizeof(line)) >= 0,
              "no WARN names the 2^62-byte message and the 8192-byte receive");
    printf("  %s\n", line);
    fit_pass("a 2^62-byte message header: ncclInvalidUsage, arena untouched");

    hdr.msg_size = WRAP_MSG;
    hdr.len      = UINT32_MAX;
    hdr.check    = FERRY_SOCK_CHUNK_CHECK(hdr.seq, hdr.len);
    fit_log_expect("bad chunk header");
    fit_log_expect("request seq 0 failed");
    rc = hostile_forged_header(e, 0x4848484822222222ULL, &hdr, 4444);
    FIT_CHECK(rc == ncclRemoteError, "a 4 GiB chunk in an 8 KiB message: test() returned %d "
              "(%s), expected ncclRemoteError", (int)rc, fit_result_str(rc));
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, "bad chunk header", "len 4294967295, size 8192",
                           NULL, line, sizeof(line)) >= 0,
              "no WARN names the bad header (len 4294967295, size 8192)");
    printf("  %s\n", line);
    fit_pass("a 4 GiB chunk header in an 8 KiB message: ncclRemoteError, arena untouched");
    fit_log_expect_clear();

    hostile_real_connect(e, &send_comm, &recv_comm);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 4545,
                      "on a real connection after the forged headers");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}

/*
 * The ib backend's out-of-band handshake from a token holder with metadata
 * no ferry sends: 65535 QPs, a size field of 65535, an MTU of 99, a device
 * name without its NUL, an Ethernet port facing an InfiniBand one, a
 * service level of 16 (4 bits on the wire of a real link), a multicast LID,
 * port number 0. A token holder is a rank of this job, so accept()
 * fails (ncclRemoteError) with a WARN saying what is wrong; nothing is built
 * from the numbers, and the listener still takes the real peer.
 */
void hostile_case_ib_meta(hostile_env_t *e)
{
    static const struct {
        const char *why;    /* In the WARN. */
        int         field;  /* What to break. */
    } lies[] = {
        { "QP count does not match", 0 },
        { "unsupported wire version", 1 },
        { "invalid MTU", 2 },
        { "device name not terminated", 3 },
        { "another link layer", 4 },
        { "service level (sl) 16 is out of range (0..15)", 5 },
        { "service level (sl) 255 is out of range (0..15)", 6 },
        { "port 0's LID 0xc000 is no unicast LID", 7 },
        { "port 0's number is 0", 8 },
    };
    void *send_comm = NULL, *recv_comm = NULL;
    char line[4096], needle[128];
    size_t i;

    FIT_CHECK(hostile_backend_ib(), "case ib-meta needs NCCL_FERRY_BACKEND=ib");
    fit_log_expect("its metadata is unusable");
    for (i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
        ncclNetDeviceHandle_v11_t *dh = NULL;
        struct {
            ferry_sock_hello_t hello;
            ferry_ib_meta_t    meta;
        } out;
        hostile_t *x = &hostiles[nhostiles];
        void *comm = NULL;
        ncclResult_t rc = ncclSuccess;
        fit_bound_t b;
        int from = fit_log_lines();

        hostile_open(e->h, HOSTILE_SILENT);
        hostile_hello(e->h, &out.hello);
        memset(&out.meta, 0, sizeof(out.meta));
        out.meta.magic = FERRY_IB_MAGIC;
        out.meta.version = FERRY_IB_WIRE_VERSION;
        out.meta.size = sizeof(out.meta);
        out.meta.nqps = 1;
        out.meta.nmembers = 1;
        out.meta.ports[0].mtu = 5;        /* IBV_MTU_4096. */
        out.meta.ports[0].port = 1;
        out.meta.ports[0].lid = 1;
        out.meta.ports[0].link_layer = 1; /* IBV_LINK_LAYER_INFINIBAND: fakeibv's default port. */
        out.meta.qpn[0] = 0x1234;
        snprintf(out.meta.devname, sizeof(out.meta.devname), "liar");
        switch (lies[i].field) {
        case 0: out.meta.nqps = 65535; break;
        case 1: out.meta.size = 65535; break;
        case 2: out.meta.ports[0].mtu = 99; break;
        case 3: memset(out.meta.devname, 'x', sizeof(out.meta.devname)); break;
        case 4: out.meta.ports[0].link_layer = 2; break;
        case 5: out.meta.sl = 16; break;
        case 6: out.meta.sl = 255; break;
        case 7: out.meta.ports[0].lid = 0xc000; break;
        case 8: out.meta.ports[0].port = 0; break;
        }
        hostile_send_all(x->fd, &out, sizeof(out), "forged ib hello + metadata");
        fit_bound_init(&b, "accept of forged ib metadata", 10.0, 100000000L);
        while ((rc = e->plugin.net->accept(e->listen_comm, &comm, &dh)) == ncclSuccess &&
               comm == NULL && fit_bound_try_step(&b))
            ;
        FIT_CHECK(comm == NULL, "accept built a comm from forged metadata (%s)", lies[i].why);
        FIT_CHECK(rc == ncclRemoteError, "forged metadata (%s): accept returned %d (%s), "
                  "expected ncclRemoteError", lies[i].why, (int)rc, fit_result_str(rc));
        snprintf(needle, sizeof(needle), "ib accept from %s", x->src);
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, needle, lies[i].why, NULL, line,
                               sizeof(line)) >= 0, "no WARN says '%s' for %s", lies[i].why,
                  x->src);
        printf("  %s\n", line);
    }
    fit_pass("%zu kinds of forged ib metadata: accept -> ncclRemoteError + WARN, no comm",
             sizeof(lies) / sizeof(lies[0]));
    hostile_close_all();
    fit_log_expect_clear();
    hostile_real_connect(e, &send_comm, &recv_comm);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 4646,
                      "on a real connection after the forged metadata");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}
