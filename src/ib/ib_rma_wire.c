/*
 * The RMA group's out-of-band messages (ib_rma.h): their check word, the
 * blocking sends and receives of connect and regMrSym, and the collective
 * exchange both use (each rank sends to every peer, then reads from every
 * peer: a message of 56 bytes never fills a socket buffer, so no order of
 * ranks deadlocks).
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ib/ib_comm.h"
#include "ib/ib_rma.h"
#include "proxy/clock.h"

/* A collective step waits this long for its slowest peer. */
#define FERRY_IB_RMA_EXCHANGE_MS 60000

_Static_assert((FERRY_IB_RMA_MAGIC & 0xff) != FERRY_IB_OOB_BYE,
               "a message's first byte must differ from the close marker");

static uint64_t ferry_ib_rma_check(const ferry_ib_rma_wire_t *m)
{
    const unsigned char *b = (const unsigned char *)m;
    uint64_t h = 0x9e3779b97f4a7c15ULL;

    /* Every byte before the check word, so that a shifted stream does not pass. */
    for (size_t i = 0; i < offsetof(ferry_ib_rma_wire_t, check); i++) {
        h ^= b[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        h *= 0xbf58476d1ce4e5b9ULL;
    }
    return h;
}

void ferry_ib_rma_seal(ferry_ib_rma_wire_t *w)
{
    w->magic = FERRY_IB_RMA_MAGIC;
    w->check = ferry_ib_rma_check(w);
}

const char *ferry_ib_rma_wire_bad(const ferry_ib_rma_wire_t *m, int kind)
{
    if (m->magic != FERRY_IB_RMA_MAGIC)
        return "wrong magic (not a ferry ib RMA peer, or the stream lost its place)";
    if (m->check != ferry_ib_rma_check(m))
        return "bad check word (corrupted message)";
    if (m->kind != kind)
        return "unexpected message kind (ranks out of step: regMrSym must be called in the "
               "same order on every rank)";
    return NULL;
}

void ferry_ib_rma_describe(const ferry_ib_rma_group_t *g, char *buf, size_t len)
{
    snprintf(buf, len, "RMA group rank %d of %d on %.72s (%.63s)", g->rank, g->nranks,
             g->port != NULL ? g->port->name : "?", g->self);
}

static ferry_status_t ferry_ib_rma_wait(int fd, short events, uint64_t deadline)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    uint64_t now = ferry_px_now_ns();

    if (now >= deadline)
        return FERRY_ERR_REMOTE;
    if (poll(&pfd, 1, (int)((deadline - now) / 1000000ULL) + 1) < 0 && errno != EINTR)
        return FERRY_ERR_IO;
    return FERRY_OK;
}

ferry_status_t ferry_ib_rma_send_all(int fd, const void *buf, size_t len, int ms)
{
    uint64_t deadline = ferry_px_now_ns() + (uint64_t)ms * 1000000ULL;
    size_t done = 0;

    for (;;) {
        int rc = ferry_ib_oob_send(fd, buf, len, &done);
        ferry_status_t st;

        if (rc == 1)
            return FERRY_OK;
        if (rc < 0)
            return FERRY_ERR_REMOTE;
        st = ferry_ib_rma_wait(fd, POLLOUT, deadline);
        if (st != FERRY_OK)
            return st;
    }
}

ferry_status_t ferry_ib_rma_recv_all(int fd, void *buf, size_t len, int ms)
{
    uint64_t deadline = ferry_px_now_ns() + (uint64_t)ms * 1000000ULL;
    size_t got = 0;

    for (;;) {
        int rc = ferry_ib_oob_recv(fd, buf, len, &got);
        ferry_status_t st;

        if (rc == 1)
            return FERRY_OK;
        if (rc < 0)
            return FERRY_ERR_REMOTE;
        st = ferry_ib_rma_wait(fd, POLLIN, deadline);
        if (st != FERRY_OK)
            return st;
    }
}

ferry_status_t ferry_ib_rma_exchange(ferry_ib_rma_group_t *g, const char *step,
                                     ferry_ib_rma_wire_t *out, ferry_ib_rma_wire_t *in,
                                     int kind)
{
    const char *why = NULL;
    char who[256];

    ferry_ib_rma_describe(g, who, sizeof(who));
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];

        if (r == g->rank)
            continue;
        ferry_ib_rma_seal(&out[r]);
        if (p->dead || p->bye ||
            ferry_ib_rma_send_all(p->fd, &out[r], sizeof(out[r]), FERRY_IB_RMA_EXCHANGE_MS) !=
                FERRY_OK) {
            FERRY_WARN("%s: %s: sending to rank %d (%s) failed: %s; check that rank %d is "
                       "alive and makes the same calls", step, who, r, p->addr,
                       p->dead || p->bye ? "it failed or left earlier" : "connection lost",
                       r);
            return FERRY_ERR_REMOTE;
        }
    }
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];

        if (r == g->rank)
            continue;
        if (ferry_ib_rma_recv_all(p->fd, &in[r], sizeof(in[r]), FERRY_IB_RMA_EXCHANGE_MS) !=
            FERRY_OK)
            why = "no answer within the time limit, or the connection was lost";
        else
            why = ferry_ib_rma_wire_bad(&in[r], kind);
        if (why != NULL) {
            FERRY_WARN("%s: %s: from rank %d (%s): %s; every rank must make the same "
                       "collective calls in the same order (waited up to %d ms)", step, who, r,
                       p->addr, why, FERRY_IB_RMA_EXCHANGE_MS);
            return FERRY_ERR_REMOTE;
        }
    }
    return FERRY_OK;
}
