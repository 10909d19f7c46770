/*
 * ferry-info [--backend auto|socket|ib|all] [--json] [--plugin NAME|PATH]
 *            [--no-selftest] [--timeout S] [--verbose]
 *
 * Loads the plugin (parent), then runs each backend asked for in a child
 * process and prints what they found. Exit status: 0 healthy, 1 not, 2 bad
 * usage, 3 degraded (it works, but NCCL_FERRY_BACKEND=auto passed over a
 * backend the host or the variables ask for). docs/ferry-info.md says what
 * each field means.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "info/info.h"

#define FERRY_INFO_MAX_RUNS 3

static void ferry_info_usage(FILE *out)
{
    fprintf(out,
            "usage: ferry-info [--backend auto|socket|ib|all] [--json] [--plugin NAME|PATH]\n"
            "                  [--no-selftest] [--timeout SECONDS] [--verbose]\n"
            "Loads libnccl-net-ferry.so as NCCL does and reports its version, ABI, devices,\n"
            "backend choice, configuration, CPU mask and threads, and a loopback self-test\n"
            "per device. Exit status 0: healthy; 1: not; 2: bad usage; 3: degraded (works,\n"
            "but not on the backend this host or its NCCL_IB_* variables ask for).\n");
}

/* Reads exactly len bytes before deadline; the count read. */
static size_t ferry_info_read_all(int fd, void *buf, size_t len, double deadline)
{
    size_t got = 0;

    while (got < len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        double left = deadline - ferry_info_now();
        ssize_t n;

        if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
            break;
        n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static void ferry_info_write_all(int fd, const void *buf, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = write(fd, (const char *)buf + off, len - off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        off += (size_t)n;
    }
}

/* One backend in a child; a child that dies or hangs becomes an unhealthy run saying so. */
static void ferry_info_fork_run(const ferry_info_plugin_t *p, const char *backend,
                                const ferry_info_opts_t *o, ferry_info_run_t *run)
{
    double deadline = ferry_info_now() + o->timeout_s;
    int fds[2], status = 0, timed_out;
    size_t got;
    pid_t pid;

    memset(run, 0, sizeof(*run));
    snprintf(run->backend_asked, sizeof(run->backend_asked), "%s", backend);
    fflush(stdout);
    fflush(stderr);
    if (pipe(fds) != 0 || (pid = fork()) < 0) {
        snprintf(run->init_error, sizeof(run->init_error), "cannot start a child for the %s "
                 "backend: %s", backend, strerror(errno));
        return;
    }
    if (pid == 0) {
        static ferry_info_run_t mine;

        close(fds[0]);
        ferry_info_run(p, backend, o, &mine);
        ferry_info_write_all(fds[1], &mine, sizeof(mine));
        _exit(0);
    }
    close(fds[1]);
    got = ferry_info_read_all(fds[0], run, sizeof(*run), deadline);
    close(fds[0]);
    timed_out = got < sizeof(*run) && ferry_info_now() >= deadline;
    if (timed_out)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got == sizeof(*run) && run->complete)
        return;
    memset(run, 0, sizeof(*run));
    snprintf(run->backend_asked, sizeof(run->backend_asked), "%s", backend);
    if (timed_out)
        snprintf(run->init_error, sizeof(run->init_error), "the %s backend's run did not finish "
                 "in %.0f s (killed); run with --verbose to see the plugin's log, or raise "
                 "--timeout", backend, o->timeout_s);
    else if (WIFSIGNALED(status))
        snprintf(run->init_error, sizeof(run->init_error), "the %s backend's run died of signal "
                 "%d (%s) inside the plugin; run with --verbose to see its last log lines",
                 backend, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(run->init_error, sizeof(run->init_error), "the %s backend's run ended (exit %d) "
                 "without a report", backend, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static int ferry_info_parse(int argc, char **argv, ferry_info_opts_t *o, const char **backend,
                            const char **plugin)
{
    int i;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--verbose") == 0) {
            o->verbose = 1;
        } else if (strcmp(a, "--no-selftest") == 0) {
            o->no_selftest = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            ferry_info_usage(stdout);
            exit(0);
        } else if (v != NULL && strcmp(a, "--backend") == 0) {
            *backend = v;
            i++;
        } else if (v != NULL && strcmp(a, "--plugin") == 0) {
            *plugin = v;
            i++;
        } else if (v != NULL && strcmp(a, "--timeout") == 0) {
            o->timeout_s = atof(v);
            i++;
        } else {
            fprintf(stderr, "ferry-info: unknown or incomplete argument '%s'\n", a);
            return -1;
        }
    }
    if (strcmp(*backend, "auto") != 0 && strcmp(*backend, "socket") != 0 &&
        strcmp(*backend, "ib") != 0 && strcmp(*backend, "all") != 0) {
        fprintf(stderr, "ferry-info: --backend %s: expected auto, socket, ib or all\n", *backend);
        return -1;
    }
    if (o->timeout_s <= 0) {
        fprintf(stderr, "ferry-info: --timeout must be a positive number of seconds\n");
        return -1;
    }
    return 0;
}

/*
 * all: the backend NCCL would get first (as configured), then every other
 * backend of ferry's by name. A named backend that cannot start here is
 * reported but does not make the host unhealthy; one that starts must pass.
 * The first run decides whether the host is degraded: that is what NCCL gets.
 */
static int ferry_info_runs(const ferry_info_plugin_t *p, const char *backend,
                           const ferry_info_opts_t *o, ferry_info_run_t *runs,
                           ferry_info_verdict_t *verdict_p)
{
    static const char *const named[] = {"ib", "socket"};
    int i, n = 0, healthy;

    ferry_info_fork_run(p, strcmp(backend, "all") == 0 ? "auto" : backend, o, &runs[n++]);
    healthy = runs[0].healthy;
    for (i = 0; strcmp(backend, "all") == 0 && i < 2 && n < FERRY_INFO_MAX_RUNS; i++) {
        if (strcmp(runs[0].backend, named[i]) == 0)
            continue;
        ferry_info_fork_run(p, named[i], o, &runs[n]);
        runs[n].optional = 1;
        if (runs[n].init_ok && !runs[n].healthy)
            healthy = 0;
        n++;
    }
    *verdict_p = !healthy ? FERRY_INFO_UNHEALTHY
               : runs[0].degraded ? FERRY_INFO_DEGRADED : FERRY_INFO_HEALTHY;
    return n;
}

int main(int argc, char **argv)
{
    static ferry_info_plugin_t plugin;
    static ferry_info_run_t runs[FERRY_INFO_MAX_RUNS];
    ferry_info_opts_t o = {.timeout_s = 60.0};
    const char *backend = "auto", *asked = getenv("NCCL_NET_PLUGIN");
    char self[1024] = "", err[4096];
    ssize_t n;
    ferry_info_verdict_t verdict = FERRY_INFO_UNHEALTHY;
    int nruns;

    if (asked == NULL || asked[0] == '\0')
        asked = "ferry";
    if (ferry_info_parse(argc, argv, &o, &backend, &asked) != 0) {
        ferry_info_usage(stderr);
        return 2;
    }
    /* NCCL_NET_PLUGIN may list several plugins; ferry-info checks the first. */
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    {
        char first[512];

        snprintf(first, sizeof(first), "%.*s", (int)strcspn(asked, ","), asked);
        if (ferry_info_plugin_open(&plugin, first, self, err, sizeof(err)) != 0) {
            if (o.json) {
                ferry_info_print_json(&plugin, NULL, 0, FERRY_INFO_UNHEALTHY, err);
            } else {
                printf("ferry-info %s\nFAIL: %s\n", FERRY_VERSION_STRING, err);
            }
            return 1;
        }
    }
    nruns = ferry_info_runs(&plugin, backend, &o, runs, &verdict);
    if (o.json)
        ferry_info_print_json(&plugin, runs, nruns, verdict, NULL);
    else
        ferry_info_print_text(&plugin, runs, nruns, verdict);
    return (int)verdict;
}
