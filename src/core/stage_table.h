/*
 * Where a non-blocking connect() keeps its state between NCCL's calls.
 *
 * NCCL calls connect() again with the same handle until it returns a comm,
 * so the handle must lead each call to its connect's state (its "stage").
 * But the handle's bytes come from the peer's listen(), through NCCL's
 * bootstrap, from another host: whatever they say may be forged, corrupt or
 * left over from an earlier connect. So a handle never carries a pointer.
 * It carries a reference into this process's table of stages: a slot, the
 * generation the slot had when the stage went in, and a random key. The
 * table honours a reference only when the slot is in range and holds a live
 * stage of that generation and key, put there by this process (not a parent
 * it was forked from), for the same backend and the same listener (the
 * handle's token). Anything else is refused with the reason in words, and
 * nothing is followed. Shared by the backends (socket, ib oob, ib rdmacm).
 *
 * The reference's bytes are all zero in a handle as listen() makes it: that
 * is the first call of a connect, which puts a new stage in the table.
 */
#ifndef FERRY_CORE_STAGE_TABLE_H
#define FERRY_CORE_STAGE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct ferry_stage_ref {
    uint32_t slot; /* 1 + the index in the table (0 is no slot). */
    uint32_t gen;  /* The slot's generation when the stage was put there; never 0. */
    uint64_t key;  /* Random per stage: a reference cannot be guessed from the others. */
} ferry_stage_ref_t;
_Static_assert(sizeof(ferry_stage_ref_t) == 16, "a stage reference is 16 bytes of a handle");

/* Whose stage a slot holds: a reference made by one connect path is refused by the others. */
typedef enum ferry_stage_kind {
    FERRY_STAGE_SOCK = 1, /* socket/sock_connect.c */
    FERRY_STAGE_IB_OOB,   /* ib/ib_connect.c */
    FERRY_STAGE_IB_CM     /* ib/ib_cm_connect.c */
} ferry_stage_kind_t;

/* 1 when all of ref is zero: a handle as listen() made it, no connect begun with it. */
int ferry_stage_ref_none(const ferry_stage_ref_t *ref);
/*
 * Puts stage (the caller's, never read here) in a free slot for a connect
 * to the listener whose token the handle carries; *ref then names it.
 * FERRY_ERR_NO_MEMORY when the table is full or cannot grow.
 */
ferry_status_t ferry_stage_put(void *stage, ferry_stage_kind_t kind, uint64_t token,
                               ferry_stage_ref_t *ref);
/*
 * The stage ref names, when it names one of kind for token that this
 * process put and has not dropped; else NULL, with why (for a WARN) saying
 * what is wrong with the reference.
 */
void *ferry_stage_get(const ferry_stage_ref_t *ref, ferry_stage_kind_t kind, uint64_t token,
                      char *why, size_t why_len);
/* Frees the slot a reference that ferry_stage_get honoured names (not the stage) and zeroes *ref. */
void ferry_stage_drop(ferry_stage_ref_t *ref);
/* Stages in the table now (tests). */
size_t ferry_stage_count(void);

#endif
