/*
 * The text of a dump: every live comm, the backend's lines about its
 * transport, finished messages' timeline and in-flight requests. Written
 * for a person looking at a job that seems stuck or slow; every line starts
 * "NET/ferry :".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "proxy/pool.h"
#include "proxy/registry.h"

/* Milliseconds since then; a request posted after the dump took "now" reads 0. */
static uint64_t ferry_px_dump_ms_since(uint64_t now, uint64_t then)
{
    return now > then ? (now - then) / 1000000 : 0;
}

static void ferry_px_dump_req(FILE *out, const ferry_px_ring_t *ring, const ferry_px_req_t *req,
                              uint64_t now)
{
    int state = atomic_load(&req->state), i;
    uint64_t size = 0;
    size_t capacity = 0;
    char tags[96] = "";
    int n = 0;

    if (state == FERRY_PX_REQ_FREE)
        return;
    for (i = 0; i < req->n && i < ring->max_subs; i++) {
        size += atomic_load(&req->sub[i].size);
        capacity += req->sub[i].capacity;
        if (req->n > 1 && n < (int)sizeof(tags))
            n += snprintf(tags + n, sizeof(tags) - (size_t)n, "%s%d", i > 0 ? "," : ", tags ",
                          req->sub[i].tag);
    }
    /*
     * Every byte out but not done: the completion is held back (the kernel has
     * not released a zerocopy chunk yet, or an injected delay), not the wire.
     */
    fprintf(out,
            "NET/ferry :     req seq %u %s %s: %s posted %u transmitted %u received %u "
            "done %u of %u, bytes %" PRIu64 " of %" PRIu64 " (buffer %zu in %d%s), age %" PRIu64
            " ms, idle %" PRIu64 " ms%s\n",
            req->seq, ferry_px_req_kind_str(req->kind), ferry_px_req_state_str(state),
            ring->ops->unit, atomic_load(&req->posted), atomic_load(&req->transmitted),
            atomic_load(&req->received), atomic_load(&req->done), atomic_load(&req->nparts),
            (uint64_t)atomic_load(&req->bytes), size, capacity, req->n, tags,
            ferry_px_dump_ms_since(now, req->post_ns),
            ferry_px_dump_ms_since(now, atomic_load(&req->last_ns)),
            atomic_load(&req->gated) && state == FERRY_PX_REQ_POSTED
                ? "; gated: the backend is still filling its buffer"
            : state == FERRY_PX_REQ_DONE
                ? "; every part done, not reported by test() yet (NCCL's next look, or the "
                  "backend holds it)"
            : state != FERRY_PX_REQ_ACTIVE || !ferry_px_req_all_moved(req) ? ""
            : req->kind == FERRY_PX_SEND
                ? "; all bytes out, completion held back (zerocopy release or injected delay)"
                : "; all bytes in, completion held back (injected delay)");
}

/* Where the finished messages spent their time, averaged (ferry_px_timing_t). */
static void ferry_px_dump_timing(FILE *out, const ferry_px_ring_t *ring)
{
    const ferry_px_timing_t *t = &ring->timing;
    uint64_t n = atomic_load_explicit(&t->msgs, memory_order_relaxed);

    if (n == 0)
        return;
    fprintf(out, "NET/ferry :     %" PRIu64 " messages done; on average %.1f us from the post "
            "until their first of %s started (%s), %.1f us moving them (longest %.1f us), then "
            "%.1f us until test() reported them\n", n,
            (double)atomic_load_explicit(&t->wait_ns, memory_order_relaxed) / (double)n / 1e3,
            ring->ops->unit,
            ring->kind == FERRY_PX_RECV ? "waiting for the peer's data"
                                        : "the hand-off, or the peer's clear-to-send",
            (double)atomic_load_explicit(&t->move_ns, memory_order_relaxed) / (double)n / 1e3,
            (double)atomic_load_explicit(&t->move_max_ns, memory_order_relaxed) / 1e3,
            (double)atomic_load_explicit(&t->report_ns, memory_order_relaxed) / (double)n / 1e3);
}

/* A post the backend could not take yet (ferry_px_ring_check_wait): it has no request line. */
static void ferry_px_dump_wait(FILE *out, const ferry_px_ring_t *ring, uint64_t now)
{
    uint64_t key = atomic_load_explicit(&ring->wait_msg, memory_order_relaxed);
    char why[384] = "";

    if (key == 0)
        return;
    if (ring->ops->wait_why != NULL)
        ring->ops->wait_why(ring, why, sizeof(why));
    fprintf(out, "NET/ferry :     waiting to post: %s of message %" PRIu64 " (%" PRIu64
            " bytes) for %" PRIu64 " ms, no request yet%s%s\n",
            ring->kind == FERRY_PX_SEND ? "isend" : "irecv", key - 1,
            (uint64_t)atomic_load_explicit(&ring->wait_size, memory_order_relaxed),
            ferry_px_dump_ms_since(now, atomic_load_explicit(&ring->wait_ns,
                                                             memory_order_relaxed)),
            why[0] != '\0' ? "; waits " : "", why);
}

void ferry_px_ring_dump(const ferry_px_ring_t *ring, FILE *out, uint64_t now)
{
    char desc[192];
    int i;

    ferry_px_ring_describe(ring, desc, sizeof(desc));
    fprintf(out, "NET/ferry :   %s: age %" PRIu64 " ms, messages posted %u, %s%s\n", desc,
            ferry_px_dump_ms_since(now, ring->create_ns),
            __atomic_load_n(&ring->next_seq, __ATOMIC_RELAXED),
            atomic_load(&ring->failed) ? "FAILED: " : "healthy",
            atomic_load(&ring->failed) ? ring->fail_reason : "");
    if (ring->ops->dump != NULL)
        ring->ops->dump(ring, out, now);
    ferry_px_dump_timing(out, ring);
    for (i = 0; i < FERRY_MAX_REQUESTS; i++)
        ferry_px_dump_req(out, ring, &ring->reqs[i], now);
    ferry_px_dump_wait(out, ring, now);
}

typedef struct ferry_px_dump_ctx {
    FILE    *out;
    uint64_t now;
} ferry_px_dump_ctx_t;

static void ferry_px_dump_one(ferry_px_ring_t *ring, void *arg)
{
    ferry_px_dump_ctx_t *ctx = arg;

    ferry_px_ring_dump(ring, ctx->out, ctx->now);
}

int ferry_px_registry_dump(FILE *out)
{
    ferry_px_dump_ctx_t ctx = {NULL, ferry_px_now_ns()};
    char *body = NULL;
    size_t len = 0;
    int n;

    /* The comms go to a buffer first, so the count above them is the one walked. */
    ctx.out = open_memstream(&body, &len);
    if (ctx.out == NULL) {
        fprintf(out, "NET/ferry : dump failed: out of memory\n");
        return 0;
    }
    n = ferry_px_registry_foreach(ferry_px_dump_one, &ctx);
    fclose(ctx.out);
    fprintf(out, "NET/ferry : dump of %d live comm(s)\n%s", n, body != NULL ? body : "");
    free(body);
    ferry_px_pool_dump(out);
    fflush(out);
    return n;
}
