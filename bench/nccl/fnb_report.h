/* Rank 0's output: nccl-tests-style rows on stdout and the CSV file. */
#ifndef FNB_REPORT_H
#define FNB_REPORT_H

#include <stdio.h>

#include "fnb.h"

typedef struct fnb_row {
    const char *op;
    size_t      size_bytes;  /* The larger buffer, as nccl-tests prints it. */
    size_t      count;       /* Per-rank element count passed to NCCL. */
    int         iters;
    int         warmup;
    double      time_us;     /* Per iteration, mean over ranks. */
    double      algbw;       /* GB/s = size_bytes / time. */
    double      busbw;       /* GB/s = algbw * the op's bus factor. */
    uint64_t    wrong;       /* Wrong elements summed over ranks. */
} fnb_row_t;

typedef struct fnb_report {
    const fnb_opts_t *o;
    FILE             *csv;          /* NULL without --csv. */
    char              version[32];  /* "2.28.9". */
    uint64_t          wrong_total;
    double            busbw_sum;
    int               rows;
} fnb_report_t;

int fnb_report_open(fnb_report_t *rp, const fnb_opts_t *o, const fnb_shared_t *sh, int version,
                    const char *lib_path);
void fnb_report_row(fnb_report_t *rp, const fnb_row_t *row);
int fnb_report_close(fnb_report_t *rp);

#endif /* FNB_REPORT_H */
