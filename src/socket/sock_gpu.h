/*
 * GPU memory for the socket backend (NCCL_FERRY_GPU_STAGING). TCP moves host
 * memory only, so a buffer NCCL registers in GPU memory gets a pinned host
 * shadow, and each message crosses between the two by the GPU's copy
 * engines: a send before its chunks may leave (sock_gpu_path.c posts it gated), a
 * receive before test() reports it (the lane ops' finish hook).
 *
 * Why: with host-only buffers NCCL's kernels read and write every byte
 * through mapped host memory, and their reads of it stall on PCIe. With GPU
 * buffers they work in device memory and the copy engines move the bytes in
 * bulk. It does not beat host staging, because the two kernel copies of
 * every byte through TCP remain; hence off by default.
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
 * A comm's copies between GPU memory and shadows: one non-blocking stream
 * in ferry's context and an event per request slot, so the copies of
 * several messages are in flight at once and each is polled on its own.
 * Driven by the thread that calls isend/irecv/test (NCCL's); the caller's
 * CUDA context is left as it was.
 */
#define FERRY_SOCK_GPU_SLOTS 32 /* FERRY_MAX_REQUESTS: a request's slot is seq % 32. */
typedef struct ferry_sock_gpu_queue {
    void *cu_ctx;  /* NULL until the comm's first GPU registration. */
    void *stream;
    void *events[FERRY_SOCK_GPU_SLOTS];
} ferry_sock_gpu_queue_t;

/* Make the stream and events for region r's device (once per comm). */
ferry_status_t ferry_sock_gpu_queue_init(ferry_sock_gpu_queue_t *q,
                                        const ferry_sock_gpu_region_t *r, char *err,
                                        size_t err_len);
/* Queue a copy (to_device: host -> dev) and mark its end with slot's event. 0, or -1 (err). */
int ferry_sock_gpu_queue_copy(ferry_sock_gpu_queue_t *q, int slot, int to_device, void *host,
                              void *dev, size_t len, char *err, size_t err_len);
/* 1 when slot's copy is complete, 0 while it runs, -1 if it failed (err). */
int ferry_sock_gpu_queue_poll(ferry_sock_gpu_queue_t *q, int slot, char *err, size_t err_len);
/* Wait for every copy queued so far (before a shadow is freed). */
void ferry_sock_gpu_queue_sync(ferry_sock_gpu_queue_t *q);
/* Wait for what is queued, free stream and events (comm close). */
void ferry_sock_gpu_queue_fini(ferry_sock_gpu_queue_t *q);

#endif
