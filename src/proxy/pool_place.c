/*
 * Where pool threads run (pool.h).
 *
 * Near the NIC: a client may bring the CPUs near its NIC. One pool serves
 * the comms of every NIC of the process, so a thread cannot sit near each of
 * them; it runs on the union of the sets its clients brought. That keeps
 * the threads off CPUs near no NIC in use (the far socket of a two-socket
 * host when every NIC hangs off one) without pinning the traffic of one NIC
 * to the other's CPUs. A process with one NIC, the common case (one rank
 * per GPU, one NIC per GPU), gets exactly that NIC's CPUs.
 *
 * Away from the posting CPU (place_away): a helper woken by its socket tends
 * to run on its waker's core, which on a two-CPU rank is the core of NCCL's
 * proxy thread, while the other core runs the application's waiting main
 * thread. With a pool the threads follow the process' last posting CPU (one
 * proxy thread per process posts for every comm).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "core/log.h"
#include "proxy/clock.h"
#include "proxy/pool_impl.h"
#include "proxy/ring.h"

static _Atomic int ferry_px_pool_caller_cpu = -1;

void ferry_px_pool_place_init(void)
{
    atomic_store_explicit(&ferry_px_pool_caller_cpu, -1, memory_order_relaxed);
}

void ferry_px_pool_note_caller(int cpu)
{
    if (cpu >= 0 && cpu != atomic_load_explicit(&ferry_px_pool_caller_cpu, memory_order_relaxed))
        atomic_store_explicit(&ferry_px_pool_caller_cpu, cpu, memory_order_relaxed);
}

void ferry_px_pool_place_add(ferry_px_pool_t *pool, const ferry_px_pool_want_t *want)
{
    cpu_set_t both;

    if (!want->has_cpus || CPU_COUNT(&want->cpus) == 0)
        return;
    pthread_mutex_lock(&pool->cpus_lock);
    CPU_OR(&both, &pool->cpus, &want->cpus);
    if (!pool->has_cpus || !CPU_EQUAL(&both, &pool->cpus)) {
        pool->cpus = pool->has_cpus ? both : want->cpus;
        pool->has_cpus = 1;
        atomic_fetch_add(&pool->cpus_gen, 1);
    }
    pthread_mutex_unlock(&pool->cpus_lock);
}

/* The pool's CPU set changed: run there, and take it as the base place_away cuts from. */
static void ferry_px_pool_place_base(ferry_px_pool_thread_t *t, unsigned gen)
{
    ferry_px_pool_t *pool = t->pool;
    cpu_set_t set;
    int has;

    t->cpus_gen = gen;
    pthread_mutex_lock(&pool->cpus_lock);
    has = pool->has_cpus;
    set = pool->cpus;
    pthread_mutex_unlock(&pool->cpus_lock);
    if (has && pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
        FERRY_INFO(FERRY_LOG_NET, "ferry-pool-%d: could not place helper thread near the NIC; it "
                   "runs anywhere in the process' CPU mask", t->index);
    if (pthread_getaffinity_np(pthread_self(), sizeof(t->base_cpus), &t->base_cpus) != 0)
        CPU_ZERO(&t->base_cpus);
    atomic_store_explicit(&t->placed_for, -1, memory_order_relaxed);
}

void ferry_px_pool_place_follow(ferry_px_pool_thread_t *t)
{
    unsigned gen = atomic_load_explicit(&t->pool->cpus_gen, memory_order_relaxed);
    int cpu, rc;
    cpu_set_t set;

    if (gen != t->cpus_gen || (t->cpus_gen == 0 && CPU_COUNT(&t->base_cpus) == 0))
        ferry_px_pool_place_base(t, gen);
    if (!t->pool->place_away)
        return;
    cpu = atomic_load_explicit(&ferry_px_pool_caller_cpu, memory_order_relaxed);
    if (cpu < 0 || cpu == atomic_load_explicit(&t->placed_for, memory_order_relaxed))
        return;
    atomic_store_explicit(&t->placed_for, cpu, memory_order_relaxed);
    set = t->base_cpus;
    if (cpu < CPU_SETSIZE)
        CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) == 0)
        set = t->base_cpus; /* One CPU: nowhere else to go. */
    if (CPU_COUNT(&set) == 0)
        return;
    rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc == 0) {
        ferry_px_stat_add(&t->stats.placed, 1);
        return;
    }
    FERRY_INFO(FERRY_LOG_NET, "ferry-pool-%d: could not keep off CPU %d, where NCCL's thread "
               "posts from (%s); it stays on the CPUs it had, beside that thread", t->index, cpu,
               strerror(rc));
}
