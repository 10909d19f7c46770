/*
 * fakeibv: symbols of rdma-core's provider ABI (IBVERBS_PRIVATE_34) and of
 * the old kernel-marshalling helpers. Nothing here is emulated: libmlx5,
 * libefa and librdmacm are linked with BIND_NOW against these names, and a
 * perftest binary pulls all three in, so they must exist for the process to
 * start. Providers never get to run (fakeibv owns every device), so each
 * stub just fails. This file deliberately does not include verbs.h: the
 * real prototypes live in rdma-core's private driver.h.
 */
#include <errno.h>
#include <stdbool.h>

#define FAKEIBV_EXPORT __attribute__((visibility("default")))

#define FAKEIBV_STUB(name)                                                                       \
    FAKEIBV_EXPORT int name(void);                                                                \
    FAKEIBV_EXPORT int name(void)                                                                 \
    {                                                                                             \
        errno = EOPNOTSUPP;                                                                       \
        return EOPNOTSUPP;                                                                        \
    }

/* Provider registration runs from libmlx5's constructor: accept silently. */
#define FAKEIBV_NOOP(name)                                                                       \
    FAKEIBV_EXPORT void name(void);                                                               \
    FAKEIBV_EXPORT void name(void)                                                                \
    {                                                                                             \
    }

FAKEIBV_EXPORT bool verbs_allow_disassociate_destroy;

FAKEIBV_NOOP(verbs_register_driver_34)
FAKEIBV_NOOP(ibv_register_driver)
FAKEIBV_NOOP(__verbs_log)
FAKEIBV_NOOP(ibv_copy_path_rec_from_kern)
FAKEIBV_NOOP(ibv_copy_path_rec_to_kern)
FAKEIBV_NOOP(ibv_copy_qp_attr_from_kern)
FAKEIBV_NOOP(ibv_copy_ah_attr_from_kern)
FAKEIBV_NOOP(verbs_set_ops)
FAKEIBV_NOOP(verbs_uninit_context)
FAKEIBV_STUB(ibv_read_ibdev_sysfs_file)
FAKEIBV_STUB(ibv_query_gid_type)
FAKEIBV_STUB(__ioctl_final_num_attrs)
FAKEIBV_STUB(_verbs_init_and_alloc_context)
FAKEIBV_STUB(execute_ioctl)
FAKEIBV_STUB(verbs_init_cq)
FAKEIBV_STUB(verbs_open_device)
FAKEIBV_STUB(ibv_cmd_advise_mr)
FAKEIBV_STUB(ibv_cmd_alloc_dm)
FAKEIBV_STUB(ibv_cmd_alloc_mw)
FAKEIBV_STUB(ibv_cmd_alloc_pd)
FAKEIBV_STUB(ibv_cmd_attach_mcast)
FAKEIBV_STUB(ibv_cmd_close_xrcd)
FAKEIBV_STUB(ibv_cmd_create_ah)
FAKEIBV_STUB(ibv_cmd_create_counters)
FAKEIBV_STUB(ibv_cmd_create_cq)
FAKEIBV_STUB(ibv_cmd_create_cq_ex)
FAKEIBV_STUB(ibv_cmd_create_flow)
FAKEIBV_STUB(ibv_cmd_create_flow_action_esp)
FAKEIBV_STUB(ibv_cmd_create_qp)
FAKEIBV_STUB(ibv_cmd_create_qp_ex)
FAKEIBV_STUB(ibv_cmd_create_qp_ex2)
FAKEIBV_STUB(ibv_cmd_create_rwq_ind_table)
FAKEIBV_STUB(ibv_cmd_create_srq)
FAKEIBV_STUB(ibv_cmd_create_srq_ex)
FAKEIBV_STUB(ibv_cmd_create_wq)
FAKEIBV_STUB(ibv_cmd_dealloc_mw)
FAKEIBV_STUB(ibv_cmd_dealloc_pd)
FAKEIBV_STUB(ibv_cmd_dereg_mr)
FAKEIBV_STUB(ibv_cmd_destroy_ah)
FAKEIBV_STUB(ibv_cmd_destroy_counters)
FAKEIBV_STUB(ibv_cmd_destroy_cq)
FAKEIBV_STUB(ibv_cmd_destroy_flow)
FAKEIBV_STUB(ibv_cmd_destroy_flow_action)
FAKEIBV_STUB(ibv_cmd_destroy_qp)
FAKEIBV_STUB(ibv_cmd_destroy_rwq_ind_table)
FAKEIBV_STUB(ibv_cmd_destroy_srq)
FAKEIBV_STUB(ibv_cmd_destroy_wq)
FAKEIBV_STUB(ibv_cmd_detach_mcast)
FAKEIBV_STUB(ibv_cmd_free_dm)
FAKEIBV_STUB(ibv_cmd_get_context)
FAKEIBV_STUB(ibv_cmd_modify_cq)
FAKEIBV_STUB(ibv_cmd_modify_flow_action_esp)
FAKEIBV_STUB(ibv_cmd_modify_qp)
FAKEIBV_STUB(ibv_cmd_modify_qp_ex)
FAKEIBV_STUB(ibv_cmd_modify_srq)
FAKEIBV_STUB(ibv_cmd_modify_wq)
FAKEIBV_STUB(ibv_cmd_open_qp)
FAKEIBV_STUB(ibv_cmd_open_xrcd)
FAKEIBV_STUB(ibv_cmd_poll_cq)
FAKEIBV_STUB(ibv_cmd_post_recv)
FAKEIBV_STUB(ibv_cmd_post_send)
FAKEIBV_STUB(ibv_cmd_post_srq_recv)
FAKEIBV_STUB(ibv_cmd_query_context)
FAKEIBV_STUB(ibv_cmd_query_device_any)
FAKEIBV_STUB(ibv_cmd_query_mr)
FAKEIBV_STUB(ibv_cmd_query_port)
FAKEIBV_STUB(ibv_cmd_query_qp)
FAKEIBV_STUB(ibv_cmd_query_srq)
FAKEIBV_STUB(ibv_cmd_read_counters)
FAKEIBV_STUB(ibv_cmd_reg_dm_mr)
FAKEIBV_STUB(ibv_cmd_reg_dmabuf_mr)
FAKEIBV_STUB(ibv_cmd_reg_mr)
FAKEIBV_STUB(ibv_cmd_req_notify_cq)
FAKEIBV_STUB(ibv_cmd_rereg_mr)
FAKEIBV_STUB(ibv_cmd_resize_cq)
