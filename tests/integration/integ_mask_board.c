/*
 * The socket backend's CPU budget checked against the local ranks' real
 * masks (src/socket/sock_board.h): four forked "local ranks" with the
 * variables Open MPI gives (OMPI_COMM_WORLD_LOCAL_SIZE=4,
 * OMPI_COMM_WORLD_LOCAL_RANK=i) and a job key of the test's own
 * (SLURM_JOB_ID + SLURM_STEP_ID), each bound with sched_setaffinity, init
 * the plugin (publishing their masks), wait for each other at a barrier,
 * then listen: the first listen reads the board. Each rank checks its INFO
 * line says the counted result and the budget derived from it:
 *
 *   pairs:   ranks 0,1 on CPU a, ranks 2,3 on CPU b: "2 share this 1 CPU"
 *   all:     every rank on a and b:                  "4 share these 2 CPUs"
 *   uneven:  ranks 0,1,2 on a, rank 3 on b: "3 share this 1 CPU" for 0..2,
 *            "disjoint, 1 CPU each" and a budget of its own for rank 3 (the
 *            estimate from the mask's size says 2 for every rank)
 *   missing: as pairs, but rank 3 never loads the plugin: "3 of 4 ranks
 *            published their masks; the estimate stays"
 *
 * After the ranks finalize, the board's file must be gone (the last to
 * leave removes it). Needs two CPUs in the test's mask (else skipped, 77).
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define BOARD_RANKS 4

typedef struct board_case {
    const char *name;
    int         on_b[BOARD_RANKS];   /* 1: the rank runs on CPU b, 0: on CPU a. */
    int         both[BOARD_RANKS];   /* 1: on both CPUs. */
    int         silent;              /* A rank that never loads the plugin, -1 none. */
    const char *expect[BOARD_RANKS]; /* What its board line must say. */
    const char *budget[BOARD_RANKS]; /* What its lanes line must say, NULL: no lanes line. */
} board_case_t;

static int board_cpu_a, board_cpu_b;

/* Wait for one byte on fd for up to ms; 1 if it came. */
static int board_wait_byte(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;

    if (poll(&p, 1, ms) != 1)
        return 0;
    return read(fd, &c, 1) == 1;
}

static void board_env(int rank, int case_no)
{
    char v[64];

    /* The key the test gives; the runner's own launcher variables must not win over it. */
    unsetenv("PMIX_NAMESPACE");
    unsetenv("OMPI_MCA_ess_base_jobid");
    unsetenv("TORCHELASTIC_RUN_ID");
    unsetenv("NCCL_FERRY_LOCAL_RANKS");
    unsetenv("NCCL_IGNORE_CPU_AFFINITY");
    snprintf(v, sizeof(v), "integ-board-%d", (int)getppid());
    setenv("SLURM_JOB_ID", v, 1);
    snprintf(v, sizeof(v), "%d", case_no);
    setenv("SLURM_STEP_ID", v, 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
    snprintf(v, sizeof(v), "%d", rank);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", v, 1);
}

static void board_child(const char *path, const board_case_t *c, int case_no, int rank,
                        int ready_fd, int go_fd)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE], line[1200], role[32];
    fit_plugin_t p;
    cpu_set_t set;
    void *ctx = NULL, *lc;
    int i, lanes;

    snprintf(role, sizeof(role), "%s rank %d", c->name, rank);
    fit_set_role(role);
    board_env(rank, case_no);
    CPU_ZERO(&set);
    if (c->both[rank] || !c->on_b[rank])
        CPU_SET(board_cpu_a, &set);
    if (c->both[rank] || c->on_b[rank])
        CPU_SET(board_cpu_b, &set);
    FIT_CHECK(sched_setaffinity(0, sizeof(set), &set) == 0, "sched_setaffinity: %s",
              strerror(errno));
    if (rank != c->silent) {
        fit_plugin_open(&p, path);
        ctx = fit_plugin_init(&p, 1);
    }
    FIT_CHECK(write(ready_fd, "r", 1) == 1, "barrier write");
    FIT_CHECK(board_wait_byte(go_fd, 10000), "no go from the test within 10 s");
    if (rank == c->silent) {
        FIT_CHECK(write(ready_fd, "d", 1) == 1, "barrier write");
        fit_child_exit(0);
    }
    lc = fit_listen(&p, ctx, 0, handle);
    i = fit_log_find(0, NCCL_LOG_INFO, "CPU budget checked against the 4 local ranks' masks",
                     NULL, NULL, line, sizeof(line));
    FIT_CHECK(i >= 0, "no board line after the first listen");
    FIT_CHECK(strstr(line, c->expect[rank]) != NULL, "the board line says '%s', not '%s'", line,
              c->expect[rank]);
    printf("%s rank %d: %s\n", c->name, rank, line);
    lanes = fit_log_find(i + 1, NCCL_LOG_INFO, "socket backend: ", NULL, NULL, line,
                         sizeof(line));
    if (c->budget[rank] != NULL) {
        FIT_CHECK(lanes >= 0, "no lanes line after the board line");
        FIT_CHECK(strstr(line, c->budget[rank]) != NULL, "the lanes line says '%s', not '%s'",
                  line, c->budget[rank]);
        printf("%s rank %d: %s\n", c->name, rank, line);
    } else {
        FIT_CHECK(lanes < 0, "the budget was derived again although the board was incomplete: "
                  "'%s'", line);
    }
    /* No rank leaves the board before every rank has read it: NCCL's ranks connect first. */
    FIT_CHECK(write(ready_fd, "d", 1) == 1, "barrier write");
    FIT_CHECK(board_wait_byte(go_fd, 10000), "no second go from the test within 10 s");
    FIT_NCCL(p.net->closeListen(lc));
    FIT_NCCL(p.net->finalize(ctx));
    fit_plugin_close(&p);
    fit_log_check_clean(c->name);
    fit_child_exit(0);
}

/* One byte to each rank still there (a silent rank has gone: its pipe's write fails). */
static void board_release(int go[BOARD_RANKS][2])
{
    int i;

    for (i = 0; i < BOARD_RANKS; i++)
        (void)!write(go[i][1], "g", 1);
}

static void board_run(const char *path, const board_case_t *c, int case_no)
{
    int ready[2], go[BOARD_RANKS][2], i, j, got = 0, fails = 0;
    pid_t pids[BOARD_RANKS];
    char file[256];
    struct stat st;
    double t0 = fit_now();

    /* A go pipe per rank: a fast rank's second wait must not take a slow one's first go. */
    FIT_CHECK(pipe(ready) == 0, "pipe: %s", strerror(errno));
    for (i = 0; i < BOARD_RANKS; i++)
        FIT_CHECK(pipe(go[i]) == 0, "pipe: %s", strerror(errno));
    fflush(NULL);
    for (i = 0; i < BOARD_RANKS; i++) {
        pids[i] = fork();
        FIT_CHECK(pids[i] >= 0, "fork: %s", strerror(errno));
        if (pids[i] == 0) {
            close(ready[0]);
            for (j = 0; j < BOARD_RANKS; j++) {
                close(go[j][1]);
                if (j != i)
                    close(go[j][0]);
            }
            board_child(path, c, case_no, i, ready[1], go[i][0]);
        }
    }
    close(ready[1]);
    for (i = 0; i < BOARD_RANKS; i++)
        close(go[i][0]);
    /* Every rank has published (or chose not to) before any listens: NCCL's order. */
    while (got < BOARD_RANKS && board_wait_byte(ready[0], 10000))
        got++;
    board_release(go);
    /* Every rank has read the board before any finalizes. */
    got = 0;
    while (got < BOARD_RANKS && board_wait_byte(ready[0], 10000))
        got++;
    board_release(go);
    for (i = 0; i < BOARD_RANKS; i++) {
        int status = 0;
        fit_bound_t b;

        fit_bound_init(&b, "a rank to exit", 15.0 * fit_time_scale(), 1000000);
        while (waitpid(pids[i], &status, WNOHANG) == 0) {
            if (!fit_bound_try_step(&b)) {
                kill(pids[i], SIGKILL);
                (void)waitpid(pids[i], &status, 0);
                break;
            }
            usleep(2000);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fails++;
    }
    close(ready[0]);
    for (i = 0; i < BOARD_RANKS; i++)
        close(go[i][1]);
    FIT_CHECK(got == BOARD_RANKS, "%s: %d of %d ranks reached the barrier", c->name, got,
              BOARD_RANKS);
    FIT_CHECK(fails == 0, "%s: %d rank(s) failed (their FAIL lines above)", c->name, fails);
    snprintf(file, sizeof(file), "/dev/shm/ferry-%u-slurm.integ-board-%d.%d", (unsigned)geteuid(),
             (int)getpid(), case_no);
    FIT_CHECK(lstat(file, &st) != 0 && errno == ENOENT,
              "%s: the board %s is still there after every rank finalized", c->name, file);
    fit_pass("%s: 4 ranks checked, the board removed, %.2f s", c->name, fit_now() - t0);
}

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    static const board_case_t cases[] = {
        {"pairs", {0, 0, 1, 1}, {0}, -1,
         {"2 share this 1 CPU; budget 1 CPU", "2 share this 1 CPU; budget 1 CPU",
          "2 share this 1 CPU; budget 1 CPU", "2 share this 1 CPU; budget 1 CPU"},
         {"shared by 2 of the 4 local ranks (OMPI_COMM_WORLD_LOCAL_SIZE; their masks compared)",
          "shared by 2 of the 4 local ranks (OMPI_COMM_WORLD_LOCAL_SIZE; their masks compared)",
          "shared by 2 of the 4 local ranks (OMPI_COMM_WORLD_LOCAL_SIZE; their masks compared)",
          "shared by 2 of the 4 local ranks (OMPI_COMM_WORLD_LOCAL_SIZE; their masks compared)"}},
        {"all", {0}, {1, 1, 1, 1}, -1,
         {"4 share these 2 CPUs; budget 1 CPU", "4 share these 2 CPUs; budget 1 CPU",
          "4 share these 2 CPUs; budget 1 CPU", "4 share these 2 CPUs; budget 1 CPU"},
         {"1 CPU: 2 in the affinity mask shared by 4", "1 CPU: 2 in the affinity mask shared by 4",
          "1 CPU: 2 in the affinity mask shared by 4",
          "1 CPU: 2 in the affinity mask shared by 4"}},
        {"uneven", {0, 0, 0, 1}, {0}, -1,
         {"3 share this 1 CPU; budget 1 CPU", "3 share this 1 CPU; budget 1 CPU",
          "3 share this 1 CPU; budget 1 CPU", "disjoint, 1 CPU each; budget 1 CPU"},
         {"shared by 3 of the 4 local ranks", "shared by 3 of the 4 local ranks",
          "shared by 3 of the 4 local ranks",
          "1 CPU in the affinity mask, this rank's own (none of the other 3 local ranks' "
          "(OMPI_COMM_WORLD_LOCAL_SIZE) masks holds them: compared)"}},
        {"missing", {0, 0, 1, 1}, {0}, 3,
         {"3 of 4 ranks published their masks; the estimate stays",
          "3 of 4 ranks published their masks; the estimate stays",
          "3 of 4 ranks published their masks; the estimate stays", NULL},
         {NULL, NULL, NULL, NULL}},
    };
    cpu_set_t mine;
    size_t i;
    int c, n = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN); /* The silent rank's go pipe has no reader once it exits. */
    fit_set_role("integ_mask_board");
    FIT_CHECK(sched_getaffinity(0, sizeof(mine), &mine) == 0, "sched_getaffinity: %s",
              strerror(errno));
    for (c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &mine)) {
            if (n++ == 0)
                board_cpu_a = c;
            else
                board_cpu_b = c;
        }
    if (n < 2) {
        printf("skip: integ_mask_board needs two CPUs in its mask\n");
        return 77;
    }
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        board_run(path, &cases[i], (int)i);
    return 0;
}
