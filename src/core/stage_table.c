/*
 * The table of connect stages (why: core/stage_table.h). One mutex guards
 * it; it is taken once per connect() call, never on the data path. A free
 * slot keeps the generation of the stage it last held, so a reference to a
 * stage that ended is told apart from one that was never made. Generations
 * come from one process-wide counter, so a slot's next stage never has its
 * last one's. The table grows by doubling up to FERRY_STAGE_MAX_SLOTS and is
 * freed when it empties (nothing is left when the plugin is dlclosed); the
 * highest slot and generation ever handed out stay, for the words of a
 * refusal.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/stage_table.h"

#define FERRY_STAGE_MIN_SLOTS 16
/* Connects in progress at once in one process; NCCL has one per peer and channel at most. */
#define FERRY_STAGE_MAX_SLOTS 65536

typedef struct ferry_stage_slot {
    void              *stage; /* NULL: free. */
    uint32_t           gen;   /* Of the stage in it, or of the last one it held (0: none yet). */
    ferry_stage_kind_t kind;
    pid_t              pid;   /* The process that put it: a forked child inherits the table. */
    uint64_t           key;
    uint64_t           token;
} ferry_stage_slot_t;

/* All under ferry_stage_lock. */
static pthread_mutex_t ferry_stage_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_stage_slot_t *ferry_stage_slots;
static uint32_t ferry_stage_cap;      /* 0 with no table. */
static uint32_t ferry_stage_used;     /* Slots holding a stage of this process or a parent's. */
static uint32_t ferry_stage_top;      /* Highest slot number ever handed out. */
static uint32_t ferry_stage_last_gen; /* Last generation handed out. */

static const char *ferry_stage_kind_name(ferry_stage_kind_t kind)
{
    switch (kind) {
    case FERRY_STAGE_SOCK:   return "socket";
    case FERRY_STAGE_IB_OOB: return "ib (oob)";
    case FERRY_STAGE_IB_CM:  return "ib (rdmacm)";
    }
    return "unknown";
}

static uint64_t ferry_stage_random64(void)
{
    static uint64_t counter; /* Under the lock. */
    struct timespec ts;
    uint64_t v;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
        return v;
    /* No entropy yet (early boot): still unlike any other key of this process. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)getpid() << 40) ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec;
    return (v ^ ++counter) * 0x9e3779b97f4a7c15ULL;
}

int ferry_stage_ref_none(const ferry_stage_ref_t *ref)
{
    return ref->slot == 0 && ref->gen == 0 && ref->key == 0;
}

/* Under the lock: index of a slot to fill (growing the table), or -1 when full. */
static long ferry_stage_free_slot(void)
{
    pid_t me = getpid();
    ferry_stage_slot_t *slots;
    uint32_t i, cap;

    for (i = 0; i < ferry_stage_cap; i++) {
        ferry_stage_slot_t *s = &ferry_stage_slots[i];

        if (s->stage == NULL)
            return (long)i;
        if (s->pid != me) {
            /* A parent's stage, inherited through fork: never ours to continue. */
            s->stage = NULL;
            ferry_stage_used--;
            return (long)i;
        }
    }
    if (ferry_stage_cap >= FERRY_STAGE_MAX_SLOTS)
        return -1;
    cap = ferry_stage_cap ? ferry_stage_cap * 2 : FERRY_STAGE_MIN_SLOTS;
    slots = realloc(ferry_stage_slots, sizeof(*slots) * cap);
    if (slots == NULL)
        return -1;
    memset(slots + ferry_stage_cap, 0, sizeof(*slots) * (cap - ferry_stage_cap));
    ferry_stage_slots = slots;
    i = ferry_stage_cap;
    ferry_stage_cap = cap;
    return (long)i;
}

ferry_status_t ferry_stage_put(void *stage, ferry_stage_kind_t kind, uint64_t token,
                               ferry_stage_ref_t *ref)
{
    ferry_stage_slot_t *s;
    long i;

    pthread_mutex_lock(&ferry_stage_lock);
    i = ferry_stage_free_slot();
    if (i < 0) {
        pthread_mutex_unlock(&ferry_stage_lock);
        memset(ref, 0, sizeof(*ref));
        return FERRY_ERR_NO_MEMORY;
    }
    s = &ferry_stage_slots[i];
    if (++ferry_stage_last_gen == 0)
        ferry_stage_last_gen = 1;
    s->stage = stage;
    s->gen = ferry_stage_last_gen;
    s->kind = kind;
    s->pid = getpid();
    s->key = ferry_stage_random64();
    s->token = token;
    ferry_stage_used++;
    ref->slot = (uint32_t)i + 1;
    ref->gen = s->gen;
    ref->key = s->key;
    if (ref->slot > ferry_stage_top)
        ferry_stage_top = ref->slot;
    pthread_mutex_unlock(&ferry_stage_lock);
    return FERRY_OK;
}

/* Under the lock: the slot ref names if it is in the table, else NULL with why. */
static ferry_stage_slot_t *ferry_stage_slot_of(const ferry_stage_ref_t *ref, char *why,
                                               size_t why_len)
{
    const ferry_stage_slot_t *s;

    if (ref->slot == 0 || ref->slot > ferry_stage_top) {
        if (ferry_stage_top == 0)
            snprintf(why, why_len, "it names connect slot %u (generation %u), and no connect in "
                     "this process has used a slot yet", ref->slot, ref->gen);
        else
            snprintf(why, why_len, "it names connect slot %u (generation %u), and no connect in "
                     "this process has used a slot other than 1..%u", ref->slot, ref->gen,
                     ferry_stage_top);
        return NULL;
    }
    if (ref->gen == 0 || ref->gen > ferry_stage_last_gen) {
        snprintf(why, why_len, "it names generation %u of connect slot %u, and this process has "
                 "made only %u", ref->gen, ref->slot, ferry_stage_last_gen);
        return NULL;
    }
    s = ref->slot <= ferry_stage_cap ? &ferry_stage_slots[ref->slot - 1] : NULL;
    if (s == NULL || s->stage == NULL || s->gen != ref->gen) {
        snprintf(why, why_len, "the connect it names (slot %u, generation %u) has ended: it "
                 "returned a comm or failed, so the handle is stale", ref->slot, ref->gen);
        return NULL;
    }
    return &ferry_stage_slots[ref->slot - 1];
}

void *ferry_stage_get(const ferry_stage_ref_t *ref, ferry_stage_kind_t kind, uint64_t token,
                      char *why, size_t why_len)
{
    const ferry_stage_slot_t *s;
    void *stage = NULL;

    pthread_mutex_lock(&ferry_stage_lock);
    s = ferry_stage_slot_of(ref, why, why_len);
    if (s == NULL)
        goto out;
    if (s->pid != getpid())
        snprintf(why, why_len, "the connect it names (slot %u, generation %u) is process %d's, "
                 "not this one's (%d): a handle in the middle of a connect does not cross "
                 "fork()", ref->slot, ref->gen, (int)s->pid, (int)getpid());
    else if (s->key != ref->key)
        snprintf(why, why_len, "its key does not match the connect in slot %u (generation %u): "
                 "the handle's connect-state bytes were forged or corrupted", ref->slot,
                 ref->gen);
    else if (s->kind != kind)
        snprintf(why, why_len, "the connect it names (slot %u) is a %s connect, not a %s one",
                 ref->slot, ferry_stage_kind_name(s->kind), ferry_stage_kind_name(kind));
    else if (s->token != token)
        snprintf(why, why_len, "the connect it names (slot %u) goes to another listener (the "
                 "handle's token differs): its connect-state bytes were copied from another "
                 "handle", ref->slot);
    else
        stage = s->stage;
out:
    pthread_mutex_unlock(&ferry_stage_lock);
    return stage;
}

void ferry_stage_drop(ferry_stage_ref_t *ref)
{
    ferry_stage_slot_t *s;

    pthread_mutex_lock(&ferry_stage_lock);
    s = ref->slot >= 1 && ref->slot <= ferry_stage_cap ? &ferry_stage_slots[ref->slot - 1] : NULL;
    if (s != NULL && s->stage != NULL && s->gen == ref->gen && s->key == ref->key &&
        s->pid == getpid()) {
        s->stage = NULL; /* gen stays: a later reference to it is stale. */
        if (--ferry_stage_used == 0) {
            free(ferry_stage_slots);
            ferry_stage_slots = NULL;
            ferry_stage_cap = 0;
        }
    }
    pthread_mutex_unlock(&ferry_stage_lock);
    memset(ref, 0, sizeof(*ref));
}

size_t ferry_stage_count(void)
{
    size_t n;

    pthread_mutex_lock(&ferry_stage_lock);
    n = ferry_stage_used;
    pthread_mutex_unlock(&ferry_stage_lock);
    return n;
}
