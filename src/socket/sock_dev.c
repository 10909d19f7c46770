/* Socket devices: one per chosen interface, discovered once per process. */
#include <errno.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "socket/sock.h"
#include "socket/sock_board.h"

ferry_sock_state_t ferry_sock_state;

/* IFF_LOOPBACK, whatever the interface is called. */
static int ferry_sock_dev_is_loopback(const char *ifname)
{
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), lo = 0;

    if (fd < 0)
        return 0;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0)
        lo = (ifr.ifr_flags & IFF_LOOPBACK) != 0;
    close(fd);
    return lo;
}

/*
 * Speed in Mbps: NCCL_FERRY_SPEED_MBPS, else /sys/class/net/<if>/speed.
 * Loopback has no wire: it moves at memory speed, above any NIC's rate that
 * NCCL knows (bench/duplex.sh measures it). NCCL sizes its channels from this
 * number, and only 400 Gbps or more makes it open 4 channels instead of 2,
 * which large messages need to keep enough streams busy. A fast link also
 * makes NCCL's cost model pick LL up to 1 MiB, where LL over a host-staged
 * path is far slower than Simple; the bundled tuner (core/tune.h) corrects
 * that. Without the tuner (NCCL_FERRY_TUNER=0, or another tuner
 * named in NCCL_TUNER_PLUGIN) loopback says 100 Gbps: 2 channels, and NCCL's
 * own choices stay sound. So does a process without helper threads (bound to
 * one CPU, or NCCL_FERRY_THREADS=0): one thread, NCCL's, copies every byte,
 * and two more channels only add messages to it.
 * NCCL agrees the channel count across ranks at init, so ranks bound
 * differently still run alike. Other interfaces without a speed get NCCL's
 * 10 Gbps.
 */
static int ferry_sock_dev_speed(const char *ifname, int configured, const char *slow_why)
{
    char path[PATH_MAX];
    FILE *f;
    int speed = -1;

    if (configured > 0)
        return configured;
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &speed) != 1)
            speed = -1;
        fclose(f);
    }
    if (speed > 0)
        return speed;
    if (!ferry_sock_dev_is_loopback(ifname)) {
        speed = 10000;
        slow_why = NULL; /* NCCL's own guess: nothing of ferry's lowered it. */
    } else {
        speed = slow_why == NULL ? 400000 : 100000;
    }
    FERRY_INFO(FERRY_LOG_NET, "%s has no link speed in sysfs; reporting %d Mbps%s%s "
               "(NCCL_FERRY_SPEED_MBPS overrides)", ifname, speed, slow_why != NULL ? ": " : "",
               slow_why != NULL ? slow_why : "");
    return speed;
}

/*
 * Whether NCCL will consult ferry's tuner: on unless NCCL_FERRY_TUNER=0 or
 * NCCL_TUNER_PLUGIN names another one (NCCL looks there before it falls
 * back to the net plugin's library).
 */
static int ferry_sock_dev_tuner_on(const ferry_config_t *cfg)
{
    const char *other = getenv("NCCL_TUNER_PLUGIN");

    return cfg->tuner && (other == NULL || *other == '\0' || strstr(other, "ferry") != NULL);
}

static void ferry_sock_dev_pci_path(const char *ifname, char *out, size_t len)
{
    char path[PATH_MAX], real[PATH_MAX];

    out[0] = '\0';
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", ifname);
    if (realpath(path, real) != NULL && strlen(real) < len)
        strcpy(out, real);
}

/* Parse a sysfs cpulist such as "0-7,16-23" into set. */
static int ferry_sock_dev_cpulist(const char *path, cpu_set_t *set)
{
    char buf[4096], *p, *save = NULL;
    FILE *f = fopen(path, "r");
    int ok = 0;

    CPU_ZERO(set);
    if (f == NULL)
        return 0;
    if (fgets(buf, sizeof(buf), f) != NULL) {
        for (p = strtok_r(buf, ",\n", &save); p != NULL; p = strtok_r(NULL, ",\n", &save)) {
            int lo, hi, c;

            if (sscanf(p, "%d-%d", &lo, &hi) != 2) {
                if (sscanf(p, "%d", &lo) != 1)
                    continue;
                hi = lo;
            }
            for (c = lo; c <= hi && c < CPU_SETSIZE; c++)
                CPU_SET(c, set);
            ok = 1;
        }
    }
    fclose(f);
    return ok;
}

/*
 * Helper threads run best on the NIC's NUMA node; but only within the CPUs
 * this process was given (cgroups, taskset, MPI binding), never outside.
 */
static void ferry_sock_dev_placement(ferry_sock_dev_t *d)
{
    char path[PATH_MAX];
    cpu_set_t node, mine;
    FILE *f;

    d->numa_node = -1;
    d->has_cpus = 0;
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/numa_node", d->ifc.name);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &d->numa_node) != 1)
            d->numa_node = -1;
        fclose(f);
    }
    if (d->numa_node < 0)
        return;
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", d->numa_node);
    if (!ferry_sock_dev_cpulist(path, &node) || sched_getaffinity(0, sizeof(mine), &mine) != 0)
        return;
    CPU_AND(&d->cpus, &node, &mine);
    d->has_cpus = CPU_COUNT(&d->cpus) > 0;
}

/*
 * Why loopback reports 100 Gbps (2 NCCL channels) instead of 400, or NULL
 * when nothing of ferry's asks for fewer channels.
 */
static const char *ferry_sock_dev_slow_why(const ferry_config_t *core,
                                           const ferry_sock_config_t *cfg)
{
    if (!ferry_sock_dev_tuner_on(core))
        return "ferry's tuner is off";
    if (cfg->threads != 0)
        return NULL;
    if (cfg->send_threads == 0 && cfg->recv_threads == 0)
        return "no helper threads, and 2 NCCL channels suit NCCL's one copying thread";
    return "helpers on one side only, beside NCCL's thread: 2 NCCL channels (measured ahead of 4 "
           "with a send helper per comm at 2 CPUs)";
}

void ferry_sock_dev_log_budget(const ferry_sock_config_t *cfg, const ferry_config_t *core)
{
    char line[1024];

    ferry_sock_config_lanes_line(cfg, line, sizeof(line));
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "%s", line);
    if (ferry_sock_config_step_hint(cfg, core, ferry_sock_dev_tuner_on(core), line, sizeof(line)))
        FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_TUNING, "%s", line);
}

ferry_status_t ferry_sock_init(const ferry_config_t *core)
{
    const ferry_sock_config_t *cfg = &ferry_sock_state.cfg;
    ferry_sock_config_t raw, own;
    ferry_netif_t ifs[FERRY_NETIF_MAX];
    ferry_status_t status;
    char line[1024];
    size_t off = 0;
    int n, i;

    /*
     * The socket backend's own variables are parsed here, not with the
     * core's: a bad one fails this init with its WARN, and with the ib
     * backend they are never parsed (nothing on the ib path reads them).
     */
    status = ferry_sock_config_load_raw(&raw);
    if (status == FERRY_OK)
        status = ferry_sock_hints_load(&ferry_sock_state.hints);
    if (status != FERRY_OK)
        return status;
    own = raw;
    ferry_sock_config_derive(&own);
    ferry_sock_state.core = *core;
    ferry_sock_state.cfg = own;
    n = ferry_netif_find(core->socket_ifname, core->socket_family, ifs, FERRY_NETIF_MAX);
    if (n == 0) {
        FERRY_WARN("socket backend: no usable network interface (NCCL_SOCKET_IFNAME='%s', "
                   "NCCL_SOCKET_FAMILY=%s); interfaces must be up and running with an IPv4 or "
                   "IPv6 address; set NCCL_SOCKET_IFNAME to one that is (see `ip addr`)",
                   core->socket_ifname,
                   core->socket_family == AF_INET    ? "AF_INET"
                   : core->socket_family == AF_INET6 ? "AF_INET6"
                                                     : "any");
        return FERRY_ERR_USAGE;
    }
    for (i = 0; i < n; i++) {
        ferry_sock_dev_t *d = &ferry_sock_state.devs[i];

        d->ifc = ifs[i];
        d->speed_mbps = ferry_sock_dev_speed(d->ifc.name, cfg->speed_mbps,
                                             ferry_sock_dev_slow_why(core, cfg));
        ferry_sock_dev_pci_path(d->ifc.name, d->pci_path, sizeof(d->pci_path));
        ferry_sock_dev_placement(d);
        ferry_sockaddr_str((const struct sockaddr *)&d->ifc.addr, d->addr_str,
                           sizeof(d->addr_str));
        /* Drop the ":0" port from the address for the log. */
        off += (size_t)snprintf(line + off, sizeof(line) - off, " [%d]%s:%.*s%s", i, d->ifc.name,
                                (int)(strrchr(d->addr_str, ':') - d->addr_str), d->addr_str,
                                d->has_cpus ? " (threads on its NUMA node)" : "");
        if (off >= sizeof(line))
            off = sizeof(line) - 1;
    }
    ferry_sock_state.ndev = n;
    ferry_sock_state.gpu = ferry_sock_gpu_on(cfg->gpu_staging);
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "socket backend using%s; %d streams, %d / %d "
               "helper threads per send / receive connection%s, spin %d us", line, cfg->streams,
               cfg->send_threads, cfg->recv_threads,
               cfg->helper_place == FERRY_SOCK_PLACE_AWAY ? " (off NCCL's thread's CPU)" : "",
               cfg->spin_us);
    ferry_sock_dev_log_budget(cfg, core);
    /* Last: a slot on the board only for an init that succeeded. */
    ferry_sock_board_publish(&raw);
    return FERRY_OK;
}

void ferry_sock_fini(void)
{
    ferry_sock_board_leave();
    /* Device names stay valid: NCCL may keep pointers from getProperties. */
}

ferry_status_t ferry_sock_devices(int *ndev_p)
{
    *ndev_p = ferry_sock_state.ndev;
    return FERRY_OK;
}

ferry_status_t ferry_sock_get_properties(int dev, ferry_props_t *props_p)
{
    const ferry_sock_dev_t *d;

    if (dev < 0 || dev >= ferry_sock_state.ndev) {
        FERRY_WARN("getProperties(dev=%d): socket backend has %d device(s) (0..%d)", dev,
                   ferry_sock_state.ndev, ferry_sock_state.ndev - 1);
        return FERRY_ERR_INVALID;
    }
    d = &ferry_sock_state.devs[dev];
    memset(props_p, 0, sizeof(*props_p));
    props_p->name = d->ifc.name;
    props_p->pci_path = d->pci_path[0] ? d->pci_path : NULL;
    props_p->guid = (uint64_t)dev;
    props_p->ptr_support = FERRY_PTR_HOST | (ferry_sock_state.gpu ? FERRY_PTR_CUDA : 0);
    props_p->reg_is_global = 0;
    props_p->force_flush = 0;
    props_p->speed_mbps = d->speed_mbps;
    props_p->port = 0;
    props_p->latency_us = 0;
    props_p->max_comms = 65536;
    props_p->max_recvs = 1;
    /* test() reports sizes as int: cap messages at NCCL's own 1 GiB limit. */
    props_p->max_p2p_bytes = 1UL << 30;
    props_p->max_coll_bytes = 512UL << 20;
    props_p->max_multi_request_size = 1;
    /* As NCCL's socket transport: no rail or plane is known. */
    props_p->rail_id = -1;
    props_p->plane_id = -1;
    return FERRY_OK;
}
