/*
 * Moving chunks over one TCP stream. A send lane claims the next chunk of
 * the oldest message that still has unclaimed chunks, writes header and
 * payload with one sendmsg, and claims again: faster streams simply take
 * more chunks. A receive lane reads a header, finds the posted irecv for its
 * sequence number, and reads the payload straight into NCCL's buffer.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/log.h"
#include "socket/sock.h"

static ferry_sock_comm_t *ferry_sock_of(ferry_sock_stream_t *px)
{
    return (ferry_sock_comm_t *)px; /* px is the first member. */
}

/* A stream reached EOF between chunks: the peer closed its side. */
static long ferry_sock_lane_eof(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    int closed;

    lane->closed = 1;
    ferry_sock_lane_set(&c->px, li, FERRY_SOCK_LANE_CLOSED);
    closed = atomic_fetch_add(&c->closed_lanes, 1) + 1;
    if (closed == c->px.nlanes) {
        /* Normal at teardown; requests still pending get a WARN from test(). */
        FERRY_INFO(FERRY_LOG_NET, "socket %s comm #%u: peer %s closed all %d streams",
                   c->px.ring.kind == FERRY_PX_SEND ? "send" : "recv", c->px.ring.serial, c->px.ring.peer,
                   c->px.nlanes);
        ferry_px_ring_fail(&c->px.ring, FERRY_ERR_REMOTE,
                           "connection closed by peer %s (all %d streams); the peer process "
                           "probably exited or aborted: check its log", c->px.ring.peer, c->px.nlanes);
    }
    return 0;
}

/* A hard error on a stream: log it with everything we know, fail the comm. */
long ferry_sock_lane_error(ferry_sock_comm_t *c, int li, const char *op, int err,
                                  const char *what)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    /* The peer or the path to it, not this host: ncclRemoteError (a link taken down, too). */
    ferry_status_t status = err == 0 || err == EPIPE || err == ECONNRESET || err == ETIMEDOUT ||
                                    err == EHOSTUNREACH || err == ENETUNREACH ||
                                    err == ENETDOWN || err == EHOSTDOWN
                                ? FERRY_ERR_REMOTE
                                : FERRY_ERR_IO;
    char desc[160];

    ferry_px_ring_describe(&c->px.ring, desc, sizeof(desc));
    FERRY_WARN("%s stream %d of %d: %s failed: %s (%s); the peer process probably died or the "
               "network dropped the connection: check the peer's log and the link",
               desc, li, c->px.nlanes, op, err != 0 ? strerror(err) : "protocol error", what);
    lane->closed = 1;
    ferry_sock_lane_set(&c->px, li, FERRY_SOCK_LANE_FAILED);
    ferry_px_ring_fail(&c->px.ring, status, "%s on stream %d: %s (%s)", op, li,
                       err != 0 ? strerror(err) : "protocol error", what);
    return status;
}

/*
 * Send lanes receive nothing but a refusal (sock_refuse.c): readable means
 * one came, or the peer closed or reset.
 */
static long ferry_sock_send_lane_peer(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    char what[128];
    ssize_t n = recv(lane->fd, (char *)&lane->refusal + lane->refusal_got,
                     sizeof(lane->refusal) - lane->refusal_got, MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n > 0)
        return ferry_sock_refuse_take(c, li, (size_t)n);
    snprintf(what, sizeof(what), "message seq %u chunk %u/%u, %zu of %zu bytes sent",
             lane->claim.seq, lane->claim.chunk + 1, lane->claim.nchunks, lane->sent,
             sizeof(lane->hdr) + lane->claim.len);
    if (n == 0 && !lane->has_chunk && lane->refusal_got == 0)
        return ferry_sock_lane_eof(c, li);
    return ferry_sock_lane_error(c, li, "send", n == 0 ? ECONNRESET : errno, what);
}

/*
 * Moved without a poller (NCCL's thread lending a hand, or moving every
 * lane when there are no helper threads: revents 0), a lane still looks
 * for what the receiver sent, once per FERRY_SOCK_PEER_CHECK_NS of the
 * comm's coarse clock (test() keeps it): a refusal or a close is seen
 * without helpers too, at one recv a millisecond, not one per call.
 */
#define FERRY_SOCK_PEER_CHECK_NS 1000000ULL

static long ferry_sock_send_lane_check(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    uint64_t now = atomic_load_explicit(&c->px.ring.clock_ns, memory_order_relaxed);

    if (now - lane->peer_ns < FERRY_SOCK_PEER_CHECK_NS)
        return 0;
    lane->peer_ns = now;
    return ferry_sock_send_lane_peer(c, li);
}

static void ferry_sock_send_lane_start(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    const ferry_sock_claim_t *cl = &lane->claim;

    lane->hdr.seq = cl->seq;
    lane->hdr.nchunks = cl->nchunks;
    lane->hdr.msg_size = cl->msg_size;
    lane->hdr.offset = cl->offset;
    lane->hdr.len = (uint32_t)cl->len;
    lane->hdr.check = FERRY_SOCK_CHUNK_CHECK(cl->seq, (uint32_t)cl->len);
    lane->sent = 0;
    lane->has_chunk = 1;
    lane->chunk_ns = ferry_px_now_ns();
    ferry_sock_zc_prepare(c, li);
    atomic_store_explicit(&c->px.lanes[li].seq, cl->seq, memory_order_relaxed);
    ferry_sock_lane_set(&c->px, li, FERRY_SOCK_LANE_HEADER);
}

static long ferry_sock_send_lane_progress(ferry_sock_stream_t *px, int li, short revents,
                                          ferry_sock_burst_t burst)
{
    ferry_sock_comm_t *c = ferry_sock_of(px);
    ferry_sock_lane_t *lane = &c->lanes[li];
    long work = 0;
    int chunks = 0;

    if (lane->closed)
        return 0;
    if (revents & (FERRY_PX_POOL_READABLE | FERRY_PX_POOL_BROKEN)) {
        long r = ferry_sock_send_lane_peer(c, li);

        if (r < 0 || lane->closed)
            return r;
    } else if (revents == 0) {
        long r = ferry_sock_send_lane_check(c, li);

        if (r < 0 || lane->closed)
            return r;
    }
    while (chunks < burst.chunks) {
        size_t hdr_left, total;
        struct iovec iov[2];
        struct msghdr msg;
        ssize_t n;
        int niov = 0, zc;

        if (!lane->has_chunk) {
            if (!ferry_sock_stream_claim(px, &lane->claim))
                break;
            ferry_sock_send_lane_start(c, li);
        }
        total = sizeof(lane->hdr) + lane->claim.len;
        hdr_left = lane->sent < sizeof(lane->hdr) ? sizeof(lane->hdr) - lane->sent : 0;
        if (hdr_left > 0) {
            iov[niov].iov_base = (char *)lane->hdr_p + lane->sent;
            iov[niov++].iov_len = hdr_left;
        }
        if (lane->claim.len > 0 && !FERRY_SOCK_NULL_PAYLOAD) {
            size_t pay_done = lane->sent - (sizeof(lane->hdr) - hdr_left);

            iov[niov].iov_base = lane->claim.req->sub[0].buf + lane->claim.offset + pay_done;
            iov[niov++].iov_len = lane->claim.len - pay_done;
        }
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)niov;
        zc = ferry_sock_zc_flags(c, li);
        n = sendmsg(lane->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT | zc);
        if (n < 0 && zc != 0 && errno == ENOBUFS) {
            /* The pinned-page budget (optmem_max) is spent: this one goes copied. */
            zc = 0;
            n = sendmsg(lane->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!atomic_load_explicit(&lane->blocked, memory_order_relaxed))
                    ferry_px_stat_add(&px->lanes[li].blocked, 1);
                atomic_store_explicit(&lane->blocked, 1, memory_order_relaxed);
                ferry_sock_lane_set(px, li, FERRY_SOCK_LANE_BLOCKED);
                break;
            }
            {
                char what[128];

                snprintf(what, sizeof(what), "message seq %u chunk %u/%u, %zu of %zu bytes sent",
                         lane->claim.seq, lane->claim.chunk + 1, lane->claim.nchunks,
                         lane->sent, total);
                return ferry_sock_lane_error(c, li, "send", errno, what);
            }
        }
        atomic_store_explicit(&lane->blocked, 0, memory_order_relaxed);
        ferry_sock_zc_sent(c, li, zc);
        if (FERRY_SOCK_NULL_PAYLOAD && (size_t)n == hdr_left)
            n += (ssize_t)lane->claim.len; /* The header is out: the payload counts as sent. */
        if ((size_t)n > hdr_left) {
            ferry_px_req_progress(lane->claim.req, (size_t)n - hdr_left);
            ferry_px_stat_add(&px->lanes[li].bytes, (size_t)n - hdr_left);
            ferry_sock_lane_set(px, li, FERRY_SOCK_LANE_PAYLOAD);
        }
        lane->sent += (size_t)n;
        work += n;
        if (lane->sent < total)
            continue;
        ferry_sock_zc_chunk_queued(c, li);
        ferry_px_stat_add(&px->lanes[li].busy_ns, ferry_px_now_ns() - lane->chunk_ns);
        ferry_px_stat_add(&px->lanes[li].chunks, 1);
        ferry_sock_lane_set(px, li, FERRY_SOCK_LANE_IDLE);
        lane->has_chunk = 0;
        chunks++;
        work++; /* A 0-byte message is work too. */
    }
    return work;
}

static short ferry_sock_send_lane_wants(ferry_sock_stream_t *px, int li, int *fd_p)
{
    ferry_sock_lane_t *lane = &ferry_sock_of(px)->lanes[li];

    *fd_p = lane->fd;
    if (lane->closed)
        return 0;
    if (atomic_load_explicit(&lane->blocked, memory_order_relaxed))
        return FERRY_PX_POOL_WRITABLE | FERRY_PX_POOL_READABLE;
    return FERRY_PX_POOL_READABLE;
}

const ferry_sock_stream_lane_ops_t ferry_sock_send_lane_ops = {
    .progress = ferry_sock_send_lane_progress,
    .wants    = ferry_sock_send_lane_wants,
    .retire   = ferry_sock_zc_retire,
};

/* Read into buf; returns bytes, 0 when nothing is there now, -1 on EOF/error (errno; 0 = EOF). */
static ssize_t ferry_sock_lane_read(int fd, void *buf, size_t len)
{
    ssize_t n;

    do {
        n = recv(fd, buf, len, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0)
        return n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n == 0)
        errno = 0;
    return -1;
}

int ferry_sock_chunk_hdr_ok(const ferry_sock_chunk_hdr_t *h)
{
    /* offset + len could wrap past 2^64 and pass: compare without adding. */
    return h->check == FERRY_SOCK_CHUNK_CHECK(h->seq, h->len) && h->len <= h->msg_size &&
           h->offset <= h->msg_size - h->len && h->nchunks != 0;
}

/* The header is complete: find its request and check it. 1 matched, 0 parked, <0 failed. */
static long ferry_sock_recv_lane_match(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    const ferry_sock_chunk_hdr_t *h = &lane->rhdr;
    ferry_px_req_t *req;
    ferry_status_t status;
    char what[160], desc[160];

    if (!ferry_sock_chunk_hdr_ok(h)) {
        snprintf(what, sizeof(what), "bad chunk header (seq %u, offset %llu, len %u, size %llu)",
                 h->seq, (unsigned long long)h->offset, h->len,
                 (unsigned long long)h->msg_size);
        return ferry_sock_lane_error(c, li, "recv", 0, what);
    }
    req = ferry_px_ring_match(&c->px.ring, h->seq);
    if (req == NULL) {
        /* The seq tells irecv's kick whether this lane can go on (ferry_sock_stream_kick_posted). */
        atomic_store_explicit(&c->px.lanes[li].seq, h->seq, memory_order_relaxed);
        atomic_store_explicit(&lane->parked, 1, memory_order_relaxed);
        ferry_sock_lane_set(&c->px, li, FERRY_SOCK_LANE_PARKED);
        return 0;
    }
    atomic_store_explicit(&lane->parked, 0, memory_order_relaxed);
    status = ferry_px_req_learn(req, h->msg_size, h->nchunks);
    if (status == FERRY_ERR_USAGE) {
        ferry_px_ring_describe(&c->px.ring, desc, sizeof(desc));
        FERRY_WARN("%s stream %d: message seq %u is %llu bytes but the posted receive holds "
                   "only %zu bytes (request state %s); the comm fails and the sender is told; "
                   "sender and receiver disagree on sizes: check that both ranks post matching "
                   "send/recv sizes", desc, li, h->seq,
                   (unsigned long long)h->msg_size, req->sub[0].capacity,
                   ferry_px_req_state_str(atomic_load(&req->state)));
        ferry_px_req_fail(req, FERRY_ERR_USAGE);
        ferry_px_ring_fail(&c->px.ring, FERRY_ERR_USAGE, "message seq %u of %llu bytes truncated to a "
                           "%zu-byte receive", h->seq, (unsigned long long)h->msg_size,
                           req->sub[0].capacity);
        /* This comm reads no more: the sender must not wait for that. */
        ferry_sock_refuse_send(c, h->seq, h->msg_size, req->sub[0].capacity);
        return FERRY_ERR_USAGE;
    }
    if (status != FERRY_OK)
        return ferry_sock_lane_error(c, li, "recv", 0, "chunks of one message disagree on its size");
    ferry_px_req_part_start(req);
    lane->rreq = req;
    lane->rgot = 0;
    lane->chunk_ns = ferry_px_now_ns();
    atomic_store_explicit(&c->px.lanes[li].seq, h->seq, memory_order_relaxed);
    ferry_sock_lane_set(&c->px, li, FERRY_SOCK_LANE_PAYLOAD);
    return 1;
}

static long ferry_sock_recv_lane_failed_read(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    char what[160];
    int err = errno;

    if (err == 0 && lane->rhdr_got == 0 && lane->rreq == NULL)
        return ferry_sock_lane_eof(c, li);
    snprintf(what, sizeof(what), "in message seq %u, %zu of %zu header bytes and %zu of %u "
             "payload bytes read", lane->rhdr.seq, lane->rhdr_got, sizeof(lane->rhdr), lane->rgot,
             lane->rreq != NULL ? lane->rhdr.len : 0);
    return ferry_sock_lane_error(c, li, "recv", err == 0 ? ECONNRESET : err, what);
}

static long ferry_sock_recv_lane_progress(ferry_sock_stream_t *px, int li, short revents,
                                          ferry_sock_burst_t burst)
{
    ferry_sock_comm_t *c = ferry_sock_of(px);
    ferry_sock_lane_t *lane = &c->lanes[li];
    long work = 0, r;
    ferry_px_req_t *req;
    int chunks = 0;
    ssize_t n;

    if (lane->closed)
        return 0;
    while (chunks < burst.chunks) {
        if (lane->rreq == NULL) {
            if (lane->rhdr_got < sizeof(lane->rhdr)) {
                n = ferry_sock_lane_read(lane->fd, (char *)&lane->rhdr + lane->rhdr_got,
                                         sizeof(lane->rhdr) - lane->rhdr_got);
                if (n < 0)
                    return ferry_sock_recv_lane_failed_read(c, li);
                if (n == 0)
                    break;
                lane->rhdr_got += (size_t)n;
                work += n;
                ferry_sock_lane_set(px, li, FERRY_SOCK_LANE_HEADER);
                if (lane->rhdr_got < sizeof(lane->rhdr))
                    continue;
            }
            r = ferry_sock_recv_lane_match(c, li);
            if (r <= 0)
                return r < 0 ? r : work;
        }
        if (FERRY_SOCK_NULL_PAYLOAD && lane->rgot < lane->rhdr.len) {
            ferry_px_req_progress(lane->rreq, lane->rhdr.len - lane->rgot);
            lane->rgot = lane->rhdr.len; /* Nothing follows the header. */
        }
        if (lane->rgot < lane->rhdr.len) {
            n = ferry_sock_lane_read(lane->fd, lane->rreq->sub[0].buf + lane->rhdr.offset + lane->rgot,
                                     lane->rhdr.len - lane->rgot);
            if (n < 0)
                return ferry_sock_recv_lane_failed_read(c, li);
            if (n == 0)
                break;
            lane->rgot += (size_t)n;
            work += n;
            ferry_px_req_progress(lane->rreq, (size_t)n);
            ferry_px_stat_add(&px->lanes[li].bytes, (size_t)n);
            if (lane->rgot < lane->rhdr.len)
                continue;
        }
        req = lane->rreq;
        ferry_sock_stream_chunk_finish(px, li, req);
        ferry_px_stat_add(&px->lanes[li].busy_ns, ferry_px_now_ns() - lane->chunk_ns);
        ferry_px_stat_add(&px->lanes[li].chunks, 1);
        ferry_sock_lane_set(px, li, FERRY_SOCK_LANE_IDLE);
        lane->rreq = NULL;
        lane->rhdr_got = 0;
        chunks++;
        work++;
        /*
         * Only NCCL's thread asks for message_end, and only it tests and
         * reposts a slot: req is still this message's here.
         */
        if (burst.message_end && ferry_px_req_all_moved(req))
            break;
    }
    return work;
}

static short ferry_sock_recv_lane_wants(ferry_sock_stream_t *px, int li, int *fd_p)
{
    ferry_sock_lane_t *lane = &ferry_sock_of(px)->lanes[li];

    *fd_p = lane->fd;
    /* A parked lane waits for irecv's kick, not for the socket. */
    if (lane->closed || atomic_load_explicit(&lane->parked, memory_order_relaxed))
        return 0;
    return FERRY_PX_POOL_READABLE;
}

const ferry_sock_stream_lane_ops_t ferry_sock_recv_lane_ops = {
    .progress = ferry_sock_recv_lane_progress,
    .wants    = ferry_sock_recv_lane_wants,
};
