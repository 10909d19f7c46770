/*
 * The ib backend's shared internals: devices (one per active port), the
 * process-wide state and the pieces both halves of the backend use. The
 * device half (ib_verbs.c, ib_config.c, ib_dev.c, ib_vdev.c, ib_gid.c,
 * ib_mr.c, ib_gdr.c, ib_async.c) finds ports, merges them into devices,
 * decides which pointer kinds they take and registers memory; the
 * connection half (ib_listen.c, ib_connect.c, ib_accept.c, ib_qp.c,
 * ib_send.c, ib_recv.c, ib_flush.c, ib_poll.c, ib_failover.c,
 * ib_rejoin.c, ib_ops.c, ib_dump.c) builds comms on the request ring
 * (proxy/ring.h) and moves data receiver-driven, as NCCL's own IB does.
 */
#ifndef FERRY_IB_H
#define FERRY_IB_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ferry/verbs_abi.h"

#include "core/backend.h"
#include "ib/ib_config.h"
#include "ib/ib_verbs.h"
#include "proxy/ring.h"

#define FERRY_IB_MAX_HCAS 32 /* Physical devices (NCCL's MAX_IB_DEVS). */
#define FERRY_IB_MAX_DEVS 64 /* Ports in use. */
#define FERRY_IB_MAX_MEMBERS FERRY_MAX_VDEV_MEMBERS /* Ports one virtual device merges. */
#define FERRY_IB_MAX_VDEVS (FERRY_IB_MAX_DEVS + 32) /* Ports, then merged devices. */

/* One registered range of an HCA's MR cache (ib_mr.c). */
typedef struct ferry_ib_mr_entry {
    uintptr_t      addr;  /* Page-aligned start. */
    size_t         len;   /* Page-rounded length. */
    int            access; /* IBV_ACCESS_* it was registered with (RELAXED_ORDERING aside). */
    int            relaxed; /* Registered with IBV_ACCESS_RELAXED_ORDERING: not for FORCE_SO. */
    int            refs;
    struct ibv_mr *mr;
} ferry_ib_mr_entry_t;

/*
 * A physical device (HCA), opened once and shared by its ports: context,
 * protection domain, the MR cache and the async-event thread.
 */
typedef struct ferry_ib_hca {
    char                 name[IBV_SYSFS_NAME_MAX]; /* "mlx5_0", "fakeib0". */
    char                 ibdev_path[IBV_SYSFS_PATH_MAX]; /* sysfs dir of the device. */
    struct ibv_context  *ctx;
    int                  ctx_cm;             /* ctx is librdmacm's (rdmacm mode): not ours to close. */
    struct ibv_pd       *pd;
    struct ibv_device_attr attr;
    char                 pci_path[PATH_MAX]; /* realpath of <ibdev_path>/device, function 0; "" unknown. */
    int                  numa_node;          /* -1 unknown. */
    int                  dmabuf;             /* ibv_reg_dmabuf_mr is accepted (NCCL's probe). */
    int                  relaxed_ordering;   /* Data MRs get IBV_ACCESS_RELAXED_ORDERING. */
    pthread_mutex_t      mr_lock;            /* Guards the MR cache. */
    ferry_ib_mr_entry_t *mrs;                /* Sorted by addr. */
    int                  nmrs, mrs_cap;
    pthread_t            async_thread;       /* "ferry-ibasync<N>"; started at init. */
    int                  async_started;
    _Atomic int          fatal;              /* DEVICE_FATAL seen: every comm on it fails. */
    int                  async_stop_fd;      /* eventfd that stops the async thread (ib_async.c). */
    int                  index;              /* Position in ferry_ib_state.hcas, for thread names. */
} ferry_ib_hca_t;

/* A device as NCCL sees it: one active port of an HCA. */
typedef struct ferry_ib_dev {
    char            name[IBV_SYSFS_NAME_MAX + 8]; /* Unique: "fakeib0:1". */
    ferry_ib_hca_t *hca;
    int             port;        /* Port number on the HCA (1-based). */
    int             link_layer;  /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET. */
    struct ibv_port_attr port_attr; /* As queried at init: lid, active_mtu, speed, width. */
    int             gid_index;   /* Chosen at init (ib_gid.c): NCCL_IB_GID_INDEX or the scan. */
    union ibv_gid   gid;
    int             speed_mbps;  /* From active_speed(_ex) x width. */
    uint64_t        guid;        /* sys_image_guid. */
    int             ar;          /* Adaptive routing for this device (NCCL_IB_ADAPTIVE_ROUTING). */
    int             rail_id;     /* From NCCL_IB_HCA's name:port:rail:plane; -1 unknown. */
    int             plane_id;    /* Likewise. */
    _Atomic int     port_down;   /* PORT_ERR seen and no PORT_ACTIVE since. */
} ferry_ib_dev_t;

/*
 * A device as NCCL numbers it: devices 0..ndev-1 are the ports themselves
 * (one member each); makeVDevice appends merged ones. A comm on a merged
 * device has QPs on every member and stripes each message over them.
 */
typedef struct ferry_ib_vdev {
    int  ndevs;
    int  devs[FERRY_IB_MAX_MEMBERS]; /* Members: indices into ferry_ib_state.devs. */
    char name[FERRY_IB_MAX_MEMBERS * (IBV_SYSFS_NAME_MAX + 8)]; /* "mlx5_0:1+mlx5_1:1". */
} ferry_ib_vdev_t;

/* Process-wide state: written by init (under api.c's lock), then read-only except atomics. */
typedef struct ferry_ib_state {
    ferry_ib_config_t cfg;
    int               nhca;
    ferry_ib_hca_t    hcas[FERRY_IB_MAX_HCAS];
    int               ndev;
    ferry_ib_dev_t    devs[FERRY_IB_MAX_DEVS];
    _Atomic int       nvdev;           /* Devices NCCL sees: ndev ports, then merged ones. */
    ferry_ib_vdev_t   vdevs[FERRY_IB_MAX_VDEVS];
    char              oob_ifname[64];  /* Out-of-band interface (socket layer's rules)... */
    char              oob_addr[64];    /* ...and its address as text. */
    int               gdr;             /* GPU pointers (NCCL_PTR_CUDA) are registered (ib_gdr.c). */
    int               cuda_dmabuf;     /* libcuda says its device 0 exports DMA-BUF fds. */
    char              gdr_why[768];    /* Why gdr is what it is, for logs and errors. */
    struct sockaddr_storage oob_sa;    /* ...and as a socket address (port 0). */
    unsigned          oob_sa_len;
} ferry_ib_state_t;

extern ferry_ib_state_t ferry_ib_state;

/* ib_dev.c */
ferry_status_t ferry_ib_init(const ferry_config_t *cfg);
void ferry_ib_fini(void);
ferry_status_t ferry_ib_devices(int *ndev_p);
ferry_status_t ferry_ib_get_properties(int dev, ferry_props_t *props_p);
/*
 * NCCL_FERRY_BACKEND=auto: FERRY_USABLE if a usable port exists (verbs load,
 * a port is ACTIVE and passes NCCL_IB_HCA, a QP can be created on it), else
 * the reason in why and FERRY_UNUSABLE_MEANT when an RDMA device exists or
 * an ib variable is set (ib_env_set.h; NCCL_IB_DISABLE=1 stays quiet), else
 * FERRY_UNUSABLE. Leaves nothing open behind when it says no.
 */
ferry_usable_t ferry_ib_usable(const ferry_config_t *cfg, char *why, size_t len);
/* "mlx5_0:1" (or "mlx5_0:1+mlx5_1:1") of a device NCCL numbers, for logs; "?" out of range. */
const char *ferry_ib_dev_name(int dev);

/* ib_vdev.c: devices as NCCL numbers them (ports, then merged ones). */
/* One single-member device per port, after the ports are found. */
void ferry_ib_vdev_init(ferry_ib_state_t *st);
/* makeVDevice: NCCL_IB_MERGE_NICS, members of one link layer, at most 4. */
ferry_status_t ferry_ib_make_vdevice(int *dev_p, int ndevs, const int *devs);
/* The device NCCL calls dev, or NULL (with a WARN naming fn) when there is none. */
const ferry_ib_vdev_t *ferry_ib_vdev_get(int dev, const char *fn);
/* getProperties of a merged device: its first member's, speeds summed, the rest narrowed. */
void ferry_ib_vdev_props(const ferry_ib_vdev_t *v, ferry_props_t *props_p);

/* ib_mr.c: the per-HCA registration cache, reference counted over page-rounded ranges. */
/*
 * The MR covering [addr, addr+size) with at least `access`, registered on
 * first use (reg_mr, or reg_mr_iova2 with relaxed ordering unless force_so).
 * On failure: FERRY_ERR_* and a sentence in err (what failed, errno in
 * words, what to check).
 */
ferry_status_t ferry_ib_mr_get(ferry_ib_hca_t *hca, void *addr, size_t size, int access,
                               int force_so, struct ibv_mr **mr_p, char *err, size_t len);
/*
 * What ferry_ib_mr_get_ex registers: a virtual range (fd < 0), or a DMA-BUF
 * fd's bytes from offset mapped at addr (iova = addr, as NCCL does). gpu
 * picks the advice of a failure (peer memory, /dev/infiniband).
 */
typedef struct ferry_ib_mr_req {
    void       *addr;
    size_t      size;
    int         access;   /* IBV_ACCESS_*. */
    int         force_so; /* NCCL_NET_MR_FLAG_FORCE_SO: never relaxed ordering. */
    int         fd;       /* DMA-BUF fd, or -1. */
    uint64_t    offset;   /* Into the DMA-BUF. */
    int         gpu;      /* GPU memory (CUDA pointer or DMA-BUF). */
} ferry_ib_mr_req_t;
ferry_status_t ferry_ib_mr_get_ex(ferry_ib_hca_t *hca, const ferry_ib_mr_req_t *rq,
                                  struct ibv_mr **mr_p, char *err, size_t len);
/* Drop one reference taken by ferry_ib_mr_get; deregisters at 0. */
void ferry_ib_mr_put(ferry_ib_hca_t *hca, struct ibv_mr *mr);

/*
 * ib_async.c: comms watch their QPs and port. The HCA's async thread calls
 * fn (from that thread) for an event on one of the watch's QPs (QP_FATAL,
 * QP_REQ_ERR, QP_ACCESS_ERR, ...) or on its port (PORT_ERR) or device
 * (DEVICE_FATAL, CQ_ERR on its CQ). fn gets the event in words and must not
 * block; it typically fails the comm (ferry_px_ring_fail).
 */
#define FERRY_IB_WATCH_QPS 16
typedef struct ferry_ib_watch {
    ferry_ib_dev_t *dev;
    struct ibv_cq  *cq;
    uint32_t        qpn[FERRY_IB_WATCH_QPS];
    int             nqp;
    void          (*fn)(struct ferry_ib_watch *w, const char *what, int fatal);
    void           *arg;
    struct ferry_ib_watch *next, *prev; /* Under the watch list's lock. */
    int             linked;  /* ib_async.c, under the watch list's lock: on the list. */
    int             calls;   /* ib_async.c, under the watch list's lock: dispatches holding w. */
} ferry_ib_watch_t;
void ferry_ib_watch_add(ferry_ib_watch_t *w);
/* After it returns, fn is not running and will not be called again for w. */
void ferry_ib_watch_remove(ferry_ib_watch_t *w);

/*
 * ib_gdr.c: GPU memory. ferry_ib_gdr_probe (at init, after the devices are
 * open) decides whether GPU pointers are taken (NCCL_FERRY_IB_GDR, or a
 * peer-memory module's sysfs file as NCCL looks for them) and whether
 * libcuda exports DMA-BUF, and logs it; ptr_support is the pointer kinds of
 * a device from that (NCCL_PTR_HOST always).
 */
void ferry_ib_gdr_probe(ferry_ib_state_t *st);
int ferry_ib_gdr_ptr_support(const ferry_ib_dev_t *dev);

/* The backend's ops table (ib_ops.c). */
extern const ferry_backend_ops_t ferry_ib_ops;

#endif
