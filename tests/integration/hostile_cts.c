/*
 * A receiver that lies in its clear-to-send (ib): the entries it RDMA-writes
 * into the sender's CTS FIFO change between two isends of one grouped
 * receive. Each variant gets a fresh connection; the test plays the
 * receiver's NIC by writing the sender's FIFO slot itself (same process:
 * the comm's layout, ib/ib_comm.h of the same build, as integ_ib_faults
 * reads it). The first isend matches buffer 1 of the receive; then the entry
 * changes, and the next isend must fail with ncclRemoteError and a WARN
 * naming peer, comm, slot, field and both values, never crash (a receive of
 * 8 that turned into 1 made the sender post a chain of 8 buffers with 7
 * NULL requests). The comm stays failed: the first request's test() and
 * any later isend give the same error, and both comms close cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostile.h"
#include "ib/ib_comm.h"

#define CTS_BUF  4096 /* Each buffer of the forged receive. */
#define CTS_NBUF FERRY_IB_MAX_RECVS

typedef enum cts_lie {
    CTS_NREQS_SHRINK,  /* e[0].nreqs 8 -> 1: the reported crash. */
    CTS_NREQS_GROW,    /* A receive of 2 turns into 8 (all 8 entries stamped). */
    CTS_SIZE,          /* An unmatched buffer's size 4096 -> 2^40. */
    CTS_ADDR,          /* The matched buffer's address moves. */
    CTS_RKEY,          /* The matched buffer's key changes. */
    CTS_TAG,           /* An unmatched buffer's tag changes (to the isend's). */
    CTS_IDX,           /* e[0] is stamped for message 33 (the slot's next use). */
    CTS_MIXED_NREQS,   /* No isend yet: entry 3 says 2 buffers where entry 0 says 8. */
} cts_lie_t;

static const struct {
    cts_lie_t   lie;
    const char *name;
    int         n;        /* Buffers of the forged receive. */
    const char *field;    /* What the WARN must name ("field old -> new"). */
} cts_lies[] = {
    { CTS_NREQS_SHRINK, "nreqs 8 -> 1",               8, "buffer 0 nreqs 8 -> 1" },
    { CTS_NREQS_GROW,   "nreqs 2 -> 8",               2, "buffer 0 nreqs 2 -> 8" },
    { CTS_SIZE,         "size of buffer 2",           8, "buffer 2 size 4096 -> 1099511627776" },
    { CTS_ADDR,         "address of matched buffer 1", 8, "buffer 1 addr 0x" },
    { CTS_RKEY,         "rkey of matched buffer 1",   8, "buffer 1 rkey[0] 0x" },
    { CTS_TAG,          "tag of buffer 3",            8, "buffer 3 tag 3 -> 0" },
    { CTS_IDX,          "sequence of entry 0",        8, "buffer 0 idx 1 -> 33" },
    { CTS_MIXED_NREQS,  "entries disagree on nreqs",  8, "buffer 3 nreqs 2" },
};

/* Entries e[0..n-1] of a receive of n buffers of rbuf, stamped idx last, as the NIC lands them. */
static void cts_forge(ferry_ib_cts_t *e, int n, const char *rbuf, uint32_t rkey, uint64_t idx)
{
    int i;

    for (i = 0; i < n; i++) {
        memset(&e[i], 0, offsetof(ferry_ib_cts_t, idx));
        e[i].addr = (uint64_t)(uintptr_t)(rbuf + (size_t)i * CTS_BUF);
        e[i].size = CTS_BUF;
        e[i].rkeys[0] = rkey;
        e[i].nreqs = (uint32_t)n;
        e[i].tag = i;
    }
    for (i = 0; i < n; i++)
        __atomic_store_n(&e[i].idx, idx, __ATOMIC_RELEASE);
}

/* isend until a request or an error comes (a grouped receive's entries may still land). */
static ncclResult_t cts_isend(hostile_env_t *e, void *send_comm, void *buf, int tag, void *mh,
                              void **req_p, int tries)
{
    ncclResult_t rc = ncclSuccess;
    int k;

    for (k = 0; k < tries; k++) {
        *req_p = NULL;
        rc = e->plugin.net->isend(send_comm, buf, 1024, tag, mh, NULL, req_p);
        if (rc != ncclSuccess || *req_p != NULL)
            break;
    }
    return rc;
}

static void cts_case(hostile_env_t *e, int v)
{
    const fit_plugin_t *p = &e->plugin;
    void *send_comm = NULL, *recv_comm = NULL, *smh = NULL, *rmh = NULL, *req0 = NULL;
    void *req = NULL;
    char *sbuf, *rbuf, line[4096], slot_words[32];
    ferry_ib_send_comm_t *sc;
    ferry_ib_cts_t *fe;
    uint32_t rkey;
    ncclResult_t rc;
    int n = cts_lies[v].n, from, done = 0, size = 0, i;

    hostile_real_connect(e, &send_comm, &recv_comm);
    sc = send_comm; /* Same build: the plugin's comm layout (ib/ib_comm.h). */
    sbuf = aligned_alloc(4096, CTS_BUF);
    rbuf = aligned_alloc(4096, (size_t)CTS_NBUF * CTS_BUF);
    FIT_CHECK(sbuf != NULL && rbuf != NULL, "no memory for the buffers");
    memset(sbuf, 0x3c, CTS_BUF);
    memset(rbuf, 0, (size_t)CTS_NBUF * CTS_BUF);
    FIT_NCCL(p->net->regMr(send_comm, sbuf, CTS_BUF, NCCL_PTR_HOST, &smh));
    FIT_NCCL(p->net->regMr(recv_comm, rbuf, (size_t)CTS_NBUF * CTS_BUF, NCCL_PTR_HOST, &rmh));
    rkey = ((ferry_ib_mh_t *)rmh)->mr[0]->rkey;
    fe = sc->fifo[sc->fifo_head % FERRY_IB_FIFO_SLOTS];
    from = fit_log_lines();
    fit_log_expect("changed after isend matched part of it");
    fit_log_expect("is incorrect receive info");
    fit_log_expect("failed: clear-to-send");

    if (cts_lies[v].lie == CTS_MIXED_NREQS) {
        fe[3].nreqs = 2;
        cts_forge(fe, n, rbuf, rkey, 1);
        fe[3].nreqs = 2; /* After the stamp: the receiver's write itself said so. */
    } else {
        cts_forge(fe, n, rbuf, rkey, 1);
        rc = cts_isend(e, send_comm, sbuf, 1, smh, &req0, 1000);
        FIT_CHECK(rc == ncclSuccess && req0 != NULL, "isend of buffer 1 of a forged receive of "
                  "%d: %d (%s), request %p", n, (int)rc, fit_result_str(rc), req0);
        switch (cts_lies[v].lie) {
        case CTS_NREQS_SHRINK: fe[0].nreqs = 1; break;
        case CTS_NREQS_GROW:   cts_forge(fe, CTS_NBUF, rbuf, rkey, 1); break;
        case CTS_SIZE:         fe[2].size = (uint64_t)1 << 40; break;
        case CTS_ADDR:         fe[1].addr += 64; break;
        case CTS_RKEY:         fe[1].rkeys[0] ^= 0x5a5a; break;
        case CTS_TAG:          fe[3].tag = 0; break;
        case CTS_IDX:          __atomic_store_n(&fe[0].idx, 33, __ATOMIC_RELEASE); break;
        default: break;
        }
    }
    rc = cts_isend(e, send_comm, sbuf, 0, smh, &req, 1000);
    FIT_CHECK(rc == ncclRemoteError, "%s: isend returned %d (%s), request %p; expected "
              "ncclRemoteError", cts_lies[v].name, (int)rc, fit_result_str(rc), req);
    FIT_CHECK(req == NULL, "%s: the failed isend returned a request", cts_lies[v].name);
    snprintf(slot_words, sizeof(slot_words), "FIFO slot %d", 0);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, cts_lies[v].field, slot_words, sc->base.conn.peer,
                           line, sizeof(line)) >= 0,
              "%s: no WARN names '%s', '%s' and the peer %s", cts_lies[v].name,
              cts_lies[v].field, slot_words, sc->base.conn.peer);
    FIT_CHECK(strstr(line, "ib send comm") != NULL && strstr(line, "mixed ferry builds") != NULL,
              "%s: the WARN does not name the comm or what to try: %s", cts_lies[v].name, line);
    printf("  %s: %.700s\n", cts_lies[v].name, line);

    /* The comm stays failed: the matched request, and every later isend. */
    if (req0 != NULL) {
        rc = p->net->test(req0, &done, &size);
        FIT_CHECK(rc == ncclRemoteError && !done, "%s: test() of the first request: %d (%s), "
                  "done %d", cts_lies[v].name, (int)rc, fit_result_str(rc), done);
    }
    for (i = 0; i < 3; i++) {
        rc = cts_isend(e, send_comm, sbuf, i, smh, &req, 1);
        FIT_CHECK(rc == ncclRemoteError && req == NULL, "%s: isend #%d after the failure: %d "
                  "(%s)", cts_lies[v].name, i, (int)rc, fit_result_str(rc));
    }
    for (i = 0; i < CTS_NBUF * CTS_BUF; i++)
        FIT_CHECK(rbuf[i] == 0 || rbuf[i] == 0x3c, "%s: byte %d of the receive buffers is 0x%02x",
                  cts_lies[v].name, i, (unsigned char)rbuf[i]);
    FIT_NCCL(p->net->deregMr(send_comm, smh));
    FIT_NCCL(p->net->deregMr(recv_comm, rmh));
    FIT_NCCL(p->net->closeSend(send_comm));
    FIT_NCCL(p->net->closeRecv(recv_comm));
    free(sbuf);
    free(rbuf);
    fit_pass("%s: isend -> ncclRemoteError with a WARN naming peer, slot and field; the comm "
             "stays failed and closes", cts_lies[v].name);
}

void hostile_case_ib_cts(hostile_env_t *e)
{
    const char *only = getenv("HOSTILE_CTS_ONLY");
    void *send_comm = NULL, *recv_comm = NULL;
    size_t v;

    FIT_CHECK(hostile_backend_ib(), "case ib-cts needs NCCL_FERRY_BACKEND=ib");
    /* HOSTILE_CTS_ONLY=<words of a variant's name>: that one alone (to see each fail by hand). */
    for (v = 0; v < sizeof(cts_lies) / sizeof(cts_lies[0]); v++)
        if (only == NULL || strstr(cts_lies[v].name, only) != NULL)
            cts_case(e, (int)v);
    fit_log_expect_clear();
    hostile_real_connect(e, &send_comm, &recv_comm);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 3939,
                      "on a real connection after the lying receivers");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}
