/* A rank's share of its CPUs (cpu_share.h). */
#include "core/cpu_share.h"

int ferry_cpu_share_sharers(int mask, int online, int ignore_mask, int local_ranks)
{
    long long n;

    if (local_ranks <= 1)
        return 1;
    if (ignore_mask || (online >= 1 && mask >= online))
        return local_ranks;
    if (online < 1) /* A mask on a node of unknown size (tests): taken as the rank's own. */
        return 1;
    /*
     * A launcher that binds ranks splits the node's CPUs among them: each
     * mask then holds online / local_ranks CPUs and is its rank's own. A
     * mask k times that size is shared by about k ranks (bound to a socket
     * or NUMA node each, say); rounded to the nearest, so that a split that
     * does not come out even (8 ranks on 20 CPUs, masks of 2 and 3) still
     * reads as disjoint.
     */
    n = ((long long)local_ranks * mask * 2 + online) / (2LL * online);
    if (n < 1)
        n = 1;
    return n > local_ranks ? local_ranks : (int)n;
}

void ferry_cpu_share_compute(const ferry_cpu_share_in_t *in, ferry_cpu_share_t *out)
{
    int mask = in->mask > 0 ? in->mask : 1;
    int by_quota = in->quota_cpus > 0 && in->quota_cpus < mask;

    out->given = by_quota ? in->quota_cpus : mask;
    out->sharers = in->known_sharers > 0 && !in->ignore_mask
                       ? in->known_sharers
                       : ferry_cpu_share_sharers(mask, in->online, in->ignore_mask,
                                                 in->local_ranks);
    out->budget = out->given / out->sharers;
    if (out->budget < 1)
        out->budget = 1;
    /*
     * Cores of its own only where a launcher gave them (the mask holds fewer
     * than the node has) and no other local rank runs on them; a quota's
     * CPUs are time shared by every thread, never cores of its own.
     */
    out->bound = !in->ignore_mask && (in->online < 1 || mask < in->online) &&
                 out->sharers == 1 && !by_quota;
}
