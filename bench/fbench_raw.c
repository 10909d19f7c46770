/*
 * ferry-bench, raw side: the same traffic over plain TCP, no plugin. This is
 * the ceiling ferry is measured against.
 *
 * Each connection gets ferry's number of TCP streams and helper threads
 * (ferry_sock_config_load(): NCCL_FERRY_STREAMS/THREADS or NCCL_SOCKET_NTHREADS x
 * NCCL_NSOCKS_PERTHREAD), at least one thread (where ferry has no helpers,
 * NCCL's one thread moves everything; raw then gets one thread per
 * connection); stream k belongs to thread k % threads. A message
 * is cut like NCCL's socket transport cuts it: into min(streams,
 * size / NCCL_SOCKET_MIN_TASKSIZE) equal parts (at least one), part j of
 * message i travelling on stream (i + j) % streams, so small messages still
 * spread over the streams. One send/recv call moves at most
 * NCCL_FERRY_CHUNK_SIZE bytes. A thread with one stream uses blocking calls;
 * one with several uses non-blocking calls and poll(). Every socket has
 * TCP_NODELAY and, when ferry's config sets them, its SO_SNDBUF/SO_RCVBUF.
 *
 * Latency of a streamed message, so that it compares with ferry's: the
 * sender may start message i once message i - depth is done (the slot a
 * proxy would reuse); latency is from then to the moment its last part was
 * handed to the kernel.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "fbench.h"

#define FB_RAW_PP_ID      0xffffffffu    /* Connection id of the ping-pong socket. */
#define FB_RAW_LAT_TOTAL  ((uint64_t)1 << 21) /* Per-thread end times kept per round, all threads. */

/* One thread's share of one connection in a stream round. */
typedef struct fb_raw_job {
    fb_side_t        *s;
    const fb_round_t *r;
    int               conn;
    int               thread;
    int               check;    /* Message slots are unique: stamps are checked. */
    uint64_t          lat_n;    /* Messages whose end time is kept. */
    double           *t_end;    /* [lat_n] end times (sender), 0 = no part here. */
    pthread_t         tid;
} fb_raw_job_t;

/* A part of a message on one stream. */
typedef struct fb_raw_part {
    int      fd;
    uint8_t *p;
    size_t   left;
} fb_raw_part_t;

static void fb_raw_sockopts(const fb_side_t *s, int fd)
{
    struct timeval tv = { .tv_sec = (time_t)FB_STALL_S };
    int one = 1;

    FIT_CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0,
              "TCP_NODELAY: %s", strerror(errno));
    if (s->o->sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &s->o->sndbuf, sizeof(s->o->sndbuf));
    if (s->o->rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &s->o->rcvbuf, sizeof(s->o->rcvbuf));
    /* Blocking calls are bounded too: a stuck peer ends the run, it does not hang it. */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/*
 * The receiver listens on the first address of the interface
 * NCCL_SOCKET_IFNAME names (its first entry, as a prefix; IPv4 first), so
 * raw traffic takes the same path as ferry's; 127.0.0.1 when nothing matches.
 */
static void fb_raw_listen_addr(struct sockaddr_storage *ss, socklen_t *len_p)
{
    const char *env = getenv("NCCL_SOCKET_IFNAME");
    struct ifaddrs *ifs = NULL, *i;
    char want[64] = "lo";
    int exact = 0, pass;

    if (env != NULL && *env != '\0' && *env != '^') {
        exact = *env == '=';
        snprintf(want, sizeof(want), "%s", env + exact);
        want[strcspn(want, ",")] = '\0';
    }
    memset(ss, 0, sizeof(*ss));
    if (getifaddrs(&ifs) == 0) {
        for (pass = 0; pass < 2; pass++) {
            int fam = pass == 0 ? AF_INET : AF_INET6;

            for (i = ifs; i != NULL; i = i->ifa_next) {
                if (i->ifa_addr == NULL || i->ifa_addr->sa_family != fam ||
                    (exact ? strcmp(i->ifa_name, want) != 0
                           : strncmp(i->ifa_name, want, strlen(want)) != 0))
                    continue;
                *len_p = fam == AF_INET ? sizeof(struct sockaddr_in)
                                        : sizeof(struct sockaddr_in6);
                memcpy(ss, i->ifa_addr, *len_p);
                freeifaddrs(ifs);
                return;
            }
        }
        freeifaddrs(ifs);
    }
    ((struct sockaddr_in *)ss)->sin_family      = AF_INET;
    ((struct sockaddr_in *)ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *len_p = sizeof(struct sockaddr_in);
}

static void fb_raw_accept_all(fb_side_t *s, int nsock)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int lfd, n;

    fb_raw_listen_addr(&ss, &len);
    lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FIT_CHECK(lfd >= 0, "socket: %s", strerror(errno));
    FIT_CHECK(bind(lfd, (struct sockaddr *)&ss, len) == 0 && listen(lfd, nsock) == 0 &&
              getsockname(lfd, (struct sockaddr *)&ss, &len) == 0,
              "raw listener: %s", strerror(errno));
    fb_pipe_write(s->ack_fd, &ss, sizeof(ss));
    for (n = 0; n < nsock; n++) {
        struct pollfd pfd = { .fd = lfd, .events = POLLIN };
        uint32_t id;
        int fd;

        FIT_CHECK(poll(&pfd, 1, (int)(FB_STALL_S * 1000)) == 1, "raw accept timed out");
        fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        FIT_CHECK(fd >= 0, "accept: %s", strerror(errno));
        fb_raw_sockopts(s, fd);
        FIT_CHECK(recv(fd, &id, sizeof(id), MSG_WAITALL) == (ssize_t)sizeof(id),
                  "raw stream sent no id");
        if (id == FB_RAW_PP_ID)
            s->raw_pp_fd = fd;
        else
            s->raw_fd[id / FB_MAX_STREAMS][id % FB_MAX_STREAMS] = fd;
    }
    close(lfd);
}

static int fb_raw_connect_one(fb_side_t *s, const struct sockaddr_storage *ss, uint32_t id)
{
    socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                             : sizeof(struct sockaddr_in6);
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

    FIT_CHECK(fd >= 0, "socket: %s", strerror(errno));
    fb_raw_sockopts(s, fd);
    FIT_CHECK(connect(fd, (const struct sockaddr *)ss, len) == 0, "raw connect: %s",
              strerror(errno));
    FIT_CHECK(send(fd, &id, sizeof(id), MSG_NOSIGNAL) == (ssize_t)sizeof(id), "raw id: %s",
              strerror(errno));
    return fd;
}

void fb_raw_setup(fb_side_t *s)
{
    int c, k, n = s->o->max_conns, ns = s->o->streams;

    if (!s->is_send) {
        fb_raw_accept_all(s, n * ns + 1);
    } else {
        struct sockaddr_storage ss;

        fb_pipe_read(s->ack_fd, &ss, sizeof(ss));
        for (c = 0; c < n; c++)
            for (k = 0; k < ns; k++)
                s->raw_fd[c][k] = fb_raw_connect_one(s, &ss, (uint32_t)(c * FB_MAX_STREAMS + k));
        s->raw_pp_fd = fb_raw_connect_one(s, &ss, FB_RAW_PP_ID);
    }
    s->raw_up = 1;
}

void fb_raw_teardown(fb_side_t *s)
{
    int c, k;

    for (c = 0; c < FB_MAX_CONNS; c++)
        for (k = 0; k < FB_MAX_STREAMS; k++)
            if (s->raw_fd[c][k] >= 0)
                close(s->raw_fd[c][k]);
    if (s->raw_pp_fd >= 0)
        close(s->raw_pp_fd);
    s->raw_up = 0;
}

/*
 * Move every part to completion; blocking for one part, non-blocking + poll
 * for several. One call moves at most max_call bytes (ferry's largest chunk),
 * so a huge message is not one huge copy.
 */
static void fb_raw_move(fb_raw_part_t *parts, int n, int is_send, size_t max_call)
{
    int flags = n > 1 ? MSG_DONTWAIT : is_send ? 0 : MSG_WAITALL, pending = n, j;

    while (pending > 0) {
        struct pollfd pfd[FB_MAX_STREAMS];
        int npfd = 0, moved = 0;

        for (j = 0; j < n; j++) {
            size_t len = parts[j].left < max_call ? parts[j].left : max_call;
            ssize_t m;

            if (len == 0)
                continue;
            m = is_send ? send(parts[j].fd, parts[j].p, len, flags | MSG_NOSIGNAL)
                        : recv(parts[j].fd, parts[j].p, len, flags);
            if (m > 0) {
                parts[j].p += m;
                parts[j].left -= (size_t)m;
                moved++;
                pending -= parts[j].left == 0;
            } else if (m < 0 && errno == EINTR) {
                moved++;
            } else if (!(m < 0 && errno == EAGAIN && n > 1)) {
                FIT_FAIL("raw %s: %s", is_send ? "send" : "recv",
                         m == 0 ? "peer closed" : errno == EAGAIN ? "timed out" : strerror(errno));
            }
            if (parts[j].left > 0)
                pfd[npfd++] = (struct pollfd){ .fd = parts[j].fd,
                                               .events = is_send ? POLLOUT : POLLIN };
        }
        if (pending > 0 && moved == 0)
            FIT_CHECK(poll(pfd, (nfds_t)npfd, (int)(FB_STALL_S * 1000)) > 0,
                      "raw %s: no progress for %.0f s", is_send ? "send" : "recv", FB_STALL_S);
    }
}

/* The parts of message i that thread job->thread carries; returns how many. */
static int fb_raw_parts(const fb_raw_job_t *job, uint64_t i, fb_raw_part_t *parts)
{
    const fb_side_t *s = job->s;
    size_t size = job->r->size, nparts = size / s->o->chunk_min;
    uint8_t *msg = fb_slot(s, size, job->conn, i);
    int ns = s->o->streams, n = 0;
    size_t j;

    nparts = nparts < 1 ? 1 : nparts > (size_t)ns ? (size_t)ns : nparts;
    for (j = 0; j < nparts; j++) {
        int stream = (int)((i + j) % (uint64_t)ns);
        size_t off = size * j / nparts, end = size * (j + 1) / nparts;

        if (stream % s->o->raw_threads != job->thread || end == off)
            continue;
        parts[n++] = (fb_raw_part_t){ .fd = s->raw_fd[job->conn][stream], .p = msg + off,
                                      .left = end - off };
    }
    return n;
}

static void *fb_raw_thread(void *arg)
{
    fb_raw_job_t *job = arg;
    int send = job->s->is_send, j, n;
    fb_raw_part_t parts[FB_MAX_STREAMS];
    uint64_t i;

    for (i = 0; i < job->r->iters; i++) {
        n = fb_raw_parts(job, i, parts);
        for (j = 0; send && job->check && j < n; j++)
            fb_stamp(parts[j].p, parts[j].left, job->conn, i);
        fb_raw_move(parts, n, send, job->s->o->chunk_max);
        n = fb_raw_parts(job, i, parts); /* fb_raw_move advanced the pointers. */
        for (j = 0; !send && job->check && j < n; j++)
            FIT_CHECK(fb_stamp_ok(parts[j].p, parts[j].left, job->conn, i),
                      "raw connection %d message %llu: wrong contents", job->conn,
                      (unsigned long long)i);
        if (send && i < job->lat_n)
            job->t_end[i] = n > 0 ? fit_now() : 0.0;
    }
    return NULL;
}

/* Per connection: done(i) = last part's end; posted(i) = done(i - depth), or the start. */
static void fb_raw_latency(const fb_raw_job_t *jobs, const fb_round_t *r, int threads,
                           double t0, fb_lat_t *lat)
{
    uint64_t i, n = jobs[0].lat_n;
    int c, t;
    double *done = malloc(n * sizeof(*done));

    FIT_CHECK(done != NULL, "out of memory");
    for (c = 0; c < (int)r->conns; c++) {
        for (i = 0; i < n; i++) {
            done[i] = 0.0;
            for (t = 0; t < threads; t++)
                if (jobs[c * threads + t].t_end[i] > done[i])
                    done[i] = jobs[c * threads + t].t_end[i];
            fb_lat_add(lat, (done[i] - (i < r->depth ? t0 : done[i - r->depth])) * 1e6);
        }
    }
    free(done);
}

void fb_raw_stream(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat)
{
    int threads = s->o->raw_threads, njobs = (int)r->conns * threads, j;
    uint64_t lat_n = FB_RAW_LAT_TOTAL / (uint64_t)njobs;
    fb_raw_job_t *jobs = calloc((size_t)njobs, sizeof(*jobs));
    double t0 = fit_now();

    FIT_CHECK(jobs != NULL, "out of memory");
    lat_n = lat_n > FB_LAT_CAP ? FB_LAT_CAP : lat_n;
    lat_n = lat_n > r->iters ? r->iters : lat_n;
    for (j = 0; j < njobs; j++) {
        jobs[j] = (fb_raw_job_t){ .s = s, .r = r, .conn = j / threads, .thread = j % threads,
                                  .check = fb_slots_unique(s, r->size, (int)r->conns,
                                                           (int)r->depth),
                                  .lat_n = s->is_send ? lat_n : 0 };
        if (jobs[j].lat_n > 0) {
            jobs[j].t_end = calloc(lat_n, sizeof(double));
            FIT_CHECK(jobs[j].t_end != NULL, "out of memory");
        }
        FIT_CHECK(pthread_create(&jobs[j].tid, NULL, fb_raw_thread, &jobs[j]) == 0,
                  "pthread_create failed");
    }
    for (j = 0; j < njobs; j++)
        pthread_join(jobs[j].tid, NULL);
    if (s->is_send && lat_n > 0)
        fb_raw_latency(jobs, r, threads, t0, lat);
    for (j = 0; j < njobs; j++)
        free(jobs[j].t_end);
    free(jobs);
}

/* One TCP stream with TCP_NODELAY, blocking calls: the sender sends then receives. */
void fb_raw_pingpong(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat)
{
    uint8_t *out = s->arena, *in = s->arena + s->o->pp_max;
    uint64_t i;

    for (i = 0; i < r->iters; i++) {
        fb_raw_part_t tx = { .fd = s->raw_pp_fd, .p = s->is_send ? out : in, .left = r->size };
        fb_raw_part_t rx = { .fd = s->raw_pp_fd, .p = in, .left = r->size };
        double t0 = fit_now();

        if (s->is_send) {
            fb_raw_move(&tx, 1, 1, s->o->chunk_max);
            fb_raw_move(&rx, 1, 0, s->o->chunk_max);
            fb_lat_add(lat, (fit_now() - t0) * 1e6);
        } else {
            fb_raw_move(&rx, 1, 0, s->o->chunk_max);
            fb_raw_move(&tx, 1, 1, s->o->chunk_max);
        }
    }
}
