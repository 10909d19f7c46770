#include "core/status.h"

const char *ferry_status_str(ferry_status_t status)
{
    switch (status) {
    case FERRY_OK:              return "success";
    case FERRY_ERR_NO_MEMORY:   return "out of memory";
    case FERRY_ERR_IO:          return "system error";
    case FERRY_ERR_REMOTE:      return "remote error";
    case FERRY_ERR_INVALID:     return "invalid argument";
    case FERRY_ERR_USAGE:       return "invalid usage";
    case FERRY_ERR_UNSUPPORTED: return "unsupported";
    case FERRY_ERR_INTERNAL:    return "internal error";
    case FERRY_ERR_CUDA:        return "CUDA error";
    case FERRY_ERR_ARGUMENT:    return "bad argument";
    }
    return "unknown status";
}
