/*
 * Rank 0's output. The rows mirror nccl-tests (op, size, count, type, time,
 * algbw, busbw, #wrong) so numbers can be set side by side; the header lines
 * start with '#' and record what a later reader needs to trust the numbers:
 * the libnccl really loaded, the rank layout, MPS, and every NCCL_/FERRY_
 * variable in effect.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnb_report.h"

extern char **environ;

#define FNB_CSV_HEADER \
    "op,size_bytes,count,type,time_us,algbw_gbps,busbw_gbps,wrong,iters,nranks,nccl_version,nccl_net,label\n"

static void fnb_version_format(char *buf, size_t len, int v)
{
    /* NCCL_VERSION() changed encoding at 2.9: X*10000+Y*100+Z, before X*1000+Y*100+Z. */
    if (v >= 10000) {
        snprintf(buf, len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
    } else {
        snprintf(buf, len, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
    }
}

static void fnb_env_print(void)
{
    printf("# env:");
    for (char **e = environ; *e != NULL; e++) {
        /* NCCL_HOSTID is per rank and shown on the layout line instead. */
        if ((strncmp(*e, "NCCL_", 5) == 0 || strncmp(*e, "FERRY_", 6) == 0) &&
            strncmp(*e, "NCCL_HOSTID=", 12) != 0) {
            printf(" %s", *e);
        }
    }
    printf("\n");
}

static int fnb_csv_open(fnb_report_t *rp, const char *path)
{
    rp->csv = fopen(path, "a");
    if (rp->csv == NULL) {
        fprintf(stderr, "ferry_nccl_bench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    /* Appending lets a driver script collect many runs in one file. */
    if (ftell(rp->csv) == 0) {
        fputs(FNB_CSV_HEADER, rp->csv);
    }
    return 0;
}

int fnb_report_open(fnb_report_t *rp, const fnb_opts_t *o, const fnb_shared_t *sh, int version,
                    const char *lib_path)
{
    *rp = (fnb_report_t){.o = o};
    fnb_version_format(rp->version, sizeof(rp->version), version);
    if (o->csv != NULL && fnb_csv_open(rp, o->csv) != 0) {
        return -1;
    }
    printf("# ferry_nccl_bench: %d ranks on %d GPU(s), rank r on GPU r %% %d, "
           "NCCL_HOSTID=host<r>: %s, MPS: %s\n", o->nranks, sh->ngpus, sh->ngpus,
           sh->split_hosts ? "yes" : "no", sh->mps);
    if (!sh->split_hosts) {
        printf("# note: ranks on distinct GPUs of one host may use P2P/SHM, not the network; "
               "--split-hosts forces NET\n");
    }
    printf("# NCCL %s from %s\n", rp->version, lib_path);
    fnb_env_print();
    printf("# iters %d, warmup %d, iter-bytes cap %zu (0: none)\n#\n", o->iters, o->warmup,
           o->iter_bytes);
    printf("# %14s %14s %12s %6s %11s %12s %12s %8s\n", "op", "size(B)", "count", "type",
           "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    return 0;
}

void fnb_report_row(fnb_report_t *rp, const fnb_row_t *row)
{
    const char *net = getenv("NCCL_NET");

    printf("  %14s %14zu %12zu %6s %11.2f %12.3f %12.3f %8llu\n", row->op, row->size_bytes,
           row->count, "float", row->time_us, row->algbw, row->busbw,
           (unsigned long long)row->wrong);
    if (rp->csv != NULL) {
        fprintf(rp->csv, "%s,%zu,%zu,float,%.3f,%.4f,%.4f,%llu,%d,%d,%s,%s,%s\n", row->op,
                row->size_bytes, row->count, row->time_us, row->algbw, row->busbw,
                (unsigned long long)row->wrong, row->iters, rp->o->nranks, rp->version,
                net != NULL ? net : "", rp->o->label != NULL ? rp->o->label : "");
        fflush(rp->csv);
    }
    rp->wrong_total += row->wrong;
    rp->busbw_sum += row->busbw;
    rp->rows++;
}

int fnb_report_close(fnb_report_t *rp)
{
    int rc = 0;

    printf("# wrong elements: %llu (%s)\n", (unsigned long long)rp->wrong_total,
           rp->wrong_total == 0 ? "OK" : "FAILED");
    if (rp->rows > 0) {
        printf("# avg busbw: %.3f GB/s over %d rows\n", rp->busbw_sum / rp->rows, rp->rows);
    }
    if (rp->csv != NULL && fclose(rp->csv) != 0) {
        fprintf(stderr, "ferry_nccl_bench: closing the CSV: %s\n", strerror(errno));
        rc = -1;
    }
    rp->csv = NULL;
    return rc;
}
