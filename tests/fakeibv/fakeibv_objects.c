/*
 * fakeibv live object counts (fakeibv_objects, fakeibv.h): what a client of
 * the device holds now, so that a test or a bench can tell what one more
 * connection costs in QPs, CQs and MRs without reading the client's code.
 */
#include "fakeibv_internal.h"

struct fakeibv_objects fakeibv_live;
uint64_t fakeibv_live_cqes;

void fakeibv_live_add(uint64_t *counter, int delta)
{
    if (delta > 0)
        __atomic_add_fetch(counter, (uint64_t)delta, __ATOMIC_RELAXED);
    else
        __atomic_sub_fetch(counter, (uint64_t)-delta, __ATOMIC_RELAXED);
}

FAKEIBV_EXPORT void fakeibv_objects(struct fakeibv_objects *o)
{
    o->qps = __atomic_load_n(&fakeibv_live.qps, __ATOMIC_RELAXED);
    o->cqs = __atomic_load_n(&fakeibv_live.cqs, __ATOMIC_RELAXED);
    o->mrs = __atomic_load_n(&fakeibv_live.mrs, __ATOMIC_RELAXED);
    o->pds = __atomic_load_n(&fakeibv_live.pds, __ATOMIC_RELAXED);
    o->contexts = __atomic_load_n(&fakeibv_live.contexts, __ATOMIC_RELAXED);
}

FAKEIBV_EXPORT uint64_t fakeibv_cq_entries(void)
{
    return __atomic_load_n(&fakeibv_live_cqes, __ATOMIC_RELAXED);
}
