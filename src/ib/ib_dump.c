/*
 * The ib backend's words for the engine's stall WARN and signal dump: what
 * a request waits on and what to check, a one-line transport state, and
 * per-QP lines (state as the device reports it, WRs outstanding, FIFO
 * positions). Slow path only: ibv_query_qp runs here.
 */
#include <stdio.h>
#include <string.h>

#include "ib/ib_comm.h"

const char *ferry_ib_qp_state_str(int state)
{
    static const char *const names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

    return state >= 0 && state < (int)(sizeof(names) / sizeof(names[0])) ? names[state] : "?";
}

static const char *ferry_ib_qp_query(const ferry_ib_conn_t *conn, int i)
{
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;

    memset(&attr, 0, sizeof(attr));
    if (ferry_ibv.query_qp == NULL ||
        ferry_ibv.query_qp(conn->qps[i], &attr, IBV_QP_STATE, &init) != 0)
        return "unknown (ibv_query_qp failed)";
    return ferry_ib_qp_state_str((int)attr.qp_state);
}

void ferry_ib_stall_why(const ferry_px_ring_t *ring, const ferry_px_req_t *req, char *buf,
                        size_t len)
{
    const ferry_ib_comm_t *c = (const ferry_ib_comm_t *)ring;
    int state = atomic_load(&req->state);
    unsigned long long msg = (unsigned long long)(req->backend_word & ~FERRY_IB_WORD_TRUNC);

    if (ring->kind == FERRY_PX_RECV && (req->backend_word & FERRY_IB_WORD_FLUSH))
        ferry_ib_flush_stall_why((const ferry_ib_recv_comm_t *)c, req, buf, len);
    else if (ring->kind == FERRY_PX_SEND && state == FERRY_PX_REQ_POSTED)
        snprintf(buf, len, "Matched a buffer of the receiver's grouped receive %llu and waits "
                 "for the isends of its other buffers (NCCL posts them; tags must match)", msg);
    else if (ring->kind == FERRY_PX_SEND)
        snprintf(buf, len, "WRs posted for message %llu, waiting for their completion from the "
                 "NIC: the peer %s or the link may be down; ibv_devinfo, port counters on %s",
                 msg, c->conn.peer, ferry_ib_comm_where(c));
    else
        snprintf(buf, len, "Waiting for the sender's data for message %llu (clear-to-send "
                 "written): the sender %s has not sent it (a slower rank, or stopped) - check "
                 "that rank; or the data is stuck on the link: ibv_devinfo, port counters on %s",
                 msg, c->conn.peer, ferry_ib_comm_where(c));
}

void ferry_ib_state_words(const ferry_px_ring_t *ring, char *buf, size_t len)
{
    const ferry_ib_comm_t *c = (const ferry_ib_comm_t *)ring;
    const ferry_ib_conn_t *conn = &c->conn;
    size_t off;
    int i;

    off = (size_t)snprintf(buf, len, "%d QP(s)", conn->nqps);
    for (i = 0; i < conn->nqps && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s0x%x %s", i ? ", " : " ",
                                conn->qps[i]->qp_num, ferry_ib_qp_query(conn, i));
    if (off >= len)
        return;
    if (ring->kind == FERRY_PX_SEND) {
        const ferry_ib_send_comm_t *sc = (const ferry_ib_send_comm_t *)c;
        uint64_t head = FERRY_IB_DIAG_GET(sc->fifo_head);
        uint32_t s = (uint32_t)(head % FERRY_IB_FIFO_SLOTS);
        uint64_t idx = __atomic_load_n(&sc->fifo[s][0].idx, __ATOMIC_ACQUIRE);
        uint64_t done = FERRY_IB_DIAG_GET(sc->chains_done);
        int moved_out = FERRY_IB_DIAG_GET(sc->moved_out);

        off += (size_t)snprintf(buf + off, len - off, "; CTS FIFO head %llu (slot %u %s), WR "
                                "chains outstanding %llu", (unsigned long long)head, s,
                                idx == head + 1 ? "has the receiver's clear-to-send"
                                                : "empty: not posted by the receiver, or lost",
                                (unsigned long long)(FERRY_IB_DIAG_GET(sc->chains_posted) - done));
        if (moved_out > 0 && off < len)
            snprintf(buf + off, len - off, ", %d of them moved by a failover (new messages "
                     "wait for them)", moved_out);
    } else {
        const ferry_ib_recv_comm_t *rc = (const ferry_ib_recv_comm_t *)c;

        off += (size_t)snprintf(buf + off, len - off, "; clear-to-sends written %llu, data "
                                "completions %llu",
                                (unsigned long long)FERRY_IB_DIAG_GET(rc->cts_seq),
                                (unsigned long long)FERRY_IB_DIAG_GET(rc->imm_done));
        if (off < len)
            off += (size_t)ferry_ib_recv_early_words(rc, buf + off, len - off);
        if (off < len)
            ferry_ib_flush_words(rc, buf + off, len - off);
    }
}

void ferry_ib_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now)
{
    const ferry_ib_comm_t *c = (const ferry_ib_comm_t *)ring;
    const ferry_ib_conn_t *conn = &c->conn;
    char words[512];
    uint64_t gone = FERRY_IB_DIAG_GET(conn->gone_ns);
    int i;

    /* In rdmacm mode the liveness socket stands for the rdma_cm connections (ib_cm_conn.h). */
    fprintf(out, "NET/ferry :     ib: peer %s (device %s), local %s, %d data QP(s)%s, %s %s\n",
            conn->peer, conn->remote.devname, ferry_ib_comm_where(c), conn->nqps,
            conn->split ? " split" : "", conn->cm != NULL ? "rdma_cm connection" : "OOB socket",
            conn->oob_fd < 0 ? "closed"
            : gone ? (conn->cm != NULL ? "peer gone (DISCONNECTED)" : "peer gone (EOF)")
                   : "open");
    for (i = 0; i < conn->nmem; i++) {
        const ferry_ib_member_t *mem = &conn->mem[i];

        fprintf(out, "NET/ferry :     port %d %s: %s, %s for this comm; %llu bytes sent, %llu "
                "chains completed, %llu moved off it\n", i, mem->dev->name,
                atomic_load(&mem->dev->port_down) ? "DOWN" : "ACTIVE",
                FERRY_IB_DIAG_GET(mem->down) ? "failed" : "in use",
                (unsigned long long)FERRY_IB_DIAG_GET(mem->bytes),
                (unsigned long long)FERRY_IB_DIAG_GET(mem->chains),
                (unsigned long long)FERRY_IB_DIAG_GET(mem->moved));
    }
    for (i = 0; i < conn->nqps; i++)
        fprintf(out, "NET/ferry :     QP %d: 0x%x on %s -> peer 0x%x, state %s\n", i,
                conn->qps[i]->qp_num, conn->mem[ferry_ib_qp_mem(conn, i)].dev->name,
                conn->remote.qpn[i], ferry_ib_qp_query(conn, i));
    ferry_ib_state_words(ring, words, sizeof(words));
    fprintf(out, "NET/ferry :     %s\n", words);
    (void)now;
}
