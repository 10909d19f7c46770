/*
 * ncclResult_t: the status every ncclNet_vN_t member returns.
 * Written by ferry from the ABI facts (reference/nccl-net-api.md §2.5); the
 * numeric values are the ABI, so each one is spelled out and pinned.
 */
#ifndef FERRY_NCCL_ERR_H
#define FERRY_NCCL_ERR_H

typedef enum {
    ncclSuccess            = 0, /* The call did what was asked (or "not yet", see api docs). */
    ncclUnhandledCudaError = 1, /* A CUDA call failed; plugins rarely return it. */
    ncclSystemError        = 2, /* The OS or hardware failed (syscall, allocation). */
    ncclInternalError      = 3, /* NCCL misused the API, or a plugin bug. */
    ncclInvalidArgument    = 4, /* A bad argument from the user. */
    ncclInvalidUsage       = 5, /* User or configuration error, e.g. a size mismatch. */
    ncclRemoteError        = 6, /* The peer failed or went away. */
    ncclInProgress         = 7, /* Non-blocking NCCL call still running; not used by plugins. */
    ncclNumResults         = 8  /* Count of values above; not a result. */
} ncclResult_t;

/* The enum crosses the ABI as a 32-bit return value. */
#ifdef __cplusplus
static_assert(sizeof(ncclResult_t) == 4, "ncclResult_t must be 4 bytes");
#else
_Static_assert(sizeof(ncclResult_t) == 4, "ncclResult_t must be 4 bytes");
#endif

#endif
