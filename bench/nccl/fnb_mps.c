/*
 * CUDA MPS control from the parent. Without MPS, ranks that share a GPU
 * time-slice it and every collective waits for a slice (a 4 KiB all_reduce
 * measured 4.5 ms instead of ~50 us), so timings would measure the scheduler,
 * not the network.
 *
 * Only nvidia-cuda-mps-control is used: its front end exits non-zero when no
 * daemon answers on CUDA_MPS_PIPE_DIRECTORY, which is the "already running"
 * test. A daemon someone else started is left alone; only one we started is
 * stopped. Every command runs under a deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "fnb.h"

#define FNB_MPS_CONTROL  "nvidia-cuda-mps-control"
#define FNB_MPS_CMD_S    30.0
#define FNB_MPS_READY_S  10.0

/*
 * Runs argv with stdin_text on its stdin and stdout/stderr sent to /dev/null
 * (quiet), or stderr kept. All output is dropped for the daemon start: a
 * daemon that kept our stdout would hold a caller's pipe open forever.
 * Returns the exit status, or -1 when it could not run or ran past timeout_s.
 */
static int fnb_cmd_run(char *const argv[], const char *stdin_text, int keep_stderr,
                       double timeout_s)
{
    int in[2];
    pid_t pid;
    int status = 0;
    double deadline = fnb_now() + timeout_s;

    if (pipe(in) != 0) {
        fprintf(stderr, "ferry_nccl_bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ferry_nccl_bench: fork: %s\n", strerror(errno));
        close(in[0]);
        close(in[1]);
        return -1;
    }
    if (pid == 0) {
        int null_fd = open("/dev/null", O_WRONLY);

        dup2(in[0], STDIN_FILENO);
        close(in[0]);
        close(in[1]);
        if (null_fd >= 0) {
            dup2(null_fd, STDOUT_FILENO);
            if (!keep_stderr) {
                dup2(null_fd, STDERR_FILENO);
            }
            close(null_fd);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    if (stdin_text != NULL) {
        struct sigaction ign = {.sa_handler = SIG_IGN}, old;
        ssize_t n;

        /* A command that exits unread must not kill us with SIGPIPE. A few
         * bytes into an empty pipe cannot block. */
        sigaction(SIGPIPE, &ign, &old);
        n = write(in[1], stdin_text, strlen(stdin_text));
        sigaction(SIGPIPE, &old, NULL);
        (void)n;
    }
    close(in[1]);

    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);

        if (got == pid) {
            break;
        }
        if (got < 0 && errno != EINTR) {
            return -1;
        }
        if (fnb_now() > deadline) {
            fprintf(stderr, "ferry_nccl_bench: %s timed out after %.0f s, killed\n", argv[0],
                    timeout_s);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    if (!WIFEXITED(status)) {
        return -1;
    }
    return WEXITSTATUS(status);
}

/* The pipe and log folders every rank and the daemon must agree on. */
void fnb_mps_env_defaults(void)
{
    setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/ferry-mps", 0);
    setenv("CUDA_MPS_LOG_DIRECTORY", "/tmp/ferry-mpslog", 0);
    mkdir(getenv("CUDA_MPS_PIPE_DIRECTORY"), 0755);
    mkdir(getenv("CUDA_MPS_LOG_DIRECTORY"), 0755);
}

int fnb_mps_running(void)
{
    char *argv[] = {(char *)FNB_MPS_CONTROL, NULL};

    return fnb_cmd_run(argv, "get_server_list\n", 0, FNB_MPS_CMD_S) == 0;
}

/* Returns 0 once the daemon answers, -1 otherwise. */
int fnb_mps_start(void)
{
    char *argv[] = {(char *)FNB_MPS_CONTROL, (char *)"-d", NULL};
    double deadline;
    int rc = fnb_cmd_run(argv, NULL, 0, FNB_MPS_CMD_S);

    if (rc != 0) {
        fprintf(stderr, "ferry_nccl_bench: '%s -d' failed (status %d); is MPS installed?\n",
                FNB_MPS_CONTROL, rc);
        return -1;
    }
    /* -d returns once the daemon forked; its socket may appear a moment later. */
    deadline = fnb_now() + FNB_MPS_READY_S;
    while (fnb_now() < deadline) {
        if (fnb_mps_running()) {
            return 0;
        }
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    }
    fprintf(stderr, "ferry_nccl_bench: MPS daemon started but does not answer on %s\n",
            getenv("CUDA_MPS_PIPE_DIRECTORY"));
    return -1;
}

void fnb_mps_stop(void)
{
    char *argv[] = {(char *)FNB_MPS_CONTROL, NULL};

    if (fnb_cmd_run(argv, "quit\n", 1, FNB_MPS_CMD_S) != 0) {
        fprintf(stderr, "ferry_nccl_bench: stopping MPS failed; stop it with "
                "'echo quit | %s' (CUDA_MPS_PIPE_DIRECTORY=%s)\n", FNB_MPS_CONTROL,
                getenv("CUDA_MPS_PIPE_DIRECTORY"));
    }
}
