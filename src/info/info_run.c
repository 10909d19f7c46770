/*
 * One backend's run, in a child process of its own: NCCL_FERRY_BACKEND set
 * (or left alone for auto), init as NCCL calls it, the devices and their
 * properties, the self-test of each device, finalize. The plugin chooses its
 * backend once per init from the environment; a child per backend keeps the
 * runs apart even if one of them crashes or hangs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/auto_fallback.h"
#include "info/info.h"

static void ferry_info_run_devices(const ferry_info_plugin_t *p, void *ctx,
                                   const ferry_info_opts_t *o, ferry_info_run_t *run)
{
    int i, n = run->ndev < FERRY_INFO_MAX_DEVS ? run->ndev : FERRY_INFO_MAX_DEVS;

    for (i = 0; i < n; i++) {
        ferry_info_dev_t *d = &run->devs[i];
        ncclResult_t rc = ferry_info_net_props(p, i, &d->props);

        d->numa_node = -1;
        if (rc != ncclSuccess) {
            snprintf(d->verdict, sizeof(d->verdict), "FAIL: getProperties(%d) returned %s", i,
                     ferry_info_result_str(rc));
            continue;
        }
        d->numa_node = ferry_info_numa_node(d->props.pci_path);
        if (strcmp(run->backend, "ib") == 0)
            ferry_info_log_link_layer(run, d->props.name, d->link_layer, sizeof(d->link_layer));
        if (o->no_selftest) {
            d->ok = 1;
            snprintf(d->verdict, sizeof(d->verdict), "OK (self-test skipped: --no-selftest)");
            continue;
        }
        ferry_info_selftest(p, ctx, i, run, d);
    }
}

/* "using the socket backend (...)": the backend's name. */
static void ferry_info_run_backend_name(ferry_info_run_t *run)
{
    const char *at = run->choice_line + strlen("using the ");

    if (run->choice_line[0] != '\0')
        snprintf(run->backend, sizeof(run->backend), "%.*s", (int)strcspn(at, " "), at);
}

/* The plugin's WARN that auto passed over a backend meant to run here, if it logged one. */
static void ferry_info_run_degraded(ferry_info_run_t *run)
{
    int i;

    for (i = 0; i < run->nwarns; i++) {
        if (strncmp(run->warns[i], FERRY_AUTO_FALLBACK_HEAD,
                    strlen(FERRY_AUTO_FALLBACK_HEAD)) == 0) {
            run->degraded = 1;
            snprintf(run->degraded_reason, sizeof(run->degraded_reason), "%s", run->warns[i]);
            return;
        }
    }
}

void ferry_info_run(const ferry_info_plugin_t *p, const char *backend, const ferry_info_opts_t *o,
                    ferry_info_run_t *run)
{
    void *ctx = NULL;
    ncclResult_t rc;
    int i;

    memset(run, 0, sizeof(*run));
    snprintf(run->backend_asked, sizeof(run->backend_asked), "%s", backend);
    if (strcmp(backend, "auto") != 0)
        setenv("NCCL_FERRY_BACKEND", backend, 1);
    else if (getenv("NCCL_FERRY_BACKEND") != NULL)
        snprintf(run->backend_asked, sizeof(run->backend_asked), "%s",
                 getenv("NCCL_FERRY_BACKEND"));
    run->ncpus = ferry_info_cpu_mask(0, run->cpus, sizeof(run->cpus));
    (void)ferry_cpu_quota_read("", &run->quota);
    ferry_info_log_begin(run, o->verbose);
    rc = ferry_info_net_init(p, &ctx, ferry_info_logger);
    ferry_info_run_backend_name(run);
    if (rc != ncclSuccess) {
        /* The plugin's first WARN is the reason, in its words. */
        snprintf(run->init_error, sizeof(run->init_error), "init returned %s%s%.900s",
                 ferry_info_result_str(rc), run->nwarns > 0 ? ": " : "",
                 run->nwarns > 0 ? run->warns[0] : "");
        /* What NCCL does after a failed init. */
        (void)ferry_info_net_finalize(p, ctx);
        run->complete = 1;
        return;
    }
    run->init_ok = 1;
    ferry_info_run_degraded(run);
    ferry_info_threads_snapshot(run);
    rc = ferry_info_net_devices(p, &run->ndev);
    if (rc != ncclSuccess || run->ndev <= 0) {
        snprintf(run->init_error, sizeof(run->init_error), "devices returned %s with %d "
                 "device(s); NCCL would fall back to its own transports",
                 ferry_info_result_str(rc), run->ndev);
    } else {
        ferry_info_run_devices(p, ctx, o, run);
    }
    rc = ferry_info_net_finalize(p, ctx);
    if (rc != ncclSuccess && run->init_error[0] == '\0')
        snprintf(run->init_error, sizeof(run->init_error), "finalize returned %s",
                 ferry_info_result_str(rc));
    run->healthy = run->init_error[0] == '\0' && run->ndev > 0;
    for (i = 0; i < run->ndev && i < FERRY_INFO_MAX_DEVS; i++)
        run->healthy &= run->devs[i].ok;
    run->complete = 1;
}
