/*
 * The objects a backend handed out to NCCL and has not freed yet: comms and
 * memory handles, from creation until their close or deregMr. The entry
 * points that end an object take the pointer out of this set instead of
 * reading the object's magic, so a second close (or a pointer that was never
 * ours) is refused without touching freed memory: reading a freed magic is
 * undefined behaviour, and the compiler may drop the store that clears it
 * before free() anyway. Not for the data path (one mutex): isend, irecv and
 * test keep their cheap magic checks.
 */
#ifndef FERRY_CORE_LIVE_H
#define FERRY_CORE_LIVE_H

#include <stddef.h>

#include "core/status.h"

typedef enum ferry_live_kind {
    FERRY_LIVE_SEND = 1, /* A send comm. */
    FERRY_LIVE_RECV,     /* A receive comm. */
    FERRY_LIVE_LISTEN,   /* A listen comm. */
    FERRY_LIVE_MR,       /* A memory handle. */
    FERRY_LIVE_CTX       /* A context from init (core/api.c), until its finalize. */
} ferry_live_kind_t;

ferry_status_t ferry_live_add(const void *obj, ferry_live_kind_t kind);
/* 1 if obj is live as kind (a live object of another kind does not count). */
int ferry_live_has(const void *obj, ferry_live_kind_t kind);
/* Like has, and removes it: of two racing closes exactly one gets 1. */
int ferry_live_take(const void *obj, ferry_live_kind_t kind);
size_t ferry_live_count(void);
/* Live objects of one kind (the last finalize names what was left open). */
size_t ferry_live_count_kind(ferry_live_kind_t kind);

#endif
