/*
 * The text of a dump: every live comm, its lanes, helper threads, finished
 * messages' timeline and in-flight requests. Written for a person looking at
 * a job that seems stuck or slow; every line starts "NET/ferry :".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "proxy/registry.h"

/* Milliseconds since then; a request posted after the dump took "now" reads 0. */
static uint64_t ferry_px_dump_ms_since(uint64_t now, uint64_t then)
{
    return now > then ? (now - then) / 1000000 : 0;
}

static void ferry_px_dump_req(FILE *out, const ferry_px_req_t *req, uint64_t now)
{
    int state = atomic_load(&req->state);

    if (state == FERRY_PX_REQ_FREE)
        return;
    /*
     * Every byte out but not done: the completion is held back (the kernel has
     * not released a zerocopy chunk yet, or an injected delay), not the wire.
     */
    fprintf(out,
            "NET/ferry :     req seq %u %s %s: chunks posted %u transmitted %u received %u "
            "done %u of %u, bytes %" PRIu64 " of %" PRIu64 " (buffer %zu), age %" PRIu64
            " ms, idle %" PRIu64 " ms%s\n",
            req->seq, req->kind == FERRY_PX_SEND ? "send" : "recv", ferry_px_req_state_str(state),
            atomic_load(&req->posted), atomic_load(&req->transmitted),
            atomic_load(&req->received), atomic_load(&req->done), atomic_load(&req->nchunks),
            (uint64_t)atomic_load(&req->bytes), (uint64_t)atomic_load(&req->size),
            req->capacity, ferry_px_dump_ms_since(now, req->post_ns),
            ferry_px_dump_ms_since(now, atomic_load(&req->last_ns)),
            atomic_load(&req->gated) && state == FERRY_PX_REQ_POSTED
                ? "; gated: the backend is still filling its buffer"
            : state == FERRY_PX_REQ_DONE
                ? "; every chunk done, not reported by test() yet (NCCL's next look, or the "
                  "backend holds it)"
            : state != FERRY_PX_REQ_ACTIVE || !ferry_px_req_all_moved(req) ? ""
            : req->kind == FERRY_PX_SEND
                ? "; all bytes out, completion held back (zerocopy release or injected delay)"
                : "; all bytes in, completion held back (injected delay)");
}

/*
 * The helper threads: how often they swept, slept and what woke them, and
 * the wake-ups per chunk moved (the scheduler's share of the data path).
 */
static void ferry_px_dump_workers(FILE *out, const ferry_px_comm_t *comm)
{
    uint64_t chunks = 0, sleeps = 0;
    int i;

    if (comm->nworkers == 0) {
        fprintf(out, "NET/ferry :     no helper threads: NCCL's thread moves every lane\n");
        return;
    }
    for (i = 0; i < comm->nlanes; i++)
        chunks += atomic_load_explicit(&comm->lanes[i].chunks, memory_order_relaxed);
    for (i = 0; i < comm->nworkers; i++) {
        const ferry_px_worker_stats_t *st = &comm->workers[i].stats;
        uint64_t slept = atomic_load_explicit(&st->sleeps, memory_order_relaxed);

        sleeps += slept;
        fprintf(out, "NET/ferry :     thread %d (ferry-%c%u-%d): %" PRIu64 " sweeps (%" PRIu64
                " found nothing), slept %" PRIu64 " times: woken %" PRIu64 " by posts, %" PRIu64
                " by its sockets, %" PRIu64 " by the timer\n",
                i, comm->kind == FERRY_PX_SEND ? 's' : 'r', comm->serial % 100000, i,
                (uint64_t)atomic_load_explicit(&st->sweeps, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->idle_sweeps, memory_order_relaxed), slept,
                (uint64_t)atomic_load_explicit(&st->woken_post, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->woken_io, memory_order_relaxed),
                (uint64_t)atomic_load_explicit(&st->woken_timer, memory_order_relaxed));
    }
    fprintf(out, "NET/ferry :     helper wake-ups: %" PRIu64 " for %" PRIu64 " chunks (%.2f per "
            "chunk), %" PRIu64 " of them kicks by posts\n", sleeps, chunks,
            chunks > 0 ? (double)sleeps / (double)chunks : 0.0,
            (uint64_t)atomic_load_explicit(&comm->wakes_sent, memory_order_relaxed));
}

/* Where the finished messages spent their time, averaged (ferry_px_timing_t). */
static void ferry_px_dump_timing(FILE *out, const ferry_px_comm_t *comm)
{
    const ferry_px_timing_t *t = &comm->timing;
    uint64_t n = atomic_load_explicit(&t->msgs, memory_order_relaxed);

    if (n == 0)
        return;
    fprintf(out, "NET/ferry :     %" PRIu64 " messages done; on average %.1f us from the post "
            "until a lane took them (%s), %.1f us moving them (longest %.1f us), then %.1f us "
            "until test() reported them\n", n,
            (double)atomic_load_explicit(&t->wait_ns, memory_order_relaxed) / (double)n / 1e3,
            comm->kind == FERRY_PX_RECV ? "waiting for the peer's data"
            : comm->nworkers > 0        ? "hand-off to a helper"
                                        : "NCCL's thread in isend or test()",
            (double)atomic_load_explicit(&t->move_ns, memory_order_relaxed) / (double)n / 1e3,
            (double)atomic_load_explicit(&t->move_max_ns, memory_order_relaxed) / 1e3,
            (double)atomic_load_explicit(&t->report_ns, memory_order_relaxed) / (double)n / 1e3);
}

static void ferry_px_dump_comm(FILE *out, const ferry_px_comm_t *comm, uint64_t now)
{
    char desc[160];
    int i;

    ferry_px_comm_describe(comm, desc, sizeof(desc));
    fprintf(out, "NET/ferry :   %s: age %" PRIu64 " ms, lanes %d, threads %d, messages posted %u, "
            "%s%s\n", desc, (now - comm->create_ns) / 1000000, comm->nlanes, comm->nworkers,
            comm->next_seq, atomic_load(&comm->failed) ? "FAILED: " : "healthy",
            atomic_load(&comm->failed) ? comm->fail_reason : "");
    for (i = 0; i < comm->nlanes; i++) {
        const ferry_px_lane_stats_t *l = &comm->lanes[i];
        uint64_t chunks = atomic_load(&l->chunks);
        char full[48] = "";

        if (comm->kind == FERRY_PX_SEND)
            snprintf(full, sizeof(full), ", socket buffer full %" PRIu64 " times",
                     (uint64_t)atomic_load(&l->blocked));
        fprintf(out, "NET/ferry :     lane %d: %s seq %u, %" PRIu64 " chunks, %" PRIu64 " bytes, "
                "%.1f us per chunk from %s to moved%s\n",
                i, ferry_px_lane_state_str(atomic_load(&l->state)), atomic_load(&l->seq), chunks,
                (uint64_t)atomic_load(&l->bytes),
                chunks > 0 ? (double)atomic_load(&l->busy_ns) / (double)chunks / 1e3 : 0.0,
                comm->kind == FERRY_PX_SEND ? "taken" : "its header", full);
    }
    ferry_px_dump_workers(out, comm);
    ferry_px_dump_timing(out, comm);
    for (i = 0; i < FERRY_MAX_REQUESTS; i++)
        ferry_px_dump_req(out, &comm->reqs[i], now);
}

typedef struct ferry_px_dump_ctx {
    FILE    *out;
    uint64_t now;
} ferry_px_dump_ctx_t;

static void ferry_px_dump_one(ferry_px_comm_t *comm, void *arg)
{
    ferry_px_dump_ctx_t *ctx = arg;

    ferry_px_dump_comm(ctx->out, comm, ctx->now);
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
    fflush(out);
    return n;
}
