/*
 * test_rma_socket's gpu and gpu-dmabuf cases (test_rma.h): the window and
 * the signal words in GPU memory on tests/fakecuda.
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

/*
 * gpu-dmabuf (ib only, no GPUDirect setting and no peer-memory module): the
 * properties say DMA-BUF instead of CUDA, as NCCL's own IB does; regMrSym of
 * GPU memory is refused with a WARN that points at DMA-BUF, and the windows
 * are registered through regMrSymDmaBuf with the fd the driver exports.
 */
int gpu_dmabuf;

typedef int (*fit_cu_range_handle_fn)(void *, unsigned long long, size_t, int, unsigned long long);

static void *gpu_reg(void *coll, fit_cu_range_handle_fn handle_fn, unsigned long long dev,
                     size_t size)
{
    void *mh = NULL;
    int fd = -1;

    if (!gpu_dmabuf) {
        FIT_NCCL(v14->regMrSym(coll, (void *)(uintptr_t)dev, size, NCCL_PTR_CUDA, 0, &mh));
        return mh;
    }
    /* 1: CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD. */
    FIT_CHECK(handle_fn(&fd, dev, size, 1, 0) == 0 && fd >= 0, "DMA-BUF fd of %zu bytes", size);
    FIT_NCCL(v14->regMrSymDmaBuf(coll, (void *)(uintptr_t)dev, size, NCCL_PTR_CUDA, 0, fd, 0,
                                 &mh));
    close(fd); /* NCCL closes it right after the call: the registration must not need it. */
    return mh;
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

    int want_ptr = !on_ib ? NCCL_PTR_HOST | NCCL_PTR_CUDA
                   : gpu_dmabuf ? NCCL_PTR_HOST | NCCL_PTR_DMABUF
                                : NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF;
    fit_cu_range_handle_fn handle_fn;
    void *bad_mh = NULL;

    FIT_NCCL(rma_init(&ctx));
    FIT_NCCL(v14->getProperties(0, &props));
    FIT_CHECK(props.ptrSupport == want_ptr, "ptrSupport %d, want %d (%s)", props.ptrSupport,
              want_ptr, !on_ib ? "socket, GPU staging" : gpu_dmabuf ? "ib, DMA-BUF only"
                                                                     : "ib, GPUDirect and DMA-BUF");
    fit_cu_open(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), &cu);
    handle_fn = (fit_cu_range_handle_fn)fit_cu_sym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD),
                                                   "cuMemGetHandleForAddressRange");
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
    if (gpu_dmabuf) {
        /* Every rank alike: a refused registration still takes its number everywhere. */
        int from = fit_log_lines();

        fit_log_expect("GPU memory is not registered on this host");
        fit_log_expect("RMA regMrSym: GPU memory:");
        FIT_CHECK(v14->regMrSym(coll, (void *)(uintptr_t)win, GPU_WIN, NCCL_PTR_CUDA, 0, &bad_mh)
                      != ncclSuccess && bad_mh == NULL,
                  "regMrSym of GPU memory without GPUDirect refused");
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "no peer-memory module",
                               "DMA-BUF is available", "regMrSymDmaBuf", NULL, 0) >= 0,
                  "the refusal names DMA-BUF as the way");
        /* Host memory has no DMA-BUF: refused by type, with the way to register it. */
        fit_log_expect("a DMA-BUF names GPU memory");
        FIT_CHECK(v14->regMrSymDmaBuf(coll, src, GPU_WIN, NCCL_PTR_HOST, 0, 0, 0, &bad_mh)
                      != ncclSuccess && bad_mh == NULL, "regMrSymDmaBuf of host memory refused");
        FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "regMrSymDmaBuf", "type must be NCCL_PTR_CUDA",
                               "host memory goes through regMrSym", NULL, 0) >= 0,
                  "the host-memory refusal says why");
        /*
         * Only rank 0 has no fd: it refuses, naming its group, and still takes
         * part, so the others' registration of the same region completes.
         */
        {
            void *mh = NULL;
            int fd = -1;
            ncclResult_t r;

            if (my_rank != 0)
                FIT_CHECK(handle_fn(&fd, win, GPU_WIN, 1, 0) == 0 && fd >= 0, "DMA-BUF fd");
            fit_log_expect("no DMA-BUF fd");
            r = v14->regMrSymDmaBuf(coll, (void *)(uintptr_t)win, GPU_WIN, NCCL_PTR_CUDA, 0, fd, 0,
                                    &mh);
            if (fd >= 0)
                close(fd);
            if (my_rank == 0) {
                FIT_CHECK(r != ncclSuccess && mh == NULL, "regMrSymDmaBuf with fd -1 refused");
                FIT_CHECK(fit_log_find(from, NCCL_LOG_WARN, "no DMA-BUF fd", "RMA group rank 0 of",
                                       NULL, NULL, 0) >= 0, "the refusal names the group");
            } else {
                FIT_CHECK(r == ncclSuccess && mh != NULL, "rank %d's registration completes "
                          "beside rank 0's refusal", my_rank);
                FIT_NCCL(v14->deregMrSym(coll, mh));
            }
        }
    }
    win_mh = gpu_reg(coll, handle_fn, win, GPU_WIN);
    sig_mh = gpu_reg(coll, handle_fn, sig, 8 * NSIG_WORDS);
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
