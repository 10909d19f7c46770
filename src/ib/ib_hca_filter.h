/*
 * NCCL_IB_HCA as NCCL 2.30 reads it:
 * "[^][=]name[:port[:rail[:plane]]][,name[:port[:rail[:plane]]]...]".
 * Names match device names as prefixes ("mlx5_1" also takes mlx5_10..19)
 * unless '=' asks for exact names; a leading '^' turns the list into
 * exclusions; a missing or empty port matches every port. An empty list
 * takes everything, and "^" alone therefore excludes everything, as in NCCL.
 *
 * rail and plane are what the user knows about the fabric and ferry cannot
 * see (ferry reports them as NCCL's railId/planeId, net v12): a missing or
 * empty field is "unknown" (-1). NCCL reads them with atoi; ferry refuses
 * what atoi would turn into nonsense (text, negatives, more than int16).
 */
#ifndef FERRY_IB_HCA_FILTER_H
#define FERRY_IB_HCA_FILTER_H

#include <stddef.h>

#define FERRY_IB_HCA_FILTER_MAX  32 /* Entries kept (NCCL's MAX_IB_DEVS); more are ignored. */
#define FERRY_IB_HCA_NAME_MAX    64 /* Longest name + 1 (NCCL's netIf prefix). */
#define FERRY_IB_HCA_ID_MAX      32767 /* Largest rail or plane: NCCL keeps them as int16_t. */

/* What ferry_ib_hca_filter_parse_why refuses. */
#define FERRY_IB_HCA_ERR_NAME   -1 /* A name of FERRY_IB_HCA_NAME_MAX characters or more. */
#define FERRY_IB_HCA_ERR_RAIL   -2 /* A rail that is not 0..FERRY_IB_HCA_ID_MAX. */
#define FERRY_IB_HCA_ERR_PLANE  -3 /* A plane that is not 0..FERRY_IB_HCA_ID_MAX. */
#define FERRY_IB_HCA_ERR_FIELDS -4 /* More than name:port:rail:plane. */

typedef struct ferry_ib_hca_filter {
    int exclude; /* Leading '^'. */
    int exact;   /* '=' after the optional '^'. */
    int n;
    struct {
        char name[FERRY_IB_HCA_NAME_MAX];
        int  port;  /* -1: any port. */
        int  rail;  /* -1: unknown. */
        int  plane; /* -1: unknown. */
    } entries[FERRY_IB_HCA_FILTER_MAX];
} ferry_ib_hca_filter_t;

/* Parse text (NULL or "" = no filter): 0, or a FERRY_IB_HCA_ERR_* code. */
int ferry_ib_hca_filter_parse(const char *text, ferry_ib_hca_filter_t *filter);
/* The same, and on an error which entry and field are wrong, in why (may be NULL). */
int ferry_ib_hca_filter_parse_why(const char *text, ferry_ib_hca_filter_t *filter, char *why,
                                  size_t why_len);
/* 1 if port `port` of device `name` passes. */
int ferry_ib_hca_filter_match(const ferry_ib_hca_filter_t *filter, const char *name, int port);
/*
 * The rail and plane the user gave a port that passes: the first entry
 * naming it, as NCCL takes it; -1 each when none does. An exclusion list
 * gives none: its entries name the ports that are not used.
 */
void ferry_ib_hca_filter_ids(const ferry_ib_hca_filter_t *filter, const char *name, int port,
                             int *rail_p, int *plane_p);

#endif
