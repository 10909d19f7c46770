/*
 * A tiny NCCL over POSIX shared memory, for ferry_nccl_bench's self-test on a
 * machine without a GPU. Every rank maps one file named by the unique id;
 * each collective copies the rank's input into its slot, waits at a
 * process-shared barrier, computes its output from all slots, and waits
 * again. Sizes up to MOCK_SLOT bytes per rank.
 *
 * MOCK_SHM_PREFIX names the shared memory files (default /fnb-mock).
 * Faults for the tests: MOCK_CORRUPT=<rank> makes that rank's first output
 * element wrong; MOCK_FAIL_INIT=<rank> fails its ncclCommInitRank;
 * MOCK_HANG_INIT=<rank> blocks it there forever. With NCCL_DEBUG=INFO it
 * prints the proof lines real NCCL prints (MOCK_CHANNEL_NET overrides the
 * network named on the Channel line).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <nccl.h>

#ifndef MOCK_VERSION
#define MOCK_VERSION 22803
#endif
#define MOCK_SLOT ((size_t)64 << 20)
#define MOCK_HDR  4096

typedef struct mock_hdr {
    pthread_barrier_t barrier;   /* Initialised by rank 0 before ready is set. */
    int               ready;
} mock_hdr_t;

struct ncclComm {
    int         rank;
    int         nranks;
    mock_hdr_t *hdr;
    char       *slots;
};

/* The send/recv pair of the open group (one of each is all the bench uses). */
static struct {
    const void *send;
    void       *recv;
    size_t      count;
    int         from;
    ncclComm_t  comm;
} mock_group;

static int mock_env_rank(const char *name, int rank)
{
    const char *v = getenv(name);

    return v != NULL && atoi(v) == rank;
}

static float *mock_slot(ncclComm_t c, int rank)
{
    return (float *)(c->slots + (size_t)rank * MOCK_SLOT);
}

static void mock_barrier(ncclComm_t c)
{
    pthread_barrier_wait(&c->hdr->barrier);
}

static void mock_corrupt(ncclComm_t c, void *out)
{
    if (mock_env_rank("MOCK_CORRUPT", c->rank)) {
        ((float *)out)[0] += 1.0f;
    }
}

static void mock_info(int rank)
{
    const char *dbg = getenv("NCCL_DEBUG"), *net = getenv("NCCL_NET");
    const char *chan = getenv("MOCK_CHANNEL_NET");
    int pid = getpid();

    if (dbg == NULL || strcmp(dbg, "INFO") != 0 || net == NULL) {
        return;
    }
    printf("mock:%d:%d [0] NCCL INFO NCCL version %d (mock)\n", pid, pid, MOCK_VERSION);
    if (strcmp(net, "Socket") != 0) {
        printf("mock:%d:%d [0] NCCL INFO NET/Plugin: Loaded net plugin %s (v11)\n", pid, pid, net);
    }
    printf("mock:%d:%d [0] NCCL INFO Using network %s\n", pid, pid, net);
    printf("mock:%d:%d [0] NCCL INFO Channel 00/0 : %d[0] -> %d[0] [send] via NET/%s/0\n", pid,
           pid, rank, 1 - rank, chan != NULL ? chan : net);
    fflush(stdout);
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = MOCK_VERSION;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t res)
{
    return res == ncclSuccess ? "no error" : "mock failure";
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "mock last error";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    const char *prefix = getenv("MOCK_SHM_PREFIX");

    /* The prefix lets the test remove what a killed rank left in /dev/shm. */
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "%s-%d", prefix != NULL ? prefix : "/fnb-mock",
             getpid());
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm_p, int nranks, ncclUniqueId id, int rank)
{
    size_t len = MOCK_HDR + (size_t)nranks * MOCK_SLOT;
    struct ncclComm *c;
    char *map;
    int fd;

    while (mock_env_rank("MOCK_HANG_INIT", rank)) {
        pause();
    }
    if (mock_env_rank("MOCK_FAIL_INIT", rank)) {
        return ncclSystemError;
    }
    fd = shm_open(id.internal, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        return ncclSystemError;
    }
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    c = calloc(1, sizeof(*c));
    if (map == MAP_FAILED || c == NULL) {
        return ncclSystemError;
    }
    *c = (struct ncclComm){.rank = rank, .nranks = nranks, .hdr = (mock_hdr_t *)map,
                           .slots = map + MOCK_HDR};
    if (rank == 0) {
        pthread_barrierattr_t attr;

        pthread_barrierattr_init(&attr);
        pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
        pthread_barrier_init(&c->hdr->barrier, &attr, (unsigned)nranks);
        __atomic_store_n(&c->hdr->ready, 1, __ATOMIC_RELEASE);
    }
    while (!__atomic_load_n(&c->hdr->ready, __ATOMIC_ACQUIRE)) {
        usleep(1000);
    }
    mock_barrier(c);
    if (rank == 0) {
        shm_unlink(id.internal); /* Everyone has it mapped now. */
    }
    mock_info(rank);
    *comm_p = c;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
    float *out = recv;

    memcpy(mock_slot(c, c->rank), send, count * sizeof(float));
    mock_barrier(c);
    for (size_t i = 0; i < count; i++) {
        out[i] = 0.0f;
        for (int q = 0; q < c->nranks; q++) {
            out[i] += mock_slot(c, q)[i];
        }
    }
    mock_barrier(c);
    mock_corrupt(c, recv);
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t c, cudaStream_t stream)
{
    memcpy(mock_slot(c, c->rank), send, count * sizeof(float));
    mock_barrier(c);
    for (int q = 0; q < c->nranks; q++) {
        memcpy((float *)recv + (size_t)q * count, mock_slot(c, q), count * sizeof(float));
    }
    mock_barrier(c);
    mock_corrupt(c, recv);
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
    float *out = recv;

    memcpy(mock_slot(c, c->rank), send, count * (size_t)c->nranks * sizeof(float));
    mock_barrier(c);
    for (size_t i = 0; i < count; i++) {
        out[i] = 0.0f;
        for (int q = 0; q < c->nranks; q++) {
            out[i] += mock_slot(c, q)[(size_t)c->rank * count + i];
        }
    }
    mock_barrier(c);
    mock_corrupt(c, recv);
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t c, cudaStream_t stream)
{
    if (c->rank == root) {
        memcpy(mock_slot(c, root), send, count * sizeof(float));
    }
    mock_barrier(c);
    memcpy(recv, mock_slot(c, root), count * sizeof(float));
    mock_barrier(c);
    mock_corrupt(c, recv);
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t c, cudaStream_t stream)
{
    mock_group.send = send;
    mock_group.count = count;
    return ncclSuccess;
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                      cudaStream_t stream)
{
    mock_group.recv = recv;
    mock_group.from = peer;
    mock_group.comm = c;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    ncclComm_t c = mock_group.comm;

    memcpy(mock_slot(c, c->rank), mock_group.send, mock_group.count * sizeof(float));
    mock_barrier(c);
    memcpy(mock_group.recv, mock_slot(c, mock_group.from), mock_group.count * sizeof(float));
    mock_barrier(c);
    mock_corrupt(c, mock_group.recv);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    mock_barrier(c);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    free(c);
    return ncclSuccess;
}
