/*
 * Shared fixtures of the fakeibv tests: open the device, build connected RC
 * QPs, and poll with a bound (tests never spin forever).
 */
#ifndef FAKEIBV_TEST_UTIL_H
#define FAKEIBV_TEST_UTIL_H

#include "ferry/verbs_abi.h"
#include <stddef.h>
#include <stdint.h>

struct fx {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    uint16_t lid;
};

/* QP timing used unless a test says otherwise: ~135 ms retry timeout. */
#define FX_TIMEOUT 12
#define FX_RETRY 7

/* The first device, a PD, a CQ of 256 entries; fails without an InfiniBand LID. */
int fx_open(struct fx *f);
/*
 * Device `index` (of exactly ndev, or any count with ndev 0), a PD and a CQ of
 * cq_entries; lid is 0 on an Ethernet link layer. fx_close undoes it.
 */
int fx_open_index(struct fx *f, int index, int ndev, int cq_entries);
void fx_close(struct fx *f);
struct ibv_qp *fx_qp(struct fx *f, uint32_t depth, uint32_t max_inline);
int fx_to_init(struct ibv_qp *qp, int access);
int fx_to_rtr(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn, uint8_t min_rnr_timer);
int fx_to_rts(struct ibv_qp *qp, uint8_t timeout, uint8_t retry, uint8_t rnr_retry);
/* RESET -> RTS towards (dlid, dqpn) with full remote access. */
int fx_connect(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn, uint8_t rnr_retry);
/* Polls until n CQEs arrived or timeout_ms passed; returns the count. */
int fx_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms);
int fx_write(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, void *buf, uint32_t len,
             uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned flags, uint32_t imm);
long fx_ms_since(const struct timespec *t0);
/*
 * Two RC QPs on one device connected to each other (rnr_retry 7, inline 64,
 * depth send WRs each), two host buffers of len bytes registered with local
 * write and remote read/write, and one CQ of cq_entries for both QPs.
 */
struct fx_pair {
    struct fx f;
    struct ibv_qp *a, *b;
    unsigned char *src, *dst;
    struct ibv_mr *src_mr, *dst_mr;
};
int fx_pair_open(struct fx_pair *x, size_t len, uint32_t depth, int cq_entries);
void fx_pair_close(struct fx_pair *x);
/* Byte i depends on i and seed, so a misplaced or missing byte shows. */
void fx_fill(unsigned char *p, size_t n, unsigned seed);
/* The QP state as the device sees it (ibv_qp::state changes only on modify). */
enum ibv_qp_state fx_state(struct ibv_qp *qp);

#endif
