/*
 * ferry-info --json, for scripts: the same facts as the text output, one
 * JSON document on stdout. Field names are documented in docs/ferry-info.md
 * and are kept stable.
 */
#include <stdio.h>
#include <string.h>

#include "info/info.h"

static void ferry_info_json_str(const char *s)
{
    putchar('"');
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            printf("\\n");
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* "key": "value" (or null for an empty value), with a leading comma unless first. */
static void ferry_info_json_kv(const char *key, const char *value, int first)
{
    printf("%s\"%s\": ", first ? "" : ", ", key);
    if (value == NULL || value[0] == '\0')
        printf("null");
    else
        ferry_info_json_str(value);
}

static void ferry_info_json_config(const ferry_info_run_t *r)
{
    const char *cur = r->config_line;
    char name[128], value[600], source[16];
    int bound = 0, first = 1;

    printf(", \"config\": [");
    while (bound++ < 256 && ferry_info_config_next(&cur, name, sizeof(name), value,
                                                    sizeof(value), source, sizeof(source))) {
        printf("%s{", first ? "" : ", ");
        ferry_info_json_kv("name", name, 1);
        ferry_info_json_kv("value", value, 0);
        ferry_info_json_kv("source", source, 0);
        printf("}");
        first = 0;
    }
    printf("]");
}

static void ferry_info_json_dev(int i, const ferry_info_dev_t *d)
{
    char ptr[32];

    ferry_info_ptr_words(d->props.ptr_support, ptr, sizeof(ptr));
    printf("{\"index\": %d", i);
    ferry_info_json_kv("name", d->props.name, 0);
    printf(", \"speed_mbps\": %d, \"port\": %d", d->props.speed, d->props.port);
    ferry_info_json_kv("pci_path", d->props.pci_path, 0);
    if (d->numa_node >= 0)
        printf(", \"numa_node\": %d", d->numa_node);
    else
        printf(", \"numa_node\": null");
    ferry_info_json_kv("link_layer", d->link_layer, 0);
    /* null where undefined, as numa_node. */
    if (d->props.rail_id >= 0)
        printf(", \"rail_id\": %d", d->props.rail_id);
    else
        printf(", \"rail_id\": null");
    if (d->props.plane_id >= 0)
        printf(", \"plane_id\": %d", d->props.plane_id);
    else
        printf(", \"plane_id\": null");
    printf(", \"ptr_support\": \"%s\", \"ptr_support_bits\": %d", ptr, d->props.ptr_support);
    printf(", \"max_comms\": %d, \"max_recvs\": %d, \"latency_us\": %.3f", d->props.max_comms,
           d->props.max_recvs, (double)d->props.latency);
    printf(", \"reg_is_global\": %d, \"max_p2p_bytes\": %zu", d->props.reg_is_global,
           d->props.max_p2p_bytes);
    printf(", \"selftest\": {\"ok\": %s", d->ok ? "true" : "false");
    ferry_info_json_kv("verdict", d->verdict, 0);
    printf(", \"bytes_checked\": %zu, \"gbps\": %.3f, \"rtt_us\": %.2f, \"rtt_iters\": %d}}",
           d->bytes_checked, d->bw_gbps, d->rtt_us, d->rtt_iters);
}

static void ferry_info_json_run(const ferry_info_run_t *r)
{
    int i;

    printf("{");
    ferry_info_json_kv("backend_asked", r->backend_asked, 1);
    ferry_info_json_kv("backend", r->backend, 0);
    ferry_info_json_kv("version", r->version, 0);
    printf(", \"init_ok\": %s, \"optional\": %s", r->init_ok ? "true" : "false",
           r->optional ? "true" : "false");
    ferry_info_json_kv("error", r->init_error, 0);
    ferry_info_json_kv("choice", r->choice_line, 0);
    ferry_info_json_kv("backend_line", r->backend_line, 0);
    ferry_info_json_kv("config_line", r->config_line, 0);
    ferry_info_json_config(r);
    printf(", \"warnings\": [");
    for (i = 0; i < r->nwarns; i++) {
        printf("%s", i ? ", " : "");
        ferry_info_json_str(r->warns[i]);
    }
    printf("]");
    ferry_info_json_kv("cpus", r->cpus, 0);
    printf(", \"ncpus\": %d, \"cpu_quota\": ", r->ncpus);
    if (r->quota.quota_us > 0) {
        printf("{\"quota_us\": %lld, \"period_us\": %lld, \"cpus\": %d", r->quota.quota_us,
               r->quota.period_us, ferry_cpu_quota_cpus(&r->quota));
        ferry_info_json_kv("file", r->quota.file, 0);
        printf("}");
    } else {
        printf("null");
    }
    printf(", \"threads\": [");
    for (i = 0; i < r->nthreads; i++) {
        printf("%s{", i ? ", " : "");
        ferry_info_json_kv("name", r->threads[i].name, 1);
        ferry_info_json_kv("cpus", r->threads[i].cpus, 0);
        printf("}");
    }
    printf("], \"ndev\": %d, \"devices\": [", r->ndev);
    for (i = 0; i < r->ndev && i < FERRY_INFO_MAX_DEVS; i++) {
        printf("%s", i ? ", " : "");
        ferry_info_json_dev(i, &r->devs[i]);
    }
    printf("], \"healthy\": %s, \"degraded\": %s", r->healthy ? "true" : "false",
           r->degraded ? "true" : "false");
    ferry_info_json_kv("degraded_reason", r->degraded_reason, 0);
    printf("}");
}

void ferry_info_print_json(const ferry_info_plugin_t *p, const ferry_info_run_t *runs, int nruns,
                           ferry_info_verdict_t verdict, const char *error)
{
    int i;

    printf("{\"ferry_info_version\": \"%s\", \"plugin\": {", FERRY_VERSION_STRING);
    ferry_info_json_kv("requested", p->requested, 1);
    ferry_info_json_kv("path", p->path, 0);
    ferry_info_json_kv("name", p->net_name, 0);
    printf(", \"abi_versions\": [");
    for (i = 0; i < p->nversions; i++)
        printf("%s%d", i ? ", " : "", p->versions[i]);
    printf("], \"abi_used\": %d}", p->version);
    ferry_info_json_kv("error", error, 0);
    printf(", \"runs\": [");
    for (i = 0; i < nruns; i++) {
        printf("%s", i ? ", " : "");
        ferry_info_json_run(&runs[i]);
    }
    /* "status" tells degraded from broken; "healthy" stays what exit status 0 means. */
    printf("], \"healthy\": %s, \"status\": \"%s\"",
           verdict == FERRY_INFO_HEALTHY ? "true" : "false",
           verdict == FERRY_INFO_HEALTHY ? "healthy"
           : verdict == FERRY_INFO_DEGRADED ? "degraded" : "unhealthy");
    ferry_info_json_kv("degraded_reason", verdict == FERRY_INFO_DEGRADED && nruns > 0
                                              ? runs[0].degraded_reason : NULL, 0);
    printf("}\n");
}
