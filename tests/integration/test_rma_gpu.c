/*
 * test_rma_socket's gpu case (test_rma.h): the window and the signal words
 * in GPU memory on tests/fakecuda.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness_cuda.h"
#include "test_rma.h"

/* GPU memory through the stand-in driver: window and signals on the "device". */
#define GPU_WIN   (4u << 20)
#define GPU_PLAIN (2u << 20)

static uint64_t gpu_word(fit_cu_t *cu, unsigned long long sig, int i)
{
    uint64_t v = 0;

    FIT_CHECK(cu->dtoh(&v, sig + 8u * (unsigned)i, 8) == 0, "cuMemcpyDtoH of a signal word");
    return v;
}

static void gpu_check(fit_cu_t *cu, unsigned long long dev, size_t n, int src, int round,
                      const char *what)
{
    unsigned char *host = malloc(n);

    FIT_CHECK(host != NULL && cu->dtoh(host, dev, n) == 0, "cuMemcpyDtoH of %zu bytes", n);
    check_bytes(host, n, src, round, what);
    free(host);
}

void case_gpu(void)
{
    static const size_t sizes[] = { 8, (1u << 20) + 3 };
    int next = (my_rank + 1) % NRANKS, prev = (my_rank + NRANKS - 1) % NRANKS;
    int far = (my_rank + 2) % NRANKS, from_far = (my_rank + NRANKS - 2) % NRANKS;
    unsigned long long win = 0, sig = 0;
    void *lc, *handles[NRANKS], *ctx, *coll, *src_mh, *win_mh, *sig_mh, *req;
    ncclNetProperties_v12_t props;
    unsigned char *src = malloc(GPU_WIN);
    uint64_t want = 0;
    fit_cu_t cu;

    FIT_NCCL(rma_init(&ctx));
    FIT_NCCL(v14->getProperties(0, &props));
    FIT_CHECK(props.ptrSupport == (NCCL_PTR_HOST | NCCL_PTR_CUDA), "ptrSupport %d with GPU "
              "staging", props.ptrSupport);
    fit_cu_open(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), &cu);
    FIT_CHECK(src != NULL && cu.alloc(&win, GPU_WIN) == 0 && cu.alloc(&sig, 8 * NSIG_WORDS) == 0,
              "allocations");
    FIT_CHECK(cu.htod(sig, (uint64_t[NSIG_WORDS]){ 0 }, 8 * NSIG_WORDS) == 0, "zero signals");
    FIT_NCCL(v14->listen(ctx, 0, sh->handles[my_rank], &lc));
    barrier(0);
    for (int r = 0; r < NRANKS; r++)
        handles[r] = sh->handles[r];
    FIT_NCCL(v14->connect(ctx, handles, NRANKS, my_rank, lc, &coll));
    FIT_NCCL(v14->closeListen(lc));
    FIT_NCCL(rma_create(coll, &rctx));
    FIT_NCCL(v14->regMrSym(coll, src, GPU_WIN, NCCL_PTR_HOST, 0, &src_mh));
    FIT_NCCL(v14->regMrSym(coll, (void *)(uintptr_t)win, GPU_WIN, NCCL_PTR_CUDA, 0, &win_mh));
    FIT_NCCL(v14->regMrSym(coll, (void *)(uintptr_t)sig, 8 * NSIG_WORDS, NCCL_PTR_CUDA, 0,
                           &sig_mh));
    for (int round = 0; round < 2; round++) {
        size_t size = sizes[round];
        double end = fit_now() + WAIT_S;

        fill(src, size, my_rank, round);
        FIT_NCCL(rma_iput_signal(0, src_mh, size, 0, win_mh, (uint32_t)next, 8u * (unsigned)my_rank,
                                 sig_mh, 5, NCCL_NET_SIGNAL_OP_ADD, &req));
        FIT_NCCL(wait_req(coll, req, "iputSignal into GPU memory"));
        want += 5;
        while (gpu_word(&cu, sig, prev) != want) {
            FIT_CHECK(fit_now() < end, "GPU signal word %llu, want %llu",
                      (unsigned long long)gpu_word(&cu, sig, prev), (unsigned long long)want);
            rma_progress();
        }
        gpu_check(&cu, win, size, prev, round, "iputSignal payload in GPU memory");
        barrier(1 + 3 * round);
        memset(src, 0, size);
        FIT_NCCL(rma_iget(0, win_mh, size, 0, src_mh, (uint32_t)next, &req));
        FIT_NCCL(wait_req(coll, req, "iget from GPU memory"));
        check_bytes(src, size, my_rank, round, "iget from GPU memory");
        /* From GPU memory (holding prev's data) to the rank after next. */
        FIT_NCCL(rma_iput(0, win_mh, size, GPU_PLAIN, win_mh, (uint32_t)far, &req));
        FIT_NCCL(wait_req(coll, req, "iput from GPU memory"));
        FIT_NCCL(rma_iflush(win_mh, (uint32_t)far, &req));
        FIT_NCCL(wait_req(coll, req, "iflush"));
        barrier(2 + 3 * round);
        gpu_check(&cu, win + GPU_PLAIN, size, (from_far + NRANKS - 1) % NRANKS, round,
                  "iput from GPU memory into GPU memory");
        if (my_rank == 0)
            printf("rank 0: GPU window, %zu B: put+signal, get, put from GPU checked\n", size);
        barrier(3 + 3 * round);
    }
    FIT_NCCL(v14->deregMrSym(coll, src_mh));
    FIT_NCCL(v14->deregMrSym(coll, win_mh));
    FIT_NCCL(v14->deregMrSym(coll, sig_mh));
    FIT_NCCL(v14->destroyContext(rctx));
    rctx = NULL;
    barrier(10);
    FIT_NCCL(v14->closeColl(coll));
    FIT_NCCL(v14->finalize(ctx));
    cu.free_(win);
    cu.free_(sig);
    free(src);
    fit_log_check_clean("gpu case");
}
