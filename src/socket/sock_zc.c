/*
 * MSG_ZEROCOPY for large chunks (NCCL_FERRY_ZEROCOPY=1). The kernel then
 * sends from NCCL's buffer instead of copying it, so a chunk is not complete
 * when sendmsg returns: it is complete when the kernel says, on the socket's
 * error queue, that it released the pages (each zerocopy sendmsg gets the
 * next 32-bit id; a release names a range of ids). Until then the chunk
 * counts as moved but not done, and NCCL does not get the buffer back.
 *
 * Automatic fallback, per stream: no SO_ZEROCOPY (old kernel, not TCP) ->
 * plain sends from the start; ENOBUFS (the pinned-page budget, optmem_max,
 * is spent) -> that call goes out copied; a release flagged "copied" (the
 * kernel had to copy anyway: loopback, veth, a NIC without scatter-gather)
 * -> the stream stops asking, since zerocopy then only adds work.
 */
#include <errno.h>
#include <stdatomic.h>
#include <time.h> /* linux/errqueue.h uses struct timespec. */
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "socket/sock.h"

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif

/* id a comes before id b, modulo 2^32. */
#define FERRY_SOCK_ZC_BEFORE(_a, _b) ((int32_t)((_a) - (_b)) < 0)

void ferry_sock_zc_setup(ferry_sock_comm_t *c)
{
    int i, one = 1;

    if (c->zc_min == 0 || c->px.ring.kind != FERRY_PX_SEND)
        return;
    for (i = 0; i < c->px.nlanes; i++) {
        if (setsockopt(c->lanes[i].fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0) {
            FERRY_INFO(FERRY_LOG_NET, "socket send comm #%u peer %s stream %d: SO_ZEROCOPY "
                       "not available (%s); NCCL_FERRY_ZEROCOPY=1 falls back to copying sends",
                       c->px.ring.serial, c->px.ring.peer, i, strerror(errno));
            continue;
        }
        c->lanes[i].zc_on = 1;
    }
}

void ferry_sock_zc_prepare(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    ferry_sock_chunk_hdr_t *slot;

    lane->hdr_p = &lane->hdr;
    if (!lane->zc_on || lane->claim.len < c->zc_min ||
        lane->zc_tail - lane->zc_head == FERRY_SOCK_ZC_WAIT)
        return;
    /*
     * The kernel sends the header from our memory too, after sendmsg returns:
     * it goes out from the slot this chunk will wait in, untouched until the
     * kernel releases the chunk (the next chunk reuses the slot only if this
     * one went out copied and never waited).
     */
    slot = &lane->zc_hdr[lane->zc_tail % FERRY_SOCK_ZC_WAIT];
    *slot = lane->hdr;
    lane->hdr_p = slot;
}

int ferry_sock_zc_flags(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];

    return lane->zc_on && lane->hdr_p != &lane->hdr ? MSG_ZEROCOPY : 0;
}

void ferry_sock_zc_sent(ferry_sock_comm_t *c, int li, int flags)
{
    ferry_sock_lane_t *lane = &c->lanes[li];

    if (!(flags & MSG_ZEROCOPY))
        return;
    lane->zc_chunk = 1;
    lane->zc_last = lane->zc_next++;
}

void ferry_sock_zc_chunk_queued(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    ferry_px_req_t *req = lane->claim.req;

    if (!lane->zc_chunk) {
        ferry_sock_stream_chunk_finish(&c->px, li, req);
        return;
    }
    lane->zc_chunk = 0;
    ferry_px_req_part_moved(req);
    lane->zc_wait[lane->zc_tail % FERRY_SOCK_ZC_WAIT].req = req;
    lane->zc_wait[lane->zc_tail % FERRY_SOCK_ZC_WAIT].last = lane->zc_last;
    lane->zc_tail++;
}

/* Drain the error queue; returns -1 on a hard error (errno), else releases read. */
static int ferry_sock_zc_read_releases(ferry_sock_comm_t *c, int li)
{
    ferry_sock_lane_t *lane = &c->lanes[li];
    int got = 0;

    for (;;) {
        char control[128];
        struct msghdr msg;
        struct cmsghdr *cm;

        memset(&msg, 0, sizeof(msg));
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        if (recvmsg(lane->fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? got : -1;
        for (cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
            struct sock_extended_err ee;

            if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
                  (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)))
                continue;
            memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
            if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY || ee.ee_errno != 0)
                continue;
            /* Releases cover [ee_info, ee_data]; TCP reports them in order. */
            if (!FERRY_SOCK_ZC_BEFORE(ee.ee_data + 1, lane->zc_acked))
                lane->zc_acked = ee.ee_data + 1;
            got++;
            if ((ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) && lane->zc_on && !c->zc_keep) {
                lane->zc_on = 0;
                FERRY_INFO(FERRY_LOG_NET, "socket send comm #%u peer %s stream %d: the kernel "
                           "copied zerocopy sends anyway (loopback, veth or a NIC without "
                           "scatter-gather); this stream sends with copies from now on",
                           c->px.ring.serial, c->px.ring.peer, li);
            }
        }
    }
}

long ferry_sock_zc_retire(ferry_sock_stream_t *px, int li)
{
    ferry_sock_comm_t *c = (ferry_sock_comm_t *)px;
    ferry_sock_lane_t *lane = &c->lanes[li];
    long n = 0;
    int failed;

    /* Every sweep of every lane calls this: nothing waiting is the common case. */
    if (lane->zc_head == lane->zc_tail)
        return 0;
    failed = atomic_load_explicit(&px->ring.failed, memory_order_relaxed) != 0;
    /*
     * On a failed comm the stream is dead and its queued data purged: the
     * kernel no longer sends from these buffers, give them back.
     */
    if (!failed && ferry_sock_zc_read_releases(c, li) < 0) {
        /* The stream is broken; its send path reports that with a WARN. */
        FERRY_INFO(FERRY_LOG_NET, "socket send comm #%u peer %s stream %d: reading zerocopy "
                   "releases failed (%s) with %u chunk(s) waiting; giving their buffers back",
                   c->px.ring.serial, c->px.ring.peer, li, strerror(errno),
                   lane->zc_tail - lane->zc_head);
        failed = 1;
    }
    while (lane->zc_head != lane->zc_tail) {
        uint32_t last = lane->zc_wait[lane->zc_head % FERRY_SOCK_ZC_WAIT].last;

        if (!failed && !FERRY_SOCK_ZC_BEFORE(last, lane->zc_acked))
            break;
        ferry_sock_stream_chunk_retire(px, li, lane->zc_wait[lane->zc_head % FERRY_SOCK_ZC_WAIT].req);
        lane->zc_head++;
        n++;
    }
    return n;
}
