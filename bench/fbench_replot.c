/*
 * ferry-bench --replot CSV: the table of medians and the PNG again from a
 * CSV that an earlier run wrote, for runs made on a machine without gnuplot
 * (the GPU machine has none) or to redraw one after the fact. Nothing is
 * measured; the rows are taken as written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fbench.h"
#include "harness.h"

/* The point for (test, impl, conns, size), added when new; NULL when pts is full. */
static fb_point_t *fb_replot_point(fb_point_t *pts, int *npts, int max, fb_test_t test,
                                   fb_impl_t impl, int conns, size_t size)
{
    int i;

    for (i = 0; i < *npts; i++)
        if (pts[i].test == test && pts[i].impl == impl && pts[i].conns == conns &&
            pts[i].size == size)
            return &pts[i];
    if (*npts == max)
        return NULL;
    memset(&pts[*npts], 0, sizeof(pts[*npts]));
    pts[*npts].test = test;
    pts[*npts].impl = impl;
    pts[*npts].conns = conns;
    pts[*npts].size = size;
    return &pts[(*npts)++];
}

int fb_replot(fb_opts_t *o, const char *csv, fb_point_t *pts, int max)
{
    char line[512], test[16], impl[16];
    int npts = 0, lineno = 0, maxrep = 0;
    FILE *f = fopen(csv, "r");

    FIT_CHECK(f != NULL, "--replot: cannot read %s: %s", csv, strerror(errno));
    memset(o->run, 0, sizeof(o->run)); /* The tables show what the CSV holds, not --mode. */
    while (fgets(line, sizeof(line), f) != NULL) {
        int conns, streams, threads, depth, rep, n;
        size_t size;
        unsigned long long iters;
        double seconds, gbps, msgps, p50, p99;
        fb_point_t *p;

        if (++lineno == 1 && strncmp(line, "test,", 5) == 0)
            continue;
        n = sscanf(line, "%15[^,],%15[^,],%d,%d,%d,%d,%zu,%d,%llu,%lf,%lf,%lf,%lf,%lf", test,
                   impl, &conns, &streams, &threads, &depth, &size, &rep, &iters, &seconds, &gbps,
                   &msgps, &p50, &p99);
        FIT_CHECK(n == 14, "--replot: %s line %d is not a ferry-bench CSV row: %s", csv, lineno,
                  line);
        FIT_CHECK(rep >= 1 && rep <= FB_MAX_REPS, "--replot: %s line %d: rep %d out of 1..%d",
                  csv, lineno, rep, FB_MAX_REPS);
        FIT_CHECK(strcmp(test, "stream") == 0 || strcmp(test, "pingpong") == 0,
                  "--replot: %s line %d: unknown test '%s'", csv, lineno, test);
        FIT_CHECK(strcmp(impl, "ferry") == 0 || strcmp(impl, "raw") == 0,
                  "--replot: %s line %d: unknown implementation '%s'", csv, lineno, impl);
        p = fb_replot_point(pts, &npts, max,
                            strcmp(test, "stream") == 0 ? FB_TEST_STREAM : FB_TEST_PINGPONG,
                            strcmp(impl, "ferry") == 0 ? FB_IMPL_FERRY : FB_IMPL_RAW, conns, size);
        FIT_CHECK(p != NULL, "--replot: %s holds more than %d points", csv, max);
        o->run[p->test][p->impl] = 1;
        p->gbps[rep - 1] = gbps;
        p->msgps[rep - 1] = msgps;
        p->p50[rep - 1] = p50;
        p->p99[rep - 1] = p99;
        if (rep > p->nrep)
            p->nrep = rep;
        if (rep > maxrep)
            maxrep = rep;
        if (strcmp(test, "stream") == 0) {
            o->streams = streams;
            o->threads = threads;
            o->depth = depth;
        }
    }
    fclose(f);
    FIT_CHECK(npts > 0, "--replot: %s has no rows", csv);
    o->reps = maxrep;
    return npts;
}
