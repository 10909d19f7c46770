/*
 * The TSC clock's anchor (clock.h). The first call takes a (TSC,
 * CLOCK_MONOTONIC) pair; the first call 20 ms later measures the TSC's rate
 * from the two pairs and publishes an anchor that serves four times that
 * window; the first call after it expired measures again over the longer
 * window and publishes the next, up to a second each. A pair counts only if
 * the two kernel reads around the rdtsc were close (not preempted in between),
 * and is placed at their midpoint, so each anchor is within about a
 * microsecond of the kernel's clock. One thread rewrites the anchor at a time.
 * A new anchor never starts before where the old one had got to, and its rate
 * is trimmed so that any lead it starts with is gone by its end: the clock
 * never goes back and never runs away from CLOCK_MONOTONIC.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include "proxy/clock.h"

#define FERRY_PX_CLOCK_FIRST_NS 20000000ULL   /* The first rate: over at least 20 ms. */
#define FERRY_PX_CLOCK_MAX_NS   1000000000ULL /* An anchor serves at most 1 s... */
#define FERRY_PX_CLOCK_GROWTH   4             /* ...and at most 4x the window its rate came from. */
#define FERRY_PX_CLOCK_PAIR_NS  2000ULL       /* A pair's kernel reads at most this far apart. */
#define FERRY_PX_CLOCKSOURCE "/sys/devices/system/clocksource/clocksource0/current_clocksource"

ferry_px_clock_t ferry_px_clock;

static pthread_once_t ferry_px_clock_once = PTHREAD_ONCE_INIT;
static int ferry_px_clock_on;            /* Decided once: the TSC may be used. */
static atomic_flag ferry_px_clock_busy = ATOMIC_FLAG_INIT;
static uint64_t ferry_px_clock_prev_tsc; /* The last pair used, under ferry_px_clock_busy. */
static uint64_t ferry_px_clock_prev_ns;

static uint64_t ferry_px_os_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The TSC is the kernel's own clocksource (one rate on every CPU), and not turned off. */
static void ferry_px_clock_decide(void)
{
#if defined(__x86_64__)
    const char *env = getenv("NCCL_FERRY_TSC");
    char src[32] = "";
    FILE *f;

    if (env != NULL && strcmp(env, "0") == 0)
        return;
    f = fopen(FERRY_PX_CLOCKSOURCE, "r");
    if (f == NULL)
        return;
    if (fgets(src, sizeof(src), f) == NULL)
        src[0] = '\0';
    fclose(f);
    ferry_px_clock_on = strcmp(src, "tsc\n") == 0 || strcmp(src, "tsc") == 0;
#endif
}

int ferry_px_clock_tsc(void)
{
    pthread_once(&ferry_px_clock_once, ferry_px_clock_decide);
    return ferry_px_clock_on;
}

#if defined(__x86_64__)
/* A (TSC, CLOCK_MONOTONIC) pair taken close together; 0 if every try was interrupted. */
static int ferry_px_clock_pair(uint64_t *tsc, uint64_t *ns)
{
    int i;

    for (i = 0; i < 4; i++) {
        uint64_t a = ferry_px_os_ns(CLOCK_MONOTONIC);
        uint64_t t = __rdtsc();
        uint64_t b = ferry_px_os_ns(CLOCK_MONOTONIC);

        if (b - a <= FERRY_PX_CLOCK_PAIR_NS) {
            *tsc = t;
            *ns = a + (b - a) / 2;
            return 1;
        }
    }
    return 0;
}

/* The anchor's time at TSC t, waiting out a rewrite; 0 if there is no anchor. */
static int ferry_px_clock_at(uint64_t t, uint64_t *ns)
{
    int expired, i;

    for (i = 0; i < 1000; i++) {
        uint32_t s = atomic_load_explicit(&ferry_px_clock.seq, memory_order_acquire);

        if (s == 0)
            return 0;
        if ((s & 1) == 0 && ferry_px_clock_read(s, t, ns, &expired))
            return 1;
    }
    return 0;
}

/*
 * Publish the anchor for pair (tsc, ns), the rate (ns per tick, 32.32)
 * measured over window_ns. Only the thread holding ferry_px_clock_busy.
 */
static void ferry_px_clock_publish(uint64_t tsc, uint64_t ns, uint64_t rate, uint64_t window_ns)
{
    uint32_t s = atomic_load_explicit(&ferry_px_clock.seq, memory_order_relaxed);
    uint64_t span_ns = window_ns * FERRY_PX_CLOCK_GROWTH, span, start = ns, mult = rate, old;

    if (span_ns > FERRY_PX_CLOCK_MAX_NS)
        span_ns = FERRY_PX_CLOCK_MAX_NS;
    span = (uint64_t)(((unsigned __int128)span_ns << 32) / rate);
    if (s != 0 && ferry_px_clock_at(tsc, &old) && old > ns && old - ns < span_ns / 2) {
        /* Start where the old anchor had got to, and lose that lead over this one's span. */
        start = old;
        mult = (uint64_t)(((unsigned __int128)(span_ns - (old - ns)) << 32) / span);
    }
    /* Release stores (clock.h says why the readers need no fence). */
    atomic_store_explicit(&ferry_px_clock.seq, s + 1, memory_order_relaxed);
    atomic_store_explicit(&ferry_px_clock.tsc0, tsc, memory_order_release);
    atomic_store_explicit(&ferry_px_clock.ns0, start, memory_order_release);
    atomic_store_explicit(&ferry_px_clock.mult, mult, memory_order_release);
    atomic_store_explicit(&ferry_px_clock.span, span, memory_order_release);
    atomic_store_explicit(&ferry_px_clock.seq, s + 2, memory_order_release);
}

/* Take a pair; publish a new anchor if the window since the last one is long enough. */
static void ferry_px_clock_renew(void)
{
    uint64_t tsc, ns;

    if (!ferry_px_clock_pair(&tsc, &ns))
        return;
    if (ferry_px_clock_prev_ns == 0 || tsc <= ferry_px_clock_prev_tsc ||
        ns <= ferry_px_clock_prev_ns) {
        ferry_px_clock_prev_tsc = tsc;
        ferry_px_clock_prev_ns = ns;
        return;
    }
    if (ns - ferry_px_clock_prev_ns < FERRY_PX_CLOCK_FIRST_NS)
        return;
    ferry_px_clock_publish(tsc, ns,
                           (uint64_t)(((unsigned __int128)(ns - ferry_px_clock_prev_ns) << 32) /
                                      (tsc - ferry_px_clock_prev_tsc)),
                           ns - ferry_px_clock_prev_ns);
    ferry_px_clock_prev_tsc = tsc;
    ferry_px_clock_prev_ns = ns;
}
#endif

uint64_t ferry_px_now_ns_slow(void)
{
#if defined(__x86_64__)
    uint64_t ns;

    if (ferry_px_clock_tsc()) {
        if (!atomic_flag_test_and_set(&ferry_px_clock_busy)) {
            ferry_px_clock_renew();
            atomic_flag_clear(&ferry_px_clock_busy);
        }
        /* Once anchored, always the anchor's time (an expired one still serves): never back. */
        if (ferry_px_clock_at(__rdtsc(), &ns))
            return ns;
    }
#endif
    return ferry_px_os_ns(CLOCK_MONOTONIC);
}
