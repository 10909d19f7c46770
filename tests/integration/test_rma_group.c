/*
 * test_rma_group: one RMA group of many ranks (forked processes, 64 by
 * default) through ferry's RMA plugin (ncclRmaPlugin_v14), on whichever
 * backend NCCL_FERRY_BACKEND names. Every rank listens, all connect at once
 * (every pair gets its link and, on ib, its QP), register a window and a
 * signal array collectively, then each rank puts a 4 KiB block with a
 * signal ADD into three others (the next rank, the one half-way round and
 * the previous one) and reads a fourth rank's window back with a get.
 * Each target waits for the signals it is owed, each equal to its source's
 * value, and checks every byte of each block; the get checks what the
 * fourth rank was sent. The group forms and moves data at a size where each
 * process holds dozens of links: what a real job's groups look like, not
 * the 3 ranks of the other RMA tests.
 *
 *   test_rma_group [--plugin PATH] [--ranks N]   (2..256)
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "nccl/rma.h"

#define GROUP_MAX   256
#define BLOCK       4096
#define NPUTS       3
#define WAIT_S      60.0

typedef struct group_shared {
    char        handles[GROUP_MAX][NCCL_NET_HANDLE_MAXSIZE];
    _Atomic int arrived[8];
} group_shared_t;

static group_shared_t *sh;
static const ncclRma_v14_t *v14;
static void *rctx;
static int nranks, my_rank;

static void progress(void)
{
    if (rctx != NULL)
        FIT_NCCL(v14->rmaProgress(rctx));
}

/* Every rank reaches step k; the wait keeps this rank's operations and answers moving. */
static void barrier(int k)
{
    double end = fit_now() + WAIT_S * fit_time_scale();

    atomic_fetch_add(&sh->arrived[k], 1);
    while (atomic_load(&sh->arrived[k]) < nranks) {
        FIT_CHECK(fit_now() < end, "barrier %d: %d of %d ranks in %.0f s", k,
                  atomic_load(&sh->arrived[k]), nranks, WAIT_S);
        progress();
        usleep(200);
    }
}

static unsigned char pat(int src, size_t i)
{
    return (unsigned char)(i * 131u + (size_t)src * 17u + 7u);
}

/* The ranks r puts into: the next, the one half-way round, the previous (distinct for n >= 4). */
static int put_target(int r, int k)
{
    int to[NPUTS] = {(r + 1) % nranks, (r + nranks / 2) % nranks, (r + nranks - 1) % nranks};

    return to[k];
}

static void wait_done(void *coll, void *req, const char *what, int peer)
{
    double end = fit_now() + WAIT_S * fit_time_scale();
    int done = 0;

    while (req != NULL && !done) {
        FIT_NCCL(v14->test(coll, req, &done));
        FIT_CHECK(done || fit_now() < end, "%s (rank %d) not done in %.0f s", what, peer, WAIT_S);
        if (!done)
            progress();
    }
}

static void run_rank(void)
{
    ncclRmaConfig_v14_t cfg = {.nContexts = 1, .trafficClass = -1, .rankStride = 1};
    void *ctx, *lc, *coll, *handles[GROUP_MAX], *src_mh, *win_mh, *sig_mh, *back_mh, *req[NPUTS];
    size_t win_size = (size_t)nranks * BLOCK;
    unsigned char *src = malloc(BLOCK), *win = malloc(win_size), *back = malloc(BLOCK);
    volatile uint64_t *sig = calloc((size_t)nranks, sizeof(uint64_t));
    int expect[NPUTS], get_from = (my_rank + 2) % nranks, get_src;
    double t0 = fit_now(), t_conn;

    FIT_CHECK(src != NULL && win != NULL && back != NULL && sig != NULL, "allocation");
    memset(win, 0xee, win_size);
    for (size_t i = 0; i < BLOCK; i++)
        src[i] = pat(my_rank, i);
    FIT_NCCL(v14->init(&ctx, 0x6a0b, fit_logger));
    FIT_NCCL(v14->listen(ctx, 0, sh->handles[my_rank], &lc));
    barrier(0);
    for (int r = 0; r < nranks; r++)
        handles[r] = sh->handles[r];
    FIT_NCCL(v14->connect(ctx, handles, nranks, my_rank, lc, &coll));
    FIT_NCCL(v14->closeListen(lc));
    t_conn = fit_now() - t0;
    FIT_NCCL(v14->createContext(coll, &cfg, &rctx));
    FIT_NCCL(v14->regMrSym(coll, src, BLOCK, NCCL_PTR_HOST, 0, &src_mh));
    FIT_NCCL(v14->regMrSym(coll, win, win_size, NCCL_PTR_HOST, 0, &win_mh));
    FIT_NCCL(v14->regMrSym(coll, (void *)sig, (size_t)nranks * sizeof(uint64_t), NCCL_PTR_HOST,
                           NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET, &sig_mh));
    barrier(1);
    /* Block my_rank of each target's window, then ADD my_rank + 1 to its word my_rank. */
    for (int k = 0; k < NPUTS; k++) {
        int to = put_target(my_rank, k);

        FIT_NCCL(v14->iputSignal(rctx, 0, 0, src_mh, BLOCK, (uint64_t)my_rank * BLOCK, win_mh,
                                 (uint32_t)to, (uint64_t)my_rank * sizeof(uint64_t), sig_mh,
                                 (uint64_t)my_rank + 1, NCCL_NET_SIGNAL_OP_ADD, true, &req[k]));
    }
    for (int k = 0; k < NPUTS; k++)
        wait_done(coll, req[k], "put with signal", put_target(my_rank, k));
    /* Who puts into me: the sources whose targets include my_rank. */
    for (int k = 0; k < NPUTS; k++) {
        int from = k == 0 ? (my_rank + nranks - 1) % nranks
                 : k == 1 ? (my_rank + nranks - nranks / 2) % nranks
                          : (my_rank + 1) % nranks;

        FIT_CHECK(put_target(from, k) == my_rank, "source %d does not put into %d", from,
                  my_rank);
        expect[k] = from;
    }
    for (int k = 0; k < NPUTS; k++) {
        double end = fit_now() + WAIT_S * fit_time_scale();
        int from = expect[k];

        while (sig[from] != (uint64_t)from + 1) {
            FIT_CHECK(fit_now() < end, "rank %d: signal from rank %d is %llu, not %d, after "
                      "%.0f s", my_rank, from, (unsigned long long)sig[from], from + 1, WAIT_S);
            progress();
        }
        for (size_t i = 0; i < BLOCK; i++)
            FIT_CHECK(win[(size_t)from * BLOCK + i] == pat(from, i), "rank %d: byte %zu of the "
                      "block from rank %d is 0x%02x, not 0x%02x", my_rank, i, from,
                      win[(size_t)from * BLOCK + i], pat(from, i));
    }
    for (int r = 0; r < nranks; r++) {
        int owed = 0;

        for (int k = 0; k < NPUTS; k++)
            owed |= expect[k] == r;
        FIT_CHECK(owed || sig[r] == 0, "rank %d: signal word %d is %llu, no put was owed", my_rank,
                  r, (unsigned long long)sig[r]);
    }
    barrier(2);
    /* A get of a block get_from was sent: by the rank that puts into it as its "next". */
    get_src = (get_from + nranks - 1) % nranks;
    FIT_NCCL(v14->regMrSym(coll, back, BLOCK, NCCL_PTR_HOST, 0, &back_mh));
    {
        void *g = NULL;

        memset(back, 0, BLOCK);
        FIT_NCCL(v14->iget(rctx, 0, (uint64_t)get_src * BLOCK, win_mh, BLOCK, 0, back_mh,
                           (uint32_t)get_from, &g));
        wait_done(coll, g, "get", get_from);
        for (size_t i = 0; i < BLOCK; i++)
            FIT_CHECK(back[i] == pat(get_src, i), "rank %d: byte %zu got from rank %d is 0x%02x, "
                      "not 0x%02x", my_rank, i, get_from, back[i], pat(get_src, i));
        barrier(3);
        FIT_NCCL(v14->deregMrSym(coll, back_mh));
    }
    FIT_NCCL(v14->deregMrSym(coll, src_mh));
    FIT_NCCL(v14->deregMrSym(coll, win_mh));
    FIT_NCCL(v14->deregMrSym(coll, sig_mh));
    barrier(4);
    FIT_NCCL(v14->destroyContext(rctx));
    rctx = NULL;
    FIT_NCCL(v14->closeColl(coll));
    FIT_NCCL(v14->finalize(ctx));
    free(src);
    free(win);
    free(back);
    free((void *)sig);
    fit_log_check_clean("group");
    if (my_rank == 0)
        printf("rank 0: group of %d formed in %.2f s, puts, signals and a get checked\n", nranks,
               t_conn);
    fit_child_exit(0);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    pid_t pids[GROUP_MAX];
    int fails = 0;
    double t0 = fit_now();
    struct rlimit rl;
    void *lib;

    nranks = 64;
    if (argc >= 3 && strcmp(argv[1], "--ranks") == 0)
        nranks = atoi(argv[2]);
    FIT_CHECK(nranks >= 4 && nranks <= GROUP_MAX, "--ranks 4..%d", GROUP_MAX);
    /* A link per peer, and on ib the emulated QPs' sockets: room beyond the usual 1,024. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096 && rl.rlim_max >= 4096) {
        rl.rlim_cur = 4096;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    FIT_CHECK(lib != NULL, "dlopen %s: %s", path, dlerror());
    v14 = dlsym(lib, "ncclRmaPlugin_v14");
    FIT_CHECK(v14 != NULL, "ncclRmaPlugin_v14 not exported");
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    FIT_CHECK(sh != MAP_FAILED, "mmap");
    memset(sh, 0, sizeof(*sh));
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        FIT_CHECK(pids[r] >= 0, "fork");
        if (pids[r] == 0) {
            char role[16];

            my_rank = r;
            snprintf(role, sizeof(role), "rank%d", r);
            fit_set_role(role);
            run_rank();
        }
    }
    for (int r = 0; r < nranks; r++) {
        double end = fit_now() + 2 * WAIT_S * fit_time_scale();
        int status = 0;
        pid_t got;

        while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 && fit_now() < end)
            usleep(10000);
        if (got != pids[r]) {
            fprintf(stderr, "rank %d did not finish in %.0f s: killed\n", r, 2 * WAIT_S);
            for (int q = r; q < nranks; q++)
                kill(pids[q], SIGKILL);
            for (int q = r; q < nranks; q++)
                waitpid(pids[q], NULL, 0);
            fails++;
            break;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d failed (status 0x%x)\n", r, status);
            fails++;
        }
    }
    if (fails == 0)
        printf("ok - rma group of %d ranks (%s) in %.2f s\n", nranks,
               getenv("NCCL_FERRY_BACKEND") != NULL ? getenv("NCCL_FERRY_BACKEND") : "auto",
               fit_now() - t0);
    return fails == 0 ? 0 : 1;
}
