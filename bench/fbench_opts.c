/*
 * ferry-bench's command line. A usage error (an unknown option, a missing
 * or bad value) says which option and what it takes, prints the usage and
 * exits 2, as command-line tools do, so a script can tell "called wrong"
 * from "the run failed" (exit 1).
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "fbench.h"

#ifndef FERRY_BENCH_DEFAULT_PLUGIN
#define FERRY_BENCH_DEFAULT_PLUGIN "libnccl-net-ferry.so"
#endif

static void fb_usage(FILE *out)
{
    fprintf(out,
        "usage: ferry-bench [options]\n"
        "  --mode M,...      ferry | raw | both (stream test, default both)\n"
        "                    pingpong | pingpong-raw | pingpong-both | all (both + pingpong-both)\n"
        "  --min/--max SIZE  stream message sizes, x4 steps (default 4K..64M)\n"
        "  --pp-min/--pp-max ping-pong sizes, x4 steps (default 8..64K)\n"
        "  --conns LIST      connections (comm pairs), comma list (default 1,4; max %d)\n"
        "  --depth N         requests in flight per connection, 1..%d (default 8)\n"
        "  --slots N         buffers per connection (default: depth); fewer share buffers as\n"
        "                    perftest does (a footprint that stays in cache), data unchecked\n"
        "  --reps N          repetitions per point, interleaved ferry/raw (default 3)\n"
        "  --time S          length of each timed round in seconds (default 0.15)\n"
        "  --timeout S       the whole run; the receiver is killed past it (default 600)\n"
        "  --csv FILE        one row per measurement\n"
        "  --png FILE        plot of the medians (needs gnuplot)\n"
        "  --replot CSV      measure nothing: the tables (and --png) from an earlier run's CSV\n"
        "  --plugin PATH     plugin to dlopen (default %s)\n"
        "  --netns-recv NS --netns-send NS   run each side in that network namespace\n"
        "  --ifname-recv IF --ifname-send IF NCCL_SOCKET_IFNAME of each side\n"
        "  --cpu-recv N --cpu-send N         bind each side to one CPU, as mpirun binds ranks\n"
        "                    (ferry then runs without helper threads; raw keeps its threads)\n"
        "  --cgroup-recv DIR --cgroup-send DIR   run each side in that cgroup (its directory,\n"
        "                    e.g. one with a CPU limit, as a container runs a rank; root)\n"
        "  --proxy-sleep US  an idle proxy pass sleeps US microseconds instead of\n"
        "                    sched_yield() (NCCL's proxy spins; this shows what the spin costs)\n"
        "  --merge LIST      run ferry on the device makeVDevice makes of devices LIST\n"
        "                    (e.g. 0+1: two ib ports merged, each message striped over them)\n"
        "NCCL_SOCKET_IFNAME defaults to lo. Streams and threads per connection, for ferry\n"
        "and raw alike, come from ferry's config (NCCL_FERRY_STREAMS, NCCL_FERRY_THREADS,\n"
        "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD).\n"
        "Exit status 0: done; 1: the run failed; 2: bad usage; 3: --timeout reached.\n",
        FB_MAX_CONNS, FB_MAX_DEPTH, FERRY_BENCH_DEFAULT_PLUGIN);
}

/* What was wrong, then the usage, on stderr; exit 2. */
static void fb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fb_usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "ferry-bench: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fb_usage(stderr);
    exit(2);
}

static size_t fb_parse_size(const char *opt, const char *v)
{
    long long n = ferry_config_parse_size(v);

    if (n < 1 || n > (1LL << 30))
        fb_usage_error("%s %s: want a size from 1 to 1G (K/M/G suffixes)", opt, v);
    return (size_t)n;
}

/* A whole decimal number in [min, max], nothing after it. */
static int fb_parse_int(const char *opt, const char *v, long min, long max)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || n < min || n > max)
        fb_usage_error("%s %s: want a whole number from %ld to %ld", opt, v, min, max);
    return (int)n;
}

/* Seconds in (min, max], nothing after them. */
static double fb_parse_seconds(const char *opt, const char *v, double min, double max)
{
    char *end;
    double s;

    errno = 0;
    s = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !(s > min && s <= max))
        fb_usage_error("%s %s: want seconds, more than %g and at most %g", opt, v, min, max);
    return s;
}

static void fb_parse_conns(fb_opts_t *o, const char *v)
{
    const char *p = v;
    char *end;

    o->nconns = 0;
    o->max_conns = 0;
    if (*p == '\0')
        fb_usage_error("--conns '': want up to %d counts 1..%d, comma separated",
                       FB_MAX_CONN_LIST, FB_MAX_CONNS);
    while (*p != '\0') {
        long n = strtol(p, &end, 10);

        if (end == p || n < 1 || n > FB_MAX_CONNS || o->nconns == FB_MAX_CONN_LIST ||
            (*end != ',' && *end != '\0'))
            fb_usage_error("--conns %s: want up to %d counts 1..%d, comma separated",
                           v, FB_MAX_CONN_LIST, FB_MAX_CONNS);
        o->conns[o->nconns++] = (int)n;
        o->max_conns = (int)n > o->max_conns ? (int)n : o->max_conns;
        p = *end == ',' ? end + 1 : end;
    }
}

/* A comma list of mode names; the tests and implementations they name add up. */
static void fb_parse_mode(fb_opts_t *o, const char *v)
{
    static const struct { const char *name; int sf, sr, pf, pr; } modes[] = {
        { "ferry", 1, 0, 0, 0 },    { "raw", 0, 1, 0, 0 },          { "both", 1, 1, 0, 0 },
        { "pingpong", 0, 0, 1, 0 }, { "pingpong-raw", 0, 0, 0, 1 }, { "pingpong-both", 0, 0, 1, 1 },
        { "all", 1, 1, 1, 1 },
    };
    const char *p = v;
    size_t i, len;

    memset(o->run, 0, sizeof(o->run));
    if (*p == '\0')
        fb_usage_error("--mode '': want a comma list of ferry, raw, both, pingpong, "
                       "pingpong-raw, pingpong-both, all");
    for (; *p != '\0'; p += len + (p[len] == ',')) {
        len = strcspn(p, ",");
        for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
            if (strlen(modes[i].name) == len && strncmp(p, modes[i].name, len) == 0)
                break;
        if (i == sizeof(modes) / sizeof(modes[0]))
            fb_usage_error("--mode %s: want a comma list of ferry, raw, both, pingpong, "
                           "pingpong-raw, pingpong-both, all", v);
        o->run[FB_TEST_STREAM][FB_IMPL_FERRY]   |= modes[i].sf;
        o->run[FB_TEST_STREAM][FB_IMPL_RAW]     |= modes[i].sr;
        o->run[FB_TEST_PINGPONG][FB_IMPL_FERRY] |= modes[i].pf;
        o->run[FB_TEST_PINGPONG][FB_IMPL_RAW]   |= modes[i].pr;
    }
}

/* Every option takes a value; --help is the one that does not. */
static const char *const fb_options[] = {
    "--mode", "--min", "--max", "--pp-min", "--pp-max", "--conns", "--depth", "--slots",
    "--reps", "--time", "--timeout", "--csv", "--png", "--replot", "--plugin", "--netns-recv",
    "--netns-send", "--ifname-recv", "--ifname-send", "--cpu-recv", "--cpu-send",
    "--cgroup-recv", "--cgroup-send", "--proxy-sleep", "--merge",
};

static int fb_known(const char *a)
{
    size_t i;

    for (i = 0; i < sizeof(fb_options) / sizeof(fb_options[0]); i++)
        if (strcmp(a, fb_options[i]) == 0)
            return 1;
    return 0;
}

/* One option of fb_options and its value; 0 when opt is none of them. */
static int fb_parse_one(fb_opts_t *o, const char *a, const char *v)
{
    if (strcmp(a, "--mode") == 0)             fb_parse_mode(o, v);
    else if (strcmp(a, "--min") == 0)         o->min_size = fb_parse_size(a, v);
    else if (strcmp(a, "--max") == 0)         o->max_size = fb_parse_size(a, v);
    else if (strcmp(a, "--pp-min") == 0)      o->pp_min = fb_parse_size(a, v);
    else if (strcmp(a, "--pp-max") == 0)      o->pp_max = fb_parse_size(a, v);
    else if (strcmp(a, "--conns") == 0)       fb_parse_conns(o, v);
    else if (strcmp(a, "--depth") == 0)       o->depth = fb_parse_int(a, v, 1, FB_MAX_DEPTH);
    else if (strcmp(a, "--slots") == 0)       o->slots = fb_parse_int(a, v, 1, FB_MAX_DEPTH);
    else if (strcmp(a, "--reps") == 0)        o->reps = fb_parse_int(a, v, 1, FB_MAX_REPS);
    else if (strcmp(a, "--time") == 0)        o->target_s = fb_parse_seconds(a, v, 0, 60);
    else if (strcmp(a, "--timeout") == 0)     o->timeout_s = fb_parse_seconds(a, v, 0, 1e6);
    else if (strcmp(a, "--csv") == 0)         o->csv = v;
    else if (strcmp(a, "--png") == 0)         o->png = v;
    else if (strcmp(a, "--replot") == 0)      o->replot = v;
    else if (strcmp(a, "--plugin") == 0)      o->plugin = v;
    else if (strcmp(a, "--netns-recv") == 0)  o->netns[0] = v;
    else if (strcmp(a, "--netns-send") == 0)  o->netns[1] = v;
    else if (strcmp(a, "--ifname-recv") == 0) o->ifname[0] = v;
    else if (strcmp(a, "--ifname-send") == 0) o->ifname[1] = v;
    else if (strcmp(a, "--cpu-recv") == 0)    o->cpu[0] = fb_parse_int(a, v, 0, CPU_SETSIZE - 1);
    else if (strcmp(a, "--cpu-send") == 0)    o->cpu[1] = fb_parse_int(a, v, 0, CPU_SETSIZE - 1);
    else if (strcmp(a, "--cgroup-recv") == 0) o->cgroup[0] = v;
    else if (strcmp(a, "--cgroup-send") == 0) o->cgroup[1] = v;
    else if (strcmp(a, "--proxy-sleep") == 0) o->proxy_sleep_us = fb_parse_int(a, v, 0, 100000);
    else if (strcmp(a, "--merge") == 0)       setenv("FIT_MERGE", v, 1); /* fit_device reads it. */
    else return 0;
    return 1;
}

void fb_parse(fb_opts_t *o, int argc, char **argv)
{
    int i;

    memset(o, 0, sizeof(*o));
    o->plugin   = getenv("FERRY_PLUGIN") ? getenv("FERRY_PLUGIN") : FERRY_BENCH_DEFAULT_PLUGIN;
    o->min_size = (size_t)4 << 10;
    o->max_size = (size_t)64 << 20;
    o->pp_min   = 8;
    o->pp_max   = (size_t)64 << 10;
    o->depth    = 8;
    o->reps     = 3;
    o->target_s = 0.15;
    o->timeout_s = 600;
    o->cpu[0] = o->cpu[1] = -1;
    fb_parse_mode(o, "both");
    fb_parse_conns(o, "1,4");
    /* Every option but --help takes a value: two words a step. */
    for (i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fb_usage(stdout);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0)
            fb_usage_error("unexpected argument '%s': options start with --", a);
        if (!fb_known(a))
            fb_usage_error("unknown option %s", a);
        if (v == NULL)
            fb_usage_error("%s needs a value", a);
        (void)fb_parse_one(o, a, v);
    }
    if (o->timeout_s < 1)
        fb_usage_error("--timeout %g: want at least 1 s", o->timeout_s);
    if (o->slots == 0)
        o->slots = o->depth;
    if (o->slots > o->depth)
        fb_usage_error("--slots %d: want 1..--depth (%d)", o->slots, o->depth);
    if (o->min_size > o->max_size)
        fb_usage_error("--min %zu is above --max %zu", o->min_size, o->max_size);
    if (o->pp_min > o->pp_max)
        fb_usage_error("--pp-min %zu is above --pp-max %zu", o->pp_min, o->pp_max);
}
