/*
 * A rank's share of the CPUs it may run on. Eight ranks of one job on a
 * node, none bound, each see the node's every CPU in their affinity mask;
 * a rank that sized its helper threads and streams as if it owned them
 * would, with its seven siblings doing the same, put eight times as many
 * busy threads on the node as it has cores. The share divides the CPUs by
 * the local ranks that run on the same ones.
 *
 * Which ranks share this one's CPUs is estimated from the mask's size: a
 * mask that holds every online CPU is shared by every local rank; a smaller
 * one (a launcher bound the ranks) by as many as the node's CPUs, split
 * evenly, put on it: round(local_ranks * mask / online), at least 1. One
 * means the masks are disjoint: the rank really owns its cores.
 */
#ifndef FERRY_CORE_CPU_SHARE_H
#define FERRY_CORE_CPU_SHARE_H

typedef struct ferry_cpu_share_in {
    int mask;        /* CPUs the rank may run on: the mask's (or online with the mask set aside). */
    int online;      /* CPUs online on the node. */
    int ignore_mask; /* NCCL_IGNORE_CPU_AFFINITY: the mask is set aside, every online CPU counts. */
    int quota_cpus;  /* Whole CPUs a cgroup quota pays for, 0 when none. */
    int local_ranks; /* Ranks of the job on this node, 0 when unknown. */
    /*
     * Local ranks whose masks were compared and overlap this one's, itself
     * included (core/mask_board.h); 0 when not counted: then they are
     * estimated from the mask's size.
     */
    int known_sharers;
} ferry_cpu_share_in_t;

typedef struct ferry_cpu_share {
    int given;   /* min(mask, quota): the CPUs before they are shared. */
    int sharers; /* Local ranks on those CPUs, this one included (1: its own). */
    int budget;  /* given / sharers rounded down, at least 1. */
    int bound;   /* 1: a launcher gave the rank CPUs no other local rank runs on. */
} ferry_cpu_share_t;

/* Local ranks estimated to run on this rank's CPUs, this one included; at least 1. */
int ferry_cpu_share_sharers(int mask, int online, int ignore_mask, int local_ranks);

/* The rank's CPU budget from its mask, the node, the quota and the local ranks. */
void ferry_cpu_share_compute(const ferry_cpu_share_in_t *in, ferry_cpu_share_t *out);

#endif
