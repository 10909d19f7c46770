/*
 * The RMA data path over one TCP connection per peer (sock_rma.h), moved by
 * whoever calls test() or progress(): each call sends and reads a bounded
 * number of frames and payload bytes per peer, never blocks, and applies
 * what arrived in arrival order. A target checks every operation against
 * its own regions before a byte is written: an operation outside them is
 * read and dropped, answered with an error, and WARNed (rate-limited: a
 * peer can repeat it).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock.h"
#include "socket/sock_rma.h"

void ferry_sock_rma_describe(const ferry_sock_rma_group_t *g, char *buf, size_t len)
{
    snprintf(buf, len, "socket RMA group %p rank %d of %d (comm 0x%llx)", (const void *)g,
             g->rank, g->nranks, (unsigned long long)g->comm_id);
}

/*
 * Every operation still in flight to p ends with status: its frame may have
 * left, so the ring (which waits for what moved) would wait for an answer
 * that cannot come.
 */
static void ferry_sock_rma_fail_inflight(ferry_sock_rma_peer_t *p, ferry_status_t status)
{
    for (int i = 0; i < FERRY_MAX_REQUESTS; i++) {
        ferry_px_req_t *req = &p->ring.reqs[i];
        int state = atomic_load_explicit(&req->state, memory_order_acquire);

        if (state == FERRY_PX_REQ_POSTED || state == FERRY_PX_REQ_ACTIVE)
            ferry_px_req_fail(req, status);
    }
}

void ferry_sock_rma_peer_fail(ferry_sock_rma_peer_t *p, const char *fmt, ...)
{
    ferry_sock_rma_group_t *g = p->group;
    char why[256], who[160];
    va_list ap;

    if (p->dead)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    p->dead = 1;
    atomic_store(&g->failed, 1);
    ferry_sock_rma_describe(g, who, sizeof(who));
    FERRY_WARN("RMA: %s: the connection to rank %d (%s) failed: %s; its %u queued frame(s) and "
               "every pending operation towards it end with an error; check that rank %d is "
               "alive (it may have crashed or been killed)", who, p->rank, p->addr, why,
               p->tx_tail - p->tx_head, p->rank);
    ferry_px_ring_fail(&p->ring, FERRY_ERR_REMOTE, "connection to rank %d (%s) failed: %s",
                       p->rank, p->addr, why);
    ferry_sock_rma_fail_inflight(p, FERRY_ERR_REMOTE);
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
}

ferry_status_t ferry_sock_rma_queue(ferry_sock_rma_peer_t *p, const ferry_sock_rma_frame_t *f,
                                    const char *payload, size_t len, ferry_px_req_t *req)
{
    ferry_sock_rma_tx_t *t;

    if (p->tx_tail - p->tx_head >= FERRY_SOCK_RMA_TXQ) {
        FERRY_WARN("RMA: the frame queue to rank %d (%s) is full (%d frames): a ferry bug, "
                   "the queue is sized for every request and answer in flight", p->rank,
                   p->addr, FERRY_SOCK_RMA_TXQ);
        return FERRY_ERR_INTERNAL;
    }
    t = &p->tx[p->tx_tail % FERRY_SOCK_RMA_TXQ];
    t->frame = *f;
    t->payload = payload;
    t->len = len;
    t->req = req;
    t->owned = 0;
    p->tx_tail++;
    return FERRY_OK;
}

/* An answer (ACK or REPLY) to the peer's operation seq. */
static void ferry_sock_rma_answer(ferry_sock_rma_peer_t *p, int op, uint32_t seq,
                                  ferry_status_t status, const char *payload, size_t len)
{
    ferry_sock_rma_frame_t a;

    memset(&a, 0, sizeof(a));
    a.op = (uint8_t)op;
    a.seq = seq;
    a.status = (int32_t)status;
    a.size = len;
    ferry_sock_rma_seal(&a);
    if (ferry_sock_rma_queue(p, &a, payload, len, NULL) != FERRY_OK)
        ferry_sock_rma_peer_fail(p, "no room to answer its %s seq %u", ferry_sock_rma_op_str(op),
                                 seq);
}

/* NULL if [off, off + size) lies in our region reg, else why not (into buf). */
static const char *ferry_sock_rma_range_bad(ferry_sock_rma_group_t *g, uint32_t reg,
                                            uint64_t off, uint64_t size, char *buf, size_t len)
{
    ferry_sock_rma_mr_t *mr = ferry_sock_rma_region(g, reg);

    if (mr == NULL) {
        snprintf(buf, len, "region %u is not registered here (never, or deregistered)", reg);
        return buf;
    }
    if (off > mr->size || size > mr->size - off) {
        snprintf(buf, len, "offset %llu + size %llu is beyond region %u's %zu bytes",
                 (unsigned long long)off, (unsigned long long)size, reg, mr->size);
        return buf;
    }
    return NULL;
}

/* Refusal of the peer's operation f: WARN (rate-limited) and the error for its answer. */
static ferry_status_t ferry_sock_rma_refuse(ferry_sock_rma_peer_t *p,
                                            const ferry_sock_rma_frame_t *f, const char *why)
{
    char who[160];

    ferry_sock_rma_describe(p->group, who, sizeof(who));
    FERRY_WARN_LIMITED("RMA: %s: refused %s seq %u from rank %d (%s): %s (region %u, offset "
                       "%llu, size %llu); nothing was written, the initiator's request ends "
                       "with an error; the initiator must keep offsets within the size this "
                       "rank registered", who, ferry_sock_rma_op_str(f->op), f->seq, p->rank,
                       p->addr, why, f->reg, (unsigned long long)f->off,
                       (unsigned long long)f->size);
    return FERRY_ERR_USAGE;
}

/* A PUT's header arrived: check it, and aim its payload at the region or the bin. */
static void ferry_sock_rma_put_begin(ferry_sock_rma_peer_t *p)
{
    ferry_sock_rma_group_t *g = p->group;
    const ferry_sock_rma_frame_t *f = &p->rx;
    const char *why = NULL;
    char buf[160];

    if (f->size > 0)
        why = ferry_sock_rma_range_bad(g, f->reg, f->off, f->size, buf, sizeof(buf));
    if (why == NULL && f->sig_op != FERRY_RMA_SIGNAL_NONE) {
        char sig[128];

        why = ferry_sock_rma_range_bad(g, f->sig_reg, f->sig_off, 8, sig, sizeof(sig));
        if (why == NULL && f->sig_off % 8 != 0)
            why = "its offset is not a multiple of 8";
        if (why != NULL) {
            snprintf(buf, sizeof(buf), "signal word: %s", why);
            why = buf;
        }
    }
    p->rx_status = why == NULL ? FERRY_OK : ferry_sock_rma_refuse(p, f, why);
    p->rx_dst = why == NULL && f->size > 0
                    ? ferry_sock_rma_host(ferry_sock_rma_region(g, f->reg), f->off)
                    : NULL;
    p->rx_got_body = 0;
    p->rx_body = f->size > 0;
}

/* A PUT's payload is in: its signal, then the answer. */
static void ferry_sock_rma_put_end(ferry_sock_rma_peer_t *p)
{
    ferry_sock_rma_group_t *g = p->group;
    const ferry_sock_rma_frame_t *f = &p->rx;
    ferry_sock_rma_mr_t *mr;

    /* Looked up again: the caller may have deregistered it while the payload came in. */
    if (p->rx_status == FERRY_OK && f->size > 0) {
        mr = ferry_sock_rma_region(g, f->reg);
        p->rx_status = mr == NULL ? ferry_sock_rma_refuse(p, f, "its region was deregistered "
                                                              "while the payload arrived")
                                  : ferry_sock_rma_gpu_copy(g, mr, f->off, f->size, 1);
    }
    if (p->rx_status == FERRY_OK && f->sig_op != FERRY_RMA_SIGNAL_NONE) {
        mr = ferry_sock_rma_region(g, f->sig_reg);
        p->rx_status = mr == NULL
                           ? ferry_sock_rma_refuse(p, f, "its signal region was deregistered")
                           : ferry_sock_rma_signal(g, mr, f->sig_off,
                                                   f->sig_op == FERRY_RMA_SIGNAL_INC
                                                       ? 1
                                                       : f->sig_value);
    }
    ferry_sock_rma_answer(p, FERRY_SOCK_RMA_ACK, f->seq, (ferry_status_t)p->rx_status, NULL, 0);
}

/* An answer names one of our requests to p; NULL (and p failed) if it names none. */
static ferry_px_req_t *ferry_sock_rma_answered(ferry_sock_rma_peer_t *p)
{
    ferry_px_req_t *req = ferry_px_ring_match(&p->ring, p->rx.seq);

    if (req == NULL)
        ferry_sock_rma_peer_fail(p, "its %s names seq %u, which is no operation in flight "
                                 "(a confused or foreign peer)", ferry_sock_rma_op_str(p->rx.op),
                                 p->rx.seq);
    return req;
}

/* Our operation req to p came back with an error. */
static void ferry_sock_rma_req_refused(ferry_sock_rma_peer_t *p, ferry_px_req_t *req,
                                       ferry_status_t status)
{
    const ferry_sock_rma_frame_t *f = &p->sent[ferry_px_ring_slot_index(&p->ring, req)];
    char who[160], words[256];

    ferry_sock_rma_describe(p->group, who, sizeof(who));
    ferry_px_ring_req_words(&p->ring, req, words, sizeof(words));
    FERRY_WARN_LIMITED("RMA: %s: %s to rank %d (%s) was refused by the target (%s): region %u, "
                       "offset %llu, size %llu%s; %s; nothing was written there; keep offset + "
                       "size within the size rank %d registered (see its WARN)", who,
                       ferry_sock_rma_op_str(f->op), p->rank, p->addr, ferry_status_str(status),
                       f->reg, (unsigned long long)f->off, (unsigned long long)f->size,
                       f->sig_op != FERRY_RMA_SIGNAL_NONE ? " with a signal" : "", words,
                       p->rank);
    ferry_px_req_fail(req, status);
}

/* A whole header from p is in rx: act on it. */
static void ferry_sock_rma_dispatch(ferry_sock_rma_peer_t *p)
{
    ferry_sock_rma_group_t *g = p->group;
    const ferry_sock_rma_frame_t *f = &p->rx;
    const char *bad = ferry_sock_rma_frame_bad(f);
    ferry_px_req_t *req;
    char buf[160];

    if (bad != NULL) {
        ferry_sock_rma_peer_fail(p, "it sent a frame that is not one: %s", bad);
        return;
    }
    switch (f->op) {
    case FERRY_SOCK_RMA_REG:
        if (f->reg != p->nregs || f->reg >= FERRY_SOCK_RMA_MAX_REGS) {
            ferry_sock_rma_peer_fail(p, "it registered region %u while %u came next here: "
                                     "the ranks register in different orders", f->reg,
                                     p->nregs);
            return;
        }
        {
            uint64_t *e = ferry_rma_regs_slot(&p->reg_size, p->nregs, sizeof(*e));

            if (e == NULL) {
                ferry_sock_rma_peer_fail(p, "there is no memory for the record of its region %u",
                                         f->reg);
                return;
            }
            *e = f->size;
            p->nregs++;
        }
        return;
    case FERRY_SOCK_RMA_PUT:
        ferry_sock_rma_put_begin(p);
        if (!p->rx_body)
            ferry_sock_rma_put_end(p);
        return;
    case FERRY_SOCK_RMA_GET: {
        const char *why = ferry_sock_rma_range_bad(g, f->reg, f->off, f->size, buf, sizeof(buf));
        ferry_sock_rma_mr_t *mr = ferry_sock_rma_region(g, f->reg);
        ferry_status_t st = why != NULL ? ferry_sock_rma_refuse(p, f, why)
                                        : ferry_sock_rma_gpu_copy(g, mr, f->off, f->size, 0);

        /* A GPU region's bytes were just copied to its shadow; the answer goes from there. */
        if (st != FERRY_OK)
            ferry_sock_rma_answer(p, FERRY_SOCK_RMA_REPLY, f->seq, st, NULL, 0);
        else
            ferry_sock_rma_answer(p, FERRY_SOCK_RMA_REPLY, f->seq, FERRY_OK,
                                  ferry_sock_rma_host(mr, f->off), f->size);
        return;
    }
    case FERRY_SOCK_RMA_FLUSH:
        /* Every earlier put of this peer arrived before this frame and is applied. */
        ferry_sock_rma_answer(p, FERRY_SOCK_RMA_ACK, f->seq, FERRY_OK, NULL, 0);
        return;
    case FERRY_SOCK_RMA_ACK:
        req = ferry_sock_rma_answered(p);
        if (req == NULL)
            return;
        if (f->status != FERRY_OK)
            ferry_sock_rma_req_refused(p, req, (ferry_status_t)f->status);
        else
            ferry_px_req_part_done(req); /* Moved when its frame left. */
        return;
    case FERRY_SOCK_RMA_REPLY:
        req = ferry_sock_rma_answered(p);
        if (req == NULL)
            return;
        if (f->status != FERRY_OK) {
            ferry_sock_rma_req_refused(p, req, (ferry_status_t)f->status);
            return;
        }
        if (f->size != req->sub[0].capacity) {
            ferry_sock_rma_peer_fail(p, "its answer to get seq %u carries %llu bytes, not the "
                                     "%zu asked for", f->seq, (unsigned long long)f->size,
                                     req->sub[0].capacity);
            return;
        }
        p->rx_req = req;
        p->rx_dropped = 0;
        p->rx_dst = p->land[ferry_px_ring_slot_index(&p->ring, req)] != NULL ? req->sub[0].buf
                                                                           : NULL;
        p->rx_got_body = 0;
        p->rx_body = f->size > 0;
        if (!p->rx_body)
            ferry_px_req_part_done(req);
        return;
    case FERRY_SOCK_RMA_BYE:
        /* Orderly: no error for queryLastError, but nothing more can go to it. */
        p->bye = 1;
        ferry_px_ring_fail(&p->ring, FERRY_ERR_REMOTE, "rank %d (%s) closed its RMA group",
                           p->rank, p->addr);
        ferry_sock_rma_fail_inflight(p, FERRY_ERR_REMOTE);
        return;
    default:
        ferry_sock_rma_peer_fail(p, "it sent %s after the connection was set up",
                                 ferry_sock_rma_op_str(f->op));
        return;
    }
}

/* The payload of rx is complete. */
static void ferry_sock_rma_body_end(ferry_sock_rma_peer_t *p)
{
    p->rx_body = 0;
    if (p->rx.op == FERRY_SOCK_RMA_PUT) {
        ferry_sock_rma_put_end(p);
    } else {
        ferry_px_req_t *req = p->rx_req;
        uint32_t slot = ferry_px_ring_slot_index(&p->ring, req);
        int gone = p->rx_dropped || p->land[slot] == NULL; /* sock_rma_forget.c */
        ferry_status_t st = gone ? FERRY_ERR_USAGE
                                 : ferry_sock_rma_gpu_copy(p->group, p->land[slot],
                                                           p->land_off[slot], p->rx.size, 1);

        if (gone) {
            char who[160];

            ferry_sock_rma_describe(p->group, who, sizeof(who));
            FERRY_WARN_LIMITED("RMA: %s: get seq %u from rank %d (%s), request %s with all "
                               "%llu bytes of its answer read: its local region was "
                               "deregistered before the answer was in; the bytes are dropped "
                               "and the get fails; deregister a region only after test() "
                               "reported every get into it done", who, p->rx.seq, p->rank,
                               p->addr,
                               ferry_px_req_state_str(atomic_load(&req->state)),
                               (unsigned long long)p->rx.size);
        }
        p->rx_dropped = 0;
        p->rx_req = NULL;
        ferry_px_req_progress(req, p->rx.size);
        if (st != FERRY_OK)
            ferry_px_req_fail(req, st);
        else
            ferry_px_req_part_done(req);
    }
}

/* Read errors and EOF: p failed, unless it said BYE first. */
static long ferry_sock_rma_read_gone(ferry_sock_rma_peer_t *p, ssize_t n)
{
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (p->bye)
        return 0;
    ferry_sock_rma_peer_fail(p, "%s while reading %s", n == 0 ? "it closed the connection"
                                                                : strerror(errno),
                             p->rx_body ? "a payload" : "a frame header");
    return -1;
}

static long ferry_sock_rma_rx_step(ferry_sock_rma_peer_t *p)
{
    size_t bytes = 0;
    long work = 0;

    for (int frames = 0; frames < FERRY_SOCK_RMA_STEP_FRAMES && !p->dead && !p->bye;) {
        ssize_t n;

        if (!p->rx_body) {
            n = recv(p->fd, (char *)&p->rx + p->rx_got, sizeof(p->rx) - p->rx_got, MSG_DONTWAIT);
            if (n <= 0)
                return ferry_sock_rma_read_gone(p, n) < 0 ? -1 : work;
            p->rx_got += (size_t)n;
            work++;
            if (p->rx_got < sizeof(p->rx))
                continue;
            p->rx_got = 0;
            frames++;
            ferry_sock_rma_dispatch(p);
            continue;
        }
        if (bytes >= FERRY_SOCK_RMA_STEP_BYTES)
            break;
        {
            size_t want = p->rx.size - p->rx_got_body;
            size_t room = FERRY_SOCK_RMA_STEP_BYTES - bytes;
            char *dst = p->rx_dst != NULL ? p->rx_dst + p->rx_got_body : p->group->scratch;

            if (want > room)
                want = room;
            if (p->rx_dst == NULL && want > sizeof(p->group->scratch))
                want = sizeof(p->group->scratch);
            n = recv(p->fd, dst, want, MSG_DONTWAIT);
        }
        if (n <= 0)
            return ferry_sock_rma_read_gone(p, n) < 0 ? -1 : work;
        p->rx_got_body += (size_t)n;
        bytes += (size_t)n;
        work++;
        if (p->rx_got_body == p->rx.size)
            ferry_sock_rma_body_end(p);
    }
    return p->dead ? -1 : work;
}

static long ferry_sock_rma_tx_step(ferry_sock_rma_peer_t *p)
{
    size_t bytes = 0;
    long work = 0;

    for (int frames = 0; frames < FERRY_SOCK_RMA_STEP_FRAMES && p->tx_head != p->tx_tail &&
                         bytes < FERRY_SOCK_RMA_STEP_BYTES && !p->dead;) {
        ferry_sock_rma_tx_t *t = &p->tx[p->tx_head % FERRY_SOCK_RMA_TXQ];
        size_t hdr = sizeof(t->frame), total = hdr + t->len;
        size_t room = FERRY_SOCK_RMA_STEP_BYTES - bytes;
        struct iovec iov[2];
        struct msghdr msg;
        int niov = 0;
        ssize_t n;

        if (p->tx_sent < hdr) {
            iov[niov].iov_base = (char *)&t->frame + p->tx_sent;
            iov[niov++].iov_len = hdr - p->tx_sent;
            if (t->len > 0) {
                iov[niov].iov_base = (void *)t->payload;
                iov[niov++].iov_len = t->len < room ? t->len : room;
            }
        } else {
            size_t left = total - p->tx_sent;

            iov[niov].iov_base = (void *)(t->payload + (p->tx_sent - hdr));
            iov[niov++].iov_len = left < room ? left : room;
        }
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)niov;
        n = sendmsg(p->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            ferry_sock_rma_peer_fail(p, "%s while sending %s seq %u", strerror(errno),
                                     ferry_sock_rma_op_str(t->frame.op), t->frame.seq);
            return -1;
        }
        p->tx_sent += (size_t)n;
        bytes += (size_t)n;
        work++;
        if (p->tx_sent < total)
            continue;
        if (t->req != NULL) {
            ferry_px_req_progress(t->req, t->len);
            ferry_px_req_part_moved(t->req);
        }
        ferry_sock_rma_tx_release(t);
        p->tx_head++;
        p->tx_sent = 0;
        frames++;
    }
    return work;
}

long ferry_sock_rma_progress_locked(ferry_sock_rma_group_t *g)
{
    long work = 0;
    int failed = 0, n = 0;

    /*
     * Sends go out wherever frames wait; reads only where poll() says there
     * is something, so an idle call costs one system call, not one per peer.
     */
    for (int r = 0; r < g->nranks; r++) {
        ferry_sock_rma_peer_t *p = &g->peers[r];
        long w;

        if (r == g->rank || p->fd < 0 || p->dead)
            continue;
        if (!p->bye && p->tx_head != p->tx_tail) {
            w = ferry_sock_rma_tx_step(p);
            if (w < 0)
                failed = 1;
            else
                work += w;
        }
        if (p->dead || p->bye)
            continue;
        g->pfds[n].fd = p->fd;
        g->pfds[n].events = POLLIN;
        g->pfds[n].revents = 0;
        g->pfd_rank[n++] = r;
    }
    if (n > 0 && poll(g->pfds, (nfds_t)n, 0) > 0) {
        for (int i = 0; i < n; i++) {
            ferry_sock_rma_peer_t *p = &g->peers[g->pfd_rank[i]];
            long w;

            if (g->pfds[i].revents == 0 || p->dead)
                continue;
            w = ferry_sock_rma_rx_step(p);
            /* What it asked for goes back now, not on the next call. */
            if (w > 0 && !p->dead && !p->bye && p->tx_head != p->tx_tail)
                w += ferry_sock_rma_tx_step(p) > 0;
            if (w < 0 || p->dead)
                failed = 1;
            else
                work += w;
        }
    }
    return failed && work == 0 ? -1 : work;
}
