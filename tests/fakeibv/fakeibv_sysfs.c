/*
 * fakeibv's sysfs tree: the files a verbs client reads under
 * /sys/class/infiniband on a real host, written for the emulated devices
 * under a root of their own (ibv_get_sysfs_path() returns it, and every
 * ibv_device's ibdev_path and dev_path point into it).
 *
 *   <root>/class/infiniband/fakeibN -> <root>/devices/pci0000:00/0000:FX:00.0/infiniband/fakeibN
 *   <root>/class/infiniband_verbs/uverbsN -> <root>/devices/.../infiniband_verbs/uverbsN
 *   <root>/bus/pci/                               (empty: the target of subsystem links)
 *   <root>/devices/pci0000:00/0000:FX:00.0/      numa_node, vendor, device, class, ...
 *       subsystem -> ../../../bus/pci
 *       infiniband/fakeibN/device -> ../../../0000:FX:00.0
 *       infiniband/fakeibN/{node_guid,sys_image_guid,node_type,fw_ver,...}
 *       infiniband/fakeibN/ports/P/{lid,state,rate,link_layer,gids/I,gid_attrs/{types,ndevs}/I,...}
 *
 * FX is 0xf0 + N: a bus per device, device and function 0, so the path
 * NCCL derives (function digit zeroed, and the device digits too with
 * NCCL_IB_MERGE_VFS) is the function itself, distinct per device, and its
 * subsystem link ends in "pci" as NCCL's topology code checks. The class
 * entries are absolute links, as in sysfs they
 * are links into devices/: absolute so that a bind mount of
 * <root>/class/infiniband over /sys/class/infiniband still leads back here.
 * File contents follow the kernel's formats (drivers/infiniband/core/sysfs.c).
 *
 * The tree describes this process's ports (their LIDs, GIDs and GUIDs are
 * per process), so by default every process gets its own root,
 * /tmp/fakeibv-sysfs-<uid>/<pid>, removed at exit. A root is owned through
 * an flock on <root>/.fakeibv-owner, held for the process's life: a tree
 * whose lock nobody holds belongs to a dead process and is swept (default
 * roots) or rebuilt (FAKEIBV_SYSFS_ROOT). A second live process given the
 * same FAKEIBV_SYSFS_ROOT uses the first one's tree and says so.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>

#include "fakeibv_internal.h"

#define FAKEIBV_OWNER ".fakeibv-owner"
#define FAKEIBV_READY ".fakeibv-ready"
/* ibdev_path and dev_path are IBV_SYSFS_PATH_MAX (256) bytes. */
#define FAKEIBV_ROOT_MAX 200

static char fakeibv_root[PATH_MAX];
static int fakeibv_root_default;  /* Per-process root under /tmp: removed at exit. */
static int fakeibv_owner_fd = -1; /* flock held while this process owns the tree. */
static pid_t fakeibv_owner_pid;

const char *fakeibv_sysfs_root(void)
{
    return fakeibv_root;
}

/* ---- small file helpers -------------------------------------------------- */

/* snprintf for paths: a too-long path becomes a failed step later (the
 * truncated name does not exist), never an overflow. */
static int __attribute__((format(printf, 3, 4)))
fakeibv_pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (len < 0 || len >= (int)n) {
        out[0] = '\0';
        return (int)n;
    }
    return len;
}

/* Keeps the first error of a sequence of steps. */
static void fakeibv_keep(int *rc, int e)
{
    if (*rc == 0)
        *rc = e;
}

static int fakeibv_mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    char *p;

    if (fakeibv_pathf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
        return ENAMETOOLONG;
    for (p = tmp + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return errno;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return errno;
    return 0;
}

static int fakeibv_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        (void)!rmdir(path);
    else
        (void)!unlink(path);
    return 0; /* Best effort: go on with the rest. */
}

static void fakeibv_rmrf(const char *path)
{
    nftw(path, fakeibv_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes <dir>/<name> with the formatted contents (mode 0444, as sysfs
 * attributes read-only to users are). Returns 0 or an errno. */
static int __attribute__((format(printf, 3, 4)))
fakeibv_put(const char *dir, const char *name, const char *fmt, ...)
{
    char path[PATH_MAX], buf[256];
    va_list ap;
    int fd, n, rc = 0;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(buf) ||
        fakeibv_pathf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return ENAMETOOLONG;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
    if (fd < 0)
        return errno;
    if (write(fd, buf, (size_t)n) != n)
        rc = errno ? errno : EIO;
    close(fd);
    return rc;
}

/* Replaces <dir>/<name> atomically (readers see the old or the new text). */
static int __attribute__((format(printf, 3, 4)))
fakeibv_put_atomic(const char *dir, const char *name, const char *fmt, ...)
{
    char tmp[64], path[PATH_MAX], from[PATH_MAX], buf[256];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fakeibv_pathf(tmp, sizeof(tmp), ".%s.tmp.%d", name, (int)getpid());
    rc = fakeibv_put(dir, tmp, "%s", buf);
    fakeibv_pathf(from, sizeof(from), "%s/%s", dir, tmp);
    fakeibv_pathf(path, sizeof(path), "%s/%s", dir, name);
    if (rc == 0 && rename(from, path) != 0)
        rc = errno;
    if (rc != 0)
        unlink(from);
    return rc;
}

/* Makes <link> point at <target>, replacing whatever was there. */
static int fakeibv_link(const char *target, const char *link)
{
    char tmp[PATH_MAX];

    if (fakeibv_pathf(tmp, sizeof(tmp), "%s.tmp.%d", link, (int)getpid()) >= (int)sizeof(tmp))
        return ENAMETOOLONG;
    unlink(tmp);
    if (symlink(target, tmp) != 0)
        return errno;
    if (rename(tmp, link) != 0) {
        int rc = errno;

        unlink(tmp);
        return rc;
    }
    return 0;
}

/* ---- root and ownership -------------------------------------------------- */

/* Takes the owner lock of root. Returns 1 if this process owns the tree, 0
 * if a live process does, or -errno. `wait_busy` retries a busy lock for a
 * moment (a sweeper holds a default root's lock only briefly). */
static int fakeibv_claim(const char *root, int wait_busy)
{
    char path[PATH_MAX];
    int tries, rc;

    fakeibv_pathf(path, sizeof(path), "%s/%s", root, FAKEIBV_OWNER);
    for (tries = 0; tries < 20; tries++) {
        struct stat a, b;
        struct timespec ms = { 0, 5 * 1000000 };
        int fd;

        rc = fakeibv_mkdirs(root);
        if (rc != 0)
            return -rc;
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 && errno == ENOENT)
            continue; /* A sweeper moved a stale tree of this name away in between. */
        if (fd < 0)
            return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd);
            if (!wait_busy)
                return 0;
            nanosleep(&ms, NULL);
            continue;
        }
        /* The tree may have been swept between open and flock: the lock
         * must be on the file that is there now. */
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            char pid[16];
            int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());

            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
                FAKEIBV_INFO("sysfs: cannot record owner pid in %s", path);
            fakeibv_owner_fd = fd;
            fakeibv_owner_pid = getpid();
            return 1;
        }
        close(fd);
    }
    return wait_busy ? -EBUSY : 0;
}

static int fakeibv_numeric_name(const char *s)
{
    int digits = 0;

    for (; *s >= '0' && *s <= '9'; s++)
        digits++;
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++)
            ;
    return digits > 0 && *s == '\0';
}

/* Removes the per-process trees under parent whose owner is gone (killed
 * processes leave them behind). The owner lock tells, not the pid, so a
 * process of another pid namespace sharing /tmp is never swept.
 *
 * A process of the same pid (another pid namespace) may claim the name
 * while it is swept. So the lock must be on the owner file that is under
 * the name now (another sweeper may have moved that tree away and a new
 * owner made the name again), and the tree leaves the name by one rename
 * before it is removed: a claimant meanwhile builds in a fresh directory,
 * never in one being deleted. */
static void fakeibv_sweep(const char *parent)
{
    DIR *d = opendir(parent);
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL && n++ < 4096) {
        char path[PATH_MAX], dir[PATH_MAX], gone[PATH_MAX];
        struct stat a, b;
        int fd;

        if (!fakeibv_numeric_name(e->d_name) ||
            fakeibv_pathf(path, sizeof(path), "%s/%s/%s", parent, e->d_name, FAKEIBV_OWNER) >=
                (int)sizeof(path))
            continue;
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            continue; /* Being created, or not ours to judge. */
        fakeibv_pathf(dir, sizeof(dir), "%s/%s", parent, e->d_name);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
            a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
            fakeibv_pathf(gone, sizeof(gone), "%s/.gone.%d.%d", parent, (int)getpid(), n) <
                (int)sizeof(gone) &&
            rename(dir, gone) == 0) {
            FAKEIBV_INFO("sysfs: removing %s, left by a process that is gone", dir);
            fakeibv_rmrf(gone);
        }
        close(fd);
    }
    closedir(d);
}

/* The per-user parent of default roots: ours, a real directory, 0700. */
static int fakeibv_parent_ok(const char *parent)
{
    struct stat st;

    if (mkdir(parent, 0700) != 0 && errno != EEXIST)
        return 0;
    if (lstat(parent, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
        FAKEIBV_WARN("sysfs: %s is not a directory of uid %u; no sysfs tree (set "
                     "FAKEIBV_SYSFS_ROOT)", parent, (unsigned)getuid());
        return 0;
    }
    return 1;
}

static int fakeibv_owner = INT_MIN; /* fakeibv_claim() of the chosen root; INT_MIN: none. */

/* Chooses the root (and takes its owner lock) before the device paths are
 * written. A default root is /tmp/fakeibv-sysfs-<uid>/<pid>; if a live
 * process of another pid namespace has the same pid, <pid>.1 ... <pid>.7. */
int fakeibv_sysfs_pick_root(void)
{
    const char *env = fakeibv_config()->sysfs_root;
    char parent[PATH_MAX];
    int i;

    if (env != NULL) {
        if (strlen(env) > FAKEIBV_ROOT_MAX) {
            FAKEIBV_WARN("FAKEIBV_SYSFS_ROOT=%s is longer than %d characters (ibdev_path is "
                         "256 bytes)", env, FAKEIBV_ROOT_MAX);
            return ENAMETOOLONG;
        }
        snprintf(fakeibv_root, sizeof(fakeibv_root), "%s", env);
        fakeibv_owner = fakeibv_claim(fakeibv_root, 0);
        return 0;
    }
    fakeibv_root_default = 1;
    fakeibv_pathf(parent, sizeof(parent), "/tmp/fakeibv-sysfs-%u", (unsigned)getuid());
    fakeibv_pathf(fakeibv_root, sizeof(fakeibv_root), "%s/%d", parent, (int)getpid());
    if (!fakeibv_parent_ok(parent))
        return 0; /* Paths still name the root; the tree is just missing. */
    fakeibv_sweep(parent);
    for (i = 0; i < 8; i++) {
        if (i > 0)
            fakeibv_pathf(fakeibv_root, sizeof(fakeibv_root), "%s/%d.%d", parent, (int)getpid(),
                          i);
        fakeibv_owner = fakeibv_claim(fakeibv_root, 1);
        if (fakeibv_owner != -EBUSY)
            break;
    }
    return 0;
}

/* ---- contents -------------------------------------------------------------- */

/* ibv_port_attr.active_speed -> per-lane rate in 0.1 Gb/s and the name the
 * kernel prints (rate_show). */
static void fakeibv_speed(uint8_t code, int *rate, const char **name)
{
    switch (code) {
    case 2: *rate = 50; *name = " DDR"; break;
    case 4: *rate = 100; *name = " QDR"; break;
    case 8: *rate = 100; *name = " FDR10"; break;
    case 16: *rate = 140; *name = " FDR"; break;
    case 32: *rate = 250; *name = " EDR"; break;
    case 64: *rate = 500; *name = " HDR"; break;
    case 128: *rate = 1000; *name = " NDR"; break;
    default: *rate = 25; *name = " SDR"; break;
    }
}

static int fakeibv_width_lanes(uint8_t code)
{
    switch (code) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 1;
    }
}

static const char *fakeibv_state_text(enum ibv_port_state st)
{
    return st == IBV_PORT_ACTIVE ? "4: ACTIVE" : "1: DOWN";
}

static const char *fakeibv_phys_state_text(enum ibv_port_state st)
{
    return st == IBV_PORT_ACTIVE ? "5: LinkUp" : "3: Disabled";
}

static void fakeibv_guid_text(uint64_t be_guid, char *out, size_t n)
{
    uint64_t g = be64toh(be_guid);

    snprintf(out, n, "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
             (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

/* ports/<p> of one device, under ibdir. */
static int fakeibv_build_port(const struct fakeibv_device *d, int p, const char *ibdir)
{
    const struct fakeibv_config *cfg = fakeibv_config();
    const struct fakeibv_port *port = &d->ports[p - 1];
    int eth = cfg->link_layer == IBV_LINK_LAYER_ETHERNET;
    int ngid = eth ? FAKEIBV_GID_TBL_LEN : 1;
    char dir[PATH_MAX], sub[PATH_MAX], name[16];
    const char *speed;
    int rate, lanes, i, rc = 0;

    fakeibv_pathf(dir, sizeof(dir), "%s/ports/%d", ibdir, p);
    fakeibv_speed(cfg->active_speed, &rate, &speed);
    lanes = fakeibv_width_lanes(cfg->active_width);
    rate *= lanes;
    fakeibv_keep(&rc, fakeibv_mkdirs(dir));
    fakeibv_keep(&rc, fakeibv_put(dir, "rate", "%d%s Gb/sec (%dX%s)\n", rate / 10, rate % 10 ? ".5" : "",
                      lanes, speed));
    fakeibv_keep(&rc, fakeibv_put(dir, "link_layer", "%s\n", eth ? "Ethernet" : "InfiniBand"));
    fakeibv_keep(&rc, fakeibv_put(dir, "state", "%s\n", fakeibv_state_text(port->state)));
    fakeibv_keep(&rc, fakeibv_put(dir, "phys_state", "%s\n", fakeibv_phys_state_text(port->state)));
    fakeibv_keep(&rc, fakeibv_put(dir, "lid", "0x%x\n", eth ? 0 : port->lid));
    fakeibv_keep(&rc, fakeibv_put(dir, "sm_lid", "0x%x\n", eth ? 0 : 1));
    fakeibv_keep(&rc, fakeibv_put(dir, "lid_mask_count", "0\n"));
    fakeibv_keep(&rc, fakeibv_put(dir, "sm_sl", "0\n"));
    fakeibv_keep(&rc, fakeibv_put(dir, "cap_mask", "0x%08x\n",
                      eth ? (unsigned)IBV_PORT_IP_BASED_GIDS : (unsigned)IBV_PORT_CM_SUP));
    /* Traffic counters (fakeibv_counters.c), rewritten as traffic flows. */
    fakeibv_pathf(sub, sizeof(sub), "%s/counters", dir);
    fakeibv_keep(&rc, fakeibv_mkdirs(sub));
    fakeibv_keep(&rc, fakeibv_put(sub, "port_xmit_data", "0\n"));
    fakeibv_keep(&rc, fakeibv_put(sub, "port_rcv_data", "0\n"));
    fakeibv_keep(&rc, fakeibv_put(sub, "port_xmit_packets", "0\n"));
    fakeibv_keep(&rc, fakeibv_put(sub, "port_rcv_packets", "0\n"));
    fakeibv_pathf(sub, sizeof(sub), "%s/pkeys", dir);
    fakeibv_keep(&rc, fakeibv_mkdirs(sub));
    fakeibv_keep(&rc, fakeibv_put(sub, "0", "0xffff\n"));
    fakeibv_pathf(sub, sizeof(sub), "%s/gids", dir);
    fakeibv_keep(&rc, fakeibv_mkdirs(sub));
    fakeibv_pathf(sub, sizeof(sub), "%s/gid_attrs/types", dir);
    fakeibv_keep(&rc, fakeibv_mkdirs(sub));
    if (eth) {
        fakeibv_pathf(sub, sizeof(sub), "%s/gid_attrs/ndevs", dir);
        fakeibv_keep(&rc, fakeibv_mkdirs(sub));
    }
    for (i = 0; i < ngid; i++) {
        union ibv_gid g;
        uint32_t type;
        const uint8_t *r = g.raw;

        fakeibv_gid_fill(d, p, i, &g, &type);
        snprintf(name, sizeof(name), "%d", i);
        fakeibv_pathf(sub, sizeof(sub), "%s/gids", dir);
        /* %pI6: eight groups of four hex digits, not compressed. */
        fakeibv_keep(&rc, fakeibv_put(sub, name, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:"
                                     "%02x%02x:%02x%02x\n",
                          r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                          r[11], r[12], r[13], r[14], r[15]));
        fakeibv_pathf(sub, sizeof(sub), "%s/gid_attrs/types", dir);
        fakeibv_keep(&rc, fakeibv_put(sub, name, "%s\n",
                          type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1"));
        if (eth) {
            fakeibv_pathf(sub, sizeof(sub), "%s/gid_attrs/ndevs", dir);
            fakeibv_keep(&rc, fakeibv_put(sub, name, "%s\n", fakeibv_ndev_name(port)));
        }
    }
    return rc;
}

/* devices/pci0000:00/<pci> of one device, built under `pcidir`. */
static int fakeibv_build_device(const struct fakeibv_device *d, const char *pcidir)
{
    const struct fakeibv_config *cfg = fakeibv_config();
    int eth = cfg->link_layer == IBV_LINK_LAYER_ETHERNET;
    char ibdir[PATH_MAX], uvdir[PATH_MAX], link[PATH_MAX], target[64], guid[24], host[64];
    int p, rc = 0;

    fakeibv_keep(&rc, fakeibv_mkdirs(pcidir));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "numa_node", "0\n"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "vendor", "0xfa4e\n"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "device", "0x0001\n"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "subsystem_vendor", "0xfa4e\n"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "subsystem_device", "0x0001\n"));
    /* PCI class: 0x0207 InfiniBand controller, 0x0200 Ethernet controller. */
    fakeibv_keep(&rc, fakeibv_put(pcidir, "class", "%s\n", eth ? "0x020000" : "0x020700"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "max_link_speed", "16.0 GT/s PCIe\n"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "max_link_width", "16\n"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "current_link_speed", "16.0 GT/s PCIe\n"));
    fakeibv_keep(&rc, fakeibv_put(pcidir, "current_link_width", "16\n"));
    /* As in sysfs: <root>/devices/pci0000:00/<pci>/subsystem -> <root>/bus/pci. */
    fakeibv_pathf(link, sizeof(link), "%s/subsystem", pcidir);
    fakeibv_keep(&rc, fakeibv_link("../../../bus/pci", link));
    fakeibv_pathf(target, sizeof(target), "../../../%s", d->pci);

    fakeibv_pathf(ibdir, sizeof(ibdir), "%s/infiniband/%s", pcidir, d->dev.name);
    fakeibv_keep(&rc, fakeibv_mkdirs(ibdir));
    fakeibv_pathf(link, sizeof(link), "%s/device", ibdir);
    fakeibv_keep(&rc, fakeibv_link(target, link));
    fakeibv_guid_text(d->node_guid, guid, sizeof(guid));
    fakeibv_keep(&rc, fakeibv_put(ibdir, "node_guid", "%s\n", guid));
    fakeibv_keep(&rc, fakeibv_put(ibdir, "sys_image_guid", "%s\n", guid));
    fakeibv_keep(&rc, fakeibv_put(ibdir, "node_type", "1: CA\n"));
    fakeibv_keep(&rc, fakeibv_put(ibdir, "fw_ver", "fakeibv-1.0\n"));
    fakeibv_keep(&rc, fakeibv_put(ibdir, "hca_type", "FAKEIBV\n"));
    fakeibv_keep(&rc, fakeibv_put(ibdir, "hw_rev", "1\n"));
    fakeibv_keep(&rc, fakeibv_put(ibdir, "board_id", "FAKEIBV_0001\n"));
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    fakeibv_keep(&rc, fakeibv_put(ibdir, "node_desc", "%s %s\n", host, d->dev.name));
    for (p = 1; p <= cfg->nports; p++)
        fakeibv_keep(&rc, fakeibv_build_port(d, p, ibdir));

    fakeibv_pathf(uvdir, sizeof(uvdir), "%s/infiniband_verbs/%s", pcidir, d->dev.dev_name);
    fakeibv_keep(&rc, fakeibv_mkdirs(uvdir));
    fakeibv_keep(&rc, fakeibv_put(uvdir, "ibdev", "%s\n", d->dev.name));
    fakeibv_keep(&rc, fakeibv_put(uvdir, "abi_version", "1\n"));
    fakeibv_pathf(link, sizeof(link), "%s/device", uvdir);
    fakeibv_keep(&rc, fakeibv_link(target, link));
    return rc;
}

/* Empties what a previous (dead) owner left, keeping class/infiniband
 * itself: it may be the source of a bind mount (test/with_sysfs.sh). */
static void fakeibv_wipe(const char *root)
{
    char path[PATH_MAX];
    DIR *d;
    struct dirent *e;

    fakeibv_pathf(path, sizeof(path), "%s/%s", root, FAKEIBV_READY);
    unlink(path);
    fakeibv_pathf(path, sizeof(path), "%s/class/infiniband", root);
    d = opendir(path);
    while (d != NULL && (e = readdir(d)) != NULL) {
        char p[PATH_MAX];

        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        fakeibv_pathf(p, sizeof(p), "%s/%s", path, e->d_name);
        fakeibv_rmrf(p);
    }
    if (d != NULL)
        closedir(d);
    fakeibv_pathf(path, sizeof(path), "%s/class/infiniband_verbs", root);
    d = opendir(path);
    while (d != NULL && (e = readdir(d)) != NULL) {
        char p[PATH_MAX];

        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        fakeibv_pathf(p, sizeof(p), "%s/%s", path, e->d_name);
        fakeibv_rmrf(p);
    }
    if (d != NULL)
        closedir(d);
    fakeibv_pathf(path, sizeof(path), "%s/devices", root);
    fakeibv_rmrf(path);
}

static int fakeibv_build(const char *root, struct fakeibv_device *devs, int ndev)
{
    char path[PATH_MAX], tmp[PATH_MAX], pcidir[PATH_MAX], link[PATH_MAX];
    int i, rc = 0;

    fakeibv_wipe(root);
    fakeibv_pathf(path, sizeof(path), "%s/class/infiniband", root);
    fakeibv_keep(&rc, fakeibv_mkdirs(path));
    fakeibv_pathf(path, sizeof(path), "%s/class/infiniband_verbs", root);
    fakeibv_keep(&rc, fakeibv_mkdirs(path));
    fakeibv_keep(&rc, fakeibv_put(path, "abi_version", "6\n"));
    fakeibv_pathf(path, sizeof(path), "%s/bus/pci", root);
    fakeibv_keep(&rc, fakeibv_mkdirs(path));
    fakeibv_pathf(path, sizeof(path), "%s/devices/pci0000:00", root);
    fakeibv_keep(&rc, fakeibv_mkdirs(path));
    for (i = 0; i < ndev && rc == 0; i++) {
        struct fakeibv_device *d = &devs[i];

        /* Each PCI device is built aside and renamed into place whole. */
        fakeibv_pathf(tmp, sizeof(tmp), "%s/devices/pci0000:00/.tmp.%d.%d", root, (int)getpid(), i);
        fakeibv_pathf(pcidir, sizeof(pcidir), "%s/devices/pci0000:00/%s", root, d->pci);
        fakeibv_rmrf(tmp);
        rc = fakeibv_build_device(d, tmp);
        if (rc == 0) {
            fakeibv_rmrf(pcidir);
            if (rename(tmp, pcidir) != 0)
                rc = errno;
        }
        fakeibv_rmrf(tmp);
        if (rc != 0)
            break;
        fakeibv_pathf(path, sizeof(path), "%s/infiniband/%s", pcidir, d->dev.name);
        fakeibv_pathf(link, sizeof(link), "%s/class/infiniband/%s", root, d->dev.name);
        rc = fakeibv_link(path, link);
        fakeibv_pathf(path, sizeof(path), "%s/infiniband_verbs/%s", pcidir, d->dev.dev_name);
        fakeibv_pathf(link, sizeof(link), "%s/class/infiniband_verbs/%s", root, d->dev.dev_name);
        fakeibv_keep(&rc, fakeibv_link(path, link));
    }
    if (rc == 0)
        rc = fakeibv_put_atomic(root, FAKEIBV_READY, "%d\n", (int)getpid());
    return rc;
}

void fakeibv_sysfs_build(struct fakeibv_device *devs, int ndev)
{
    int rc, i;

    if (fakeibv_owner < 0) {
        if (fakeibv_owner != INT_MIN)
            FAKEIBV_WARN("sysfs: cannot own %s: %s; no sysfs tree", fakeibv_root,
                         strerror(-fakeibv_owner));
        return;
    }
    if (fakeibv_owner == 0) {
        char ready[PATH_MAX];

        /* Another live process has it: wait (5 s at most) until its tree is
         * complete, and use it. */
        fakeibv_pathf(ready, sizeof(ready), "%s/%s", fakeibv_root, FAKEIBV_READY);
        for (i = 0; i < 500 && access(ready, F_OK) != 0; i++) {
            struct timespec ms = { 0, 10 * 1000000 };

            nanosleep(&ms, NULL);
        }
        FAKEIBV_WARN("sysfs: FAKEIBV_SYSFS_ROOT=%s belongs to another live process; its "
                     "lid, gids and node_guid files describe that process's ports, not ours",
                     fakeibv_root);
        return;
    }
    rc = fakeibv_build(fakeibv_root, devs, ndev);
    if (rc != 0)
        FAKEIBV_WARN("sysfs: building the tree under %s failed: %s", fakeibv_root,
                     strerror(rc));
    else
        FAKEIBV_INFO("sysfs tree at %s", fakeibv_root);
}

/* An injected port error shows in sysfs as on a real port. */
void fakeibv_sysfs_port_state(const struct fakeibv_device *d, int port)
{
    char dir[PATH_MAX];
    const struct fakeibv_port *p = &d->ports[port - 1];

    if (fakeibv_owner_fd < 0)
        return;
    fakeibv_pathf(dir, sizeof(dir), "%s/devices/pci0000:00/%s/infiniband/%s/ports/%d", fakeibv_root,
             d->pci, d->dev.name, port);
    fakeibv_put_atomic(dir, "state", "%s\n", fakeibv_state_text(p->state));
    fakeibv_put_atomic(dir, "phys_state", "%s\n", fakeibv_phys_state_text(p->state));
}

/* Port counters as the kernel shows them: data in units of 4 octets. Any
 * thread may call this; the writes of one process are serialised (their
 * temporary names are per process). A forked child leaves the files to
 * the owner. */
void fakeibv_sysfs_port_counters(struct fakeibv_device *d, int port)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    const struct fakeibv_port *p = &d->ports[port - 1];
    char dir[PATH_MAX];

    if (fakeibv_owner_fd < 0 || fakeibv_owner_pid != getpid())
        return;
    fakeibv_pathf(dir, sizeof(dir), "%s/devices/pci0000:00/%s/infiniband/%s/ports/%d/counters",
                  fakeibv_root, d->pci, d->dev.name, port);
    pthread_mutex_lock(&lock);
    fakeibv_put_atomic(dir, "port_xmit_data", "%llu\n",
                       (unsigned long long)(__atomic_load_n(&p->ctr_xmit_bytes,
                                                            __ATOMIC_RELAXED) / 4));
    fakeibv_put_atomic(dir, "port_rcv_data", "%llu\n",
                       (unsigned long long)(__atomic_load_n(&p->ctr_rcv_bytes,
                                                            __ATOMIC_RELAXED) / 4));
    fakeibv_put_atomic(dir, "port_xmit_packets", "%llu\n",
                       (unsigned long long)__atomic_load_n(&p->ctr_xmit_pkts, __ATOMIC_RELAXED));
    fakeibv_put_atomic(dir, "port_rcv_packets", "%llu\n",
                       (unsigned long long)__atomic_load_n(&p->ctr_rcv_pkts, __ATOMIC_RELAXED));
    pthread_mutex_unlock(&lock);
}

void fakeibv_sysfs_cleanup(void)
{
    if (fakeibv_owner_fd < 0 || fakeibv_owner_pid != getpid())
        return; /* Not ours, or a forked child of the owner. */
    if (fakeibv_root_default)
        fakeibv_rmrf(fakeibv_root); /* Still holding the lock: no sweeper races us. */
    close(fakeibv_owner_fd);
    fakeibv_owner_fd = -1;
}

/* ---- rdma-core's sysfs helpers (driver.h, IBVERBS_1.0) -------------------- */



/* As rdma-core: reads <dir>/<file>, drops one trailing newline, returns
 * the length or -1. */
FAKEIBV_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
    char path[PATH_MAX];
    ssize_t len;
    int fd;

    if (fakeibv_pathf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
        return -1;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    len = read(fd, buf, size);
    close(fd);
    if (len > 0) {
        if (buf[len - 1] == '\n')
            buf[--len] = '\0';
        else if ((size_t)len < size)
            buf[len] = '\0';
        else
            return -1; /* Would have to truncate to terminate it. */
    }
    return (int)len;
}
