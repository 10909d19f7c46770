/*
 * The live-object set (why: core/live.h), shared by the backends. One mutex guards the table. It is taken by close, deregMr, accept and
 * regMr only, never on the isend/irecv/test path, which keeps its cheap
 * magic check. The table is process-wide, not per context: NCCL may close
 * comms after the last finalize. It is an open-addressing hash set with
 * linear probing, grown at half full and freed when it empties (so nothing
 * is left when the plugin is dlclosed).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/live.h"

#define FERRY_LIVE_MIN_SLOTS 64

typedef struct ferry_live_slot {
    const void            *obj;  /* NULL: empty. */
    ferry_live_kind_t kind;
} ferry_live_slot_t;

/* All under ferry_live_lock. */
static pthread_mutex_t ferry_live_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_live_slot_t *ferry_live_slots;
static size_t ferry_live_cap;   /* Power of two, or 0 with no table. */
static size_t ferry_live_used;

static size_t ferry_live_hash(const void *obj, size_t cap)
{
    /* Heap pointers share their low bits: mix them (Fibonacci hashing). */
    uint64_t h = ((uint64_t)(uintptr_t)obj >> 4) * 0x9e3779b97f4a7c15ULL;

    return (size_t)(h >> 32) & (cap - 1);
}

/* Slot holding obj, or the empty slot where it would go. Needs a table. */
static size_t ferry_live_find(const void *obj)
{
    size_t i = ferry_live_hash(obj, ferry_live_cap);

    while (ferry_live_slots[i].obj != NULL && ferry_live_slots[i].obj != obj)
        i = (i + 1) & (ferry_live_cap - 1);
    return i;
}

static int ferry_live_grow(void)
{
    ferry_live_slot_t *old = ferry_live_slots;
    size_t old_cap = ferry_live_cap, i;
    size_t cap = old_cap ? old_cap * 2 : FERRY_LIVE_MIN_SLOTS;
    ferry_live_slot_t *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return -1;
    ferry_live_slots = slots;
    ferry_live_cap = cap;
    for (i = 0; i < old_cap; i++)
        if (old[i].obj != NULL)
            ferry_live_slots[ferry_live_find(old[i].obj)] = old[i];
    free(old);
    return 0;
}

/* Empty slot i and move later entries of its probe run back (no tombstones). */
static void ferry_live_erase(size_t i)
{
    size_t mask = ferry_live_cap - 1, j = i;

    ferry_live_slots[i].obj = NULL;
    for (;;) {
        size_t home;

        j = (j + 1) & mask;
        if (ferry_live_slots[j].obj == NULL)
            return;
        home = ferry_live_hash(ferry_live_slots[j].obj, ferry_live_cap);
        /* Entry j may fill the hole unless its home lies cyclically in (i, j]. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            ferry_live_slots[i] = ferry_live_slots[j];
            ferry_live_slots[j].obj = NULL;
            i = j;
        }
    }
}

ferry_status_t ferry_live_add(const void *obj, ferry_live_kind_t kind)
{
    ferry_status_t status = FERRY_OK;
    size_t i;

    pthread_mutex_lock(&ferry_live_lock);
    if ((ferry_live_used + 1) * 2 > ferry_live_cap && ferry_live_grow() != 0) {
        status = FERRY_ERR_NO_MEMORY;
        goto out_unlock;
    }
    i = ferry_live_find(obj);
    if (ferry_live_slots[i].obj == NULL)
        ferry_live_used++;
    ferry_live_slots[i].obj = obj;
    ferry_live_slots[i].kind = kind;
out_unlock:
    pthread_mutex_unlock(&ferry_live_lock);
    return status;
}

/* Under the lock: 1 if obj is live as kind. */
static int ferry_live_has_locked(const void *obj, ferry_live_kind_t kind, size_t *slot_p)
{
    size_t i;

    if (obj == NULL || ferry_live_cap == 0)
        return 0;
    i = ferry_live_find(obj);
    *slot_p = i;
    return ferry_live_slots[i].obj == obj && ferry_live_slots[i].kind == kind;
}

int ferry_live_has(const void *obj, ferry_live_kind_t kind)
{
    size_t i;
    int live;

    pthread_mutex_lock(&ferry_live_lock);
    live = ferry_live_has_locked(obj, kind, &i);
    pthread_mutex_unlock(&ferry_live_lock);
    return live;
}

int ferry_live_take(const void *obj, ferry_live_kind_t kind)
{
    size_t i;
    int live;

    pthread_mutex_lock(&ferry_live_lock);
    live = ferry_live_has_locked(obj, kind, &i);
    if (live) {
        ferry_live_erase(i);
        if (--ferry_live_used == 0) {
            free(ferry_live_slots);
            ferry_live_slots = NULL;
            ferry_live_cap = 0;
        }
    }
    pthread_mutex_unlock(&ferry_live_lock);
    return live;
}

size_t ferry_live_count(void)
{
    size_t n;

    pthread_mutex_lock(&ferry_live_lock);
    n = ferry_live_used;
    pthread_mutex_unlock(&ferry_live_lock);
    return n;
}

size_t ferry_live_count_kind(ferry_live_kind_t kind)
{
    size_t i, n = 0;

    pthread_mutex_lock(&ferry_live_lock);
    for (i = 0; i < ferry_live_cap; i++)
        n += ferry_live_slots[i].obj != NULL && ferry_live_slots[i].kind == kind;
    pthread_mutex_unlock(&ferry_live_lock);
    return n;
}
