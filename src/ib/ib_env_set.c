/*
 * The environment scan behind ferry_ib_env_set: every variable, not only
 * the ones ferry parses, since a variable meant for NCCL's own IB transport
 * (or misspelt) still says the user expects RDMA here.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ib/ib_env_set.h"

extern char **environ;

/* 1 when "NAME=value" is an ib variable with a value. */
static int ferry_ib_env_is_ib(const char *entry)
{
    const char *eq = strchr(entry, '=');

    if (eq == NULL || eq[1] == '\0')
        return 0;
    if (strncmp(entry, "NCCL_IB_DISABLE=", strlen("NCCL_IB_DISABLE=")) == 0)
        return 0;
    return strncmp(entry, "NCCL_IB_", strlen("NCCL_IB_")) == 0 ||
           strncmp(entry, "NCCL_FERRY_IB_", strlen("NCCL_FERRY_IB_")) == 0;
}

int ferry_ib_env_set(char *names, size_t len)
{
    size_t off = 0;
    int i, n = 0;

    if (len > 0)
        names[0] = '\0';
    for (i = 0; environ != NULL && environ[i] != NULL && i < 100000; i++) {
        const char *eq;

        if (!ferry_ib_env_is_ib(environ[i]))
            continue;
        eq = strchr(environ[i], '=');
        /* The first four, each value cut at 64 bytes: enough to name the cause. */
        if (n < 4 && off + 1 < len)
            off += (size_t)snprintf(names + off, len - off, "%s%.*s=%.64s", n > 0 ? ", " : "",
                                    (int)(eq - environ[i]), environ[i], eq + 1);
        if (off >= len)
            off = len - 1;
        n++;
    }
    if (n > 4 && off + 1 < len)
        snprintf(names + off, len - off, " and %d more", n - 4);
    return n;
}
