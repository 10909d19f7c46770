/*
 * Parent side: count GPUs in a throw-away child, start MPS if ranks share a
 * GPU, fork the ranks and watch them. The parent itself never touches CUDA or
 * NCCL (a CUDA context does not survive fork), and every wait has a deadline:
 * the first rank to fail, a signal or --timeout stops all the others.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "fnb.h"

#define FNB_PROBE_S 60.0 /* First CUDA init on a big GPU can take seconds. */
#define FNB_GRACE_S 5.0  /* SIGTERM to SIGKILL. */
#define FNB_REAP_S  10.0 /* SIGKILL to giving up on a child. */

static volatile sig_atomic_t fnb_stop_signal;

static void fnb_on_signal(int sig)
{
    fnb_stop_signal = sig;
}

static void fnb_signals_set(void (*handler)(int))
{
    struct sigaction sa = {.sa_handler = handler};

    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

double fnb_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* cudaGetDeviceCount in a child, so the parent stays free of CUDA. */
static int fnb_gpus_count(void)
{
    int fds[2], n = -1, status;
    struct pollfd pfd;
    pid_t pid;

    if (pipe(fds) != 0) {
        fprintf(stderr, "ferry_nccl_bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ferry_nccl_bench: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int count = fnb_probe_gpus();
        ssize_t w;

        close(fds[0]);
        w = write(fds[1], &count, sizeof(count));
        _exit(w == (ssize_t)sizeof(count) ? 0 : 1);
    }
    close(fds[1]);
    pfd = (struct pollfd){.fd = fds[0], .events = POLLIN};
    if (poll(&pfd, 1, (int)(FNB_PROBE_S * 1000)) == 1 &&
        read(fds[0], &n, sizeof(n)) != (ssize_t)sizeof(n)) {
        n = -1;
    }
    close(fds[0]);
    /* The probe exits right after writing; one that hangs in CUDA is killed. */
    for (double end = fnb_now() + FNB_GRACE_S; waitpid(pid, &status, WNOHANG) != pid;) {
        if (fnb_now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    if (n <= 0) {
        fprintf(stderr, "ferry_nccl_bench: no usable GPU (probe returned %d)\n", n);
    }
    return n;
}

static void fnb_rank_child(const fnb_opts_t *o, fnb_shared_t *sh, int rank)
{
    int rc;

    /* Handlers are the parent's business; ranks die on SIGTERM as usual and
     * with the parent if it is killed outright. */
    fnb_signals_set(SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rc = fnb_rank_main(o, sh, rank);
    if (rc != 0) {
        atomic_store(&sh->abort, 1);
    }
    fflush(NULL);
    exit(rc);
}

static void fnb_kill_all(const pid_t *pids, const int *done, int n, int sig)
{
    for (int r = 0; r < n; r++) {
        if (!done[r]) {
            kill(pids[r], sig);
        }
    }
}

static int fnb_rank_of(const pid_t *pids, int n, pid_t pid)
{
    for (int r = 0; r < n; r++) {
        if (pids[r] == pid) {
            return r;
        }
    }
    return -1;
}

/* Records one reaped rank; returns the run status it implies. */
static int fnb_reaped(int rank, int status, int stopping)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        return 0;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == FNB_EXIT_WRONG) {
        fprintf(stderr, "ferry_nccl_bench: rank %d found wrong results\n", rank);
        return FNB_EXIT_WRONG;
    }
    if (stopping) {
        /* A consequence of the first failure, not news. */
        return FNB_EXIT_ERROR;
    }
    if (WIFEXITED(status)) {
        fprintf(stderr, "ferry_nccl_bench: rank %d failed (exit %d)\n", rank,
                WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        fprintf(stderr, "ferry_nccl_bench: rank %d killed by signal %d (%s)\n", rank,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    return FNB_EXIT_ERROR;
}

/*
 * Reaps the ranks. The first failure stops the rest: a surviving rank would
 * otherwise wait inside NCCL for a peer that is gone, with no timeout of its own.
 */
static int fnb_watch(const fnb_opts_t *o, fnb_shared_t *sh, const pid_t *pids, double deadline)
{
    int done[FNB_MAX_RANKS] = {0};
    int alive = o->nranks, result = 0, stopping = 0, killed = 0;
    double kill_at = 0.0;

    while (alive > 0) {
        int status, rank;
        pid_t pid = waitpid(-1, &status, WNOHANG);

        if (pid < 0 && errno == EINTR) {
            continue;
        }
        if (pid < 0) {
            fprintf(stderr, "ferry_nccl_bench: waitpid: %s\n", strerror(errno));
            return FNB_EXIT_ERROR;
        }
        if (pid > 0) {
            rank = fnb_rank_of(pids, o->nranks, pid);
            if (rank < 0) {
                continue;
            }
            done[rank] = 1;
            alive--;
            int rc = fnb_reaped(rank, status, stopping);
            if (rc > result) {
                result = rc;
            }
            if (rc == FNB_EXIT_ERROR && !stopping) {
                stopping = 1;
                kill_at = fnb_now() + FNB_GRACE_S;
                atomic_store(&sh->abort, 1);
                fnb_kill_all(pids, done, o->nranks, SIGTERM);
            }
            continue;
        }
        if (!stopping && (fnb_stop_signal != 0 || fnb_now() > deadline)) {
            if (fnb_stop_signal != 0) {
                fprintf(stderr, "ferry_nccl_bench: %s, stopping the ranks\n",
                        strsignal(fnb_stop_signal));
            } else {
                fprintf(stderr, "ferry_nccl_bench: timeout (%d s), stopping the ranks\n",
                        o->timeout_s);
            }
            stopping = 1;
            result = FNB_EXIT_ERROR;
            kill_at = fnb_now() + FNB_GRACE_S;
            atomic_store(&sh->abort, 1);
            fnb_kill_all(pids, done, o->nranks, SIGTERM);
        }
        if (stopping && !killed && fnb_now() > kill_at) {
            killed = 1;
            fnb_kill_all(pids, done, o->nranks, SIGKILL);
        }
        if (killed && fnb_now() > kill_at + FNB_REAP_S) {
            fprintf(stderr, "ferry_nccl_bench: %d rank(s) survive SIGKILL; giving up\n", alive);
            return FNB_EXIT_ERROR;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return result;
}

static int fnb_run_ranks(const fnb_opts_t *o, fnb_shared_t *sh, double deadline)
{
    pid_t pids[FNB_MAX_RANKS];

    fflush(NULL);
    for (int r = 0; r < o->nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            fnb_rank_child(o, sh, r);
        }
        if (pids[r] < 0) {
            fprintf(stderr, "ferry_nccl_bench: fork rank %d: %s\n", r, strerror(errno));
            atomic_store(&sh->abort, 1);
            for (int q = 0; q < r; q++) {
                kill(pids[q], SIGKILL);
                waitpid(pids[q], NULL, 0);
            }
            return FNB_EXIT_ERROR;
        }
    }
    return fnb_watch(o, sh, pids, deadline);
}

int fnb_launch(const fnb_opts_t *o)
{
    double deadline = fnb_now() + o->timeout_s;
    int mps_started = 0, rc;
    fnb_shared_t *sh;

    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "ferry_nccl_bench: mmap: %s\n", strerror(errno));
        return FNB_EXIT_ERROR;
    }
    fnb_signals_set(fnb_on_signal);
    sh->ngpus = fnb_gpus_count();
    if (sh->ngpus <= 0) {
        return FNB_EXIT_ERROR;
    }
    /* Two ranks on one GPU are "Duplicate GPU" to NCCL unless they look like
     * different hosts; as different hosts all their traffic takes the NET
     * transport, i.e. the plugin. */
    sh->split_hosts = o->split_hosts || o->nranks > sh->ngpus;
    sh->mps = "off";
    if (o->nranks > sh->ngpus && o->use_mps) {
        fnb_mps_env_defaults();
        if (fnb_mps_running()) {
            sh->mps = "already running";
        } else if (fnb_mps_start() == 0) {
            sh->mps = "started";
            mps_started = 1;
        } else {
            return FNB_EXIT_ERROR;
        }
    }
    rc = fnb_run_ranks(o, sh, deadline);
    if (mps_started) {
        fnb_mps_stop();
    }
    munmap(sh, sizeof(*sh));
    return rc;
}
