/* Socket options every data stream gets (sock_socket.c), read back with getsockopt. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "socket/sock.h"

/* A connected loopback TCP pair: the options are TCP ones, a socketpair has none. */
typedef struct tcp_pair {
    int client, server;
} tcp_pair_t;

static void tcp_pair_open(tcp_pair_t *p)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(lfd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(lfd, 1), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    p->client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(p->client >= 0);
    assert_int_equal(connect(p->client, (struct sockaddr *)&a, sizeof(a)), 0);
    p->server = accept(lfd, NULL, NULL);
    assert_true(p->server >= 0);
    close(lfd);
}

static void tcp_pair_close(tcp_pair_t *p)
{
    close(p->client);
    close(p->server);
}

static int get_int(int fd, int level, int name)
{
    int v = -12345;
    socklen_t len = sizeof(v);

    assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

static void tune_with_timeout(int timeout_s, int fd)
{
    memset(&ferry_sock_state.cfg, 0, sizeof(ferry_sock_state.cfg));
    ferry_sock_state.cfg.sndbuf = -1;
    ferry_sock_state.cfg.rcvbuf = -1;
    ferry_sock_state.cfg.socket_timeout_s = timeout_s;
    assert_int_equal(ferry_sock_fd_tune(fd, "127.0.0.1:test"), FERRY_OK);
}

/* The default 30 s: keepalive after 15 s idle, 3 probes 5 s apart, 30 s for unacked bytes. */
static void test_timeout_default(void **state)
{
    tcp_pair_t p;

    tcp_pair_open(&p);
    tune_with_timeout(30, p.client);
    tune_with_timeout(30, p.server);
    assert_int_equal(get_int(p.client, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_KEEPIDLE), 15);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_KEEPINTVL), 5);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_KEEPCNT), 3);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_USER_TIMEOUT), 30000);
    assert_int_equal(get_int(p.server, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(get_int(p.server, IPPROTO_TCP, TCP_USER_TIMEOUT), 30000);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_NODELAY), 1);
    tcp_pair_close(&p);
}

/* Short timeouts still give whole-second probes, and the total stays near the timeout. */
static void test_timeout_short(void **state)
{
    tcp_pair_t p;

    tcp_pair_open(&p);
    tune_with_timeout(1, p.client);
    assert_int_equal(get_int(p.client, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_KEEPIDLE), 1);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_KEEPINTVL), 1);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_USER_TIMEOUT), 1000);
    tune_with_timeout(7, p.server);
    assert_int_equal(get_int(p.server, IPPROTO_TCP, TCP_KEEPIDLE), 3);
    assert_int_equal(get_int(p.server, IPPROTO_TCP, TCP_KEEPINTVL), 1);
    assert_int_equal(get_int(p.server, IPPROTO_TCP, TCP_KEEPCNT), 3);
    assert_int_equal(get_int(p.server, IPPROTO_TCP, TCP_USER_TIMEOUT), 7000);
    tcp_pair_close(&p);
}

/* NCCL_FERRY_SOCKET_TIMEOUT_S=0 leaves the kernel's defaults: no keepalive, no user timeout. */
static void test_timeout_off(void **state)
{
    tcp_pair_t p;

    tcp_pair_open(&p);
    tune_with_timeout(0, p.client);
    assert_int_equal(get_int(p.client, SOL_SOCKET, SO_KEEPALIVE), 0);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
    assert_int_equal(get_int(p.client, IPPROTO_TCP, TCP_NODELAY), 1);
    tcp_pair_close(&p);
}

/* Set before connect() (the connect side tunes its fd first): the options survive it. */
static void test_timeout_before_connect(void **state)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), sfd;

    assert_true(lfd >= 0 && fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(lfd, 1), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    tune_with_timeout(12, fd);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    sfd = accept(lfd, NULL, NULL);
    assert_true(sfd >= 0);
    assert_int_equal(get_int(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(get_int(fd, IPPROTO_TCP, TCP_KEEPIDLE), 6);
    assert_int_equal(get_int(fd, IPPROTO_TCP, TCP_KEEPINTVL), 2);
    assert_int_equal(get_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 12000);
    close(sfd);
    close(fd);
    close(lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeout_default),
        cmocka_unit_test(test_timeout_short),
        cmocka_unit_test(test_timeout_off),
        cmocka_unit_test(test_timeout_before_connect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
