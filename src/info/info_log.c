/*
 * The logger ferry-info hands to init. ferry says at init which backend it
 * chose and why, its version and effective configuration, and what its
 * backend found; ferry-info shows those lines as the plugin wrote them
 * rather than guessing from outside, and keeps the WARNs as the reasons for
 * a failure. Called from any of the plugin's threads.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "info/info.h"

static pthread_mutex_t ferry_info_log_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_info_run_t *ferry_info_log_run;
static int ferry_info_log_verbose;

void ferry_info_log_begin(ferry_info_run_t *run, int verbose)
{
    pthread_mutex_lock(&ferry_info_log_lock);
    ferry_info_log_run = run;
    ferry_info_log_verbose = verbose;
    pthread_mutex_unlock(&ferry_info_log_lock);
}

/* Truncating copy: a long line keeps its head. */
static void ferry_info_copy(char *dst, size_t len, const char *src)
{
    size_t n = strnlen(src, len - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* "ferry 0.1.0, socket backend, config backend=auto(default) ..." */
static void ferry_info_log_config(ferry_info_run_t *run, const char *msg)
{
    const char *cfg = strstr(msg, " backend, config ");
    const char *sp = strchr(msg + 6, ',');

    ferry_info_copy(run->version_line, sizeof(run->version_line), msg);
    if (sp != NULL)
        snprintf(run->version, sizeof(run->version), "%.*s", (int)(sp - (msg + 6)), msg + 6);
    if (cfg != NULL)
        ferry_info_copy(run->config_line, sizeof(run->config_line),
                        cfg + strlen(" backend, config "));
}

static void ferry_info_log_keep(ferry_info_run_t *run, int level, const char *msg)
{
    /* Every ferry line starts with this tag (core/log.h); the rest is what it says. */
    if (strncmp(msg, "NET/ferry : ", 12) == 0)
        msg += 12;
    if (level == NCCL_LOG_WARN) {
        if (run->nwarns < FERRY_INFO_MAX_WARNS)
            ferry_info_copy(run->warns[run->nwarns++], FERRY_INFO_LINE, msg);
        return;
    }
    if (strncmp(msg, "using the ", 10) == 0 && strstr(msg, "(NCCL_FERRY_BACKEND=") != NULL)
        ferry_info_copy(run->choice_line, sizeof(run->choice_line), msg);
    else if (strncmp(msg, "ferry ", 6) == 0 && strstr(msg, " backend, config ") != NULL)
        ferry_info_log_config(run, msg);
    else if (strstr(msg, " backend using") != NULL && run->backend_line[0] == '\0')
        ferry_info_copy(run->backend_line, sizeof(run->backend_line), msg);
}

void ferry_info_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...)
{
    char msg[FERRY_INFO_CONFIG_LINE];
    va_list ap;

    (void)flags;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&ferry_info_log_lock);
    if (ferry_info_log_verbose)
        fprintf(stderr, "ferry-info: plugin %s %s:%d %s\n",
                level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "TRACE",
                file, line, msg);
    if (ferry_info_log_run != NULL && level <= NCCL_LOG_INFO)
        ferry_info_log_keep(ferry_info_log_run, (int)level, msg);
    pthread_mutex_unlock(&ferry_info_log_lock);
}

void ferry_info_log_link_layer(const ferry_info_run_t *run, const char *dev, char *out,
                               size_t len)
{
    char key[80];
    const char *at, *end;

    out[0] = '\0';
    snprintf(key, sizeof(key), "]%s/", dev);
    at = strstr(run->backend_line, key);
    if (at == NULL)
        return;
    at += strlen(key);
    /* "IB", then " ", ";" or "(" where a rail or plane follows. */
    end = at + strcspn(at, " ;(");
    snprintf(out, len, "%.*s", (int)(end - at), at);
}
