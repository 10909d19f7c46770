/*
 * junk: 500 strangers sending random bytes, then one more after the log
 * limit's interval, then a real peer. Every stranger is still named in the
 * log, but only the first FERRY_LOG_LIMIT_BURST (10) as WARN lines, the
 * rest as INFO; the next interval's first WARN is preceded by one line
 * counting the 490 held back. The real peer is accepted and its data
 * arrives intact.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hostile.h"

#define JUNK_N      500
#define JUNK_BATCH  25
#define JUNK_BURST  10   /* FERRY_LOG_LIMIT_BURST. */
#define JUNK_WINDOW 10.0 /* FERRY_LOG_LIMIT_INTERVAL_S. */

/* Lines >= from of level (any if < 0) holding both needles. */
static int junk_count(int from, int level, const char *n1, const char *n2)
{
    int i = from, n = 0;

    while ((i = fit_log_find(i, level, n1, n2, NULL, NULL, 0)) >= 0) {
        n++;
        i++;
    }
    return n;
}

static void junk_batch(hostile_env_t *e, int n)
{
    int k;

    for (k = 0; k < n; k++)
        hostile_open(e->h, HOSTILE_RANDOM);
    hostile_accept_rounds(e, 2);
    hostile_poll();
}

void hostile_case_junk(hostile_env_t *e)
{
    void *send_comm = NULL, *recv_comm = NULL;
    int k, lines0, warns, infos, summaries;
    double t0, took;
    char line[4096], held[32];

    fit_log_allow_warns(1);
    lines0 = fit_log_lines();
    t0 = fit_now();
    for (k = 0; k < JUNK_N; k += JUNK_BATCH)
        junk_batch(e, JUNK_BATCH);
    hostile_pump_accept(&e->plugin, e->listen_comm, 5.0, 1);
    hostile_expect_dropped(0);
    took = fit_now() - t0;
    hostile_expect_logged(lines0);
    warns = junk_count(lines0, NCCL_LOG_WARN, "rejected stream from", NULL);
    infos = junk_count(lines0, NCCL_LOG_INFO, "rejected stream from", "WARN suppressed");
    summaries = junk_count(lines0, NCCL_LOG_WARN, "more warnings like the next were suppressed",
                           NULL);
    printf("  %d junk connections in %.2f s: %d WARN, %d INFO, %d suppression line(s)\n", JUNK_N,
           took, warns, infos, summaries);
    FIT_CHECK(took < JUNK_WINDOW, "the junk took %.1f s, past the limit's %.0f s interval: no "
              "fixed count to check", took, JUNK_WINDOW);
    FIT_CHECK(warns == JUNK_BURST && summaries == 0 && infos == JUNK_N - JUNK_BURST,
              "%d junk connections gave %d WARN + %d suppression lines and %d INFO, expected %d "
              "WARN and %d INFO", JUNK_N, warns, summaries, infos, JUNK_BURST, JUNK_N - JUNK_BURST);
    fit_pass("%d junk connections: %d WARN lines, the other %d as INFO, each naming its address",
             JUNK_N, warns, infos);

    /* The next interval: its first rejection says how many WARNs were held back. */
    while (fit_now() - t0 < JUNK_WINDOW + 0.5) {
        hostile_accept_rounds(e, 1);
        usleep(50000);
    }
    junk_batch(e, 1);
    hostile_pump_accept(&e->plugin, e->listen_comm, 5.0, 1);
    hostile_expect_dropped(0);
    snprintf(held, sizeof(held), "%d more warnings", JUNK_N - JUNK_BURST);
    FIT_CHECK(fit_log_find(lines0, NCCL_LOG_WARN, held, "suppressed", NULL, line,
                           sizeof(line)) >= 0, "no WARN says '%s ... suppressed'", held);
    printf("  %s\n", line);
    warns = junk_count(lines0, NCCL_LOG_WARN, NULL, NULL);
    FIT_CHECK(warns == JUNK_BURST + 2, "%d WARN lines in all, expected %d (the burst, the "
              "suppression count, the new interval's first)", warns, JUNK_BURST + 2);
    hostile_close_all();
    fit_log_allow_warns(0);

    /* A real peer after all that: accepted, its data intact. */
    hostile_real_connect(e, &send_comm, &recv_comm);
    hostile_real_xfer(e, send_comm, recv_comm, (size_t)1 << 20, 7500,
                      "on the real connection after the junk");
    printf("HOSTILE case=junk strangers=%d warn_lines=%d info_lines=%d seconds=%.2f\n",
           JUNK_N + 1, warns, infos, took);
    fit_pass("%d junk connections: %d WARN lines (%d, a suppression count of %d, 1), a real "
             "peer accepted after them", JUNK_N + 1, warns, JUNK_BURST, JUNK_N - JUNK_BURST);
    FIT_NCCL(e->plugin.net->closeSend(send_comm));
    FIT_NCCL(e->plugin.net->closeRecv(recv_comm));
}
