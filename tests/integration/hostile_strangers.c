/*
 * Strangers on the listen port while a real peer connects: bad hellos of
 * every kind, a flood of silent connections, and more real peers at once
 * than the listener assembles.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "hostile.h"

void hostile_case_strangers(hostile_env_t *e)
{
    const ferry_sock_handle_t *h = e->h;
    fit_plugin_t *plugin = &e->plugin;
    void *send_comm = NULL, *recv_comm = NULL;
    fit_bound_t b;
    int k, lines0, calls;

    /* Rejections may be WARN or INFO, in the plugin's words; they are counted, not matched. */
    fit_log_allow_warns(1);
    lines0 = fit_log_lines();

    /* Phase 1: only strangers. */
    for (k = 0; k < HOSTILE_KIND_COUNT; k++)
        if (k != HOSTILE_ORPHAN || !hostile_backend_ib())
            hostile_open(h, (hostile_kind_t)k);
    hostile_pump_accept(plugin, e->listen_comm, 5.0, 1);
    hostile_expect_dropped(0);
    fit_pass("%d hostile connections: no comm from accept, every bad hello dropped",
             HOSTILE_KIND_COUNT);
    printf("  plugin logged %d line(s) (%d WARN) about them\n", fit_log_lines() - lines0,
           fit_log_warns());
    FIT_CHECK(fit_log_lines() > lines0, "the plugin logged nothing about %d rejected streams",
              HOSTILE_KIND_COUNT);

    /*
     * Phase 2: the real peer connects while more strangers arrive. They queue
     * in the listen backlog before, between and after the real streams: the
     * first connect() call starts the real streams, accept() has not run yet.
     */
    hostile_open(h, HOSTILE_BAD_TOKEN);
    hostile_open(h, HOSTILE_HALF_HELLO);
    hostile_open(h, HOSTILE_RANDOM);
    {
        ncclNetDeviceHandle_v11_t *dev_handle = NULL;
        char peer_handle[NCCL_NET_HANDLE_MAXSIZE];

        memcpy(peer_handle, e->handle, sizeof(peer_handle));
        fit_bound_init(&b, "real connect among hostiles", FIT_CONNECT_SECONDS,
                       FIT_CONNECT_ITERS);
        for (calls = 0; send_comm == NULL || recv_comm == NULL; calls++) {
            if (send_comm == NULL)
                FIT_NCCL(plugin->net->connect(e->ctx_c, 0, peer_handle, &send_comm,
                                              &dev_handle));
            if (calls == 0) {
                hostile_open(h, HOSTILE_RESET);
                hostile_open(h, HOSTILE_BAD_MAGIC);
                hostile_open(h, HOSTILE_SILENT);
                if (!hostile_backend_ib())
                    hostile_open(h, HOSTILE_ORPHAN);
                hostile_open(h, HOSTILE_TRICKLE);
            }
            if (recv_comm == NULL)
                FIT_NCCL(plugin->net->accept(e->listen_comm, &recv_comm, &dev_handle));
            hostile_poll();
            if (send_comm == NULL || recv_comm == NULL)
                fit_bound_step(&b);
        }
    }
    fit_pass("real peer connected among hostiles after %d connect/accept rounds", calls);

    /* Stalled strangers must be dropped after the hello timeout, not kept forever. */
    hostile_pump_accept(plugin, e->listen_comm, e->hello_timeout + 5.0, 2);
    hostile_expect_dropped(1);
    fit_pass("stalled hostiles dropped within NCCL_FERRY_HELLO_TIMEOUT_MS + 5 s");
    hostile_expect_logged(lines0);
    for (k = 0; k < nhostiles; k++)
        if (hostiles[k].kind == HOSTILE_ORPHAN)
            printf("  hostile #%d (%s): %s after %.1f s\n", k, hostile_names[hostiles[k].kind],
                   hostiles[k].dropped ? "dropped" : "still held", fit_now() - hostiles[k].t_open);
    FIT_NCCL(plugin->net->closeListen(e->listen_comm));
    e->listen_comm = NULL;
    /* closeListen must let go of every stream it still holds (no fd leak). */
    fit_bound_init(&b, "streams released by closeListen", 5.0, 100000000L);
    while (hostile_poll() > 0 && fit_bound_try_step(&b))
        ;
    for (k = 0; k < nhostiles; k++)
        FIT_CHECK(hostiles[k].fd < 0 || hostiles[k].dropped,
                  "after closeListen hostile #%d (%s) is still open on the plugin's side", k,
                  hostile_names[hostiles[k].kind]);
    fit_pass("closeListen released every pending stream");
    hostile_close_all();
    fit_log_allow_warns(0);

    /* The real connection carries data intact. */
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)16 << 20, 9000,
                      "on the real connection after the hostiles");
    FIT_NCCL(plugin->net->closeSend(send_comm));
    FIT_NCCL(plugin->net->closeRecv(recv_comm));
}

/*
 * More silent connections than the pending table holds (64) queue in the
 * listen backlog ahead of the real peer's streams. The table must make room
 * by evicting its oldest stream: evicting the newest arrival threw out the
 * real peer's streams as soon as the next one came, and accept() never
 * returned its comm.
 */
#define FLOOD_SILENT     100
#define FLOOD_TABLE      64 /* FERRY_SOCK_PENDING_MAX. */

void hostile_case_flood(hostile_env_t *e)
{
    void *send_comm = NULL, *recv_comm = NULL;
    char line[4096], needle[128];
    int k, lines0, calls, dropped = 0;

    fit_log_allow_warns(1); /* Every silent stream that times out gets its WARN. */
    lines0 = fit_log_lines();
    for (k = 0; k < FLOOD_SILENT; k++)
        hostile_open(e->h, HOSTILE_SILENT);
    calls = hostile_real_connect(e, &send_comm, &recv_comm);
    fit_pass("real peer connected behind %d silent connections after %d connect/accept rounds",
             FLOOD_SILENT, calls);
    hostile_poll();
    for (k = 0; k < nhostiles; k++)
        dropped += hostiles[k].dropped;
    printf("  %d of %d silent connections dropped by then\n", dropped, FLOOD_SILENT);
    FIT_CHECK(dropped >= FLOOD_SILENT - FLOOD_TABLE, "only %d of %d silent connections were "
              "dropped, but %d cannot fit the %d-entry pending table", dropped, FLOOD_SILENT,
              FLOOD_SILENT - FLOOD_TABLE, FLOOD_TABLE);
    /* Oldest first: the first arrivals are the ones evicted, in order. */
    for (k = 0; k < FLOOD_SILENT - FLOOD_TABLE; k++) {
        snprintf(needle, sizeof(needle), "from %s after", hostiles[k].src);
        if (fit_log_find(lines0, NCCL_LOG_INFO, "evicting the oldest", needle, NULL, line,
                         sizeof(line)) < 0 &&
            fit_log_find(lines0, -1, "stalled in its hello", hostiles[k].src, NULL,
                         line, sizeof(line)) < 0)
            FIT_FAIL("silent connection #%d (%s), one of the oldest, was neither evicted nor "
                     "timed out", k, hostiles[k].src);
    }
    fit_pass("the %d oldest silent connections were the ones evicted",
             FLOOD_SILENT - FLOOD_TABLE);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)4 << 20, 7100,
                      "on the real connection behind the flood");

    /* The silent streams left in the table time out: accept() checks on every call. */
    hostile_pump_accept(&e->plugin, e->listen_comm, e->hello_timeout + 5.0, 2);
    hostile_expect_dropped(1);
    snprintf(needle, sizeof(needle), "rejected stream from %s ", hostiles[FLOOD_SILENT - 1].src);
    /* A WARN, or an INFO line once the WARNs' limit is spent (core/log.h). */
    FIT_CHECK(fit_log_find(lines0, -1, needle, "stalled in its hello", NULL, line,
                           sizeof(line)) >= 0,
              "no line says the newest silent connection (%s) stalled in its hello",
              hostiles[FLOOD_SILENT - 1].src);
    printf("  %s\n", line);
    fit_pass("all %d silent connections dropped within NCCL_FERRY_HELLO_TIMEOUT_MS + 5 s",
             FLOOD_SILENT);
    hostile_close_all();
    fit_log_allow_warns(0);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 7200,
                      "on the real connection after the flood");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}

/*
 * More real peers than the group table holds (8) connect to one listener at
 * once, all their streams in before accept() runs. Only one comm comes out
 * per accept() call, so 8 complete groups wait for theirs: the streams of
 * the 9th and 10th must wait for a slot, not be refused (nor evict a
 * complete group).
 */
#define BURST_PEERS 10

void hostile_case_burst(hostile_env_t *e)
{
    const fit_plugin_t *p = &e->plugin;
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    static char handles[BURST_PEERS][NCCL_NET_HANDLE_MAXSIZE];
    void *send[BURST_PEERS] = { NULL }, *recv[BURST_PEERS] = { NULL };
    int k, nsend = 0, nrecv = 0;
    fit_bound_t b;

    for (k = 0; k < BURST_PEERS; k++)
        memcpy(handles[k], e->handle, sizeof(handles[k]));
    fit_bound_init(&b, "connects of the burst", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (nsend < BURST_PEERS) {
        for (k = 0; k < BURST_PEERS; k++)
            if (send[k] == NULL) {
                FIT_NCCL(p->net->connect(e->ctx_c, 0, handles[k], &send[k], &dev_handle));
                nsend += send[k] != NULL;
            }
        if (nsend < BURST_PEERS)
            fit_bound_step(&b);
    }
    fit_bound_init(&b, "accepts of the burst", FIT_CONNECT_SECONDS, FIT_CONNECT_ITERS);
    while (nrecv < BURST_PEERS) {
        FIT_NCCL(p->net->accept(e->listen_comm, &recv[nrecv], &dev_handle));
        if (recv[nrecv] != NULL)
            nrecv++;
        else
            fit_bound_step(&b);
    }
    fit_pass("%d peers connected at once to one listener: %d comms accepted", BURST_PEERS,
             nrecv);
    for (k = 0; k < BURST_PEERS; k++) {
        FIT_NCCL(p->net->closeSend(send[k]));
        FIT_NCCL(p->net->closeRecv(recv[k]));
    }
}

/*
 * Hundreds of strangers of every kind at once, in batches between accept()
 * calls (a full listen backlog would make our own blocking connect() wait
 * for SYN retries), the real peer in the middle of them. The listener's
 * tables (64 streams / 32 connections) evict their oldest; every stranger
 * is dropped and named in the log, the real peer's data arrives intact.
 */
#define HUNDREDS       300
#define HUNDREDS_BATCH 25

static const hostile_kind_t hundreds_kinds[] = {
    HOSTILE_RANDOM, HOSTILE_BAD_MAGIC, HOSTILE_BAD_VERSION, HOSTILE_BAD_TOKEN,
    HOSTILE_HUGE_HELLO, HOSTILE_SILENT, HOSTILE_HALF_HELLO, HOSTILE_CLOSE, HOSTILE_RESET,
    HOSTILE_TRICKLE,
};

static void hostile_open_batch(hostile_env_t *e, int n)
{
    int k, nkinds = (int)(sizeof(hundreds_kinds) / sizeof(hundreds_kinds[0]));

    for (k = 0; k < n; k++)
        hostile_open(e->h, hundreds_kinds[nhostiles % nkinds]);
    hostile_accept_rounds(e, 2);
    hostile_poll();
}

void hostile_case_hundreds(hostile_env_t *e)
{
    void *send_comm = NULL, *recv_comm = NULL;
    int k, lines0, dropped = 0;
    double t0 = fit_now();

    fit_log_allow_warns(1); /* One WARN (or eviction INFO) per stranger, counted below. */
    lines0 = fit_log_lines();
    for (k = 0; k < HUNDREDS / 2; k += HUNDREDS_BATCH)
        hostile_open_batch(e, HUNDREDS_BATCH);
    hostile_real_connect(e, &send_comm, &recv_comm);
    fit_pass("real peer connected behind %d strangers", nhostiles);
    for (k = HUNDREDS / 2; k < HUNDREDS; k += HUNDREDS_BATCH)
        hostile_open_batch(e, HUNDREDS_BATCH);
    printf("  %d strangers opened in %.2f s\n", nhostiles, fit_now() - t0);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)4 << 20, 7300,
                      "on the real connection among hundreds of strangers");
    hostile_pump_accept(&e->plugin, e->listen_comm, e->hello_timeout + 5.0, 2);
    hostile_expect_dropped(1);
    for (k = 0; k < nhostiles; k++)
        dropped += hostiles[k].fd < 0 || hostiles[k].dropped;
    hostile_expect_logged(lines0);
    fit_pass("%d strangers: %d dropped or closed, each named in the log (%d lines, %d WARN) "
             "within %.1f s", nhostiles, dropped, fit_log_lines() - lines0, fit_log_warns(),
             fit_now() - t0);
    printf("HOSTILE case=hundreds strangers=%d dropped=%d seconds=%.2f\n", nhostiles, dropped,
           fit_now() - t0);
    hostile_close_all();
    fit_log_allow_warns(0);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 7400,
                      "on the real connection after the strangers left");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}
