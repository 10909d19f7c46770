/*
 * fakeibv port listeners and stream set-up.
 *
 * Every port binds a Unix stream socket named by its LID: the abstract name
 * "\0fakeibv/lid/<lid>" (one per network namespace), or with
 * FAKEIBV_FABRIC_DIR the socket file "<dir>/lid/<lid>", which processes in
 * any network namespace that share the filesystem can reach. Binding is
 * what reserves the LID, so two ports on one fabric never share one. A port
 * whose RoCE GIDs carry a real interface address (FAKEIBV_NETDEV) also
 * binds "gid/<32 hex digits>", since such a GID holds no LID.
 *
 * A connecting requester sends a hello naming the responder QP; the accept
 * thread hands the stream to that QP. The accept thread runs only while
 * some QP of the process is past INIT (fakeibv_acceptor_hold): until then
 * connections wait in the listen backlog, as requests to a QP that is not
 * yet RTR would be dropped and retried by a real requester.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fakeibv_internal.h"
#include "fakeibv_wire.h"

#define FAKEIBV_LID_MIN 1
#define FAKEIBV_LID_MAX 0xbfff /* Unicast LID range. */
#define FAKEIBV_BACKLOG 4096   /* Streams may queue while no accept thread runs. */
#define FAKEIBV_HELLO_MS 5000  /* A connected peer must send its hello by then. */

/* Every listener, for the accept thread; fixed once the device list exists. */
static struct fakeibv_listener {
    int fd;
    uint16_t lid;
    const struct fakeibv_port *port; /* Its port: streams to a port that is down are dropped. */
    char path[108];               /* Socket file to unlink at exit ("" if abstract). */
} fakeibv_listeners[FAKEIBV_MAX_DEVS * FAKEIBV_MAX_PORTS * 2];
static int fakeibv_nlisteners;
static pid_t fakeibv_listeners_pid;

static void fakeibv_gid_hex(const union ibv_gid *gid, char *hex)
{
    int i;

    for (i = 0; i < 16; i++)
        sprintf(hex + 2 * i, "%02x", gid->raw[i]);
}

/* "<kind>/<key>" as an abstract name or a file in the fabric dir. */
static socklen_t fakeibv_name(const char *kind, const char *key, struct sockaddr_un *sa)
{
    const char *dir = fakeibv_config()->fabric_dir;
    int n;

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (dir != NULL) {
        n = snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/%s/%s", dir, kind, key);
        if (n < 0 || (size_t)n >= sizeof(sa->sun_path))
            return 0;
        return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
    }
    /* sun_path[0] stays 0: abstract namespace, nothing on disk to clean. */
    n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "fakeibv/%s/%s", kind, key);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static socklen_t fakeibv_lid_addr(uint16_t lid, struct sockaddr_un *sa)
{
    char key[8];

    snprintf(key, sizeof(key), "%u", lid);
    return fakeibv_name("lid", key, sa);
}

static socklen_t fakeibv_gid_addr(const union ibv_gid *gid, struct sockaddr_un *sa)
{
    char hex[33];

    fakeibv_gid_hex(gid, hex);
    return fakeibv_name("gid", hex, sa);
}

int fakeibv_io_read(int fd, void *buf, size_t len)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? EPIPE : errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int fakeibv_io_write(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        /* MSG_NOSIGNAL: a dead peer must become an error, never SIGPIPE. */
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int fakeibv_io_discard(int fd, size_t len)
{
    char buf[4096];

    while (len > 0) {
        size_t chunk = len < sizeof(buf) ? len : sizeof(buf);
        int rc = fakeibv_io_read(fd, buf, chunk);

        if (rc != 0)
            return rc;
        len -= chunk;
    }
    return 0;
}

/* ---- binding ------------------------------------------------------------ */

/* Serialises bind/stale-check/unlink between the processes sharing a fabric
 * dir, so nobody unlinks a socket another process has just bound but not
 * yet put in listen state. Returns the lock fd, or -1 (abstract names, or
 * the lock could not be had in 10 s: proceed unlocked, with a warning). */
static int fakeibv_fabric_lock(void)
{
    const char *dir = fakeibv_config()->fabric_dir;
    char path[PATH_MAX];
    int fd, i;

    if (dir == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/lid", dir);
    (void)!mkdir(dir, 0777);
    (void)!mkdir(path, 0777);
    snprintf(path, sizeof(path), "%s/gid", dir);
    (void)!mkdir(path, 0777);
    snprintf(path, sizeof(path), "%s/.lock", dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        FAKEIBV_WARN("FAKEIBV_FABRIC_DIR: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    for (i = 0; i < 10000; i++) {
        struct timespec ms = { 0, 1000000 };

        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        if (errno != EWOULDBLOCK && errno != EINTR)
            break;
        nanosleep(&ms, NULL);
    }
    FAKEIBV_WARN("FAKEIBV_FABRIC_DIR: no lock on %s (%s); binding without it", path,
                 strerror(errno));
    close(fd);
    return -1;
}

static void fakeibv_fabric_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* Releases the flock. */
}

/* Binds and listens. A socket file left by a process that died refuses
 * connections (ECONNREFUSED): it is unlinked and the name reused. Returns 0,
 * EADDRINUSE when a live port holds the name, or another errno. */
static int fakeibv_bind_listen(int fd, const struct sockaddr_un *sa, socklen_t len)
{
    int probe, r, e;

    if (len == 0)
        return ENAMETOOLONG;
    if (bind(fd, (const struct sockaddr *)sa, len) != 0) {
        if (errno != EADDRINUSE || sa->sun_path[0] == '\0')
            return errno;
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (probe < 0)
            return errno;
        /* A live listener accepts (or is full: EAGAIN); the accept thread
         * drops this probe when it sees EOF instead of a hello. */
        r = connect(probe, (const struct sockaddr *)sa, len);
        e = errno;
        close(probe);
        if (r == 0 || e != ECONNREFUSED)
            return EADDRINUSE;
        FAKEIBV_INFO("%s: stale socket of a dead process; reusing the name", sa->sun_path);
        if (unlink(sa->sun_path) != 0 && errno != ENOENT)
            return EADDRINUSE;
        if (bind(fd, (const struct sockaddr *)sa, len) != 0)
            return errno;
    }
    if (listen(fd, FAKEIBV_BACKLOG) != 0)
        return errno;
    return 0;
}

static void fakeibv_listener_add(int fd, const struct fakeibv_port *port,
                                 const struct sockaddr_un *sa)
{
    struct fakeibv_listener *l = &fakeibv_listeners[fakeibv_nlisteners++];

    l->fd = fd;
    l->lid = port->lid;
    l->port = port;
    snprintf(l->path, sizeof(l->path), "%s", sa->sun_path); /* "" when abstract. */
    fakeibv_listeners_pid = getpid();
}

/* Binds the first free LID from a pid-derived start. The listener lives as
 * long as the process; the accept thread comes and goes. */
int fakeibv_port_bind(struct fakeibv_device *dev, int port)
{
    struct sockaddr_un sa;
    uint32_t span = FAKEIBV_LID_MAX - FAKEIBV_LID_MIN + 1;
    uint32_t start = ((uint32_t)getpid() * 97u + (uint32_t)dev->index * 13u + (uint32_t)port) % span;
    uint32_t i;
    int fd, rc = EADDRINUSE, lock;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    lock = fakeibv_fabric_lock();
    for (i = 0; i < span; i++) {
        uint16_t lid = (uint16_t)(FAKEIBV_LID_MIN + (start + i) % span);

        rc = fakeibv_bind_listen(fd, &sa, fakeibv_lid_addr(lid, &sa));
        if (rc == 0) {
            dev->ports[port - 1].lid = lid;
            break;
        }
        if (rc != EADDRINUSE)
            break;
    }
    fakeibv_fabric_unlock(lock);
    if (rc != 0) {
        FAKEIBV_WARN("%s port %d: no LID could be bound (%s%s): %s", dev->dev.name, port,
                     fakeibv_config()->fabric_dir ? "socket files under " : "abstract sockets",
                     fakeibv_config()->fabric_dir ? fakeibv_config()->fabric_dir : "",
                     strerror(rc));
        close(fd);
        return rc;
    }
    dev->ports[port - 1].listen_fd = fd;
    fakeibv_listener_add(fd, &dev->ports[port - 1], &sa);
    return 0;
}

/* The GID of a port with a netdev address names a second listener. If a
 * live port already holds it (two processes given one interface), peers
 * addressing that GID reach the other one: say so loudly. */
void fakeibv_port_bind_gid(struct fakeibv_device *dev, int port, const union ibv_gid *gid)
{
    struct sockaddr_un sa;
    int fd, rc, lock;
    char hex[33];

    fakeibv_gid_hex(gid, hex);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    lock = fakeibv_fabric_lock();
    rc = fakeibv_bind_listen(fd, &sa, fakeibv_gid_addr(gid, &sa));
    fakeibv_fabric_unlock(lock);
    if (rc != 0) {
        FAKEIBV_WARN("%s port %d: GID %s (netdev %s) is %s; peers addressing it by GID "
                     "will not reach this port (one fakeibv port per interface address)",
                     dev->dev.name, port, hex, dev->ports[port - 1].netdev,
                     rc == EADDRINUSE ? "already claimed by another live port" : strerror(rc));
        close(fd);
        return;
    }
    dev->ports[port - 1].gid_fd = fd;
    fakeibv_listener_add(fd, &dev->ports[port - 1], &sa);
}

/* At exit: remove this process's socket files from the fabric dir. */
void fakeibv_wire_cleanup(void)
{
    int i;

    if (fakeibv_listeners_pid != getpid())
        return; /* A forked child: the names are its parent's. */
    for (i = 0; i < fakeibv_nlisteners; i++)
        if (fakeibv_listeners[i].path[0] != '\0')
            unlink(fakeibv_listeners[i].path);
}

/* ---- accept thread -------------------------------------------------------- */

#define FAKEIBV_MAX_PENDING 64

struct fakeibv_pending {
    int fd;
    uint16_t lid;
    const struct fakeibv_port *port;
    struct timespec deadline;
};

static struct {
    pthread_mutex_t lock;         /* Serialises start/stop; the thread never takes it. */
    int users;                    /* QPs past INIT. */
    int running;
    pthread_t thread;
    int wake[2];                  /* Written to stop the thread. */
} fakeibv_acc = { PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, { -1, -1 } };

static long fakeibv_ms_until(const struct timespec *t)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (t->tv_sec - now.tv_sec) * 1000 + (t->tv_nsec - now.tv_nsec) / 1000000;
}

/* ---- one-copy probe ------------------------------------------------------ */

/* What a hello offers the acceptor to read: random, fixed for the process. */
static uint64_t fakeibv_cookie;
static pthread_once_t fakeibv_cookie_once = PTHREAD_ONCE_INIT;
static int fakeibv_cookie_broken; /* Test hook: hellos carry a wrong value. */

static void fakeibv_cookie_init(void)
{
    uint64_t v = 0;

    while (v == 0)
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
            v = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&v;
    __atomic_store_n(&fakeibv_cookie, v, __ATOMIC_RELAXED);
}

FAKEIBV_EXPORT void fakeibv_one_copy_break_probe(int on)
{
    __atomic_store_n(&fakeibv_cookie_broken, on != 0, __ATOMIC_RELAXED);
}

/* Can this process read and write the memory of the process that sent the
 * hello? pid is in the sender's pid namespace, so besides the permission
 * (ptrace access mode) the cookie must match: another namespace's pid may
 * name some other process here, or none. */
static int fakeibv_probe_peer(const struct fakeibv_wire_hello *h, const char **why)
{
    static __thread char buf[96]; /* Only the accept thread probes. */
    uint64_t v = 0;
    struct iovec l = { &v, sizeof(v) }, r = { (void *)(uintptr_t)h->cookie_addr, sizeof(v) };
    ssize_t n;

    if (!fakeibv_config()->one_copy) {
        *why = "FAKEIBV_ONE_COPY=0 here";
        return 0;
    }
    if (!(h->flags & FAKEIBV_HELLO_ONE_COPY)) {
        *why = "not offered by the requester";
        return 0;
    }
    n = process_vm_readv((pid_t)h->pid, &l, 1, &r, 1, 0);
    if (n != (ssize_t)sizeof(v)) {
        snprintf(buf, sizeof(buf), "process_vm_readv of pid %d: %s%s", (int)h->pid,
                 strerror(errno),
                 errno == EPERM ? " (no ptrace access: Yama ptrace_scope, other uid?)"
                 : errno == ESRCH || errno == EFAULT ? " (other pid namespace?)" : "");
        *why = buf;
        return 0;
    }
    if (v != h->cookie) {
        *why = "cookie mismatch (pid names another process: other pid namespace?)";
        return 0;
    }
    /* Same permission check as the read, but prove it: the value goes back. */
    l.iov_base = &v;
    if (process_vm_writev((pid_t)h->pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof(v)) {
        *why = "process_vm_writev failed";
        return 0;
    }
    *why = "probe read the requester's cookie";
    return 1;
}

/* The hello is one send, so it is either all there or not yet. */
static void fakeibv_accept_hello(struct fakeibv_pending *p)
{
    struct fakeibv_wire_hello h;
    ssize_t n = recv(p->fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
    const char *why = "";
    int one_copy = 0;

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n == 0) {
        /* Closed before a hello: a stale-socket probe, or a requester that
         * gave up. Nothing to report. */
        FAKEIBV_TRACE("port lid %u: connection closed before its hello", p->lid);
    } else if (n != (ssize_t)sizeof(h) || fakeibv_io_read(p->fd, &h, sizeof(h)) != 0 ||
               h.magic != FAKEIBV_WIRE_MAGIC || h.version != FAKEIBV_WIRE_VERSION) {
        FAKEIBV_WARN("port lid %u: bad hello (%zd bytes, magic 0x%x version %u); closing",
                     p->lid, n, n == (ssize_t)sizeof(h) ? h.magic : 0,
                     n == (ssize_t)sizeof(h) ? h.version : 0);
    } else if (__atomic_load_n(&p->port->state, __ATOMIC_ACQUIRE) != IBV_PORT_ACTIVE) {
        /* The port's link is down: nothing reaches it, the requester
         * times out. */
        FAKEIBV_INFO("port lid %u: down; stream from lid %u qpn 0x%x for qpn 0x%x dropped",
                     p->lid, h.src_lid, h.src_qpn, h.dst_qpn);
    } else if ((one_copy = fakeibv_probe_peer(&h, &why)),
               fakeibv_qp_attach_inbound(h.dst_qpn, p->fd, (int)h.pid, one_copy) != 0) {
        /* Unknown QP, or one whose link is down: like a real HCA we drop;
         * the requester times out. */
        FAKEIBV_INFO("port lid %u: stream from lid %u qpn 0x%x for qpn 0x%x (unknown or "
                     "link down) dropped", p->lid, h.src_lid, h.src_qpn, h.dst_qpn);
    } else {
        FAKEIBV_TRACE("port lid %u: stream from lid %u qpn 0x%x -> qpn 0x%x", p->lid,
                      h.src_lid, h.src_qpn, h.dst_qpn);
        FAKEIBV_INFO("qpn 0x%x: stream from lid %u qpn 0x%x (pid %d): %s, %s", h.dst_qpn,
                     h.src_lid, h.src_qpn, (int)h.pid,
                     one_copy ? "one-copy (process_vm_readv)" : "streaming", why);
        __atomic_add_fetch(one_copy ? &fakeibv_stats.probes_ok : &fakeibv_stats.probes_failed, 1,
                           __ATOMIC_RELAXED);
        p->fd = -1; /* The QP's responder owns it now. */
        return;
    }
    close(p->fd);
    p->fd = -1;
}

static void *fakeibv_accept_main(void *arg)
{
    struct pollfd pfd[1 + sizeof(fakeibv_listeners) / sizeof(fakeibv_listeners[0]) +
                     FAKEIBV_MAX_PENDING];
    struct fakeibv_pending pend[FAKEIBV_MAX_PENDING];
    int wake = *(int *)arg, npend = 0, i;

    for (;;) {
        int n = 0, nl = fakeibv_nlisteners, timeout = -1, rc;

        pfd[n++] = (struct pollfd){ .fd = wake, .events = POLLIN };
        for (i = 0; i < nl; i++)
            pfd[n++] = (struct pollfd){ .fd = npend < FAKEIBV_MAX_PENDING ?
                                                  fakeibv_listeners[i].fd : -1,
                                        .events = POLLIN };
        for (i = 0; i < npend; i++) {
            long ms = fakeibv_ms_until(&pend[i].deadline);

            pfd[n++] = (struct pollfd){ .fd = pend[i].fd, .events = POLLIN };
            if (ms < 0)
                ms = 0;
            if (timeout < 0 || ms < timeout)
                timeout = (int)ms;
        }
        rc = poll(pfd, (nfds_t)n, timeout);
        if (rc < 0 && errno != EINTR) {
            FAKEIBV_WARN("accept thread: poll failed: %s; it stops", strerror(errno));
            break;
        }
        if (rc > 0 && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
            break;
        for (i = 0; i < npend; i++) {
            if (rc > 0 && pfd[1 + nl + i].revents != 0) {
                fakeibv_accept_hello(&pend[i]);
            } else if (fakeibv_ms_until(&pend[i].deadline) <= 0) {
                FAKEIBV_WARN("port lid %u: peer connected but sent no hello in %d s; closing",
                             pend[i].lid, FAKEIBV_HELLO_MS / 1000);
                close(pend[i].fd);
                pend[i].fd = -1;
            }
        }
        for (i = 0; i < npend;) {
            if (pend[i].fd < 0)
                pend[i] = pend[--npend];
            else
                i++;
        }
        for (i = 0; rc > 0 && i < nl && npend < FAKEIBV_MAX_PENDING; i++) {
            int fd;

            if (!(pfd[1 + i].revents & POLLIN))
                continue;
            fd = accept4(fakeibv_listeners[i].fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED &&
                    errno != EMFILE && errno != ENFILE)
                    FAKEIBV_WARN("port lid %u: accept failed: %s", fakeibv_listeners[i].lid,
                                 strerror(errno));
                continue;
            }
            pend[npend].fd = fd;
            pend[npend].lid = fakeibv_listeners[i].lid;
            pend[npend].port = fakeibv_listeners[i].port;
            fakeibv_deadline_in(&pend[npend].deadline, FAKEIBV_HELLO_MS);
            npend++;
        }
    }
    for (i = 0; i < npend; i++)
        close(pend[i].fd);
    return NULL;
}

/* A QP reached RTR: make sure streams to this process get accepted. */
int fakeibv_acceptor_hold(void)
{
    int rc = 0;

    pthread_mutex_lock(&fakeibv_acc.lock);
    if (fakeibv_acc.users == 0 && !fakeibv_acc.running) {
        if (fakeibv_acc.wake[0] < 0 && pipe2(fakeibv_acc.wake, O_CLOEXEC) != 0)
            rc = errno;
        if (rc == 0)
            rc = fakeibv_thread_start(&fakeibv_acc.thread, FAKEIBV_THREAD_PREFIX "accept",
                                      fakeibv_accept_main, &fakeibv_acc.wake[0]);
        if (rc == 0)
            fakeibv_acc.running = 1;
        else
            FAKEIBV_WARN("accept thread: %s", strerror(rc));
    }
    if (rc == 0)
        fakeibv_acc.users++;
    pthread_mutex_unlock(&fakeibv_acc.lock);
    return rc;
}

/* A QP went back to RESET or was destroyed: the last one stops the thread. */
void fakeibv_acceptor_release(void)
{
    char b = 1, drain[16];

    pthread_mutex_lock(&fakeibv_acc.lock);
    if (fakeibv_acc.users > 0 && --fakeibv_acc.users == 0 && fakeibv_acc.running) {
        if (write(fakeibv_acc.wake[1], &b, 1) != 1)
            FAKEIBV_WARN("accept thread: cannot wake it: %s", strerror(errno));
        pthread_join(fakeibv_acc.thread, NULL);
        fakeibv_acc.running = 0;
        /* The thread saw the byte but left it: take it back out. */
        if (read(fakeibv_acc.wake[0], drain, 1) != 1)
            FAKEIBV_WARN("accept thread: wake pipe: %s", strerror(errno));
    }
    pthread_mutex_unlock(&fakeibv_acc.lock);
}

/* ---- connect -------------------------------------------------------------- */

/* GIDs fakeibv makes up carry the LID in their last two bytes:
 * fe80::fa4e:1b<dev>:<port>00:<lid> and ::ffff:127.0.<lid>. */
static int fakeibv_gid_has_lid(const union ibv_gid *g)
{
    static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

    if (g->raw[0] == 0xfe && g->raw[1] == 0x80 && g->raw[8] == 0xfa && g->raw[9] == 0x4e &&
        g->raw[10] == 0x1b)
        return 1;
    return memcmp(g->raw, v4, sizeof(v4)) == 0 && g->raw[12] == 127 && g->raw[13] == 0;
}

static int fakeibv_connect_to(const struct sockaddr_un *sa, socklen_t len, int *fd_p)
{
    /* A bound on connect's wait for room in a full backlog (no accept
     * thread on the far side yet); cleared afterwards, as data writes may
     * legitimately wait longer (RNR). */
    struct timeval tv = { 10, 0 }, none = { 0, 0 };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;

    if (fd < 0)
        return errno;
    if (len == 0) {
        close(fd);
        return ENAMETOOLONG;
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (const struct sockaddr *)sa, len) != 0) {
        rc = errno;
        close(fd);
        return rc;
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
    *fd_p = fd;
    return 0;
}

/* Connects to the port that ah names and sends the hello. With a GRH the
 * GID's own listener is tried first (a netdev address), then the LID that
 * a made-up GID carries. A refused connection is the normal sign of a dead
 * peer, so it is only logged at info level. */
int fakeibv_wire_connect(const struct ibv_ah_attr *ah, uint16_t src_lid, uint32_t src_qpn,
                         uint32_t dst_qpn, int *fd_p)
{
    struct sockaddr_un sa;
    struct fakeibv_wire_hello h = {
        .magic = FAKEIBV_WIRE_MAGIC,
        .version = FAKEIBV_WIRE_VERSION,
        .src_lid = src_lid,
        .src_qpn = src_qpn,
        .dst_qpn = dst_qpn,
        .pid = (int32_t)getpid(),
        .flags = fakeibv_config()->one_copy ? FAKEIBV_HELLO_ONE_COPY : 0,
        .cookie_addr = (uint64_t)(uintptr_t)&fakeibv_cookie,
    };
    int fd = -1, rc;

    pthread_once(&fakeibv_cookie_once, fakeibv_cookie_init);
    h.cookie = __atomic_load_n(&fakeibv_cookie, __ATOMIC_RELAXED) ^
               (uint64_t)__atomic_load_n(&fakeibv_cookie_broken, __ATOMIC_RELAXED);

    if (ah->is_global) {
        rc = fakeibv_connect_to(&sa, fakeibv_gid_addr(&ah->grh.dgid, &sa), &fd);
        if (rc != 0 && fakeibv_gid_has_lid(&ah->grh.dgid))
            rc = fakeibv_connect_to(&sa, fakeibv_lid_addr(fakeibv_lid_from_gid(&ah->grh.dgid),
                                                          &sa), &fd);
    } else {
        rc = fakeibv_connect_to(&sa, fakeibv_lid_addr(ah->dlid, &sa), &fd);
    }
    if (rc != 0) {
        FAKEIBV_INFO("qpn 0x%x: connect to %s%s failed: %s", src_qpn,
                     sa.sun_path[0] ? "" : "@", sa.sun_path[0] ? sa.sun_path : sa.sun_path + 1,
                     strerror(rc));
        return rc;
    }
    rc = fakeibv_io_write(fd, &h, sizeof(h));
    if (rc != 0) {
        close(fd);
        return rc;
    }
    *fd_p = fd;
    return 0;
}
