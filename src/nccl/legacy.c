/*
 * The process-wide context behind ncclNet v8..v10. Those versions have no
 * ctx argument and no finalize: NCCL calls init once per process (2.28's
 * shims refcount it, older NCCL calls it once), then listen/connect without
 * a ctx. So the first successful init creates one context for the process,
 * and it is finalized when the library is unloaded.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "nccl/plugin.h"

/* Serializes creation; held only inside ferry_nccl_legacy_init. */
static pthread_mutex_t ferry_nccl_legacy_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * Written once (under the lock) by the first successful init, cleared at
 * unload; read lock-free by listen/connect on NCCL's service threads.
 */
static _Atomic(void *) ferry_nccl_legacy_ctx_v;

ncclResult_t ferry_nccl_legacy_init(ncclDebugLogger_t log_fn)
{
    ncclResult_t res = ncclSuccess;
    void *ctx = NULL;

    pthread_mutex_lock(&ferry_nccl_legacy_lock);
    if (atomic_load_explicit(&ferry_nccl_legacy_ctx_v, memory_order_relaxed) == NULL) {
        /* No communicator identity exists before v11: comm id 0, class undefined. */
        res = ferry_nccl_ctx_init(&ctx, 0, NCCL_NET_TRAFFIC_CLASS_UNDEF, log_fn);
        if (res == ncclSuccess) {
            atomic_store_explicit(&ferry_nccl_legacy_ctx_v, ctx, memory_order_release);
        } else {
            /* What NCCL does after a failed v11 init; a later init may retry. */
            (void)ferry_api_finalize(ctx);
        }
    }
    pthread_mutex_unlock(&ferry_nccl_legacy_lock);
    return res;
}

void *ferry_nccl_legacy_ctx(void)
{
    /* NULL before init; the core rejects a NULL ctx with FERRY_ERR_INVALID. */
    return atomic_load_explicit(&ferry_nccl_legacy_ctx_v, memory_order_acquire);
}

ncclResult_t ferry_nccl_legacy_listen(int dev, void *handle, void **listen_comm_p)
{
    return ferry_nccl_listen(ferry_nccl_legacy_ctx(), dev, handle, listen_comm_p);
}

ncclResult_t ferry_nccl_legacy_connect(int dev, void *handle, void **send_comm_p,
                                       ncclNetDeviceHandle_v9_t **send_dev_comm_p)
{
    /* Before v10 there is no traffic class at all. */
    return ferry_nccl_connect(ferry_nccl_legacy_ctx(), dev, handle, send_comm_p,
                              send_dev_comm_p);
}

/*
 * NCCL dlclose()s the plugin when its last communicator is destroyed, and a
 * v8..v10 plugin never sees a finalize. Finalizing here stops ferry's helper
 * threads before the code they run is unmapped.
 */
__attribute__((destructor)) static void ferry_nccl_legacy_unload(void)
{
    void *ctx = atomic_exchange_explicit(&ferry_nccl_legacy_ctx_v, NULL, memory_order_acq_rel);

    if (ctx != NULL)
        (void)ferry_api_finalize(ctx);
}
