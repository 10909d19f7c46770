/*
 * Helper placement away from the posting thread (worker_place.h).
 *
 * Why: a helper sleeps in poll() and is woken by its socket; the scheduler
 * tends to run the wakee on the waker's core, which on a two-CPU rank is the
 * core of NCCL's proxy thread, while the other core runs the application's
 * waiting main thread. The helpers then take turns with the proxy thread,
 * and the second core only runs that thread's yielding wait.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "core/log.h"
#include "proxy/worker_place.h"

void ferry_px_place_start(ferry_px_worker_t *w)
{
    /* After the worker's start placed it near the NIC, or left it the process' mask. */
    atomic_store_explicit(&w->placed_for, -1, memory_order_relaxed);
    if (pthread_getaffinity_np(pthread_self(), sizeof(w->base_cpus), &w->base_cpus) != 0)
        CPU_ZERO(&w->base_cpus);
}

void ferry_px_place_follow(ferry_px_worker_t *w)
{
    ferry_px_stream_t *comm = w->comm;
    int cpu = atomic_load_explicit(&comm->caller_cpu, memory_order_relaxed);
    cpu_set_t set;
    char desc[160];
    int rc;

    if (cpu < 0 || cpu == atomic_load_explicit(&w->placed_for, memory_order_relaxed))
        return;
    atomic_store_explicit(&w->placed_for, cpu, memory_order_relaxed);
    set = w->base_cpus;
    if (cpu < CPU_SETSIZE)
        CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) == 0)
        set = w->base_cpus; /* One CPU: nowhere else to go. */
    if (CPU_COUNT(&set) == 0)
        return;
    rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc == 0) {
        ferry_px_stat_add(&w->stats.placed, 1);
        return;
    }
    ferry_px_ring_describe(&comm->ring, desc, sizeof(desc));
    FERRY_INFO(FERRY_LOG_NET, "%s: helper thread %d could not keep off CPU %d, where NCCL's "
               "thread posts from (%s); it stays on the CPUs it had, beside that thread", desc,
               w->index, cpu, strerror(rc));
}
