/*
 * integ_misuse's pieces: the environment every case gets and the helpers
 * the case files share (integ_misuse.c, misuse_truncate.c,
 * misuse_requests.c). What each case expects is in integ_misuse.c.
 */
#ifndef FERRY_TESTS_INTEGRATION_MISUSE_H
#define FERRY_TESTS_INTEGRATION_MISUSE_H

#include "harness.h"

typedef struct mis_env {
    fit_plugin_t plugin;
    void        *ctx;
    const char  *backend; /* NCCL_FERRY_BACKEND, "socket" when unset. */
} mis_env_t;

/* A refused call: exactly code `want`, and a WARN since `from` holding both needles. */
void mis_refused(const char *call, ncclResult_t rc, ncclResult_t want, int from, const char *n1,
                 const char *n2);
/* A listen comm and a connected send/recv pair on device 0. */
void mis_pair(mis_env_t *e, void **lc_p, void **send_p, void **recv_p);
/* Run one request to its end: its code, done flag and size. */
ncclResult_t mis_wait(const fit_plugin_t *p, void *req, double seconds, int *done_p, int *size_p);

void mis_send_larger_refused(mis_env_t *e);
void mis_test_bad_request(mis_env_t *e);

#endif
