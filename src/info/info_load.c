/*
 * Finding the plugin as NCCL does (NCCL_NET_PLUGIN: the value verbatim,
 * then libnccl-net-<value>.so for a bare name), and the symbol NCCL would
 * take (the newest ncclNetPlugin_vN). When nothing was asked for, ferry-info
 * looks for libnccl-net-ferry.so by name and then next to itself (the build
 * tree, or bin/../<libdir> of an install), so an installed ferry-info checks
 * the installed plugin without LD_LIBRARY_PATH.
 */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "info/info.h"

/* The install's libdir relative to its bindir (CMake sets it: "../lib/x86_64-linux-gnu"). */
#ifndef FERRY_INFO_BIN_TO_LIB
#define FERRY_INFO_BIN_TO_LIB "../lib"
#endif

static int ferry_info_try(ferry_info_plugin_t *p, const char *name)
{
    void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    struct link_map *map = NULL;
    char resolved[PATH_MAX];

    if (dl == NULL) {
        if (p->ntried < FERRY_INFO_MAX_TRIED) {
            const char *e = dlerror();

            snprintf(p->tried[p->ntried++], FERRY_INFO_LINE, "%s", e != NULL ? e : name);
        }
        return -1;
    }
    p->dl = dl;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &map) != 0 || map == NULL || map->l_name[0] == '\0')
        snprintf(p->path, sizeof(p->path), "%s", name);
    else if (realpath(map->l_name, resolved) != NULL)
        snprintf(p->path, sizeof(p->path), "%s", resolved);
    else
        snprintf(p->path, sizeof(p->path), "%s", map->l_name);
    return 0;
}

/* NCCL's rule: a bare name that is not lib*.so also gets libnccl-net-<name>.so. */
static int ferry_info_try_nccl_way(ferry_info_plugin_t *p, const char *x)
{
    char alt[600];
    size_t n = strlen(x);
    int lib_so = strncmp(x, "lib", 3) == 0 && n > 3 && strcmp(x + n - 3, ".so") == 0;

    if (ferry_info_try(p, x) == 0)
        return 0;
    if (strchr(x, '/') != NULL || lib_so)
        return -1;
    snprintf(alt, sizeof(alt), "libnccl-net-%s.so", x);
    return ferry_info_try(p, alt);
}

/* The directory of this executable, with a trailing '/', or "" if unknown. */
static void ferry_info_self_dir(const char *self_exe, char *out, size_t len)
{
    const char *slash = strrchr(self_exe, '/');

    out[0] = '\0';
    if (slash != NULL)
        snprintf(out, len, "%.*s", (int)(slash - self_exe + 1), self_exe);
}

static int ferry_info_find(ferry_info_plugin_t *p, const char *self_exe)
{
    char dir[1024], path[1400];

    if (ferry_info_try_nccl_way(p, p->requested) == 0)
        return 0;
    if (strcmp(p->requested, "ferry") != 0)
        return -1;
    ferry_info_self_dir(self_exe, dir, sizeof(dir));
    if (dir[0] == '\0')
        return -1;
    snprintf(path, sizeof(path), "%slibnccl-net-ferry.so", dir);
    if (ferry_info_try(p, path) == 0)
        return 0;
    snprintf(path, sizeof(path), "%s%s/libnccl-net-ferry.so", dir, FERRY_INFO_BIN_TO_LIB);
    return ferry_info_try(p, path);
}

int ferry_info_plugin_open(ferry_info_plugin_t *p, const char *requested, const char *self_exe,
                           char *err, size_t err_len)
{
    static const int versions[] = {12, 11, 10, 9, 8, 7, 6};
    char sym[32], tried[2048] = "";
    size_t off = 0, i;

    memset(p, 0, sizeof(*p));
    snprintf(p->requested, sizeof(p->requested), "%s", requested);
    if (strcasecmp(requested, "none") == 0) {
        snprintf(err, err_len, "NCCL_NET_PLUGIN=none: NCCL loads no external net plugin, so "
                 "ferry is not used; unset it or set it to ferry (or the plugin's path)");
        return -1;
    }
    if (ferry_info_find(p, self_exe) != 0) {
        for (i = 0; i < (size_t)p->ntried && off < sizeof(tried); i++)
            off += (size_t)snprintf(tried + off, sizeof(tried) - off, "%s%s", i ? "; " : "",
                                    p->tried[i]);
        snprintf(err, err_len, "cannot load the plugin '%s' (%s); install ferry, put its "
                 "directory on LD_LIBRARY_PATH, or pass --plugin /path/to/libnccl-net-ferry.so",
                 requested, tried);
        return -1;
    }
    for (i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
        snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", versions[i]);
        if (dlsym(p->dl, sym) != NULL && p->nversions < (int)(sizeof(p->versions) / sizeof(int)))
            p->versions[p->nversions++] = versions[i];
    }
    if (p->nversions == 0) {
        snprintf(err, err_len, "%s exports no ncclNetPlugin_v6..v12 symbol: NCCL would call it "
                 "unsupported and skip it", p->path);
        return -1;
    }
    p->version = p->versions[0];
    if (p->version != 12 && p->version != 11) {
        snprintf(err, err_len, "%s: its newest symbol is ncclNetPlugin_v%d; ferry-info drives "
                 "plugins through v11 or v12 (is this an old ferry?)", p->path, p->version);
        return -1;
    }
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", p->version);
    p->net = dlsym(p->dl, sym);
    snprintf(p->net_name, sizeof(p->net_name), "%s",
             p->version == 12 ? ((const ncclNet_v12_t *)p->net)->name
                              : ((const ncclNet_v11_t *)p->net)->name);
    return 0;
}
