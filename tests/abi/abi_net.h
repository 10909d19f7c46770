/*
 * A version-neutral view of one ncclNetPlugin_vN struct, so the loader test
 * runs one scenario against every version. Each binder (abi_bind_*.c) calls
 * through its own version's struct type from include/nccl; members whose C
 * type is the same in every version are copied straight from that struct,
 * which also checks at compile time that the types really agree.
 */
#ifndef FERRY_ABI_NET_H
#define FERRY_ABI_NET_H

#include <stddef.h>

#include "nccl/net.h"

/* The properties the test checks, gathered from any version's struct. */
typedef struct abi_props {
    const char *name;             /* Device name. */
    int         ptr_support;      /* NCCL_PTR_* bits. */
    int         speed;            /* Mbps. */
    int         max_recvs;        /* Largest grouped irecv. */
    int         dev_type;         /* ncclNetDeviceType. */
    int         dev_version;      /* netDeviceVersion. */
    int         has_vprops;       /* v9+: the next three are valid. */
    int         vprops_ndevs;     /* vProps.ndevs. */
    int         vprops_dev0;      /* vProps.devs[0]. */
    size_t      max_p2p_bytes;    /* maxP2pBytes. */
    int         has_mmr;          /* v11+: max_multi_request valid. */
    int         max_multi_request; /* maxMultiRequestSize. */
    int         has_rail;         /* v12: rail_id/plane_id valid. */
    int         rail_id;          /* railId. */
    int         plane_id;         /* planeId. */
} abi_props_t;

typedef struct abi_net abi_net_t;

typedef ncclResult_t (*abi_accept_fn_t)(void *listen_comm, void **recv_comm,
                                        ncclNetDeviceHandle_v11_t **recv_dev_comm);
typedef ncclResult_t (*abi_reg_mr_fn_t)(void *comm, void *data, size_t size, int type,
                                        void **mhandle);
typedef ncclResult_t (*abi_comm_fn_t)(void *comm);

struct abi_net {
    int         version;          /* N of ncclNetPlugin_vN. */
    const void *table;            /* The ncclNet_vN_t found by dlsym. */
    const char *name;             /* table->name. */
    void       *ctx;              /* v11+: what init returned. */
    int         recv_hint;        /* v11+: irecv is given the optional-completion hint. */
    /* Name of the first member that breaks the contract, or NULL. */
    const char *(*bad_member)(const abi_net_t *net);
    /* Version-specific calls, through per-version shims. */
    ncclResult_t (*init)(abi_net_t *net, ncclDebugLogger_t log);
    ncclResult_t (*get_props)(abi_net_t *net, int dev, abi_props_t *props);
    ncclResult_t (*listen)(abi_net_t *net, int dev, void *handle, void **listen_comm);
    ncclResult_t (*connect)(abi_net_t *net, int dev, void *handle, void **send_comm);
    ncclResult_t (*isend)(abi_net_t *net, void *send_comm, void *data, size_t size, int tag,
                          void *mhandle, void **request);
    ncclResult_t (*irecv)(abi_net_t *net, void *recv_comm, void *data, size_t size, int tag,
                          void *mhandle, void **request);
    ncclResult_t (*finalize)(abi_net_t *net); /* NULL before v11. */
    /* Same C type in v8..v12: the table's own pointers. */
    ncclResult_t (*devices)(int *ndev);
    abi_accept_fn_t accept;
    abi_reg_mr_fn_t reg_mr;
    ncclResult_t (*dereg_mr)(void *comm, void *mhandle);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    abi_comm_fn_t close_send;
    abi_comm_fn_t close_recv;
    abi_comm_fn_t close_listen;
};

/* Fill net from ncclNetPlugin_vN in lib; 0 on success, -1 if the symbol is missing. */
int abi_bind_v8(abi_net_t *net, void *lib);
int abi_bind_v9(abi_net_t *net, void *lib);
int abi_bind_v10(abi_net_t *net, void *lib);
int abi_bind_v11(abi_net_t *net, void *lib);
int abi_bind_v12(abi_net_t *net, void *lib);

/*
 * Helpers for the binders. Mandatory members are those NCCL calls without
 * a NULL check (reference §2.6), plus iflush, which ferry always provides;
 * getDeviceMr and irecvConsumed must be NULL for a HOST plugin.
 */
#define ABI_BAD_MEMBER_COMMON(_t)                                        \
    (!(_t)->init ? "init" : !(_t)->devices ? "devices" :                 \
     !(_t)->getProperties ? "getProperties" : !(_t)->listen ? "listen" : \
     !(_t)->connect ? "connect" : !(_t)->accept ? "accept" :             \
     !(_t)->regMr ? "regMr" : !(_t)->deregMr ? "deregMr" :               \
     !(_t)->isend ? "isend" : !(_t)->irecv ? "irecv" :                   \
     !(_t)->iflush ? "iflush" : !(_t)->test ? "test" :                   \
     !(_t)->closeSend ? "closeSend" : !(_t)->closeRecv ? "closeRecv" :   \
     !(_t)->closeListen ? "closeListen" :                                \
     (_t)->getDeviceMr ? "getDeviceMr (must be NULL)" :                  \
     (_t)->irecvConsumed ? "irecvConsumed (must be NULL)" : NULL)

/* Copy the members whose C type is shared by every version. */
#define ABI_BIND_COMMON(_net, _t)                 \
    do {                                          \
        (_net)->table        = (_t);              \
        (_net)->name         = (_t)->name;        \
        (_net)->devices      = (_t)->devices;     \
        (_net)->accept       = (_t)->accept;      \
        (_net)->reg_mr       = (_t)->regMr;       \
        (_net)->dereg_mr     = (_t)->deregMr;     \
        (_net)->test         = (_t)->test;        \
        (_net)->close_send   = (_t)->closeSend;   \
        (_net)->close_recv   = (_t)->closeRecv;   \
        (_net)->close_listen = (_t)->closeListen; \
    } while (0)

/* The contract check of version _v, for the members every version has. */
#define ABI_DEFINE_BAD_MEMBER(_v)                                           \
    static const char *abi_v##_v##_bad_member(const abi_net_t *net)         \
    {                                                                       \
        const ncclNet_v##_v##_t *t = net->table;                            \
        return ABI_BAD_MEMBER_COMMON(t);                                    \
    }

/*
 * Body of abi_bind_v<_v>: look the struct up (returning -1 from the caller
 * when it is missing) and wire the abi_v<_v>_* shims of that file.
 */
#define ABI_BIND(_net, _lib, _v)                                            \
    do {                                                                    \
        const ncclNet_v##_v##_t *t_ = dlsym((_lib), "ncclNetPlugin_v" #_v); \
        if (t_ == NULL)                                                     \
            return -1;                                                      \
        memset((_net), 0, sizeof(*(_net)));                                 \
        (_net)->version    = (_v);                                          \
        ABI_BIND_COMMON(_net, t_);                                          \
        (_net)->bad_member = abi_v##_v##_bad_member;                        \
        (_net)->init       = abi_v##_v##_init;                              \
        (_net)->get_props  = abi_v##_v##_get_props;                         \
        (_net)->listen     = abi_v##_v##_listen;                            \
        (_net)->connect    = abi_v##_v##_connect;                           \
        (_net)->isend      = abi_v##_v##_isend;                             \
        (_net)->irecv      = abi_v##_v##_irecv;                             \
    } while (0)

/* Property fields present since v8, then the v9 additions. */
#define ABI_PROPS_V8(_out, _p)                         \
    do {                                               \
        (_out)->name        = (_p)->name;              \
        (_out)->ptr_support = (_p)->ptrSupport;        \
        (_out)->speed       = (_p)->speed;             \
        (_out)->max_recvs   = (_p)->maxRecvs;          \
        (_out)->dev_type    = (_p)->netDeviceType;     \
        (_out)->dev_version = (_p)->netDeviceVersion;  \
    } while (0)
#define ABI_PROPS_V9(_out, _p)                         \
    do {                                               \
        ABI_PROPS_V8(_out, _p);                        \
        (_out)->has_vprops    = 1;                     \
        (_out)->vprops_ndevs  = (_p)->vProps.ndevs;    \
        (_out)->vprops_dev0   = (_p)->vProps.devs[0];  \
        (_out)->max_p2p_bytes = (_p)->maxP2pBytes;     \
    } while (0)

#endif
