/*
 * ferry-bench: ferry against plain TCP between two processes, with NCCL's
 * traffic shape. See bench/README.md for the options and what each number
 * means; `ferry-bench --help` for a summary.
 *
 * The parent process sends and measures; the forked child receives (or
 * echoes). Points are measured A B A B (ferry, raw, ferry, raw...) so slow
 * drift on a shared machine hits both alike; the tables show per-point
 * medians. One calibration round per point and implementation (also the
 * warm-up) sets the iteration count all its repetitions then use.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "socket/sock_config.h"
#include "fbench.h"

#define FB_MAX_SIZES   32
#define FB_MAX_POINTS  (FB_TEST_COUNT * FB_IMPL_COUNT * FB_MAX_CONN_LIST * FB_MAX_SIZES)
#define FB_MIN_ITERS   4
#define FB_MAX_ITERS   10000000ULL

static pid_t fb_child_pid;
static fb_point_t fb_points[FB_MAX_POINTS];

static void fb_on_alarm(int sig)
{
    static const char msg[] = "ferry-bench: --timeout reached; killing the run\n";

    if (fb_child_pid > 0)
        kill(fb_child_pid, SIGKILL);
    if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
        _exit(3);
    _exit(3);
}

/* Streams, threads and chunking from the socket backend's config code, never re-derived here. */
static void fb_load_ferry_config(fb_opts_t *o)
{
    ferry_sock_config_t cfg;

    FIT_CHECK(ferry_sock_config_load(&cfg) == FERRY_OK,
              "ferry's configuration is invalid (above)");
    o->streams   = cfg.streams;
    o->threads   = cfg.threads;
    o->raw_threads = cfg.threads > 0 ? cfg.threads : 1;
    o->chunk_min = cfg.chunk_min;
    o->chunk_max = cfg.chunk_max;
    o->sndbuf    = cfg.sndbuf;
    o->rcvbuf    = cfg.rcvbuf;
}

static int fb_sizes(size_t min, size_t max, size_t *out)
{
    int n = 0;
    size_t s;

    for (s = min; s < max && n < FB_MAX_SIZES - 1; s *= 4)
        out[n++] = s;
    out[n++] = max;
    return n;
}

static int fb_need(const fb_opts_t *o, fb_impl_t impl)
{
    return o->run[FB_TEST_STREAM][impl] || o->run[FB_TEST_PINGPONG][impl];
}

/* Run one round on this side; the parent collects latency samples in lat. */
static void fb_round_run(fb_side_t *s, const fb_round_t *r, fb_lat_t *lat)
{
    if (r->test == FB_TEST_STREAM && r->impl == FB_IMPL_FERRY)
        fb_plugin_stream(s, r, lat);
    else if (r->test == FB_TEST_STREAM)
        fb_raw_stream(s, r, lat);
    else if (r->impl == FB_IMPL_FERRY)
        fb_plugin_pingpong(s, r, lat);
    else
        fb_raw_pingpong(s, r, lat);
}

/* Side setup, same order in both processes: they handshake through the pipes. */
static void fb_setup(fb_side_t *s)
{
    if (fb_need(s->o, FB_IMPL_FERRY))
        fb_plugin_setup(s);
    if (fb_need(s->o, FB_IMPL_RAW))
        fb_raw_setup(s);
}

static void fb_enter_side(const fb_opts_t *o, int side)
{
    char path[512];
    int fd;

    if (o->ifname[side] != NULL)
        setenv("NCCL_SOCKET_IFNAME", o->ifname[side], 1);
    if (o->cgroup[side] != NULL) {
        FILE *f;

        /* Before any thread starts: the threads made later are born in it. */
        snprintf(path, sizeof(path), "%s/cgroup.procs", o->cgroup[side]);
        f = fopen(path, "w");
        FIT_CHECK(f != NULL && fprintf(f, "%d\n", (int)getpid()) > 0 && fclose(f) == 0,
                  "move the %s into cgroup %s (%s): %s", side == 0 ? "receiver" : "sender",
                  o->cgroup[side], path, strerror(errno));
    }
    if (o->cpu[side] >= 0) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(o->cpu[side], &set);
        FIT_CHECK(sched_setaffinity(0, sizeof(set), &set) == 0, "bind the %s to CPU %d: %s",
                  side == 0 ? "receiver" : "sender", o->cpu[side], strerror(errno));
    }
    if (o->netns[side] == NULL)
        return;
    if (strchr(o->netns[side], '/') != NULL)
        snprintf(path, sizeof(path), "%s", o->netns[side]);
    else
        snprintf(path, sizeof(path), "/var/run/netns/%s", o->netns[side]);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    FIT_CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
    FIT_CHECK(setns(fd, CLONE_NEWNET) == 0, "setns %s: %s", path, strerror(errno));
    close(fd);
}

static void fb_child(const fb_opts_t *o, int ctrl_fd, int ack_fd)
{
    fb_side_t s;
    fb_round_t r;
    char ack = 'k';

    fit_set_role("receiver");
    fb_enter_side(o, 0);
    fb_side_init(&s, o, 0, ctrl_fd, ack_fd);
    fb_setup(&s);
    for (;;) {
        fb_pipe_read(ctrl_fd, &r, sizeof(r));
        if (r.test == FB_TEST_COUNT)
            break;
        fb_round_run(&s, &r, NULL);
        fb_pipe_write(ack_fd, &ack, 1);
    }
    fb_side_fini(&s);
    fflush(NULL);
    _exit(0);
}

/* One timed round: from sending the round to the child's ack. Fills p's rep. */
static double fb_measure(fb_side_t *s, const fb_round_t *r, fb_point_t *p, int rep)
{
    uint64_t msgs = r->iters * r->conns;
    fb_lat_t lat;
    double t0, t;
    char ack;

    fb_lat_init(&lat, r->test == FB_TEST_PINGPONG ? r->iters
                      : (uint64_t)r->conns * (r->iters < FB_LAT_CAP ? r->iters : FB_LAT_CAP));
    fb_pipe_write(s->ctrl_fd, r, sizeof(*r));
    t0 = fit_now();
    fb_round_run(s, r, &lat);
    fb_pipe_read(s->ack_fd, &ack, 1);
    t = fit_now() - t0;
    if (rep >= 0) {
        p->gbps[rep]  = (double)r->size * (double)msgs / t / 1e9;
        p->msgps[rep] = (double)msgs / t;
        p->p50[rep]   = fb_lat_pct(&lat, 50.0);
        p->p99[rep]   = fb_lat_pct(&lat, 99.0);
    }
    fb_lat_free(&lat);
    return t;
}

/* Calibration (and warm-up) round: the iteration count for a round of --time seconds. */
static uint64_t fb_calibrate(fb_side_t *s, fb_round_t *r)
{
    uint64_t cal = r->test == FB_TEST_PINGPONG ? 20
                 : ((uint64_t)8 << 20) / (r->size * r->conns);
    double t, want;

    int pass;

    cal = cal < FB_MIN_ITERS ? FB_MIN_ITERS : cal > 1000 ? 1000 : cal;
    /*
     * A first round carries set-up costs (page faults, slow start) that make
     * a short one look slow; measure again, longer, until a round lasts at
     * least a quarter of --time (at most 3 rounds), so the timed round lasts
     * about --time (duplex.sh overlaps two runs and needs that).
     */
    for (pass = 0;; pass++) {
        r->iters = cal;
        t = fb_measure(s, r, NULL, -1);
        if (pass == 2 || t >= s->o->target_s / 4 || cal >= FB_MAX_ITERS / 16)
            break;
        want = (double)cal * s->o->target_s / 2 / (t > 1e-6 ? t : 1e-6);
        cal = want > (double)(cal * 16) ? cal * 16 : want > (double)cal ? (uint64_t)want : cal * 2;
    }
    want = (double)cal * s->o->target_s / (t > 1e-6 ? t : 1e-6);
    return want < FB_MIN_ITERS ? FB_MIN_ITERS : want > FB_MAX_ITERS ? FB_MAX_ITERS
                                                                      : (uint64_t)want;
}

typedef struct fb_plan {
    size_t sizes[FB_TEST_COUNT][FB_MAX_SIZES];
    int    nsizes[FB_TEST_COUNT];
    int    total;   /* Timed rounds in the whole run, for the progress line. */
    int    step;
} fb_plan_t;

/* One point per implementation at (test, conns, size), measured A B A B. */
static int fb_run_point(fb_side_t *s, fb_plan_t *plan, fb_test_t test, int conns, size_t size,
                        int npts)
{
    fb_round_t r[FB_IMPL_COUNT];
    fb_point_t *p[FB_IMPL_COUNT] = { NULL };
    uint64_t iters[FB_IMPL_COUNT];
    int impl, rep;

    for (impl = 0; impl < FB_IMPL_COUNT; impl++) {
        if (!s->o->run[test][impl])
            continue;
        p[impl] = &fb_points[npts++];
        *p[impl] = (fb_point_t){ .test = test, .impl = (fb_impl_t)impl, .conns = conns,
                                 .size = size };
        r[impl] = (fb_round_t){ .test = test, .impl = (uint32_t)impl, .conns = (uint32_t)conns,
                                .depth = test == FB_TEST_STREAM ? (uint32_t)s->o->depth : 1,
                                .size = size };
        iters[impl] = fb_calibrate(s, &r[impl]);
    }
    for (rep = 0; rep < s->o->reps; rep++) {
        for (impl = 0; impl < FB_IMPL_COUNT; impl++) {
            double t;

            if (p[impl] == NULL)
                continue;
            r[impl].iters = iters[impl];
            t = fb_measure(s, &r[impl], p[impl], rep);
            p[impl]->nrep = rep + 1;
            fb_progress(s->o, ++plan->step, plan->total, p[impl], rep);
            fb_csv_row(s->o, p[impl], rep, iters[impl], t);
        }
    }
    return npts;
}

static void fb_parent(const fb_opts_t *o, int ctrl_fd, int ack_fd)
{
    fb_round_t stop = { .test = FB_TEST_COUNT };
    fb_plan_t plan = { .step = 0 };
    int stream = o->run[FB_TEST_STREAM][0] + o->run[FB_TEST_STREAM][1];
    int pingpong = o->run[FB_TEST_PINGPONG][0] + o->run[FB_TEST_PINGPONG][1];
    int npts = 0, c, i;
    fb_side_t s;

    fit_set_role("sender");
    fb_enter_side(o, 1);
    plan.nsizes[FB_TEST_STREAM]   = fb_sizes(o->min_size, o->max_size, plan.sizes[0]);
    plan.nsizes[FB_TEST_PINGPONG] = fb_sizes(o->pp_min, o->pp_max, plan.sizes[1]);
    plan.total = stream * o->reps * o->nconns * plan.nsizes[FB_TEST_STREAM] +
                 pingpong * o->reps * plan.nsizes[FB_TEST_PINGPONG];
    fb_side_init(&s, o, 1, ctrl_fd, ack_fd);
    fb_setup(&s);
    fb_csv_open(o);
    for (c = 0; c < o->nconns && stream > 0; c++)
        for (i = 0; i < plan.nsizes[FB_TEST_STREAM]; i++)
            npts = fb_run_point(&s, &plan, FB_TEST_STREAM, o->conns[c],
                                plan.sizes[FB_TEST_STREAM][i], npts);
    for (i = 0; i < plan.nsizes[FB_TEST_PINGPONG] && pingpong > 0; i++)
        npts = fb_run_point(&s, &plan, FB_TEST_PINGPONG, 1, plan.sizes[FB_TEST_PINGPONG][i],
                            npts);
    fb_progress_done();
    fb_pipe_write(ctrl_fd, &stop, sizeof(stop));
    fb_csv_close();
    fb_table(o, fb_points, npts);
    fb_plot(o, fb_points, npts);
    fb_side_fini(&s);
}

int main(int argc, char **argv)
{
    int ctrl[2], ack[2], status = 0;
    fb_opts_t o;

    fb_parse(&o, argc, argv);
    if (o.replot != NULL) {
        int npts = fb_replot(&o, o.replot, fb_points, FB_MAX_POINTS);

        printf("ferry-bench: %d points from %s\n", npts, o.replot);
        fb_table(&o, fb_points, npts);
        fb_plot(&o, fb_points, npts);
        return 0;
    }
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    fb_load_ferry_config(&o);
    printf("ferry-bench: plugin %s\n  NCCL_SOCKET_IFNAME=%s (receiver) %s (sender)%s%s%s%s\n"
           "  streams %d threads %d (per connection, ferry and raw) depth %d reps %d\n",
           o.plugin, o.ifname[0] ? o.ifname[0] : getenv("NCCL_SOCKET_IFNAME"),
           o.ifname[1] ? o.ifname[1] : getenv("NCCL_SOCKET_IFNAME"),
           o.netns[0] ? " netns " : "", o.netns[0] ? o.netns[0] : "", o.netns[1] ? " / " : "",
           o.netns[1] ? o.netns[1] : "", o.streams, o.threads, o.depth, o.reps);
    if (o.cgroup[0] != NULL || o.cgroup[1] != NULL)
        printf("  cgroup %s (receiver) %s (sender)\n", o.cgroup[0] ? o.cgroup[0] : "-",
               o.cgroup[1] ? o.cgroup[1] : "-");
    fflush(stdout);
    FIT_CHECK(pipe2(ctrl, O_CLOEXEC) == 0 && pipe2(ack, O_CLOEXEC) == 0, "pipe: %s",
              strerror(errno));
    signal(SIGALRM, fb_on_alarm);
    alarm((unsigned)o.timeout_s);
    fb_child_pid = fork();
    FIT_CHECK(fb_child_pid >= 0, "fork: %s", strerror(errno));
    if (fb_child_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(ctrl[1]);
        close(ack[0]);
        fb_child(&o, ctrl[0], ack[1]);
    }
    close(ctrl[0]);
    close(ack[1]);
    fb_parent(&o, ctrl[1], ack[0]);
    close(ctrl[1]);
    FIT_CHECK(waitpid(fb_child_pid, &status, 0) == fb_child_pid, "waitpid: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "ferry-bench: the receiver ended with status 0x%x\n", status);
        return 1;
    }
    return 0;
}
