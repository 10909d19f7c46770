/*
 * The NCCL one-sided API and the CUDA runtime calls that rma_check makes,
 * over POSIX shared memory, for rma_selftest.sh on a machine without a GPU.
 * Built once as libnccl.so and once as libcudart.so. ncclMemAlloc maps a
 * file per rank and allocation; ncclPutSignal copies into the peer's file of
 * the same allocation and adds one to a shared counter; ncclWaitSignal makes
 * the stream "not ready" until the counter reaches what was waited for.
 *
 * MOCK_SHM_PREFIX names the files (default /rc-mock). Faults, each for puts
 * of one size: MOCK_CORRUPT_SIZE=S flips a bit in the middle byte,
 * MOCK_PAST_SIZE=S also writes the byte after the end, MOCK_DROP_SIGNAL_SIZE=S
 * never signals. With NCCL_DEBUG=INFO it prints the plugin lines NCCL 2.30
 * prints: ferry's RMA (and the GIN proxy over it) assigned when the net
 * plugin is ferry, else RMA_IB_PROXY; MOCK_NO_PROOF, or MOCK_RMA_FALLBACK
 * naming the ferry backend in use, assigns RMA_IB_PROXY under ferry too;
 * MOCK_NO_GIN assigns no GIN.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define MOCK_MAX_ALLOCS 8

struct ncclComm {
    int rank;
    unsigned tag;
};

static struct {
    void *base;
    size_t size;
} mock_allocs[MOCK_MAX_ALLOCS];
static int mock_nallocs, mock_rank = -1;
static unsigned mock_tag;
static _Atomic unsigned long *mock_signals; /* [receiver * 2 + sender] */
static unsigned long mock_waited[2], mock_want;

static const char *mock_prefix(void)
{
    const char *p = getenv("MOCK_SHM_PREFIX");

    return p ? p : "/rc-mock";
}

static void mock_name(char *buf, size_t len, unsigned tag, int rank, int idx)
{
    snprintf(buf, len, "%s-%u-r%d-a%d", mock_prefix(), tag, rank, idx);
}

static void *mock_map(unsigned tag, int rank, int idx, size_t size)
{
    char name[128];
    int fd;
    void *p;

    mock_name(name, sizeof(name), tag, rank, idx);
    fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        perror("mock_rma_nccl: shm_open/ftruncate");
        exit(3);
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror("mock_rma_nccl: mmap");
        exit(3);
    }
    return p;
}

static size_t mock_env_size(const char *name)
{
    const char *v = getenv(name);

    return v ? (size_t)strtoull(v, NULL, 10) : 0;
}

cudaError_t cudaSetDevice(int dev)
{
    (void)dev;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    *s = (cudaStream_t)(uintptr_t)1;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    (void)s;
    if (mock_want && atomic_load(&mock_signals[mock_rank * 2 + (1 - mock_rank)]) < mock_want)
        return cudaErrorNotReady;
    mock_want = 0;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    (void)kind;
    memcpy(dst, src, n);
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
    (void)e;
    return "mock CUDA error";
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    unsigned tag = (unsigned)getpid();

    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &tag, sizeof(tag));
    return ncclSuccess;
}

static void mock_info_lines(void)
{
    const char *dbg = getenv("NCCL_DEBUG"), *plugin = getenv("NCCL_NET_PLUGIN");
    const char *backend = getenv("NCCL_FERRY_BACKEND"), *fallback = getenv("MOCK_RMA_FALLBACK");
    int ferry = plugin != NULL && strstr(plugin, "ferry") != NULL;
    int ours = ferry && getenv("MOCK_NO_PROOF") == NULL &&
               !(fallback != NULL && backend != NULL && strcmp(fallback, backend) == 0);
    const char *rma = ours ? "ferry" : "RMA_IB_PROXY";

    if (dbg == NULL || strcmp(dbg, "INFO") != 0)
        return;
    printf("mock:%d NCCL INFO NCCL version 2.30.7+mock\n", getpid());
    if (ferry) {
        printf("mock:%d NCCL INFO NET/Plugin: Loaded net plugin ferry (v11)\n", getpid());
        printf("mock:%d NCCL INFO RMA/Plugin: Successfully loaded external plugin %s\n",
               getpid(), plugin);
    }
    printf("mock:%d NCCL INFO RMA/Plugin: Assigned plugin %s to comm\n", getpid(), rma);
    /* NCCL's GIN proxy takes the RMA plugin's name. */
    if (getenv("MOCK_NO_GIN") != NULL)
        printf("mock:%d NCCL INFO GIN/Plugin: Failed to initialize any GIN plugin\n", getpid());
    else
        printf("mock:%d NCCL INFO GIN/Plugin: Assigned plugin %s type 2 to comm\n", getpid(), rma);
    fflush(stdout);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    (void)nranks;
    *comm = calloc(1, sizeof(**comm));
    if (*comm == NULL)
        return ncclSystemError;
    (*comm)->rank = rank;
    memcpy(&(*comm)->tag, id.internal, sizeof(unsigned));
    mock_rank = rank;
    mock_tag = (*comm)->tag;
    mock_signals = mock_map(mock_tag, 9, 0, 4096);
    mock_info_lines();
    return ncclSuccess;
}

ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    if (mock_nallocs == MOCK_MAX_ALLOCS)
        return ncclSystemError;
    mock_allocs[mock_nallocs].size = size;
    mock_allocs[mock_nallocs].base = mock_map(mock_tag, mock_rank, mock_nallocs, size);
    *ptr = mock_allocs[mock_nallocs++].base;
    return ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr)
{
    (void)ptr;
    return ncclSuccess;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int flags)
{
    (void)comm;
    (void)size;
    if (flags != NCCL_WIN_COLL_SYMMETRIC)
        return ncclInvalidArgument;
    for (int i = 0; i < mock_nallocs; i++) {
        if (mock_allocs[i].base == buff) {
            *win = (ncclWindow_t)(uintptr_t)(i + 1);
            return ncclSuccess;
        }
    }
    return ncclInvalidArgument;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    (void)comm;
    (void)win;
    return ncclSuccess;
}

ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream)
{
    int idx = (int)(uintptr_t)peerWin - 1;
    unsigned char *base, *dst;

    (void)datatype;
    (void)sigIdx;
    (void)ctx;
    (void)flags;
    (void)stream;
    if (idx < 0 || idx >= mock_nallocs || datatype != ncclUint8)
        return ncclInvalidArgument;
    base = mock_map(comm->tag, peer, idx, mock_allocs[idx].size);
    dst = base + peerWinOffset;
    memcpy(dst, localbuff, count);
    if (mock_env_size("MOCK_CORRUPT_SIZE") == count)
        dst[count / 2] ^= 0x10;
    if (mock_env_size("MOCK_PAST_SIZE") == count)
        dst[count] ^= 0xff;
    munmap(base, mock_allocs[idx].size);
    if (mock_env_size("MOCK_DROP_SIGNAL_SIZE") != count)
        atomic_fetch_add(&mock_signals[peer * 2 + comm->rank], 1);
    return ncclSuccess;
}

ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                            cudaStream_t stream)
{
    (void)comm;
    (void)stream;
    if (nDesc != 1 || signalDescs[0].peer < 0 || signalDescs[0].peer > 1)
        return ncclInvalidArgument;
    mock_waited[signalDescs[0].peer] += (unsigned long)signalDescs[0].opCnt;
    mock_want = mock_waited[signalDescs[0].peer];
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    (void)comm;
    *asyncError = ncclSuccess;
    return ncclSuccess;
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "(mock NCCL)";
}

const char *ncclGetErrorString(ncclResult_t result)
{
    (void)result;
    return "mock NCCL error";
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    char name[128];

    for (int i = 0; i < mock_nallocs; i++) {
        mock_name(name, sizeof(name), comm->tag, comm->rank, i);
        shm_unlink(name);
    }
    if (comm->rank == 0) {
        mock_name(name, sizeof(name), comm->tag, 9, 0);
        shm_unlink(name);
    }
    free(comm);
    return ncclSuccess;
}
