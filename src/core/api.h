/*
 * The one implementation behind every exported ncclNetPlugin_vN struct.
 * src/nccl/ translates each ABI version's arguments to these calls and maps
 * ferry_status_t to ncclResult_t; nothing here knows an ABI version.
 *
 * Conventions (the NCCL ones, restated):
 *  - "not ready yet" is FERRY_OK with the out-pointer set to NULL
 *    (connect/accept: call again; isend/irecv: retry later).
 *  - every function is safe to call concurrently from NCCL's init, service
 *    and progress threads.
 */
#ifndef FERRY_CORE_API_H
#define FERRY_CORE_API_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/log.h"

/* Pointer kinds, same bit values as NCCL_PTR_HOST/CUDA/DMABUF. */
#define FERRY_PTR_HOST   0x1
#define FERRY_PTR_CUDA   0x2
#define FERRY_PTR_DMABUF 0x4

/* Size of NCCL's opaque connection handle (NCCL_NET_HANDLE_MAXSIZE). */
#define FERRY_HANDLE_SIZE 128
/* Requests each comm supports in flight (NCCL_NET_MAX_REQUESTS). */
#define FERRY_MAX_REQUESTS 32
/*
 * What irecv may find in *request_p on entry: the receive may be reported
 * done once posted (NCCL_NET_OPTIONAL_RECV_COMPLETION, LL and LL128 with one
 * buffer). Here so a backend reads the hint without NCCL's headers.
 */
#define FERRY_RECV_OPTIONAL_COMPLETION 0x1

/* Device properties, ABI-neutral; src/nccl fills each version's struct. */
typedef struct ferry_props {
    const char *name;          /* Unique per device; valid for the process' life. */
    const char *pci_path;      /* sysfs PCI path or NULL. */
    uint64_t    guid;
    int         ptr_support;   /* FERRY_PTR_* bits. */
    int         reg_is_global;
    int         force_flush;
    int         speed_mbps;
    int         port;
    float       latency_us;
    int         max_comms;
    int         max_recvs;
    size_t      max_p2p_bytes;
    size_t      max_coll_bytes;
    int         max_multi_request_size;
    int         vdevs_n;       /* Members of a virtual device (makeVDevice); 0: a physical one. */
    int         vdevs[8];      /* Their device numbers (NCCL's vProps.devs). */
    int         rail_id;       /* The user's rail of the device (NCCL_IB_HCA); -1 unknown. */
    int         plane_id;      /* Its plane, likewise; -1 unknown. Both go to v12+ only. */
} ferry_props_t;

/* Members a virtual device can merge (NCCL_NET_MAX_DEVS_PER_NIC up to v11). */
#define FERRY_MAX_VDEV_MEMBERS 4

/* The build's backends and services (core/backend.h), from the layer above. */
typedef struct ferry_backend_set ferry_backend_set_t;

/*
 * Per-communicator init (v11 semantics). traffic_class -1 means undefined.
 * The first init of the process (or the first after the last finalize)
 * brings up a backend of set; later ones keep the one that runs.
 */
ferry_status_t ferry_api_init(void **ctx_p, const ferry_backend_set_t *set, uint64_t comm_id,
                              int traffic_class, ferry_log_fn_t logger);
/* Safe with ctx == NULL (after a failed init) and after every other error. */
ferry_status_t ferry_api_finalize(void *ctx);
ferry_status_t ferry_api_devices(int *ndev_p);
/* The name of the backend that runs ("socket", "ib"), or NULL before a successful init. */
const char *ferry_api_backend_name(void);
ferry_status_t ferry_api_get_properties(int dev, ferry_props_t *props_p);
/* NCCL's makeVDevice: merge devs[0..ndevs-1] into a new device, its number in *dev_p. */
ferry_status_t ferry_api_make_vdevice(int *dev_p, int ndevs, const int *devs);

/*
 * NCCL's setNetAttr (v11+): attr's connection hints become ctx's, for the
 * connects that follow (core/net_hints.h); a per-transfer attr is only
 * remembered. Fields out of range are ignored with a WARN, never an error.
 */
typedef struct ferry_net_attr ferry_net_attr_t;
ferry_status_t ferry_api_set_net_attr(void *ctx, const ferry_net_attr_t *attr);
/* 1 when the backend in use sizes connections from those hints (after a successful init). */
int ferry_api_takes_net_hints(void);
/* NCCL_FERRY_RMA as loaded by the last successful init: 1 when ferry's RMA plugin may serve. */
int ferry_api_rma_wanted(void);

ferry_status_t ferry_api_listen(void *ctx, int dev, void *handle, void **listen_comm_p);
/* traffic_class -1: use the one given to init for ctx. */
ferry_status_t ferry_api_connect(void *ctx, int dev, void *handle, int traffic_class,
                                 void **send_comm_p);
ferry_status_t ferry_api_accept(void *listen_comm, void **recv_comm_p);

ferry_status_t ferry_api_reg_mr(void *comm, void *data, size_t size, int type,
                                void **mhandle_p);
ferry_status_t ferry_api_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                       uint64_t offset, int fd, void **mhandle_p);
ferry_status_t ferry_api_dereg_mr(void *comm, void *mhandle);

ferry_status_t ferry_api_isend(void *send_comm, void *data, size_t size, int tag,
                               void *mhandle, void **request_p);
/* *request_p may hold NCCL's optional-completion hint on entry; it is always overwritten. */
ferry_status_t ferry_api_irecv(void *recv_comm, int n, void **data, size_t *sizes,
                               int *tags, void **mhandles, void **request_p);
/* Sets *request_p = NULL when there is nothing to flush. */
ferry_status_t ferry_api_iflush(void *recv_comm, int n, void **data, int *sizes,
                                void **mhandles, void **request_p);
/* sizes may be NULL; when done, sizes[i] receives the bytes of buffer i. */
ferry_status_t ferry_api_test(void *request, int *done_p, int *sizes);

/* What the bundled NCCL tuner needs to know (core/tune.c). */
typedef struct ferry_api_tuning {
    int    enabled;       /* NCCL_FERRY_TUNER. */
    int    has_device;    /* The backend found at least one device. */
    int    host_staged;   /* Device 0 takes host memory only: NCCL stages GPU data in host buffers. */
    int    ll_bw_mbs;     /* NCCL_FERRY_TUNER_LL_BW. */
    size_t channel_bytes; /* NCCL_FERRY_TUNER_CHANNEL_BYTES. */
    int    channel_bytes_set; /* ...set by the user (it then holds even with NCCL_*_NCHANNELS). */
    size_t step_bytes;    /* NCCL_FERRY_TUNER_STEP_BYTES. */
} ferry_api_tuning_t;
/* 0 while ferry's net is not initialized (no live context). */
int ferry_api_tuning(ferry_api_tuning_t *out);

ferry_status_t ferry_api_close_send(void *send_comm);
ferry_status_t ferry_api_close_recv(void *recv_comm);
ferry_status_t ferry_api_close_listen(void *listen_comm);

#endif
