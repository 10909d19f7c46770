/*
 * GPU memory for the socket backend (NCCL_FERRY_GPU_STAGING). TCP moves host
 * memory only, so a buffer NCCL registers in GPU memory gets a pinned host
 * shadow, and its chunks cross between the two by the GPU's copy engines:
 * one DMA per chunk each way, on the moving thread's own stream.
 *
 * Why bother: with host-only buffers NCCL's kernels read and write every byte
 * through mapped host memory, and that, not the network, caps a one-node
 * all_reduce (bench/results/2026-11-29-gpu-bound). With GPU buffers the
 * kernels work in device memory and the copy engines move the bytes in bulk.
 *
 * libcuda.so.1 is opened at run time: without a driver the plugin still
 * loads and advertises host memory only.
 */
#ifndef FERRY_SOCK_GPU_H
#define FERRY_SOCK_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/*
 * 1 when GPU buffers can be taken: staging is enabled and libcuda.so.1
 * loaded and initialised (once per process). Logs which, and why not.
 */
int ferry_sock_gpu_on(int enabled);
/* Why the driver could not be used ("" when it could, or was never tried). */
const char *ferry_sock_gpu_why_off(void);

/* A registered GPU region and its pinned host shadow. */
typedef struct ferry_sock_gpu_region {
    void    *cu_ctx;  /* Primary context of the device that holds it. */
    int      ordinal; /* That device, for messages. */
    char    *shadow;  /* Pinned host memory of the region's size. */
} ferry_sock_gpu_region_t;

/*
 * Find the device of [dev_ptr, dev_ptr + size) and allocate its shadow. On
 * failure err says which CUDA call failed and why.
 */
ferry_status_t ferry_sock_gpu_region_init(ferry_sock_gpu_region_t *r, const void *dev_ptr,
                                          size_t size, char *err, size_t err_len);
void ferry_sock_gpu_region_fini(ferry_sock_gpu_region_t *r);

/*
 * Copy len bytes between a region's device memory and its shadow, on the
 * calling thread's own non-blocking stream, and wait for the copy. 0, or -1
 * with err naming the CUDA call and its error.
 */
int ferry_sock_gpu_to_host(const ferry_sock_gpu_region_t *r, void *host, const void *dev,
                           size_t len, char *err, size_t err_len);
int ferry_sock_gpu_to_device(const ferry_sock_gpu_region_t *r, void *dev, const void *host,
                             size_t len, char *err, size_t err_len);

#endif
