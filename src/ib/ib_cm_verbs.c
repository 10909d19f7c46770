/*
 * librdmacm loaded with dlopen, every entry point at RDMACM_1.0 (where
 * rdma-core has had them since librdmacm joined it), falling back to plain
 * dlsym for an unversioned library.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ib/ib_cm_verbs.h"

ferry_rdmacm_fns_t ferry_rdmacm;

typedef struct ferry_rdmacm_sym {
    const char *name;
    size_t      offset; /* Member of ferry_rdmacm_fns_t. */
} ferry_rdmacm_sym_t;

#define FERRY_RDMACM_SYM(_member) {"rdma_" #_member, offsetof(ferry_rdmacm_fns_t, _member)}

static const ferry_rdmacm_sym_t ferry_rdmacm_syms[] = {
    FERRY_RDMACM_SYM(create_event_channel), FERRY_RDMACM_SYM(destroy_event_channel),
    FERRY_RDMACM_SYM(create_id),            FERRY_RDMACM_SYM(destroy_id),
    FERRY_RDMACM_SYM(migrate_id),           FERRY_RDMACM_SYM(bind_addr),
    FERRY_RDMACM_SYM(listen),               FERRY_RDMACM_SYM(resolve_addr),
    FERRY_RDMACM_SYM(resolve_route),        FERRY_RDMACM_SYM(create_qp),
    FERRY_RDMACM_SYM(destroy_qp),           FERRY_RDMACM_SYM(connect),
    FERRY_RDMACM_SYM(accept),               FERRY_RDMACM_SYM(reject),
    FERRY_RDMACM_SYM(disconnect),           FERRY_RDMACM_SYM(get_cm_event),
    FERRY_RDMACM_SYM(ack_cm_event),         FERRY_RDMACM_SYM(event_str),
    FERRY_RDMACM_SYM(get_devices),          FERRY_RDMACM_SYM(free_devices),
};

static pthread_mutex_t ferry_rdmacm_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int ferry_rdmacm_loaded;

static ferry_status_t ferry_rdmacm_resolve_all(void *lib, const char *file, char *err,
                                               size_t len)
{
    ferry_rdmacm_fns_t fns;
    size_t i;

    memset(&fns, 0, sizeof(fns));
    for (i = 0; i < sizeof(ferry_rdmacm_syms) / sizeof(ferry_rdmacm_syms[0]); i++) {
        void *fn = dlvsym(lib, ferry_rdmacm_syms[i].name, "RDMACM_1.0");

        if (fn == NULL)
            fn = dlsym(lib, ferry_rdmacm_syms[i].name);
        if (fn == NULL) {
            snprintf(err, len, "%s has no %s: it is not a usable librdmacm; install rdma-core's "
                     "librdmacm1, point NCCL_FERRY_RDMACM_LIB at one, or set "
                     "NCCL_FERRY_IB_CM=oob", file, ferry_rdmacm_syms[i].name);
            return FERRY_ERR_UNSUPPORTED;
        }
        memcpy((char *)&fns + ferry_rdmacm_syms[i].offset, &fn, sizeof(fn));
    }
    ferry_rdmacm = fns;
    return FERRY_OK;
}

ferry_status_t ferry_rdmacm_load(const char *path, char *err, size_t len)
{
    const char *file = path != NULL && path[0] != '\0' ? path : "librdmacm.so.1";
    ferry_status_t status;
    void *lib;

    if (atomic_load_explicit(&ferry_rdmacm_loaded, memory_order_acquire))
        return FERRY_OK;
    pthread_mutex_lock(&ferry_rdmacm_lock);
    if (atomic_load_explicit(&ferry_rdmacm_loaded, memory_order_relaxed)) {
        pthread_mutex_unlock(&ferry_rdmacm_lock);
        return FERRY_OK;
    }
    lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();

        snprintf(err, len, "NCCL_FERRY_IB_CM=rdmacm: cannot load %s (%s); install rdma-core's "
                 "librdmacm1 (or point NCCL_FERRY_RDMACM_LIB at it), or set "
                 "NCCL_FERRY_IB_CM=oob to connect out of band over TCP", file,
                 why != NULL ? why : "unknown error");
        pthread_mutex_unlock(&ferry_rdmacm_lock);
        return FERRY_ERR_UNSUPPORTED;
    }
    status = ferry_rdmacm_resolve_all(lib, file, err, len);
    if (status != FERRY_OK)
        dlclose(lib);
    else
        atomic_store_explicit(&ferry_rdmacm_loaded, 1, memory_order_release);
    pthread_mutex_unlock(&ferry_rdmacm_lock);
    return status;
}
