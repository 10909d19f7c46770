/*
 * A region leaves its group (deregMrSym): nothing the group still does may
 * touch its memory afterwards, since the caller may free it at once. Three
 * things can point into it: the payload of a peer's put being read into it
 * (the rest is read and dropped, and the put is refused), a get of ours
 * whose answer would land in it (the get fails), and our own frames still
 * queued with a payload from it (a put's source, an answer to a peer's get):
 * a frame that started leaving must finish or the stream loses its framing,
 * so what is left of such payloads is copied first.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "socket/sock_rma.h"

static int ferry_sock_rma_points_into(const char *p, const char *lo, const char *hi)
{
    return p != NULL && p >= lo && p < hi;
}

static void ferry_sock_rma_forget_rx(ferry_sock_rma_peer_t *p, const ferry_sock_rma_mr_t *mr,
                                     const char *lo, const char *hi)
{
    char who[160];

    if (!p->rx_body || !ferry_sock_rma_points_into(p->rx_dst, lo, hi))
        return;
    p->rx_dst = NULL; /* The rest of the payload is read and dropped. */
    ferry_sock_rma_describe(p->group, who, sizeof(who));
    if (p->rx.op == FERRY_SOCK_RMA_PUT) {
        p->rx_status = FERRY_ERR_USAGE;
        FERRY_WARN_LIMITED("RMA: %s: region %u was deregistered while the payload of rank %d's "
                           "(%s) put seq %u was arriving (%zu of %llu bytes in); the rest is "
                           "dropped and the put is refused; deregister a region only once "
                           "every rank's operations on it are done", who, mr->index, p->rank,
                           p->addr, p->rx.seq, p->rx_got_body,
                           (unsigned long long)p->rx.size);
    } else {
        p->rx_dropped = 1; /* Our get fails when its answer is in (sock_rma_progress.c). */
    }
}

/* Copy what is left to send of a queued payload that lies in the region. */
static int ferry_sock_rma_forget_tx(ferry_sock_rma_peer_t *p, const char *lo, const char *hi)
{
    for (uint32_t i = p->tx_head; i != p->tx_tail; i++) {
        ferry_sock_rma_tx_t *t = &p->tx[i % FERRY_SOCK_RMA_TXQ];
        char *copy;

        if (t->len == 0 || t->owned || !ferry_sock_rma_points_into(t->payload, lo, hi))
            continue;
        copy = malloc(t->len);
        if (copy == NULL)
            return -1;
        memcpy(copy, t->payload, t->len);
        t->payload = copy;
        t->owned = 1;
    }
    return 0;
}

void ferry_sock_rma_forget_region(ferry_sock_rma_group_t *g, const ferry_sock_rma_mr_t *mr)
{
    const char *lo = ferry_sock_rma_host(mr, 0), *hi = lo + mr->size;

    for (int r = 0; r < g->nranks; r++) {
        ferry_sock_rma_peer_t *p = &g->peers[r];

        if (r == g->rank)
            continue;
        ferry_sock_rma_forget_rx(p, mr, lo, hi);
        for (int s = 0; s < FERRY_MAX_REQUESTS; s++)
            if (p->land[s] == mr)
                p->land[s] = NULL;
        if (!p->dead && ferry_sock_rma_forget_tx(p, lo, hi) != 0)
            ferry_sock_rma_peer_fail(p, "out of memory keeping the frames queued from region "
                                     "%u as it was deregistered", mr->index);
    }
}

void ferry_sock_rma_tx_release(ferry_sock_rma_tx_t *t)
{
    if (t->owned)
        free((void *)t->payload);
    t->owned = 0;
    t->payload = NULL;
}
