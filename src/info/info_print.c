/*
 * ferry-info's text output, for people: one block for the plugin, one per
 * backend run, a verdict line per device and one overall line at the end.
 */
#include <stdio.h>
#include <string.h>

#include "info/info.h"

void ferry_info_ptr_words(int bits, char *out, size_t len)
{
    snprintf(out, len, "%s%s%s%s%s", bits & NCCL_PTR_HOST ? "HOST" : "",
             (bits & NCCL_PTR_HOST) && (bits & ~NCCL_PTR_HOST & 0x6) ? "|" : "",
             bits & NCCL_PTR_CUDA ? "CUDA" : "",
             (bits & NCCL_PTR_CUDA) && (bits & NCCL_PTR_DMABUF) ? "|" : "",
             bits & NCCL_PTR_DMABUF ? "DMABUF" : "");
    if (out[0] == '\0')
        snprintf(out, len, "none");
}

int ferry_info_config_next(const char **cursor, char *name, size_t name_len, char *value,
                           size_t value_len, char *source, size_t source_len)
{
    static const char *const srcs[] = {"(default)", "(env)", "(derived)"};
    const char *s = *cursor, *best = NULL, *eq;
    size_t i, best_len = 0;

    while (*s == ' ')
        s++;
    if (*s == '\0')
        return 0;
    /* The nearest "(source)" that ends the token (followed by a space or the end). */
    for (i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
        const char *at = s;
        int bound = 0;

        while (bound++ < 64 && (at = strstr(at, srcs[i])) != NULL) {
            const char *after = at + strlen(srcs[i]);

            if (*after == ' ' || *after == '\0')
                break;
            at = after;
        }
        if (at != NULL && (best == NULL || at < best)) {
            best = at;
            best_len = strlen(srcs[i]);
        }
    }
    eq = strchr(s, '=');
    if (best == NULL || eq == NULL || eq > best)
        return 0;
    snprintf(name, name_len, "%.*s", (int)(eq - s), s);
    snprintf(value, value_len, "%.*s", (int)(best - eq - 1), eq + 1);
    snprintf(source, source_len, "%.*s", (int)(best_len - 2), best + 1);
    *cursor = best + best_len;
    return 1;
}

static void ferry_info_print_config(const ferry_info_run_t *r)
{
    const char *cur = r->config_line;
    char name[128], value[600], source[16];
    int bound = 0;

    if (r->config_line[0] == '\0') {
        printf("  config:    (the plugin logged no effective-config line)\n");
        return;
    }
    printf("  config (value, source):\n");
    while (bound++ < 256 && ferry_info_config_next(&cur, name, sizeof(name), value,
                                                    sizeof(value), source, sizeof(source)))
        printf("    %-28s %-24s %s\n", name, value, source);
}

static void ferry_info_print_dev(int i, const ferry_info_dev_t *d)
{
    char ptr[32], numa[16], rail[24], plane[24];

    ferry_info_ptr_words(d->props.ptr_support, ptr, sizeof(ptr));
    if (d->numa_node >= 0)
        snprintf(numa, sizeof(numa), "%d", d->numa_node);
    else
        snprintf(numa, sizeof(numa), "unknown");
    /* Rail and plane only where the plugin defines them (NCCL_IB_HCA name:port:rail:plane). */
    rail[0] = plane[0] = '\0';
    if (d->props.rail_id >= 0)
        snprintf(rail, sizeof(rail), ", rail %d", d->props.rail_id);
    if (d->props.plane_id >= 0)
        snprintf(plane, sizeof(plane), ", plane %d", d->props.plane_id);
    printf("  device %d: %s\n", i, d->props.name);
    printf("    speed %d Mbps, port %d%s%s%s%s, pciPath %s, NUMA node %s\n", d->props.speed,
           d->props.port, d->link_layer[0] ? ", link layer " : "", d->link_layer, rail, plane,
           d->props.pci_path[0] ? d->props.pci_path : "none", numa);
    printf("    ptrSupport %s, maxComms %d, maxRecvs %d, latency %.1f us, regIsGlobal %d, "
           "maxP2pBytes %zu\n", ptr, d->props.max_comms, d->props.max_recvs,
           (double)d->props.latency, d->props.reg_is_global, d->props.max_p2p_bytes);
    if (d->ok && d->bytes_checked > 0)
        printf("    self-test: OK (%zu bytes checked; 1 MiB each way at once %.2f Gb/s; "
               "8-byte round trip %.1f us, median of %d)\n", d->bytes_checked, d->bw_gbps,
               d->rtt_us, d->rtt_iters);
    else
        printf("    self-test: %s\n", d->verdict);
}

static void ferry_info_print_run(const ferry_info_run_t *r)
{
    int i;

    printf("\nbackend %s (asked for: %s)\n", r->backend[0] ? r->backend : "-", r->backend_asked);
    if (r->version[0])
        printf("  ferry:     %s\n", r->version);
    if (r->choice_line[0])
        printf("  choice:    %s\n", r->choice_line);
    if (r->backend_line[0])
        printf("  found:     %s\n", r->backend_line);
    for (i = 0; i < r->nwarns; i++)
        printf("  WARN:      %s\n", r->warns[i]);
    if (!r->init_ok) {
        printf("  verdict:   %s: %s\n", r->optional ? "not available here" : "FAIL",
               r->init_error);
        return;
    }
    ferry_info_print_config(r);
    printf("  cpus:      %s (%d CPUs in this process' mask)\n", r->cpus, r->ncpus);
    if (r->quota.quota_us > 0)
        printf("  cpu quota: %lld us per %lld us, %d whole CPU%s of time (%s)\n",
               r->quota.quota_us, r->quota.period_us, ferry_cpu_quota_cpus(&r->quota),
               ferry_cpu_quota_cpus(&r->quota) == 1 ? "" : "s", r->quota.file);
    else
        printf("  cpu quota: none (no cgroup CPU limit over this process)\n");
    printf("  threads:  ");
    if (r->nthreads == 0)
        printf(" none (no helper threads started)");
    for (i = 0; i < r->nthreads; i++)
        printf(" %s[cpus %s]", r->threads[i].name, r->threads[i].cpus);
    printf("\n");
    for (i = 0; i < r->ndev && i < FERRY_INFO_MAX_DEVS; i++)
        ferry_info_print_dev(i, &r->devs[i]);
    if (r->init_error[0])
        printf("  verdict:   FAIL: %s\n", r->init_error);
    else if (r->healthy && r->degraded)
        printf("  verdict:   DEGRADED: the devices pass, but not on the backend meant to run "
               "here (the WARN above)\n");
    else
        printf("  verdict:   %s\n", r->healthy ? "OK" : "FAIL: a device failed its self-test");
}

void ferry_info_print_text(const ferry_info_plugin_t *p, const ferry_info_run_t *runs, int nruns,
                           ferry_info_verdict_t verdict)
{
    int i;

    printf("ferry-info %s\n", FERRY_VERSION_STRING);
    printf("plugin:      %s (asked for: %s; struct name \"%s\")\n", p->path, p->requested,
           p->net_name);
    printf("ABI:        ");
    for (i = 0; i < p->nversions; i++)
        printf(" ncclNetPlugin_v%d", p->versions[i]);
    printf(" (driven through v%d, the newest, as NCCL picks)\n", p->version);
    for (i = 0; i < nruns; i++)
        ferry_info_print_run(&runs[i]);
    if (verdict == FERRY_INFO_DEGRADED)
        printf("\ndegraded: %s\n", runs[0].degraded_reason);
    else
        printf("\n%s\n", verdict == FERRY_INFO_HEALTHY ? "healthy" : "NOT healthy");
}
