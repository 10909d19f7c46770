/*
 * The out-of-band sockets' watch (why: ib_oob_watch.h). Slots hold one mark
 * each, in chunks that only grow (a late mark from another thread's
 * epoll_wait must land in memory that stays) and are freed only by the
 * library's destructor; adding and removing take a mutex, marking and
 * taking do not.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib_oob_watch.h"

#define FERRY_IB_OOB_CHUNK   1024
#define FERRY_IB_OOB_CHUNKS  64      /* 65,536 sockets; more are read every time. */
#define FERRY_IB_OOB_EVENTS  64      /* Per epoll_wait. */
#define FERRY_IB_OOB_BATCHES 16      /* epoll_waits per poll, at most. */
#define FERRY_IB_OOB_EVMASK  (EPOLLIN | EPOLLRDHUP | EPOLLONESHOT)

static _Atomic(_Atomic uint8_t *) ferry_ib_oob_chunks[FERRY_IB_OOB_CHUNKS];
static _Atomic int ferry_ib_oob_efd = -1;
static _Atomic uint64_t ferry_ib_oob_next_ns, ferry_ib_oob_npolls;

/* Under ferry_ib_oob_lock. */
static pthread_mutex_t ferry_ib_oob_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t ferry_ib_oob_pid;            /* The process that made the epoll set. */
static uint32_t ferry_ib_oob_nslots;      /* Slots ever handed out. */
static uint32_t *ferry_ib_oob_free;       /* Slots given back... */
static uint32_t ferry_ib_oob_nfree, ferry_ib_oob_free_cap; /* ...their count and room. */
static uint32_t ferry_ib_oob_live;        /* Sockets in the set: the set closes with the last. */

static _Atomic uint8_t *ferry_ib_oob_mark(ferry_ib_oob_watch_t w)
{
    uint32_t i = w - 1;
    _Atomic uint8_t *chunk = atomic_load_explicit(&ferry_ib_oob_chunks[i / FERRY_IB_OOB_CHUNK],
                                                  memory_order_acquire);

    return chunk != NULL ? &chunk[i % FERRY_IB_OOB_CHUNK] : NULL;
}

/* The process' epoll set; a forked child makes its own (the parent's would mark the parent). */
static int ferry_ib_oob_efd_locked(const char *who)
{
    int efd = atomic_load(&ferry_ib_oob_efd);

    if (efd >= 0 && ferry_ib_oob_pid == getpid())
        return efd;
    if (efd >= 0)
        close(efd); /* The child's copy: the parent's set is untouched. */
    efd = epoll_create1(EPOLL_CLOEXEC);
    if (efd < 0)
        FERRY_WARN_LIMITED("%s: epoll_create1 for the process' watch over the out-of-band "
                           "sockets failed: %s; each comm reads its socket every millisecond "
                           "instead (raise the open-file limit if it says EMFILE)", who,
                           strerror(errno));
    ferry_ib_oob_pid = getpid();
    atomic_store(&ferry_ib_oob_efd, efd);
    return efd;
}

static int ferry_ib_oob_slot_locked(uint32_t *slot_p)
{
    uint32_t c;

    if (ferry_ib_oob_nfree > 0) {
        *slot_p = ferry_ib_oob_free[--ferry_ib_oob_nfree];
        return 0;
    }
    c = ferry_ib_oob_nslots / FERRY_IB_OOB_CHUNK;
    if (c >= FERRY_IB_OOB_CHUNKS)
        return -1;
    if (atomic_load(&ferry_ib_oob_chunks[c]) == NULL) {
        _Atomic uint8_t *chunk = calloc(FERRY_IB_OOB_CHUNK, sizeof(*chunk));

        if (chunk == NULL)
            return -1;
        atomic_store_explicit(&ferry_ib_oob_chunks[c], chunk, memory_order_release);
    }
    *slot_p = ferry_ib_oob_nslots++;
    return 0;
}

static void ferry_ib_oob_give_back_locked(uint32_t slot)
{
    if (ferry_ib_oob_nfree == ferry_ib_oob_free_cap) {
        uint32_t cap = ferry_ib_oob_free_cap ? 2 * ferry_ib_oob_free_cap : 64;
        uint32_t *f = realloc(ferry_ib_oob_free, cap * sizeof(*f));

        if (f == NULL)
            return; /* The slot is lost to reuse, nothing else. */
        ferry_ib_oob_free = f;
        ferry_ib_oob_free_cap = cap;
    }
    ferry_ib_oob_free[ferry_ib_oob_nfree++] = slot;
}

ferry_ib_oob_watch_t ferry_ib_oob_watch_add(int fd, const char *who)
{
    struct epoll_event ev;
    uint32_t slot;
    int efd;

    if (fd < 0)
        return 0;
    pthread_mutex_lock(&ferry_ib_oob_lock);
    efd = ferry_ib_oob_efd_locked(who);
    if (efd < 0 || ferry_ib_oob_slot_locked(&slot) != 0) {
        pthread_mutex_unlock(&ferry_ib_oob_lock);
        return 0;
    }
    /* Unmarked: epoll reports at once what was there before the socket joined the set. */
    atomic_store(ferry_ib_oob_mark(slot + 1), 0);
    memset(&ev, 0, sizeof(ev));
    ev.events = FERRY_IB_OOB_EVMASK;
    ev.data.u32 = slot + 1;
    if (epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        FERRY_WARN_LIMITED("%s: epoll_ctl(ADD) of its out-of-band socket (fd %d) failed: %s; "
                           "this comm reads its socket every millisecond instead", who, fd,
                           strerror(errno));
        ferry_ib_oob_give_back_locked(slot);
        pthread_mutex_unlock(&ferry_ib_oob_lock);
        return 0;
    }
    ferry_ib_oob_live++;
    pthread_mutex_unlock(&ferry_ib_oob_lock);
    return slot + 1;
}

void ferry_ib_oob_watch_del(ferry_ib_oob_watch_t w, int fd)
{
    if (w == 0)
        return;
    pthread_mutex_lock(&ferry_ib_oob_lock);
    if (fd >= 0 && ferry_ib_oob_pid == getpid())
        (void)epoll_ctl(atomic_load(&ferry_ib_oob_efd), EPOLL_CTL_DEL, fd, NULL);
    ferry_ib_oob_give_back_locked(w - 1);
    /*
     * The last one out closes the set: a process without comms keeps no
     * descriptor of ours. A poll racing with this asks a closed descriptor
     * (EBADF) or the next set, and either way marks nothing wrongly.
     */
    if (ferry_ib_oob_live > 0 && --ferry_ib_oob_live == 0 && ferry_ib_oob_pid == getpid()) {
        close(atomic_exchange(&ferry_ib_oob_efd, -1));
    }
    pthread_mutex_unlock(&ferry_ib_oob_lock);
}

/* Once per period, by whichever thread gets there first: one epoll_wait marks every ready socket. */
static void ferry_ib_oob_poll(uint64_t now_ns)
{
    struct epoll_event evs[FERRY_IB_OOB_EVENTS];
    uint64_t next = atomic_load_explicit(&ferry_ib_oob_next_ns, memory_order_relaxed);
    int efd = atomic_load_explicit(&ferry_ib_oob_efd, memory_order_relaxed);
    int k, i, n = FERRY_IB_OOB_EVENTS;

    if (now_ns < next || efd < 0 ||
        !atomic_compare_exchange_strong(&ferry_ib_oob_next_ns, &next,
                                        now_ns + FERRY_IB_OOB_WATCH_NS))
        return;
    atomic_fetch_add_explicit(&ferry_ib_oob_npolls, 1, memory_order_relaxed);
    for (k = 0; k < FERRY_IB_OOB_BATCHES && n == FERRY_IB_OOB_EVENTS; k++) {
        n = epoll_wait(efd, evs, FERRY_IB_OOB_EVENTS, 0);
        for (i = 0; i < n; i++) {
            _Atomic uint8_t *m = ferry_ib_oob_mark(evs[i].data.u32);

            if (m != NULL)
                atomic_store_explicit(m, 1, memory_order_release);
        }
    }
}

int ferry_ib_oob_watch_take(ferry_ib_oob_watch_t w, uint64_t now_ns)
{
    _Atomic uint8_t *m;

    if (w == 0)
        return 1;
    ferry_ib_oob_poll(now_ns);
    m = ferry_ib_oob_mark(w);
    return m == NULL || atomic_exchange_explicit(m, 0, memory_order_acq_rel) != 0;
}

int ferry_ib_oob_watch_rearm(ferry_ib_oob_watch_t w, int fd)
{
    struct epoll_event ev;

    if (w == 0)
        return 0;
    memset(&ev, 0, sizeof(ev));
    ev.events = FERRY_IB_OOB_EVMASK;
    ev.data.u32 = w;
    /* A socket still readable (more than one read's worth) is reported again at once. */
    return epoll_ctl(atomic_load(&ferry_ib_oob_efd), EPOLL_CTL_MOD, fd, &ev) == 0 ? 0 : errno;
}

/* dlclose: nothing of the watch outlives the library (no comm does either). */
__attribute__((destructor)) static void ferry_ib_oob_watch_unload(void)
{
    int c, efd = atomic_exchange(&ferry_ib_oob_efd, -1);

    if (efd >= 0 && ferry_ib_oob_pid == getpid())
        close(efd);
    for (c = 0; c < FERRY_IB_OOB_CHUNKS; c++)
        free((void *)atomic_exchange(&ferry_ib_oob_chunks[c], NULL));
    free(ferry_ib_oob_free);
    ferry_ib_oob_free = NULL;
    ferry_ib_oob_nfree = ferry_ib_oob_free_cap = 0;
    ferry_ib_oob_nslots = 0;
    ferry_ib_oob_live = 0;
}

uint64_t ferry_ib_oob_watch_polls(void)
{
    return atomic_load(&ferry_ib_oob_npolls);
}
