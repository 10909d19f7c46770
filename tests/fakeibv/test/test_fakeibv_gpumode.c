/*
 * fakeibv unit tests, GPU mode without a GPU: a mock libcuda.so.1
 * (mock_cuda/) provides "device memory" the CPU cannot touch, so these
 * tests fail if fakeibv ever reads or writes device memory directly instead
 * of through the CUDA copy calls. Covers RDMA WRITE into, READ out of and
 * the 1-byte flush READ from device memory, via ibv_reg_mr and via
 * ibv_reg_dmabuf_mr (iova = device pointer), and WRITE_WITH_IMM between
 * two QPs into device memory.
 */
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define N (3u << 20) /* Not a multiple of fakeibv's 1 MiB bounce buffer. */

struct gfx {
    struct fx f;
    struct ibv_qp *self;
    char *h;
    struct ibv_mr *hmr;
    void *d;
    void *(*shadow)(const void *);
    int (*live_streams)(void);
};

static int setup(void **state)
{
    static struct gfx g;
    void *(*dmalloc)(size_t);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);

    if (lib == NULL)
        return -1;
    dmalloc = (void *(*)(size_t))dlsym(lib, "mockcuda_malloc");
    g.shadow = (void *(*)(const void *))dlsym(lib, "mockcuda_shadow");
    g.live_streams = (int (*)(void))dlsym(lib, "mockcuda_live_streams");
    if (dmalloc == NULL || g.shadow == NULL || g.live_streams == NULL || fx_open(&g.f) != 0)
        return -1;
    g.d = dmalloc(N);
    g.h = malloc(2 * (size_t)N);
    g.hmr = ibv_reg_mr(g.f.pd, g.h, 2 * (size_t)N, IBV_ACCESS_LOCAL_WRITE);
    g.self = fx_qp(&g.f, 16, 0);
    if (g.d == NULL || g.hmr == NULL || g.self == NULL ||
        fx_connect(g.self, g.f.lid, g.self->qp_num, 7) != 0)
        return -1;
    *state = &g;
    return 0;
}

static int teardown(void **state)
{
    struct gfx *g = *state;

    ibv_destroy_qp(g->self);
    ibv_dereg_mr(g->hmr);
    free(g->h);
    fx_close(&g->f);
    return 0;
}

static void one_op(struct gfx *g, enum ibv_wr_opcode op, void *l, uint32_t len, uint64_t r,
                   uint32_t rkey)
{
    struct ibv_wc wc;

    assert_int_equal(fx_write(g->self, 1, op, l, len, g->hmr->lkey, r, rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(g->f.cq, &wc, 1, 10000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
}

static void roundtrip(struct gfx *g, struct ibv_mr *dmr)
{
    char *src = g->h, *dst = g->h + N;
    size_t i;

    for (i = 0; i < N; i++)
        src[i] = (char)(i * 13 + 1);
    memset(dst, 0, N);
    memset(g->shadow(g->d), 0, N);
    one_op(g, IBV_WR_RDMA_WRITE, src, N, (uintptr_t)g->d, dmr->rkey);
    assert_memory_equal(g->shadow(g->d), src, N);
    one_op(g, IBV_WR_RDMA_READ, dst, N, (uintptr_t)g->d, dmr->rkey);
    assert_memory_equal(dst, src, N);
    /* NCCL's flush: a 1-byte READ from device memory. */
    dst[0] = 0;
    one_op(g, IBV_WR_RDMA_READ, dst, 1, (uintptr_t)g->d + 77, dmr->rkey);
    assert_int_equal(dst[0], src[77]);
}

static void test_reg_mr_device_pointer(void **state)
{
    struct gfx *g = *state;
    struct ibv_mr *dmr = ibv_reg_mr(g->f.pd, g->d, N, IBV_ACCESS_LOCAL_WRITE |
                                                          IBV_ACCESS_REMOTE_WRITE |
                                                          IBV_ACCESS_REMOTE_READ);

    assert_non_null(dmr);
    roundtrip(g, dmr);
    ibv_dereg_mr(dmr);
}

static void test_dmabuf_iova_device_pointer(void **state)
{
    struct gfx *g = *state;
    /* A dma-buf as tests/fakecuda makes them: ibv_reg_dmabuf_mr refuses other files. */
    int fd = memfd_create("fakecuda-dmabuf", MFD_CLOEXEC);
    struct ibv_mr *dmr = ibv_reg_dmabuf_mr(g->f.pd, 0, N, (uintptr_t)g->d, fd,
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                               IBV_ACCESS_REMOTE_READ);

    assert_non_null(dmr);
    roundtrip(g, dmr);
    ibv_dereg_mr(dmr);
    close(fd);
}

static void test_write_imm_into_device_memory(void **state)
{
    struct gfx *g = *state;
    struct ibv_qp *a = fx_qp(&g->f, 8, 0), *b = fx_qp(&g->f, 8, 0);
    struct ibv_mr *dmr = ibv_reg_mr(g->f.pd, g->d, N, IBV_ACCESS_LOCAL_WRITE |
                                                          IBV_ACCESS_REMOTE_WRITE);
    struct ibv_recv_wr rwr = { .wr_id = 5 }, *bad;
    struct ibv_wc wc[2];
    size_t i;

    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(dmr);
    assert_int_equal(fx_connect(a, g->f.lid, b->qp_num, 7), 0);
    assert_int_equal(fx_connect(b, g->f.lid, a->qp_num, 7), 0);
    assert_int_equal(ibv_post_recv(b, &rwr, &bad), 0);
    for (i = 0; i < 100000; i++)
        g->h[i] = (char)(i + 3);
    assert_int_equal(fx_write(a, 6, IBV_WR_RDMA_WRITE_WITH_IMM, g->h, 100000, g->hmr->lkey,
                              (uintptr_t)g->d + 4096, dmr->rkey, IBV_SEND_SIGNALED,
                              htobe32(100000)),
                     0);
    assert_int_equal(fx_poll(g->f.cq, wc, 2, 10000), 2);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
    assert_memory_equal((char *)g->shadow(g->d) + 4096, g->h, 100000);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_dereg_mr(dmr);
    /* Copy streams are per thread: the engine's workers (alive while the
     * self QP is connected) may each hold one, the QPs none of their own;
     * the main thread copies nothing. */
    assert_true(g->live_streams() <= fakeibv_engine_threads());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reg_mr_device_pointer),
        cmocka_unit_test(test_dmabuf_iova_device_pointer),
        cmocka_unit_test(test_write_imm_into_device_memory),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
