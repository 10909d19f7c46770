/*
 * fakeibv configuration: every FAKEIBV_* environment variable is read here,
 * once, into a const struct. The README lists the same table for users.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fakeibv_internal.h"

static struct fakeibv_config fakeibv_cfg;
static pthread_once_t fakeibv_cfg_once = PTHREAD_ONCE_INIT;

static long fakeibv_env_long(const char *name, long def, long lo, long hi)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (s == NULL || *s == '\0')
        return def;
    errno = 0;
    v = strtol(s, &end, 0);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "fakeibv: %s=%s is not an integer in [%ld, %ld]; using %ld\n",
                name, s, lo, hi, def);
        return def;
    }
    return v;
}

/* Speed names as ibv_devinfo prints them, mapped to active_speed codes. */
static uint8_t fakeibv_env_speed(void)
{
    static const struct { const char *name; uint8_t code; } speeds[] = {
        { "SDR", 1 }, { "DDR", 2 }, { "QDR", 4 }, { "FDR10", 8 }, { "FDR", 16 },
        { "EDR", 32 }, { "HDR", 64 }, { "NDR", 128 },
    };
    const char *s = getenv("FAKEIBV_SPEED");
    size_t i;

    if (s == NULL || *s == '\0')
        return 64; /* HDR: 50 Gb/s per lane. */
    for (i = 0; i < sizeof(speeds) / sizeof(speeds[0]); i++)
        if (strcasecmp(s, speeds[i].name) == 0)
            return speeds[i].code;
    return (uint8_t)fakeibv_env_long("FAKEIBV_SPEED", 64, 1, 128);
}

/* Width is given as lanes (1, 2, 4, 8, 12) and stored as the verbs code. */
static uint8_t fakeibv_env_width(void)
{
    switch (fakeibv_env_long("FAKEIBV_WIDTH", 4, 1, 12)) {
    case 1: return 1;
    case 8: return 4;
    case 12: return 8;
    case 2: return 16;
    case 4:
    default: return 2;
    }
}

static enum ibv_mtu fakeibv_env_mtu(void)
{
    switch (fakeibv_env_long("FAKEIBV_MTU", 4096, 256, 4096)) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default:
        fprintf(stderr, "fakeibv: FAKEIBV_MTU must be 256, 512, 1024, 2048 or 4096; using 4096\n");
        return IBV_MTU_4096;
    }
}

/* A non-empty string variable, copied; NULL when unset or empty. */
static const char *fakeibv_env_str(const char *name)
{
    const char *s = getenv(name);

    return s != NULL && *s != '\0' ? strdup(s) : NULL;
}

/* Paths are kept absolute: the sysfs tree links to itself by absolute
 * names, and a relative fabric dir would differ between processes. */
static const char *fakeibv_env_path(const char *name)
{
    const char *s = getenv(name);
    char cwd[PATH_MAX], *abs;

    if (s == NULL || *s == '\0')
        return NULL;
    if (s[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
        abs = strdup(s);
    else if (asprintf(&abs, "%s/%s", cwd, s) < 0)
        abs = NULL;
    if (abs != NULL) {
        size_t n = strlen(abs);

        while (n > 1 && abs[n - 1] == '/')
            abs[--n] = '\0';
    }
    return abs;
}

/* A byte count with an optional K, M or G suffix (powers of 1024). */
static uint64_t fakeibv_env_size(const char *name, uint64_t def)
{
    const char *s = getenv(name);
    char *end;
    unsigned long long v;

    if (s == NULL || *s == '\0')
        return def;
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno == 0 && (*end == 'k' || *end == 'K'))
        v <<= 10, end++;
    else if (errno == 0 && (*end == 'm' || *end == 'M'))
        v <<= 20, end++;
    else if (errno == 0 && (*end == 'g' || *end == 'G'))
        v <<= 30, end++;
    if (errno != 0 || *end != '\0' || s[0] == '-') {
        fprintf(stderr, "fakeibv: %s=%s is not a byte count (e.g. 65536, 64K, 1M); using %llu\n",
                name, s, (unsigned long long)def);
        return def;
    }
    return v;
}

static void fakeibv_config_load(void)
{
    struct fakeibv_config *c = &fakeibv_cfg;
    const char *link = getenv("FAKEIBV_LINK");

    c->ndev = (int)fakeibv_env_long("FAKEIBV_NDEV", 1, 0, FAKEIBV_MAX_DEVS);
    c->nports = (int)fakeibv_env_long("FAKEIBV_NPORTS", 1, 1, FAKEIBV_MAX_PORTS);
    c->link_layer = IBV_LINK_LAYER_INFINIBAND;
    if (link != NULL && (strcasecmp(link, "eth") == 0 || strcasecmp(link, "ethernet") == 0 ||
                         strcasecmp(link, "roce") == 0))
        c->link_layer = IBV_LINK_LAYER_ETHERNET;
    else if (link != NULL && *link != '\0' && strcasecmp(link, "ib") != 0 &&
             strcasecmp(link, "infiniband") != 0)
        fprintf(stderr, "fakeibv: FAKEIBV_LINK=%s unknown (use ib or eth); using ib\n", link);
    c->active_speed = fakeibv_env_speed();
    c->active_width = fakeibv_env_width();
    c->mtu = fakeibv_env_mtu();
    c->max_qp_wr = (uint32_t)fakeibv_env_long("FAKEIBV_MAX_QP_WR", 32768, 16, 1 << 20);
    c->max_cqe = (uint32_t)fakeibv_env_long("FAKEIBV_MAX_CQE", 1 << 22, 16, 1 << 24);
    c->max_qp = (uint32_t)fakeibv_env_long("FAKEIBV_MAX_QP", 4096, 1, 1 << 20);
    c->max_mr = (uint32_t)fakeibv_env_long("FAKEIBV_MAX_MR", 1 << 16, 1, 1 << 22);
    c->max_inline = (uint32_t)fakeibv_env_long("FAKEIBV_MAX_INLINE", 512, 0, 4096);
    c->max_mr_size = (uint64_t)fakeibv_env_long("FAKEIBV_MAX_MR_SIZE", 1L << 40, 4096, 1L << 50);
    c->retry_timeout_ms = fakeibv_env_long("FAKEIBV_RETRY_TIMEOUT_MS", -1, -1, 3600 * 1000L);
    c->rnr_timeout_ms = fakeibv_env_long("FAKEIBV_RNR_TIMEOUT_MS", -1, -1, 3600 * 1000L);
    c->debug = (int)fakeibv_env_long("FAKEIBV_DEBUG", 0, 0, 2);
    c->dmabuf = (int)fakeibv_env_long("FAKEIBV_DMABUF", 1, 0, 1);
    c->cuda = (int)fakeibv_env_long("FAKEIBV_CUDA", 1, 0, 1);
    {
        const char *ctx = getenv("FAKEIBV_CUDA_CTX");

        c->cuda_own_ctx = 1;
        if (ctx != NULL && strcmp(ctx, "primary") == 0)
            c->cuda_own_ctx = 0;
        else if (ctx != NULL && *ctx != '\0' && strcmp(ctx, "own") != 0)
            fprintf(stderr, "fakeibv: FAKEIBV_CUDA_CTX=%s unknown (use own or primary); using own\n",
                    ctx);
    }
    c->one_copy = (int)fakeibv_env_long("FAKEIBV_ONE_COPY", 1, 0, 1);
    c->one_copy_min = fakeibv_env_size("FAKEIBV_ONE_COPY_MIN", 64 << 10);
    {
        /* A real HCA's limit is 2^31; a lower one lets tests split messages cheaply. */
        uint64_t m = fakeibv_env_size("FAKEIBV_MAX_MSG_SZ", 0x80000000ull);

        if (m < 1 || m > 0x80000000ull) {
            fprintf(stderr, "fakeibv: FAKEIBV_MAX_MSG_SZ=%llu is outside 1..2G; using 2G\n",
                    (unsigned long long)m);
            m = 0x80000000ull;
        }
        c->max_msg_sz = (uint32_t)m;
    }
    c->direct = (int)fakeibv_env_long("FAKEIBV_DIRECT", 1, 0, 1);
    c->null_payload = (int)fakeibv_env_long("FAKEIBV_NULL_PAYLOAD", 0, 0, 1);
    /*
     * Null-payload mode must still deliver what a plugin reads itself: its
     * control writes. The largest are the clear-to-send FIFO writes of a
     * grouped receive, 8 entries of 64 bytes in one RDMA WRITE, in ferry
     * (ferry_ib_cts_t x FERRY_IB_MAX_RECVS) and in NCCL's IB transport
     * (ncclIbSendFifo x NCCL_NET_IB_MAX_RECVS) alike: 512 bytes. The sizes
     * FIFO writes (4 bytes per receive) and the 1-byte flush READ are
     * smaller. 4 KiB leaves those an 8x margin and is still below the
     * sizes a bandwidth or message-rate comparison cares about.
     */
    c->null_payload_min = fakeibv_env_size("FAKEIBV_NULL_PAYLOAD_MIN", 4096);
    c->test_ack_lag_us = fakeibv_env_long("FAKEIBV_TEST_ACK_LAG_US", 0, 0, 1000000);
    c->spin_us = fakeibv_env_long("FAKEIBV_SPIN_US", 0, 0, 100000);
    if (c->null_payload_min == 0)
        c->null_payload_min = 1;
    /* One-copy mode: the peer's responder thread reads this process's
     * memory with process_vm_readv(2). Under Yama ptrace_scope 1 only an
     * ancestor may do that unless the target names a ptracer, so name any
     * (EINVAL without Yama: nothing to do). The connect-time probe finds
     * out whether it worked; streaming is the fallback. */
    if (c->one_copy)
        (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    c->sysfs_root = fakeibv_env_path("FAKEIBV_SYSFS_ROOT");
    c->fabric_dir = fakeibv_env_path("FAKEIBV_FABRIC_DIR");
    c->netdev = fakeibv_env_str("FAKEIBV_NETDEV");
    if (c->netdev != NULL && c->link_layer != IBV_LINK_LAYER_ETHERNET) {
        fprintf(stderr, "fakeibv: FAKEIBV_NETDEV=%s needs FAKEIBV_LINK=eth; ignored\n", c->netdev);
        c->netdev = NULL;
    }
}

const struct fakeibv_config *fakeibv_config(void)
{
    pthread_once(&fakeibv_cfg_once, fakeibv_config_load);
    return &fakeibv_cfg;
}

/* Warnings always print: a test double that fails silently wastes hours. */
void fakeibv_log(int level, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    if (level > fakeibv_config()->debug)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakeibv[%d]: %s\n", (int)getpid(), buf);
}

int fakeibv_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t a;
    int rc;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cond, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

struct fakeibv_thread_arg {
    void *(*fn)(void *);
    void *arg;
    char name[16];
};

static void *fakeibv_thread_main(void *p)
{
    struct fakeibv_thread_arg a = *(struct fakeibv_thread_arg *)p;

    free(p);
    pthread_setname_np(pthread_self(), a.name);
    return a.fn(a.arg);
}

/* Starts a named thread with every signal blocked: a real libibverbs has
 * no threads, so the consumer's signals must land on its own threads. */
int fakeibv_thread_start(pthread_t *thr, const char *name, void *(*fn)(void *), void *arg)
{
    struct fakeibv_thread_arg *a = malloc(sizeof(*a));
    char copy[sizeof(a->name)];
    sigset_t all, old;
    int rc;

    if (a == NULL)
        return ENOMEM;
    a->fn = fn;
    a->arg = arg;
    snprintf(a->name, sizeof(a->name), "%s", name);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    snprintf(copy, sizeof(copy), "%s", name);
    rc = pthread_create(thr, NULL, fakeibv_thread_main, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        free(a);
        return rc;
    }
    /* Named here too: a thread not yet scheduled would otherwise show its
     * creator's name in /proc/<pid>/task/ (test_fakeibv_sysfs counts the
     * threads right after a transfer; on a loaded 2-core box the QP's tx
     * thread may not have run yet). The thread's own call covers the
     * threads whose creator is not the one looking. */
    pthread_setname_np(*thr, copy);
    return 0;
}
