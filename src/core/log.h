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
/*
 * A WARN that a remote party or a looping caller can trigger again and again
 * (junk connections, a flooding peer, test() on garbage) goes through a limit
 * of its own call site: the first FERRY_LOG_LIMIT_BURST lines of each
 * FERRY_LOG_LIMIT_INTERVAL_S interval print, the rest are counted, and the
 * first line after the interval ends says how many were suppressed.
 */
#define FERRY_LOG_LIMIT_BURST      10
#define FERRY_LOG_LIMIT_INTERVAL_S 10

struct ferry_log_limit {
    unsigned long long window_start_ns; /* start of the current interval; 0 before the first */
    unsigned int printed;               /* lines printed in this interval */
    unsigned long long suppressed;      /* lines held back in this interval */
};

/*
 * Whether a line of this site may print now (1) or is counted (0). When it
 * may and an earlier interval held lines back, *suppressed_out gets their
 * count (else 0), to be reported once. Thread-safe.
 */
int ferry_log_limit_pass(struct ferry_log_limit *lim, unsigned long long *suppressed_out);

/* The same at a given CLOCK_MONOTONIC time in ns (tests step the clock with it). */
int ferry_log_limit_pass_at(struct ferry_log_limit *lim, unsigned long long now_ns,
                            unsigned long long *suppressed_out);

/* Lines the limiter held back since the process started (all sites): for tests and the dump. */
unsigned long long ferry_log_limit_suppressed_total(void);

/* The line that reports how many lines of a site the limit held back. */
#define FERRY_LOG_LIMIT_SUMMARY_(_held, _where) \
    FERRY_WARN("%llu more warnings like the next were suppressed in the last %d s " \
               "(at most %d a site per interval%s)", (_held), FERRY_LOG_LIMIT_INTERVAL_S, \
               FERRY_LOG_LIMIT_BURST, (_where))

#define FERRY_WARN_LIMITED(_fmt, ...) \
    do { \
        static struct ferry_log_limit ferry_lim_; \
        unsigned long long ferry_held_; \
        if (ferry_log_limit_pass(&ferry_lim_, &ferry_held_)) { \
            if (ferry_held_ > 0) \
                FERRY_LOG_LIMIT_SUMMARY_(ferry_held_, ""); \
            FERRY_WARN(_fmt, ##__VA_ARGS__); \
        } \
    } while (0)

/*
 * The same where every event must still be named (a stranger's address): past
 * the limit the line is INFO, marked "(its WARN suppressed)".
 */
#define FERRY_WARN_LIMITED_ELSE_INFO(_fmt, ...) \
    do { \
        static struct ferry_log_limit ferry_lim_; \
        unsigned long long ferry_held_; \
        if (ferry_log_limit_pass(&ferry_lim_, &ferry_held_)) { \
            if (ferry_held_ > 0) \
                FERRY_LOG_LIMIT_SUMMARY_(ferry_held_, "; each is an INFO line"); \
            FERRY_WARN(_fmt, ##__VA_ARGS__); \
        } else { \
            FERRY_INFO(FERRY_LOG_NET, _fmt " (its WARN suppressed)", ##__VA_ARGS__); \
        } \
    } while (0)

#ifdef FERRY_ENABLE_TRACE
#define FERRY_TRACE(_fmt, ...) \
    ferry_log(FERRY_LOG_TRACE, FERRY_LOG_NET, __FILE__, __LINE__, "NET/ferry : " _fmt, ##__VA_ARGS__)
#else
#define FERRY_TRACE(_fmt, ...) do { } while (0)
#endif

#endif
