/*
 * copy_rate: what the GPU's copy engines move between device memory allocated
 * the way NCCL allocates it (cuMem, VMM) and pinned host memory, from the
 * primary context (NCCL's) and from a context of its own (ferry's GPU staging,
 * src/socket/sock_gpu.c), on 1 and 4 streams. The question behind it:
 * bench/results/2026-11-29-gpu-staging run9, where staged copies took
 * 450-650 us per message.
 *
 *   gcc -O2 -I/usr/local/cuda/include copy_rate.c -lcuda -o copy_rate
 *   ./copy_rate [bytes per copy, default 2097152] [copies, default 256]
 *
 * Prints one line per case: context, direction, streams, GB/s. Run it under
 * MPS as the benchmarks do (bench/nccl/lib.sh fnb_mps_start) or without.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(call)                                                                          \
    do {                                                                                  \
        CUresult r_ = (call);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                         \
            const char *s_ = NULL;                                                        \
            cuGetErrorName(r_, &s_);                                                      \
            fprintf(stderr, "copy_rate: %s failed: %s (%d)\n", #call, s_ ? s_ : "?", r_); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* size bytes of device memory the way NCCL's cuMem path allocates it. */
static CUdeviceptr vmm_alloc(CUdevice dev, size_t size)
{
    CUmemAllocationProp prop = {0};
    CUmemAccessDesc access = {0};
    CUmemGenericAllocationHandle h;
    CUdeviceptr p;
    size_t gran;

    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size = (size + gran - 1) / gran * gran;
    CK(cuMemCreate(&h, size, &prop, 0));
    CK(cuMemAddressReserve(&p, size, 0, 0, 0));
    CK(cuMemMap(p, size, 0, h, 0));
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(p, size, &access, 1));
    return p;
}

static void run(const char *ctx_name, CUcontext ctx, CUdeviceptr dev_buf, char *host,
                size_t bytes, int copies)
{
    CUstream st[4];
    int dir, ns, i;

    CK(cuCtxSetCurrent(ctx));
    for (i = 0; i < 4; i++)
        CK(cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
    for (dir = 0; dir < 2; dir++) {
        for (ns = 1; ns <= 4; ns *= 4) {
            double t0, t;

            for (i = 0; i < 8; i++) /* Warm-up. */
                CK(dir ? cuMemcpyHtoDAsync(dev_buf, host, bytes, st[0])
                       : cuMemcpyDtoHAsync(host, dev_buf, bytes, st[0]));
            CK(cuStreamSynchronize(st[0]));
            t0 = now_s();
            for (i = 0; i < copies; i++) {
                size_t off = (size_t)(i % 4) * bytes;

                CK(dir ? cuMemcpyHtoDAsync(dev_buf + off, host + off, bytes, st[i % ns])
                       : cuMemcpyDtoHAsync(host + off, dev_buf + off, bytes, st[i % ns]));
            }
            for (i = 0; i < ns; i++)
                CK(cuStreamSynchronize(st[i]));
            t = now_s() - t0;
            printf("%-8s %s streams %d: %6.2f GB/s (%zu-byte copies, %.1f us each)\n", ctx_name,
                   dir ? "H2D" : "D2H", ns, (double)bytes * copies / t / 1e9, bytes,
                   t / copies * 1e6);
        }
    }
    for (i = 0; i < 4; i++)
        CK(cuStreamDestroy(st[i]));
}

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)2 << 20;
    int copies = argc > 2 ? atoi(argv[2]) : 256;
    CUcontext primary, own;
    CUdeviceptr dev_buf;
    CUdevice dev;
    void *host;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&primary, dev));
    CK(cuCtxSetCurrent(primary));
    dev_buf = vmm_alloc(dev, bytes * 4);
    CK(cuMemHostAlloc(&host, bytes * 4, CU_MEMHOSTALLOC_PORTABLE));
    run("primary", primary, dev_buf, host, bytes, copies);
    CK(cuCtxCreate(&own, NULL, 0, dev)); /* CUDA 13's cuCtxCreate takes params (NULL: none). */
    run("own", own, dev_buf, host, bytes, copies);
    return 0;
}
