/*
 * Durations of one kind (flushes of one message size, say) in bounded
 * memory: an exact count, sum and maximum, and a fixed reservoir of samples
 * for the percentiles. Below FP_RESERVOIR samples the percentiles are exact;
 * above, the reservoir is a uniform random sample of all of them (Vitter's
 * algorithm R with a fixed seed, so a run is repeatable). No locking here:
 * the caller holds its own lock.
 */
#ifndef FERRY_FLUSH_PROF_STATS_H
#define FERRY_FLUSH_PROF_STATS_H

#include <stddef.h>
#include <stdint.h>

#define FP_RESERVOIR 4096

typedef struct {
    uint64_t count;  /* Every sample added. */
    uint64_t sum_ns;
    uint64_t max_ns;
    uint64_t rng;    /* The reservoir's random state. */
    uint32_t n;      /* Samples held (min(count, FP_RESERVOIR)). */
    uint32_t ns[FP_RESERVOIR]; /* Nanoseconds, saturated at 2^32-1 (4.3 s). */
} fp_stats_t;

typedef struct {
    uint64_t count;
    double median_us; /* Mean of the two middle samples when n is even. */
    double p10_us;    /* Nearest rank: the ceil(0.1 n)-th smallest. */
    double p90_us;    /* The ceil(0.9 n)-th smallest. */
    double mean_us;   /* Of every sample, not only the reservoir's. */
    double max_us;
} fp_summary_t;

void fp_stats_init(fp_stats_t *s);
void fp_stats_add(fp_stats_t *s, uint64_t ns);
/* Sorts the reservoir in place (adding afterwards is still fine). */
void fp_stats_summary(fp_stats_t *s, fp_summary_t *out);

#endif
