/*
 * The listener's table of inbound OOB connections in their handshake
 * (ib_accept.c walks them). It grows with the real peers: a job's start
 * connects every rank at once, and a real peer (its hello checked out) is
 * never evicted, since its connector goes on to believe in the connection.
 * Strangers (no checked hello yet) are capped at FERRY_IB_STRANGERS_MAX so
 * junk cannot exhaust memory: at the cap the oldest gets a last read and,
 * if it is still silent past FERRY_IB_STRANGER_GRACE_NS, is evicted (told
 * so with FERRY_IB_OOB_EVICTED: a real connector connects again); a younger
 * one makes new connections wait in the kernel's accept queue.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib/ib_comm.h"

void ferry_ib_pending_drop(ferry_ib_listen_comm_t *lc, int i)
{
    ferry_ib_pending_t *p = &lc->pending[i];

    if (p->comm != NULL)
        ferry_ib_comm_destroy(&p->comm->base); /* Its fd is not the comm's yet. */
    if (p->fd >= 0)
        close(p->fd);
    if (!p->real)
        lc->nstrangers--;
    /* Keep the table oldest first: eviction looks from pending[0]. */
    memmove(p, p + 1, (size_t)(lc->npending - i - 1) * sizeof(*p));
    lc->npending--;
    if (lc->npending == 0) {
        free(lc->pending); /* A crowd's table is not kept for the listener's life. */
        lc->pending = NULL;
        lc->cap_pending = 0;
    }
}

ferry_ib_pending_t *ferry_ib_pending_add(ferry_ib_listen_comm_t *lc, int fd)
{
    ferry_ib_pending_t *p;

    if (lc->npending == lc->cap_pending) {
        int cap = lc->cap_pending > 0 ? lc->cap_pending * 2 : FERRY_IB_STRANGERS_MAX;
        ferry_ib_pending_t *grown = realloc(lc->pending, (size_t)cap * sizeof(*grown));

        if (grown == NULL)
            return NULL;
        lc->pending = grown;
        lc->cap_pending = cap;
    }
    p = &lc->pending[lc->npending++];
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->since_ns = ferry_px_now_ns();
    lc->nstrangers++;
    return p;
}

void ferry_ib_pending_real(ferry_ib_listen_comm_t *lc, ferry_ib_pending_t *p)
{
    if (p->real)
        return;
    p->real = 1;
    lc->nstrangers--;
}

/* The oldest stranger's last read: 1 if its hello is in and checks out now. */
static int ferry_ib_pending_last_read(ferry_ib_listen_comm_t *lc, ferry_ib_pending_t *p)
{
    if (ferry_ib_oob_recv(p->fd, &p->in, sizeof(p->in), &p->got) < 0)
        return 0;
    if (p->got < sizeof(p->in.hello) || ferry_ib_hello_check(&p->in.hello, lc->token) != NULL)
        return 0;
    ferry_ib_pending_real(lc, p);
    return 1;
}

/* A real connector that was merely slow to say hello reads this and connects again. */
static void ferry_ib_pending_evict(int fd)
{
    uint8_t evicted = FERRY_IB_OOB_EVICTED;
    size_t sent = 0;

    (void)ferry_ib_oob_send(fd, &evicted, 1, &sent);
}

int ferry_ib_pending_room(ferry_ib_listen_comm_t *lc, uint64_t now)
{
    int i;

    while (lc->nstrangers >= FERRY_IB_STRANGERS_MAX) {
        ferry_ib_pending_t *p;

        for (i = 0; i < lc->npending && lc->pending[i].real; i++)
            ;
        if (i == lc->npending)
            return 1; /* Not reached: nstrangers counts entries of the table. */
        p = &lc->pending[i];
        if (ferry_ib_pending_last_read(lc, p))
            continue;
        if (now < p->since_ns + FERRY_IB_STRANGER_GRACE_NS)
            return 0;
        lc->evicted++;
        FERRY_WARN_LIMITED_ELSE_INFO("ib listener %s: %d connections without a valid hello; evicting "
                             "the oldest, from %s after %llu ms with %zu of %zu hello bytes "
                             "(%llu evicted since listen); real peers are kept", lc->addr_str,
                             lc->nstrangers, p->peer,
                             (unsigned long long)((now - p->since_ns) / 1000000ULL), p->got,
                             sizeof(p->in.hello), (unsigned long long)lc->evicted);
        ferry_ib_pending_evict(p->fd);
        ferry_ib_pending_drop(lc, i);
    }
    return 1;
}
