/*
 * The CUDA driver, loaded at run time (dlopen libcuda.so.1) so that ferry
 * loads and runs host memory on a host without a GPU driver. The few driver
 * API types and calls ferry uses are declared here without cuda.h. Both
 * backends use it: the socket backend to stage GPU buffers, the ib backend
 * for GPU memory registration and flushes.
 */
#ifndef FERRY_CORE_CUDA_DRIVER_H
#define FERRY_CORE_CUDA_DRIVER_H

#include <stddef.h>

/* The few driver API types and constants used, without cuda.h (not needed to build). */
typedef int ferry_cu_result_t;
typedef int ferry_cu_device_t;
typedef void *ferry_cu_ctx_t;
typedef void *ferry_cu_stream_t;
typedef void *ferry_cu_event_t;
typedef unsigned long long ferry_cu_ptr_t;
#define FERRY_CU_POINTER_ATTRIBUTE_MEMORY_TYPE    2
#define FERRY_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define FERRY_CU_MEMORYTYPE_DEVICE                2
#define FERRY_CU_MEMHOSTALLOC_PORTABLE            1
#define FERRY_CU_STREAM_NON_BLOCKING              1
#define FERRY_CU_EVENT_DISABLE_TIMING             2
#define FERRY_CU_ERROR_NOT_READY                  600
#define FERRY_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define FERRY_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX 0
#define FERRY_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER 100

typedef struct ferry_cu_api {
    ferry_cu_result_t (*init)(unsigned);
    ferry_cu_result_t (*error_name)(ferry_cu_result_t, const char **);
    ferry_cu_result_t (*error_string)(ferry_cu_result_t, const char **);
    ferry_cu_result_t (*pointer_attr)(void *, int, ferry_cu_ptr_t);
    ferry_cu_result_t (*device_get)(ferry_cu_device_t *, int);
    ferry_cu_result_t (*ctx_set_current)(ferry_cu_ctx_t);
    ferry_cu_result_t (*ctx_get_current)(ferry_cu_ctx_t *);
    ferry_cu_result_t (*stream_create)(ferry_cu_stream_t *, unsigned);
    ferry_cu_result_t (*stream_destroy)(ferry_cu_stream_t);
    ferry_cu_result_t (*stream_sync)(ferry_cu_stream_t);
    ferry_cu_result_t (*host_alloc)(void **, size_t, unsigned);
    ferry_cu_result_t (*host_free)(void *);
    ferry_cu_result_t (*dtoh_async)(void *, ferry_cu_ptr_t, size_t, ferry_cu_stream_t);
    ferry_cu_result_t (*htod_async)(ferry_cu_ptr_t, const void *, size_t, ferry_cu_stream_t);
    ferry_cu_result_t (*ctx_create)(ferry_cu_ctx_t *, unsigned, ferry_cu_device_t);
    ferry_cu_result_t (*event_create)(ferry_cu_event_t *, unsigned);
    ferry_cu_result_t (*event_destroy)(ferry_cu_event_t);
    ferry_cu_result_t (*event_record)(ferry_cu_event_t, ferry_cu_stream_t);
    ferry_cu_result_t (*event_query)(ferry_cu_event_t);
    /*
     * Optional (NULL when the driver lacks them; ferry_cu_load still
     * succeeds): what the ib backend's GPU path asks beyond the staging calls.
     */
    ferry_cu_result_t (*device_get_attribute)(int *, int, ferry_cu_device_t);
    ferry_cu_result_t (*primary_ctx_retain)(ferry_cu_ctx_t *, ferry_cu_device_t);
    ferry_cu_result_t (*flush_gpudirect_rdma_writes)(int, int); /* CUDA 11.3+. */
} ferry_cu_api_t;

/* Filled by ferry_cu_load; all NULL before, and after a failed load. */
extern ferry_cu_api_t ferry_cu;

/* Load and cuInit once per process; 1 when the driver can be used. */
int ferry_cu_load(void);
/* Why the driver cannot be used ("" when it can, or was never tried). */
const char *ferry_cu_why_off(void);
/* "cuMemcpyDtoHAsync: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access ..." */
void ferry_cu_err(char *err, size_t err_len, const char *call, ferry_cu_result_t r);

#endif
