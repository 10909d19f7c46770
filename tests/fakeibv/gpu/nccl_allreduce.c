/*
 * One rank of a 2-process NCCL all_reduce over fakeibv (run by
 * nccl_ib_allreduce.sh). Both ranks use GPU 0; NCCL_HOSTID makes them two
 * "hosts", so every byte goes through NCCL's NET/IB transport.
 *
 * usage: nccl_allreduce <rank> <nranks> <unique-id file> [max floats]
 * Prints "RESULT rank <r> count <n> <inplace|outofplace>: OK" per check,
 * and "DONE rank <r>: OK" or a FAIL line; exits 0 only if all matched.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CUDACHECK(cmd)                                                                      \
    do {                                                                                    \
        cudaError_t e_ = (cmd);                                                             \
        if (e_ != cudaSuccess) {                                                            \
            printf("FAIL rank %d: %s -> %s\n", rank, #cmd, cudaGetErrorString(e_));         \
            exit(2);                                                                        \
        }                                                                                   \
    } while (0)

#define NCCLCHECK(cmd)                                                                      \
    do {                                                                                    \
        ncclResult_t r_ = (cmd);                                                            \
        if (r_ != ncclSuccess) {                                                            \
            printf("FAIL rank %d: %s -> %s\n", rank, #cmd, ncclGetErrorString(r_));         \
            exit(3);                                                                        \
        }                                                                                   \
    } while (0)

static int rank;

static void share_id(const char *path, ncclUniqueId *id)
{
    char tmp[4096];
    FILE *f;
    int i;

    if (rank == 0) {
        NCCLCHECK(ncclGetUniqueId(id));
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        f = fopen(tmp, "wb");
        if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 ||
            rename(tmp, path) != 0) {
            printf("FAIL rank 0: cannot write unique id to %s: %s\n", path, strerror(errno));
            exit(4);
        }
        return;
    }
    for (i = 0; i < 600; i++) { /* 60 s */
        f = fopen(path, "rb");
        if (f != NULL) {
            size_t n = fread(id, sizeof(*id), 1, f);

            fclose(f);
            if (n == 1)
                return;
        }
        usleep(100000);
    }
    printf("FAIL rank %d: no unique id in %s after 60 s (did rank 0 start?)\n", rank, path);
    exit(4);
}

/* Waits for the stream while watching NCCL's async error, for at most
 * 120 s, so a hung transport becomes a FAIL line, not a silent hang. */
static void wait_stream(ncclComm_t comm, cudaStream_t s, const char *what)
{
    time_t t0 = time(NULL);

    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        ncclResult_t ar;

        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady) {
            printf("FAIL rank %d: %s: %s\n", rank, what, cudaGetErrorString(e));
            exit(5);
        }
        NCCLCHECK(ncclCommGetAsyncError(comm, &ar));
        if (ar != ncclSuccess) {
            printf("FAIL rank %d: %s: NCCL async error %s\n", rank, what, ncclGetErrorString(ar));
            exit(5);
        }
        if (time(NULL) - t0 > 120) {
            printf("FAIL rank %d: %s did not finish in 120 s\n", rank, what);
            exit(6);
        }
        usleep(1000);
    }
}

static int check(const float *got, size_t n, int nranks, const char *mode)
{
    float tri = (float)(nranks * (nranks + 1) / 2);
    size_t i;

    for (i = 0; i < n; i++) {
        float want = tri * (float)((i % 13) + 1);

        if (got[i] != want) {
            printf("FAIL rank %d: count %zu %s: element %zu is %g, expected %g\n", rank, n, mode,
                   i, got[i], want);
            return 0;
        }
    }
    printf("RESULT rank %d count %zu %s: OK\n", rank, n, mode);
    return 1;
}

int main(int argc, char **argv)
{
    size_t counts[] = { 1024, 262144, 4194304, 16777216 };
    size_t maxcount, c, i;
    int nranks, ok = 1, it;
    ncclUniqueId id;
    ncclComm_t comm;
    cudaStream_t s;
    float *h, *dsend, *drecv;

    if (argc < 4) {
        fprintf(stderr, "usage: %s <rank> <nranks> <idfile> [max floats]\n", argv[0]);
        return 1;
    }
    rank = atoi(argv[1]);
    nranks = atoi(argv[2]);
    maxcount = argc > 4 ? strtoull(argv[4], NULL, 0) : 16777216;
    share_id(argv[3], &id);
    CUDACHECK(cudaSetDevice(0));
    NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
    CUDACHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    h = malloc(maxcount * sizeof(float));
    CUDACHECK(cudaMalloc((void **)&dsend, maxcount * sizeof(float)));
    CUDACHECK(cudaMalloc((void **)&drecv, maxcount * sizeof(float)));
    for (c = 0; c < sizeof(counts) / sizeof(counts[0]) && counts[c] <= maxcount; c++) {
        size_t n = counts[c];

        for (it = 0; it < 2; it++) {
            int inplace = it == 1;
            float *dst = inplace ? dsend : drecv;

            for (i = 0; i < n; i++)
                h[i] = (float)((rank + 1) * ((i % 13) + 1));
            CUDACHECK(cudaMemcpy(dsend, h, n * sizeof(float), cudaMemcpyHostToDevice));
            CUDACHECK(cudaMemset(drecv, 0, n * sizeof(float)));
            NCCLCHECK(ncclAllReduce(dsend, dst, n, ncclFloat, ncclSum, comm, s));
            wait_stream(comm, s, "ncclAllReduce");
            CUDACHECK(cudaMemcpy(h, dst, n * sizeof(float), cudaMemcpyDeviceToHost));
            ok &= check(h, n, nranks, inplace ? "inplace" : "outofplace");
        }
    }
    NCCLCHECK(ncclCommDestroy(comm));
    CUDACHECK(cudaFree(dsend));
    CUDACHECK(cudaFree(drecv));
    free(h);
    printf("DONE rank %d: %s\n", rank, ok ? "OK" : "FAIL");
    return ok ? 0 : 7;
}
