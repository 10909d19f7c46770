#include <dlfcn.h>
#include <stdio.h>

#include "ib/ib_probe.h"

int ferry_ib_probe_verbs(char *buf, size_t len)
{
    static const char *const names[] = {"libibverbs.so", "libibverbs.so.1"};
    const char *err = "not found";
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        /* RTLD_LOCAL and dlclose at once: the probe must leave nothing behind. */
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);

        if (lib != NULL) {
            snprintf(buf, len, "%s loads", names[i]);
            dlclose(lib);
            return 1;
        }
        err = dlerror();
    }
    snprintf(buf, len, "libibverbs cannot be loaded (%s)", err != NULL ? err : "unknown");
    return 0;
}
