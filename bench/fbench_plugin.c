/*
 * ferry-bench, ferry side: the plugin driven the way NCCL's proxy drives it.
 *
 * One thread per process plays NCCL's proxy progress thread: each pass goes
 * over every connection, posts requests until --depth are in flight (or the
 * plugin answers with a NULL request), then tests that connection's oldest
 * request once. A pass that made no progress ends in sched_yield(), as
 * NCCL's idle proxy loop does, so the plugin's helper threads get the CPU
 * (--proxy-sleep: a short sleep instead, to show what that spin costs).
 *
 * Latency of a streamed message: from its isend post to the test() that
 * reported it done, on the sender. With --depth messages queued this
 * includes the time spent behind the messages ahead of it, just as an NCCL
 * step would see it.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fbench.h"

/* Proxy-side state of one connection in a stream round. */
typedef struct fb_px_conn {
    uint64_t posted;                 /* Requests posted so far. */
    uint64_t done;                   /* Requests reported done, oldest first. */
    void    *req[FB_MAX_DEPTH];      /* In flight, indexed by sequence % depth. */
    double   t_post[FB_MAX_DEPTH];   /* fit_now() at post (sender only). */
} fb_px_conn_t;

static void fb_plugin_idle(const fb_side_t *s)
{
    if (s->o->proxy_sleep_us > 0)
        usleep((useconds_t)s->o->proxy_sleep_us);
    else
        sched_yield();
}

static void fb_plugin_connect_all(fb_side_t *s)
{
    const ncclNet_v11_t *net = s->plugin.net;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    int c, n = s->o->max_conns;
    void *comm, *lc;

    /* Stream comms plus one ping-pong comm go receiver <- sender; one more the other way. */
    for (c = 0; c <= n; c++) {
        if (s->is_send) {
            fb_pipe_read(s->ack_fd, handle, sizeof(handle));
            comm = fit_connect_loop(&s->plugin, s->ctx, fit_device(&s->plugin), handle);
        } else {
            lc = fit_listen(&s->plugin, s->ctx, fit_device(&s->plugin), handle);
            fb_pipe_write(s->ack_fd, handle, sizeof(handle));
            comm = fit_accept_loop(&s->plugin, lc);
            FIT_NCCL(net->closeListen(lc));
        }
        if (c < n)
            s->comm[c] = comm;
        else if (s->is_send)
            s->pp_send = comm;
        else
            s->pp_recv = comm;
    }
    if (s->is_send) {
        lc = fit_listen(&s->plugin, s->ctx, fit_device(&s->plugin), handle);
        fb_pipe_write(s->ctrl_fd, handle, sizeof(handle));
        s->pp_recv = fit_accept_loop(&s->plugin, lc);
        FIT_NCCL(net->closeListen(lc));
    } else {
        fb_pipe_read(s->ctrl_fd, handle, sizeof(handle));
        s->pp_send = fit_connect_loop(&s->plugin, s->ctx, fit_device(&s->plugin), handle);
    }
}

void fb_plugin_setup(fb_side_t *s)
{
    const ncclNet_v11_t *net;
    int ndev = 0, c;

    fit_plugin_open(&s->plugin, s->o->plugin);
    net    = s->plugin.net;
    s->ctx = fit_plugin_init(&s->plugin, 0xbe7c);
    FIT_NCCL(net->devices(&ndev));
    FIT_CHECK(ndev >= 1, "the plugin found no device (NCCL_SOCKET_IFNAME=%s)",
              getenv("NCCL_SOCKET_IFNAME"));
    fb_plugin_connect_all(s);
    /* NCCL registers each connection's buffers; here every comm registers the whole arena. */
    for (c = 0; c < s->o->max_conns; c++)
        FIT_NCCL(net->regMr(s->comm[c], s->arena, s->arena_len, NCCL_PTR_HOST, &s->mh[c]));
    FIT_NCCL(net->regMr(s->pp_send, s->arena, s->arena_len, NCCL_PTR_HOST, &s->pp_send_mh));
    FIT_NCCL(net->regMr(s->pp_recv, s->arena, s->arena_len, NCCL_PTR_HOST, &s->pp_recv_mh));
    s->plugin_up = 1;
}

void fb_plugin_teardown(fb_side_t *s)
{
    const ncclNet_v11_t *net = s->plugin.net;
    int c;

    for (c = 0; c < s->o->max_conns; c++) {
        FIT_NCCL(net->deregMr(s->comm[c], s->mh[c]));
        if (s->is_send)
            FIT_NCCL(net->closeSend(s->comm[c]));
        else
            FIT_NCCL(net->closeRecv(s->comm[c]));
    }
    FIT_NCCL(net->deregMr(s->pp_send, s->pp_send_mh));
    FIT_NCCL(net->deregMr(s->pp_recv, s->pp_recv_mh));
    FIT_NCCL(net->closeSend(s->pp_send));
    FIT_NCCL(net->closeRecv(s->pp_recv));
    FIT_NCCL(net->finalize(s->ctx));
    fit_plugin_close(&s->plugin);
    s->plugin_up = 0;
}

/* isend (send != 0) or a one-buffer irecv; returns the request, NULL for "not now". */
static void *fb_plugin_post(fb_side_t *s, int send, void *comm, void *mh, void *data, size_t size)
{
    const ncclNet_v11_t *net = s->plugin.net;
    void *req = NULL;
    size_t cap = size;
    int tag = 0;

    if (send)
        FIT_NCCL(net->isend(comm, data, size, 0, mh, NULL, &req));
    else
        FIT_NCCL(net->irecv(comm, 1, &data, &cap, &tag, &mh, NULL, &req));
    return req;
}

/* test() once; 1 when done, after checking the size it reports. */
static int fb_plugin_test(fb_side_t *s, void *req, size_t size)
{
    int flag = 0, got = -1;

    FIT_NCCL(s->plugin.net->test(req, &flag, &got));
    if (flag)
        FIT_CHECK((size_t)got == size, "test reported %d bytes, expected %zu", got, size);
    return flag;
}

/* One proxy pass over connection c; returns the number of events (posts and completions). */
static int fb_plugin_pass(fb_side_t *s, const fb_round_t *r, int c, fb_px_conn_t *px, int check,
                          fb_lat_t *lat)
{
    uint64_t depth = r->depth;
    int events = 0;

    while (px->posted < r->iters && px->posted - px->done < depth) {
        void *data = fb_slot(s, r->size, c, px->posted), *req;

        if (s->is_send && check)
            fb_stamp(data, r->size, c, px->posted);
        req = fb_plugin_post(s, s->is_send, s->comm[c], s->mh[c], data, r->size);
        if (req == NULL)
            break;
        px->req[px->posted % depth]    = req;
        px->t_post[px->posted % depth] = s->is_send ? fit_now() : 0.0;
        px->posted++;
        events++;
    }
    if (px->done < px->posted && fb_plugin_test(s, px->req[px->done % depth], r->size)) {
        if (s->is_send)
            fb_lat_add(lat, (fit_now() - px->t_post[px->done % depth]) * 1e6);
        else if (check)
            FIT_CHECK(fb_stamp_ok(fb_slot(s, r->size, c, px->done), r->size, c, px->done),
                      "connection %d message %llu of %llu bytes: wrong contents", c,
                      (unsigned long long)px->done, (unsigned long long)r->size);
        px->done++;
        events++;
    }
    return events;
}

void fb_plugin_stream(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat)
{
    static fb_px_conn_t px[FB_MAX_CONNS];
    int check = fb_slots_unique(s, r->size, (int)r->conns, (int)r->depth);
    double last = fit_now();
    unsigned long idle = 0;
    int c, busy;

    memset(px, 0, sizeof(px));
    do {
        int events = 0;

        busy = 0;
        for (c = 0; c < (int)r->conns; c++) {
            events += fb_plugin_pass(s, r, c, &px[c], check, lat);
            busy += px[c].done < r->iters;
        }
        if (events > 0) {
            last = fit_now();
        } else {
            fb_plugin_idle(s);
            if ((++idle & 1023) == 0)
                fb_stall_check(last, "ferry stream", px[0].done, r->iters);
        }
    } while (busy > 0);
}

static void fb_plugin_wait(fb_side_t *s, void *req, size_t size)
{
    double start = fit_now();
    unsigned long idle = 0;

    while (!fb_plugin_test(s, req, size)) {
        sched_yield();
        if ((++idle & 1023) == 0)
            fb_stall_check(start, "ferry ping-pong", 0, 1);
    }
}

/* Post until the plugin accepts (a NULL request means "not now"). */
static void *fb_plugin_post_retry(fb_side_t *s, int send, void *comm, void *mh, void *data,
                                  size_t size)
{
    double start = fit_now();
    void *req;

    while ((req = fb_plugin_post(s, send, comm, mh, data, size)) == NULL) {
        sched_yield();
        fb_stall_check(start, "ferry ping-pong post", 0, 1);
    }
    return req;
}

/*
 * Round trip: the sender posts its receive, then its send, and waits for
 * both; the echoer receives, then sends the same bytes back.
 */
void fb_plugin_pingpong(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat)
{
    uint8_t *out = s->arena, *in = s->arena + s->o->pp_max;
    uint64_t i;

    for (i = 0; i < r->iters; i++) {
        double t0 = fit_now();
        void *rreq, *sreq;

        if (s->is_send) {
            rreq = fb_plugin_post_retry(s, 0, s->pp_recv, s->pp_recv_mh, in, r->size);
            sreq = fb_plugin_post_retry(s, 1, s->pp_send, s->pp_send_mh, out, r->size);
            fb_plugin_wait(s, sreq, r->size);
            fb_plugin_wait(s, rreq, r->size);
            fb_lat_add(lat, (fit_now() - t0) * 1e6);
        } else {
            rreq = fb_plugin_post_retry(s, 0, s->pp_recv, s->pp_recv_mh, in, r->size);
            fb_plugin_wait(s, rreq, r->size);
            sreq = fb_plugin_post_retry(s, 1, s->pp_send, s->pp_send_mh, in, r->size);
            fb_plugin_wait(s, sreq, r->size);
        }
    }
}
