/*
 * pcie_load: the host-memory traffic a host-staged NCCL job puts on the
 * machine, without NCCL. Over a host-staged network (ferry's socket backend,
 * NCCL's Socket) every byte a rank sends is first written by the GPU into
 * pinned host memory and every byte it receives is read back by the GPU:
 * per rank, as many bytes cross PCIe each way as the network carries. Those
 * DMA transfers compete with the TCP copies for memory bandwidth, so the TCP
 * ceiling that matters for such a job is the one measured while this runs
 * (bench/nccl/loaded_ceiling.sh).
 *
 *   pcie_load [--rate GB/s] [--seconds S] [--device N]
 *
 * Copies 1 MiB pieces host->device and device->host at once, on two streams,
 * between 16 MiB pinned host buffers and 16 MiB device buffers (as NCCL's
 * per-channel FIFOs), at --rate GB/s each way (0: as fast as it goes), for
 * --seconds. Prints what it moved each way.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define PL_BUF   ((size_t)16 << 20)
#define PL_PIECE ((size_t)1 << 20)
#define PL_BATCH 8 /* Pieces per direction between two synchronisations. */

#define PL_CUDA(call)                                                                       \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "pcie_load: %s failed: %s\n", #call, cudaGetErrorString(e_));  \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* SIGINT/SIGTERM end the run early; what was moved is still reported. */
static volatile sig_atomic_t pl_stop;

static void pl_on_signal(int sig)
{
    (void)sig;
    pl_stop = 1;
}

static double pl_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pl_usage(FILE *out)
{
    fprintf(out, "usage: pcie_load [--rate GB/s] [--seconds S] [--device N]\n"
                 "  --rate     GB/s each way, host->device and device->host (default 0: "
                 "as fast as it goes)\n"
                 "  --seconds  how long (default 10, at most 3600)\n"
                 "  --device   CUDA device (default 0)\n");
}

int main(int argc, char **argv)
{
    double rate = 0.0, seconds = 10.0, t0, t, moved = 0.0;
    int device = 0, i, k;
    char *hsrc, *hdst, *dsrc, *ddst;
    cudaStream_t up, down;
    size_t off = 0;

    for (i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            pl_usage(stdout);
            return 0;
        }
        if (v == NULL) {
            pl_usage(stderr);
            return 2;
        }
        if (strcmp(argv[i], "--rate") == 0)
            rate = atof(v);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(argv[i], "--device") == 0)
            device = atoi(v);
        else {
            pl_usage(stderr);
            return 2;
        }
        i++;
    }
    if (rate < 0.0 || seconds <= 0.0 || seconds > 3600.0 || device < 0) {
        fprintf(stderr, "pcie_load: --rate must be >= 0, --seconds in (0, 3600], --device >= 0\n");
        return 2;
    }
    PL_CUDA(cudaSetDevice(device));
    PL_CUDA(cudaMallocHost((void **)&hsrc, PL_BUF));
    PL_CUDA(cudaMallocHost((void **)&hdst, PL_BUF));
    PL_CUDA(cudaMalloc((void **)&dsrc, PL_BUF));
    PL_CUDA(cudaMalloc((void **)&ddst, PL_BUF));
    memset(hsrc, 0x5a, PL_BUF);
    PL_CUDA(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    PL_CUDA(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    signal(SIGINT, pl_on_signal);
    signal(SIGTERM, pl_on_signal);
    t0 = pl_now();
    for (t = t0; t - t0 < seconds && !pl_stop; t = pl_now()) {
        /* Paced: never ahead of rate x elapsed, each way. */
        if (rate > 0.0 && moved > rate * 1e9 * (t - t0)) {
            usleep(200);
            continue;
        }
        for (k = 0; k < PL_BATCH; k++) {
            PL_CUDA(cudaMemcpyAsync(ddst + off, hsrc + off, PL_PIECE, cudaMemcpyHostToDevice, up));
            PL_CUDA(cudaMemcpyAsync(hdst + off, dsrc + off, PL_PIECE, cudaMemcpyDeviceToHost, down));
            off = (off + PL_PIECE) % PL_BUF;
        }
        PL_CUDA(cudaStreamSynchronize(up));
        PL_CUDA(cudaStreamSynchronize(down));
        moved += (double)(PL_BATCH * PL_PIECE);
    }
    t = pl_now() - t0;
    printf("pcie_load: %.2f GB/s each way (host->device and device->host at once) for %.1f s, "
           "target %.2f GB/s (0: unpaced)\n", moved / t / 1e9, t, rate);
    PL_CUDA(cudaStreamDestroy(up));
    PL_CUDA(cudaStreamDestroy(down));
    PL_CUDA(cudaFree(dsrc));
    PL_CUDA(cudaFree(ddst));
    PL_CUDA(cudaFreeHost(hsrc));
    PL_CUDA(cudaFreeHost(hdst));
    return 0;
}
