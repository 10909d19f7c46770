#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "core/log.h"

/*
 * NCCL's logger, stored as an atomic pointer: init threads of several
 * communicators may set it while progress threads log.
 */
static _Atomic(ferry_log_fn_t) ferry_log_fn;

void ferry_log_set(ferry_log_fn_t fn)
{
    if (fn != NULL)
        atomic_store(&ferry_log_fn, fn);
}

/* Without NCCL's logger: WARN always, INFO only when NCCL_DEBUG asks for it. */
static int ferry_log_stderr_wants(int level)
{
    const char *dbg;

    if (level <= FERRY_LOG_WARN)
        return 1;
    dbg = getenv("NCCL_DEBUG");
    if (dbg == NULL)
        return 0;
    if (level == FERRY_LOG_INFO)
        return strcasecmp(dbg, "INFO") == 0 || strcasecmp(dbg, "TRACE") == 0;
    return strcasecmp(dbg, "TRACE") == 0;
}

void ferry_log(int level, unsigned long flags, const char *file, int line,
               const char *fmt, ...)
{
    ferry_log_fn_t fn = atomic_load(&ferry_log_fn);
    int saved_errno = errno;
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (fn != NULL) {
        fn(level, flags, file, line, "%s", msg);
    } else if (ferry_log_stderr_wants(level)) {
        fprintf(stderr, "ferry %s %s\n", level <= FERRY_LOG_WARN ? "WARN" : "INFO", msg);
    }
    errno = saved_errno;
}

/* One lock for every site: the limiter only runs on WARN paths, never per message. */
static pthread_mutex_t ferry_log_limit_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long ferry_log_limit_total;

static unsigned long long ferry_log_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

int ferry_log_limit_pass_at(struct ferry_log_limit *lim, unsigned long long now,
                            unsigned long long *suppressed_out)
{
    const unsigned long long interval_ns = FERRY_LOG_LIMIT_INTERVAL_S * 1000000000ULL;
    int pass;

    *suppressed_out = 0;
    pthread_mutex_lock(&ferry_log_limit_lock);
    if (lim->window_start_ns == 0 || now - lim->window_start_ns >= interval_ns) {
        *suppressed_out = lim->suppressed;
        lim->window_start_ns = now;
        lim->printed = 0;
        lim->suppressed = 0;
    }
    pass = lim->printed < FERRY_LOG_LIMIT_BURST;
    if (pass) {
        lim->printed++;
    } else {
        lim->suppressed++;
        ferry_log_limit_total++;
    }
    pthread_mutex_unlock(&ferry_log_limit_lock);
    return pass;
}

int ferry_log_limit_pass(struct ferry_log_limit *lim, unsigned long long *suppressed_out)
{
    return ferry_log_limit_pass_at(lim, ferry_log_now_ns(), suppressed_out);
}

unsigned long long ferry_log_limit_suppressed_total(void)
{
    unsigned long long n;

    pthread_mutex_lock(&ferry_log_limit_lock);
    n = ferry_log_limit_total;
    pthread_mutex_unlock(&ferry_log_limit_lock);
    return n;
}
