/*
 * The CUDA driver calls the GPU-memory tests make themselves (tests/fakecuda
 * under them in CI): allocate device memory, copy into and out of it, make
 * the primary context current. Found in the libcuda.so.1 the plugin loaded.
 */
#ifndef FERRY_TESTS_INTEGRATION_HARNESS_CUDA_H
#define FERRY_TESTS_INTEGRATION_HARNESS_CUDA_H

#include <stddef.h>

typedef struct fit_cu {
    int (*retain)(void **, int);
    int (*set_current)(void *);
    int (*alloc)(unsigned long long *, size_t);
    int (*free_)(unsigned long long);
    int (*htod)(unsigned long long, const void *, size_t);
    int (*dtoh)(void *, unsigned long long, size_t);
} fit_cu_t;

/* A driver symbol of dl, or a failed check naming it. */
void *fit_cu_sym(void *dl, const char *name);
/* Fills cu from dl and makes device 0's primary context current on this thread. */
void fit_cu_open(void *dl, fit_cu_t *cu);

#endif /* FERRY_TESTS_INTEGRATION_HARNESS_CUDA_H */
