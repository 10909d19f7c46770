/* Durations with exact totals and a bounded reservoir (flush_prof_stats.h). */
#include "flush_prof_stats.h"

#include <stdlib.h>
#include <string.h>

void fp_stats_init(fp_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->rng = 0x9e3779b97f4a7c15ULL;
}

/* xorshift64: enough randomness for choosing reservoir slots, and no libc state. */
static uint64_t fp_stats_rand(fp_stats_t *s)
{
    uint64_t x = s->rng;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s->rng = x;
    return x;
}

void fp_stats_add(fp_stats_t *s, uint64_t ns)
{
    uint32_t v = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
    uint64_t j;

    s->count++;
    s->sum_ns += ns;
    if (ns > s->max_ns)
        s->max_ns = ns;
    if (s->n < FP_RESERVOIR) {
        s->ns[s->n++] = v;
        return;
    }
    /* Algorithm R: the count-th sample replaces a random one with chance FP_RESERVOIR/count. */
    j = fp_stats_rand(s) % s->count;
    if (j < FP_RESERVOIR)
        s->ns[j] = v;
}

static int fp_stats_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

/* The ceil(q n)-th smallest of n sorted samples (n > 0). */
static uint32_t fp_stats_rank(const uint32_t *v, uint32_t n, unsigned q_percent)
{
    uint64_t k = ((uint64_t)n * q_percent + 99) / 100;

    return v[k == 0 ? 0 : k - 1];
}

void fp_stats_summary(fp_stats_t *s, fp_summary_t *out)
{
    memset(out, 0, sizeof(*out));
    out->count = s->count;
    if (s->n == 0)
        return;
    qsort(s->ns, s->n, sizeof(s->ns[0]), fp_stats_cmp);
    if (s->n % 2 == 1)
        out->median_us = s->ns[s->n / 2] / 1000.0;
    else
        out->median_us = ((double)s->ns[s->n / 2 - 1] + s->ns[s->n / 2]) / 2000.0;
    out->p10_us = fp_stats_rank(s->ns, s->n, 10) / 1000.0;
    out->p90_us = fp_stats_rank(s->ns, s->n, 90) / 1000.0;
    out->mean_us = (double)s->sum_ns / (double)s->count / 1000.0;
    out->max_us = (double)s->max_ns / 1000.0;
}
