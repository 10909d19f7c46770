/* What the machine offers for verbs, for messages before the ib backend exists. */
#ifndef FERRY_IB_PROBE_H
#define FERRY_IB_PROBE_H

#include <stddef.h>

/*
 * Try to dlopen libibverbs (as NCCL does: libibverbs.so, then .so.1) and
 * describe the outcome in buf. Returns 1 if the library loads.
 */
int ferry_ib_probe_verbs(char *buf, size_t len);

#endif
