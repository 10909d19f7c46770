/*
 * abi_rail: the v12 properties railId and planeId, through the exported
 * structs alone (dlopen, dlsym ncclNetPlugin_vN), on the ib backend over
 * fakeibv with 2 devices of 2 ports each (FAKEIBV_NDEV=2, FAKEIBV_NPORTS=2
 * from ctest).
 *
 *  1. NCCL_IB_HCA without rails: every v12 device has railId = planeId =
 *     NCCL_NET_ID_UNDEF; the bytes of every version's properties (v8..v12)
 *     of the 4 ports and 3 merged devices are kept.
 *  2. NCCL_IB_HCA with rails and planes (name:port:rail:plane): each port
 *     reports its own; a merged device the members' common rail (plane),
 *     else UNDEF; the init INFO line names them; v8..v11's bytes are those
 *     of step 1, and v12's differ only in railId/planeId.
 *  3. A bad rail: init fails with a WARN naming the variable and entry.
 *
 * usage: abi_rail <plugin.so>
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/net.h"

#define RAIL_PORTS  4 /* fakeib0:1, fakeib0:2, fakeib1:1, fakeib1:2. */
#define RAIL_MERGES 3
#define RAIL_DEVS   (RAIL_PORTS + RAIL_MERGES)
#define RAIL_LINES  64

/* Every version's properties of one device, as bytes. */
typedef struct rail_snap {
    ncclNetProperties_v8_t  v8;
    ncclNetProperties_v9_t  v9;
    ncclNetProperties_v10_t v10;
    ncclNetProperties_v11_t v11;
    ncclNetProperties_v12_t v12;
} rail_snap_t;

/* What the plugin logged (WARN and INFO), for the checks on its lines. */
static char rail_lines[RAIL_LINES][1024];
static int rail_levels[RAIL_LINES];
static int rail_nlines;

static void __attribute__((format(printf, 5, 6)))
rail_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
         const char *fmt, ...)
{
    va_list ap;

    (void)flags;
    (void)file;
    (void)line;
    if (rail_nlines == RAIL_LINES || level > NCCL_LOG_INFO)
        return;
    va_start(ap, fmt);
    vsnprintf(rail_lines[rail_nlines], sizeof(rail_lines[0]), fmt, ap);
    va_end(ap);
    rail_levels[rail_nlines++] = (int)level;
    if (level == NCCL_LOG_WARN || getenv("ABI_VERBOSE") != NULL)
        fprintf(stderr, "[plugin %s] %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO",
                rail_lines[rail_nlines - 1]);
}

static int rail_logged(int level, const char *needle);

/* The INFO line of the devices: the list, then " [RO]" (relaxed ordering) or not, then ";". */
static int rail_device_line(const char *list)
{
    char a[1024], b[1024];

    snprintf(a, sizeof(a), "ib backend using %s;", list);
    snprintf(b, sizeof(b), "ib backend using %s [RO];", list);
    return rail_logged(NCCL_LOG_INFO, a) + rail_logged(NCCL_LOG_INFO, b);
}

/* Lines of level containing needle. */
static int rail_logged(int level, const char *needle)
{
    int i, n = 0;

    for (i = 0; i < rail_nlines; i++)
        n += rail_levels[i] == level && strstr(rail_lines[i], needle) != NULL;
    return n;
}

static int rail_failed;

#define RAIL_EXPECT(_cond, ...)                                     \
    do {                                                            \
        if (!(_cond)) {                                             \
            fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #_cond); \
            fprintf(stderr, __VA_ARGS__);                           \
            fputc('\n', stderr);                                    \
            rail_failed++;                                          \
        }                                                           \
    } while (0)

typedef struct rail_plugin {
    const ncclNet_v8_t  *v8;
    const ncclNet_v9_t  *v9;
    const ncclNet_v10_t *v10;
    const ncclNet_v11_t *v11;
    const ncclNet_v12_t *v12;
} rail_plugin_t;

/* The merges of both steps: same rail, same plane, one member without a rail. */
static const int rail_merges[RAIL_MERGES][2] = {{0, 2}, {0, 1}, {1, 3}};

/* Every version's getProperties of dev, each struct filled with 0x5a first. */
static int rail_snap(const rail_plugin_t *p, int dev, rail_snap_t *s)
{
    ncclResult_t r8, r9, r10, r11, r12;

    memset(s, 0x5a, sizeof(*s));
    r8 = p->v8->getProperties(dev, &s->v8);
    r9 = p->v9->getProperties(dev, &s->v9);
    r10 = p->v10->getProperties(dev, &s->v10);
    r11 = p->v11->getProperties(dev, &s->v11);
    r12 = p->v12->getProperties(dev, &s->v12);
    RAIL_EXPECT(r8 == ncclSuccess && r9 == ncclSuccess && r10 == ncclSuccess &&
                    r11 == ncclSuccess && r12 == ncclSuccess,
                "dev %d: getProperties v8..v12 returned %d %d %d %d %d", dev, r8, r9, r10, r11,
                r12);
    return r8 == ncclSuccess && r9 == ncclSuccess && r10 == ncclSuccess && r11 == ncclSuccess &&
                   r12 == ncclSuccess ? 0 : -1;
}

/* init (v12), the 4 ports, the 3 merges (v12 makeVDevice), a snapshot of each device. */
static int rail_step(const rail_plugin_t *p, const char *hca, rail_snap_t snaps[RAIL_DEVS],
                     void **ctx_p)
{
    ncclNetCommConfig_v12_t config = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclResult_t res;
    int ndev = 0, i;

    setenv("NCCL_IB_HCA", hca, 1);
    rail_nlines = 0;
    res = p->v12->init(ctx_p, 0xa11, &config, rail_log, NULL);
    RAIL_EXPECT(res == ncclSuccess, "NCCL_IB_HCA=%s: init returned %d", hca, res);
    if (res != ncclSuccess)
        return -1;
    RAIL_EXPECT(p->v12->devices(&ndev) == ncclSuccess && ndev == RAIL_PORTS,
                "NCCL_IB_HCA=%s: %d devices, want %d (FAKEIBV_NDEV=2 FAKEIBV_NPORTS=2?)", hca,
                ndev, RAIL_PORTS);
    if (ndev != RAIL_PORTS)
        return -1;
    for (i = 0; i < RAIL_MERGES; i++) {
        ncclNetVDeviceProps_v12_t vp;
        int d = -1;

        memset(&vp, 0, sizeof(vp));
        vp.ndevs = 2;
        vp.devs[0] = rail_merges[i][0];
        vp.devs[1] = rail_merges[i][1];
        res = p->v12->makeVDevice(&d, &vp);
        RAIL_EXPECT(res == ncclSuccess && d == RAIL_PORTS + i,
                    "makeVDevice(%d,%d) returned %d, device %d; want device %d",
                    vp.devs[0], vp.devs[1], res, d, RAIL_PORTS + i);
        if (res != ncclSuccess)
            return -1;
    }
    for (i = 0; i < RAIL_DEVS; i++)
        if (rail_snap(p, i, &snaps[i]) != 0)
            return -1;
    return 0;
}

/*
 * FNV-1a over v8..v11's bytes past name, pciPath (pointers) and guid (fakeibv
 * derives it from the process), which differ from process to process: equal
 * digests from two builds mean the older versions' properties did not change
 * between them.
 */
static unsigned long long rail_digest(const rail_snap_t *snaps, int n)
{
    unsigned long long h = 1469598103934665603ULL;
    int i;

    for (i = 0; i < n; i++) {
        const struct {
            const void *p;
            size_t      len;
        } parts[] = {
            {&snaps[i].v8, sizeof(snaps[i].v8)}, {&snaps[i].v9, sizeof(snaps[i].v9)},
            {&snaps[i].v10, sizeof(snaps[i].v10)}, {&snaps[i].v11, sizeof(snaps[i].v11)},
        };
        size_t k, b;

        for (k = 0; k < sizeof(parts) / sizeof(parts[0]); k++)
            for (b = 2 * sizeof(char *) + sizeof(uint64_t); b < parts[k].len; b++) {
                h ^= ((const unsigned char *)parts[k].p)[b];
                h *= 1099511628211ULL;
            }
    }
    return h;
}

static const char *rail_id_text(int id, char *buf, size_t len)
{
    if (id == NCCL_NET_ID_UNDEF)
        snprintf(buf, len, "UNDEF");
    else
        snprintf(buf, len, "%d", id);
    return buf;
}

int main(int argc, char **argv)
{
    /* Step 2's NCCL_IB_HCA, and what each device must then report (ports, then merges). */
    static const char *const hca_rails = "=fakeib0:1:0:1,fakeib0:2:1:1,fakeib1:1:0:2,fakeib1:2::1";
    static const struct {
        int rail, plane;
    } want[RAIL_DEVS] = {
        {0, 1}, {1, 1}, {0, 2}, {NCCL_NET_ID_UNDEF, 1},
        {0, NCCL_NET_ID_UNDEF}, /* 0+2: both rail 0, planes 1 and 2. */
        {NCCL_NET_ID_UNDEF, 1}, /* 0+1: rails 0 and 1, both plane 1. */
        {NCCL_NET_ID_UNDEF, 1}, /* 1+3: rail 1 and none, both plane 1. */
    };
    static const char *const info_list =
        "[0]fakeib0:1/IB(rail 0 plane 1) [1]fakeib0:2/IB(rail 1 plane 1) "
        "[2]fakeib1:1/IB(rail 0 plane 2) [3]fakeib1:2/IB(plane 1)";
    static rail_snap_t plain[RAIL_DEVS], rails[RAIL_DEVS];
    ncclNetCommConfig_v12_t config = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    rail_plugin_t p;
    void *lib, *ctx = NULL;
    char a[16], b[16];
    int i, same_old = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s <plugin.so>\n", argv[0]);
        return 2;
    }
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "FAIL: dlopen(%s): %s\n", argv[1], dlerror());
        return 1;
    }
    p.v8 = dlsym(lib, "ncclNetPlugin_v8");
    p.v9 = dlsym(lib, "ncclNetPlugin_v9");
    p.v10 = dlsym(lib, "ncclNetPlugin_v10");
    p.v11 = dlsym(lib, "ncclNetPlugin_v11");
    p.v12 = dlsym(lib, "ncclNetPlugin_v12");
    if (!p.v8 || !p.v9 || !p.v10 || !p.v11 || !p.v12 || !p.v12->makeVDevice) {
        fprintf(stderr, "FAIL: ncclNetPlugin_v8..v12 (with v12 makeVDevice) not all found\n");
        return 1;
    }
    /* Set by init only where the hints are used (NCCL_FERRY_NET_HINTS=1, socket backend). */
    RAIL_EXPECT(p.v12->setNetAttr == NULL, "v12 setNetAttr is set before init");

    /* 1. No rails: UNDEF everywhere. */
    if (rail_step(&p, "=fakeib0,fakeib1", plain, &ctx) != 0)
        return 1;
    for (i = 0; i < RAIL_DEVS; i++)
        RAIL_EXPECT(plain[i].v12.railId == NCCL_NET_ID_UNDEF &&
                        plain[i].v12.planeId == NCCL_NET_ID_UNDEF,
                    "no rails given: dev %d (%s) reports railId %d planeId %d", i,
                    plain[i].v12.name, plain[i].v12.railId, plain[i].v12.planeId);
    RAIL_EXPECT(rail_device_line("[0]fakeib0:1/IB [1]fakeib0:2/IB [2]fakeib1:1/IB "
                                 "[3]fakeib1:2/IB") == 1,
                "no plain 'ib backend using' INFO line");
    RAIL_EXPECT(p.v12->finalize(ctx) == ncclSuccess, "finalize failed");

    /* 2. Rails and planes from NCCL_IB_HCA. */
    if (rail_step(&p, hca_rails, rails, &ctx) != 0)
        return 1;
    for (i = 0; i < RAIL_DEVS; i++) {
        ncclNetProperties_v12_t masked = rails[i].v12;

        printf("v12 dev %d %-19s railId %-5s planeId %s\n", i, rails[i].v12.name,
               rail_id_text(rails[i].v12.railId, a, sizeof(a)),
               rail_id_text(rails[i].v12.planeId, b, sizeof(b)));
        RAIL_EXPECT(rails[i].v12.railId == want[i].rail && rails[i].v12.planeId == want[i].plane,
                    "dev %d (%s): railId %d planeId %d, want %d %d", i, rails[i].v12.name,
                    rails[i].v12.railId, rails[i].v12.planeId, want[i].rail, want[i].plane);
        /* v12: all but railId/planeId as without rails; older versions: every byte. */
        masked.railId = plain[i].v12.railId;
        masked.planeId = plain[i].v12.planeId;
        RAIL_EXPECT(memcmp(&masked, &plain[i].v12, sizeof(masked)) == 0,
                    "dev %d: v12 properties other than railId/planeId changed", i);
        RAIL_EXPECT(memcmp(&rails[i].v8, &plain[i].v8, sizeof(rails[i].v8)) == 0,
                    "dev %d: v8 properties changed", i);
        RAIL_EXPECT(memcmp(&rails[i].v9, &plain[i].v9, sizeof(rails[i].v9)) == 0,
                    "dev %d: v9 properties changed", i);
        RAIL_EXPECT(memcmp(&rails[i].v10, &plain[i].v10, sizeof(rails[i].v10)) == 0,
                    "dev %d: v10 properties changed", i);
        RAIL_EXPECT(memcmp(&rails[i].v11, &plain[i].v11, sizeof(rails[i].v11)) == 0,
                    "dev %d: v11 properties changed", i);
        same_old += memcmp(&rails[i].v8, &plain[i].v8, sizeof(rails[i].v8)) == 0 &&
                    memcmp(&rails[i].v9, &plain[i].v9, sizeof(rails[i].v9)) == 0 &&
                    memcmp(&rails[i].v10, &plain[i].v10, sizeof(rails[i].v10)) == 0 &&
                    memcmp(&rails[i].v11, &plain[i].v11, sizeof(rails[i].v11)) == 0;
    }
    RAIL_EXPECT(rail_device_line(info_list) == 1, "no INFO line 'ib backend using %s;'",
                info_list);
    printf("v8..v11 properties byte-identical with and without rails: %d of %d devices "
           "(digest %016llx)\n", same_old, RAIL_DEVS, rail_digest(rails, RAIL_DEVS));
    RAIL_EXPECT(p.v12->finalize(ctx) == ncclSuccess, "finalize failed");
    RAIL_EXPECT(rail_logged(NCCL_LOG_WARN, "") == 0, "%d WARN line(s) in steps 1-2",
                rail_logged(NCCL_LOG_WARN, ""));

    /* 3. A rail that is not a number: init refuses, saying where. */
    setenv("NCCL_IB_HCA", "=fakeib0:1:r1", 1);
    rail_nlines = 0;
    ctx = NULL;
    RAIL_EXPECT(p.v12->init(&ctx, 0xa12, &config, rail_log, NULL) != ncclSuccess,
                "init accepted NCCL_IB_HCA=fakeib0:1:r1");
    RAIL_EXPECT(rail_logged(NCCL_LOG_WARN, "NCCL_IB_HCA='=fakeib0:1:r1' is not valid: entry "
                                           "'fakeib0:1:r1': rail 'r1' is not a number 0..32767 "
                                           "(leave it empty for none); expected") == 1,
                "no WARN naming NCCL_IB_HCA, the entry and the rail");
    if (ctx != NULL)
        p.v12->finalize(ctx);
    dlclose(lib);
    if (rail_failed == 0)
        printf("PASS: railId/planeId of %d devices (%d merged), v8..v11 unchanged, bad rail "
               "refused\n", RAIL_DEVS, RAIL_MERGES);
    return rail_failed != 0 ? 1 : 0;
}
