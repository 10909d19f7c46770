/*
 * The one ops table each backend fills. src/core/api.c reaches a backend only
 * through it, so tests can plug in a fake backend and the core never branches
 * on which backend runs. Which backends a build has is said above the core,
 * in src/nccl/backends.c, and handed down to ferry_api_init (ferry_backend_set_t):
 * the core names no symbol of a layer above it. NCCL's members are in NCCL order and
 * none is NULL (optional behaviour points at ferry_no_* below); usable,
 * format_config and make_vdevice may be NULL.
 */
#ifndef FERRY_CORE_BACKEND_H
#define FERRY_CORE_BACKEND_H

#include "core/api.h"
#include "core/config.h"
#include "core/net_hints.h"

/*
 * What a backend's usable() says to NCCL_FERRY_BACKEND=auto. A backend that
 * cannot run although the host or the user's variables say it was meant to
 * (ib: an RDMA port exists, or an NCCL_IB_* variable is set) is
 * FERRY_UNUSABLE_MEANT: auto then WARNs (core/auto_fallback.h) instead of
 * taking the next backend quietly, since the job would otherwise run on a
 * slower transport without anyone asking for it. Its why then says what to
 * fix.
 */
typedef enum ferry_usable {
    FERRY_UNUSABLE = 0,
    FERRY_USABLE = 1,
    FERRY_UNUSABLE_MEANT = 2,
} ferry_usable_t;

/* Per-communicator context handed back by ferry_api_init. */
typedef struct ferry_ctx {
    uint64_t comm_id;       /* NCCL's commHash, for logs. */
    int      traffic_class; /* From ncclConfig_t, -1 when undefined. */
    /* NCCL's latest setNetAttr hints (v11+); zeros: none came (core/net_hints.h). */
    ferry_net_hints_t hints;
} ferry_ctx_t;

typedef struct ferry_backend_ops {
    const char *name;
    /*
     * 1: every byte crosses host memory and the CPU's copies (sockets), even
     * where GPU pointers are taken; NCCL's cost model for a host-staged net
     * then needs the bundled tuner's corrections (core/tune.c).
     */
    int         host_staged;
    /*
     * Bytes per NCCL channel that the bundled tuner gives Simple collectives
     * on this backend while NCCL_FERRY_TUNER_CHANNEL_BYTES is unset (core/tune.c);
     * 0: the core's default.
     */
    size_t      tuner_channel_bytes;
    /*
     * NCCL_FERRY_BACKEND=auto: FERRY_USABLE if this backend can run here (ib:
     * a usable port), else FERRY_UNUSABLE or FERRY_UNUSABLE_MEANT, with the
     * reason in why either way. NULL: always usable.
     */
    ferry_usable_t (*usable)(const ferry_config_t *cfg, char *why, size_t len);
    /* Appends the backend's own variables (" NAME=value(source)") to the effective-config line. */
    void (*format_config)(char *buf, size_t len);
    /* Process-wide bring-up (device discovery) and tear-down, called once each. */
    ferry_status_t (*init)(const ferry_config_t *cfg);
    void (*fini)(void);
    ferry_status_t (*devices)(int *ndev_p);
    ferry_status_t (*get_properties)(int dev, ferry_props_t *props_p);
    /* Merge ndevs devices into one (NCCL's makeVDevice); NULL: the backend merges none. */
    ferry_status_t (*make_vdevice)(int *dev_p, int ndevs, const int *devs);
    /*
     * 1 when this process' connects use NCCL's setNetAttr hints (socket:
     * NCCL_FERRY_NET_HINTS=1). NULL or 0: they would change nothing, so NCCL
     * is shown no setNetAttr and skips building them.
     */
    int (*takes_net_hints)(void);
    ferry_status_t (*listen)(ferry_ctx_t *ctx, int dev, void *handle, void **listen_comm_p);
    ferry_status_t (*connect)(ferry_ctx_t *ctx, int dev, void *handle, int traffic_class,
                              void **send_comm_p);
    ferry_status_t (*accept)(void *listen_comm, void **recv_comm_p);
    ferry_status_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle_p);
    ferry_status_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type,
                                    uint64_t offset, int fd, void **mhandle_p);
    ferry_status_t (*dereg_mr)(void *comm, void *mhandle);
    ferry_status_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                            void **request_p);
    ferry_status_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                            void **mhandles, void **request_p);
    ferry_status_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                             void **request_p);
    ferry_status_t (*test)(void *request, int *done_p, int *sizes);
    ferry_status_t (*close_send)(void *send_comm);
    ferry_status_t (*close_recv)(void *recv_comm);
    ferry_status_t (*close_listen)(void *listen_comm);
} ferry_backend_ops_t;

/* Shared behaviour for backends that move host memory only (ptrSupport = HOST). */
ferry_status_t ferry_no_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle_p);
/* Host-memory backends have nothing to flush: *request_p = NULL. */
ferry_status_t ferry_no_iflush(void *recv_comm, int n, void **data, int *sizes,
                               void **mhandles, void **request_p);

/*
 * What the layer above the core hands it at every init (src/nccl/backends.c):
 * the backends of this build, in the order NCCL_FERRY_BACKEND=auto tries
 * them, NULL-terminated; and what runs beside a backend while ferry is
 * initialised (the signal dump, in the proxy). Static: the core keeps the
 * pointer for the process' life.
 */
struct ferry_backend_set {
    const ferry_backend_ops_t *const *backends;
    void (*services_start)(const ferry_config_t *cfg);
    void (*services_stop)(void);
};

#endif
