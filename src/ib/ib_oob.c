/*
 * The out-of-band TCP connection's pieces: non-blocking partial sends and
 * receives for the handshake state machines (ib_connect.c, ib_accept.c),
 * the keepalive that makes a vanished host an error in
 * NCCL_FERRY_IB_PEER_TIMEOUT_S, and the normal-close marker.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib/ib_comm.h"
#include "proxy/req.h"

void ferry_ib_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, (unsigned)ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

uint64_t ferry_ib_random64(void)
{
    uint64_t v = 0;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
        v = ferry_px_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
    return v != 0 ? v : 1;
}

int ferry_ib_oob_send(int fd, const void *buf, size_t len, size_t *done_p)
{
    while (*done_p < len) {
        ssize_t n = send(fd, (const char *)buf + *done_p, len - *done_p,
                         MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
        }
        *done_p += (size_t)n;
    }
    return 1;
}

int ferry_ib_oob_recv(int fd, void *buf, size_t len, size_t *got_p)
{
    while (*got_p < len) {
        ssize_t n = recv(fd, (char *)buf + *got_p, len - *got_p, MSG_DONTWAIT);

        if (n == 0)
            return FERRY_IB_OOB_EOF;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
        }
        *got_p += (size_t)n;
    }
    return 1;
}

const char *ferry_ib_oob_strerror(int rc)
{
    if (rc == FERRY_IB_OOB_EOF)
        return "the peer closed the connection";
    return rc < 0 ? strerror(-rc) : "no error";
}

void ferry_ib_oob_tune(int fd, int peer_timeout_s)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (peer_timeout_s > 0) {
        int idle = peer_timeout_s > 2 ? peer_timeout_s / 2 : 1;
        int intvl = 1;
        int cnt = peer_timeout_s - idle > 1 ? peer_timeout_s - idle : 1;
        unsigned user_ms = (unsigned)peer_timeout_s * 1000U;

        /* A host that vanishes sends no FIN: keepalive probes find it in about peer_timeout_s. */
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms));
    }
}

void ferry_ib_oob_bye(int fd)
{
    char bye = FERRY_IB_OOB_BYE;

    if (fd < 0)
        return;
    /* Best effort; a full socket buffer cannot happen (nothing else is ever sent). */
    (void)send(fd, &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_RDWR);
    close(fd);
}

int ferry_ib_handle_sockaddr(const ferry_ib_handle_t *h, struct sockaddr_storage *ss,
                             socklen_t *len_p)
{
    return ferry_sockaddr_from_wire(ss, len_p, h->family, h->port, h->addr, h->scope_id);
}
