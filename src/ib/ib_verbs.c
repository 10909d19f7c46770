/*
 * libibverbs loaded with dlopen, each verb resolved at the rdma-core symbol
 * version it was introduced with (verbs-emulation.md §1.2), so that a newer
 * library's default version of a symbol with changed semantics is never
 * picked by accident. A library without a symbol version (a static shim,
 * an old fake) still works through plain dlsym.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ib/ib_verbs.h"

ferry_ibv_fns_t ferry_ibv;

/* The exported ibv_query_port takes the old layout, ending at `flags`. */
typedef int (*ferry_ibv_query_port_compat_fn_t)(struct ibv_context *context, uint8_t port,
                                                struct ibv_port_attr *attr);

typedef struct ferry_ibv_sym {
    const char *name;
    const char *version;  /* rdma-core version node that introduced it. */
    size_t      offset;   /* Member of ferry_ibv_fns_t. */
    int         required; /* 0: left NULL when the library lacks it. */
} ferry_ibv_sym_t;

#define FERRY_IBV_SYM(_name, _member, _version, _required) \
    {_name, _version, offsetof(ferry_ibv_fns_t, _member), _required}

static const ferry_ibv_sym_t ferry_ibv_syms[] = {
    FERRY_IBV_SYM("ibv_get_device_list", get_device_list, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_free_device_list", free_device_list, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_get_device_name", get_device_name, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_open_device", open_device, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_close_device", close_device, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_query_device", query_device, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_query_gid", query_gid, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_query_pkey", query_pkey, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_alloc_pd", alloc_pd, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_dealloc_pd", dealloc_pd, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_reg_mr", reg_mr, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_reg_mr_iova2", reg_mr_iova2, "IBVERBS_1.8", 0),
    FERRY_IBV_SYM("ibv_reg_dmabuf_mr", reg_dmabuf_mr, "IBVERBS_1.12", 0),
    FERRY_IBV_SYM("ibv_dereg_mr", dereg_mr, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_create_comp_channel", create_comp_channel, "IBVERBS_1.0", 1),
    FERRY_IBV_SYM("ibv_destroy_comp_channel", destroy_comp_channel, "IBVERBS_1.0", 1),
    FERRY_IBV_SYM("ibv_create_cq", create_cq, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_destroy_cq", destroy_cq, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_create_qp", create_qp, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_modify_qp", modify_qp, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_query_qp", query_qp, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_destroy_qp", destroy_qp, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_get_async_event", get_async_event, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_ack_async_event", ack_async_event, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_event_type_str", event_type_str, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_wc_status_str", wc_status_str, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_fork_init", fork_init, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_get_cq_event", get_cq_event, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_ack_cq_events", ack_cq_events, "IBVERBS_1.1", 1),
    FERRY_IBV_SYM("ibv_port_state_str", port_state_str, "IBVERBS_1.1", 1),
    /* The target of the inline ibv_query_gid_ex. */
    FERRY_IBV_SYM("_ibv_query_gid_ex", query_gid_ex_sym, "IBVERBS_1.11", 0),
};

static pthread_mutex_t ferry_ibv_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int ferry_ibv_loaded;          /* Set once ferry_ibv is complete. */
static char ferry_ibv_path[256];               /* Written once, under the lock. */
static ferry_ibv_query_port_compat_fn_t ferry_ibv_query_port_compat;

/*
 * What the ibv_query_port macro of verbs.h does: the provider's extended
 * query_port when the context has one (it fills the whole struct), else the
 * exported compat entry, which fills only the old layout.
 */
static int ferry_ibv_query_port_full(struct ibv_context *context, uint8_t port,
                                     struct ibv_port_attr *attr, size_t attr_len)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, query_port);

    if (vctx == NULL) {
        memset(attr, 0, attr_len);
        return ferry_ibv_query_port_compat(context, port, attr);
    }
    return vctx->query_port(context, port, attr, attr_len);
}

static int ferry_ibv_query_port(struct ibv_context *context, uint8_t port,
                                struct ibv_port_attr *attr)
{
    return ferry_ibv_query_port_full(context, port, attr, sizeof(*attr));
}

/*
 * rdma-core 50 appended active_speed_ex (uint32_t, after port_cap_flags2)
 * for XDR; asking with the longer size gets it from a provider that knows
 * it and 0 from one that does not.
 */
typedef struct ferry_ibv_port_attr_ex {
    struct ibv_port_attr attr;
    uint32_t             active_speed_ex;
} ferry_ibv_port_attr_ex_t;

int ferry_ibv_query_port_ex(struct ibv_context *context, uint8_t port,
                            struct ibv_port_attr *attr, uint32_t *active_speed_ex_p)
{
    ferry_ibv_port_attr_ex_t ex;
    int rc;

    memset(&ex, 0, sizeof(ex));
    rc = ferry_ibv_query_port_full(context, port, &ex.attr, sizeof(ex));
    if (rc == 0) {
        *attr = ex.attr;
        *active_speed_ex_p = ex.active_speed_ex;
    }
    return rc;
}

int ferry_ibv_query_gid_type(struct ibv_context *context, uint8_t port, int index)
{
    struct ibv_gid_entry entry;

    if (ferry_ibv.query_gid_ex_sym == NULL || index < 0)
        return -1;
    memset(&entry, 0, sizeof(entry));
    if (ferry_ibv.query_gid_ex_sym(context, port, (uint32_t)index, &entry, 0, sizeof(entry)) != 0)
        return -1;
    return (int)entry.gid_type;
}

static void *ferry_ibv_resolve(void *lib, const ferry_ibv_sym_t *sym)
{
    void *fn = dlvsym(lib, sym->name, sym->version);

    return fn != NULL ? fn : dlsym(lib, sym->name);
}

/* Resolve every symbol into fns; on a missing required one, say which. */
static ferry_status_t ferry_ibv_resolve_all(void *lib, const char *file, ferry_ibv_fns_t *fns,
                                            char *err, size_t len)
{
    size_t i;
    void *fn;

    memset(fns, 0, sizeof(*fns));
    for (i = 0; i < sizeof(ferry_ibv_syms) / sizeof(ferry_ibv_syms[0]); i++) {
        const ferry_ibv_sym_t *sym = &ferry_ibv_syms[i];

        fn = ferry_ibv_resolve(lib, sym);
        if (fn == NULL && sym->required) {
            snprintf(err, len, "%s has no %s (%s): it is not a usable libibverbs; install "
                     "rdma-core's libibverbs or point NCCL_FERRY_IBVERBS_LIB at one", file,
                     sym->name, sym->version);
            return FERRY_ERR_UNSUPPORTED;
        }
        memcpy((char *)fns + sym->offset, &fn, sizeof(fn));
    }
    fn = dlvsym(lib, "ibv_query_port", "IBVERBS_1.1");
    if (fn == NULL)
        fn = dlsym(lib, "ibv_query_port");
    if (fn == NULL) {
        snprintf(err, len, "%s has no ibv_query_port (IBVERBS_1.1): it is not a usable "
                 "libibverbs; install rdma-core's libibverbs or point NCCL_FERRY_IBVERBS_LIB "
                 "at one", file);
        return FERRY_ERR_UNSUPPORTED;
    }
    memcpy(&ferry_ibv_query_port_compat, &fn, sizeof(fn));
    fns->query_port = ferry_ibv_query_port;
    return FERRY_OK;
}

/* dlopen the first of names that loads; "name (dlerror); ..." of each failure in tried. */
static void *ferry_ibv_open(const char *const *names, int n, const char **file_p, char *tried,
                            size_t len)
{
    size_t off = 0;
    int i;

    tried[0] = '\0';
    for (i = 0; i < n; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        const char *why;

        if (lib != NULL) {
            *file_p = names[i];
            return lib;
        }
        why = dlerror();
        off += (size_t)snprintf(tried + off, len - off, "%s%s (%s)", i > 0 ? "; " : "", names[i],
                                why != NULL ? why : "not found");
        if (off >= len)
            off = len - 1;
    }
    return NULL;
}

ferry_status_t ferry_ibv_load(const char *path, char *err, size_t len)
{
    static const char *const defaults[] = {"libibverbs.so.1", "libibverbs.so"};
    const char *const *names = defaults;
    ferry_ibv_fns_t fns;
    ferry_status_t status = FERRY_OK;
    const char *file = NULL;
    char tried[768];
    void *lib;
    int n = 2;

    if (atomic_load_explicit(&ferry_ibv_loaded, memory_order_acquire))
        return FERRY_OK;
    pthread_mutex_lock(&ferry_ibv_lock);
    if (atomic_load_explicit(&ferry_ibv_loaded, memory_order_relaxed))
        goto out_unlock;
    if (path != NULL && *path != '\0') {
        names = &path;
        n = 1;
    }
    lib = ferry_ibv_open(names, n, &file, tried, sizeof(tried));
    if (lib == NULL) {
        snprintf(err, len, "cannot load libibverbs: tried %s; install rdma-core's libibverbs "
                 "(libibverbs1 / rdma-core package)%s", tried,
                 n == 1 ? ", or fix NCCL_FERRY_IBVERBS_LIB" : ", or set NCCL_FERRY_IBVERBS_LIB "
                 "to its path");
        status = FERRY_ERR_UNSUPPORTED;
        goto out_unlock;
    }
    status = ferry_ibv_resolve_all(lib, file, &fns, err, len);
    if (status != FERRY_OK) {
        dlclose(lib);
        goto out_unlock;
    }
    /*
     * The library stays loaded for the life of the process, as NCCL keeps
     * it: rdma-core providers start threads and keep global state that a
     * dlclose would pull from under them.
     */
    ferry_ibv = fns;
    snprintf(ferry_ibv_path, sizeof(ferry_ibv_path), "%s", file);
    atomic_store_explicit(&ferry_ibv_loaded, 1, memory_order_release);
out_unlock:
    pthread_mutex_unlock(&ferry_ibv_lock);
    return status;
}

const char *ferry_ibv_loaded_path(void)
{
    return atomic_load_explicit(&ferry_ibv_loaded, memory_order_acquire) ? ferry_ibv_path : "";
}
