/* The CUDA driver calls of the GPU-memory tests (harness_cuda.h). */
#include <dlfcn.h>

#include "harness.h"
#include "harness_cuda.h"

void *fit_cu_sym(void *dl, const char *name)
{
    void *p = dlsym(dl, name);

    FIT_CHECK(p != NULL, "libcuda.so.1 has no %s (is it tests/fakecuda?)", name);
    return p;
}

void fit_cu_open(void *dl, fit_cu_t *cu)
{
    void *ctx = NULL;

    *(void **)&cu->retain = fit_cu_sym(dl, "cuDevicePrimaryCtxRetain");
    *(void **)&cu->set_current = fit_cu_sym(dl, "cuCtxSetCurrent");
    *(void **)&cu->alloc = fit_cu_sym(dl, "cuMemAlloc_v2");
    *(void **)&cu->free_ = fit_cu_sym(dl, "cuMemFree_v2");
    *(void **)&cu->htod = fit_cu_sym(dl, "cuMemcpyHtoD_v2");
    *(void **)&cu->dtoh = fit_cu_sym(dl, "cuMemcpyDtoH_v2");
    FIT_CHECK(cu->retain(&ctx, 0) == 0 && cu->set_current(ctx) == 0,
              "cannot make the primary context current");
}
