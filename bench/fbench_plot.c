/*
 * ferry-bench --png: the medians as a gnuplot PNG, one panel per question.
 * The stream panel is throughput (higher is better), the ratio panel is
 * ferry / raw TCP at the same sizes and connections (>1: ferry faster), the
 * ping-pong panel is the round trip (lower is better). The figure's title
 * says where, from which commit and when, so a PNG that travels without its
 * folder still says what it shows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "fbench.h"
#include "fbench_commit.h" /* FB_COMMIT, written at every build (fbench_commit.cmake). */

typedef enum fb_panel {
    FB_PANEL_STREAM,
    FB_PANEL_RATIO,
    FB_PANEL_PINGPONG,
    FB_PANEL_COUNT
} fb_panel_t;

static const char *const fb_plot_impl[FB_IMPL_COUNT] = { "ferry", "raw TCP" };

/* Text made safe inside a gnuplot double-quoted string. */
static void fb_plot_clean(char *s)
{
    for (; *s != '\0'; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            *s = '_';
}

/* "host H, ferry commit C, date": where and when; a replot says what it can know. */
static void fb_plot_provenance(const fb_opts_t *o, char *out, size_t len)
{
    char host[256] = "", when[64] = "unknown date";
    const char *csv = o->replot != NULL ? strrchr(o->replot, '/') : NULL;
    time_t t = time(NULL);
    struct stat st;
    struct tm tm;

    if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
        snprintf(host, sizeof(host), "unknown host");
    host[sizeof(host) - 1] = '\0';
    if (o->replot != NULL && stat(o->replot, &st) == 0)
        t = st.st_mtime;
    if (gmtime_r(&t, &tm) != NULL)
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", &tm);
    if (o->replot != NULL)
        snprintf(out, len, "measured as in %s (written %s); plotted on %s, ferry commit %s",
                 csv != NULL ? csv + 1 : o->replot, when, host, FB_COMMIT);
    else
        snprintf(out, len, "host %s, ferry commit %s, %s", host, FB_COMMIT, when);
    fb_plot_clean(out);
}

static int fb_plot_in_panel(const fb_point_t *p, fb_panel_t panel)
{
    if (panel == FB_PANEL_PINGPONG)
        return p->test == FB_TEST_PINGPONG;
    if (panel == FB_PANEL_RATIO)
        return p->test == FB_TEST_STREAM && p->impl == FB_IMPL_FERRY;
    return p->test == FB_TEST_STREAM;
}

/* What p puts in panel: GB/s, the ferry / raw TCP ratio, or us p50 (medians); < 0: nothing. */
static double fb_plot_value(const fb_point_t *pts, int npts, const fb_point_t *p,
                            fb_panel_t panel)
{
    const fb_point_t *raw;

    if (!fb_plot_in_panel(p, panel))
        return -1;
    if (panel == FB_PANEL_STREAM)
        return fb_median(p->gbps, p->nrep);
    if (panel == FB_PANEL_PINGPONG)
        return fb_median(p->p50, p->nrep);
    raw = fb_peer(pts, npts, p, FB_IMPL_RAW);
    if (raw == NULL || fb_median(raw->gbps, raw->nrep) <= 0)
        return -1;
    return fb_median(p->gbps, p->nrep) / fb_median(raw->gbps, raw->nrep);
}

static int fb_plot_same_series(const fb_point_t *a, const fb_point_t *b)
{
    return a->test == b->test && a->impl == b->impl && a->conns == b->conns;
}

/* The legend entry of the series p opens. */
static void fb_plot_legend(const fb_point_t *p, fb_panel_t panel, char *out, size_t len)
{
    const char *s = p->conns == 1 ? "" : "s";

    if (panel == FB_PANEL_STREAM)
        snprintf(out, len, "%s, %d connection%s", fb_plot_impl[p->impl], p->conns, s);
    else if (panel == FB_PANEL_RATIO)
        snprintf(out, len, "ferry / raw TCP, %d connection%s", p->conns, s);
    else
        snprintf(out, len, "%s", p->impl == FB_IMPL_RAW ? "raw TCP (TCP_NODELAY)" : "ferry");
}

/*
 * data 0: the plot command, one inline series per (impl, conns); data 1:
 * the series' blocks (size, value), in the same order. Returns the count.
 */
static int fb_plot_series(FILE *gp, const fb_point_t *pts, int npts, fb_panel_t panel, int data)
{
    char legend[128];
    int i, j, series = 0;

    for (i = 0; i < npts; i++) {
        const fb_point_t *p = &pts[i];
        int first = 1;

        if (fb_plot_value(pts, npts, p, panel) < 0)
            continue;
        for (j = 0; j < i && first; j++)
            first = !(fb_plot_same_series(&pts[j], p) &&
                      fb_plot_value(pts, npts, &pts[j], panel) >= 0);
        if (!first)
            continue;
        if (data) {
            for (j = i; j < npts; j++)
                if (fb_plot_same_series(&pts[j], p) &&
                    fb_plot_value(pts, npts, &pts[j], panel) >= 0)
                    fprintf(gp, "%zu %g\n", pts[j].size,
                            fb_plot_value(pts, npts, &pts[j], panel));
            fprintf(gp, "e\n");
        } else {
            fb_plot_legend(p, panel, legend, sizeof(legend));
            fprintf(gp, "%s'-' using 1:2 with linespoints title \"%s\"", series ? ", " : "plot ",
                    legend);
        }
        series++;
    }
    /* The line a ratio is read against; a function, so it takes no data block. */
    if (!data && series > 0 && panel == FB_PANEL_RATIO)
        fprintf(gp, ", 1 with lines dashtype 2 linecolor rgb \"gray40\" "
                    "title \"1: as fast as raw TCP\"");
    if (!data && series > 0)
        fprintf(gp, "\n");
    return series;
}

/* Tics at the measured sizes, labelled 4K, 1M... (gnuplot's own would say 66kB). */
static void fb_plot_xtics(FILE *gp, const fb_point_t *pts, int npts, fb_test_t test)
{
    size_t last = 0;
    char sz[32];
    int i, n = 0;

    fprintf(gp, "set xtics (");
    for (i = 0; i < npts; i++) {
        if (pts[i].test != test || pts[i].size == last)
            continue;
        last = pts[i].size;
        fprintf(gp, "%s\"%s\" %zu", n++ ? ", " : "", fb_size_str(last, sz, sizeof(sz)), last);
    }
    fprintf(gp, ")\n");
}

/* Title, axes and scale of one panel. */
static void fb_plot_panel_head(FILE *gp, const fb_opts_t *o, fb_panel_t panel)
{
    if (panel == FB_PANEL_STREAM)
        fprintf(gp, "set title \"stream throughput: higher is better\\n%d stream(s) x %d "
                    "thread(s) per connection, depth %d, median of %d\"\n"
                    "set ylabel 'GB/s (median)'\nunset logscale y\nset yrange [0:*]\n",
                o->streams, o->threads, o->depth, o->reps);
    else if (panel == FB_PANEL_RATIO)
        fprintf(gp, "set title \"ferry / raw TCP throughput: >1 means ferry faster\\n"
                    "ratio of the medians at each size and connection count\"\n"
                    "set ylabel 'ferry GB/s / raw TCP GB/s'\nunset logscale y\n"
                    "set yrange [0:*]\n");
    else
        fprintf(gp, "set title \"ping-pong round trip: lower is better\\n1 connection, "
                    "median of %d p50s\"\nset ylabel 'us, p50 (median)'\nset logscale y\n"
                    "set autoscale y\n", o->reps);
    fprintf(gp, "set xlabel 'message size'\n");
}

void fb_plot(const fb_opts_t *o, const fb_point_t *pts, int npts)
{
    const char *cmd = getenv("FERRY_BENCH_GNUPLOT");
    int have[FB_PANEL_COUNT] = { 0 }, panels = 0, t, i;
    char where[768];
    FILE *gp;

    if (o->png == NULL)
        return;
    if (cmd == NULL && system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("\nno PNG: gnuplot is not installed (apt-get install gnuplot-nox); "
               "the CSV has the data\n");
        return;
    }
    for (t = 0; t < FB_PANEL_COUNT; t++) {
        for (i = 0; i < npts && !have[t]; i++)
            have[t] = fb_plot_value(pts, npts, &pts[i], (fb_panel_t)t) >= 0;
        panels += have[t];
    }
    if (panels == 0)
        return;
    fb_plot_provenance(o, where, sizeof(where));
    gp = popen(cmd != NULL ? cmd : "gnuplot", "w");
    FIT_CHECK(gp != NULL, "cannot start %s", cmd != NULL ? cmd : "gnuplot");
    /* noenhanced: TCP_NODELAY and the like are names, not subscripts. */
    fprintf(gp, "set terminal png size %d,560 noenhanced\nset output '%s'\n", 40 + 700 * panels,
            o->png);
    fprintf(gp, "set multiplot layout 1,%d title \"ferry-bench: ferry against raw TCP with the "
                "same streams and threads\\n%s\"\n", panels, where);
    fprintf(gp, "set logscale x 2\nset grid\nset key top left\n"
                "set offsets graph 0.02, graph 0.02, 0, 0\n");
    for (t = 0; t < FB_PANEL_COUNT; t++) {
        if (!have[t])
            continue;
        fb_plot_panel_head(gp, o, (fb_panel_t)t);
        fb_plot_xtics(gp, pts, npts, t == FB_PANEL_PINGPONG ? FB_TEST_PINGPONG : FB_TEST_STREAM);
        fb_plot_series(gp, pts, npts, (fb_panel_t)t, 0);
        fb_plot_series(gp, pts, npts, (fb_panel_t)t, 1);
    }
    fprintf(gp, "unset multiplot\n");
    if (pclose(gp) != 0)
        printf("\nno PNG: gnuplot failed\n");
    else
        printf("\nplot: %s\n", o->png);
}
