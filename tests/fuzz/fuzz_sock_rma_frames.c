/*
 * libFuzzer target: what a connected RMA peer sends (socket/sock_rma_progress.c).
 * The input is a byte stream of frames: a 64-byte header, then as many
 * payload bytes as its size says (cut at the input's end). Each header is
 * sealed (check word computed) unless bit 0 of its spare field is set, so
 * the fuzzer reaches the operations and not only the check. The stream goes
 * through a socketpair into a group of two ranks whose peer is the fuzzer,
 * holding two host regions between guard zones; progress runs until no
 * more work comes (bounded). Nothing may be written outside the regions
 * (ASan, and the guards checked here), and the group closes cleanly after.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "socket/sock_rma.h"

#define FUZZ_MAX_INPUT (32u << 10) /* Fits a socketpair's buffer: written before progress. */
#define FUZZ_GUARD     4096
#define FUZZ_REGION0   4096
#define FUZZ_REGION1   64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Seal each header of the stream in place (unless it asks not to be). */
static void fuzz_seal(uint8_t *buf, size_t len)
{
    size_t pos = 0;

    while (pos + sizeof(ferry_sock_rma_frame_t) <= len) {
        ferry_sock_rma_frame_t f;

        memcpy(&f, buf + pos, sizeof(f));
        if ((f.spare & 1) == 0)
            ferry_sock_rma_seal(&f);
        memcpy(buf + pos, &f, sizeof(f));
        pos += sizeof(f);
        if (f.op == FERRY_SOCK_RMA_PUT || f.op == FERRY_SOCK_RMA_REPLY)
            pos += f.size < len - pos ? (size_t)f.size : len - pos;
    }
}

static ferry_sock_rma_mr_t *fuzz_region(uint32_t index, char *base, size_t size)
{
    ferry_sock_rma_mr_t *mr = calloc(1, sizeof(*mr));

    if (mr == NULL)
        abort();
    mr->magic = FERRY_SOCK_RMA_MR_MAGIC;
    mr->index = index;
    mr->base = base;
    mr->size = size;
    return mr;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char mem[FUZZ_GUARD + FUZZ_REGION0 + FUZZ_GUARD + FUZZ_REGION1 + FUZZ_GUARD];
    ferry_sock_rma_group_t *g = calloc(1, sizeof(*g));
    uint8_t *stream = malloc(FUZZ_MAX_INPUT);
    size_t len = size < FUZZ_MAX_INPUT ? size : FUZZ_MAX_INPUT;
    char sink[4096];
    int sv[2];

    if (g == NULL || stream == NULL || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    memcpy(stream, data, len);
    fuzz_seal(stream, len);
    memset(mem, 0x5a, sizeof(mem));
    /* The group connect() would build, with the fuzzer as rank 1. */
    g->peers = calloc(2, sizeof(*g->peers));
    g->pfds = calloc(2, sizeof(*g->pfds));
    g->pfd_rank = calloc(2, sizeof(*g->pfd_rank));
    if (g->peers == NULL || g->pfds == NULL || g->pfd_rank == NULL)
        abort();
    pthread_mutex_init(&g->lock, NULL);
    g->magic = FERRY_SOCK_RMA_GROUP_MAGIC;
    g->nranks = 2;
    g->source_check = 1;
    for (int r = 0; r < 2; r++) {
        ferry_sock_rma_peer_t *p = &g->peers[r];

        p->rank = r;
        p->fd = -1;
        strcpy(p->addr, "fuzzer");
        p->group = g;
        if (ferry_px_ring_init(&p->ring, FERRY_PX_SEND, "socket", "fuzz",
                               &ferry_sock_rma_ring_ops) != FERRY_OK)
            abort();
        ferry_px_ring_register(&p->ring);
        p->has_ring = 1;
    }
    g->peers[1].fd = sv[0];
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    g->regs[0] = fuzz_region(0, mem + FUZZ_GUARD, FUZZ_REGION0);
    g->regs[1] = fuzz_region(1, mem + 2 * FUZZ_GUARD + FUZZ_REGION0, FUZZ_REGION1);
    g->nregs = 2;
    if (write(sv[1], stream, len) != (ssize_t)len)
        abort();
    shutdown(sv[1], SHUT_WR); /* EOF after the input: the peer "hangs up". */
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < 100000; i++) {
        long work = ferry_sock_rma_progress_locked(g);

        while (read(sv[1], sink, sizeof(sink)) > 0)
            ; /* Our answers, dropped. */
        if (work <= 0)
            break;
    }
    pthread_mutex_unlock(&g->lock);
    for (size_t i = 0; i < FUZZ_GUARD; i++)
        if (mem[i] != 0x5a || mem[FUZZ_GUARD + FUZZ_REGION0 + i] != 0x5a ||
            mem[2 * FUZZ_GUARD + FUZZ_REGION0 + FUZZ_REGION1 + i] != 0x5a)
            abort(); /* Written outside the regions. */
    close(sv[1]);
    /* BYE to a hung-up peer fails quietly; close frees rings, regions and the socket. */
    ferry_sock_rma_close(g);
    free(stream);
    return 0;
}
