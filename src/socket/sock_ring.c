/*
 * The socket backend's ring ops: the stream scheduler moves its lanes, and
 * these are the socket's words for a request that stalls.
 */
#include <stdio.h>

#include "socket/sock.h"

static void ferry_sock_stall_why(const ferry_px_ring_t *ring, const ferry_px_req_t *req,
                                 char *buf, size_t len)
{
    if (req->kind == FERRY_PX_SEND)
        snprintf(buf, len, "The peer is not reading: it may still be busy (a slower rank), "
                 "stopped, or the network drops packets; check that rank's log and whether it "
                 "is still running, and `ss -tni` on both hosts for retransmissions");
    else
        snprintf(buf, len, "Nothing arrives from the peer: it may not have reached this "
                 "operation yet (a slower rank), be stopped, or the network drops packets; "
                 "check that rank's log and whether it is still running, and `ss -tni` on "
                 "both hosts for retransmissions");
}

const ferry_px_ring_ops_t ferry_sock_send_ring_ops = {
    .unit      = "chunks",
    .poll      = ferry_sock_stream_poll,
    .stall_why = ferry_sock_stall_why,
    .state     = ferry_sock_stream_state,
    .dump      = ferry_sock_stream_dump,
    .failed    = ferry_sock_stream_failed,
};

const ferry_px_ring_ops_t ferry_sock_recv_ring_ops = {
    .unit      = "chunks",
    .poll      = ferry_sock_stream_poll,
    .finish    = ferry_sock_recv_finish, /* A receive into GPU memory: its copy up first. */
    .stall_why = ferry_sock_stall_why,
    .state     = ferry_sock_stream_state,
    .dump      = ferry_sock_stream_dump,
    .failed    = ferry_sock_stream_failed,
};
