/*
 * NCCL_IB_HCA as NCCL 2.28 reads it: "[^][=]name[:port][,name[:port]...]".
 * Names match device names as prefixes ("mlx5_1" also takes mlx5_10..19)
 * unless '=' asks for exact names; a leading '^' turns the list into
 * exclusions; a missing port matches every port. An empty list takes
 * everything, and "^" alone therefore excludes everything, as in NCCL.
 */
#ifndef FERRY_IB_HCA_FILTER_H
#define FERRY_IB_HCA_FILTER_H

#define FERRY_IB_HCA_FILTER_MAX  32 /* Entries kept (NCCL's MAX_IB_DEVS); more are ignored. */
#define FERRY_IB_HCA_NAME_MAX    64 /* Longest name + 1 (NCCL's netIf prefix). */

typedef struct ferry_ib_hca_filter {
    int exclude; /* Leading '^'. */
    int exact;   /* '=' after the optional '^'. */
    int n;
    struct {
        char name[FERRY_IB_HCA_NAME_MAX];
        int  port; /* -1: any port. */
    } entries[FERRY_IB_HCA_FILTER_MAX];
} ferry_ib_hca_filter_t;

/* Parse text (NULL or "" = no filter). -1 when a name is too long to keep. */
int ferry_ib_hca_filter_parse(const char *text, ferry_ib_hca_filter_t *filter);
/* 1 if port `port` of device `name` passes. */
int ferry_ib_hca_filter_match(const ferry_ib_hca_filter_t *filter, const char *name, int port);

#endif
