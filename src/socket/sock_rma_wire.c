/*
 * The RMA frame (sock_rma.h): its check word, and the blocking sends and
 * receives of the connection set-up (the data path is non-blocking, in
 * sock_rma_progress.c).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy/clock.h"
#include "socket/sock_rma.h"

uint64_t ferry_sock_rma_check(const ferry_sock_rma_frame_t *f)
{
    const uint64_t *w = (const uint64_t *)f;
    uint64_t h = 0x9e3779b97f4a7c15ULL;

    /* Every word before the check word, mixed so that a shifted stream does not pass. */
    for (size_t i = 0; i < offsetof(ferry_sock_rma_frame_t, check) / 8; i++) {
        h ^= w[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        h *= 0xbf58476d1ce4e5b9ULL;
    }
    return h;
}

void ferry_sock_rma_seal(ferry_sock_rma_frame_t *f)
{
    f->magic = FERRY_SOCK_RMA_MAGIC;
    f->check = ferry_sock_rma_check(f);
}

const char *ferry_sock_rma_frame_bad(const ferry_sock_rma_frame_t *f)
{
    if (f->magic != FERRY_SOCK_RMA_MAGIC)
        return "wrong magic (not a ferry RMA peer, or the stream lost its place)";
    if (f->check != ferry_sock_rma_check(f))
        return "bad check word (corrupted frame)";
    if (f->op < FERRY_SOCK_RMA_HELLO || f->op > FERRY_SOCK_RMA_BYE)
        return "unknown operation (mixed ferry builds?)";
    if (f->sig_op > FERRY_RMA_SIGNAL_ADD)
        return "unknown signal operation";
    return NULL;
}

const char *ferry_sock_rma_op_str(int op)
{
    static const char *const names[] = {
        "?", "HELLO", "REG", "PUT", "GET", "FLUSH", "ACK", "REPLY", "BYE",
    };

    return op >= 0 && op <= FERRY_SOCK_RMA_BYE ? names[op] : "?";
}

/* Wait for fd to be ready for events until deadline; FERRY_ERR_REMOTE at the deadline. */
static ferry_status_t ferry_sock_rma_wait(int fd, short events, uint64_t deadline)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    uint64_t now = ferry_px_now_ns();
    int r;

    if (now >= deadline)
        return FERRY_ERR_REMOTE;
    r = poll(&pfd, 1, (int)((deadline - now) / 1000000ULL) + 1);
    if (r < 0 && errno != EINTR)
        return FERRY_ERR_IO;
    return FERRY_OK;
}

ferry_status_t ferry_sock_rma_send_all(int fd, const void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = ferry_px_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    size_t done = 0;

    while (done < len) {
        ssize_t n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        ferry_status_t st;

        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return FERRY_ERR_REMOTE;
        st = ferry_sock_rma_wait(fd, POLLOUT, deadline);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

ferry_status_t ferry_sock_rma_recv_all(int fd, void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = ferry_px_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    size_t done = 0;

    while (done < len) {
        ssize_t n = recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
        ferry_status_t st;

        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return FERRY_ERR_REMOTE;
        st = ferry_sock_rma_wait(fd, POLLIN, deadline);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}
