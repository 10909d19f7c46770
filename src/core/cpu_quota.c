/*
 * The process' cgroup CPU quota (cpu_quota.h). /proc/self/cgroup names the
 * process' cgroup in each hierarchy, /proc/self/mountinfo where each
 * hierarchy is mounted and which part of it (a container sees its own
 * cgroup as the mount's root); the quota files are read from that
 * directory up to the mount point.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu_quota.h"

#define FERRY_CPU_QUOTA_V2_PERIOD_US 100000 /* cpu.max's period when it names none. */

/* Where one cgroup hierarchy is mounted, and the process' cgroup in it. */
typedef struct ferry_cgroup_at {
    char mount[PATH_MAX]; /* Mount point. */
    char mroot[PATH_MAX]; /* The hierarchy's directory mounted there ("/" for all of it). */
    char path[PATH_MAX];  /* The process' cgroup, from /proc/self/cgroup. */
} ferry_cgroup_at_t;

/* 1 if tok is one of the comma-separated words of list. */
static int ferry_cpu_quota_has_word(const char *list, const char *tok)
{
    size_t n = strlen(tok);

    while (list != NULL && *list != '\0') {
        const char *end = strchr(list, ',');
        size_t len = end != NULL ? (size_t)(end - list) : strlen(list);

        if (len == n && strncmp(list, tok, n) == 0)
            return 1;
        list = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

/* buf = a b c; 0 when that does not fit (such a path is not read). */
static int ferry_cpu_quota_join(char *buf, size_t len, const char *a, const char *b, const char *c)
{
    int n = snprintf(buf, len, "%s%s%s", a, b, c);

    return n >= 0 && (size_t)n < len;
}

static int ferry_cpu_quota_read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    int ok;

    if (f == NULL)
        return 0;
    ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    return ok;
}

/* The process' cgroup in the v1 cpu hierarchy and in the v2 one, from /proc/self/cgroup. */
static void ferry_cpu_quota_paths(const char *root, ferry_cgroup_at_t *v1, ferry_cgroup_at_t *v2)
{
    char file[PATH_MAX], line[PATH_MAX + 128];
    FILE *f;

    if (!ferry_cpu_quota_join(file, sizeof(file), root, "/proc/self/cgroup", "") ||
        (f = fopen(file, "r")) == NULL)
        return;
    /* "hierarchy-id:controllers:path"; v2's line is "0::path". */
    while (fgets(line, sizeof(line), f) != NULL) {
        char *ctl = strchr(line, ':'), *path;

        if (ctl == NULL || (path = strchr(ctl + 1, ':')) == NULL)
            continue;
        *ctl++ = '\0';
        *path++ = '\0';
        path[strcspn(path, "\n")] = '\0';
        if (*ctl == '\0' && strcmp(line, "0") == 0)
            snprintf(v2->path, sizeof(v2->path), "%s", path);
        else if (ferry_cpu_quota_has_word(ctl, "cpu"))
            snprintf(v1->path, sizeof(v1->path), "%s", path);
    }
    fclose(f);
}

/* Where the v1 cpu hierarchy and the v2 hierarchy are mounted, from /proc/self/mountinfo. */
static void ferry_cpu_quota_mounts(const char *root, ferry_cgroup_at_t *v1, ferry_cgroup_at_t *v2)
{
    char file[PATH_MAX], line[2 * PATH_MAX + 1024];
    FILE *f;

    if (!ferry_cpu_quota_join(file, sizeof(file), root, "/proc/self/mountinfo", "") ||
        (f = fopen(file, "r")) == NULL)
        return;
    /* "id parent major:minor root mount-point options [optional...] - fstype source super-options" */
    while (fgets(line, sizeof(line), f) != NULL) {
        char mroot[PATH_MAX], mount[PATH_MAX], fstype[64], super[512];
        const char *dash = strstr(line, " - ");
        ferry_cgroup_at_t *at = NULL;

        if (dash == NULL || sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mount) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", fstype, super) != 2)
            continue;
        if (strcmp(fstype, "cgroup2") == 0)
            at = v2;
        else if (strcmp(fstype, "cgroup") == 0 && ferry_cpu_quota_has_word(super, "cpu"))
            at = v1;
        if (at == NULL || at->mount[0] != '\0')
            continue; /* The first mount of a hierarchy serves. */
        snprintf(at->mount, sizeof(at->mount), "%s", mount);
        snprintf(at->mroot, sizeof(at->mroot), "%s", mroot);
    }
    fclose(f);
}

/* The first line of dir/name; 0 when it cannot be read. */
static int ferry_cpu_quota_read_at(const char *dir, const char *name, char *buf, size_t len)
{
    char file[PATH_MAX];

    return ferry_cpu_quota_join(file, sizeof(file), dir, name, "") &&
           ferry_cpu_quota_read_line(file, buf, len);
}

/* The quota at one cgroup directory: 1 and quota/period when it has one. */
static int ferry_cpu_quota_at(const char *dir, int v2, long long *quota, long long *period)
{
    char buf[128], word[32];
    int n;

    if (v2) {
        if (!ferry_cpu_quota_read_at(dir, "/cpu.max", buf, sizeof(buf)))
            return 0;
        /* "max 100000" (no limit) or "150000 100000". */
        n = sscanf(buf, "%31s %lld", word, period);
        if (n < 1 || strcmp(word, "max") == 0)
            return 0;
        if (n < 2)
            *period = FERRY_CPU_QUOTA_V2_PERIOD_US;
        *quota = strtoll(word, NULL, 10);
    } else {
        if (!ferry_cpu_quota_read_at(dir, "/cpu.cfs_quota_us", buf, sizeof(buf)) ||
            sscanf(buf, "%lld", quota) != 1 || *quota <= 0 ||
            !ferry_cpu_quota_read_at(dir, "/cpu.cfs_period_us", buf, sizeof(buf)) ||
            sscanf(buf, "%lld", period) != 1)
            return 0;
    }
    return *quota > 0 && *period > 0;
}

/*
 * Every level from the process' cgroup up to the mount's root; the tightest
 * quota goes into *q, which may already hold another hierarchy's.
 */
static void ferry_cpu_quota_walk(const char *root, const ferry_cgroup_at_t *at, int v2,
                                ferry_cpu_quota_t *q)
{
    char rel[PATH_MAX], dir[PATH_MAX];
    size_t n = strlen(at->mroot);

    /*
     * The process' cgroup below the mounted directory. When it is not below
     * it (a container without its own cgroup namespace can see its host's
     * path), the mount's root is the nearest level there is to read.
     */
    if (strcmp(at->mroot, "/") == 0)
        snprintf(rel, sizeof(rel), "%s", at->path);
    else if (strncmp(at->path, at->mroot, n) == 0 && (at->path[n] == '/' || at->path[n] == '\0'))
        snprintf(rel, sizeof(rel), "%s", at->path + n);
    else
        rel[0] = '\0';
    for (;;) {
        long long quota, period;
        char *cut;

        n = strlen(rel);
        while (n > 0 && rel[n - 1] == '/')
            rel[--n] = '\0';
        /* quota/period < q->quota_us/q->period_us, without dividing. */
        if (ferry_cpu_quota_join(dir, sizeof(dir), root, at->mount, rel) &&
            ferry_cpu_quota_at(dir, v2, &quota, &period) &&
            (q->quota_us == 0 ||
             (double)quota * (double)q->period_us < (double)q->quota_us * (double)period)) {
            q->quota_us = quota;
            q->period_us = period;
            /* A path too long for the log line is cut there; the quota stands. */
            if (!ferry_cpu_quota_join(q->file, sizeof(q->file), at->mount, rel,
                                      v2 ? "/cpu.max" : "/cpu.cfs_quota_us"))
                q->file[sizeof(q->file) - 1] = '\0';
        }
        if (n == 0 || (cut = strrchr(rel, '/')) == NULL)
            break;
        *cut = '\0';
    }
}

int ferry_cpu_quota_read(const char *root, ferry_cpu_quota_t *q)
{
    ferry_cgroup_at_t v1, v2;

    memset(q, 0, sizeof(*q));
    memset(&v1, 0, sizeof(v1));
    memset(&v2, 0, sizeof(v2));
    ferry_cpu_quota_paths(root, &v1, &v2);
    ferry_cpu_quota_mounts(root, &v1, &v2);
    /* A controller sits in one hierarchy only; a hybrid system may show either. */
    if (v1.mount[0] != '\0' && v1.path[0] != '\0')
        ferry_cpu_quota_walk(root, &v1, 0, q);
    if (v2.mount[0] != '\0' && v2.path[0] != '\0')
        ferry_cpu_quota_walk(root, &v2, 1, q);
    return q->quota_us > 0;
}

int ferry_cpu_quota_cpus(const ferry_cpu_quota_t *q)
{
    long long n;

    if (q->quota_us <= 0 || q->period_us <= 0)
        return 0;
    n = q->quota_us / q->period_us;
    if (n < 1)
        return 1;
    return n > INT_MAX ? INT_MAX : (int)n;
}
