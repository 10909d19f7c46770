/*
 * Logging through NCCL's logger (the ncclDebugLogger_t captured at init), or
 * to stderr when NCCL gave none. Key lines are tagged INIT|NET so they show
 * with NCCL's default NCCL_DEBUG_SUBSYS.
 */
#ifndef FERRY_CORE_LOG_H
#define FERRY_CORE_LOG_H

/* Same shape as ncclDebugLogger_t; src/nccl passes NCCL's pointer through. */
typedef void (*ferry_log_fn_t)(int level, unsigned long flags, const char *file,
                               int line, const char *fmt, ...);

/* Levels and subsystem flags: NCCL's values (ncclDebugLogLevel / SubSys). */
#define FERRY_LOG_WARN  2
#define FERRY_LOG_INFO  3
#define FERRY_LOG_TRACE 5
#define FERRY_LOG_INIT  0x1UL
#define FERRY_LOG_NET   0x10UL
#define FERRY_LOG_ENV   0x80UL
#define FERRY_LOG_TUNING 0x40UL

/* Remember NCCL's logger; NULL keeps the current one (stderr if none). */
void ferry_log_set(ferry_log_fn_t fn);

void ferry_log(int level, unsigned long flags, const char *file, int line,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Every ferry line starts with "NET/ferry : " so users can grep for it. */
#define FERRY_WARN(_fmt, ...) \
    ferry_log(FERRY_LOG_WARN, FERRY_LOG_INIT | FERRY_LOG_NET, __FILE__, __LINE__, \
              "NET/ferry : " _fmt, ##__VA_ARGS__)
#define FERRY_INFO(_flags, _fmt, ...) \
    ferry_log(FERRY_LOG_INFO, (_flags), __FILE__, __LINE__, "NET/ferry : " _fmt, ##__VA_ARGS__)
#ifdef FERRY_ENABLE_TRACE
#define FERRY_TRACE(_fmt, ...) \
    ferry_log(FERRY_LOG_TRACE, FERRY_LOG_NET, __FILE__, __LINE__, "NET/ferry : " _fmt, ##__VA_ARGS__)
#else
#define FERRY_TRACE(_fmt, ...) do { } while (0)
#endif

#endif
