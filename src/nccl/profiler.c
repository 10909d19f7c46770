/*
 * NCCL profiler events for ferry's requests (profiler.h). The open events
 * live in a table keyed by request pointer, beside the backends: every
 * backend's request is a request of the shared ring (proxy/req.h, see
 * docs/decisions.md), so peer, comm and message number are read from it at
 * Start, and nothing in the backends or the ring changes for profiling.
 * Only NCCL's progress thread of a comm posts and tests its requests, so a
 * request pointer cannot be reused before its Stop has taken it out.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl/plugin.h"
#include "nccl/prof_descr.h"
#include "nccl/profiler.h"
#include "proxy/ring.h"

#define FERRY_NCCL_PROF_BUCKETS 1024 /* Power of two. */

_Atomic(ncclProfilerCallback_t) ferry_nccl_prof_fn;

typedef struct ferry_nccl_prof_ev {
    struct ferry_nccl_prof_ev *next;
    void                      *request;
    void                      *comm;
    int                        n;
    void                      *handles[FERRY_PX_MAX_SUBS]; /* From Start; NULL: no event. */
    ferry_nccl_prof_descr_t    descr[];                    /* n of them. */
} ferry_nccl_prof_ev_t;

/* One lock: only taken while profiling, twice per request. */
static pthread_mutex_t ferry_nccl_prof_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_nccl_prof_ev_t *ferry_nccl_prof_table[FERRY_NCCL_PROF_BUCKETS];
/* -1 until the first init with a callback decides; then 0 (off) or 1 (on). */
static atomic_int ferry_nccl_prof_on = -1;

static unsigned ferry_nccl_prof_bucket(const void *request)
{
    uintptr_t x = (uintptr_t)request;

    return (unsigned)((x >> 6) ^ (x >> 16)) & (FERRY_NCCL_PROF_BUCKETS - 1);
}

/* 1: events wanted; why says which setting decided it. */
static int ferry_nccl_prof_wanted(char *why, size_t len)
{
    const char *v = getenv("NCCL_FERRY_PROFILER"), *plugin = getenv("NCCL_PROFILER_PLUGIN");

    if (v != NULL && strcmp(v, "1") == 0) {
        snprintf(why, len, "NCCL_FERRY_PROFILER=1");
        return 1;
    }
    if (v != NULL && strcmp(v, "0") == 0) {
        snprintf(why, len, "NCCL_FERRY_PROFILER=0");
        return 0;
    }
    if (v != NULL && v[0] != '\0' && strcasecmp(v, "auto") != 0)
        FERRY_WARN("NCCL_FERRY_PROFILER=%s: expected 0, 1 or auto; using auto", v);
    if (plugin != NULL && plugin[0] != '\0' && strcasecmp(plugin, "none") != 0) {
        snprintf(why, len, "NCCL_FERRY_PROFILER=auto, NCCL_PROFILER_PLUGIN=%s", plugin);
        return 1;
    }
    snprintf(why, len, "NCCL_FERRY_PROFILER=auto and no NCCL_PROFILER_PLUGIN; "
             "NCCL_FERRY_PROFILER=1 turns them on");
    return 0;
}

void ferry_nccl_prof_init(ncclProfilerCallback_t fn)
{
    char why[300];
    int on;

    if (fn == NULL)
        return;
    /* Decided (and said) at the first init that brings a callback; later inits follow it. */
    on = atomic_load(&ferry_nccl_prof_on);
    if (on < 0) {
        on = ferry_nccl_prof_wanted(why, sizeof(why));
        if (atomic_exchange(&ferry_nccl_prof_on, on) < 0)
            FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "NCCL profiler net events %s (%s)",
                       on ? "on" : "off", why);
    }
    if (on)
        atomic_store(&ferry_nccl_prof_fn, fn);
}

static void ferry_nccl_prof_fill(ferry_nccl_prof_descr_t *d, const ferry_px_req_t *req, int send,
                                 int sub, size_t size, int tag)
{
    const ferry_px_ring_t *ring = req->ring;
    int ib = ring != NULL && strcmp(ring->backend, "ib") == 0;

    memset(d, 0, sizeof(*d));
    if (ib) {
        d->nccl.ib.type = ncclProfileQp;
        d->nccl.ib.qp.device = -1;
        d->nccl.ib.qp.wr_id = req->seq;
        d->nccl.ib.qp.opcode = send ? FERRY_NCCL_PROF_IB_SEND : FERRY_NCCL_PROF_IB_RECV;
        d->nccl.ib.qp.length = size;
    } else {
        d->nccl.sock.type = ncclProfileSocket;
        d->nccl.sock.sock.fd = -1;
        d->nccl.sock.sock.op = send ? FERRY_NCCL_PROF_SOCK_SEND : FERRY_NCCL_PROF_SOCK_RECV;
        d->nccl.sock.sock.length = size;
    }
    d->magic = FERRY_NCCL_PROF_MAGIC;
    d->version = FERRY_NCCL_PROF_VERSION;
    d->send = (uint8_t)send;
    d->sub = (uint8_t)sub;
    d->seq = req->seq;
    d->tag = tag;
    d->size = size;
    if (ring != NULL) {
        snprintf(d->backend, sizeof(d->backend), "%s", ring->backend);
        snprintf(d->peer, sizeof(d->peer), "%s", ring->peer);
        snprintf(d->where, sizeof(d->where), "%s", ring->where);
        d->comm = ring->serial;
    }
}

/* Takes the entry for request out of the table; NULL if it has none. */
static ferry_nccl_prof_ev_t *ferry_nccl_prof_take(const void *request)
{
    unsigned b = ferry_nccl_prof_bucket(request);
    ferry_nccl_prof_ev_t **pp, *ev = NULL;

    pthread_mutex_lock(&ferry_nccl_prof_lock);
    for (pp = &ferry_nccl_prof_table[b]; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->request == request) {
            ev = *pp;
            *pp = ev->next;
            break;
        }
    }
    pthread_mutex_unlock(&ferry_nccl_prof_lock);
    return ev;
}

void ferry_nccl_prof_start(ncclProfilerCallback_t fn, void *comm, void *request, int send, int n,
                           void **phandles, const size_t *sizes, const int *tags)
{
    const ferry_px_req_t *req = request;
    ferry_nccl_prof_ev_t *ev, *stale;
    int64_t id;
    unsigned b;
    int i, any = 0;

    if (phandles == NULL || n <= 0)
        return;
    if (n > FERRY_PX_MAX_SUBS)
        n = FERRY_PX_MAX_SUBS;
    for (i = 0; i < n; i++)
        any |= phandles[i] != NULL;
    /* NULL phandles: bootstrap or an NCCL without profiling; NCCL's core would dereference them. */
    if (!any)
        return;
    ev = calloc(1, sizeof(*ev) + (size_t)n * sizeof(ev->descr[0]));
    if (ev == NULL)
        return; /* The request goes on unprofiled; profiling never fails a transfer. */
    ev->request = request;
    ev->comm = comm;
    ev->n = n;
    for (i = 0; i < n; i++) {
        ferry_nccl_prof_fill(&ev->descr[i], req, send, i, sizes[i], tags != NULL ? tags[i] : 0);
        id = strcmp(ev->descr[i].backend, "ib") == 0
                 ? (int64_t)(NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER)
                 : (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER);
        if (phandles[i] != NULL)
            (void)fn(&ev->handles[i], ncclProfilerNetEventStart, phandles[i], id, &ev->descr[i]);
    }
    /* A request of a comm closed with it in flight may have left an entry at this address. */
    stale = ferry_nccl_prof_take(request);
    free(stale);
    b = ferry_nccl_prof_bucket(request);
    pthread_mutex_lock(&ferry_nccl_prof_lock);
    ev->next = ferry_nccl_prof_table[b];
    ferry_nccl_prof_table[b] = ev;
    pthread_mutex_unlock(&ferry_nccl_prof_lock);
}

void ferry_nccl_prof_stop(ncclProfilerCallback_t fn, void *request, const int *sizes,
                          ncclResult_t failed)
{
    ferry_nccl_prof_ev_t *ev = ferry_nccl_prof_take(request);
    int i;

    if (ev == NULL)
        return;
    for (i = 0; i < ev->n; i++) {
        ev->descr[i].done_size = sizes != NULL && sizes[i] > 0 ? (uint64_t)sizes[i] : 0;
        ev->descr[i].failed = (int32_t)failed;
        /* NULL: NCCL's core opened no event (the profiler did not ask for net events). */
        if (ev->handles[i] != NULL)
            (void)fn(&ev->handles[i], ncclProfilerNetEventStop, NULL, 0, NULL);
    }
    free(ev);
}

void ferry_nccl_prof_forget(void *comm)
{
    unsigned b;

    pthread_mutex_lock(&ferry_nccl_prof_lock);
    for (b = 0; b < FERRY_NCCL_PROF_BUCKETS; b++) {
        ferry_nccl_prof_ev_t **pp, *ev;

        pp = &ferry_nccl_prof_table[b];
        while ((ev = *pp) != NULL) {
            if (ev->comm == comm) {
                *pp = ev->next;
                free(ev);
            } else {
                pp = &ev->next;
            }
        }
    }
    pthread_mutex_unlock(&ferry_nccl_prof_lock);
}
