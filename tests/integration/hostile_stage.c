/*
 * Forged connect state in a connect handle. NCCL passes connect() the bytes
 * the peer's listen() produced, through its bootstrap, from another host,
 * and connect() keeps a reference to its own state in bytes 48..63 of the
 * same handle between calls. Those bytes used to be a pointer and a cookie
 * made of the token (which travels in the handle) and the pointer: anyone
 * who could write a handle could make connect() follow any address. Now
 * they name a slot of the connecting process's table, which refuses what it
 * did not hand out. The test writes only raw bytes at offsets 48..63, so it
 * builds against either layout.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "hostile.h"

#define STAGE_OFF 48 /* Where the connect state lives in a ferry handle, both backends. */
#define STAGE_LEN 16
#define STAGE_REFUSED "is not one that listen() produced"

static ncclResult_t stage_connect(hostile_env_t *e, void *handle, void **comm_p)
{
    ncclNetDeviceHandle_v11_t *dh = NULL;

    *comm_p = NULL;
    return e->plugin.net->connect(e->ctx_c, 0, handle, comm_p, &dh);
}

/* A socket bound to the handle's address, not listening: connects to it are refused. */
static int stage_dead_port(const ferry_sock_handle_t *h, uint16_t *port_n)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd;

    memset(&ss, 0, sizeof(ss));
    if (h->family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        s6->sin6_scope_id = h->scope_id;
        memcpy(&s6->sin6_addr, h->addr, 16);
        len = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        memcpy(&s4->sin_addr, h->addr, 4);
        len = sizeof(*s4);
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FIT_CHECK(fd >= 0, "socket: %s", strerror(errno));
    FIT_CHECK(bind(fd, (struct sockaddr *)&ss, len) == 0, "bind: %s", strerror(errno));
    FIT_CHECK(getsockname(fd, (struct sockaddr *)&ss, &len) == 0, "getsockname: %s",
              strerror(errno));
    *port_n = ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port;
    return fd;
}

/*
 * base with `ref` at bytes 48..63: connect() must return ncclInvalidUsage
 * and no comm, and WARN that the handle is not listen()'s, naming the
 * handle's address and the reason.
 */
static void stage_expect_refused(hostile_env_t *e, const char *base, const void *ref,
                                 const char *what, const char *reason)
{
    char h[NCCL_NET_HANDLE_MAXSIZE], line[4096], addr[80];
    void *comm = NULL;
    ncclResult_t rc;
    int from = fit_log_lines();

    memcpy(h, base, sizeof(h));
    memcpy(h + STAGE_OFF, ref, STAGE_LEN);
    fflush(NULL); /* A crash below must not lose what passed. */
    rc = stage_connect(e, h, &comm);
    FIT_CHECK(comm == NULL, "%s: connect returned a comm", what);
    FIT_CHECK(rc == ncclInvalidUsage, "%s: connect returned %d (%s), expected ncclInvalidUsage",
              what, (int)rc, fit_result_str(rc));
    fit_handle_addr(h, addr, sizeof(addr));
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, STAGE_REFUSED, reason, addr, line,
                           sizeof(line)) >= 0,
              "%s: no WARN says the handle is not listen()'s (%s) and names %s", what, reason,
              addr);
    printf("  %s:\n    %s\n", what, line);
}

/* A handle whose connect state is a pointer p and the old cookie (token ^ p). */
static void stage_old_pointer(const char *handle, uint64_t p, unsigned char *ref)
{
    const ferry_sock_handle_t *h = (const ferry_sock_handle_t *)handle;
    uint64_t cookie = h->token ^ p;

    memcpy(ref, &cookie, 8);
    memcpy(ref + 8, &p, 8);
}

/* In a forked child: the parent's live connect state must be refused there. */
static void stage_in_child(hostile_env_t *e, const char *live_handle)
{
    fit_bound_t b;
    int status = 0;
    pid_t pid, got = 0;

    fflush(NULL);
    pid = fork();
    FIT_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        fit_set_role("hostile-child");
        stage_expect_refused(e, live_handle, live_handle + STAGE_OFF,
                             "in a forked child, the parent's connect in progress",
                             "not this one's");
        fit_child_exit(0);
    }
    fit_bound_init(&b, "the forked child's connect", 10.0, 100000000L);
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && fit_bound_try_step(&b))
        usleep(1000);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        FIT_CHECK(0, "the forked child's connect did not return within 10 s");
    }
    FIT_CHECK(got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the forked child failed (status 0x%x): the parent's connect state was taken "
              "there", status);
}

/*
 * Forged connect state (slot ids, pointers with their cookie, random, 0,
 * large, a live connect's with another key or another listener's token, a
 * parent's in a forked child, a finished connect's): each refused with
 * ncclInvalidUsage and a WARN, never followed; the connect the live state
 * belongs to goes on to its own end; a real peer connects and its data
 * arrives byte for byte.
 */
void hostile_case_forged_stage(hostile_env_t *e)
{
    char dead[NCCL_NET_HANDLE_MAXSIZE], snap[NCCL_NET_HANDLE_MAXSIZE], addr[80], line[4096];
    unsigned char ref[STAGE_LEN], zero[STAGE_LEN] = { 0 };
    ferry_sock_handle_t *dh = (ferry_sock_handle_t *)dead;
    void *send_comm = NULL, *recv_comm = NULL, *comm = NULL;
    uint32_t u32;
    uint64_t u64;
    ncclResult_t rc = ncclSuccess;
    fit_bound_t b;
    int dead_fd, i, cases = 0, from;
    double t0;

    fit_log_expect(STAGE_REFUSED);

    /* Pointers with the cookie the old layout checked: followed, they crash. */
    stage_old_pointer(e->handle, 0xdeadbeefULL, ref);
    stage_expect_refused(e, e->handle, ref, "pointer 0xdeadbeef with its cookie",
                         "no connect in this process has used");
    cases++;
    stage_old_pointer(e->handle, 0xffff800000001000ULL, ref);
    stage_expect_refused(e, e->handle, ref, "kernel-space pointer with its cookie",
                         "no connect in this process has used");
    cases++;
    for (i = 0; i < STAGE_LEN; i++)
        ref[i] = (unsigned char)rand();
    stage_expect_refused(e, e->handle, ref, "16 random bytes", "no connect in this process");
    cases++;
    /* Slot ids: 0 (no slot), the largest. */
    memset(ref, 0, sizeof(ref));
    u32 = 1;
    memcpy(ref + 4, &u32, 4);
    u64 = 0x1234567890abcdefULL;
    memcpy(ref + 8, &u64, 8);
    stage_expect_refused(e, e->handle, ref, "slot id 0, generation 1", "connect slot 0");
    cases++;
    u32 = 0xffffffffU;
    memcpy(ref, &u32, 4);
    stage_expect_refused(e, e->handle, ref, "slot id 4294967295, generation 1",
                         "connect slot 4294967295");
    cases++;

    /*
     * A connect that stays in progress: to a port that refuses, retried
     * (NCCL_SOCKET_RETRY_CNT x NCCL_SOCKET_RETRY_SLEEP_MSEC). Its handle now
     * holds a live reference.
     */
    memcpy(dead, e->handle, sizeof(dead));
    dead_fd = stage_dead_port(dh, &dh->port);
    dh->token ^= 0x5a5a5a5a5a5a5a5aULL; /* Another listener's. */
    fit_handle_addr(dead, addr, sizeof(addr));
    rc = stage_connect(e, dead, &comm);
    FIT_CHECK(rc == ncclSuccess && comm == NULL, "connect to the refusing port %s returned %d "
              "(%s), comm %p: expected a connect in progress", addr, (int)rc,
              fit_result_str(rc), comm);
    FIT_CHECK(memcmp(dead + STAGE_OFF, zero, STAGE_LEN) != 0, "connect in progress to %s left "
              "no connect state in the handle", addr);
    memcpy(snap, dead, sizeof(snap));
    fit_pass("connect to the refusing port %s is in progress, its state in bytes 48..63", addr);

    memcpy(ref, snap + STAGE_OFF, STAGE_LEN);
    ref[STAGE_LEN - 1] ^= 0x80;
    stage_expect_refused(e, snap, ref, "the live connect's slot with another key",
                         "its key does not match");
    cases++;
    stage_expect_refused(e, e->handle, snap + STAGE_OFF,
                         "the live connect's state in another listener's handle",
                         "goes to another listener");
    cases++;
    stage_in_child(e, snap);
    fit_pass("in a forked child the parent's connect in progress is refused");
    cases++;

    /* The live connect goes on to its own end: the port keeps refusing. */
    fit_log_expect(addr);
    from = fit_log_lines();
    t0 = fit_now();
    fit_bound_init(&b, "the connect to the refusing port to give up", 20.0, 100000000L);
    while ((rc = stage_connect(e, dead, &comm)) == ncclSuccess && comm == NULL &&
           fit_bound_try_step(&b))
        usleep(1000);
    FIT_CHECK(rc == ncclRemoteError && comm == NULL, "connect to the refusing port %s ended "
              "with %d (%s), comm %p: expected ncclRemoteError", addr, (int)rc,
              fit_result_str(rc), comm);
    FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "connect to", addr, "failed", line,
                           sizeof(line)) >= 0, "no WARN says the connect to %s failed", addr);
    FIT_CHECK(memcmp(dead + STAGE_OFF, zero, STAGE_LEN) == 0, "the failed connect left its "
              "state in the handle");
    printf("  %s\n", line);
    fit_pass("after the forged ones, the live connect to %s went on to its own end in %.2f s: "
             "ncclRemoteError", addr, fit_now() - t0);
    close(dead_fd);

    /* Its state, kept from before, is stale now. */
    stage_expect_refused(e, snap, snap + STAGE_OFF, "the state of a connect that has ended",
                         "so the handle is stale");
    cases++;
    fit_pass("%d kinds of forged connect state: connect -> ncclInvalidUsage + WARN, nothing "
             "followed", cases);
    fit_log_expect_clear();

    hostile_real_connect(e, &send_comm, &recv_comm);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)4 << 20, 4747,
                      "on a real connection after the forged connect state");
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}
