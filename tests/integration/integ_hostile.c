/*
 * integ_hostile: strangers on the listen port. While a real peer connects,
 * this test opens TCP connections of its own to the port in the handle and
 * misbehaves on them: random bytes, a hello with a wrong magic, version or
 * token, impossible lane numbers, connect-then-close, a reset, nothing at all,
 * and half a hello followed by a stall.
 *
 * Expected of the acceptor: accept() never returns a comm for any of them;
 * a bad hello is dropped (the test sees EOF or a reset on its end); a stalled
 * one is dropped after NCCL_FERRY_HELLO_TIMEOUT_MS; the real peer's
 * connection completes meanwhile and its data arrives intact.
 *
 *   integ_hostile [--plugin PATH] [--case NAME]
 *     strangers  (default) the above
 *     flood      100 silent connections queue ahead of a real peer: the full
 *                pending table evicts its oldest streams, not the real
 *                peer's; the peer connects, its data arrives intact, and every
 *                silent stream is gone within the hello timeout
 *     wrap       a peer holding the token sends a chunk header whose offset +
 *                length wraps past 2^64: test() fails with ncclRemoteError and
 *                a WARN naming the peer, and no byte around the receive
 *                buffer changes
 *     half-groups 12 connectors die with 2 of their 4 streams open: the
 *                group table (8) evicts the oldest, the real peer connects,
 *                and an incomplete group expires after the hello timeout
 *     double-close closeSend, closeRecv, closeListen and deregMr twice, and
 *                closes of the wrong kind: refused with ncclInternalError and a
 *                WARN, without reading freed memory; a new connection works
 *     burst      10 real peers connect to one listener at once (the group
 *                table holds 8): all 10 are accepted, none refused
 *     hundreds   300 strangers of every kind (random, wrong magic, version or
 *                token, a 65535-byte hello, silent, half a hello, one byte a
 *                second, close, reset) in batches around a real peer: each
 *                dropped and named in the log, the peer's data intact
 *     huge       a token holder's chunk headers with a 2^62-byte message
 *                (ncclInvalidUsage) and a 4 GiB chunk (ncclRemoteError):
 *                WARN, arena untouched, a real peer connects afterwards
 *     junk       500 strangers sending random bytes (hostile_junk.c): each named
 *                in the log, but 10 WARN lines, the rest INFO; one more after
 *                the limit's 10 s gets a line counting the 490 held back; a
 *                real peer is accepted afterwards
 *     ib-meta    (ib) a token holder's metadata with 65535 QPs, a bad size,
 *                MTU or device name, an SL above 15, a multicast LID, port 0:
 *                accept -> ncclRemoteError + WARN naming field and value
 *     forged-stage connect handles whose connect-state bytes were not put
 *                there by a connect() of this process: pointers with their
 *                cookie, random, slot 0, the largest slot, a live connect's
 *                with another key or in another listener's handle, the
 *                parent's in a forked child, a finished connect's: connect
 *                -> ncclInvalidUsage + WARN, nothing followed; the live
 *                connect goes on to its own end and a real peer connects
 *     hints      (NCCL_FERRY_NET_HINTS=1: the handle says the listener takes
 *                fewer streams) an older connector's hellos (the offer, no
 *                proposal) and a connection of 2 of the 4 streams, written by
 *                hand: accepted, their chunks intact; proposals of 0, 5 and
 *                65535 streams, a lane past its count, a count that differs
 *                within one connection: dropped, named with address and comm;
 *                a real peer afterwards (hostile_hints.c)
 *     ib-cts     (ib) a receiver whose clear-to-send entries change between two
 *                isends of one receive (8 buffers then 1, a size, address,
 *                key, tag or sequence): isend -> ncclRemoteError + WARN naming
 *                peer, slot and field, never a crash; the comm stays failed
 *
 * Every stranger kind above (strangers) also includes: a hello with
 * hdr_size 65535, and a valid hello sent one byte a second (dropped at the
 * hello timeout although bytes keep coming). With NCCL_FERRY_BACKEND=ib the
 * same bytes go to the ib backend's out-of-band listener, with its magic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostile.h"

static const struct {
    const char *name;
    void      (*run)(hostile_env_t *e);
} hostile_cases[] = {
    { "strangers", hostile_case_strangers },
    { "flood",     hostile_case_flood },
    { "wrap",      hostile_case_wrap },
    { "half-groups", hostile_case_half_groups },
    { "double-close", hostile_case_double_close },
    { "burst",     hostile_case_burst },
    { "hundreds",  hostile_case_hundreds },
    { "huge",      hostile_case_huge },
    { "ib-meta",   hostile_case_ib_meta },
    { "forged-stage", hostile_case_forged_stage },
    { "ib-cts",    hostile_case_ib_cts },
    { "junk",      hostile_case_junk },
    { "hints",     hostile_case_hints },
};

int main(int argc, char **argv)
{
    const char *path = fit_plugin_path(&argc, argv);
    const char *tmo_env = getenv("NCCL_FERRY_HELLO_TIMEOUT_MS");
    const char *which = "strangers";
    char addr[80];
    fit_leaks_t before;
    hostile_env_t e;
    size_t c;

    if (argc == 3 && strcmp(argv[1], "--case") == 0)
        which = argv[2];
    else
        FIT_CHECK(argc == 1, "usage: integ_hostile [--plugin PATH] [--case NAME]");
    for (c = 0; c < sizeof(hostile_cases) / sizeof(hostile_cases[0]); c++)
        if (strcmp(hostile_cases[c].name, which) == 0)
            break;
    FIT_CHECK(c < sizeof(hostile_cases) / sizeof(hostile_cases[0]), "unknown case '%s'", which);
    fit_set_role("hostile");
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    srand(12345);
    memset(&e, 0, sizeof(e));
    e.hello_timeout = (tmo_env ? atof(tmo_env) : 10000.0) / 1000.0;
    e.h = (const ferry_sock_handle_t *)e.handle;
    /*
     * The fds and threads every case must give back, counted after one
     * connection and back (libibverbs stays loaded by design, with the
     * emulator's fabric socket).
     */
    fit_plugin_open(&e.plugin, path);
    e.ctx_l = fit_plugin_init(&e.plugin, 0x3332);
    e.listen_comm = fit_listen(&e.plugin, e.ctx_l, 0, e.handle);
    {
        void *sc, *rc;

        fit_connect_accept(&e.plugin, e.ctx_l, 0, e.handle, e.listen_comm, &sc, &rc, NULL);
        FIT_NCCL(e.plugin.net->closeSend(sc));
        FIT_NCCL(e.plugin.net->closeRecv(rc));
    }
    FIT_NCCL(e.plugin.net->closeListen(e.listen_comm));
    FIT_NCCL(e.plugin.net->finalize(e.ctx_l));
    fit_plugin_close(&e.plugin);
    fit_leaks_snap(&before);
    fit_plugin_open(&e.plugin, path);
    e.ctx_l = fit_plugin_init(&e.plugin, 0x3333);
    e.ctx_c = fit_plugin_init(&e.plugin, 0x4444);
    e.listen_comm = fit_listen(&e.plugin, e.ctx_l, 0, e.handle);
    fit_handle_addr(e.handle, addr, sizeof(addr));
    printf("  case %s: listen address %s, %u lane(s), hello timeout %.1f s\n", which, addr,
           (unsigned)e.h->nlanes, e.hello_timeout);

    hostile_cases[c].run(&e);

    if (e.listen_comm != NULL)
        FIT_NCCL(e.plugin.net->closeListen(e.listen_comm));
    FIT_NCCL(e.plugin.net->finalize(e.ctx_l));
    FIT_NCCL(e.plugin.net->finalize(e.ctx_c));
    fit_log_check_clean("after finalize");
    fit_plugin_close(&e.plugin);
    fit_check_no_ferry_threads("after finalize + dlclose");
    /* Every stranger's socket closed on both ends: ours by the case, the plugin's by it. */
    fit_leaks_check(&before, "after the case");
    printf("integ_hostile %s: all checks passed\n", which);
    return 0;
}
