/*
 * fakeibv unit tests, what a client sees of the host besides the verbs:
 * the sysfs tree behind ibdev_path / ibv_get_sysfs_path(), and the threads
 * fakeibv runs. ctest runs this binary twice with 2 devices x 2 ports:
 *   fakeibv_unit_sysfs_ib:  FAKEIBV_LINK=ib, FAKEIBV_SPEED=EDR, FAKEIBV_WIDTH=1,
 *                           default (per-process) root
 *   fakeibv_unit_sysfs_eth: FAKEIBV_LINK=eth, FAKEIBV_SYSFS_ROOT=<build dir>
 * Checks: the device link resolves to a fake PCI function, numa_node and
 * the other files read back what the verbs report (GIDs and their types
 * for every index, LIDs, GUIDs, rate, link layer, port state), several
 * processes starting at once share an explicit root or get their own
 * default one (removed at exit, stale ones swept), and no fakeibv thread
 * runs until a QP is connected.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

extern char **environ;

static struct fx fxd[2]; /* The two emulated devices. */
static int eth;
static const char *self_exe;

/* Reads a whole small file without its trailing newline; "" if absent. */
static __attribute__((format(printf, 1, 2))) const char *slurp(const char *fmt, ...)
{
    static char buf[4][256];
    static int k;
    char path[PATH_MAX], *out = buf[k++ % 4];
    va_list ap;
    ssize_t n;
    int fd;

    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    out[0] = '\0';
    fd = open(path, O_RDONLY);
    if (fd < 0)
        return out;
    n = read(fd, out, 255);
    close(fd);
    if (n < 0)
        n = 0;
    out[n] = '\0';
    if (n > 0 && out[n - 1] == '\n')
        out[n - 1] = '\0';
    return out;
}

static int __attribute__((format(printf, 1, 2)))
exists(const char *fmt, ...)
{
    char path[PATH_MAX];
    struct stat st;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    return lstat(path, &st) == 0;
}

static int setup(void **state)
{
    int i;
    const char *link = getenv("FAKEIBV_LINK");

    eth = link != NULL && strcmp(link, "eth") == 0;
    for (i = 0; i < 2; i++)
        if (fx_open_index(&fxd[i], i, 2, 64) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    int i;

    for (i = 0; i < 2; i++)
        fx_close(&fxd[i]);
    return 0;
}

/* ---- threads ----------------------------------------------------------- */

/* Counts this process's threads, and those whose name starts "fakeibv-". */
static int count_threads(int *fake)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    *fake = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
        const char *comm;

        if (e->d_name[0] == '.')
            continue;
        comm = slurp("/proc/self/task/%s/comm", e->d_name);
        /* No comm to read: the thread exited between readdir and here (a QP
         * thread on its way out); it is not running any more. */
        if (comm[0] == '\0')
            continue;
        n++;
        if (strncmp(comm, "fakeibv-", 8) == 0)
            (*fake)++;
        else if (atoi(e->d_name) != (int)getpid())
            print_message("thread %s is not fakeibv's: '%s'\n", e->d_name, comm);
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* Waits (2 s at most) until no fakeibv thread is left; returns the count
 * of all threads then. */
static int wait_no_fake_threads(void)
{
    struct timespec t0, nap = { 0, 5 * 1000000 };
    int n, fake;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    while ((n = count_threads(&fake)) > 0 && fake > 0 && fx_ms_since(&t0) < 2000)
        nanosleep(&nap, NULL);
    return fake == 0 ? n : -1;
}

/* RESET -> RTS on port 1 of fxd[0].ctx, addressed by GID 0 of the same port (a
 * GRH works on both link layers). */
static int connect_grh(struct ibv_qp *qp, uint32_t dqpn)
{
    struct ibv_qp_attr a;
    int rc = fx_to_init(qp, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

    if (rc != 0)
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.hop_limit = 64;
    if (ibv_query_gid(fxd[0].ctx, 1, 0, &a.ah_attr.grh.dgid) != 0)
        return -1;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER);
    return rc != 0 ? rc : fx_to_rts(qp, 14, 7, 7);
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
static const int exact = 0;
#else
static const int exact = 1;
#endif

static void test_no_thread_until_connected(void **state)
{
    struct fx f = { .ctx = fxd[0].ctx, .pd = fxd[0].pd, .cq = fxd[0].cq };
    static char src[4096], dst[4096];
    struct ibv_mr *smr, *dmr;
    struct ibv_qp *a, *b;
    struct ibv_wc wc;
    int base, fake, n;

    /* Devices open, a PD, a CQ, an MR, QPs in RESET and INIT: no thread.
     * A sanitizer starts a thread of its own with the first thread the
     * process creates: then only the named threads are counted. */
    base = count_threads(&fake);
    assert_int_equal(fake, 0);
    if (exact)
        assert_int_equal(base, 1);
    smr = ibv_reg_mr(fxd[0].pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
    dmr = ibv_reg_mr(fxd[0].pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    a = fx_qp(&f, 8, 0);
    b = fx_qp(&f, 8, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(fx_to_init(a, IBV_ACCESS_REMOTE_WRITE), 0);
    n = count_threads(&fake);
    assert_int_equal(fake, 0);
    if (exact)
        assert_int_equal(n, 1);
    /* Back to RESET and INIT again: still none. */
    {
        struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };

        assert_int_equal(ibv_modify_qp(a, &r, IBV_QP_STATE), 0);
    }
    count_threads(&fake);
    assert_int_equal(fake, 0);

    /* Connected: the NIC-modelling threads appear, all named fakeibv-*. */
    assert_int_equal(connect_grh(a, b->qp_num), 0);
    assert_int_equal(connect_grh(b, a->qp_num), 0);
    memset(src, 0x5a, sizeof(src));
    assert_int_equal(fx_write(a, 1, IBV_WR_RDMA_WRITE, src, sizeof(src), smr->lkey,
                              (uintptr_t)dst, dmr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(fxd[0].cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(src, dst, sizeof(src));
    n = count_threads(&fake);
    assert_true(fake > 0);
    if (exact)
        assert_int_equal(n, 1 + fake); /* No unnamed thread of ours. */
    /* One QP gone: the other's threads (and the accept thread) stay. */
    assert_int_equal(ibv_destroy_qp(a), 0);
    count_threads(&fake);
    assert_true(fake > 0);
    /* The last connected QP gone: every fakeibv thread has exited. */
    assert_int_equal(ibv_destroy_qp(b), 0);
    n = wait_no_fake_threads();
    assert_true(n > 0);
    if (exact)
        assert_int_equal(n, 1);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
}

/* ---- the tree ------------------------------------------------------------ */

static void test_root_and_paths(void **state)
{
    const char *root = ibv_get_sysfs_path();
    const char *env = getenv("FAKEIBV_SYSFS_ROOT");
    char want[PATH_MAX], real_root[PATH_MAX], path[PATH_MAX + 64], buf[64];
    char *pci[2];
    int i;

    assert_non_null(root);
    if (env != NULL && *env != '\0') {
        assert_string_equal(root, env);
    } else {
        snprintf(want, sizeof(want), "/tmp/fakeibv-sysfs-%u/%d", (unsigned)getuid(),
                 (int)getpid());
        assert_string_equal(root, want);
    }
    assert_non_null(realpath(root, real_root));
    for (i = 0; i < 2; i++) {
        struct ibv_device *dev = fxd[i].ctx->device;
        ssize_t n;

        snprintf(want, sizeof(want), "%s/class/infiniband/fakeib%d", root, i);
        assert_string_equal(dev->ibdev_path, want);
        snprintf(want, sizeof(want), "%s/class/infiniband_verbs/uverbs%d", root, i);
        assert_string_equal(dev->dev_path, want);
        snprintf(want, sizeof(want), "uverbs%d", i);
        assert_string_equal(dev->dev_name, want);
        assert_string_equal(slurp("%s/ibdev", dev->dev_path), dev->name);
        /* class/infiniband/<dev> is an absolute link into devices/. */
        n = readlink(dev->ibdev_path, path, sizeof(path) - 1);
        assert_true(n > 0);
        path[n] = '\0';
        assert_int_equal(path[0], '/');
        /* device: a relative link to the PCI function, as in sysfs. */
        snprintf(want, sizeof(want), "%s/device", dev->ibdev_path);
        n = readlink(want, buf, sizeof(buf) - 1);
        assert_true(n > 0);
        buf[n] = '\0';
        /* A bus per device, device and function 0: NCCL's pciPath (function
         * and, with NCCL_IB_MERGE_VFS, device digits zeroed) is this path. */
        snprintf(path, sizeof(path), "../../../0000:%02x:00.0", 0xf0 + i);
        assert_string_equal(buf, path);
        pci[i] = realpath(want, NULL);
        assert_non_null(pci[i]);
        snprintf(path, sizeof(path), "%s/devices/pci0000:00/0000:%02x:00.0", real_root, 0xf0 + i);
        assert_string_equal(pci[i], path);
        assert_string_equal(slurp("%s/numa_node", pci[i]), "0");
        assert_string_equal(slurp("%s/device/numa_node", dev->ibdev_path), "0");
        assert_string_equal(slurp("%s/vendor", pci[i]), "0xfa4e");
        assert_string_equal(slurp("%s/class", pci[i]), eth ? "0x020000" : "0x020700");
        /* subsystem: a relative link to <root>/bus/pci, as in sysfs; NCCL's
         * topology code takes the function for a PCI device only if its
         * realpath ends in "/pci". */
        snprintf(want, sizeof(want), "%s/subsystem", pci[i]);
        n = readlink(want, buf, sizeof(buf) - 1);
        assert_true(n > 0);
        buf[n] = '\0';
        assert_string_equal(buf, "../../../bus/pci");
        {
            char *p = realpath(want, NULL);

            assert_non_null(p);
            snprintf(path, sizeof(path), "%s/bus/pci", real_root);
            assert_string_equal(p, path);
            free(p);
        }
        /* uverbs device points at the same function. */
        snprintf(want, sizeof(want), "%s/device", dev->dev_path);
        {
            char *p = realpath(want, NULL);

            assert_non_null(p);
            assert_string_equal(p, pci[i]);
            free(p);
        }
        /* Both ports hang off the one PCI function. */
        assert_true(exists("%s/ports/1/rate", dev->ibdev_path));
        assert_true(exists("%s/ports/2/rate", dev->ibdev_path));
        assert_false(exists("%s/ports/3", dev->ibdev_path));
    }
    assert_string_not_equal(pci[0], pci[1]);
    free(pci[0]);
    free(pci[1]);
    assert_string_equal(slurp("%s/class/infiniband_verbs/abi_version", root), "6");
}

static const char *expected_rate(const struct ibv_port_attr *pa)
{
    static char buf[64];
    const char *name;
    int rate, lanes;

    switch (pa->active_speed) {
    case 2: rate = 50; name = " DDR"; break;
    case 4: rate = 100; name = " QDR"; break;
    case 8: rate = 100; name = " FDR10"; break;
    case 16: rate = 140; name = " FDR"; break;
    case 32: rate = 250; name = " EDR"; break;
    case 64: rate = 500; name = " HDR"; break;
    case 128: rate = 1000; name = " NDR"; break;
    default: rate = 25; name = " SDR"; break;
    }
    lanes = pa->active_width == 1 ? 1 : pa->active_width == 2 ? 4 : pa->active_width == 4 ? 8
          : pa->active_width == 8 ? 12 : 2;
    rate *= lanes;
    snprintf(buf, sizeof(buf), "%d%s Gb/sec (%dX%s)", rate / 10, rate % 10 ? ".5" : "", lanes,
             name);
    return buf;
}

static void test_port_files_match_verbs(void **state)
{
    int d, p, i;

    for (d = 0; d < 2; d++) {
        const char *ib = fxd[d].ctx->device->ibdev_path;

        for (p = 1; p <= 2; p++) {
            struct ibv_port_attr pa;
            char want[64];

            assert_int_equal(ibv_query_port(fxd[d].ctx, p, &pa), 0);
            assert_string_equal(slurp("%s/ports/%d/link_layer", ib, p),
                                eth ? "Ethernet" : "InfiniBand");
            assert_int_equal(pa.link_layer, eth ? IBV_LINK_LAYER_ETHERNET
                                                : IBV_LINK_LAYER_INFINIBAND);
            assert_string_equal(slurp("%s/ports/%d/rate", ib, p), expected_rate(&pa));
            snprintf(want, sizeof(want), "0x%x", pa.lid);
            assert_string_equal(slurp("%s/ports/%d/lid", ib, p), want);
            if (!eth)
                assert_int_equal(pa.lid, fakeibv_port_lid(fxd[d].ctx, p));
            assert_string_equal(slurp("%s/ports/%d/state", ib, p), "4: ACTIVE");
            assert_string_equal(slurp("%s/ports/%d/phys_state", ib, p), "5: LinkUp");
            assert_string_equal(slurp("%s/ports/%d/pkeys/0", ib, p), "0xffff");
            assert_int_equal(pa.gid_tbl_len, eth ? 4 : 1);
            /* Every GID index: the type and value that verbs report. */
            for (i = 0; i < pa.gid_tbl_len; i++) {
                struct ibv_gid_entry ge;
                const uint8_t *r = ge.gid.raw;
                char gid[64];

                assert_int_equal(ibv_query_gid_ex(fxd[d].ctx, p, i, &ge, 0), 0);
                assert_string_equal(slurp("%s/ports/%d/gid_attrs/types/%d", ib, p, i),
                                    ge.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2"
                                                                        : "IB/RoCE v1");
                if (eth)
                    assert_int_equal(ge.gid_type, (i & 1) ? IBV_GID_TYPE_ROCE_V2
                                                          : IBV_GID_TYPE_ROCE_V1);
                else
                    assert_int_equal(ge.gid_type, IBV_GID_TYPE_IB);
                snprintf(gid, sizeof(gid),
                         "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                         r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
                         r[12], r[13], r[14], r[15]);
                assert_string_equal(slurp("%s/ports/%d/gids/%d", ib, p, i), gid);
                if (eth) {
                    /* No FAKEIBV_NETDEV: the GIDs are loopback ones, on lo. */
                    assert_string_equal(slurp("%s/ports/%d/gid_attrs/ndevs/%d", ib, p, i), "lo");
                    assert_int_equal(ge.ndev_ifindex, if_nametoindex("lo"));
                } else {
                    assert_false(exists("%s/ports/%d/gid_attrs/ndevs/%d", ib, p, i));
                    assert_int_equal(ge.ndev_ifindex, 0);
                }
            }
            /* Nothing past the table. */
            assert_false(exists("%s/ports/%d/gid_attrs/types/%d", ib, p, pa.gid_tbl_len));
            assert_false(exists("%s/ports/%d/gids/%d", ib, p, pa.gid_tbl_len));
        }
    }
}

static void test_guid_files(void **state)
{
    int d;

    for (d = 0; d < 2; d++) {
        struct ibv_device_attr da;
        uint64_t g = be64toh(ibv_get_device_guid(fxd[d].ctx->device));
        char want[32], buf[64];

        snprintf(want, sizeof(want), "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
                 (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff,
                 (unsigned)g & 0xffff);
        /* Through rdma-core's own helper: no trailing newline, length back. */
        assert_int_equal(ibv_read_sysfs_file(fxd[d].ctx->device->ibdev_path, "node_guid", buf,
                                             sizeof(buf)),
                         (int)strlen(want));
        assert_string_equal(buf, want);
        assert_int_equal(ibv_query_device(fxd[d].ctx, &da), 0);
        g = be64toh(da.sys_image_guid);
        snprintf(want, sizeof(want), "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
                 (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff,
                 (unsigned)g & 0xffff);
        assert_string_equal(slurp("%s/sys_image_guid", fxd[d].ctx->device->ibdev_path), want);
        assert_string_equal(slurp("%s/node_type", fxd[d].ctx->device->ibdev_path), "1: CA");
        assert_string_equal(slurp("%s/fw_ver", fxd[d].ctx->device->ibdev_path), da.fw_ver);
        assert_int_equal(ibv_read_sysfs_file(fxd[d].ctx->device->ibdev_path, "no_such_file", buf,
                                             sizeof(buf)),
                         -1);
    }
    assert_string_not_equal(slurp("%s/node_guid", fxd[0].ctx->device->ibdev_path),
                            slurp("%s/node_guid", fxd[1].ctx->device->ibdev_path));
}

static void test_port_state_follows_injection(void **state)
{
    const char *ib = fxd[1].ctx->device->ibdev_path;
    struct ibv_async_event ev;

    assert_int_equal(fakeibv_inject(fxd[1].ctx, FAKEIBV_FAULT_PORT_ERR, 2, 0, 0, 0), 0);
    assert_string_equal(slurp("%s/ports/2/state", ib), "1: DOWN");
    assert_string_equal(slurp("%s/ports/2/phys_state", ib), "3: Disabled");
    assert_string_equal(slurp("%s/ports/1/state", ib), "4: ACTIVE");
    assert_int_equal(ibv_get_async_event(fxd[1].ctx, &ev), 0);
    ibv_ack_async_event(&ev);
    assert_int_equal(fakeibv_inject(fxd[1].ctx, FAKEIBV_FAULT_PORT_ACTIVE, 2, 0, 0, 0), 0);
    assert_string_equal(slurp("%s/ports/2/state", ib), "4: ACTIVE");
    assert_int_equal(ibv_get_async_event(fxd[1].ctx, &ev), 0);
    ibv_ack_async_event(&ev);
}

/* ---- several processes at once --------------------------------------------- */

/* Child (also test/with_sysfs_check.sh's way to make a tree): list the
 * devices, check the tree, report "ok <root>", then stay alive until stdin
 * closes so that all children overlap. */
static int child_main(void)
{
    struct ibv_device **list;
    char line[16];
    int n = 0, i;

    list = ibv_get_device_list(&n);
    if (list == NULL || n < 1)
        return 2;
    for (i = 0; i < n; i++) {
        char path[PATH_MAX], *pci;

        snprintf(path, sizeof(path), "%s/device", list[i]->ibdev_path);
        pci = realpath(path, NULL);
        if (pci == NULL || strstr(pci, "/devices/pci0000:00/0000:f") == NULL)
            return 3;
        free(pci);
        if (slurp("%s/ports/1/gid_attrs/types/0", list[i]->ibdev_path)[0] == '\0')
            return 4;
    }
    printf("ok %s\n", ibv_get_sysfs_path());
    fflush(stdout);
    ibv_free_device_list(list);
    while (fgets(line, sizeof(line), stdin) != NULL)
        ;
    return 0;
}

#define NCHILD 4

/* Starts NCHILD children with `root` as FAKEIBV_SYSFS_ROOT (NULL: unset),
 * collects their roots, lets them go and checks they all exit 0. */
static void run_children(const char *root, char roots[NCHILD][PATH_MAX])
{
    int in[2], out[2], i, got = 0;
    pid_t pid[NCHILD];
    char *argv[] = { (char *)self_exe, (char *)"--child", NULL };
    char **env;
    size_t ne = 0, k = 0;
    char rootvar[PATH_MAX + 32], acc[4096];
    size_t acc_len = 0;
    struct timespec t0;

    for (ne = 0; environ[ne] != NULL; ne++)
        ;
    env = calloc(ne + 2, sizeof(*env));
    assert_non_null(env);
    for (i = 0; environ[i] != NULL; i++)
        if (strncmp(environ[i], "FAKEIBV_SYSFS_ROOT=", 19) != 0)
            env[k++] = environ[i];
    if (root != NULL) {
        snprintf(rootvar, sizeof(rootvar), "FAKEIBV_SYSFS_ROOT=%s", root);
        env[k++] = rootvar;
    }
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(out), 0);
    for (i = 0; i < NCHILD; i++) {
        posix_spawn_file_actions_t fa;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        posix_spawn_file_actions_addclose(&fa, in[1]);
        posix_spawn_file_actions_addclose(&fa, out[0]);
        assert_int_equal(posix_spawn(&pid[i], self_exe, &fa, NULL, argv, env), 0);
        posix_spawn_file_actions_destroy(&fa);
    }
    close(in[0]);
    close(out[1]);
    /* Read NCHILD "ok <root>" lines, 20 s at most. */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (got < NCHILD && fx_ms_since(&t0) < 20000) {
        struct pollfd pfd = { .fd = out[0], .events = POLLIN };
        ssize_t n;
        char *nl;

        if (poll(&pfd, 1, 200) <= 0)
            continue;
        n = read(out[0], acc + acc_len, sizeof(acc) - 1 - acc_len);
        if (n <= 0)
            break;
        acc_len += (size_t)n;
        acc[acc_len] = '\0';
        while (got < NCHILD && (nl = strchr(acc, '\n')) != NULL) {
            *nl = '\0';
            assert_true(strncmp(acc, "ok ", 3) == 0);
            snprintf(roots[got++], PATH_MAX, "%s", acc + 3);
            memmove(acc, nl + 1, acc_len - (size_t)(nl + 1 - acc) + 1);
            acc_len -= (size_t)(nl + 1 - acc);
        }
    }
    close(in[1]); /* Children may exit now. */
    close(out[0]);
    for (i = 0; i < NCHILD; i++) {
        int st = -1, w = 0, t;

        for (t = 0; t < 2000 && (w = waitpid(pid[i], &st, WNOHANG)) == 0; t++) {
            struct timespec ms = { 0, 5 * 1000000 };

            nanosleep(&ms, NULL);
        }
        if (w == 0) {
            kill(pid[i], SIGKILL);
            waitpid(pid[i], &st, 0);
        }
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(got, NCHILD);
    free(env);
}

static void test_concurrent_processes(void **state)
{
    char roots[NCHILD][PATH_MAX], shared[] = "/tmp/fakeibv-sysfs-test.XXXXXX", stale[PATH_MAX];
    char cmd[PATH_MAX + 16];
    int i, j, fd;

    /* A stale default root of a dead process (nobody holds its lock), named after no pid
     * there can be (above pid_max) and after ours: ctest runs this program twice at once. */
    snprintf(stale, sizeof(stale), "/tmp/fakeibv-sysfs-%u/%u", (unsigned)getuid(),
             5000000u + (unsigned)getpid());
    mkdir(stale, 0755);
    snprintf(cmd, sizeof(cmd), "%s/.fakeibv-owner", stale);
    fd = open(cmd, O_CREAT | O_RDWR, 0644);
    assert_true(fd >= 0);
    close(fd);
    /* Not checked here: any fakeibv process of this user (a test running beside this one)
     * may sweep it at once. Gone after the children is what counts. */

    /* Default roots: one per process, all different, gone once they exit. */
    run_children(NULL, roots);
    for (i = 0; i < NCHILD; i++) {
        assert_true(strncmp(roots[i], "/tmp/fakeibv-sysfs-", 19) == 0);
        assert_false(exists("%s", roots[i]));
        for (j = 0; j < i; j++)
            assert_string_not_equal(roots[i], roots[j]);
    }
    assert_false(exists("%s", stale)); /* Swept by the first child. */

    /* One explicit root for four processes starting together: one builds
     * it, the others wait for it; it stays after they exit. */
    assert_non_null(mkdtemp(shared));
    run_children(shared, roots);
    for (i = 0; i < NCHILD; i++)
        assert_string_equal(roots[i], shared);
    assert_true(exists("%s/.fakeibv-ready", shared));
    assert_string_equal(slurp("%s/class/infiniband/fakeib1/device/numa_node", shared), "0");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shared);
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_thread_until_connected),
        cmocka_unit_test(test_root_and_paths),
        cmocka_unit_test(test_port_files_match_verbs),
        cmocka_unit_test(test_guid_files),
        cmocka_unit_test(test_port_state_follows_injection),
        cmocka_unit_test(test_concurrent_processes),
    };

    self_exe = "/proc/self/exe";
    if (argc > 1 && strcmp(argv[1], "--child") == 0)
        return child_main();
    return cmocka_run_group_tests(tests, setup, teardown);
}
