/*
 * test_rma_socket's main (test_rma.h): opens the plugin, picks the case,
 * forks the ranks, and does the parent's part of a case (the strangers of
 * misuse, the kill of killed) before it collects the ranks' results.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_rma.h"

shared_t *sh;
int my_rank;
int wait_strangers;
int use_v13;
const ncclRma_v14_t *v14;
const ncclRma_v13_t *v13;
void *rctx;
int with_thread;
int on_ib;
const char *plugin_path;

static void run_rank(int rank, void (*fn)(void))
{
    char role[16];

    my_rank = rank;
    snprintf(role, sizeof(role), "rank%d", rank);
    fit_set_role(role);
    fn();
    fit_child_exit(0);
}

int main(int argc, char **argv)
{
    const char *path = plugin_path = fit_plugin_path(&argc, argv);
    const char *which = argc >= 3 && strcmp(argv[1], "--case") == 0 ? argv[2] : "data";
    void (*fn)(void) = NULL;
    pid_t pids[NRANKS];
    int fails = 0, nprocs = NRANKS;
    double t0 = fit_now();
    void *lib;

    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    FIT_CHECK(lib != NULL, "dlopen %s: %s", path, dlerror());
    v14 = dlsym(lib, "ncclRmaPlugin_v14");
    v13 = dlsym(lib, "ncclRmaPlugin_v13");
    FIT_CHECK(v14 != NULL && v13 != NULL, "ncclRmaPlugin_v14/_v13 not exported");
    FIT_CHECK(strcmp(v14->name, "ferry") == 0 && strcmp(v13->name, "ferry") == 0, "name %s",
              v14->name);
    /* NCCL calls every member it finds without a NULL check (rmaProgress aside): all set. */
    for (size_t i = 1; i < sizeof(*v14) / sizeof(void *); i++)
        FIT_CHECK(((void *const *)(const void *)v14)[i] != NULL &&
                  ((void *const *)(const void *)v13)[i] != NULL, "member %zu is NULL", i);
    on_ib = getenv("NCCL_FERRY_BACKEND") != NULL && strcmp(getenv("NCCL_FERRY_BACKEND"), "ib") == 0;
    if (strcmp(which, "data") == 0)
        fn = case_data;
    else if (strcmp(which, "v13") == 0)
        fn = case_data, use_v13 = 1;
    else if (strcmp(which, "threads") == 0)
        fn = case_data, with_thread = 1;
    else if (strcmp(which, "misuse") == 0)
        fn = case_misuse;
    else if (strcmp(which, "killed") == 0)
        fn = case_killed;
    else if (strcmp(which, "stall") == 0)
        fn = case_stall;
    else if (strcmp(which, "gpu") == 0)
        fn = case_gpu;
    else if (strcmp(which, "gpu-dmabuf") == 0) {
        gpu_dmabuf = 1;
        fn = case_gpu;
    }
    else if (strcmp(which, "dereg") == 0)
        fn = case_dereg;
    else if (strcmp(which, "split") == 0)
        fn = case_split;
    else if (strcmp(which, "split-fail") == 0)
        fn = case_split_fail;
    else if (strcmp(which, "off") == 0)
        fn = case_off;
    FIT_CHECK(fn != NULL, "unknown case %s (data, v13, threads, misuse, stall, gpu, gpu-dmabuf, killed, dereg, split, split-fail, off)", which);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    FIT_CHECK(sh != MAP_FAILED, "mmap");
    memset(sh, 0, sizeof(*sh));
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        FIT_CHECK(pids[r] >= 0, "fork");
        if (pids[r] == 0)
            run_rank(r, fn);
    }
    if (fn == case_misuse)
        knock_on_rank2();
    if (fn == case_killed) {
        double end = fit_now() + WAIT_S;

        while (atomic_load(&sh->ready_to_die) != 1 && fit_now() < end)
            usleep(1000);
        if (on_ib) {
            int st = 0;

            /* Stopped, its HCA answers nothing: the survivors' puts stay in flight. kill()
             * returns before every thread has stopped (one running on another CPU may still
             * answer a put): the survivors post only once waitpid says it is stopped. */
            kill(pids[2], SIGSTOP);
            FIT_CHECK(waitpid(pids[2], &st, WUNTRACED) == pids[2] && WIFSTOPPED(st),
                      "rank 2 did not stop (status 0x%x)", st);
            atomic_store(&sh->ready_to_die, 3);
            while (atomic_load(&sh->arrived[51]) < 2 && fit_now() < end)
                usleep(1000);
            usleep(50000);
        }
        kill(pids[2], SIGKILL);
        waitpid(pids[2], NULL, 0);
        atomic_store(&sh->ready_to_die, 2);
        nprocs = 2;
    }
    for (int r = 0; r < nprocs; r++) {
        double end = fit_now() + 60.0 * fit_time_scale();
        int status = 0;
        pid_t got;

        while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 && fit_now() < end)
            usleep(10000);
        if (got != pids[r]) {
            fprintf(stderr, "rank %d did not finish in 60 s: killed\n", r);
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status, 0);
            fails++;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d failed (status 0x%x)\n", r, status);
            fails++;
        }
    }
    if (fails == 0)
        printf("ok - rma %s case %s: %d ranks in %.2f s\n", on_ib ? "ib" : "socket", which, NRANKS,
               fit_now() - t0);
    return fails == 0 ? 0 : 1;
}
