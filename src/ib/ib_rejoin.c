/*
 * A failed port of a merged device comes back into use. Its QPs are in the
 * error state on both sides (the failure moved their work elsewhere); they
 * are reset and connected again to the same peer QPs, in the order the
 * first connection used, over the comm's OOB socket:
 *
 *   send comm                                  recv comm
 *   port ACTIVE again: QPs RESET -> INIT
 *   'J' member n                     ---->     port ACTIVE? QPs RESET -> INIT -> RTR
 *                                              -> RTS, receives posted, member in use
 *                                    <----     'K' member n 1   (0: not yet, ask later)
 *   QPs RTR -> RTS, member in use
 *
 * The reset bumps the member's epoch, so errors of WRs posted before the
 * failure, still in the CQ, are not taken for a new one. A refused or
 * unanswered request is asked again after FERRY_IB_REJOIN_NS.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ib/ib_comm.h"

#define FERRY_IB_REJOIN_NS 1000000000ULL /* Between two requests for one port. */

/* The port of member m can carry traffic again. */
static int ferry_ib_member_port_ok(const ferry_ib_member_t *mem)
{
    return !atomic_load_explicit(&mem->dev->port_down, memory_order_relaxed) &&
           !atomic_load_explicit(&mem->dev->hca->fatal, memory_order_relaxed);
}

static int ferry_ib_oob_say(ferry_ib_comm_t *c, const uint8_t *msg, size_t len)
{
    ssize_t n = send(c->conn.oob_fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);

    return n == (ssize_t)len ? 0 : -1; /* A few bytes on an idle socket: all or nothing. */
}

static void ferry_ib_member_back(ferry_ib_comm_t *c, int m)
{
    ferry_ib_conn_t *conn = &c->conn;
    ferry_ib_member_t *mem = &conn->mem[m];

    FERRY_IB_DIAG_SET(mem->down, 0);
    mem->joining = 0;
    mem->rejoins++;
    atomic_store_explicit(&mem->async_down, 0, memory_order_relaxed);
    conn->ndown--;
    FERRY_INFO(FERRY_LOG_NET, "ib %s comm #%u with %s: port %s is back in use (%d of %d ports "
               "up)", c->ring.kind == FERRY_PX_SEND ? "send" : "recv", c->ring.serial,
               conn->peer, mem->dev->name, conn->nmem - conn->ndown, conn->nmem);
}

void ferry_ib_rejoin_poll(ferry_ib_comm_t *c)
{
    ferry_ib_conn_t *conn = &c->conn;
    uint64_t now = ferry_px_coarse_ns();
    uint8_t msg[3];
    int m;

    if (c->ring.kind != FERRY_PX_SEND || conn->ndown == 0 || conn->oob_fd < 0 ||
        conn->gone_ns != 0)
        return;
    for (m = 0; m < conn->nmem; m++) {
        ferry_ib_member_t *mem = &conn->mem[m];

        if (!mem->down || now < mem->join_ns || !ferry_ib_member_port_ok(mem))
            continue;
        mem->joining = 0; /* An earlier request went unanswered: its answer is stale now. */
        mem->join_ns = now + FERRY_IB_REJOIN_NS;
        if (ferry_ib_member_qps_reset(c, m) != FERRY_OK)
            continue;
        msg[0] = FERRY_IB_OOB_JOIN;
        msg[1] = (uint8_t)m;
        msg[2] = ++mem->join_n;
        if (ferry_ib_oob_say(c, msg, sizeof(msg)) == 0)
            mem->joining = 1;
    }
}

/* recv comm: the sender asks to use member m again. */
static void ferry_ib_rejoin_answer(ferry_ib_comm_t *c, int m, uint8_t n)
{
    ferry_ib_conn_t *conn = &c->conn;
    ferry_ib_member_t *mem = &conn->mem[m];
    uint8_t msg[4] = {FERRY_IB_OOB_JOINED, (uint8_t)m, n, 0};

    /* Reset only a port this side can spare for the moment (one down, or another up). */
    if (ferry_ib_member_port_ok(mem) && (mem->down || conn->ndown + 1 < conn->nmem)) {
        /* Work may still be on it (this side saw no error): move it before the reset. */
        if (!mem->down && ferry_ib_member_stop(c, m, "the peer resets it after a failure on "
                                               "its side", FERRY_IB_STOP_TAKE_CQ) < 0)
            return;
        if (ferry_ib_member_qps_reset(c, m) == FERRY_OK &&
            ferry_ib_member_qps_up(c, m) == FERRY_OK &&
            ferry_ib_recv_pool_fill((ferry_ib_recv_comm_t *)c, m) == FERRY_OK) {
            ferry_ib_member_back(c, m);
            msg[3] = 1;
        }
    }
    if (ferry_ib_oob_say(c, msg, sizeof(msg)) != 0)
        FERRY_INFO(FERRY_LOG_NET, "ib recv comm #%u with %s: could not answer the request to "
                   "bring port %s back (%s); the peer asks again", c->ring.serial, conn->peer,
                   mem->dev->name, strerror(errno));
}

/* send comm: the receiver's answer for member m. */
static void ferry_ib_rejoin_done(ferry_ib_comm_t *c, int m, uint8_t n, int ok)
{
    ferry_ib_member_t *mem = &c->conn.mem[m];

    if (!mem->down || !mem->joining || n != mem->join_n)
        return; /* The answer to a request asked again since. */
    mem->joining = 0;
    if (!ok)
        return; /* Its port is not up yet: ask again after FERRY_IB_REJOIN_NS. */
    if (ferry_ib_member_qps_up(c, m) != FERRY_OK)
        return;
    ferry_ib_member_back(c, m);
}

void ferry_ib_oob_input(ferry_ib_comm_t *c, const uint8_t *buf, size_t n)
{
    ferry_ib_conn_t *conn = &c->conn;
    size_t i;

    for (i = 0; i < n; i++) {
        uint8_t b = buf[i];
        int want;

        if (conn->oob_in_len == 0) {
            if (b == FERRY_IB_OOB_BYE)
                conn->bye = 1;
            else if (b == FERRY_IB_OOB_NOPORT)
                ferry_ib_peer_no_port(c); /* ib_noport.c */
            else if ((b == FERRY_IB_OOB_JOIN && c->ring.kind == FERRY_PX_RECV) ||
                     (b == FERRY_IB_OOB_JOINED && c->ring.kind == FERRY_PX_SEND))
                conn->oob_in[conn->oob_in_len++] = b;
            continue; /* Anything else is no message of ours: skipped. */
        }
        conn->oob_in[conn->oob_in_len++] = b;
        want = conn->oob_in[0] == FERRY_IB_OOB_JOIN ? 3 : 4;
        if (conn->oob_in_len < want)
            continue;
        conn->oob_in_len = 0;
        if (conn->oob_in[1] >= conn->nmem || !conn->multi) {
            FERRY_WARN_LIMITED("ib comm #%u with %s: the peer names port %u of a device with "
                               "%d%s on the out-of-band connection; mixed ferry builds? Ignored",
                               c->ring.serial, conn->peer, conn->oob_in[1], conn->nmem,
                               conn->multi ? "" : " that does not rejoin ports");
            continue;
        }
        if (conn->oob_in[0] == FERRY_IB_OOB_JOIN)
            ferry_ib_rejoin_answer(c, conn->oob_in[1], conn->oob_in[2]);
        else
            ferry_ib_rejoin_done(c, conn->oob_in[1], conn->oob_in[2], conn->oob_in[3] != 0);
    }
}
