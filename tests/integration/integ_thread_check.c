/*
 * integ_thread_check: the harness's "no ferry-* thread left" check
 * (fit_check_no_ferry_threads), without the plugin. It must tell a thread
 * that was joined and is only on its way out of the kernel from one that
 * was never stopped.
 *
 *   joined   2000 threads named ferry-probe, each joined and checked at
 *            once: passes, and says how often the joined thread was still
 *            listed in /proc/self/task (PF_EXITING set)
 *   leak     a ferry-leak thread blocked in read, never stopped: the check
 *            fails at once (in a child), naming it as not exiting
 *
 *   integ_thread_check
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define THREAD_CHECK_JOINS 2000

static void *thread_check_probe(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "ferry-probe");
    return NULL;
}

static void *thread_check_blocked(void *arg)
{
    int fd = *(int *)arg;
    char c;

    pthread_setname_np(pthread_self(), "ferry-leak");
    while (read(fd, &c, 1) < 0)
        ;
    return NULL;
}

static void thread_check_joined(void)
{
    int i, listed = 0;

    for (i = 0; i < THREAD_CHECK_JOINS; i++) {
        pthread_t t;

        FIT_CHECK(pthread_create(&t, NULL, thread_check_probe, NULL) == 0, "pthread_create");
        FIT_CHECK(pthread_join(t, NULL) == 0, "pthread_join");
        listed += fit_count_threads("ferry-probe", NULL, 0) > 0;
        fit_check_no_ferry_threads("after pthread_join");
    }
    fit_pass("%d threads joined, each gone within the bound (%d still listed right after the join)",
             THREAD_CHECK_JOINS, listed);
}

/* The child starts the thread (fork keeps only the calling one) and runs the check. */
static void thread_check_leak(void)
{
    int out[2], block[2], status;
    char text[4096] = "";
    size_t used = 0;
    ssize_t n;
    pid_t pid;

    FIT_CHECK(pipe(out) == 0 && pipe(block) == 0, "pipe");
    pid = fork();
    FIT_CHECK(pid >= 0, "fork");
    if (pid == 0) {
        pthread_t t;

        dup2(out[1], STDERR_FILENO);
        if (pthread_create(&t, NULL, thread_check_blocked, &block[0]) != 0)
            _exit(2);
        while (fit_count_threads("ferry-leak", NULL, 0) == 0)
            usleep(1000); /* Named by the thread itself: wait until it did. */
        fit_check_no_ferry_threads("with a thread never stopped");
        _exit(0);
    }
    close(out[1]);
    while (used + 1 < sizeof(text) && (n = read(out[0], text + used, sizeof(text) - 1 - used)) > 0)
        used += (size_t)n;
    text[used] = '\0';
    close(out[0]);
    FIT_CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    FIT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1,
              "the check passed (status 0x%x) with a ferry-leak thread running:\n%s", status, text);
    FIT_CHECK(strstr(text, "1 of them not exiting: ferry-leak[") != NULL,
              "the check failed without naming ferry-leak as not exiting:\n%s", text);
    fit_pass("a ferry-* thread never stopped fails the check at once");
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fit_set_role("thread-check");
    thread_check_joined();
    thread_check_leak();
    printf("integ_thread_check: all checks passed\n");
    return 0;
}
