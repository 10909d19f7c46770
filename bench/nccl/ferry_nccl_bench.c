/*
 * ferry_nccl_bench: NCCL collectives between N local processes, every result
 * checked, timed and printed like nccl-tests, without MPI. Written to prove
 * and measure an NCCL net plugin (ferry) on one machine: ranks that share a
 * GPU get NCCL_HOSTID=host<rank>, so NCCL treats each as a node of its own
 * and sends all traffic through the NET transport, and MPS keeps their
 * kernels from time-slicing the GPU.
 *
 *   ferry_nccl_bench [-N nranks] [-b min] [-e max] [-f factor | -l list]
 *                    [-n iters] [-w warmup] [--iter-bytes B] [-o ops]
 *                    [--csv FILE] [--label TEXT] [--no-mps] [--split-hosts]
 *                    [-T timeout_s]
 *
 * Exit status: 0 all correct, 1 some element wrong, 2 any other failure.
 * Only rank 0 prints results; any rank prints its errors to stderr.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnb.h"

#define FNB_DEFAULT_MIN     ((size_t)4 << 10)
#define FNB_DEFAULT_MAX     ((size_t)256 << 20)
#define FNB_DEFAULT_FACTOR  4
#define FNB_DEFAULT_ITERS   20
#define FNB_DEFAULT_WARMUP  5
#define FNB_DEFAULT_TIMEOUT 600

enum {
    FNB_OPT_CSV = 256,
    FNB_OPT_LABEL,
    FNB_OPT_NO_MPS,
    FNB_OPT_SPLIT_HOSTS,
    FNB_OPT_ITER_BYTES,
};

static void fnb_usage(FILE *out)
{
    fprintf(out,
        "usage: ferry_nccl_bench [options]\n"
        "  -N, --nranks N         ranks (processes), rank r on GPU r %% ngpus (default 2)\n"
        "  -b, --minbytes SIZE    smallest total size (default 4K; K/M/G = 2^10/2^20/2^30)\n"
        "  -e, --maxbytes SIZE    largest total size (default 256M)\n"
        "  -f, --stepfactor N     multiply the size by N each step (default 4)\n"
        "  -l, --sizes LIST       explicit sizes, e.g. 4K,512K,64M (replaces -b/-e/-f)\n"
        "  -n, --iters N          timed iterations per size (default 20)\n"
        "  -w, --warmup_iters N   untimed iterations per size (default 5)\n"
        "      --iter-bytes SIZE  fewer iterations for big sizes: iters = max(%d, SIZE/size)\n"
        "                         when that is below -n; warmup shrinks to iters/4 (min 1)\n"
        "  -o, --ops LIST         all_reduce,all_gather,reduce_scatter,broadcast,sendrecv\n"
        "                         or all (default all)\n"
        "      --csv FILE         append rows to FILE (header when FILE is empty)\n"
        "      --label TEXT       copied into the CSV label column\n"
        "      --no-mps           do not start CUDA MPS when ranks share a GPU\n"
        "      --split-hosts      NCCL_HOSTID=host<r> per rank even on distinct GPUs\n"
        "  -T, --timeout S        whole run; then all ranks are killed (default 600)\n"
        "Sizes and bus bandwidth follow nccl-tests; only out-of-place, float, sum.\n",
        FNB_MIN_CAPPED_ITERS);
}

/* "4K", "64M", "1G", "4096": powers of 1024 like nccl-tests. 0 on error. */
static size_t fnb_size_parse(const char *s)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s) {
        return 0;
    }
    switch (toupper((unsigned char)*end)) {
    case 'G':
        v <<= 10;
        /* fall through */
    case 'M':
        v <<= 10;
        /* fall through */
    case 'K':
        v <<= 10;
        end++;
        break;
    default:
        break;
    }
    return *end == '\0' ? (size_t)v : 0;
}

static int fnb_int_parse(const char *s, int min, int max, int *out_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        return -1;
    }
    *out_p = (int)v;
    return 0;
}

static int fnb_sizes_list(fnb_opts_t *o, char *list)
{
    char *save = NULL;

    o->nsizes = 0;
    for (char *tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        size_t v = fnb_size_parse(tok);

        if (v == 0 || o->nsizes == FNB_MAX_SIZES) {
            fprintf(stderr, "ferry_nccl_bench: bad size '%s' (or more than %d sizes)\n", tok,
                    FNB_MAX_SIZES);
            return -1;
        }
        o->sizes[o->nsizes++] = v;
    }
    return o->nsizes > 0 ? 0 : -1;
}

static int fnb_sizes_range(fnb_opts_t *o, size_t min, size_t max, int factor)
{
    o->nsizes = 0;
    for (size_t v = min; v <= max; v *= (size_t)factor) {
        if (o->nsizes == FNB_MAX_SIZES) {
            fprintf(stderr, "ferry_nccl_bench: more than %d sizes\n", FNB_MAX_SIZES);
            return -1;
        }
        o->sizes[o->nsizes++] = v;
        if (v > max / (size_t)factor) {
            break; /* The next step would pass max, or wrap around. */
        }
    }
    return o->nsizes > 0 ? 0 : -1;
}

static int fnb_ops_parse(fnb_opts_t *o, char *list)
{
    char *save = NULL;

    o->ops_mask = 0;
    for (char *tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        int id = fnb_op_parse(tok);

        if (strcmp(tok, "all") == 0) {
            o->ops_mask |= (1u << FNB_OP_LAST) - 1;
        } else if (id >= 0) {
            o->ops_mask |= 1u << id;
        } else {
            fprintf(stderr, "ferry_nccl_bench: unknown op '%s'\n", tok);
            return -1;
        }
    }
    return o->ops_mask != 0 ? 0 : -1;
}

static const struct option fnb_long_opts[] = {
    {"nranks", required_argument, NULL, 'N'},
    {"minbytes", required_argument, NULL, 'b'},
    {"maxbytes", required_argument, NULL, 'e'},
    {"stepfactor", required_argument, NULL, 'f'},
    {"sizes", required_argument, NULL, 'l'},
    {"iters", required_argument, NULL, 'n'},
    {"warmup_iters", required_argument, NULL, 'w'},
    {"ops", required_argument, NULL, 'o'},
    {"timeout", required_argument, NULL, 'T'},
    {"csv", required_argument, NULL, FNB_OPT_CSV},
    {"label", required_argument, NULL, FNB_OPT_LABEL},
    {"no-mps", no_argument, NULL, FNB_OPT_NO_MPS},
    {"split-hosts", no_argument, NULL, FNB_OPT_SPLIT_HOSTS},
    {"iter-bytes", required_argument, NULL, FNB_OPT_ITER_BYTES},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Returns 0, or -1 after printing why; 1 for --help. */
static int fnb_opts_parse(fnb_opts_t *o, int argc, char **argv)
{
    size_t min = FNB_DEFAULT_MIN, max = FNB_DEFAULT_MAX;
    int factor = FNB_DEFAULT_FACTOR, c, bad = 0;
    char *sizes = NULL, all_ops[] = "all";

    *o = (fnb_opts_t){.iters = FNB_DEFAULT_ITERS, .warmup = FNB_DEFAULT_WARMUP, .nranks = 2,
                      .use_mps = 1, .timeout_s = FNB_DEFAULT_TIMEOUT};
    fnb_ops_parse(o, all_ops);
    while ((c = getopt_long(argc, argv, "N:b:e:f:l:n:w:o:T:h", fnb_long_opts, NULL)) != -1) {
        switch (c) {
        case 'N': bad |= fnb_int_parse(optarg, 1, FNB_MAX_RANKS, &o->nranks); break;
        case 'b': bad |= (min = fnb_size_parse(optarg)) == 0 ? -1 : 0; break;
        case 'e': bad |= (max = fnb_size_parse(optarg)) == 0 ? -1 : 0; break;
        case 'f': bad |= fnb_int_parse(optarg, 2, 1 << 20, &factor); break;
        case 'l': sizes = optarg; break;
        case 'n': bad |= fnb_int_parse(optarg, 1, 1 << 24, &o->iters); break;
        case 'w': bad |= fnb_int_parse(optarg, 0, 1 << 24, &o->warmup); break;
        case 'o': bad |= fnb_ops_parse(o, optarg); break;
        case 'T': bad |= fnb_int_parse(optarg, 1, 7 * 24 * 3600, &o->timeout_s); break;
        case FNB_OPT_CSV: o->csv = optarg; break;
        case FNB_OPT_LABEL: o->label = optarg; break;
        case FNB_OPT_NO_MPS: o->use_mps = 0; break;
        case FNB_OPT_SPLIT_HOSTS: o->split_hosts = 1; break;
        case FNB_OPT_ITER_BYTES:
            bad |= (o->iter_bytes = fnb_size_parse(optarg)) == 0 ? -1 : 0;
            break;
        case 'h': fnb_usage(stdout); return 1;
        default: bad = -1; break;
        }
    }
    if (bad || optind != argc) {
        fnb_usage(stderr);
        return -1;
    }
    if (o->label != NULL && strpbrk(o->label, ",\"\n") != NULL) {
        fprintf(stderr, "ferry_nccl_bench: --label must not contain , \" or newline\n");
        return -1;
    }
    return sizes != NULL ? fnb_sizes_list(o, sizes) : fnb_sizes_range(o, min, max, factor);
}

int main(int argc, char **argv)
{
    fnb_opts_t o;
    int rc = fnb_opts_parse(&o, argc, argv);

    if (rc != 0) {
        return rc > 0 ? 0 : FNB_EXIT_ERROR;
    }
    return fnb_launch(&o);
}
