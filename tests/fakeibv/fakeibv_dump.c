/*
 * fakeibv_dump (fakeibv.h): the emulated NIC's own state, for a test that
 * ran out of time. The plugin's dump says what each request waits for; this
 * says whether the emulated device still moves it: a send queue with WQEs
 * not transmitted, a responder waiting for a receive, a job no worker took.
 */
#include <unistd.h>

#include "fakeibv_internal.h"

FAKEIBV_EXPORT void fakeibv_dump(FILE *f)
{
    char line[256];

    fakeibv_engine_describe(line, sizeof(line));
    fprintf(f, "fakeibv[%d]: %s\n", (int)getpid(), line);
    fakeibv_qps_dump(f);
    fflush(f);
}
