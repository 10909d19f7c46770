/* ferry's one internal status type; src/nccl maps it to ncclResult_t once. */
#ifndef FERRY_CORE_STATUS_H
#define FERRY_CORE_STATUS_H

typedef enum ferry_status {
    FERRY_OK              = 0,  /* Success. */
    FERRY_ERR_NO_MEMORY   = -1, /* Allocation failed (ncclSystemError). */
    FERRY_ERR_IO          = -2, /* A syscall or the OS failed (ncclSystemError). */
    FERRY_ERR_REMOTE      = -3, /* The peer failed or went away (ncclRemoteError). */
    FERRY_ERR_INVALID     = -4, /* NCCL misused the API (ncclInternalError). */
    FERRY_ERR_USAGE       = -5, /* User or config error, e.g. size mismatch (ncclInvalidUsage). */
    FERRY_ERR_UNSUPPORTED = -6, /* Not available in this backend/build (ncclInternalError). */
    FERRY_ERR_INTERNAL    = -7, /* A ferry bug or broken invariant (ncclInternalError). */
    FERRY_ERR_CUDA        = -8, /* A CUDA driver call failed (ncclUnhandledCudaError). */
    FERRY_ERR_ARGUMENT    = -9  /* A bad value from the caller, e.g. a range that wraps
                                 * or an fd that is no dma-buf (ncclInvalidArgument). */
} ferry_status_t;

/* Short name of a status, e.g. "remote error"; never NULL. */
const char *ferry_status_str(ferry_status_t status);

#endif
