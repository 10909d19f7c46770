/*
 * NCCL_FERRY_BACKEND=auto choosing the socket backend although ib was meant
 * to run (ctest's integ_ib_config_auto_* entries, on fakeibv): the WARN's
 * words, byte for byte where they are ours, and that the job still gets a
 * working socket device; and the quiet cases, where an INFO line is all.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "integ_config_auto.h"

/*
 * init, devices() = 1 and that device is the socket backend's lo; the
 * INFO line that says auto chose socket. Returns the WARN count it saw.
 */
static int config_auto_socket(const char *path, const char *expect_warn)
{
    ncclNetProperties_v11_t props;
    fit_plugin_t p;
    char line[4096];
    void *ctx;
    int ndev = 0, warns;

    if (expect_warn != NULL)
        fit_log_expect(expect_warn);
    fit_plugin_open(&p, path);
    ctx = fit_plugin_init(&p, 0x7a);
    FIT_NCCL(p.net->devices(&ndev));
    FIT_CHECK(ndev == 1, "devices() = %d, wanted the socket backend's one device lo", ndev);
    FIT_NCCL(p.net->getProperties(0, &props));
    FIT_CHECK(strcmp(props.name, "lo") == 0, "device 0 is '%s', wanted lo", props.name);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_INFO, "using the socket backend (NCCL_FERRY_BACKEND=auto",
                           "ib not usable: ", NULL, line, sizeof(line)) >= 0,
              "no INFO line saying auto chose socket and why ib was not usable");
    printf("  INFO: %s\n", line);
    warns = fit_log_warns();
    FIT_NCCL(p.net->finalize(ctx));
    fit_log_check_clean("backend=auto falling back to socket");
    fit_plugin_close(&p);
    fit_check_no_ferry_threads("after dlclose");
    return warns;
}

/* Exactly one WARN, and it is want (the whole line after ferry's tag). */
static void config_auto_one_warn(int warns, const char *want)
{
    char line[4096];

    FIT_CHECK(warns == 1, "%d WARN lines, wanted exactly one", warns);
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, NULL, NULL, NULL, line, sizeof(line)) >= 0,
              "no WARN line");
    printf("  WARN: %s\n", line);
    FIT_CHECK(strstr(line, want) != NULL, "the WARN is not\n    %s\n  but\n    %s", want, line);
}

void config_auto_hca_nosuch(const char *path)
{
    int warns = config_auto_socket(path, "NCCL_IB_HCA=nosuch matches none");

    config_auto_one_warn(warns, "NET/ferry : NCCL_FERRY_BACKEND=auto: using the socket "
                         "backend, not ib: NCCL_IB_HCA=nosuch matches none of the RDMA ports "
                         "fakeib0:1, fakeib1:1; fix NCCL_IB_HCA, or set "
                         "NCCL_FERRY_BACKEND=socket to silence this");
}

void config_auto_vars_no_device(const char *path)
{
    int warns = config_auto_socket(path, "yet NCCL_IB_GID_INDEX=3 is set");
    char line[4096];

    config_auto_one_warn(warns, "NET/ferry : NCCL_FERRY_BACKEND=auto: using the socket "
                         "backend, not ib: no RDMA device (ibv_get_device_list found none in ");
    FIT_CHECK(fit_log_find(0, NCCL_LOG_WARN, NULL, NULL, NULL, line, sizeof(line)) >= 0,
              "no WARN line");
    FIT_CHECK(strstr(line, "), yet NCCL_IB_GID_INDEX=3 is set; install or load the RDMA driver "
                     "and rdma-core, or unset the NCCL_IB_* variables, or set "
                     "NCCL_FERRY_BACKEND=socket to silence this") != NULL,
              "the WARN does not name NCCL_IB_GID_INDEX=3 and what to do: %s", line);
}

void config_auto_quiet(const char *path)
{
    int warns = config_auto_socket(path, NULL);

    FIT_CHECK(warns == 0, "%d WARN lines with no RDMA device and no ib variable", warns);
}

void config_auto_disabled(const char *path)
{
    int warns = config_auto_socket(path, NULL);

    FIT_CHECK(warns == 0, "%d WARN lines although NCCL_IB_DISABLE=1 asked for no ib", warns);
}
