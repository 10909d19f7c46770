/* The single place a ferry_status_t becomes an ncclResult_t. */
#include "nccl/plugin.h"

ncclResult_t ferry_nccl_result(ferry_status_t status)
{
    /* Classes follow NCCL's README: OS -> System, peer -> Remote, NCCL misuse -> Internal. */
    switch (status) {
    case FERRY_OK:              return ncclSuccess;
    case FERRY_ERR_NO_MEMORY:   return ncclSystemError;
    case FERRY_ERR_IO:          return ncclSystemError;
    case FERRY_ERR_REMOTE:      return ncclRemoteError;
    case FERRY_ERR_INVALID:     return ncclInternalError;
    case FERRY_ERR_USAGE:       return ncclInvalidUsage;
    case FERRY_ERR_UNSUPPORTED: return ncclInternalError;
    case FERRY_ERR_INTERNAL:    return ncclInternalError;
    case FERRY_ERR_CUDA:        return ncclUnhandledCudaError;
    case FERRY_ERR_ARGUMENT:    return ncclInvalidArgument;
    }
    /* A value outside the enum is a ferry bug, not a success. */
    return ncclInternalError;
}
