/* The proxy thread's PC sampler: pc_sampler.h. */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "pc_sampler.h"

#define PS_MAX (1u << 20) /* 8 MiB of samples: 100 s at 10 kHz. */

static uintptr_t ps_pcs[PS_MAX];
static atomic_uint ps_n;
static atomic_ulong ps_records;
static atomic_int ps_state; /* 0: not armed, 1: arming or armed, 2: reported. */
static unsigned long ps_hz;
static timer_t ps_timer;
static _Thread_local int ps_thread_seen;

static uintptr_t ps_pc_of(const void *ucv)
{
    const ucontext_t *uc = ucv;

#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0;
#endif
}

static void ps_handler(int sig, siginfo_t *si, void *ucv)
{
    unsigned i;

    (void)sig;
    (void)si;
    if (atomic_load_explicit(&ps_state, memory_order_relaxed) != 1)
        return; /* Reported (the samples are being sorted) or never armed. */
    i = atomic_fetch_add_explicit(&ps_n, 1, memory_order_relaxed);
    if (i < PS_MAX)
        ps_pcs[i] = ps_pc_of(ucv);
}

static void ps_arm(void)
{
    const char *s = getenv("FERRY_PROF_SAMPLE_HZ");
    struct sigaction sa;
    struct sigevent sev;
    struct itimerspec its;
    long ns;
    int expected = 0;

    if (s == NULL || (ps_hz = strtoul(s, NULL, 10)) == 0 || ps_hz > 100000)
        return;
    if (!atomic_compare_exchange_strong(&ps_state, &expected, 1))
        return;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = ps_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART; /* The proxy's syscalls resume, as without us. */
    sigemptyset(&sa.sa_mask);
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (sigaction(SIGPROF, &sa, NULL) != 0 ||
        timer_create(CLOCK_MONOTONIC, &sev, &ps_timer) != 0) {
        fprintf(stderr, "ferry-flush-prof: the PC sampler could not start its timer\n");
        return;
    }
    ns = 1000000000L / (long)ps_hz;
    its.it_interval.tv_sec = its.it_value.tv_sec = ns / 1000000000L;
    its.it_interval.tv_nsec = its.it_value.tv_nsec = ns % 1000000000L;
    timer_settime(ps_timer, 0, &its, NULL);
}

void fp_sampler_record(void)
{
    if (!ps_thread_seen) {
        ps_thread_seen = 1;
        ps_arm();
    }
    atomic_fetch_add_explicit(&ps_records, 1, memory_order_relaxed);
}

static int ps_cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;

    return x < y ? -1 : x > y;
}

void fp_sampler_report(FILE *f, int rank)
{
    unsigned n, i, j;
    int expected = 1;
    Dl_info info;

    if (!atomic_compare_exchange_strong(&ps_state, &expected, 2))
        return; /* Never armed, or another comm's finalize reported. */
    timer_delete(ps_timer);
    n = atomic_load(&ps_n);
    n = n < PS_MAX ? n : PS_MAX;
    qsort(ps_pcs, n, sizeof(ps_pcs[0]), ps_cmp);
    for (i = 0; i < n; i = j) {
        for (j = i; j < n && ps_pcs[j] == ps_pcs[i]; j++)
            ;
        if (dladdr((void *)ps_pcs[i], &info) == 0 || info.dli_fname == NULL)
            fprintf(f, "pc_sample: pid=%ld rank=%d dso=? off=0x%" PRIxPTR " sym=? samples=%u\n",
                    (long)getpid(), rank, ps_pcs[i], j - i);
        else
            fprintf(f, "pc_sample: pid=%ld rank=%d dso=%s off=0x%" PRIxPTR " sym=%s samples=%u\n",
                    (long)getpid(), rank, info.dli_fname,
                    ps_pcs[i] - (uintptr_t)info.dli_fbase,
                    info.dli_sname != NULL ? info.dli_sname : "?", j - i);
    }
    fprintf(f, "pc_total: pid=%ld rank=%d samples=%u hz=%lu records=%lu\n", (long)getpid(), rank,
            n, ps_hz, atomic_load(&ps_records));
}
