/* Send and receive comms: connected streams plus the engine's half. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock.h"

ferry_status_t ferry_sock_comm_create(ferry_px_req_kind_t kind, int dev, const int *fds,
                                      int nlanes, const char *peer, ferry_sock_comm_t **comm_p)
{
    const ferry_sock_config_t *cfg = &ferry_sock_state.cfg;
    ferry_sock_comm_t *comm;
    ferry_status_t status;
    int i;

    comm = ferry_px_ring_alloc(sizeof(*comm)); /* Its ring is at offset 0. */
    if (comm == NULL) {
        status = FERRY_ERR_NO_MEMORY;
        goto err_close_fds;
    }
    status = ferry_sock_stream_init(&comm->px, kind, "socket", peer, nlanes,
                                  kind == FERRY_PX_SEND ? cfg->send_threads : cfg->recv_threads,
                                  cfg->chunk_min, cfg->chunk_max,
                                  kind == FERRY_PX_SEND ? &ferry_sock_send_lane_ops
                                                        : &ferry_sock_recv_lane_ops,
                                  kind == FERRY_PX_SEND ? &ferry_sock_send_ring_ops
                                                        : &ferry_sock_recv_ring_ops);
    if (status != FERRY_OK)
        goto err_free;
    comm->magic = FERRY_SOCK_COMM_MAGIC;
    comm->dev = dev;
    comm->px.spin_ns = (uint64_t)cfg->spin_us * 1000;
    comm->px.assist_max = cfg->inline_max;
    comm->px.assist_test_max = cfg->assist_max < 0 ? cfg->inline_max : (size_t)cfg->assist_max;
    comm->px.solo_max = cfg->solo_max;
    comm->px.rescue_after_ns = (uint64_t)cfg->rescue_us * 1000;
    comm->px.inject_delay_us = (unsigned)cfg->inject_delay_us;
    comm->px.caller_recv_burst = cfg->caller_recv_burst;
    comm->px.ring.stall_ns = (uint64_t)ferry_sock_state.core.stall_warn_s * 1000000000ULL;
    comm->px.ring.hold_hint = "GPU staging: a copy between GPU memory and its host shadow has not "
                         "completed; check nvidia-smi and dmesg for Xid errors, or set "
                         "NCCL_FERRY_GPU_STAGING=0";
    comm->px.pool_size = cfg->pool_threads;
    comm->px.has_cpus = ferry_sock_state.devs[dev].has_cpus;
    comm->px.cpus = ferry_sock_state.devs[dev].cpus;
    comm->px.place_away = cfg->helper_place == FERRY_SOCK_PLACE_AWAY;
    for (i = 0; i < nlanes; i++)
        comm->lanes[i].fd = fds[i];
    /* The receiver's tuning would not apply before accept: set options on each fd here. */
    for (i = 0; i < nlanes; i++) {
        status = ferry_sock_fd_tune(fds[i], peer);
        if (status != FERRY_OK)
            goto err_close_comm;
    }
    comm->zc_min = cfg->zerocopy ? cfg->zerocopy_min : 0;
    comm->zc_keep = cfg->zerocopy == 2;
    ferry_sock_zc_setup(comm);
    status = ferry_sock_stream_start(&comm->px);
    if (status != FERRY_OK)
        goto err_close_comm;
    /* Listed live only once complete: close() refuses it before, and after destroy. */
    status = ferry_live_add(comm, kind == FERRY_PX_SEND ? FERRY_LIVE_SEND
                                                             : FERRY_LIVE_RECV);
    if (status != FERRY_OK) {
        FERRY_WARN("socket %s comm to %s: no memory to list it as live; closing it",
                   kind == FERRY_PX_SEND ? "send" : "recv", peer);
        ferry_sock_comm_destroy(comm);
        return status;
    }
    *comm_p = comm;
    return FERRY_OK;

err_close_comm:
    for (i = 0; i < nlanes; i++)
        close(comm->lanes[i].fd);
    ferry_px_ring_fini(&comm->px.ring); /* Gives its request handles back (proxy/handle.h). */
    ferry_sock_magic_clear(&comm->magic);
    free(comm);
    return status;
err_free:
    free(comm);
err_close_fds:
    for (i = 0; i < nlanes; i++)
        close(fds[i]);
    return status;
}

/* The caller took comm out of the live list (ferry_live_take) or never put it there. */
void ferry_sock_comm_destroy(ferry_sock_comm_t *comm)
{
    int i;

    ferry_sock_stream_stop(&comm->px);
    ferry_sock_mr_forget_comm(comm);
    ferry_sock_gpu_queue_fini(&comm->gpu);
    for (i = 0; i < comm->px.nlanes; i++)
        close(comm->lanes[i].fd);
    ferry_px_ring_fini(&comm->px.ring);
    /* isend/irecv/test still check the magic (no lock there): make a late call see 0. */
    ferry_sock_magic_clear(&comm->magic);
    free(comm);
}
