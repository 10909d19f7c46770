/*
 * abi_loader: load the plugin the way NCCL does (dlopen RTLD_NOW|RTLD_LOCAL,
 * dlsym ncclNetPlugin_vN) and drive every exported version through its own
 * struct layout: contract of the table, init, devices, properties, a
 * non-blocking listen/connect/accept, a checked transfer, teardown.
 *
 * usage: abi_loader <plugin.so> [version...]   (default: 8 9 10 11 12)
 * Fails on any error and on any WARN line the plugin logs.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi_net.h"

#define ABI_SPIN_MAX  2000 /* Polls of a non-blocking call, 1 ms apart. */
#define ABI_MSG_SIZE  5000 /* A few KiB, deliberately not a power of two. */
#define ABI_RECV_SIZE 8192 /* Receives are posted larger than the send. */
#define ABI_TAG       7
#define ABI_FILL      0xee /* Receive-buffer filler: must survive past the message. */
#define ABI_TIB       (1024UL * 1024 * 1024 * 1024)

static atomic_int abi_warn_count;

/* An ncclDebugLogger_t: counts WARNs, echoes them (and all lines if ABI_VERBOSE). */
static void __attribute__((format(printf, 5, 6)))
abi_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
        const char *fmt, ...)
{
    va_list ap;

    (void)flags;
    if (level == NCCL_LOG_WARN)
        atomic_fetch_add(&abi_warn_count, 1);
    if (level > NCCL_LOG_WARN && getenv("ABI_VERBOSE") == NULL)
        return;
    va_start(ap, fmt);
    fprintf(stderr, "[plugin %s] %s:%d ", level == NCCL_LOG_WARN ? "WARN" : "INFO", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int abi_fail(const abi_net_t *net, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int abi_fail(const abi_net_t *net, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "FAIL v%d: ", net->version);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

#define ABI_EXPECT(_net, _cond)                                                \
    do {                                                                       \
        if (!(_cond))                                                          \
            return abi_fail((_net), "line %d: expected %s", __LINE__, #_cond); \
    } while (0)
#define ABI_OK(_net, _call)                                                    \
    do {                                                                       \
        ncclResult_t res_ = (_call);                                           \
        if (res_ != ncclSuccess)                                               \
            return abi_fail((_net), "line %d: %s returned %d", __LINE__,       \
                            #_call, (int)res_);                                \
    } while (0)

static void abi_sleep_1ms(void)
{
    struct timespec ts = { .tv_sec = 0, .tv_nsec = 1000 * 1000 };

    nanosleep(&ts, NULL);
}

/* A connected pair on device 0, with one registered buffer per side. */
typedef struct abi_pair {
    void         *send_comm;
    void         *recv_comm;
    void         *send_mh;
    void         *recv_mh;
    unsigned char send_buf[ABI_MSG_SIZE];
    unsigned char recv_buf[ABI_RECV_SIZE];
} abi_pair_t;

static int abi_check_props(abi_net_t *net)
{
    abi_props_t p;

    memset(&p, 0, sizeof(p));
    ABI_OK(net, net->get_props(net, 0, &p));
    ABI_EXPECT(net, p.name != NULL);
    ABI_EXPECT(net, p.ptr_support == NCCL_PTR_HOST);
    ABI_EXPECT(net, p.speed > 0);
    ABI_EXPECT(net, p.max_recvs >= 1);
    ABI_EXPECT(net, p.dev_type == NCCL_NET_DEVICE_HOST);
    ABI_EXPECT(net, p.dev_version == NCCL_NET_DEVICE_INVALID_VERSION);
    if (p.has_vprops) {
        ABI_EXPECT(net, p.vprops_ndevs == 1 && p.vprops_dev0 == 0);
        ABI_EXPECT(net, p.max_p2p_bytes > 0 && p.max_p2p_bytes <= ABI_TIB);
    }
    if (p.has_mmr)
        ABI_EXPECT(net, p.max_multi_request == 1);
    if (p.has_rail)
        ABI_EXPECT(net, p.rail_id == NCCL_NET_ID_UNDEF && p.plane_id == NCCL_NET_ID_UNDEF);
    return 0;
}

/* listen, then poll connect and accept, both non-blocking, until both return a comm. */
static int abi_connect_pair(abi_net_t *net, abi_pair_t *pair)
{
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *listen_comm = NULL;

    memset(handle, 0, sizeof(handle));
    ABI_OK(net, net->listen(net, 0, handle, &listen_comm));
    ABI_EXPECT(net, listen_comm != NULL);
    for (int i = 0; i < ABI_SPIN_MAX; i++) {
        /* NCCL re-passes the same handle buffer until connect succeeds. */
        if (pair->send_comm == NULL)
            ABI_OK(net, net->connect(net, 0, handle, &pair->send_comm));
        if (pair->recv_comm == NULL)
            ABI_OK(net, net->accept(listen_comm, &pair->recv_comm, NULL));
        if (pair->send_comm != NULL && pair->recv_comm != NULL)
            break;
        abi_sleep_1ms();
    }
    ABI_EXPECT(net, pair->send_comm != NULL && pair->recv_comm != NULL);
    /* NCCL closes the listener right after a successful accept. */
    ABI_OK(net, net->close_listen(listen_comm));
    ABI_OK(net, net->reg_mr(pair->send_comm, pair->send_buf, sizeof(pair->send_buf),
                            NCCL_PTR_HOST, &pair->send_mh));
    ABI_OK(net, net->reg_mr(pair->recv_comm, pair->recv_buf, sizeof(pair->recv_buf),
                            NCCL_PTR_HOST, &pair->recv_mh));
    return 0;
}

/* Post an irecv (with the optional-completion hint where the version has it) and an isend. */
static int abi_post(abi_net_t *net, abi_pair_t *pair, size_t size, void **sreq, void **rreq)
{
    for (int i = 0; i < ABI_SPIN_MAX && (*sreq == NULL || *rreq == NULL); i++) {
        if (*rreq == NULL) {
            void *hint = (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION;

            *rreq = net->recv_hint ? hint : NULL;
            ABI_OK(net, net->irecv(net, pair->recv_comm, pair->recv_buf, ABI_RECV_SIZE,
                                   ABI_TAG, pair->recv_mh, rreq));
            /* The plugin must replace the hint with a request or NULL. */
            ABI_EXPECT(net, *rreq != hint);
        }
        if (*sreq == NULL)
            ABI_OK(net, net->isend(net, pair->send_comm, pair->send_buf, size, ABI_TAG,
                                   pair->send_mh, sreq));
        if (*sreq == NULL || *rreq == NULL)
            abi_sleep_1ms();
    }
    ABI_EXPECT(net, *sreq != NULL && *rreq != NULL);
    return 0;
}

/* One message of size bytes: the receiver must see the bytes and the real size. */
static int abi_transfer(abi_net_t *net, abi_pair_t *pair, size_t size)
{
    void *sreq = NULL, *rreq = NULL;
    int sdone = 0, rdone = 0, rsize = -1;

    for (size_t i = 0; i < size; i++)
        pair->send_buf[i] = (unsigned char)(i * 31 + (size_t)net->version);
    memset(pair->recv_buf, ABI_FILL, sizeof(pair->recv_buf));
    if (abi_post(net, pair, size, &sreq, &rreq) != 0)
        return -1;
    for (int i = 0; i < ABI_SPIN_MAX && !(sdone && rdone); i++) {
        /* NCCL tests sends (and flushes) with sizes == NULL. */
        if (!sdone)
            ABI_OK(net, net->test(sreq, &sdone, NULL));
        if (!rdone)
            ABI_OK(net, net->test(rreq, &rdone, &rsize));
        if (!(sdone && rdone))
            abi_sleep_1ms();
    }
    ABI_EXPECT(net, sdone && rdone);
    ABI_EXPECT(net, rsize == (int)size);
    ABI_EXPECT(net, memcmp(pair->recv_buf, pair->send_buf, size) == 0);
    for (size_t i = size; i < sizeof(pair->recv_buf); i++)
        ABI_EXPECT(net, pair->recv_buf[i] == ABI_FILL);
    return 0;
}

static int abi_close_pair(abi_net_t *net, abi_pair_t *pair)
{
    ABI_OK(net, net->dereg_mr(pair->send_comm, pair->send_mh));
    ABI_OK(net, net->dereg_mr(pair->recv_comm, pair->recv_mh));
    ABI_OK(net, net->close_send(pair->send_comm));
    ABI_OK(net, net->close_recv(pair->recv_comm));
    return 0;
}

static int abi_run(abi_net_t *net)
{
    static abi_pair_t pair; /* Static: 13 KiB of buffers. */
    const char *bad = net->bad_member(net);
    int ndev = 0;

    ABI_EXPECT(net, net->name != NULL && strcmp(net->name, "ferry") == 0);
    if (bad != NULL)
        return abi_fail(net, "member %s breaks the contract", bad);
    ABI_OK(net, net->init(net, abi_log));
    ABI_OK(net, net->devices(&ndev));
    ABI_EXPECT(net, ndev > 0);
    if (abi_check_props(net) != 0)
        return -1;
    memset(&pair, 0, sizeof(pair));
    if (abi_connect_pair(net, &pair) != 0 || abi_transfer(net, &pair, ABI_MSG_SIZE) != 0)
        return -1;
    /* A zero-byte send still completes, and the receiver reports 0. */
    if (abi_transfer(net, &pair, 0) != 0 || abi_close_pair(net, &pair) != 0)
        return -1;
    if (net->finalize != NULL)
        ABI_OK(net, net->finalize(net));
    return 0;
}

static int abi_wanted(int argc, char **argv, int version)
{
    if (argc <= 2)
        return 1;
    for (int i = 2; i < argc; i++)
        if (atoi(argv[i]) == version)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        int version;
        int (*bind)(abi_net_t *net, void *lib);
    } versions[] = {
        { 8, abi_bind_v8 }, { 9, abi_bind_v9 }, { 10, abi_bind_v10 },
        { 11, abi_bind_v11 }, { 12, abi_bind_v12 },
    };
    int failed = 0;
    void *lib;

    if (argc < 2) {
        fprintf(stderr, "usage: %s <plugin.so> [version...]\n", argv[0]);
        return 2;
    }
    /* ctest sets this; the default keeps a manual run on loopback too. */
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "FAIL: dlopen(%s): %s\n", argv[1], dlerror());
        return 1;
    }
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
        abi_net_t net = { .version = versions[i].version };

        if (!abi_wanted(argc, argv, versions[i].version))
            continue;
        if (versions[i].bind(&net, lib) != 0) {
            abi_fail(&net, "dlsym(ncclNetPlugin_v%d) found nothing", net.version);
            failed++;
        } else if (abi_run(&net) != 0) {
            failed++;
        } else {
            printf("PASS v%d\n", net.version);
        }
    }
    /* NCCL dlclose()s the plugin after its last finalize; that must be safe. */
    if (dlclose(lib) != 0) {
        fprintf(stderr, "FAIL: dlclose: %s\n", dlerror());
        failed++;
    }
    if (atomic_load(&abi_warn_count) != 0) {
        fprintf(stderr, "FAIL: the plugin logged %d WARN line(s)\n", atomic_load(&abi_warn_count));
        failed++;
    }
    return failed != 0 ? 1 : 0;
}
