/*
 * integ_dump: NCCL_FERRY_DUMP_SIGNAL. With requests in flight (receives
 * posted and nothing sent to them; a send posted with no receive), raise the
 * dump signal and check the text that reaches the logger (the plugin also
 * copies it to stderr) lists the comms, the peer address, the lanes and each
 * posted request with its size. Then the requests must still complete with
 * intact data, and after finalize + dlclose the signal's previous handler must
 * be back (a handler left pointing into the unloaded library would crash the
 * next kill -USR1).
 *
 * With FIT_DUMP_RECEIVER_DRIVEN=1 (the ib backend: an isend returns no
 * request until its receive is posted, so there is no lonely send to show)
 * pair B posts nothing before the dump, and the dump must show the
 * transport's QPs and clear-to-send FIFO instead of lanes and threads.
 *
 * With FIT_DUMP_TRAFFIC=1, dumps also run while messages move: the dump's
 * thread reads the backend's counters as this thread's isend/irecv/test
 * change them, so under ThreadSanitizer a plain read there is a race report.
 *
 *   integ_dump [--plugin PATH]       (ctest sets NCCL_FERRY_DUMP_SIGNAL=USR1)
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include "harness.h"

#define DUMP_NRECV 3
#define DUMP_TRAFFIC_SIGNALS 20

static volatile sig_atomic_t dump_own_hits;

static void dump_own_handler(int signo)
{
    (void)signo;
    dump_own_hits++;
}

typedef struct dump_pair {
    void *send_comm;
    void *recv_comm;
    void *smh, *rmh;
    char  addr[80];
} dump_pair_t;

static void dump_pair_open(const fit_plugin_t *p, void *ctx_l, void *ctx_c, dump_pair_t *pr,
                           void *sbuf, void *rbuf, size_t len)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *listen_comm = fit_listen(p, ctx_l, 0, handle);

    fit_handle_addr(handle, pr->addr, sizeof(pr->addr));
    fit_connect_accept(p, ctx_c, 0, handle, listen_comm, &pr->send_comm, &pr->recv_comm, NULL);
    FIT_NCCL(p->net->closeListen(listen_comm));
    FIT_NCCL(p->net->regMr(pr->send_comm, sbuf, len, NCCL_PTR_HOST, &pr->smh));
    FIT_NCCL(p->net->regMr(pr->recv_comm, rbuf, len, NCCL_PTR_HOST, &pr->rmh));
}

static void *dump_post_recv(const fit_plugin_t *p, dump_pair_t *pr, void *buf, size_t cap)
{
    fit_bound_t b;
    void *req;
    int tag = 1;

    fit_bound_init(&b, "irecv", 10.0, 10000000L);
    for (;;) {
        req = NULL;
        FIT_NCCL(p->net->irecv(pr->recv_comm, 1, &buf, &cap, &tag, &pr->rmh, NULL, &req));
        if (req != NULL)
            return req;
        fit_bound_step(&b);
    }
}

static void *dump_post_send(const fit_plugin_t *p, dump_pair_t *pr, void *buf, size_t size)
{
    fit_bound_t b;
    void *req;

    fit_bound_init(&b, "isend", 10.0, 10000000L);
    for (;;) {
        req = NULL;
        FIT_NCCL(p->net->isend(pr->send_comm, buf, size, 1, pr->smh, NULL, &req));
        if (req != NULL)
            return req;
        fit_bound_step(&b);
    }
}

static void dump_wait(const fit_plugin_t *p, void *req, size_t expect, const char *what)
{
    fit_bound_t b;
    int done = 0, size = -1;

    fit_bound_init(&b, what, 20.0, 100000000L);
    for (;;) {
        FIT_NCCL(p->net->test(req, &done, &size));
        if (done)
            break;
        fit_bound_step(&b);
    }
    FIT_CHECK((size_t)size == expect, "%s: test reported %d bytes, expected %zu", what, size,
              expect);
}

/* Wait until lines after from stop arriving (the dump's last comm has been logged). */
static int dump_settle(int from, double seconds, char *text, size_t len)
{
    int last = -1;
    fit_bound_t b;
    double quiet_since = 0;

    fit_bound_init(&b, "waiting for the dump", seconds, 1000000000L);
    /* The dump is formatted on a helper thread: wait until lines stop arriving for 0.3 s. */
    while (fit_bound_try_step(&b)) {
        int now_lines = fit_log_lines();

        if (now_lines != last) {
            last        = now_lines;
            quiet_since = fit_now();
        } else if (now_lines > from && fit_now() - quiet_since > 0.3) {
            break;
        }
    }
    fit_log_text(from, text, len);
    return fit_log_lines() - from;
}

/* Raise the signal and wait until the dump's last comm has been logged. */
static int dump_trigger(int signo, double seconds, char *text, size_t len)
{
    int from = fit_log_lines();

    FIT_CHECK(kill(getpid(), signo) == 0, "kill");
    return dump_settle(from, seconds, text, len);
}

static int dump_count(const char *hay, const char *needle)
{
    int n = 0;

    for (; (hay = strstr(hay, needle)) != NULL; hay += strlen(needle))
        n++;
    return n;
}

/*
 * DUMP_TRAFFIC_SIGNALS dumps, each raised before a run of messages on the
 * pair that goes on until that dump has reached the logger: every dump walks
 * the comms while their counters move. Each message is checked intact.
 */
static void dump_during_traffic(const fit_plugin_t *p, dump_pair_t *pr, char *sbuf, char *rbuf,
                                int signo, int receiver_driven, char *text, size_t len)
{
    static const size_t sizes[] = { 1, 4099, 65543, 262147 };
    int from = fit_log_lines(), sig, msgs = 0, nlines;

    for (sig = 0; sig < DUMP_TRAFFIC_SIGNALS; sig++) {
        int before = fit_log_lines();
        fit_bound_t b;

        FIT_CHECK(kill(getpid(), signo) == 0, "kill");
        fit_bound_init(&b, "a dump during traffic", 20.0, 1000000L);
        do {
            size_t size = sizes[msgs % 4];
            void *rreq = dump_post_recv(p, pr, rbuf, size), *sreq;

            fit_fill(sbuf, size, 500 + (uint64_t)msgs);
            sreq = dump_post_send(p, pr, sbuf, size);
            dump_wait(p, sreq, size, "send during dumps");
            dump_wait(p, rreq, size, "receive during dumps");
            fit_check_pattern(rbuf, size, 500 + (uint64_t)msgs, "message during dumps");
            msgs++;
        } while (fit_log_find(before, -1, "dump of", "live comm", NULL, NULL, 0) < 0 &&
                 fit_bound_try_step(&b));
    }
    nlines = dump_settle(from, 10.0, text, len);
    printf("  %d dumps during %d messages: %d lines\n", DUMP_TRAFFIC_SIGNALS, msgs, nlines);
    FIT_CHECK(dump_count(text, "live comm(s)") == DUMP_TRAFFIC_SIGNALS,
              "%d dumps reached the logger during traffic, expected %d",
              dump_count(text, "live comm(s)"), DUMP_TRAFFIC_SIGNALS);
    if (receiver_driven)
        FIT_CHECK(dump_count(text, "ib: peer") >= DUMP_TRAFFIC_SIGNALS &&
                  dump_count(text, "QP 0: 0x") >= DUMP_TRAFFIC_SIGNALS,
                  "the dumps during traffic lack their ib lines (ib: peer, QP 0: 0x)");
    else
        FIT_CHECK(strcasestr(text, "lane") != NULL, "the dumps during traffic list no lanes");
    fit_pass("%d dumps while %d messages moved; every message intact", DUMP_TRAFFIC_SIGNALS,
             msgs);
}

static int dump_contains_ci(const char *hay, const char *needle)
{
    return strcasestr(hay, needle) != NULL;
}

int main(int argc, char **argv)
{
    static const size_t recv_caps[DUMP_NRECV] = { 4107, 8209, 12347 };
    static const size_t send_sizes[DUMP_NRECV] = { 4000, 8209, 1 };
    const size_t lonely_send = 3145733; /* Posted on pair B with no receive. */
    const char *path = fit_plugin_path(&argc, argv);
    const char *sig_env = getenv("NCCL_FERRY_DUMP_SIGNAL");
    const int receiver_driven = getenv("FIT_DUMP_RECEIVER_DRIVEN") != NULL &&
                                atoi(getenv("FIT_DUMP_RECEIVER_DRIVEN")) == 1;
    size_t len = (size_t)4 << 20;
    char *sbuf_a = malloc(len), *rbuf_a = malloc(len), *sbuf_b = malloc(len), *rbuf_b = malloc(len);
    char *text = malloc(1 << 20), cap_str[DUMP_NRECV + 1][32], comm_str[32];
    void *recv_reqs[DUMP_NRECV], *lonely_req, *late_req, *ctx_l, *ctx_c;
    struct sigaction own, cur;
    void *plugin_handler;
    fit_plugin_t plugin;
    dump_pair_t a, b;
    Dl_info info;
    int i, nlines, hits, signo = SIGUSR1;
    size_t off;

    FIT_CHECK(argc == 1, "usage: integ_dump [--plugin PATH]");
    FIT_CHECK(sbuf_a && rbuf_a && sbuf_b && rbuf_b && text, "malloc");
    fit_set_role("dump");
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    if (sig_env == NULL)
        setenv("NCCL_FERRY_DUMP_SIGNAL", "USR1", 1);
    else
        FIT_CHECK(strcasecmp(sig_env, "USR1") == 0 || strcasecmp(sig_env, "SIGUSR1") == 0 ||
                  atoi(sig_env) == SIGUSR1, "this test drives SIGUSR1, env says %s", sig_env);

    /* Our handler first: the plugin must put it back when it is unloaded. */
    memset(&own, 0, sizeof(own));
    own.sa_handler = dump_own_handler;
    sigemptyset(&own.sa_mask);
    FIT_CHECK(sigaction(signo, &own, NULL) == 0, "sigaction");

    fit_plugin_open(&plugin, path);
    ctx_l = fit_plugin_init(&plugin, 0x5555);
    ctx_c = fit_plugin_init(&plugin, 0x6666);
    FIT_CHECK(sigaction(signo, NULL, &cur) == 0, "sigaction");
    plugin_handler = (void *)cur.sa_handler;
    FIT_CHECK(plugin_handler != (void *)dump_own_handler,
              "NCCL_FERRY_DUMP_SIGNAL=USR1 but the plugin installed no SIGUSR1 handler at init");
    FIT_CHECK(dladdr(plugin_handler, &info) != 0 && info.dli_fname != NULL &&
              strstr(info.dli_fname, "nccl-net-ferry") != NULL,
              "SIGUSR1 handler %p is not in the plugin", plugin_handler);

    dump_pair_open(&plugin, ctx_l, ctx_c, &a, sbuf_a, rbuf_a, len);
    dump_pair_open(&plugin, ctx_l, ctx_c, &b, sbuf_b, rbuf_b, len);
    /* Pair A: receives posted, nothing sent. Pair B: a send posted, no receive. */
    for (i = 0, off = 0; i < DUMP_NRECV; off += recv_caps[i], i++)
        recv_reqs[i] = dump_post_recv(&plugin, &a, rbuf_a + off, recv_caps[i]);
    fit_fill(sbuf_b, lonely_send, 77);
    lonely_req = receiver_driven ? NULL : dump_post_send(&plugin, &b, sbuf_b, lonely_send);
    if (receiver_driven) {
        /* No clear-to-send on pair B: the isend returns no request, and its wait is the ring's. */
        void *none = NULL;

        FIT_NCCL(plugin.net->isend(b.send_comm, sbuf_b, lonely_send, 1, b.smh, NULL, &none));
        FIT_CHECK(none == NULL, "isend on pair B returned a request before the receiver posted");
    }

    nlines = dump_trigger(signo, 10.0, text, 1 << 20);
    printf("---- dump (%d lines) ----\n%s---- end of dump ----\n", nlines, text);
    FIT_CHECK(nlines > 0, "no dump reached the logger within 10 s of SIGUSR1");
    if (dump_own_hits != 0)
        printf("  note: the plugin also ran the previous SIGUSR1 handler\n");
    FIT_CHECK(strstr(text, "127.0.0.1") != NULL || strstr(text, "::1") != NULL,
              "the dump names no peer address (expected 127.0.0.1, listen %s)", a.addr);
    if (receiver_driven) {
        char waiting[96];

        FIT_CHECK(strstr(text, "QP 0: 0x") != NULL && strstr(text, "state RTS") != NULL,
                  "the dump lists no QP with its number and state");
        FIT_CHECK(strstr(text, "CTS FIFO head 0") != NULL &&
                  strstr(text, "clear-to-sends written 3") != NULL,
                  "the dump shows no clear-to-send FIFO positions (send head 0, 3 written)");
        snprintf(waiting, sizeof(waiting), "waiting to post: isend of message 0 (%zu bytes)",
                 lonely_send);
        FIT_CHECK(strstr(text, waiting) != NULL &&
                  strstr(text, "for the receiver's clear-to-send") != NULL,
                  "the dump does not show pair B's isend waiting for its clear-to-send "
                  "(expected \"%s ... for the receiver's clear-to-send\")", waiting);
    } else {
        FIT_CHECK(dump_contains_ci(text, "lane"), "the dump lists no lanes");
    }
    for (i = 0; i < DUMP_NRECV; i++) {
        snprintf(cap_str[i], sizeof(cap_str[i]), "%zu", recv_caps[i]);
        FIT_CHECK(strstr(text, cap_str[i]) != NULL,
                  "the dump does not list the posted receive of %zu bytes", recv_caps[i]);
    }
    snprintf(cap_str[DUMP_NRECV], sizeof(cap_str[DUMP_NRECV]), "%zu", lonely_send);
    FIT_CHECK(receiver_driven || strstr(text, cap_str[DUMP_NRECV]) != NULL,
              "the dump does not list the posted send of %zu bytes", lonely_send);
    FIT_CHECK(dump_contains_ci(text, "posted") || dump_contains_ci(text, "done") ||
              dump_contains_ci(text, "bytes"), "the dump shows no request counters");
    /* Helper threads and their wake-ups, or who moves the lanes without them (one CPU). */
    FIT_CHECK(receiver_driven ||
              (strstr(text, "served by ferry-pool-") != NULL &&
               strstr(text, "helper wake-ups by this comm's posts") != NULL &&
               strstr(text, "helper pool: ") != NULL && strstr(text, "  ferry-pool-0: ") != NULL) ||
              strstr(text, "no helper threads: NCCL's thread moves every lane") != NULL,
              "the dump shows neither helper threads with their wake-ups nor their absence");
    snprintf(comm_str, sizeof(comm_str), "%p", a.recv_comm);
    printf("  dump %s the receive comm pointer %s\n",
           strstr(text, comm_str) ? "names" : "does not name", comm_str);
    fit_pass("SIGUSR1 dump lists comms, peer, lanes, posted requests and counters");

    /* The dump changed nothing: everything completes intact. */
    for (i = 0, off = 0; i < DUMP_NRECV; i++) {
        void *req;

        fit_fill(sbuf_a + off, send_sizes[i], 100 + (uint64_t)i);
        req = dump_post_send(&plugin, &a, sbuf_a + off, send_sizes[i]);
        dump_wait(&plugin, req, send_sizes[i], "send on pair A");
        dump_wait(&plugin, recv_reqs[i], send_sizes[i], "posted receive on pair A");
        fit_check_pattern(rbuf_a + off, send_sizes[i], 100 + (uint64_t)i, "pair A after dump");
        off += recv_caps[i];
    }
    late_req = dump_post_recv(&plugin, &b, rbuf_b, len);
    if (lonely_req == NULL)
        lonely_req = dump_post_send(&plugin, &b, sbuf_b, lonely_send);
    dump_wait(&plugin, late_req, lonely_send, "late receive on pair B");
    dump_wait(&plugin, lonely_req, lonely_send, "lonely send on pair B");
    fit_check_pattern(rbuf_b, lonely_send, 77, "pair B after dump");
    fit_pass("requests complete intact after the dump");

    if (getenv("FIT_DUMP_TRAFFIC") != NULL && atoi(getenv("FIT_DUMP_TRAFFIC")) == 1)
        dump_during_traffic(&plugin, &a, sbuf_a, rbuf_a, signo, receiver_driven, text, 1 << 20);

    /*
     * With completions held back (NCCL_FERRY_INJECT_DELAY_US, as a zerocopy
     * release would hold them), a request whose bytes all left must say so
     * rather than look stuck on the wire.
     */
    if (getenv("NCCL_FERRY_INJECT_DELAY_US") != NULL &&
        atoi(getenv("NCCL_FERRY_INJECT_DELAY_US")) >= 500000) {
        void *held_recv, *held_send;

        held_recv = dump_post_recv(&plugin, &a, rbuf_a, 4096);
        fit_fill(sbuf_a, 3000, 55);
        held_send = dump_post_send(&plugin, &a, sbuf_a, 3000);
        usleep(100000);
        nlines = dump_trigger(signo, 10.0, text, 1 << 20);
        FIT_CHECK(nlines > 0, "no dump while completions are held back");
        FIT_CHECK(strstr(text, "completion held back") != NULL,
                  "a request with every byte out shows no 'completion held back':\n%s", text);
        dump_wait(&plugin, held_send, 3000, "held-back send");
        dump_wait(&plugin, held_recv, 3000, "held-back receive");
        fit_check_pattern(rbuf_a, 3000, 55, "held-back message");
        fit_pass("a request whose completion is held back says so in the dump");
    }

    nlines = dump_trigger(signo, 10.0, text, 1 << 20);
    FIT_CHECK(nlines > 0, "the second SIGUSR1 produced no dump");
    printf("  second dump: %d lines; still lists the 12347 B receive: %s\n", nlines,
           strstr(text, "12347") ? "yes (it completed; stale?)" : "no");

    FIT_NCCL(plugin.net->deregMr(a.send_comm, a.smh));
    FIT_NCCL(plugin.net->deregMr(a.recv_comm, a.rmh));
    FIT_NCCL(plugin.net->deregMr(b.send_comm, b.smh));
    FIT_NCCL(plugin.net->deregMr(b.recv_comm, b.rmh));
    FIT_NCCL(plugin.net->closeSend(a.send_comm));
    FIT_NCCL(plugin.net->closeRecv(a.recv_comm));
    FIT_NCCL(plugin.net->closeSend(b.send_comm));
    FIT_NCCL(plugin.net->closeRecv(b.recv_comm));
    FIT_NCCL(plugin.net->finalize(ctx_l));
    FIT_NCCL(plugin.net->finalize(ctx_c));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
    FIT_CHECK(sigaction(signo, NULL, &cur) == 0, "sigaction");
    FIT_CHECK(cur.sa_handler == dump_own_handler,
              "after finalize + dlclose the SIGUSR1 handler is %p (plugin's was %p), not the "
              "previous one %p", (void *)cur.sa_handler, plugin_handler, (void *)dump_own_handler);
    hits = dump_own_hits;
    FIT_CHECK(kill(getpid(), signo) == 0, "kill");
    FIT_CHECK(dump_own_hits == hits + 1, "the restored handler did not run");
    fit_pass("after dlclose SIGUSR1 goes to the previous handler again");
    free(sbuf_a);
    free(rbuf_a);
    free(sbuf_b);
    free(rbuf_b);
    free(text);
    printf("integ_dump: all checks passed\n");
    return 0;
}
