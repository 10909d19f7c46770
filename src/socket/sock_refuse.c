/*
 * The refusal (sock_wire.h): a receiver that fails its comm because a
 * message is larger than the posted receive says so to the sender, on every
 * stream. The sender stops at once with ncclRemoteError and a WARN saying
 * why, instead of blocking on streams the receiver no longer reads until
 * the receiver closes them. Every stream gets it because the sender may be
 * blocked on any of them, and one without helper threads only looks at a
 * stream it is sending on.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "socket/sock.h"

void ferry_sock_refuse_send(ferry_sock_comm_t *c, uint32_t seq, uint64_t msg_size,
                            uint64_t capacity)
{
    ferry_sock_refuse_t r;
    int expected = 0, li, told = 0;

    /* Two streams may carry chunks of the refused message: one refusal per comm. */
    if (!atomic_compare_exchange_strong(&c->refused, &expected, 1))
        return;
    memset(&r, 0, sizeof(r));
    r.magic = FERRY_SOCK_REFUSE_MAGIC;
    r.reason = FERRY_SOCK_REFUSE_TOO_LARGE;
    r.seq = seq;
    r.msg_size = msg_size;
    r.capacity = capacity;
    for (li = 0; li < c->px.nlanes; li++) {
        ssize_t n;

        /* Nothing else is ever sent this way: 32 bytes fit the empty send buffer whole. */
        do {
            n = send(c->lanes[li].fd, &r, sizeof(r), MSG_DONTWAIT | MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        told += n == (ssize_t)sizeof(r);
    }
    FERRY_INFO(FERRY_LOG_NET, "socket recv comm #%u: told peer %s on %d of %d streams that "
               "message seq %u (%llu bytes) is larger than its %llu-byte receive",
               c->px.ring.serial, c->px.ring.peer, told, c->px.nlanes, seq,
               (unsigned long long)msg_size, (unsigned long long)capacity);
}

int ferry_sock_refuse_ok(const ferry_sock_refuse_t *r)
{
    return r->magic == FERRY_SOCK_REFUSE_MAGIC && r->reason == FERRY_SOCK_REFUSE_TOO_LARGE &&
           r->msg_size > r->capacity;
}

/* The receiver refused a message: fail the comm, saying which message and both sizes. */
static long ferry_sock_refuse_fail(ferry_sock_comm_t *c, int li)
{
    const ferry_sock_refuse_t *r = &c->lanes[li].refusal;
    ferry_px_req_t *req = ferry_px_ring_match(&c->px.ring, r->seq);
    char desc[160], state[48];

    ferry_px_ring_describe(&c->px.ring, desc, sizeof(desc));
    if (req != NULL)
        snprintf(state, sizeof(state), "send request state %s",
                 ferry_px_req_state_str(atomic_load(&req->state)));
    else
        snprintf(state, sizeof(state), "its send request already ended");
    FERRY_WARN("%s stream %d: the peer refused message seq %u of %llu bytes as larger than its "
               "receive of %llu bytes (%s) and failed that receive with ncclInvalidUsage; "
               "sender and receiver disagree on sizes: check that both ranks post matching "
               "send/recv sizes", desc, li, r->seq, (unsigned long long)r->msg_size,
               (unsigned long long)r->capacity, state);
    ferry_px_ring_fail(&c->px.ring, FERRY_ERR_REMOTE, "the peer refused message seq %u of %llu "
                       "bytes as larger than its receive of %llu bytes", r->seq,
                       (unsigned long long)r->msg_size, (unsigned long long)r->capacity);
    return FERRY_ERR_REMOTE;
}

long ferry_sock_refuse_take(ferry_sock_comm_t *c, int li, size_t n)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    const uint64_t magic = FERRY_SOCK_REFUSE_MAGIC;
    size_t head;

    lane->refusal_got += n;
    /* Anything but the start of a refusal is a peer out of step: stop at its first byte. */
    head = lane->refusal_got < sizeof(magic) ? lane->refusal_got : sizeof(magic);
    if (memcmp(&lane->refusal, &magic, head) != 0)
        return ferry_sock_lane_error(c, li, "peer check", 0, "unexpected bytes from receiver");
    if (lane->refusal_got < sizeof(lane->refusal))
        return 0;
    if (!ferry_sock_refuse_ok(&lane->refusal))
        return ferry_sock_lane_error(c, li, "peer check", 0, "a malformed refusal from receiver");
    return ferry_sock_refuse_fail(c, li);
}
