/*
 * Whether the user set any of the ib backend's variables, NCCL's NCCL_IB_*
 * or ferry's NCCL_FERRY_IB_*. NCCL_FERRY_BACKEND=auto takes one as a sign
 * that ib was meant to run here, so passing over ib then WARNs instead of
 * only saying so in an INFO line (core/auto_fallback.h).
 */
#ifndef FERRY_IB_ENV_SET_H
#define FERRY_IB_ENV_SET_H

#include <stddef.h>

/*
 * How many such variables the environment holds with a value; the first few
 * as "NAME=value, NAME=value" in names (values cut short). NCCL_IB_DISABLE
 * is not counted: it says whether ib runs, not how.
 */
int ferry_ib_env_set(char *names, size_t len);

#endif
