/*
 * The CPU budget checked against the local ranks' real masks (sock_board.h).
 *
 * The file lives in /dev/shm (memory, gone at reboot) under the job's key
 * and the user's uid (core/mask_board.h). Removal at finalize: every rank
 * clears its own slot and the one that finds no live rank's slot left
 * removes the file: the last to leave, found without waiting for anyone.
 * The creator could not remove it safely (a sibling may still read it) and
 * may not even know it created it (every rank opens with O_CREAT). A job
 * that crashes leaves the file behind; the next job has another key, and a
 * slot counts only while the pid in it lives, so a stale file under a
 * reused key is overwritten slot by slot and ignored where not.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/live.h"
#include "core/log.h"
#include "core/mask_board.h"
#include "proxy/pool.h"
#include "socket/sock.h"
#include "socket/sock_board.h"

#define FERRY_SOCK_BOARD_DIR "/dev/shm"

static struct {
    pthread_mutex_t     lock;
    atomic_int          pending;   /* 1: published at this init, the board not read yet. */
    int                 published; /* 1: this process has a slot to clear at finalize. */
    int                 index;     /* Its slot: the local rank. */
    int                 nranks;    /* Slots the board has: the local ranks. */
    cpu_set_t           mask;      /* The mask published. */
    char                path[PATH_MAX];
    ferry_sock_config_t raw;       /* The config as read at init, before the derivation. */
} ferry_sock_board = {.lock = PTHREAD_MUTEX_INITIALIZER};

void ferry_sock_board_publish(const ferry_sock_config_t *raw)
{
    char why[PATH_MAX + 128];

    pthread_mutex_lock(&ferry_sock_board.lock);
    atomic_store_explicit(&ferry_sock_board.pending, 0, memory_order_relaxed);
    if (raw->local_ranks <= 1)
        goto out; /* Nobody to compare with. */
    if (raw->ignore_cpu_affinity) {
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget: the %d local ranks' masks are "
                   "not compared (NCCL_IGNORE_CPU_AFFINITY sets them aside: every local rank "
                   "shares the online CPUs)", raw->local_ranks);
        goto out;
    }
    if (raw->local_index < 0) {
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget: the %d local ranks' masks are "
                   "not compared (%s gave the count, but no launcher variable gave this rank's "
                   "place among them); the estimate stands", raw->local_ranks,
                   raw->local_ranks_src != NULL ? raw->local_ranks_src : "?");
        goto out;
    }
    if (!ferry_mask_board_path(FERRY_SOCK_BOARD_DIR, ferry_sock_board.path,
                               sizeof(ferry_sock_board.path))) {
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget: the %d local ranks' masks are "
                   "not compared (no job key: none of PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid, "
                   "SLURM_JOB_ID with SLURM_STEP_ID, TORCHELASTIC_RUN_ID is set); the estimate "
                   "stands", raw->local_ranks);
        goto out;
    }
    if (ferry_sock_board.published && ferry_sock_board.index != raw->local_index) {
        /* A re-init that found another place: the old slot is not this rank's any more. */
        (void)ferry_mask_board_leave(ferry_sock_board.path, ferry_sock_board.index,
                                     ferry_sock_board.nranks, why, sizeof(why));
        ferry_sock_board.published = 0;
    }
    if (sched_getaffinity(0, sizeof(ferry_sock_board.mask), &ferry_sock_board.mask) != 0) {
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget: this rank's mask could not be "
                   "read (sched_getaffinity: %s), so it is not compared with the other %d local "
                   "ranks'; the estimate stands", strerror(errno), raw->local_ranks - 1);
        goto out;
    }
    if (!ferry_mask_board_publish(ferry_sock_board.path, raw->local_index,
                                  &ferry_sock_board.mask, why, sizeof(why))) {
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget: this rank's mask could not be "
                   "published for the other %d local ranks (%s); the estimate stands",
                   raw->local_ranks - 1, why);
        goto out;
    }
    ferry_sock_board.published = 1;
    ferry_sock_board.index = raw->local_index;
    ferry_sock_board.nranks = raw->local_ranks;
    ferry_sock_board.raw = *raw;
    atomic_store_explicit(&ferry_sock_board.pending, 1, memory_order_release);
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget: this rank's mask (%d CPUs) published "
               "as local rank %d of %d (%s) in %s; compared with the others' at the first "
               "listen or connect", CPU_COUNT(&ferry_sock_board.mask), raw->local_index,
               raw->local_ranks, raw->local_ranks_src != NULL ? raw->local_ranks_src : "?",
               ferry_sock_board.path);
out:
    pthread_mutex_unlock(&ferry_sock_board.lock);
}

/* "disjoint, 2 CPUs each" / "8 share these 16 CPUs". */
static void ferry_sock_board_result(int sharers, int ncpus, char *buf, size_t len)
{
    if (sharers <= 1)
        snprintf(buf, len, "disjoint, %d CPU%s each", ncpus, ncpus == 1 ? "" : "s");
    else
        snprintf(buf, len, "%d share %s %d CPU%s", sharers, ncpus == 1 ? "this" : "these", ncpus,
                 ncpus == 1 ? "" : "s");
}

/* The board read and, where it is complete, the budget derived again; under the lock. */
static void ferry_sock_board_read_locked(void)
{
    const ferry_sock_config_t *now = &ferry_sock_state.cfg;
    ferry_sock_config_t counted;
    char why[PATH_MAX + 128], result[96];
    int n = ferry_sock_board.nranks, valid, overlap, conns, pool;

    if (!ferry_mask_board_read(ferry_sock_board.path, ferry_sock_board.index, n,
                               &ferry_sock_board.mask, &valid, &overlap, why, sizeof(why))) {
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget checked against the %d local "
                   "ranks' masks: the board could not be read (%s); the estimate stays (%d "
                   "sharing, %d CPU%s)", n, why, now->cpu_sharers, now->ncpus,
                   now->ncpus == 1 ? "" : "s");
        return;
    }
    if (valid < n - 1) {
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget checked against the %d local "
                   "ranks' masks: %d of %d ranks published their masks; the estimate stays (%d "
                   "sharing, %d CPU%s)", n, valid + 1, n, now->cpu_sharers, now->ncpus,
                   now->ncpus == 1 ? "" : "s");
        return;
    }
    counted = ferry_sock_board.raw;
    counted.cpu_sharers_known = overlap + 1;
    ferry_sock_config_derive(&counted);
    ferry_sock_board_result(counted.cpu_sharers, counted.ncpus_given, result, sizeof(result));
    conns = (int)(ferry_live_count_kind(FERRY_LIVE_SEND) + ferry_live_count_kind(FERRY_LIVE_RECV) +
                  ferry_live_count_kind(FERRY_LIVE_LISTEN));
    pool = ferry_px_pool_size();
    if (conns > 0 || pool > 0) {
        /*
         * Comms made with the init numbers, or a pool sized by them: changing
         * now would mix them. Not reached through the API today (every
         * listen and connect checks first, and an init while comms linger
         * revives the backend without a new init, core/api.c); kept so a
         * later entry point that makes comms without checking stays safe.
         */
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget checked against the %d local "
                   "ranks' masks: %s; budget %d CPU%s, but the streams and helper threads "
                   "chosen at init for %d CPU%s stay (%s)", n, result, counted.ncpus,
                   counted.ncpus == 1 ? "" : "s", now->ncpus, now->ncpus == 1 ? "" : "s",
                   pool > 0 ? "the helper pool has started" : "socket comms already use them");
        return;
    }
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget checked against the %d local ranks' "
               "masks: %s; budget %d CPU%s (the estimate said %d sharing, %d CPU%s)", n, result,
               counted.ncpus, counted.ncpus == 1 ? "" : "s", now->cpu_sharers, now->ncpus,
               now->ncpus == 1 ? "" : "s");
    /*
     * No comm, listen or pool exists (the fast path of every listen and
     * connect waits on pending, which is cleared only after this write).
     */
    ferry_sock_state.cfg = counted;
    ferry_sock_dev_log_budget(&ferry_sock_state.cfg, &ferry_sock_state.core);
}

void ferry_sock_board_check(void)
{
    if (!atomic_load_explicit(&ferry_sock_board.pending, memory_order_acquire))
        return;
    pthread_mutex_lock(&ferry_sock_board.lock);
    if (atomic_load_explicit(&ferry_sock_board.pending, memory_order_relaxed)) {
        ferry_sock_board_read_locked();
        atomic_store_explicit(&ferry_sock_board.pending, 0, memory_order_release);
    }
    pthread_mutex_unlock(&ferry_sock_board.lock);
}

void ferry_sock_board_leave(void)
{
    char why[PATH_MAX + 128];
    int removed;

    pthread_mutex_lock(&ferry_sock_board.lock);
    atomic_store_explicit(&ferry_sock_board.pending, 0, memory_order_relaxed);
    if (ferry_sock_board.published) {
        removed = ferry_mask_board_leave(ferry_sock_board.path, ferry_sock_board.index,
                                         ferry_sock_board.nranks, why, sizeof(why));
        if (why[0] != '\0')
            FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget board: leaving it: %s", why);
        else if (removed)
            FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "CPU budget board %s removed (the last "
                       "local rank to leave)", ferry_sock_board.path);
        ferry_sock_board.published = 0;
    }
    pthread_mutex_unlock(&ferry_sock_board.lock);
}
