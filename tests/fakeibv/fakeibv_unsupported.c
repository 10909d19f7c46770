/*
 * fakeibv: public verbs the emulated device does not model (UD address
 * handles, SRQs, multicast, ECE, object import). They exist so that every
 * consumer that binds them at load time (perftest, librdmacm, libmlx5 are
 * all linked with BIND_NOW) loads, and fail the way a device without the
 * feature fails.
 */
#include <errno.h>
#include <string.h>

#include "fakeibv_internal.h"

FAKEIBV_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    errno = EOPNOTSUPP;
    return NULL;
}

FAKEIBV_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
    return EINVAL;
}

FAKEIBV_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
                                       struct ibv_wc *wc, struct ibv_grh *grh,
                                       struct ibv_ah_attr *ah_attr)
{
    return EOPNOTSUPP;
}

FAKEIBV_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                                    struct ibv_grh *grh, uint8_t port_num)
{
    errno = EOPNOTSUPP;
    return NULL;
}

FAKEIBV_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
                                              struct ibv_srq_init_attr *srq_init_attr)
{
    errno = EOPNOTSUPP; /* SRQs are not emulated; consumers fall back or say so. */
    return NULL;
}

FAKEIBV_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
                                  int srq_attr_mask)
{
    return EOPNOTSUPP;
}

FAKEIBV_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
    return EOPNOTSUPP;
}

FAKEIBV_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
    return EINVAL;
}

FAKEIBV_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    return EOPNOTSUPP;
}

FAKEIBV_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    return EOPNOTSUPP;
}

FAKEIBV_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
                                               struct ibv_ah_attr *attr,
                                               uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
    /* A locally administered MAC carrying the LID, no VLAN. */
    uint16_t lid = fakeibv_lid_from_gid(&attr->grh.dgid);

    eth_mac[0] = 0x02;
    eth_mac[1] = 0xfa;
    eth_mac[2] = 0x4e;
    eth_mac[3] = 0;
    eth_mac[4] = (uint8_t)(lid >> 8);
    eth_mac[5] = (uint8_t)lid;
    if (vid != NULL)
        *vid = 0xffff;
    return 0;
}

/* ECE is an mlx5 feature; NCCL treats EOPNOTSUPP as "not supported". */
FAKEIBV_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return EOPNOTSUPP;
}

FAKEIBV_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return EOPNOTSUPP;
}

FAKEIBV_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

FAKEIBV_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

FAKEIBV_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

FAKEIBV_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

FAKEIBV_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

FAKEIBV_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}
