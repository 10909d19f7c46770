/*
 * fakeibv port listeners and stream set-up.
 *
 * Every port binds the abstract Unix name "\0fakeibv/lid/<lid>". Binding is
 * what reserves the LID on the host, so two processes (or two devices) can
 * never share one. A connecting requester sends a hello naming the
 * responder QP; the accept thread hands the stream to that QP.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fakeibv_internal.h"
#include "fakeibv_wire.h"

#define FAKEIBV_LID_MIN 1
#define FAKEIBV_LID_MAX 0xbfff /* Unicast LID range. */

static socklen_t fakeibv_lid_addr(uint16_t lid, struct sockaddr_un *sa)
{
    int n;

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* sun_path[0] stays 0: abstract namespace, nothing on disk to clean. */
    n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "fakeibv/lid/%u", lid);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
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

struct fakeibv_accept_arg {
    int fd;
    uint16_t lid;
};

/* Reads the hello with a deadline so a silent client cannot wedge the
 * accept thread, then gives the stream to the named QP. */
static void fakeibv_accept_one(int fd, uint16_t lid)
{
    struct fakeibv_wire_hello h;
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int rc;

    if (poll(&pfd, 1, 5000) != 1) {
        FAKEIBV_WARN("port lid %u: peer connected but sent no hello in 5 s; closing", lid);
        close(fd);
        return;
    }
    rc = fakeibv_io_read(fd, &h, sizeof(h));
    if (rc != 0 || h.magic != FAKEIBV_WIRE_MAGIC || h.version != FAKEIBV_WIRE_VERSION) {
        FAKEIBV_WARN("port lid %u: bad hello (rc %d magic 0x%x version %u); closing", lid, rc,
                     h.magic, h.version);
        close(fd);
        return;
    }
    if (fakeibv_qp_attach_inbound(h.dst_qpn, fd) != 0) {
        /* Unknown QP: like a real HCA we drop; the requester times out. */
        FAKEIBV_INFO("port lid %u: stream from lid %u qpn 0x%x for unknown qpn 0x%x dropped",
                     lid, h.src_lid, h.src_qpn, h.dst_qpn);
        close(fd);
        return;
    }
    FAKEIBV_TRACE("port lid %u: stream from lid %u qpn 0x%x -> qpn 0x%x", lid, h.src_lid,
                  h.src_qpn, h.dst_qpn);
}

static void *fakeibv_accept_main(void *argp)
{
    struct fakeibv_accept_arg arg = *(struct fakeibv_accept_arg *)argp;

    free(argp);
    for (;;) {
        int fd = accept4(arg.fd, NULL, NULL, SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            FAKEIBV_WARN("port lid %u: accept failed: %s; port stops accepting", arg.lid,
                         strerror(errno));
            return NULL;
        }
        fakeibv_accept_one(fd, arg.lid);
    }
}

/* Binds the first free LID from a pid-derived start and starts the
 * accept thread; the thread and listener live as long as the process. */
int fakeibv_port_listen(struct fakeibv_device *dev, int port)
{
    struct sockaddr_un sa;
    struct fakeibv_accept_arg *arg;
    pthread_t thr;
    uint32_t span = FAKEIBV_LID_MAX - FAKEIBV_LID_MIN + 1;
    uint32_t start = ((uint32_t)getpid() * 97u + (uint32_t)dev->index * 13u + (uint32_t)port) % span;
    uint32_t i;
    int fd, rc;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    for (i = 0; i < span; i++) {
        uint16_t lid = (uint16_t)(FAKEIBV_LID_MIN + (start + i) % span);

        if (bind(fd, (struct sockaddr *)&sa, fakeibv_lid_addr(lid, &sa)) == 0) {
            dev->ports[port - 1].lid = lid;
            break;
        }
        if (errno != EADDRINUSE) {
            rc = errno;
            FAKEIBV_WARN("%s port %d: bind of abstract socket failed: %s", dev->dev.name, port,
                         strerror(rc));
            close(fd);
            return rc;
        }
    }
    if (i == span || listen(fd, 128) != 0) {
        rc = i == span ? EADDRINUSE : errno;
        FAKEIBV_WARN("%s port %d: no LID could be bound: %s", dev->dev.name, port, strerror(rc));
        close(fd);
        return rc;
    }
    arg = malloc(sizeof(*arg));
    if (arg == NULL) {
        close(fd);
        return ENOMEM;
    }
    arg->fd = fd;
    arg->lid = dev->ports[port - 1].lid;
    rc = pthread_create(&thr, NULL, fakeibv_accept_main, arg);
    if (rc != 0) {
        FAKEIBV_WARN("%s port %d: accept thread: %s", dev->dev.name, port, strerror(rc));
        free(arg);
        close(fd);
        return rc;
    }
    pthread_detach(thr);
    dev->ports[port - 1].listen_fd = fd;
    return 0;
}

/* Connects to the port owning `lid` and sends the hello. A refused
 * connection is the normal sign of a dead peer, so it is only traced. */
int fakeibv_wire_connect(uint16_t lid, uint16_t src_lid, uint32_t src_qpn, uint32_t dst_qpn,
                         int *fd_p)
{
    struct sockaddr_un sa;
    struct fakeibv_wire_hello h = {
        .magic = FAKEIBV_WIRE_MAGIC,
        .version = FAKEIBV_WIRE_VERSION,
        .src_lid = src_lid,
        .src_qpn = src_qpn,
        .dst_qpn = dst_qpn,
    };
    int fd, rc;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    if (connect(fd, (struct sockaddr *)&sa, fakeibv_lid_addr(lid, &sa)) != 0) {
        rc = errno;
        FAKEIBV_INFO("qpn 0x%x: connect to lid %u failed: %s", src_qpn, lid, strerror(rc));
        close(fd);
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
