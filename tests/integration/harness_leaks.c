/*
 * What a test case must give back: fds, threads and resident memory of this
 * process, counted from /proc/self before and after. Threads and fds of a
 * closed comm may take a moment to go (a helper thread leaving its loop, the
 * emulated NIC's threads), so the check waits for them, bounded.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static int fit_count_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    FIT_CHECK(d != NULL, "opendir %s: %s", dir, strerror(errno));
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - (strcmp(dir, "/proc/self/fd") == 0); /* The DIR's own fd. */
}

long fit_rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;

    FIT_CHECK(f != NULL, "fopen /proc/self/statm: %s", strerror(errno));
    FIT_CHECK(fscanf(f, "%ld %ld", &pages, &rss) == 2, "cannot parse /proc/self/statm");
    fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

void fit_leaks_snap(fit_leaks_t *s)
{
    s->fds     = fit_count_dir("/proc/self/fd");
    s->threads = fit_count_dir("/proc/self/task");
    s->rss_kb  = fit_rss_kb();
}

/* The fds of this process, one "N -> target" per line, for the failure message. */
static void fit_list_fds(char *buf, size_t len)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    size_t used = 0;

    buf[0] = '\0';
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL && used + 1 < len) {
        char path[300], target[256];
        ssize_t n;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        n = readlink(path, target, sizeof(target) - 1);
        target[n > 0 ? n : 0] = '\0';
        used += (size_t)snprintf(buf + used, len - used, " %s->%s", e->d_name, target);
    }
    closedir(d);
}

void fit_leaks_check(const fit_leaks_t *before, const char *when)
{
    fit_leaks_t now;
    fit_bound_t b;
    char fds[2048], names[1024];

    fit_bound_init(&b, "fds and threads to go", 5.0, 100000L);
    for (;;) {
        fit_leaks_snap(&now);
        if (now.fds <= before->fds && now.threads <= before->threads)
            break;
        if (!fit_bound_try_step(&b)) {
            fit_list_fds(fds, sizeof(fds));
            fit_count_threads("", names, sizeof(names));
            FIT_FAIL("%s: %d fd(s) and %d thread(s) now, %d and %d before (fds:%s; threads: %s)",
                     when, now.fds, now.threads, before->fds, before->threads, fds, names);
        }
        usleep(10000);
    }
    printf("  leaks %s: fds %d -> %d, threads %d -> %d, rss %ld -> %ld KiB\n", when,
           before->fds, now.fds, before->threads, now.threads, before->rss_kb, now.rss_kb);
}
