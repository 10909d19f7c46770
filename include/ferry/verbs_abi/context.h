/*
 * libibverbs ABI: contexts, the exported entry points of libibverbs.so.1
 * and the verbs that are inline in the ABI.
 * Part of ferry/verbs_abi.h, which says what these declarations are and
 * where they are checked; include that header, not this one.
 */
#ifndef FERRY_VERBS_ABI_CONTEXT_H
#define FERRY_VERBS_ABI_CONTEXT_H

#ifndef FERRY_VERBS_ABI_H
#error "include ferry/verbs_abi.h"
#endif

/* ---- contexts ------------------------------------------------------------ */

/*
 * The provider's table in every context. The data-path verbs (post, poll,
 * arm) are inline below and call through it, so they need no symbol; the
 * other slots are what libibverbs once called through and keep the layout.
 */
struct ibv_context_ops {
    void *(*_compat_query_device)(void);
    int (*_compat_query_port)(struct ibv_context *context, uint8_t port_num,
                              struct _compat_ibv_port_attr *port_attr);
    void *(*_compat_alloc_pd)(void);
    void *(*_compat_dealloc_pd)(void);
    void *(*_compat_reg_mr)(void);
    void *(*_compat_rereg_mr)(void);
    void *(*_compat_dereg_mr)(void);
    void *(*alloc_mw)(void);
    void *(*bind_mw)(void);
    void *(*dealloc_mw)(void);
    void *(*_compat_create_cq)(void);
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    void *(*_compat_cq_event)(void);
    void *(*_compat_resize_cq)(void);
    void *(*_compat_destroy_cq)(void);
    void *(*_compat_create_srq)(void);
    void *(*_compat_modify_srq)(void);
    void *(*_compat_query_srq)(void);
    void *(*_compat_destroy_srq)(void);
    void *(*post_srq_recv)(void);
    void *(*_compat_create_qp)(void);
    void *(*_compat_query_qp)(void);
    void *(*_compat_modify_qp)(void);
    void *(*_compat_destroy_qp)(void);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
    void *(*_compat_create_ah)(void);
    void *(*_compat_destroy_ah)(void);
    void *(*_compat_attach_mcast)(void);
    void *(*_compat_detach_mcast)(void);
    void *(*_compat_async_event)(void);
};

struct ibv_context {
    struct ibv_device *device;
    struct ibv_context_ops ops;
    int cmd_fd;
    int async_fd;
    int num_comp_vectors;
    pthread_mutex_t mutex;
    void *abi_compat; /* __VERBS_ABI_IS_EXTENDED: the context is a verbs_context's tail. */
};

#define __VERBS_ABI_IS_EXTENDED ((void *)UINTPTR_MAX)

/*
 * The extended context: slots added over the years grow downwards, so the
 * ibv_context stays last and sz says how many of them a provider filled.
 * Slots neither ferry nor fakeibv calls or fills are untyped placeholders.
 */
struct verbs_context {
    int (*query_port)(struct ibv_context *context, uint8_t port_num,
                      struct ibv_port_attr *port_attr, size_t port_attr_len);
    void (*advise_mr)(void);
    void (*alloc_null_mr)(void);
    void (*read_counters)(void);
    void (*attach_counters_point_flow)(void);
    void (*create_counters)(void);
    void (*destroy_counters)(void);
    void (*reg_dm_mr)(void);
    void (*alloc_dm)(void);
    void (*free_dm)(void);
    void (*modify_flow_action_esp)(void);
    void (*destroy_flow_action)(void);
    void (*create_flow_action_esp)(void);
    void (*modify_qp_rate_limit)(void);
    void (*alloc_parent_domain)(void);
    void (*dealloc_td)(void);
    void (*alloc_td)(void);
    void (*modify_cq)(void);
    void (*post_srq_ops)(void);
    void (*destroy_rwq_ind_table)(void);
    void (*create_rwq_ind_table)(void);
    void (*destroy_wq)(void);
    void (*modify_wq)(void);
    void (*create_wq)(void);
    void (*query_rt_values)(void);
    struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *context,
                                      struct ibv_cq_init_attr_ex *init_attr);
    void *priv;
    int (*query_device_ex)(struct ibv_context *context,
                           const struct ibv_query_device_ex_input *input,
                           struct ibv_device_attr_ex *attr, size_t attr_size);
    void (*ibv_destroy_flow)(void);
    void (*ABI_placeholder2)(void);
    void (*ibv_create_flow)(void);
    void (*ABI_placeholder1)(void);
    void (*open_qp)(void);
    struct ibv_qp *(*create_qp_ex)(struct ibv_context *context,
                                   struct ibv_qp_init_attr_ex *qp_init_attr_ex);
    void (*get_srq_num)(void);
    void (*create_srq_ex)(void);
    void (*open_xrcd)(void);
    void (*close_xrcd)(void);
    uint64_t _ABI_placeholder3;
    size_t sz; /* Bytes of this struct the provider knows, counted back from context. */
    struct ibv_context context;
};

/* The extended context around ctx, or NULL for a provider without one. */
static inline struct verbs_context *verbs_get_ctx(struct ibv_context *ctx)
{
    if (ctx->abi_compat != __VERBS_ABI_IS_EXTENDED)
        return NULL;
    return (struct verbs_context *)(void *)((char *)ctx - offsetof(struct verbs_context, context));
}

/* Whether vctx's provider knows the slot at offset slot_off (its sz reaches it). */
static inline int verbs_abi_ctx_knows_(const struct verbs_context *vctx, size_t slot_off)
{
    return vctx != NULL && vctx->sz >= sizeof(*vctx) - slot_off;
}

/* The extended context when its provider fills slot `op`, else NULL. */
#define verbs_get_ctx_op(ctx, op)                                                                \
    (verbs_abi_ctx_knows_(verbs_get_ctx(ctx), offsetof(struct verbs_context, op)) &&             \
             verbs_get_ctx(ctx)->op != NULL                                                      \
         ? verbs_get_ctx(ctx)                                                                    \
         : NULL)

/* ---- exported entry points (libibverbs.so.1) ----------------------------- */

struct ibv_device **ibv_get_device_list(int *num_devices);
void ibv_free_device_list(struct ibv_device **list);
const char *ibv_get_device_name(struct ibv_device *device);
int ibv_get_device_index(struct ibv_device *device);
__be64 ibv_get_device_guid(struct ibv_device *device);
struct ibv_context *ibv_open_device(struct ibv_device *device);
int ibv_close_device(struct ibv_context *context);
struct ibv_context *ibv_import_device(int cmd_fd);
struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle);
void ibv_unimport_pd(struct ibv_pd *pd);
struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle);
void ibv_unimport_mr(struct ibv_mr *mr);
struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle);
void ibv_unimport_dm(struct ibv_dm *dm);
int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event);
void ibv_ack_async_event(struct ibv_async_event *event);
int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr);
/* The exported symbol fills only the old layout (up to flags); see the macro below. */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct _compat_ibv_port_attr *port_attr);
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
                             size_t max_entries, uint32_t flags, size_t entry_size);
int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey);
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey);
struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
int ibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                               int access);
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access);
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                 uint64_t iova, int fd, int access);
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
                 int access);
int ibv_dereg_mr(struct ibv_mr *mr);
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context);
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel);
struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector);
int ibv_resize_cq(struct ibv_cq *cq, int cqe);
int ibv_destroy_cq(struct ibv_cq *cq);
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr);
int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask);
int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr);
int ibv_destroy_srq(struct ibv_srq *srq);
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr);
int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags);
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                 struct ibv_qp_init_attr *init_attr);
int ibv_destroy_qp(struct ibv_qp *qp);
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp);
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
                        struct ibv_grh *grh, struct ibv_ah_attr *ah_attr);
struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
                                     uint8_t port_num);
int ibv_destroy_ah(struct ibv_ah *ah);
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int ibv_fork_init(void);
enum ibv_fork_status ibv_is_fork_initialized(void);
const char *ibv_node_type_str(enum ibv_node_type node_type);
const char *ibv_port_state_str(enum ibv_port_state port_state);
const char *ibv_event_type_str(enum ibv_event_type event);
const char *ibv_wc_status_str(enum ibv_wc_status status);
int ibv_rate_to_mult(enum ibv_rate rate) __attribute__((const));
enum ibv_rate mult_to_ibv_rate(int mult) __attribute__((const));
int ibv_rate_to_mbps(enum ibv_rate rate) __attribute__((const));
enum ibv_rate mbps_to_ibv_rate(int mbps) __attribute__((const));
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
                                uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid);
int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece);
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece);

/* ---- verbs that are inline in the ABI ------------------------------------ */

/*
 * ibv_query_port as a caller compiles it: through the provider's extended
 * query_port when it has one, which fills the whole struct; else through
 * the exported compat entry, which fills the old layout (the rest zeroed).
 */
static inline int verbs_abi_query_port_(struct ibv_context *context, uint8_t port_num,
                                        struct ibv_port_attr *port_attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, query_port);

    if (vctx == NULL) {
        memset(port_attr, 0, sizeof(*port_attr));
        return ibv_query_port(context, port_num, (struct _compat_ibv_port_attr *)(void *)port_attr);
    }
    return vctx->query_port(context, port_num, port_attr, sizeof(*port_attr));
}
#define ibv_query_port(context, port_num, port_attr) \
    verbs_abi_query_port_(context, port_num, port_attr)

static inline int ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                                   uint32_t gid_index, struct ibv_gid_entry *entry, uint32_t flags)
{
    return _ibv_query_gid_ex(context, port_num, gid_index, entry, flags, sizeof(*entry));
}

static inline ssize_t ibv_query_gid_table(struct ibv_context *context,
                                          struct ibv_gid_entry *entries, size_t max_entries,
                                          uint32_t flags)
{
    return _ibv_query_gid_table(context, entries, max_entries, flags, sizeof(*entries));
}

/* Access bits in the optional range need the IBVERBS_1.8 entry, which knows of them. */
static inline struct ibv_mr *verbs_abi_reg_mr_(struct ibv_pd *pd, void *addr, size_t length,
                                               unsigned int access)
{
    if ((access & IBV_ACCESS_OPTIONAL_RANGE) == 0)
        return (ibv_reg_mr)(pd, addr, length, (int)access);
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}
#define ibv_reg_mr(pd, addr, length, access) \
    verbs_abi_reg_mr_(pd, addr, length, (unsigned int)(access))

static inline struct ibv_mr *verbs_abi_reg_mr_iova_(struct ibv_pd *pd, void *addr, size_t length,
                                                    uint64_t iova, unsigned int access)
{
    if ((access & IBV_ACCESS_OPTIONAL_RANGE) == 0)
        return (ibv_reg_mr_iova)(pd, addr, length, iova, (int)access);
    return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}
#define ibv_reg_mr_iova(pd, addr, length, iova, access) \
    verbs_abi_reg_mr_iova_(pd, addr, length, iova, (unsigned int)(access))

static inline struct ibv_cq_ex *ibv_create_cq_ex(struct ibv_context *context,
                                                 struct ibv_cq_init_attr_ex *cq_attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, create_cq_ex);

    if (vctx == NULL) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return vctx->create_cq_ex(context, cq_attr);
}

static inline struct ibv_cq *ibv_cq_ex_to_cq(struct ibv_cq_ex *cq)
{
    return (struct ibv_cq *)(void *)cq;
}

/* A plain PD-only request goes to the IBVERBS_1.1 entry, as libibverbs does. */
static inline struct ibv_qp *ibv_create_qp_ex(struct ibv_context *context,
                                              struct ibv_qp_init_attr_ex *qp_init_attr_ex)
{
    struct verbs_context *vctx;

    if (qp_init_attr_ex->comp_mask == IBV_QP_INIT_ATTR_PD)
        return ibv_create_qp(qp_init_attr_ex->pd, (struct ibv_qp_init_attr *)(void *)qp_init_attr_ex);
    vctx = verbs_get_ctx_op(context, create_qp_ex);
    if (vctx == NULL) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return vctx->create_qp_ex(context, qp_init_attr_ex);
}

/* The provider's extended query, else the basic one with the rest zeroed. */
static inline int ibv_query_device_ex(struct ibv_context *context,
                                      const struct ibv_query_device_ex_input *input,
                                      struct ibv_device_attr_ex *attr)
{
    struct verbs_context *vctx;
    int rc;

    if (input != NULL && input->comp_mask != 0)
        return EINVAL;
    vctx = verbs_get_ctx_op(context, query_device_ex);
    if (vctx != NULL) {
        rc = vctx->query_device_ex(context, input, attr, sizeof(*attr));
        if (rc != EOPNOTSUPP && rc != ENOSYS)
            return rc;
    }
    memset(attr, 0, sizeof(*attr));
    return ibv_query_device(context, &attr->orig_attr);
}

static inline int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                struct ibv_send_wr **bad_wr)
{
    return qp->context->ops.post_send(qp, wr, bad_wr);
}

static inline int ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                struct ibv_recv_wr **bad_wr)
{
    return qp->context->ops.post_recv(qp, wr, bad_wr);
}

static inline int ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    return cq->context->ops.poll_cq(cq, num_entries, wc);
}

static inline int ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return cq->context->ops.req_notify_cq(cq, solicited_only);
}

static inline int ibv_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
    return cq->start_poll(cq, attr);
}

static inline int ibv_next_poll(struct ibv_cq_ex *cq)
{
    return cq->next_poll(cq);
}

static inline void ibv_end_poll(struct ibv_cq_ex *cq)
{
    cq->end_poll(cq);
}

static inline enum ibv_wc_opcode ibv_wc_read_opcode(struct ibv_cq_ex *cq)
{
    return cq->read_opcode(cq);
}

static inline uint32_t ibv_wc_read_byte_len(struct ibv_cq_ex *cq)
{
    return cq->read_byte_len(cq);
}

static inline __be32 ibv_wc_read_imm_data(struct ibv_cq_ex *cq)
{
    return cq->read_imm_data(cq);
}

static inline uint32_t ibv_wc_read_qp_num(struct ibv_cq_ex *cq)
{
    return cq->read_qp_num(cq);
}

static inline unsigned int ibv_wc_read_wc_flags(struct ibv_cq_ex *cq)
{
    return cq->read_wc_flags(cq);
}

static inline void ibv_wr_start(struct ibv_qp_ex *qp)
{
    qp->wr_start(qp);
}

static inline int ibv_wr_complete(struct ibv_qp_ex *qp)
{
    return qp->wr_complete(qp);
}

static inline void ibv_wr_abort(struct ibv_qp_ex *qp)
{
    qp->wr_abort(qp);
}

static inline void ibv_wr_rdma_write(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
{
    qp->wr_rdma_write(qp, rkey, remote_addr);
}

static inline void ibv_wr_rdma_write_imm(struct ibv_qp_ex *qp, uint32_t rkey,
                                         uint64_t remote_addr, __be32 imm_data)
{
    qp->wr_rdma_write_imm(qp, rkey, remote_addr, imm_data);
}

static inline void ibv_wr_rdma_read(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
{
    qp->wr_rdma_read(qp, rkey, remote_addr);
}

static inline void ibv_wr_send(struct ibv_qp_ex *qp)
{
    qp->wr_send(qp);
}

static inline void ibv_wr_set_sge(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr,
                                  uint32_t length)
{
    qp->wr_set_sge(qp, lkey, addr, length);
}

static inline void ibv_wr_set_sge_list(struct ibv_qp_ex *qp, size_t num_sge,
                                       const struct ibv_sge *sg_list)
{
    qp->wr_set_sge_list(qp, num_sge, sg_list);
}

static inline void ibv_wr_set_inline_data(struct ibv_qp_ex *qp, void *addr, size_t length)
{
    qp->wr_set_inline_data(qp, addr, length);
}

#endif /* FERRY_VERBS_ABI_CONTEXT_H */
