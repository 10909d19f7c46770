/*
 * Process-wide bring-up and per-communicator contexts. NCCL (v11) calls
 * init once per communicator and finalize for each, also after a failed
 * init; the first init parses the configuration and discovers devices, the
 * last finalize tears down what the process-wide part started.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/api.h"
#include "core/auto_fallback.h"
#include "core/live.h"
#include "core/backend.h"
#include "core/config.h"
#include <stdio.h>

#define FERRY_CTX_MAGIC 0x7874636b72726566ULL

typedef struct ferry_api_ctx {
    uint64_t    magic;   /* FERRY_CTX_MAGIC while the context is live. */
    ferry_ctx_t ctx;
} ferry_api_ctx_t;

/* Guards refs, config, set and backend; data-path calls only read backend. */
static pthread_mutex_t ferry_api_lock = PTHREAD_MUTEX_INITIALIZER;
static int ferry_api_refs;
/* The backends and services the layer above handed to the init that brought ferry up. */
static const ferry_backend_set_t *ferry_api_set;
static ferry_config_t ferry_api_cfg;
static const ferry_backend_ops_t *ferry_api_be;
/*
 * The data path's copy: set at the first bring-up and never cleared, since
 * NCCL may still close comms after the last finalize, and a backend's ops
 * table is static.
 */
static const ferry_backend_ops_t *_Atomic ferry_api_data_be;
/*
 * A backend the last finalize left up because comms of it were still open
 * (ferry_api_left_open): its devices stay, so those comms can still be
 * closed, and the next init takes it back as it is.
 */
static const ferry_backend_ops_t *ferry_api_linger_be;

/* NCCL_FERRY_BACKEND names one: that one, or a clear error when this build has none. */
static ferry_status_t ferry_api_named_backend(const char *want, const ferry_backend_ops_t **be_p)
{
    const ferry_backend_ops_t *const *backends = ferry_api_set->backends;
    char names[128] = "";
    int i, n = 0;

    for (i = 0; backends[i] != NULL; i++) {
        if (strcmp(backends[i]->name, want) == 0) {
            *be_p = backends[i];
            FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "using the %s backend "
                       "(NCCL_FERRY_BACKEND=%s)", want, want);
            return FERRY_OK;
        }
        if (n < (int)sizeof(names))
            n += snprintf(names + n, sizeof(names) - (size_t)n, "%s%s", i > 0 ? ", " : "",
                          backends[i]->name);
    }
    FERRY_WARN("NCCL_FERRY_BACKEND=%s: this build of ferry has no %s backend (it has: %s); "
               "use one of those or auto", want, want, names);
    return FERRY_ERR_UNSUPPORTED;
}

/*
 * auto: the first backend, in the set's order, that says it can run
 * here, and one INFO line saying which and why (the others' reasons too).
 * A backend passed over although it was meant to run here also gets a WARN
 * (core/auto_fallback.h) with what to fix; limited, as a caller that inits
 * and finalizes in a loop would repeat it.
 */
static ferry_status_t ferry_api_auto_backend(const ferry_config_t *cfg,
                                             const ferry_backend_ops_t **be_p)
{
    const ferry_backend_ops_t *const *backends = ferry_api_set->backends;
    char skipped[768] = "", why[384], meant[512] = "";
    const char *meant_name = NULL;
    int i, n = 0;

    for (i = 0; backends[i] != NULL; i++) {
        const ferry_backend_ops_t *be = backends[i];
        ferry_usable_t usable = FERRY_USABLE;

        why[0] = '\0';
        if (be->usable != NULL)
            usable = be->usable(cfg, why, sizeof(why));
        if (usable == FERRY_USABLE) {
            *be_p = be;
            FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "using the %s backend "
                       "(NCCL_FERRY_BACKEND=auto%s%s%s%s)", be->name,
                       why[0] != '\0' ? ": " : "", why, skipped[0] != '\0' ? "; " : "",
                       skipped);
            if (meant_name != NULL)
                FERRY_WARN_LIMITED(FERRY_AUTO_FALLBACK_HEAD "%s backend, not %s: %s, or set "
                                   "NCCL_FERRY_BACKEND=%s to silence this", be->name, meant_name,
                                   meant, be->name);
            return FERRY_OK;
        }
        if (usable == FERRY_UNUSABLE_MEANT && meant_name == NULL) {
            meant_name = be->name;
            snprintf(meant, sizeof(meant), "%s", why);
        }
        if (n < (int)sizeof(skipped))
            n += snprintf(skipped + n, sizeof(skipped) - (size_t)n, "%s%s not usable: %s",
                          n > 0 ? "; " : "", be->name, why);
    }
    FERRY_WARN("NCCL_FERRY_BACKEND=auto: no backend can run here (%s)", skipped);
    return FERRY_ERR_UNSUPPORTED;
}

static ferry_status_t ferry_api_pick_backend(const ferry_config_t *cfg,
                                             const ferry_backend_ops_t **be_p)
{
    if (cfg->backend == FERRY_BACKEND_AUTO)
        return ferry_api_auto_backend(cfg, be_p);
    return ferry_api_named_backend(ferry_config_backend_name(cfg->backend), be_p);
}

/* First init of the process (or after the last finalize): config, backend, dump. */
static ferry_status_t ferry_api_bring_up(void)
{
    const ferry_backend_ops_t *be = NULL;
    ferry_status_t status;
    char line[4096];

    status = ferry_config_load(&ferry_api_cfg);
    if (status != FERRY_OK)
        return status;
    status = ferry_api_pick_backend(&ferry_api_cfg, &be);
    if (status != FERRY_OK)
        return status;
    status = be->init(&ferry_api_cfg);
    if (status != FERRY_OK)
        return status;
    /* After init: the backend's variables are parsed, and the line shows them too. */
    ferry_config_format(&ferry_api_cfg, line, sizeof(line));
    if (be->format_config != NULL)
        be->format_config(line + strlen(line), sizeof(line) - strlen(line));
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET | FERRY_LOG_ENV, "ferry %s, %s backend, config %s",
               FERRY_VERSION_STRING, be->name, line);
    ferry_api_set->services_start(&ferry_api_cfg);
    ferry_api_be = be;
    atomic_store(&ferry_api_data_be, be);
    return FERRY_OK;
}

ferry_status_t ferry_api_init(void **ctx_p, const ferry_backend_set_t *set, uint64_t comm_id,
                              int traffic_class, ferry_log_fn_t logger)
{
    ferry_api_ctx_t *c;
    ferry_status_t status = FERRY_OK;

    *ctx_p = NULL;
    ferry_log_set(logger);
    if (set == NULL || set->backends == NULL || set->services_start == NULL ||
        set->services_stop == NULL) {
        FERRY_WARN("init: no backend set handed to the core (a ferry bug in the layer above it)");
        return FERRY_ERR_INTERNAL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return FERRY_ERR_NO_MEMORY;
    /* Known live by address: a finalized context is freed, its magic cannot be read. */
    if (ferry_live_add(c, FERRY_LIVE_CTX) != FERRY_OK) {
        free(c);
        return FERRY_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&ferry_api_lock);
    if (ferry_api_refs == 0 && ferry_api_linger_be != NULL) {
        ferry_api_be = ferry_api_linger_be; /* Still up, with the config it had. */
        ferry_api_linger_be = NULL;
        ferry_api_set->services_start(&ferry_api_cfg);
    } else if (ferry_api_refs == 0) {
        ferry_api_set = set;
        status = ferry_api_bring_up();
    }
    if (status == FERRY_OK)
        ferry_api_refs++;
    pthread_mutex_unlock(&ferry_api_lock);
    if (status != FERRY_OK) {
        ferry_live_take(c, FERRY_LIVE_CTX);
        free(c);
        return status;
    }
    c->magic = FERRY_CTX_MAGIC;
    c->ctx.comm_id = comm_id;
    c->ctx.traffic_class = traffic_class;
    *ctx_p = c;
    return FERRY_OK;
}

/*
 * The last finalize with comms still open (an abort path, or a user who did
 * not close them): they stay usable for close, which NCCL may call after
 * finalize, and keep their threads, sockets and the backend's devices until
 * then (the backend is not shut down: a closeSend after its fini would use
 * a closed device). The library pins itself (RTLD_NODELETE), so a dlclose
 * after this cannot unmap code those threads still run; without open comms
 * a dlclose unloads it as before. Returns 1 if anything was left open.
 */
static void ferry_api_pin_library(void)
{
    Dl_info info;
    void *self;

    if (dladdr((void *)ferry_api_pin_library, &info) == 0 || info.dli_fname == NULL)
        return;
    /* Another reference that is never dropped; NOLOAD: this very copy, not a new one. */
    self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    (void)self;
}

static int ferry_api_left_open(void)
{
    size_t nsend = ferry_live_count_kind(FERRY_LIVE_SEND);
    size_t nrecv = ferry_live_count_kind(FERRY_LIVE_RECV);
    size_t nlisten = ferry_live_count_kind(FERRY_LIVE_LISTEN);
    size_t nmr = ferry_live_count_kind(FERRY_LIVE_MR);

    if (nsend + nrecv + nlisten + nmr == 0)
        return 0;
    /* INFO: NCCL itself may close comms after the last finalize (integ_config). */
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET,
               "finalize: the last ferry context is gone with %zu send, %zu recv and %zu listen "
               "comm(s) and %zu memory handle(s) still open; their threads, sockets and "
               "devices stay until closeSend/closeRecv/closeListen/deregMr (still valid after "
               "finalize) or process exit", nsend, nrecv, nlisten, nmr);
    ferry_api_pin_library();
    return 1;
}

/* What NCCL's setNetAttr said over the context's life, for whoever measures the hints. */
static void ferry_api_hints_summary(ferry_api_ctx_t *c)
{
    char words[512];

    ferry_net_hints_summary(&c->ctx.hints, words, sizeof(words));
    if (words[0] != '\0')
        FERRY_INFO(FERRY_LOG_NET, "finalize(comm 0x%llx): setNetAttr gave %s",
                   (unsigned long long)c->ctx.comm_id, words);
}

ferry_status_t ferry_api_finalize(void *ctx)
{
    ferry_api_ctx_t *c = ctx;

    /* NULL: NCCL's cleanup after a failed init. Nothing was counted for it. */
    if (c == NULL)
        return FERRY_OK;
    /* Out of the live set first: a second finalize never reads the freed context. */
    if (!ferry_live_take(c, FERRY_LIVE_CTX)) {
        FERRY_WARN("finalize(%p): not a live ferry context (finalized twice?)", ctx);
        return FERRY_ERR_INVALID;
    }
    ferry_api_hints_summary(c);
    c->magic = 0;
    free(c);
    pthread_mutex_lock(&ferry_api_lock);
    if (--ferry_api_refs == 0 && ferry_api_be != NULL) {
        ferry_api_set->services_stop();
        if (ferry_api_left_open())
            ferry_api_linger_be = ferry_api_be;
        else
            ferry_api_be->fini();
        ferry_api_be = NULL;
    }
    pthread_mutex_unlock(&ferry_api_lock);
    return FERRY_OK;
}

int ferry_api_tuning(ferry_api_tuning_t *out)
{
    ferry_props_t props;
    int up, ndev = 0;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&ferry_api_lock);
    up = ferry_api_refs > 0 && ferry_api_be != NULL;
    if (up) {
        out->enabled = ferry_api_cfg.tuner;
        out->ll_bw_mbs = ferry_api_cfg.tuner_ll_bw;
        out->channel_bytes = ferry_api_cfg.tuner_channel_bytes;
        out->channel_bytes_set = ferry_api_cfg.src[FERRY_CFG_TUNER_CHANNEL_BYTES] == FERRY_CFG_ENV;
        out->step_bytes = ferry_api_cfg.tuner_step_bytes;
        if (!out->channel_bytes_set && ferry_api_be->tuner_channel_bytes != 0)
            out->channel_bytes = ferry_api_be->tuner_channel_bytes;
        memset(&props, 0, sizeof(props));
        /* Ask for device 0 only if there is one: getProperties WARNs on a bad index. */
        out->has_device = ferry_api_be->devices(&ndev) == FERRY_OK && ndev > 0 &&
                          ferry_api_be->get_properties(0, &props) == FERRY_OK;
        out->host_staged = out->has_device &&
                           (ferry_api_be->host_staged ||
                            (props.ptr_support & (FERRY_PTR_CUDA | FERRY_PTR_DMABUF)) == 0);
    }
    pthread_mutex_unlock(&ferry_api_lock);
    return up;
}

const char *ferry_api_backend_name(void)
{
    const char *name;

    pthread_mutex_lock(&ferry_api_lock);
    name = ferry_api_be != NULL ? ferry_api_be->name : NULL;
    pthread_mutex_unlock(&ferry_api_lock);
    return name;
}

/* The backend for calls that need one; NULL (with a WARN) before init. */
static const ferry_backend_ops_t *ferry_api_backend(const char *op)
{
    const ferry_backend_ops_t *be;

    pthread_mutex_lock(&ferry_api_lock);
    be = ferry_api_be;
    pthread_mutex_unlock(&ferry_api_lock);
    if (be == NULL)
        FERRY_WARN("%s called before a successful init (or after the last finalize)", op);
    return be;
}

int ferry_api_takes_net_hints(void)
{
    const ferry_backend_ops_t *be;

    pthread_mutex_lock(&ferry_api_lock);
    be = ferry_api_be;
    pthread_mutex_unlock(&ferry_api_lock);
    return be != NULL && be->takes_net_hints != NULL && be->takes_net_hints();
}

int ferry_api_rma_wanted(void)
{
    int rma;

    pthread_mutex_lock(&ferry_api_lock);
    rma = ferry_api_cfg.rma;
    pthread_mutex_unlock(&ferry_api_lock);
    return rma;
}

static ferry_ctx_t *ferry_api_ctx(void *ctx, const char *op)
{
    ferry_api_ctx_t *c = ctx;

    if (c == NULL || !ferry_live_has(c, FERRY_LIVE_CTX)) {
        FERRY_WARN("%s: context %p is not a live ferry context", op, ctx);
        return NULL;
    }
    return &c->ctx;
}

ferry_status_t ferry_api_devices(int *ndev_p)
{
    const ferry_backend_ops_t *be = ferry_api_backend("devices");

    *ndev_p = 0;
    return be != NULL ? be->devices(ndev_p) : FERRY_ERR_INVALID;
}

ferry_status_t ferry_api_get_properties(int dev, ferry_props_t *props_p)
{
    const ferry_backend_ops_t *be = ferry_api_backend("getProperties");

    return be != NULL ? be->get_properties(dev, props_p) : FERRY_ERR_INVALID;
}

ferry_status_t ferry_api_make_vdevice(int *dev_p, int ndevs, const int *devs)
{
    const ferry_backend_ops_t *be = ferry_api_backend("makeVDevice");

    if (be == NULL)
        return FERRY_ERR_INVALID;
    if (dev_p == NULL || devs == NULL || ndevs < 1 || ndevs > FERRY_MAX_VDEV_MEMBERS) {
        FERRY_WARN("makeVDevice: %d device(s) to merge%s; ferry merges 1..%d", ndevs,
                   dev_p == NULL || devs == NULL ? " and a NULL argument" : "",
                   FERRY_MAX_VDEV_MEMBERS);
        return FERRY_ERR_INVALID;
    }
    if (be->make_vdevice == NULL) {
        /* NCCL takes the refusal as "keep them apart": worth a line, not a warning. */
        FERRY_INFO(FERRY_LOG_NET, "makeVDevice: the %s backend merges no devices; NCCL uses "
                   "each device on its own (NCCL_NET_MERGE_LEVEL=LOC skips the request)",
                   be->name);
        return FERRY_ERR_UNSUPPORTED;
    }
    return be->make_vdevice(dev_p, ndevs, devs);
}

ferry_status_t ferry_api_set_net_attr(void *ctx, const ferry_net_attr_t *attr)
{
    ferry_api_ctx_t *ac = ctx;
    ferry_ctx_t *c;

    /* Limited: NCCL's progress thread calls this whenever a transfer's shape changes. */
    if (ac == NULL || !ferry_live_has(ac, FERRY_LIVE_CTX)) {
        FERRY_WARN_LIMITED("setNetAttr: context %p is not a live ferry context (finalized "
                           "already, or not one init returned); hints ignored", ctx);
        return FERRY_ERR_INVALID;
    }
    c = &ac->ctx;
    if (attr == NULL) {
        FERRY_WARN_LIMITED("setNetAttr(comm 0x%llx): no attributes (NULL); ignored",
                           (unsigned long long)c->comm_id);
        return FERRY_OK;
    }
    ferry_net_hints_set(&c->hints, attr, c->comm_id);
    return FERRY_OK;
}

ferry_status_t ferry_api_listen(void *ctx, int dev, void *handle, void **listen_comm_p)
{
    const ferry_backend_ops_t *be = ferry_api_backend("listen");
    ferry_ctx_t *c = ferry_api_ctx(ctx, "listen");

    *listen_comm_p = NULL;
    if (be == NULL || c == NULL)
        return FERRY_ERR_INVALID;
    return be->listen(c, dev, handle, listen_comm_p);
}

ferry_status_t ferry_api_connect(void *ctx, int dev, void *handle, int traffic_class,
                                 void **send_comm_p)
{
    const ferry_backend_ops_t *be = ferry_api_backend("connect");
    ferry_ctx_t *c = ferry_api_ctx(ctx, "connect");

    *send_comm_p = NULL;
    if (be == NULL || c == NULL)
        return FERRY_ERR_INVALID;
    return be->connect(c, dev, handle, traffic_class >= 0 ? traffic_class : c->traffic_class,
                       send_comm_p);
}

/* Data-path calls: one atomic load, no lock. */
#define FERRY_API_DATA_BE(_op)                                                    \
    const ferry_backend_ops_t *be = atomic_load_explicit(&ferry_api_data_be,     \
                                                         memory_order_acquire);  \
    if (be == NULL) {                                                             \
        FERRY_WARN("%s called before ferry was initialised", _op);                \
        return FERRY_ERR_INVALID;                                                 \
    }
ferry_status_t ferry_api_accept(void *listen_comm, void **recv_comm_p)
{
    FERRY_API_DATA_BE("accept");
    return be->accept(listen_comm, recv_comm_p);
}

ferry_status_t ferry_api_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle_p)
{
    FERRY_API_DATA_BE("reg_mr");
    return be->reg_mr(comm, data, size, type, mhandle_p);
}

ferry_status_t ferry_api_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                       uint64_t offset, int fd, void **mhandle_p)
{
    FERRY_API_DATA_BE("reg_mr_dmabuf");
    return be->reg_mr_dmabuf(comm, data, size, type, offset, fd, mhandle_p);
}

ferry_status_t ferry_api_dereg_mr(void *comm, void *mhandle)
{
    FERRY_API_DATA_BE("dereg_mr");
    return be->dereg_mr(comm, mhandle);
}

ferry_status_t ferry_api_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                               void **request_p)
{
    FERRY_API_DATA_BE("isend");
    return be->isend(send_comm, data, size, tag, mhandle, request_p);
}

ferry_status_t ferry_api_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **request_p)
{
    FERRY_API_DATA_BE("irecv");
    return be->irecv(recv_comm, n, data, sizes, tags, mhandles, request_p);
}

ferry_status_t ferry_api_iflush(void *recv_comm, int n, void **data, int *sizes,
                                void **mhandles, void **request_p)
{
    FERRY_API_DATA_BE("iflush");
    return be->iflush(recv_comm, n, data, sizes, mhandles, request_p);
}

ferry_status_t ferry_api_test(void *request, int *done_p, int *sizes)
{
    FERRY_API_DATA_BE("test");
    return be->test(request, done_p, sizes);
}

ferry_status_t ferry_api_close_send(void *send_comm)
{
    FERRY_API_DATA_BE("close_send");
    return be->close_send(send_comm);
}

ferry_status_t ferry_api_close_recv(void *recv_comm)
{
    FERRY_API_DATA_BE("close_recv");
    return be->close_recv(recv_comm);
}

ferry_status_t ferry_api_close_listen(void *listen_comm)
{
    FERRY_API_DATA_BE("close_listen");
    return be->close_listen(listen_comm);
}
