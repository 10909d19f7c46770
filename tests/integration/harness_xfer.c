/*
 * The transfer engine of the integration harness: one or both sides of a
 * message sequence, a window of requests in flight, oldest-first test(),
 * every received byte checked against the sender's seeded pattern.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "harness.h"

/* ---- the transfer engine -------------------------------------------------- */

typedef struct fit_side {
    fit_role_t             role;
    const fit_plugin_t    *p;
    void                  *comm;
    const fit_xfer_opts_t *o;
    uint8_t               *arena;     /* depth slots of slot_size bytes. */
    size_t                 slot_size;
    int                    depth;     /* Requests in flight, <= o->depth. */
    void                  *mh;        /* regMr handle of arena. */
    int                    posted;    /* Messages posted. */
    int                    tested;    /* Messages completed (oldest-first). */
    int                    checked;   /* Receiver: messages whose bytes were checked. */
    const int             *peer_done; /* In one process: the sender's completed messages. */
    void                  *reqs[FIT_MAX_DEPTH]; /* Request of message i at i % depth. */
} fit_side_t;

static const char *fit_role_str(fit_role_t role)
{
    return role == FIT_SEND ? "sender" : "receiver";
}

static size_t fit_msg_size(const fit_xfer_opts_t *o, int i)
{
    return o->nmsgs < 0 ? o->endless_size : o->sizes[i];
}

/* Whether receive i carries NCCL's optional-completion hint (use_hint 2: every other one). */
static int fit_msg_hinted(const fit_xfer_opts_t *o, int i)
{
    return o->use_hint == 1 || (o->use_hint == 2 && i % 2 == 0);
}

static size_t fit_msg_recv_size(const fit_xfer_opts_t *o, int i)
{
    if (o->nmsgs >= 0 && o->recv_sizes != NULL)
        return o->recv_sizes[i];
    return fit_msg_size(o, i) + o->recv_extra;
}

static void fit_side_init(fit_side_t *s, const fit_plugin_t *p, fit_role_t role, void *comm,
                          const fit_xfer_opts_t *o)
{
    size_t cap = o->arena_cap ? o->arena_cap : (size_t)256 << 20;
    size_t slot = 64;
    int i, n = o->nmsgs < 0 ? 1 : o->nmsgs;

    memset(s, 0, sizeof(*s));
    s->role = role;
    s->p    = p;
    s->comm = comm;
    s->o    = o;
    for (i = 0; i < n; i++) {
        size_t need = fit_msg_size(o, i) > fit_msg_recv_size(o, i) ? fit_msg_size(o, i)
                                                                   : fit_msg_recv_size(o, i);
        if (need > slot)
            slot = need;
    }
    s->slot_size = (slot + 63) & ~(size_t)63;
    s->depth     = o->depth < 1 ? 1 : o->depth > FIT_MAX_DEPTH ? FIT_MAX_DEPTH : o->depth;
    while (s->depth > 1 && s->slot_size * (size_t)s->depth > cap)
        s->depth--;
    s->arena = aligned_alloc(4096, (s->slot_size * (size_t)s->depth + 4095) & ~(size_t)4095);
    FIT_CHECK(s->arena != NULL, "cannot allocate %zu x %d bytes", s->slot_size, s->depth);
    FIT_NCCL(p->net->regMr(comm, s->arena, s->slot_size * (size_t)s->depth, NCCL_PTR_HOST,
                           &s->mh));
}

/*
 * Done with the side. deregMr either way, as NCCL does at teardown; a failed
 * side's buffer may still be written by the plugin until the comm is closed,
 * so it stays allocated until dlclose.
 */
static void fit_side_fini(fit_side_t *s, int failed)
{
    FIT_NCCL(s->p->net->deregMr(s->comm, s->mh));
    if (failed)
        fit_graveyard_add(s->arena);
    else
        free(s->arena);
}

static int fit_side_finished(const fit_side_t *s)
{
    return s->o->nmsgs >= 0 && s->tested >= s->o->nmsgs &&
           (s->role == FIT_SEND || s->checked >= s->o->nmsgs);
}

/* The receiver's slot of message i is free again once its bytes were checked. */
static int fit_side_freed(const fit_side_t *s)
{
    return s->role == FIT_SEND ? s->tested : s->checked;
}

static void fit_side_error(const fit_side_t *s, fit_xfer_result_t *r, ncclResult_t rc,
                           int msg, const char *call)
{
    if (r->rc != ncclSuccess)
        return;
    r->rc       = rc;
    r->err_role = s->role;
    r->err_msg  = msg;
    r->err_call = call;
}

/* Post what the window allows; returns the number posted, or -1 on error. */
static int fit_side_post(fit_side_t *s, fit_xfer_result_t *r)
{
    const fit_xfer_opts_t *o = s->o;
    int posted = 0;

    while (s->posted - fit_side_freed(s) < s->depth && (o->nmsgs < 0 || s->posted < o->nmsgs)) {
        int i = s->posted;
        uint8_t *slot = s->arena + (size_t)(i % s->depth) * s->slot_size;
        size_t size = fit_msg_size(o, i);
        void *req = NULL;
        ncclResult_t rc;

        if (s->role == FIT_SEND) {
            fit_fill(slot, size, o->seed + (uint64_t)i);
            rc = s->p->net->isend(s->comm, slot, size, o->tag, s->mh, NULL, &req);
            if (rc != ncclSuccess) {
                fit_side_error(s, r, rc, i, "isend");
                return -1;
            }
        } else {
            size_t rsize = fit_msg_recv_size(o, i);
            void *data = slot;
            int tag = o->tag;
            void *mh = s->mh;

            memset(slot, FIT_POISON, rsize);
            req = fit_msg_hinted(o, i) ? (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION
                              : (void *)(uintptr_t)0xdeadbeef;
            rc = s->p->net->irecv(s->comm, 1, &data, &rsize, &tag, &mh, NULL, &req);
            if (rc != ncclSuccess) {
                fit_side_error(s, r, rc, i, "irecv");
                return -1;
            }
            FIT_CHECK(req != (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION &&
                      req != (void *)(uintptr_t)0xdeadbeef,
                      "irecv of message %d returned ncclSuccess without overwriting *request (%p)",
                      i, req);
        }
        if (req == NULL) {
            r->retries[s->role]++;
            break; /* NULL request: "try again later". */
        }
        s->reqs[i % s->depth] = req;
        s->posted++;
        posted++;
    }
    return posted;
}

/* Test the oldest request; returns 1 when it completed, 0 if not yet, -1 on error. */
static int fit_side_test(fit_side_t *s, fit_xfer_result_t *r)
{
    const fit_xfer_opts_t *o = s->o;
    int i = s->tested;
    int done = 0;
    int sizes[1] = { -7 };
    /* NULL sizes now and then, as NCCL's bootstrap does; the data checks still run. */
    int *sizes_arg = i % 4 == 3 ? NULL : sizes;
    ncclResult_t rc;

    if (s->posted == s->tested)
        return 0;
    rc = s->p->net->test(s->reqs[i % s->depth], &done, sizes_arg);
    if (rc != ncclSuccess) {
        fit_side_error(s, r, rc, i, "test");
        return -1;
    }
    if (!done)
        return 0;
    /*
     * Under the hint a receive may complete before its data lands, size
     * unknown (0), as NCCL allows for LL: its bytes are checked once the
     * sender's completion says they are there (in one process).
     */
    if (sizes_arg != NULL && s->role == FIT_RECV && fit_msg_hinted(o, i) && fit_msg_size(o, i) > 0)
        r->sized++;
    if (sizes_arg != NULL && s->role == FIT_RECV && fit_msg_hinted(o, i) && s->peer_done != NULL &&
        sizes[0] == 0 && fit_msg_size(o, i) > 0)
        r->early++;
    else if (sizes_arg != NULL)
        FIT_CHECK((size_t)sizes[0] == fit_msg_size(o, i),
                  "%s message %d: test reported %d bytes, %zu were sent (posted %zu)",
                  fit_role_str(s->role), i, sizes[0], fit_msg_size(o, i),
                  fit_msg_recv_size(o, i));
    s->tested++;
    r->done[s->role]++;
    if (o->on_done != NULL)
        o->on_done(s->role, i, o->on_done_arg);
    return 1;
}

/* Check the bytes of every completed receive whose data has landed. */
static void fit_side_check(fit_side_t *s)
{
    const fit_xfer_opts_t *o = s->o;

    while (s->role == FIT_RECV && s->checked < s->tested &&
           (!o->use_hint || s->peer_done == NULL || *s->peer_done > s->checked)) {
        int i = s->checked;
        const uint8_t *slot = s->arena + (size_t)(i % s->depth) * s->slot_size;
        size_t size = fit_msg_size(o, i), rsize = fit_msg_recv_size(o, i), off;
        char what[96];

        snprintf(what, sizeof(what), "received message %d (%zu bytes, posted %zu)", i, size,
                 rsize);
        fit_check_pattern(slot, size, o->seed + (uint64_t)i, what);
        for (off = size; off < rsize; off++)
            FIT_CHECK(slot[off] == FIT_POISON,
                      "%s: byte %zu beyond the sent size was overwritten (0x%02x)", what, off,
                      slot[off]);
        s->checked++;
    }
}

static int fit_side_step(fit_side_t *s, fit_xfer_result_t *r)
{
    int posted, tested;

    fit_side_check(s);
    posted = fit_side_post(s, r);
    if (posted < 0)
        return -1;
    tested = fit_side_test(s, r);
    if (tested < 0)
        return -1;
    fit_side_check(s);
    return posted + tested;
}

static void fit_xfer_result_init(fit_xfer_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->rc      = ncclSuccess;
    r->err_msg = -1;
}

static void fit_wait_dump(void);

void fit_xfer_inproc(const fit_plugin_t *p, void *send_comm, void *recv_comm,
                     const fit_xfer_opts_t *o, fit_xfer_result_t *r)
{
    fit_side_t sender, receiver;
    fit_bound_t b;
    double t0 = fit_now();

    fit_xfer_result_init(r);
    fit_side_init(&sender, p, FIT_SEND, send_comm, o);
    fit_side_init(&receiver, p, FIT_RECV, recv_comm, o);
    /* Both sides must agree on the window; take the smaller. */
    if (sender.depth > receiver.depth)
        sender.depth = receiver.depth;
    receiver.depth = sender.depth;
    receiver.peer_done = &sender.tested;
    fit_bound_init(&b, "in-process transfer", o->seconds, 2000000000L);
    while (!fit_side_finished(&sender) || !fit_side_finished(&receiver)) {
        /* Receives first, as NCCL posts them ahead of the peer's sends. */
        if (fit_side_step(&receiver, r) < 0 || fit_side_step(&sender, r) < 0)
            break;
        fit_bound_step(&b);
    }
    r->seconds = fit_now() - t0;
    fit_side_fini(&receiver, r->rc != ncclSuccess);
    fit_side_fini(&sender, r->rc != ncclSuccess);
}

void fit_xfer_side(const fit_plugin_t *p, fit_role_t role, void *comm,
                   const fit_xfer_opts_t *o, fit_xfer_result_t *r)
{
    fit_side_t s;
    fit_bound_t b;
    double t0 = fit_now();

    fit_xfer_result_init(r);
    fit_side_init(&s, p, role, comm, o);
    fit_bound_init(&b, role == FIT_SEND ? "send sequence" : "receive sequence", o->seconds,
                   2000000000L);
    while (!fit_side_finished(&s)) {
        if (fit_side_step(&s, r) < 0)
            break;
        if (!fit_bound_try_step(&b)) {
            fit_wait_dump(); /* Which request stopped, and what its QPs or lanes wait for. */
            fit_bound_fail(&b);
        }
    }
    r->seconds = fit_now() - t0;
    fit_side_fini(&s, r->rc != ncclSuccess);
}

void fit_xfer_expect_ok(const fit_xfer_result_t *r, const char *what)
{
    if (r->rc != ncclSuccess)
        fit_fail(__FILE__, __LINE__, "%s: %s %s of message %d returned %d (%s)", what,
                 fit_role_str(r->err_role), r->err_call, r->err_msg, (int)r->rc,
                 fit_result_str(r->rc));
}

static int fit_size_cmp(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;

    return x < y ? -1 : x > y;
}

int fit_sweep_sizes(size_t *sizes, int max, size_t max_size)
{
    static const size_t odd[] = { 1000, 4097, 9001, 65537, 123457, 1000003, 3000017,
                                  12345679, 33554431 + 2, (size_t)64 << 20 };
    int n = 0, i, k, out;

    if (n < max)
        sizes[n++] = 0;
    for (k = 0; (((size_t)1) << k) <= max_size; k++) {
        size_t p2 = (size_t)1 << k;

        if (n + 3 > max)
            break;
        sizes[n++] = p2 - 1;
        sizes[n++] = p2;
        if (p2 + 1 <= max_size)
            sizes[n++] = p2 + 1;
    }
    for (i = 0; i < (int)(sizeof(odd) / sizeof(odd[0])) && n < max; i++)
        if (odd[i] <= max_size)
            sizes[n++] = odd[i];
    qsort(sizes, (size_t)n, sizeof(sizes[0]), fit_size_cmp);
    for (i = 1, out = n ? 1 : 0; i < n; i++)
        if (sizes[i] != sizes[out - 1])
            sizes[out++] = sizes[i];
    return out;
}

/* The emulated NIC's state too, where the plugin loaded fakeibv (ib tests). */
static void fit_fakeibv_dump(void)
{
    void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void (*dump)(FILE *);

    if (h == NULL)
        return;
    *(void **)&dump = dlvsym(h, "fakeibv_dump", "FAKEIBV_1.0");
    if (dump != NULL)
        dump(stderr);
    dlclose(h);
}

/*
 * A wait that ran out: the emulated device's state where fakeibv is loaded,
 * and, where the test set NCCL_FERRY_DUMP_SIGNAL (USR1 or USR2), the plugin's
 * dump of every comm into the log, so that the failure shows which request
 * stopped and in what state its lanes or QPs were (the dump goes to stderr
 * as well as to the log). The dump thread logs a
 * line at a time: wait until the log stops growing, at most 2 s.
 */
static void fit_wait_dump(void)
{
    const char *v = getenv("NCCL_FERRY_DUMP_SIGNAL");
    int sig = 0, from = fit_log_lines(), last = from, quiet = 0, i;

    fit_fakeibv_dump();
    if (v == NULL)
        return;
    if (strcasecmp(v, "USR1") == 0 || strcasecmp(v, "SIGUSR1") == 0)
        sig = SIGUSR1;
    else if (strcasecmp(v, "USR2") == 0 || strcasecmp(v, "SIGUSR2") == 0)
        sig = SIGUSR2;
    if (sig == 0 || kill(getpid(), sig) != 0)
        return;
    for (i = 0; i < 200 && quiet < 10; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        int n;

        nanosleep(&ts, NULL);
        n = fit_log_lines();
        quiet = n > from && n == last ? quiet + 1 : 0;
        last = n;
    }
}

ncclResult_t fit_wait(const fit_plugin_t *p, void *req, double seconds, double *took)
{
    double t0 = fit_now();
    fit_bound_t b;
    int done = 0, sz;
    ncclResult_t rc;

    fit_bound_init(&b, "test", seconds, 2000000000L);
    while ((rc = p->net->test(req, &done, &sz)) == ncclSuccess && !done) {
        if (!fit_bound_try_step(&b)) {
            fit_wait_dump();
            fit_fail(__FILE__, __LINE__, "test: not done after %ld iterations / %.1f s (limit %ld / "
                     "%.1f s)", b.iters, fit_now() - b.start, b.max_iters, b.deadline - b.start);
        }
    }
    *took = fit_now() - t0;
    return rc;
}
