/*
 * ferry-bench output: the live progress line (stderr), the per-measurement
 * CSV and the table of medians (stdout); the PNG is fbench_plot.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fbench.h"

static const char *const fb_impl_name[FB_IMPL_COUNT] = { "ferry", "raw" };
static const char *const fb_test_name[FB_TEST_COUNT] = { "stream", "pingpong" };

static FILE *fb_csv;

const char *fb_size_str(size_t size, char *buf, size_t len)
{
    if (size >= ((size_t)1 << 30) && size % ((size_t)1 << 30) == 0)
        snprintf(buf, len, "%zuG", size >> 30);
    else if (size >= ((size_t)1 << 20) && size % ((size_t)1 << 20) == 0)
        snprintf(buf, len, "%zuM", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, len, "%zuK", size >> 10);
    else
        snprintf(buf, len, "%zu", size);
    return buf;
}

double fb_median(const double *v, int n)
{
    double t[FB_MAX_REPS];
    int i, j;

    if (n <= 0)
        return 0.0;
    memcpy(t, v, (size_t)n * sizeof(*t));
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];

            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2.0;
}

/* On a TTY one line rewritten in place; otherwise one plain line per measurement. */
void fb_progress(const fb_opts_t *o, int step, int total, const fb_point_t *p, int rep)
{
    int tty = isatty(STDERR_FILENO);
    char sz[32];
    const double *v = p->test == FB_TEST_STREAM ? p->gbps : p->p50;

    fprintf(stderr, "%s[%3d/%d] %-8s %-5s conns %2d %6s rep %d/%d: %9.3f %s%s",
            tty ? "\r" : "ferry-bench ", step, total, fb_test_name[p->test],
            fb_impl_name[p->impl], p->conns, fb_size_str(p->size, sz, sizeof(sz)), rep + 1,
            o->reps, v[rep], p->test == FB_TEST_STREAM ? "GB/s" : "us p50",
            tty ? "\033[K" : "\n");
    fflush(stderr);
}

void fb_progress_done(void)
{
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[K");
}

void fb_csv_open(const fb_opts_t *o)
{
    if (o->csv == NULL)
        return;
    fb_csv = fopen(o->csv, "w");
    FIT_CHECK(fb_csv != NULL, "cannot write %s", o->csv);
    fprintf(fb_csv, "test,impl,conns,streams,threads,depth,size_bytes,rep,iterations,seconds,"
                    "gbytes_per_s,msgs_per_s,lat_p50_us,lat_p99_us\n");
}

void fb_csv_row(const fb_opts_t *o, const fb_point_t *p, int rep, uint64_t iters,
                double seconds)
{
    if (fb_csv == NULL)
        return;
    fprintf(fb_csv, "%s,%s,%d,%d,%d,%d,%zu,%d,%llu,%.6f,%.4f,%.1f,%.2f,%.2f\n",
            fb_test_name[p->test], fb_impl_name[p->impl], p->conns, o->streams, o->threads,
            p->test == FB_TEST_STREAM ? o->depth : 1, p->size, rep + 1,
            (unsigned long long)iters, seconds, p->gbps[rep], p->msgps[rep], p->p50[rep],
            p->p99[rep]);
    fflush(fb_csv);
}

void fb_csv_close(void)
{
    if (fb_csv != NULL)
        FIT_CHECK(fclose(fb_csv) == 0, "writing the CSV failed");
    fb_csv = NULL;
}

/* The point of the other implementation at the same test, conns and size, or NULL. */
const fb_point_t *fb_peer(const fb_point_t *pts, int npts, const fb_point_t *p, fb_impl_t impl)
{
    int i;

    for (i = 0; i < npts; i++)
        if (pts[i].test == p->test && pts[i].impl == impl && pts[i].conns == p->conns &&
            pts[i].size == p->size)
            return &pts[i];
    return NULL;
}

static void fb_table_stream(const fb_opts_t *o, const fb_point_t *pts, int npts)
{
    const char *dash = "      -";
    char sz[32];
    int i;

    printf("\nstream: %d stream(s), %d thread(s) per connection, depth %d, median of %d\n",
           o->streams, o->threads, o->depth, o->reps);
    printf("%5s %6s %9s %9s %7s %11s %10s %10s %10s %10s\n", "conns", "size", "ferryGB/s",
           "rawGB/s", "f/raw", "ferry msg/s", "f p50 us", "f p99 us", "raw p50", "raw p99");
    for (i = 0; i < npts; i++) {
        const fb_point_t *f, *r;

        if (pts[i].test != FB_TEST_STREAM ||
            (pts[i].impl == FB_IMPL_RAW && fb_peer(pts, npts, &pts[i], FB_IMPL_FERRY)))
            continue;
        f = pts[i].impl == FB_IMPL_FERRY ? &pts[i] : NULL;
        r = fb_peer(pts, npts, &pts[i], FB_IMPL_RAW);
        printf("%5d %6s", pts[i].conns, fb_size_str(pts[i].size, sz, sizeof(sz)));
        if (f != NULL)
            printf(" %9.3f", fb_median(f->gbps, f->nrep));
        else
            printf(" %9s", dash);
        if (r != NULL)
            printf(" %9.3f", fb_median(r->gbps, r->nrep));
        else
            printf(" %9s", dash);
        if (f != NULL && r != NULL && fb_median(r->gbps, r->nrep) > 0)
            printf(" %7.2f", fb_median(f->gbps, f->nrep) / fb_median(r->gbps, r->nrep));
        else
            printf(" %7s", dash);
        if (f != NULL)
            printf(" %11.0f %10.1f %10.1f", fb_median(f->msgps, f->nrep),
                   fb_median(f->p50, f->nrep), fb_median(f->p99, f->nrep));
        else
            printf(" %11s %10s %10s", dash, dash, dash);
        if (r != NULL)
            printf(" %10.1f %10.1f\n", fb_median(r->p50, r->nrep), fb_median(r->p99, r->nrep));
        else
            printf(" %10s %10s\n", dash, dash);
    }
}

static void fb_table_pingpong(const fb_opts_t *o, const fb_point_t *pts, int npts)
{
    char sz[32];
    int i;

    printf("\npingpong: round trip in us, 1 connection (ferry) vs 1 TCP stream with "
           "TCP_NODELAY (raw), median of %d\n", o->reps);
    printf("%6s %10s %10s %10s %10s %9s\n", "size", "ferry p50", "ferry p99", "raw p50",
           "raw p99", "p50 f/raw");
    for (i = 0; i < npts; i++) {
        const fb_point_t *f, *r;
        double fp50 = 0, rp50 = 0;

        if (pts[i].test != FB_TEST_PINGPONG ||
            (pts[i].impl == FB_IMPL_RAW && fb_peer(pts, npts, &pts[i], FB_IMPL_FERRY)))
            continue;
        f = pts[i].impl == FB_IMPL_FERRY ? &pts[i] : NULL;
        r = fb_peer(pts, npts, &pts[i], FB_IMPL_RAW);
        printf("%6s", fb_size_str(pts[i].size, sz, sizeof(sz)));
        if (f != NULL) {
            fp50 = fb_median(f->p50, f->nrep);
            printf(" %10.1f %10.1f", fp50, fb_median(f->p99, f->nrep));
        } else {
            printf(" %10s %10s", "-", "-");
        }
        if (r != NULL) {
            rp50 = fb_median(r->p50, r->nrep);
            printf(" %10.1f %10.1f", rp50, fb_median(r->p99, r->nrep));
        } else {
            printf(" %10s %10s", "-", "-");
        }
        if (fp50 > 0 && rp50 > 0)
            printf(" %9.2f\n", fp50 / rp50);
        else
            printf(" %9s\n", "-");
    }
}

void fb_table(const fb_opts_t *o, const fb_point_t *pts, int npts)
{
    if (o->run[FB_TEST_STREAM][FB_IMPL_FERRY] || o->run[FB_TEST_STREAM][FB_IMPL_RAW])
        fb_table_stream(o, pts, npts);
    if (o->run[FB_TEST_PINGPONG][FB_IMPL_FERRY] || o->run[FB_TEST_PINGPONG][FB_IMPL_RAW])
        fb_table_pingpong(o, pts, npts);
    fflush(stdout);
}
