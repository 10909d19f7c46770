/*
 * The RMA entry layer (rma_entry.h): NCCL's calls mapped onto the running
 * backend's RMA ops. NCCL hands connect() its net context, not the RMA one,
 * so nothing after listen() relies on the context; the objects NCCL holds
 * (listen comm, group, RMA context) carry what later calls need.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rma.h"
#include "nccl/props.h"
#include "nccl/rma_entry.h"
#include "ib/ib_rma.h"
#include "socket/sock_rma.h"

_Static_assert(FERRY_RMA_SIGNAL_INC == NCCL_NET_SIGNAL_OP_INC, "FERRY_RMA_SIGNAL_INC");
_Static_assert(FERRY_RMA_SIGNAL_ADD == NCCL_NET_SIGNAL_OP_ADD, "FERRY_RMA_SIGNAL_ADD");

#define FERRY_NCCL_RMA_LISTEN_MAGIC 0x6e73696c616d726eULL
#define FERRY_NCCL_RMA_CTX_MAGIC    0x7874636c616d726eULL
#define FERRY_NCCL_RMA_INIT_MAGIC   0x74696e69616d726eULL

/* The backends of this build that have one-sided operations. */
static const ferry_rma_ops_t *const ferry_nccl_rma_backends[] = {
    &ferry_sock_rma_ops,
    &ferry_ib_rma_ops,
    NULL,
};

/* The running backend's table: set by the first init that finds one, read by the rest. */
static const ferry_rma_ops_t *_Atomic ferry_nccl_rma_ops;

/* What init returns: the core's context and NCCL's comm id, for the group's messages. */
typedef struct ferry_nccl_rma_init {
    uint64_t magic;
    void    *core;
    uint64_t comm_id;
} ferry_nccl_rma_init_t;

typedef struct ferry_nccl_rma_listen {
    uint64_t magic;
    void    *be;      /* The backend's listen object. */
    uint64_t comm_id; /* From the init context, for the group's messages. */
} ferry_nccl_rma_listen_t;

typedef struct ferry_nccl_rma_ctx {
    uint64_t magic;
    void    *group;
    int      ncontexts;
} ferry_nccl_rma_ctx_t;

static const ferry_rma_ops_t *ferry_nccl_rma_be(const char *op)
{
    const ferry_rma_ops_t *ops = atomic_load(&ferry_nccl_rma_ops);

    if (ops == NULL)
        FERRY_WARN_LIMITED("RMA %s called before a successful RMA init", op);
    return ops;
}

static ferry_nccl_rma_ctx_t *ferry_nccl_rma_ctx(void *rma_ctx, const char *op)
{
    ferry_nccl_rma_ctx_t *c = rma_ctx;

    if (c == NULL || c->magic != FERRY_NCCL_RMA_CTX_MAGIC) {
        FERRY_WARN_LIMITED("RMA %s(%p): not a live RMA context of ferry's (pass what "
                           "createContext returned, before destroyContext)", op, rma_ctx);
        return NULL;
    }
    return c;
}

static _Atomic int ferry_nccl_rma_refusal_said;

ncclResult_t ferry_nccl_rma_init(void **ctx_p, uint64_t comm_id, ncclDebugLogger_t log_fn)
{
    ferry_nccl_rma_init_t *init = calloc(1, sizeof(*init));
    ncclResult_t res;
    const char *name;

    *ctx_p = NULL;
    if (init == NULL)
        return ncclSystemError;
    res = ferry_nccl_ctx_init(&init->core, comm_id, NCCL_NET_TRAFFIC_CLASS_UNDEF, log_fn);
    if (res != ncclSuccess) {
        free(init);
        return res;
    }
    init->magic = FERRY_NCCL_RMA_INIT_MAGIC;
    init->comm_id = comm_id;
    if (!ferry_api_rma_wanted()) {
        /* Declined: NCCL moves on to its own RMA (its IB's, on an ib cluster). Said once. */
        if (!atomic_exchange(&ferry_nccl_rma_refusal_said, 1))
            FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET,
                       "RMA init: NCCL_FERRY_RMA=0, so ferry's RMA plugin declines and NCCL "
                       "carries its one-sided operations and the Device API's GIN with its own "
                       "RMA (or the one NCCL_RMA_PLUGIN names); ferry's net plugin is unaffected");
        (void)ferry_api_finalize(init->core);
        init->magic = 0;
        free(init);
        return ncclInvalidUsage;
    }
    name = ferry_api_backend_name();
    for (int i = 0; name != NULL && ferry_nccl_rma_backends[i] != NULL; i++) {
        if (strcmp(ferry_nccl_rma_backends[i]->backend, name) == 0) {
            atomic_store(&ferry_nccl_rma_ops, ferry_nccl_rma_backends[i]);
            *ctx_p = init;
            return ncclSuccess;
        }
    }
    /*
     * Not a WARN: NCCL asks every communicator, and on an ib cluster it then
     * takes its own IB RMA, which is what such a job wants. Said once.
     */
    if (!atomic_exchange(&ferry_nccl_rma_refusal_said, 1))
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET,
                   "RMA init: one-sided operations (NCCL's RMA plugin API: put, put with "
                   "signal, get) are not available on ferry's %s backend yet, so NCCL uses "
                   "its own RMA or the one NCCL_RMA_PLUGIN names; NCCL_FERRY_BACKEND=socket "
                   "runs them over TCP; ferry's net plugin itself is unaffected",
                   name != NULL ? name : "(none)");
    (void)ferry_api_finalize(init->core);
    init->magic = 0;
    free(init);
    return ncclInvalidUsage;
}

ncclResult_t ferry_nccl_rma_devices(int *ndev)
{
    /* No RMA backend (init refused): no RMA device either. */
    if (atomic_load(&ferry_nccl_rma_ops) == NULL) {
        *ndev = 0;
        return ncclSuccess;
    }
    return ferry_nccl_devices(ndev);
}

ncclResult_t ferry_nccl_rma_get_properties(int dev, ncclNetProperties_v12_t *props)
{
    const ferry_rma_ops_t *ops;
    ferry_props_t fp;
    ncclResult_t res = ferry_nccl_props_get(dev, &fp, props, sizeof(*props));

    if (res != ncclSuccess)
        return res;
    FERRY_NCCL_PROPS_FILL_V12(props, &fp, dev);
    /*
     * A CPU proxy drives it; DMA-BUF only from a backend that registers it
     * (ib: GPU windows on a host without a peer-memory module).
     */
    ops = atomic_load(&ferry_nccl_rma_ops);
    props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    props->ptrSupport = fp.ptr_support & (NCCL_PTR_HOST | NCCL_PTR_CUDA |
                                          (ops != NULL && ops->reg_dmabuf != NULL
                                               ? NCCL_PTR_DMABUF : 0));
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->maxRecvs = 1;
    return ncclSuccess;
}

ncclResult_t ferry_nccl_rma_listen(void *ctx, int dev, void *handle, void **listen_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("listen");
    ferry_nccl_rma_listen_t *l;
    ferry_status_t st;

    *listen_p = NULL;
    if (ops == NULL)
        return ncclInternalError;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return ncclSystemError;
    st = ops->listen(dev, handle, &l->be);
    if (st != FERRY_OK) {
        free(l);
        return ferry_nccl_result(st);
    }
    l->magic = FERRY_NCCL_RMA_LISTEN_MAGIC;
    if (ctx != NULL && ((ferry_nccl_rma_init_t *)ctx)->magic == FERRY_NCCL_RMA_INIT_MAGIC)
        l->comm_id = ((ferry_nccl_rma_init_t *)ctx)->comm_id;
    *listen_p = l;
    return ncclSuccess;
}

ncclResult_t ferry_nccl_rma_close_listen(void *listen)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("closeListen");
    ferry_nccl_rma_listen_t *l = listen;
    ferry_status_t st;

    if (ops == NULL)
        return ncclInternalError;
    if (l == NULL || l->magic != FERRY_NCCL_RMA_LISTEN_MAGIC) {
        FERRY_WARN_LIMITED("RMA closeListen(%p): not an open RMA listen comm of ferry's", listen);
        return ncclInternalError;
    }
    st = ops->close_listen(l->be);
    l->magic = 0;
    free(l);
    return ferry_nccl_result(st);
}

ncclResult_t ferry_nccl_rma_connect(void *ctx, void *handles[], int nranks, int rank,
                                    void *listen, void **coll_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("connect");
    ferry_nccl_rma_listen_t *l = listen;

    (void)ctx; /* NCCL passes its net context here, not ours. */
    *coll_p = NULL;
    if (ops == NULL)
        return ncclInternalError;
    if (l == NULL || l->magic != FERRY_NCCL_RMA_LISTEN_MAGIC) {
        FERRY_WARN("RMA connect: listenComm %p is not an open RMA listen comm of ferry's; pass "
                   "the one listen() returned, before closeListen()", listen);
        return ncclInternalError;
    }
    return ferry_nccl_result(ops->connect((void *const *)handles, nranks, rank, l->be,
                                          l->comm_id, coll_p));
}

ncclResult_t ferry_nccl_rma_create_context(void *coll, int ncontexts, void **rma_ctx_p)
{
    ferry_nccl_rma_ctx_t *c;

    *rma_ctx_p = NULL;
    if (coll == NULL) {
        FERRY_WARN("RMA createContext: NULL collComm; pass what connect() returned");
        return ncclInternalError;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ncclSystemError;
    /* Every context shares the group's connections, and so its ordering. */
    c->magic = FERRY_NCCL_RMA_CTX_MAGIC;
    c->group = coll;
    c->ncontexts = ncontexts;
    *rma_ctx_p = c;
    return ncclSuccess;
}

ncclResult_t ferry_nccl_rma_destroy_context(void *rma_ctx)
{
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_ctx(rma_ctx, "destroyContext");

    if (c == NULL)
        return ncclInternalError;
    c->magic = 0;
    free(c);
    return ncclSuccess;
}

ncclResult_t ferry_nccl_rma_reg(void *coll, void *data, size_t size, int type, uint64_t flags,
                                void **mhandle_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("regMrSym");

    /* Ordering is strict for every region already (one stream per peer): flags change nothing. */
    (void)flags;
    *mhandle_p = NULL;
    if (ops == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ops->reg(coll, data, size, type, mhandle_p));
}

ncclResult_t ferry_nccl_rma_reg_dmabuf(void *coll, void *data, size_t size, int type,
                                       uint64_t offset, int fd, uint64_t flags,
                                       void **mhandle_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("regMrSymDmaBuf");

    /* As regMrSym: ordering is strict for every region already. */
    (void)flags;
    *mhandle_p = NULL;
    if (ops == NULL)
        return ncclInternalError;
    if (ops->reg_dmabuf == NULL) {
        FERRY_WARN("RMA regMrSymDmaBuf(%p, %zu bytes, type %d, offset %llu, fd %d): ferry's RMA "
                   "on the %s backend takes no DMA-BUF (its properties do not say "
                   "NCCL_PTR_DMABUF); register the memory with regMrSym", data, size, type,
                   (unsigned long long)offset, fd, ops->backend);
        return ncclInvalidUsage;
    }
    return ferry_nccl_result(ops->reg_dmabuf(coll, data, size, type, offset, fd, mhandle_p));
}

ncclResult_t ferry_nccl_rma_dereg(void *coll, void *mhandle)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("deregMrSym");

    if (ops == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ops->dereg(coll, mhandle));
}

ncclResult_t ferry_nccl_rma_close_coll(void *coll)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("closeColl");

    if (ops == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ops->close(coll));
}

/* The context index is only checked: all contexts of a group share its connections. */
static ferry_nccl_rma_ctx_t *ferry_nccl_rma_op_ctx(void *rma_ctx, int context, const char *op)
{
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_ctx(rma_ctx, op);

    if (c != NULL && c->ncontexts > 0 && (context < 0 || context >= c->ncontexts)) {
        FERRY_WARN_LIMITED("RMA %s: context %d is out of range: createContext asked for %d",
                           op, context, c->ncontexts);
        return NULL;
    }
    return c;
}

/* Which post ferry_nccl_rma_post makes. */
typedef struct ferry_nccl_rma_op {
    const char            *name;
    const ferry_rma_put_t *put;
    const ferry_rma_get_t *get;
    uint32_t               flush_rank; /* Neither put nor get: a flush towards it. */
} ferry_nccl_rma_op_t;

/* One post under the group's lock; *request_p stays NULL unless it succeeded. */
static ferry_status_t ferry_nccl_rma_post(const ferry_rma_ops_t *ops, void *group,
                                          const ferry_nccl_rma_op_t *op, void **request_p)
{
    pthread_mutex_t *lock = ops->lock(group, op->name);
    ferry_status_t st;

    *request_p = NULL;
    if (lock == NULL)
        return FERRY_ERR_INVALID;
    pthread_mutex_lock(lock);
    st = op->put != NULL   ? ops->put_locked(group, op->put, request_p)
         : op->get != NULL ? ops->get_locked(group, op->get, request_p)
                           : ops->flush_locked(group, op->flush_rank, request_p);
    pthread_mutex_unlock(lock);
    if (st != FERRY_OK)
        *request_p = NULL;
    return st;
}

ncclResult_t ferry_nccl_rma_iput_signal(void *rma_ctx, int context, uint64_t src_off,
                                        void *src_mh, size_t size, uint64_t dst_off,
                                        void *dst_mh, uint32_t rank, uint64_t sig_off,
                                        void *sig_mh, uint64_t sig_value, uint32_t sig_op,
                                        void **request_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("iputSignal");
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_op_ctx(rma_ctx, context, "iputSignal");
    ferry_rma_put_t op = {
        .rank = rank, .src_mr = src_mh, .src_off = src_off, .size = size,
        .dst_mr = dst_mh, .dst_off = dst_off, .sig_mr = sig_mh, .sig_off = sig_off,
        .sig_value = sig_value, .sig_op = sig_op,
    };
    ferry_nccl_rma_op_t post = { .name = "iput", .put = &op }; /* Its group check: iput. */

    *request_p = NULL;
    if (ops == NULL || c == NULL)
        return ncclInternalError;
    if (sig_op != NCCL_NET_SIGNAL_OP_INC && sig_op != NCCL_NET_SIGNAL_OP_ADD) {
        FERRY_WARN_LIMITED("RMA iputSignal to rank %u: signal operation %u is none NCCL "
                           "defines (NCCL_NET_SIGNAL_OP_INC 1, NCCL_NET_SIGNAL_OP_ADD 2)", rank,
                           sig_op);
        return ncclInvalidArgument;
    }
    return ferry_nccl_result(ferry_nccl_rma_post(ops, c->group, &post, request_p));
}

ncclResult_t ferry_nccl_rma_iput(void *rma_ctx, int context, uint64_t src_off, void *src_mh,
                                 size_t size, uint64_t dst_off, void *dst_mh, uint32_t rank,
                                 void **request_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("iput");
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_op_ctx(rma_ctx, context, "iput");
    ferry_rma_put_t op = {
        .rank = rank, .src_mr = src_mh, .src_off = src_off, .size = size,
        .dst_mr = dst_mh, .dst_off = dst_off, .sig_op = FERRY_RMA_SIGNAL_NONE,
    };
    ferry_nccl_rma_op_t post = { .name = "iput", .put = &op };

    *request_p = NULL;
    if (ops == NULL || c == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ferry_nccl_rma_post(ops, c->group, &post, request_p));
}

ncclResult_t ferry_nccl_rma_iget(void *rma_ctx, int context, uint64_t remote_off,
                                 void *remote_mh, size_t size, uint64_t local_off,
                                 void *local_mh, uint32_t rank, void **request_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("iget");
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_op_ctx(rma_ctx, context, "iget");
    ferry_rma_get_t op = {
        .rank = rank, .remote_mr = remote_mh, .remote_off = remote_off, .size = size,
        .local_mr = local_mh, .local_off = local_off,
    };
    ferry_nccl_rma_op_t post = { .name = "iget", .get = &op };

    *request_p = NULL;
    if (ops == NULL || c == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ferry_nccl_rma_post(ops, c->group, &post, request_p));
}

ncclResult_t ferry_nccl_rma_iflush(void *rma_ctx, int context, void *mhandle, uint32_t rank,
                                   void **request_p)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("iflush");
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_op_ctx(rma_ctx, context, "iflush");
    ferry_nccl_rma_op_t post = { .name = "iflush", .flush_rank = rank };

    (void)mhandle; /* A flush covers every earlier put to rank, whatever region. */
    *request_p = NULL;
    if (ops == NULL || c == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ferry_nccl_rma_post(ops, c->group, &post, request_p));
}

ncclResult_t ferry_nccl_rma_test(void *coll, void *request, int *done)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("test");

    *done = 0;
    if (ops == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ops->test(coll, request, done));
}

/*
 * One bounded step of the group's progress under its lock. A failed peer
 * is no error here: test() and queryLastError say so.
 */
static ferry_status_t ferry_nccl_rma_step(const ferry_rma_ops_t *ops, void *group,
                                          const char *op)
{
    pthread_mutex_t *lock = ops->lock(group, op);

    if (lock == NULL)
        return FERRY_ERR_INVALID;
    pthread_mutex_lock(lock);
    (void)ops->progress_locked(group);
    pthread_mutex_unlock(lock);
    return FERRY_OK;
}

ncclResult_t ferry_nccl_rma_progress(void *rma_ctx)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("rmaProgress");
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_ctx(rma_ctx, "rmaProgress");

    if (ops == NULL || c == NULL)
        return ncclInternalError;
    return ferry_nccl_result(ferry_nccl_rma_step(ops, c->group, "rmaProgress"));
}

ncclResult_t ferry_nccl_rma_query_last_error(void *rma_ctx, bool *has_error)
{
    const ferry_rma_ops_t *ops = ferry_nccl_rma_be("queryLastError");
    ferry_nccl_rma_ctx_t *c = ferry_nccl_rma_ctx(rma_ctx, "queryLastError");
    ferry_status_t st;

    *has_error = false;
    if (ops == NULL || c == NULL)
        return ncclInternalError;
    /* A caller that only asks (no rmaProgress) still notices a peer that died. */
    st = ferry_nccl_rma_step(ops, c->group, "queryLastError");
    if (st == FERRY_OK)
        *has_error = ops->failed(c->group) != 0;
    return ferry_nccl_result(st);
}

ncclResult_t ferry_nccl_rma_finalize(void *ctx)
{
    ferry_nccl_rma_init_t *init = ctx;
    void *core;

    if (init == NULL || init->magic != FERRY_NCCL_RMA_INIT_MAGIC) {
        FERRY_WARN("RMA finalize(%p): not a live RMA context of ferry's (finalized twice, or "
                   "a context of another plugin)", ctx);
        return ncclInternalError;
    }
    core = init->core;
    init->magic = 0;
    free(init);
    return ferry_nccl_finalize(core);
}
