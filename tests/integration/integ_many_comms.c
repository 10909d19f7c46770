/*
 * integ_many_comms: 200 connections in one process, as an 8-rank node's
 * all-to-all opens them, with the default streams per connection. Each
 * listen() picks its streams from the socket comms the process already has
 * (socket/sock_config_streams.c), so the sockets grow no faster than the
 * connections: at most (budget + connections) per side, both sides being
 * in this process. Every pair then moves a message checked byte for byte,
 * and closing them all gives back every descriptor.
 *
 *   integ_many_comms [--plugin PATH] [--pairs N]
 *
 * ctest keeps the default streams at 4 on any host (NCCL_FERRY_THREADS=1
 * asks for them, NCCL_FERRY_SEND/RECV_THREADS=0 keeps the 400 comms from
 * starting a helper each): the streams are the default, not an explicit
 * NCCL_FERRY_STREAMS, which every connection would get as asked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "socket/sock_wire.h"

#define MANY_MAX_PAIRS 1000
#define MANY_BUDGET    64 /* FERRY_SOCK_STREAM_BUDGET: the process-wide budget per side. */

typedef struct many_pair {
    void *send_comm;
    void *recv_comm;
    int   streams;
} many_pair_t;

static many_pair_t many_pairs[MANY_MAX_PAIRS];

/* One message of a size of its own per pair, checked byte for byte by the harness. */
static void many_xfer(const fit_plugin_t *p, many_pair_t *pr, int k)
{
    size_t size = ((size_t)256 << 10) + (size_t)k * 13;
    fit_xfer_opts_t o = {0};
    fit_xfer_result_t r;
    char what[64];

    o.sizes = &size;
    o.nmsgs = 1;
    o.depth = 1;
    o.seed = 0x5eed0000ULL + (uint64_t)k;
    o.seconds = 20.0 * fit_time_scale();
    o.tag = 1;
    o.arena_cap = (size_t)1 << 20;
    snprintf(what, sizeof(what), "pair %d (%d streams)", k, pr->streams);
    fit_xfer_inproc(p, pr->send_comm, pr->recv_comm, &o, &r);
    fit_xfer_expect_ok(&r, what);
    FIT_CHECK(r.done[FIT_SEND] == 1 && r.done[FIT_RECV] == 1, "%s: %d/%d messages done", what,
              r.done[FIT_SEND], r.done[FIT_RECV]);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    fit_plugin_t plugin;
    fit_leaks_t before, open_now;
    void *ctx;
    int pairs = 200, i, dev, streams = 0, sockets, bound, first, last;
    double t0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc)
            pairs = atoi(argv[++i]);
        else
            FIT_FAIL("usage: integ_many_comms [--plugin PATH] [--pairs N] (got '%s')", argv[i]);
    }
    FIT_CHECK(pairs >= 1 && pairs <= MANY_MAX_PAIRS, "--pairs %d: 1..%d", pairs, MANY_MAX_PAIRS);
    fit_set_role("many");
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    fit_plugin_open(&plugin, path);
    ctx = fit_plugin_init(&plugin, 0x3333);
    dev = fit_device(&plugin);
    fit_leaks_snap(&before);
    t0 = fit_now();
    for (i = 0; i < pairs; i++) {
        char handle[NCCL_NET_HANDLE_MAXSIZE];
        ferry_sock_handle_t h;
        void *lc;

        lc = fit_listen(&plugin, ctx, dev, handle);
        memcpy(&h, handle, sizeof(h));
        many_pairs[i].streams = h.nlanes;
        streams += h.nlanes;
        fit_connect_accept(&plugin, ctx, dev, handle, lc, &many_pairs[i].send_comm,
                           &many_pairs[i].recv_comm, NULL);
        /* As NCCL does: the listen comm goes once its connection is accepted. */
        FIT_NCCL(plugin.net->closeListen(lc));
    }
    fit_leaks_snap(&open_now);
    sockets = open_now.fds - before.fds;
    first = many_pairs[0].streams;
    last = many_pairs[pairs - 1].streams;
    /* Both ends in this process: each side holds the streams of every connection. */
    bound = 2 * (MANY_BUDGET + pairs);
    printf("  %d comm pairs opened in %.2f s: %d streams per side (first pair %d, last %d), "
           "%d descriptors in all (bound %d = 2 x (budget %d + %d pairs); 4 streams each "
           "would be %d)\n", pairs, fit_now() - t0, streams, first, last, sockets, bound,
           MANY_BUDGET, pairs, 2 * 4 * pairs);
    FIT_CHECK(first == 4, "the first connection got %d streams, expected the default 4", first);
    FIT_CHECK(sockets <= bound, "%d comm pairs hold %d descriptors, more than %d", pairs, sockets,
              bound);
    FIT_CHECK(sockets >= 2 * streams, "%d descriptors for %d streams per side", sockets, streams);
    fit_pass("%d comm pairs: %d sockets, within 2 x (budget %d + %d)", pairs, sockets,
             MANY_BUDGET, pairs);
    if (pairs > 8) {
        char line[512];

        /* The 9th listen (8 pairs open: 16 comms) is the first to give fewer. */
        FIT_CHECK(fit_log_find(0, -1, "streams per connection (not 4: ", "socket comms are open",
                               NULL, line, sizeof(line)) >= 0,
                  "no INFO line says why a listen gave fewer than the default 4 streams");
        fit_pass("the listen that cut the streams says why: %s", strstr(line, "listening"));
    }
    t0 = fit_now();
    for (i = 0; i < pairs; i++)
        many_xfer(&plugin, &many_pairs[i], i);
    fit_pass("%d pairs each moved one message (256 KiB + 13 x pair bytes), checked byte for "
             "byte, in %.2f s", pairs, fit_now() - t0);
    for (i = 0; i < pairs; i++) {
        FIT_NCCL(plugin.net->closeSend(many_pairs[i].send_comm));
        FIT_NCCL(plugin.net->closeRecv(many_pairs[i].recv_comm));
    }
    fit_leaks_check(&before, "after closing every pair");
    fit_log_check_clean("200 pairs");
    FIT_NCCL(plugin.net->finalize(ctx));
    fit_plugin_close(&plugin);
    fit_pass("every descriptor given back, no WARN");
    return 0;
}
