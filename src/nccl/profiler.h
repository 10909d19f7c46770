/*
 * NCCL profiler events (ncclNet v10+): ferry opens one net event per
 * request buffer when isend/irecv return a request, and closes it when
 * test() reports the request done (or failed). Events need a callback from
 * init and NCCL's per-step handle (phandle); without either, nothing
 * happens. NCCL >= 2.26 passes its callback to every init whether or not a
 * profiler plugin is loaded, so ferry also asks for a reason to pay for the
 * bookkeeping: NCCL_FERRY_PROFILER=1, or (auto, the default) a profiler
 * plugin named in NCCL_PROFILER_PLUGIN. Otherwise the data path costs one
 * load and one branch per call.
 */
#ifndef FERRY_NCCL_PROFILER_H
#define FERRY_NCCL_PROFILER_H

#include <stdatomic.h>
#include <stddef.h>

#include "nccl/net.h"
#include "proxy/req.h"

/* The callback in use; NULL: events off. Set by init, never cleared (it lives in libnccl). */
extern _Atomic(ncclProfilerCallback_t) ferry_nccl_prof_fn;

static inline ncclProfilerCallback_t ferry_nccl_prof_get(void)
{
    return atomic_load_explicit(&ferry_nccl_prof_fn, memory_order_relaxed);
}

/* From a v10..v12 init: keep fn if events are wanted (see above), and say so once. */
void ferry_nccl_prof_init(ncclProfilerCallback_t fn);

/* A request came back from isend (n = 1) or irecv: Start for each buffer with a phandle. */
void ferry_nccl_prof_start(ncclProfilerCallback_t fn, void *comm, void *request, int send, int n,
                           void **phandles, const size_t *sizes, const int *tags);
/* test() is done with the request (sizes: what it reported; NULL on error): Stop. */
void ferry_nccl_prof_stop(ncclProfilerCallback_t fn, void *request, const int *sizes,
                          ncclResult_t failed);
/* A comm is closing: drop its open events (their requests will never complete). */
void ferry_nccl_prof_forget(void *comm);

#endif
