#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

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
