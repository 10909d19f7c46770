/*
 * isend's reading of the receiver's clear-to-send: the entries the peer
 * RDMA-writes into our CTS FIFO are input from another process, checked on
 * every read. The first isend of a receive copies its n entries once they
 * are all in (sc->cts_seen) and checks the copy (buffer count, each entry's
 * count and sequence); every later isend of the same grouped receive
 * matches against that copy and finds the FIFO unchanged, or the comm
 * fails. A receiver never rewrites a receive the sender has begun to match
 * (it cannot reuse the slot before every buffer of it had its isend), so a
 * change is a broken or foreign peer, and trusting it would post chains of
 * buffers that have no request.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_comm.h"

static inline uint64_t ferry_ib_cts_idx(const ferry_ib_cts_t *e)
{
    return __atomic_load_n(&e->idx, __ATOMIC_ACQUIRE);
}

int ferry_ib_cts_ready(const ferry_ib_cts_t *e, uint64_t want, int *nreqs_p)
{
    /* Memory the peer's NIC writes while isend polls it: atomic loads only, as for idx. */
    uint32_t n = __atomic_load_n(&e[0].nreqs, __ATOMIC_RELAXED);
    uint32_t i;

    *nreqs_p = (int)n;
    if (n < 1 || n > FERRY_IB_MAX_RECVS)
        return -1;
    for (i = 1; i < n; i++)
        if (ferry_ib_cts_idx(&e[i]) != want)
            return 0;
    return 1;
}

/* What is wrong with a copied receive of n entries for message want - 1, into why; 0 if nothing. */
int ferry_ib_cts_whole_why(const ferry_ib_cts_t *e, int n, uint64_t want, char *why,
                           size_t len)
{
    int i;

    for (i = 0; i < n; i++) {
        if (e[i].idx != want) {
            snprintf(why, len, "buffer %d idx %" PRIu64 " where %" PRIu64 " was expected", i,
                     e[i].idx, want);
            return 1;
        }
        if (e[i].nreqs != (uint32_t)n) {
            snprintf(why, len, "buffer %d nreqs %" PRIu32 " where buffer 0 says %d", i,
                     e[i].nreqs, n);
            return 1;
        }
    }
    return 0;
}

/* One "buffer i field old -> new" per difference, the first few in words. */
static void ferry_ib_cts_diff_add(char *buf, size_t len, size_t *off, int *count, int i,
                                  const char *field, int hex, uint64_t was, uint64_t now)
{
    int w;

    if (was == now)
        return;
    if (++*count > 4 || *off >= len)
        return;
    w = snprintf(buf + *off, len - *off,
                 hex ? "%sbuffer %d %s 0x%" PRIx64 " -> 0x%" PRIx64
                     : "%sbuffer %d %s %" PRIu64 " -> %" PRIu64,
                 *count > 1 ? ", " : "", i, field, was, now);
    if (w > 0)
        *off += (size_t)w;
}

int ferry_ib_cts_diff(const ferry_ib_cts_t *was, const ferry_ib_cts_t *now, int n, char *buf,
                      size_t len)
{
    static const char *const rkey_names[4] = { "rkey[0]", "rkey[1]", "rkey[2]", "rkey[3]" };
    size_t off = 0;
    int count = 0, i, k;

    buf[0] = '\0';
    for (i = 0; i < n; i++) {
        ferry_ib_cts_diff_add(buf, len, &off, &count, i, "nreqs", 0, was[i].nreqs, now[i].nreqs);
        ferry_ib_cts_diff_add(buf, len, &off, &count, i, "idx", 0, was[i].idx, now[i].idx);
        ferry_ib_cts_diff_add(buf, len, &off, &count, i, "tag", 0, (uint64_t)(int64_t)was[i].tag,
                              (uint64_t)(int64_t)now[i].tag);
        ferry_ib_cts_diff_add(buf, len, &off, &count, i, "size", 0, was[i].size, now[i].size);
        ferry_ib_cts_diff_add(buf, len, &off, &count, i, "addr", 1, was[i].addr, now[i].addr);
        for (k = 0; k < 4; k++)
            ferry_ib_cts_diff_add(buf, len, &off, &count, i, rkey_names[k], 1, was[i].rkeys[k],
                                  now[i].rkeys[k]);
    }
    if (count > 4 && off < len)
        snprintf(buf + off, len - off, " and %d more", count - 4);
    return count;
}

/* A protocol error of the peer: one WARN (peer, comm, message, slot, what), the comm fails. */
static long ferry_ib_cts_bad(ferry_ib_send_comm_t *sc, const char *what, const char *why)
{
    uint32_t s = (uint32_t)(sc->fifo_head % FERRY_IB_FIFO_SLOTS);
    char desc[192];

    ferry_px_ring_describe(&sc->base.ring, desc, sizeof(desc));
    FERRY_WARN_LIMITED("%s: the clear-to-send of message %" PRIu64 " in FIFO slot %" PRIu32
                       " %s: %s. ferry's receiver never writes that: mixed ferry builds, or "
                       "memory corruption at the receiver %s; check that both ranks load the "
                       "same ferry build. Every request of this comm now fails with "
                       "ncclRemoteError", desc, sc->fifo_head, s, what, why, sc->base.conn.peer);
    ferry_px_ring_fail(&sc->base.ring, FERRY_ERR_REMOTE, "clear-to-send of message %" PRIu64
                       " (FIFO slot %" PRIu32 ") %s: %s", sc->fifo_head, s, what, why);
    return FERRY_ERR_REMOTE;
}

long ferry_ib_send_cts_read(ferry_ib_send_comm_t *sc, int matched, int *nreqs_p)
{
    const ferry_ib_cts_t *e = sc->fifo[sc->fifo_head % FERRY_IB_FIFO_SLOTS];
    uint64_t want = sc->fifo_head + 1;
    ferry_ib_cts_t now[FERRY_IB_MAX_RECVS];
    char why[320], what[96];
    int n, st;

    if (matched > 0) {
        /* The receive isend began to match: the same n entries, every field as first read. */
        n = (int)sc->cts_seen[0].nreqs;
        memcpy(now, e, sizeof(ferry_ib_cts_t) * (size_t)n);
        if (ferry_ib_cts_diff(sc->cts_seen, now, n, why, sizeof(why)) > 0) {
            snprintf(what, sizeof(what), "changed after isend matched part of it (%d of %d "
                     "buffers)", matched, n);
            return ferry_ib_cts_bad(sc, what, why);
        }
        *nreqs_p = n;
        return 1;
    }
    if (ferry_ib_cts_idx(&e[0]) != want)
        return 0; /* No clear-to-send yet. */
    st = ferry_ib_cts_ready(e, want, &n);
    if (st < 0) {
        snprintf(why, sizeof(why), "buffer 0 nreqs %d (a receive has 1 to %d buffers)",
                 n, FERRY_IB_MAX_RECVS);
        return ferry_ib_cts_bad(sc, "is incorrect receive info", why);
    }
    if (st == 0)
        return 0; /* The entries of a grouped receive land one by one. */
    /* Read once: what is checked is what isend uses. */
    memcpy(sc->cts_seen, e, sizeof(ferry_ib_cts_t) * (size_t)n);
    if (ferry_ib_cts_whole_why(sc->cts_seen, n, want, why, sizeof(why)))
        return ferry_ib_cts_bad(sc, "is incorrect receive info", why);
    *nreqs_p = n;
    return 1;
}
