/*
 * What the system says, read the way an operator would: the NUMA node of a
 * device's PCI path in sysfs, the CPU mask of the process and of each
 * ferry-* thread (sched_getaffinity), and the thread names in /proc.
 */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "info/info.h"

double ferry_info_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ferry_info_numa_node(const char *pci_path)
{
    char path[600];
    FILE *f;
    int node = -1;

    if (pci_path == NULL || pci_path[0] == '\0')
        return -1;
    snprintf(path, sizeof(path), "%s/numa_node", pci_path);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    if (fscanf(f, "%d", &node) != 1)
        node = -1;
    fclose(f);
    /* The kernel writes -1 when the platform does not say. */
    return node;
}

/* A CPU set as a list of ranges, "0-3,8"; returns the CPU count. */
static int ferry_info_cpu_list(const cpu_set_t *set, char *out, size_t len)
{
    size_t off = 0;
    int cpu, start = -1, count = 0;

    out[0] = '\0';
    for (cpu = 0; cpu <= CPU_SETSIZE; cpu++) {
        int in = cpu < CPU_SETSIZE && CPU_ISSET(cpu, set);

        if (in) {
            count++;
            if (start < 0)
                start = cpu;
            continue;
        }
        if (start < 0 || off >= len)
            continue;
        if (start == cpu - 1)
            off += (size_t)snprintf(out + off, len - off, "%s%d", off ? "," : "", start);
        else
            off += (size_t)snprintf(out + off, len - off, "%s%d-%d", off ? "," : "", start,
                                    cpu - 1);
        start = -1;
    }
    return count;
}

int ferry_info_cpu_mask(int tid, char *out, size_t len)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    if (sched_getaffinity(tid, sizeof(set), &set) != 0) {
        snprintf(out, len, "?");
        return 0;
    }
    return ferry_info_cpu_list(&set, out, len);
}

void ferry_info_threads_snapshot(ferry_info_run_t *run)
{
    DIR *dir = opendir("/proc/self/task");
    struct dirent *e;
    int scanned = 0;

    if (dir == NULL)
        return;
    /* Bounded: a process has far fewer threads than this. */
    while ((e = readdir(dir)) != NULL && scanned++ < 4096) {
        char path[300], name[32] = "";
        FILE *f;
        int i, seen = 0, tid = atoi(e->d_name);

        /* The main thread carries the program's name, not one of ferry's. */
        if (tid <= 0 || tid == (int)getpid())
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(name, sizeof(name), f) == NULL)
            name[0] = '\0';
        fclose(f);
        name[strcspn(name, "\n")] = '\0';
        /* A new thread carries its creator's name until it sets its own. */
        if (strncmp(name, "ferry", 5) != 0 || strcmp(name, "ferry-info") == 0)
            continue;
        for (i = 0; i < run->nthreads; i++)
            seen |= strcmp(run->threads[i].name, name) == 0;
        if (seen || run->nthreads >= FERRY_INFO_MAX_THREADS)
            continue;
        snprintf(run->threads[run->nthreads].name, sizeof(run->threads[0].name), "%s", name);
        ferry_info_cpu_mask(tid, run->threads[run->nthreads].cpus,
                            sizeof(run->threads[0].cpus));
        run->nthreads++;
    }
    closedir(dir);
}
