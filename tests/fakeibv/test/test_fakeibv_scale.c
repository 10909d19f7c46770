/*
 * fakeibv at a thousand QPs: a process pair (fork) with FAKEIBV_SCALE_QPS
 * (default 1,024) RC QPs each, connected one to one. Every QP carries a
 * 4 KiB WRITE_WITH_IMM each way, checked byte for byte with its immediate,
 * and the threads fakeibv runs (named "fakeibv-*", /proc/self/task) stay
 * under a constant however many QPs there are: the engine's poll thread,
 * its workers (at most 16) and the accept thread. With a thread per QP
 * stream this pair would start three thousand threads per process.
 *
 * Prints: "scale: <pid role> <n> QPs: connected in <ms> ms, data both ways
 * on every QP in <ms> ms, fakeibv threads ... (in <ms> ms; bound <b>)".
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define MSG 4096
/* Poll thread + 16 workers + accept thread (fakeibv_engine.c, fakeibv_wire.c). */
#define THREAD_BOUND 18

struct side_info {
    uint16_t lid;
    uint64_t addr;
    uint32_t rkey;
};

static int fake_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[32] = "";
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue; /* Exited meanwhile. */
        if (fgets(comm, sizeof(comm), f) != NULL && strncmp(comm, "fakeibv-", 8) == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

static int xfer_all(int fd, void *buf, size_t len, int out)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);

        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

#define FAIL(...)                                                                    \
    do {                                                                             \
        fprintf(stderr, "scale[%s]: ", role);                                        \
        fprintf(stderr, __VA_ARGS__);                                                \
        fprintf(stderr, "\n");                                                       \
        return 1;                                                                    \
    } while (0)

/* One side: n QPs towards the peer behind (rfd, wfd). Returns 0 when every
 * check held. */
static int run_side(const char *role, int n, int rfd, int wfd, unsigned seed)
{
    struct fx f;
    struct ibv_qp **qp = calloc((size_t)n, sizeof(*qp));
    uint32_t *qpn = calloc((size_t)n, sizeof(*qpn)), *rqpn = calloc((size_t)n, sizeof(*rqpn));
    unsigned char *src = malloc((size_t)n * MSG), *dst = calloc((size_t)n, MSG);
    struct ibv_wc *wc = calloc((size_t)2 * n, sizeof(*wc));
    struct side_info me, peer;
    struct ibv_mr *smr, *dmr;
    struct ibv_cq *cq;
    struct timespec t0;
    long t_conn, t_data, t_destroy;
    int i, got = 0, sends = 0, recvs = 0, th_conn, th_data, th_end, th_engine;
    char b = 1;

    if (qp == NULL || qpn == NULL || rqpn == NULL || src == NULL || dst == NULL || wc == NULL)
        FAIL("out of memory");
    if (fx_open(&f) != 0)
        FAIL("cannot open the device");
    cq = ibv_create_cq(f.ctx, 2 * n + 16, NULL, NULL, 0);
    for (i = 0; i < n; i++)
        fx_fill(src + (size_t)i * MSG, MSG, seed + (unsigned)i);
    smr = ibv_reg_mr(f.pd, src, (size_t)n * MSG, IBV_ACCESS_LOCAL_WRITE);
    dmr = ibv_reg_mr(f.pd, dst, (size_t)n * MSG,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (cq == NULL || smr == NULL || dmr == NULL)
        FAIL("CQ or MR: %s", strerror(errno));
    for (i = 0; i < n; i++) {
        struct ibv_qp_init_attr a;
        struct ibv_recv_wr rw, *bad;

        memset(&a, 0, sizeof(a));
        a.send_cq = a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = a.cap.max_recv_wr = 4;
        a.cap.max_send_sge = a.cap.max_recv_sge = 1;
        qp[i] = ibv_create_qp(f.pd, &a);
        if (qp[i] == NULL || fx_to_init(qp[i], IBV_ACCESS_REMOTE_WRITE) != 0)
            FAIL("QP %d: create or INIT: %s", i, strerror(errno));
        qpn[i] = qp[i]->qp_num;
        /* A 0-SGE receive for the peer's WRITE_WITH_IMM, posted before any
         * stream exists. */
        memset(&rw, 0, sizeof(rw));
        rw.wr_id = (uint64_t)i;
        if (ibv_post_recv(qp[i], &rw, &bad) != 0)
            FAIL("QP %d: post_recv", i);
    }
    me.lid = f.lid;
    me.addr = (uint64_t)(uintptr_t)dst;
    me.rkey = dmr->rkey;
    if (xfer_all(wfd, &me, sizeof(me), 1) != 0 ||
        xfer_all(wfd, qpn, (size_t)n * sizeof(*qpn), 1) != 0 ||
        xfer_all(rfd, &peer, sizeof(peer), 0) != 0 ||
        xfer_all(rfd, rqpn, (size_t)n * sizeof(*rqpn), 0) != 0)
        FAIL("exchange with the peer failed");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < n; i++)
        if (fx_to_rtr(qp[i], peer.lid, rqpn[i], 12) != 0 || fx_to_rts(qp[i], 14, 7, 7) != 0)
            FAIL("QP %d: RTR/RTS: %s", i, strerror(errno));
    t_conn = fx_ms_since(&t0);
    th_conn = fake_threads();
    for (i = 0; i < n; i++)
        if (fx_write(qp[i], (uint64_t)i, IBV_WR_RDMA_WRITE_WITH_IMM, src + (size_t)i * MSG, MSG,
                     smr->lkey, peer.addr + (uint64_t)i * MSG, peer.rkey, IBV_SEND_SIGNALED,
                     htonl(0x5ca1e000u + (uint32_t)i)) != 0)
            FAIL("QP %d: post_send", i);
    while (got < 2 * n) {
        int k = fx_poll(cq, wc, 1, 20000);

        if (k != 1)
            FAIL("%d of %d completions within 20 s", got, 2 * n);
        got++;
        if (wc[0].status != IBV_WC_SUCCESS)
            FAIL("wr_id %llu opcode %d: %s", (unsigned long long)wc[0].wr_id, wc[0].opcode,
                 ibv_wc_status_str(wc[0].status));
        if (wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            i = (int)wc[0].wr_id;
            if (wc[0].qp_num != qpn[i] || wc[0].byte_len != MSG ||
                ntohl(wc[0].imm_data) != 0x5ca1e000u + (uint32_t)i)
                FAIL("QP %d: receive CQE qpn 0x%x len %u imm 0x%x", i, wc[0].qp_num,
                     wc[0].byte_len, ntohl(wc[0].imm_data));
            recvs++;
        } else {
            sends++;
        }
    }
    t_data = fx_ms_since(&t0) - t_conn;
    th_data = fake_threads();
    if (sends != n || recvs != n)
        FAIL("%d send and %d receive completions, %d each expected", sends, recvs, n);
    {
        unsigned char *want = malloc(MSG);

        for (i = 0; i < n; i++) {
            fx_fill(want, MSG, (seed ^ 1u) + (unsigned)i);
            if (memcmp(want, dst + (size_t)i * MSG, MSG) != 0)
                FAIL("QP %d: the 4 KiB the peer wrote differ", i);
        }
        free(want);
    }
    /* Both sides done before either tears its QPs down. */
    if (xfer_all(wfd, &b, 1, 1) != 0 || xfer_all(rfd, &b, 1, 0) != 0)
        FAIL("final handshake failed");
    th_engine = fakeibv_engine_threads();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < n; i++)
        ibv_destroy_qp(qp[i]);
    t_destroy = fx_ms_since(&t0);
    th_end = fake_threads();
    printf("scale: %s %d QPs: connected in %ld ms, data both ways on every QP in %ld ms, "
           "fakeibv threads %d connected, %d after the data (engine %d), %d after destroy "
           "(in %ld ms; bound %d)\n",
           role, n, t_conn, t_data, th_conn, th_data, th_engine, th_end, t_destroy,
           THREAD_BOUND);
    fflush(stdout);
    if (th_conn > THREAD_BOUND || th_data > THREAD_BOUND)
        FAIL("%d / %d fakeibv threads, more than %d", th_conn, th_data, THREAD_BOUND);
    if (th_end != 0)
        FAIL("%d fakeibv threads left after the last QP was destroyed", th_end);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    ibv_destroy_cq(cq);
    fx_close(&f);
    free(qp);
    free(qpn);
    free(rqpn);
    free(src);
    free(dst);
    free(wc);
    return 0;
}

int main(void)
{
    const char *e = getenv("FAKEIBV_SCALE_QPS");
    int n = e != NULL ? atoi(e) : 1024, p2c[2], c2p[2], st = 0, rc;
    pid_t child;

    if (n < 1 || n > 4000) {
        fprintf(stderr, "FAKEIBV_SCALE_QPS must be 1..4000\n");
        return 2;
    }
    if (pipe(p2c) != 0 || pipe(c2p) != 0)
        return 2;
    child = fork();
    if (child < 0)
        return 2;
    if (child == 0) {
        alarm(60);
        close(p2c[1]);
        close(c2p[0]);
        _exit(run_side("child", n, p2c[0], c2p[1], 2));
    }
    alarm(60);
    close(p2c[0]);
    close(c2p[1]);
    rc = run_side("parent", n, c2p[0], p2c[1], 3);
    if (rc != 0)
        kill(child, SIGKILL);
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "scale: the child failed (status 0x%x)\n", st);
        rc = 1;
    }
    return rc;
}
