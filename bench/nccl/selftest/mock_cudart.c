/*
 * Host-memory stand-in for the CUDA runtime calls ferry_nccl_bench makes, so
 * its launcher, checks and reports can be tested on a machine without a GPU.
 * "Device" memory is malloc'd; every call completes at once.
 * MOCK_NGPUS sets the GPU count (default 1).
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

cudaError_t cudaGetDeviceCount(int *count)
{
    const char *env = getenv("MOCK_NGPUS");

    *count = env != NULL ? atoi(env) : 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    (void)device;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    *ptr = malloc(size);
    return *ptr != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaMalloc(ptr, size);
}

cudaError_t cudaFree(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t size, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)kind;
    (void)stream;
    memcpy(dst, src, size);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t size, cudaStream_t stream)
{
    (void)stream;
    memset(dst, value, size);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    (void)flags;
    *stream = (cudaStream_t)(void *)stream; /* Any non-NULL value. */
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    (void)stream;
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t err)
{
    return err == cudaSuccess ? "no error" : "mock error";
}
