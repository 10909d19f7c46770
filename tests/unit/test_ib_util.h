/*
 * What the ib device-half tests share: a logger that keeps every line, so
 * tests check WARN and INFO text exactly, fakeibv's control API reached in
 * the loaded library, and the process' thread count and names.
 */
#ifndef FERRY_TEST_IB_UTIL_H
#define FERRY_TEST_IB_UTIL_H

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "ib/ib_verbs.h"

#define TEST_IB_LOG_MAX 64

static char test_ib_log_lines[TEST_IB_LOG_MAX][1024];
static int test_ib_log_levels[TEST_IB_LOG_MAX];
static int test_ib_log_n;
static pthread_mutex_t test_ib_log_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void __attribute__((format(printf, 5, 6)))
test_ib_log_capture(int level, unsigned long flags, const char *file, int line, const char *fmt,
                    ...)
{
    va_list ap;

    (void)flags;
    (void)file;
    (void)line;
    pthread_mutex_lock(&test_ib_log_lock);
    if (test_ib_log_n < TEST_IB_LOG_MAX) {
        va_start(ap, fmt);
        vsnprintf(test_ib_log_lines[test_ib_log_n], sizeof(test_ib_log_lines[0]), fmt, ap);
        va_end(ap);
        test_ib_log_levels[test_ib_log_n++] = level;
    }
    pthread_mutex_unlock(&test_ib_log_lock);
}

static inline void test_ib_log_reset(void)
{
    pthread_mutex_lock(&test_ib_log_lock);
    test_ib_log_n = 0;
    pthread_mutex_unlock(&test_ib_log_lock);
    ferry_log_set(test_ib_log_capture);
}

/* Number of lines of `level` containing `needle` (NULL: all of that level). */
static inline int test_ib_log_count(int level, const char *needle)
{
    int i, n = 0;

    pthread_mutex_lock(&test_ib_log_lock);
    for (i = 0; i < test_ib_log_n; i++)
        n += test_ib_log_levels[i] == level &&
             (needle == NULL || strstr(test_ib_log_lines[i], needle) != NULL);
    pthread_mutex_unlock(&test_ib_log_lock);
    return n;
}

/* 1 if a line of `level` is exactly `text`. */
static inline int test_ib_log_has(int level, const char *text)
{
    int i, hit = 0;

    pthread_mutex_lock(&test_ib_log_lock);
    for (i = 0; i < test_ib_log_n && !hit; i++)
        hit = test_ib_log_levels[i] == level && strcmp(test_ib_log_lines[i], text) == 0;
    pthread_mutex_unlock(&test_ib_log_lock);
    return hit;
}

/* The first line of `level` containing needle, or "" (for failure messages). */
static inline const char *test_ib_log_find(int level, const char *needle)
{
    int i;

    for (i = 0; i < test_ib_log_n; i++)
        if (test_ib_log_levels[i] == level && strstr(test_ib_log_lines[i], needle) != NULL)
            return test_ib_log_lines[i];
    return "";
}

static inline void test_ib_log_dump(void)
{
    int i;

    for (i = 0; i < test_ib_log_n; i++)
        fprintf(stderr, "  log[%d] %d: %s\n", i, test_ib_log_levels[i], test_ib_log_lines[i]);
}

/* fakeibv_inject of the library ferry loaded (tests/fakeibv/fakeibv.h). */
typedef int (*test_ib_inject_fn_t)(struct ibv_context *ctx, int kind, uint32_t target,
                                   unsigned after, unsigned count, int err);

static inline test_ib_inject_fn_t test_ib_inject_fn(void)
{
    void *h = dlopen(ferry_ibv_loaded_path(), RTLD_NOW | RTLD_NOLOAD);
    void *fn = h != NULL ? dlvsym(h, "fakeibv_inject", "FAKEIBV_1.0") : NULL;
    test_ib_inject_fn_t inject;

    memcpy(&inject, &fn, sizeof(fn));
    return inject;
}

/* Threads of this process, and how many are called `name`. */
static inline int test_ib_threads(const char *name, int *named_p)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    *named_p = 0;
    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        n++;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        f = fopen(path, "r");
        if (f != NULL) {
            if (fgets(comm, sizeof(comm), f) != NULL)
                comm[strcspn(comm, "\n")] = '\0';
            fclose(f);
        }
        *named_p += name != NULL && strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

static inline void test_ib_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

#endif
