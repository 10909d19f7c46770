/*
 * The engine's clocks, both CLOCK_MONOTONIC nanoseconds.
 *
 * NCCL's proxy thread calls test() and isend() in a tight loop and each
 * request is stamped three times, so the clock is on its hot path: a vDSO
 * clock_gettime is a fenced rdtscp, a seqlock and a library call, and per
 * proxy-step state those reads add up to what separates ferry from NCCL's
 * IB at small sizes. Where the kernel itself keeps
 * time with the TSC (x86-64, clocksource "tsc"), ferry_px_now_ns() reads
 * the TSC inline and scales it by a rate measured against CLOCK_MONOTONIC;
 * the anchor is renewed once a second (clock.c), so the two never drift
 * apart by more than a few microseconds, and it never goes back.
 * NCCL_FERRY_TSC=0, another clocksource or another architecture: the
 * kernel's CLOCK_MONOTONIC.
 */
#ifndef FERRY_PROXY_CLOCK_H
#define FERRY_PROXY_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* The anchor, under a sequence lock (odd seq: being rewritten; 0: none yet). */
typedef struct {
    _Atomic uint32_t seq;
    _Atomic uint64_t tsc0;     /* TSC at the anchor... */
    _Atomic uint64_t ns0;      /* ...and CLOCK_MONOTONIC then. */
    _Atomic uint64_t mult;     /* ns per tick, 32.32 fixed point. */
    _Atomic uint64_t span;     /* Ticks the anchor serves for (about 1 s). */
} ferry_px_clock_t;

extern ferry_px_clock_t ferry_px_clock;

/* Before the first anchor, or the TSC off: the kernel's clock. Renews an expired anchor. */
uint64_t ferry_px_now_ns_slow(void);
/* 1: ferry_px_now_ns() reads the TSC (after its first 20 ms); 0: the kernel's clock. */
int ferry_px_clock_tsc(void);

#if defined(__x86_64__)
/* The anchor's time at TSC t, into *ns; 0 if it was being rewritten (try again). */
static inline int ferry_px_clock_read(uint32_t s, uint64_t t, uint64_t *ns, int *expired)
{
    /*
     * Acquire loads (plain loads on x86), no fence: the seq load after them
     * cannot move up, and a field the writer already changed (a release
     * store after its odd seq) makes that seq load see the change.
     */
    uint64_t tsc0 = atomic_load_explicit(&ferry_px_clock.tsc0, memory_order_acquire);
    uint64_t ns0 = atomic_load_explicit(&ferry_px_clock.ns0, memory_order_acquire);
    uint64_t mult = atomic_load_explicit(&ferry_px_clock.mult, memory_order_acquire);
    uint64_t span = atomic_load_explicit(&ferry_px_clock.span, memory_order_acquire);

    if (atomic_load_explicit(&ferry_px_clock.seq, memory_order_relaxed) != s)
        return 0;
    /* rdtsc is not ordered after the seq load: a tick before a fresh anchor counts as 0. */
    t = t > tsc0 ? t - tsc0 : 0;
    *expired = t >= span;
    *ns = ns0 + (uint64_t)(((unsigned __int128)t * mult) >> 32);
    return 1;
}
#endif

static inline uint64_t ferry_px_now_ns(void)
{
#if defined(__x86_64__)
    uint32_t s = atomic_load_explicit(&ferry_px_clock.seq, memory_order_acquire);
    uint64_t ns;
    int expired;

    if (s != 0 && (s & 1) == 0 && ferry_px_clock_read(s, __rdtsc(), &ns, &expired) && !expired)
        return ns;
#endif
    return ferry_px_now_ns_slow();
}

/*
 * The kernel's coarse clock, a few ms behind: for checks counted in
 * milliseconds and seconds (stall warning, peer checks). Its vDSO read costs
 * ~7 ns, half the TSC path above, so it stays the kernel's.
 */
static inline uint64_t ferry_px_coarse_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#endif
