/*
 * abi_tuner: the bundled tuner as NCCL reaches it (dlsym ncclTunerPlugin_v3..v5
 * in the net plugin's library). Checks that it stays out of the way until
 * ferry's net is up and the communicator spans nodes, then moves a 64 KiB
 * all_reduce off LL and caps its channels, and leaves everything alone when
 * NCCL_NET names another net.
 *
 * usage: abi_tuner <plugin.so>
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/net.h"
#include "nccl/tuner.h"

#define NALGO  7
#define NPROTO 3

static char abi_last_info[512];
static int abi_warns;

static void __attribute__((format(printf, 5, 6)))
abi_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
        const char *fmt, ...)
{
    va_list ap;

    (void)flags;
    (void)file;
    (void)line;
    va_start(ap, fmt);
    if (level == NCCL_LOG_WARN) {
        abi_warns++;
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    } else {
        vsnprintf(abi_last_info, sizeof(abi_last_info), fmt, ap);
    }
    va_end(ap);
}

static int abi_failed;
#define CHECK(_cond, ...)                                                   \
    do {                                                                    \
        if (!(_cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
            abi_failed = 1;                                                 \
        }                                                                   \
    } while (0)

/* NCCL's 2-node ring table for a mid-size all_reduce: LL looks best to it. */
static void abi_table(float table[NALGO][NPROTO])
{
    int a, p;

    for (a = 0; a < NALGO; a++)
        for (p = 0; p < NPROTO; p++)
            table[a][p] = NCCL_ALGO_PROTO_IGNORE;
    table[NCCL_ALGO_RING][NCCL_PROTO_LL] = 20.0f;
    table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 30.0f;
}

/* Run one 64 KiB all_reduce through getCollInfo; 1 if the tuner changed it. */
typedef ncclResult_t (*abi_coll_fn)(void *, ncclFunc_t, size_t, int, float **, int, int, int,
                                    int *);
static int abi_adjusted(const char *what, void *ctx, abi_coll_fn v45,
                        const ncclTuner_v3_t *v3, int *nch_p)
{
    float table[NALGO][NPROTO];
    ncclResult_t rc;

    abi_table(table);
    *nch_p = 0;
    if (v3 != NULL)
        rc = v3->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)table, NALGO, NPROTO,
                             nch_p);
    else
        rc = v45(ctx, ncclFuncAllReduce, 65536, 1, (float **)table, NALGO, NPROTO, 0, nch_p);
    CHECK(rc == ncclSuccess, "%s: getCollInfo returned %d", what, (int)rc);
    CHECK(table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == 30.0f, "%s: Simple's cost changed", what);
    CHECK(table[NCCL_ALGO_TREE][NCCL_PROTO_LL] == NCCL_ALGO_PROTO_IGNORE,
          "%s: an ignored entry was touched", what);
    return table[NCCL_ALGO_RING][NCCL_PROTO_LL] != 20.0f;
}

int main(int argc, char **argv)
{
    const ncclTuner_v5_t *v5;
    const ncclTuner_v4_t *v4;
    const ncclTuner_v3_t *v3;
    const ncclNet_v11_t *net;
    ncclNetCommConfig_v11_t cfg = {.trafficClass = -1};
    void *lib, *ctx = NULL, *netctx = NULL;
    char want[64];
    int nch;

    if (argc != 2) {
        fprintf(stderr, "usage: abi_tuner <plugin.so>\n");
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
        return 1;
    }
    v5 = dlsym(lib, "ncclTunerPlugin_v5");
    v4 = dlsym(lib, "ncclTunerPlugin_v4");
    v3 = dlsym(lib, "ncclTunerPlugin_v3");
    net = dlsym(lib, "ncclNetPlugin_v11");
    if (v5 == NULL || v4 == NULL || v3 == NULL || net == NULL) {
        fprintf(stderr, "FAIL: missing symbol: v5 %p v4 %p v3 %p net %p\n", (const void *)v5,
                (const void *)v4, (const void *)v3, (const void *)net);
        return 1;
    }
    CHECK(strcmp(v5->name, "ferry") == 0 && strcmp(v4->name, "ferry") == 0 &&
          strcmp(v3->name, "ferry") == 0, "tuner names: %s %s %s", v5->name, v4->name, v3->name);

    /* Before ferry's net is initialized: hands off. */
    CHECK(v5->init(&ctx, 1, 2, 2, abi_log, NULL, NULL) == ncclSuccess, "v5 init");
    CHECK(strstr(abi_last_info, "not initialized") != NULL, "log said: %s", abi_last_info);
    CHECK(!abi_adjusted("v5 before net init", ctx, v5->getCollInfo, NULL, &nch), "changed");
    CHECK(nch == 0, "nChannels %d", nch);
    v5->finalize(ctx);

    CHECK(net->init(&netctx, 1, &cfg, abi_log, NULL) == ncclSuccess, "net init");

    /* Two nodes over ferry: LL gets ferry's ceiling, Simple wins on 2 channels. */
    CHECK(v5->init(&ctx, 1, 2, 2, abi_log, NULL, NULL) == ncclSuccess, "v5 init");
    CHECK(strstr(abi_last_info, "on: LL/LL128 held to 1000 MB/s") != NULL, "log said: %s",
          abi_last_info);
    /* The backend's default channel size (socket 2 MiB; ABI_TUNER_CHANNEL_BYTES for ib's). */
    snprintf(want, sizeof(want), "one channel per %s bytes",
             getenv("ABI_TUNER_CHANNEL_BYTES") != NULL ? getenv("ABI_TUNER_CHANNEL_BYTES")
                                                       : "2097152");
    CHECK(strstr(abi_last_info, want) != NULL, "log said: %s; wanted '%s'", abi_last_info, want);
    CHECK(abi_adjusted("v5", ctx, v5->getCollInfo, NULL, &nch), "v5 left LL alone");
    CHECK(nch == 2, "v5 nChannels %d", nch);
    v5->finalize(ctx);
    CHECK(v4->init(2, 2, abi_log, &ctx) == ncclSuccess, "v4 init");
    CHECK(abi_adjusted("v4", ctx, v4->getCollInfo, NULL, &nch), "v4 left LL alone");
    v4->destroy(ctx);
    CHECK(v3->init(2, 2, abi_log, &ctx) == ncclSuccess, "v3 init");
    CHECK(abi_adjusted("v3", ctx, NULL, v3, &nch), "v3 left LL alone");
    v3->destroy(ctx);

    /* One node: ferry carries nothing of it. */
    CHECK(v3->init(8, 1, abi_log, &ctx) == ncclSuccess, "v3 init");
    CHECK(strstr(abi_last_info, "one node") != NULL, "log said: %s", abi_last_info);
    CHECK(!abi_adjusted("one node", ctx, NULL, v3, &nch), "changed a one-node table");
    v3->destroy(ctx);
    /* ...unless P2P and SHM are off: then same-node peers talk through ferry. */
    setenv("NCCL_P2P_DISABLE", "1", 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
    CHECK(v3->init(4, 1, abi_log, &ctx) == ncclSuccess, "v3 init");
    CHECK(abi_adjusted("one node, P2P/SHM off", ctx, NULL, v3, &nch), "left LL alone");
    v3->destroy(ctx);
    unsetenv("NCCL_P2P_DISABLE");
    unsetenv("NCCL_SHM_DISABLE");

    /* NCCL_NET names another net: ferry's lib is loaded but not carrying traffic. */
    setenv("NCCL_NET", "IB", 1);
    CHECK(v4->init(2, 2, abi_log, &ctx) == ncclSuccess, "v4 init");
    CHECK(strstr(abi_last_info, "NCCL_NET=IB selects another net") != NULL, "log said: %s",
          abi_last_info);
    CHECK(!abi_adjusted("NCCL_NET=IB", ctx, v4->getCollInfo, NULL, &nch), "changed");
    v4->destroy(ctx);
    setenv("NCCL_NET", "ferry", 1);
    CHECK(v4->init(2, 2, abi_log, &ctx) == ncclSuccess, "v4 init");
    CHECK(abi_adjusted("NCCL_NET=ferry", ctx, v4->getCollInfo, NULL, &nch), "unchanged");
    v4->destroy(ctx);
    unsetenv("NCCL_NET");

    /* The user's NCCL_MIN_NCHANNELS wins over ferry's channel count... */
    setenv("NCCL_MIN_NCHANNELS", "8", 1);
    CHECK(v5->init(&ctx, 1, 2, 2, abi_log, NULL, NULL) == ncclSuccess, "v5 init");
    CHECK(strstr(abi_last_info, "(off: NCCL_*_NCHANNELS set)") != NULL, "log said: %s",
          abi_last_info);
    CHECK(abi_adjusted("NCCL_MIN_NCHANNELS", ctx, v5->getCollInfo, NULL, &nch), "LL unchanged");
    CHECK(nch == 0, "NCCL_MIN_NCHANNELS set, yet nChannels %d", nch);
    v5->finalize(ctx);
    CHECK(net->finalize(netctx) == ncclSuccess, "net finalize");

    /* ...unless ferry's own NCCL_FERRY_TUNER_CHANNEL_BYTES is set too (read at net init). */
    setenv("NCCL_FERRY_TUNER_CHANNEL_BYTES", "32K", 1);
    CHECK(net->init(&netctx, 1, &cfg, abi_log, NULL) == ncclSuccess, "net init");
    CHECK(v5->init(&ctx, 1, 2, 2, abi_log, NULL, NULL) == ncclSuccess, "v5 init");
    CHECK(strstr(abi_last_info, "one channel per 32768 bytes") != NULL &&
          strstr(abi_last_info, "off:") == NULL, "log said: %s", abi_last_info);
    CHECK(abi_adjusted("both channel settings", ctx, v5->getCollInfo, NULL, &nch), "LL unchanged");
    CHECK(nch == 2, "64 KiB at 32 KiB per channel: nChannels %d, wanted 2", nch);
    v5->finalize(ctx);
    unsetenv("NCCL_MIN_NCHANNELS");
    unsetenv("NCCL_FERRY_TUNER_CHANNEL_BYTES");

    CHECK(net->finalize(netctx) == ncclSuccess, "net finalize");
    CHECK(abi_warns == 0, "%d WARN lines", abi_warns);
    printf("abi_tuner: %s\n", abi_failed ? "FAIL" : "PASS");
    return abi_failed;
}
