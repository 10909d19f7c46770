/*
 * On-demand dump of every live comm, lane and request, for a job that looks
 * stuck. The signal handler only writes a byte to a pipe (async-signal-safe);
 * the ferry-dump thread does the formatting, under the registry lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/registry.h"

static int ferry_px_dump_pipe[2] = {-1, -1};
static int ferry_px_dump_signo;
static struct sigaction ferry_px_dump_old_action;
static pthread_t ferry_px_dump_thread;

static void ferry_px_dump_handler(int signo)
{
    int saved_errno = errno;
    char c = 'd';
    ssize_t n = write(ferry_px_dump_pipe[1], &c, 1);

    (void)n;
    (void)signo;
    errno = saved_errno;
}

/* Log through NCCL's logger line by line, and to stderr, which the user asked for. */
static void ferry_px_dump_emit(void)
{
    char *text = NULL, *line, *save = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);

    if (mem == NULL)
        return;
    ferry_px_registry_dump(mem);
    fclose(mem);
    fputs(text, stderr);
    fflush(stderr);
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        ferry_log(FERRY_LOG_INFO, FERRY_LOG_INIT | FERRY_LOG_NET, __FILE__, __LINE__, "%s", line);
    free(text);
}

static void *ferry_px_dump_main(void *arg)
{
    char c;

    (void)arg;
    pthread_setname_np(pthread_self(), "ferry-dump");
    for (;;) {
        ssize_t n = read(ferry_px_dump_pipe[0], &c, 1);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || c == 'q')
            break;
        ferry_px_dump_emit();
    }
    return NULL;
}

int ferry_px_dump_start(int signo)
{
    struct sigaction sa;

    if (signo <= 0 || ferry_px_dump_signo != 0)
        return 0;
    if (pipe2(ferry_px_dump_pipe, O_CLOEXEC) != 0) {
        FERRY_WARN("dump on signal %d disabled: pipe2 failed: %s", signo, strerror(errno));
        return -1;
    }
    if (pthread_create(&ferry_px_dump_thread, NULL, ferry_px_dump_main, NULL) != 0) {
        FERRY_WARN("dump on signal %d disabled: cannot start the ferry-dump thread", signo);
        goto err_close_pipe;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ferry_px_dump_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signo, &sa, &ferry_px_dump_old_action) != 0) {
        FERRY_WARN("dump on signal %d disabled: sigaction failed: %s", signo, strerror(errno));
        goto err_join;
    }
    ferry_px_dump_signo = signo;
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "kill -%d %d dumps every ferry comm, lane and request",
               signo, (int)getpid());
    return 0;

err_join:
    if (write(ferry_px_dump_pipe[1], "q", 1) == 1)
        pthread_join(ferry_px_dump_thread, NULL);
err_close_pipe:
    close(ferry_px_dump_pipe[0]);
    close(ferry_px_dump_pipe[1]);
    ferry_px_dump_pipe[0] = ferry_px_dump_pipe[1] = -1;
    return -1;
}

void ferry_px_dump_stop(void)
{
    if (ferry_px_dump_signo == 0)
        return;
    /* Restore first: after this no handler of ours can run, so the pipe may close. */
    sigaction(ferry_px_dump_signo, &ferry_px_dump_old_action, NULL);
    ferry_px_dump_signo = 0;
    if (write(ferry_px_dump_pipe[1], "q", 1) == 1)
        pthread_join(ferry_px_dump_thread, NULL);
    close(ferry_px_dump_pipe[0]);
    close(ferry_px_dump_pipe[1]);
    ferry_px_dump_pipe[0] = ferry_px_dump_pipe[1] = -1;
}
