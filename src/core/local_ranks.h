/*
 * How many ranks of the job run on this node, and which of them this process
 * is, from what the launcher put in the environment. Real GPU nodes run one
 * rank per GPU (eight on one node) and, unbound, every rank's affinity mask
 * holds all of the node's CPUs: the count says how many ranks share them
 * (core/cpu_share.h divides them).
 */
#ifndef FERRY_CORE_LOCAL_RANKS_H
#define FERRY_CORE_LOCAL_RANKS_H

#define FERRY_LOCAL_RANKS_MAX 4096 /* More ranks on one node than any launcher starts. */

typedef struct ferry_local_ranks {
    int         count;  /* Ranks of the job on this node; 0 when no launcher said. */
    int         index;  /* This rank's place among them, 0..count-1; -1 when unknown. */
    const char *source; /* The variable that gave count (static); NULL when none did. */
} ferry_local_ranks_t;

/*
 * Fill lr from the environment. override > 0 (NCCL_FERRY_LOCAL_RANKS) wins;
 * otherwise the first launcher variable that holds a valid count, in the
 * order local_ranks.c gives. A value that is not a count (garbage, 0, above
 * FERRY_LOCAL_RANKS_MAX, a Slurm list this node is not in) is ignored with a
 * WARN naming the variable and value, and the next source is tried. Returns
 * lr->count.
 */
int ferry_local_ranks_read(int override, ferry_local_ranks_t *lr);

/*
 * Slurm's compressed tasks-per-node list ("8(x4),2": four nodes of 8, then
 * one of 2): the entry of node `node` (0-based, as SLURM_NODEID counts).
 * 1 and *count filled; 0 when text is malformed or node lies past its end.
 */
int ferry_local_ranks_slurm_list(const char *text, int node, int *count);

#endif
