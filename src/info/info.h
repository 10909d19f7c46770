/*
 * ferry-info: is ferry installed, active and healthy here? A separate
 * program that loads libnccl-net-ferry.so the way NCCL does (dlopen, the
 * newest ncclNetPlugin_vN), initialises it once per backend asked for, each
 * in a child process of its own, and reports what the plugin says about
 * itself and how a loopback self-test on each device went.
 *
 * It reaches the plugin only through the exported ABI (include/nccl), never
 * through ferry's internals, so it sees what NCCL sees. Everything a child
 * finds goes back to the parent as one fixed-size ferry_info_run_t (no
 * pointers) through a pipe; the parent prints text or JSON.
 */
#ifndef FERRY_INFO_H
#define FERRY_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "core/cpu_quota.h"
#include "nccl/net.h"

#define FERRY_INFO_MAX_DEVS     16
#define FERRY_INFO_MAX_THREADS  32
#define FERRY_INFO_MAX_WARNS    8
#define FERRY_INFO_MAX_TRIED    6
#define FERRY_INFO_LINE         1024
#define FERRY_INFO_CONFIG_LINE  4096

/* ---- the plugin, as loaded (parent) ---------------------------------------- */

typedef struct ferry_info_plugin {
    void       *dl;
    char        requested[512];  /* --plugin, NCCL_NET_PLUGIN, or the default "ferry". */
    char        path[4096];      /* What was loaded: the linker's path, links resolved. */
    char        tried[FERRY_INFO_MAX_TRIED][FERRY_INFO_LINE]; /* "name: dlerror" per failure. */
    int         ntried;
    int         versions[8];     /* ncclNetPlugin_vN found, newest first. */
    int         nversions;
    int         version;         /* The one used: the newest, as NCCL takes it. */
    const void *net;             /* ncclNet_v12_t or ncclNet_v11_t. */
    char        net_name[64];    /* The struct's name field. */
} ferry_info_plugin_t;

/* Finds and dlopens the plugin; 0 or -1 with the reason in err. */
int ferry_info_plugin_open(ferry_info_plugin_t *p, const char *requested, const char *self_exe,
                           char *err, size_t err_len);

/* ---- the ABI calls ferry-info makes, v11 and v12 alike (info_net.c) -------- */

/* The properties ferry-info shows, from either version's struct. */
typedef struct ferry_info_props {
    char   name[64];
    char   pci_path[512];  /* Empty: NULL (no PCI device). */
    int    ptr_support;
    int    speed;
    int    port;
    float  latency;
    int    max_comms;
    int    max_recvs;
    int    reg_is_global;
    int    force_flush;
    size_t max_p2p_bytes;
    uint64_t guid;
    int    rail_id;        /* v12's railId; -1: undefined (or a v11 plugin). */
    int    plane_id;       /* v12's planeId, likewise. */
} ferry_info_props_t;

ncclResult_t ferry_info_net_init(const ferry_info_plugin_t *p, void **ctx_p,
                                 ncclDebugLogger_t log_fn);
ncclResult_t ferry_info_net_finalize(const ferry_info_plugin_t *p, void *ctx);
ncclResult_t ferry_info_net_devices(const ferry_info_plugin_t *p, int *ndev);
ncclResult_t ferry_info_net_props(const ferry_info_plugin_t *p, int dev, ferry_info_props_t *out);
ncclResult_t ferry_info_net_listen(const ferry_info_plugin_t *p, void *ctx, int dev, void *handle,
                                   void **listen_comm);
ncclResult_t ferry_info_net_connect(const ferry_info_plugin_t *p, void *ctx, int dev,
                                    void *handle, void **send_comm);
ncclResult_t ferry_info_net_accept(const ferry_info_plugin_t *p, void *listen_comm,
                                   void **recv_comm);
ncclResult_t ferry_info_net_reg_mr(const ferry_info_plugin_t *p, void *comm, void *data,
                                   size_t size, void **mhandle);
ncclResult_t ferry_info_net_dereg_mr(const ferry_info_plugin_t *p, void *comm, void *mhandle);
ncclResult_t ferry_info_net_isend(const ferry_info_plugin_t *p, void *send_comm, void *data,
                                  size_t size, int tag, void *mhandle, void **request);
ncclResult_t ferry_info_net_irecv(const ferry_info_plugin_t *p, void *recv_comm, void *data,
                                  size_t size, int tag, void *mhandle, void **request);
ncclResult_t ferry_info_net_test(const ferry_info_plugin_t *p, void *request, int *done,
                                 int *size);
ncclResult_t ferry_info_net_close_send(const ferry_info_plugin_t *p, void *comm);
ncclResult_t ferry_info_net_close_recv(const ferry_info_plugin_t *p, void *comm);
ncclResult_t ferry_info_net_close_listen(const ferry_info_plugin_t *p, void *comm);
const char *ferry_info_result_str(ncclResult_t rc);

/* ---- one backend's run (child) -------------------------------------------- */

typedef struct ferry_info_thread {
    char name[32];
    char cpus[128]; /* Its CPU affinity as a list ("0-3,8"). */
} ferry_info_thread_t;

typedef struct ferry_info_dev {
    ferry_info_props_t props;
    int    numa_node;            /* -1: not readable (no PCI path, or no sysfs file). */
    char   link_layer[16];       /* ib: "IB" / "RoCE" from the plugin's device line; else "". */
    int    ok;                   /* Self-test passed. */
    char   verdict[FERRY_INFO_LINE]; /* "OK" or "FAIL: why". */
    size_t bytes_checked;        /* Bytes compared byte for byte. */
    double bw_gbps;              /* 1 MiB each way, both at once. */
    double rtt_us;               /* Median 8-byte round trip. */
    int    rtt_iters;
} ferry_info_dev_t;

typedef struct ferry_info_run {
    char   backend_asked[16];    /* "auto", "socket", "ib". */
    char   backend[16];          /* What init chose ("" when init failed). */
    int    init_ok;
    char   init_error[FERRY_INFO_LINE]; /* ncclResult of init/devices, in words. */
    char   version_line[FERRY_INFO_LINE]; /* The plugin's "ferry X, B backend" head. */
    char   version[32];          /* ferry's version, from that line. */
    char   choice_line[FERRY_INFO_LINE];  /* "using the B backend (...)": which and why. */
    char   backend_line[FERRY_INFO_LINE]; /* The backend's own "B backend using ..." line. */
    char   config_line[FERRY_INFO_CONFIG_LINE]; /* NAME=value(source) ..., as logged. */
    char   warns[FERRY_INFO_MAX_WARNS][FERRY_INFO_LINE];
    int    nwarns;
    char   cpus[256];            /* The process' CPU mask as a list. */
    int    ncpus;
    ferry_cpu_quota_t quota;     /* The cgroup CPU quota over it (quota_us 0: none). */
    ferry_info_thread_t threads[FERRY_INFO_MAX_THREADS]; /* ferry-* threads seen. */
    int    nthreads;
    int    ndev;                 /* devices() as reported. */
    ferry_info_dev_t devs[FERRY_INFO_MAX_DEVS];
    int    healthy;
    /*
     * NCCL_FERRY_BACKEND=auto passed over a backend that was meant to run
     * here (the plugin's WARN, core/auto_fallback.h): it works, but not as
     * the host or the variables ask; reason is that WARN.
     */
    int    degraded;
    char   degraded_reason[FERRY_INFO_LINE];
    int    optional;             /* --backend all, not the configured one: may be unavailable. */
    int    complete;             /* 1: the child got to the end (set last). */
} ferry_info_run_t;

typedef struct ferry_info_opts {
    int         json;
    int         verbose;         /* Every plugin log line to stderr as it comes. */
    int         no_selftest;
    double      timeout_s;       /* Per backend run. */
} ferry_info_opts_t;

/* Runs one backend in this process (the child): fills run. */
void ferry_info_run(const ferry_info_plugin_t *p, const char *backend, const ferry_info_opts_t *o,
                    ferry_info_run_t *run);

/* The capturing logger (info_log.c). */
void ferry_info_log_begin(ferry_info_run_t *run, int verbose);
void ferry_info_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Link layer the backend's device line gives device name (ib: "[0]mlx5_0:1/IB"). */
void ferry_info_log_link_layer(const ferry_info_run_t *run, const char *dev, char *out,
                               size_t len);

/* Loopback self-test of one device (info_selftest.c). */
void ferry_info_selftest(const ferry_info_plugin_t *p, void *ctx, int dev, ferry_info_run_t *run,
                         ferry_info_dev_t *d);

/* The system side (info_sys.c). */
int ferry_info_numa_node(const char *pci_path);
/* The process' mask as a list; the number of CPUs in it. */
int ferry_info_cpu_mask(int tid, char *out, size_t len);
/* Adds the ferry-* threads of this process not yet in run->threads. */
void ferry_info_threads_snapshot(ferry_info_run_t *run);
double ferry_info_now(void);

/*
 * The verdict over all runs: healthy (exit 0), not (1), or degraded (3:
 * every run passed, but the first, the one NCCL gets, runs on a fallback;
 * reason is set to why).
 */
typedef enum ferry_info_verdict {
    FERRY_INFO_HEALTHY = 0,
    FERRY_INFO_UNHEALTHY = 1,
    FERRY_INFO_DEGRADED = 3,
} ferry_info_verdict_t;

/* Output (info_print.c, info_json.c). */
void ferry_info_print_text(const ferry_info_plugin_t *p, const ferry_info_run_t *runs, int nruns,
                           ferry_info_verdict_t verdict);
/* error: why the plugin could not be loaded (then runs is empty), or NULL. */
void ferry_info_print_json(const ferry_info_plugin_t *p, const ferry_info_run_t *runs, int nruns,
                           ferry_info_verdict_t verdict, const char *error);
/*
 * The next "name=value(source)" of an effective-config line (values may hold
 * spaces); 0 at the end. *cursor advances.
 */
int ferry_info_config_next(const char **cursor, char *name, size_t name_len, char *value,
                           size_t value_len, char *source, size_t source_len);
/* ptrSupport bits as words: "HOST|CUDA|DMABUF". */
void ferry_info_ptr_words(int bits, char *out, size_t len);

#endif
