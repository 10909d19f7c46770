/*
 * ferry-bench per-process basics: the message arena both implementations
 * send from and receive into, message stamps, control pipes and latency
 * samples.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fbench.h"

#define FB_STAMP_MAGIC 0xfe77be4c00000000ULL

void fb_side_init(fb_side_t *s, const fb_opts_t *o, int is_send, int ctrl_fd, int ack_fd)
{
    size_t want = o->max_size * (size_t)o->slots * (size_t)o->max_conns;
    int c, k;

    memset(s, 0, sizeof(*s));
    s->o       = o;
    s->is_send = is_send;
    s->ctrl_fd = ctrl_fd;
    s->ack_fd  = ack_fd;
    if (want < o->pp_max * 2)
        want = o->pp_max * 2;
    s->arena_len = want < FB_ARENA_CAP ? want : FB_ARENA_CAP;
    if (s->arena_len < o->max_size)
        s->arena_len = o->max_size;
    s->arena = aligned_alloc(4096, (s->arena_len + 4095) & ~(size_t)4095);
    FIT_CHECK(s->arena != NULL, "cannot allocate %zu bytes", s->arena_len);
    /* Touch every page now, not inside the first timed round. */
    memset(s->arena, is_send ? 0x5e : 0, s->arena_len);
    for (c = 0; c < FB_MAX_CONNS; c++)
        for (k = 0; k < FB_MAX_STREAMS; k++)
            s->raw_fd[c][k] = -1;
    s->raw_pp_fd = -1;
}

void fb_side_fini(fb_side_t *s)
{
    if (s->plugin_up)
        fb_plugin_teardown(s);
    if (s->raw_up)
        fb_raw_teardown(s);
    free(s->arena);
    s->arena = NULL;
}

/*
 * Slot of message i on connection conn: each (connection, slot index) has
 * its own slot while the arena holds them all; beyond that slots are shared
 * and the contents are not checked (fb_slots_unique says which).
 */
uint8_t *fb_slot(const fb_side_t *s, size_t size, int conn, uint64_t i)
{
    size_t nslots = size > 0 ? s->arena_len / size : 1;
    uint64_t k = (uint64_t)conn * (uint64_t)s->o->slots + i % (uint64_t)s->o->slots;

    return s->arena + (size_t)(k % nslots) * size;
}

int fb_slots_unique(const fb_side_t *s, size_t size, int conns, int depth)
{
    return size > 0 && s->o->slots >= depth && s->arena_len / size >= (size_t)conns * (size_t)depth;
}

/* The first 8 bytes of a message (or of each raw stream's part) name it. */
void fb_stamp(void *buf, size_t len, int conn, uint64_t i)
{
    uint64_t v = FB_STAMP_MAGIC ^ ((uint64_t)conn << 40) ^ i;

    if (len >= sizeof(v))
        memcpy(buf, &v, sizeof(v));
}

int fb_stamp_ok(const void *buf, size_t len, int conn, uint64_t i)
{
    uint64_t v = FB_STAMP_MAGIC ^ ((uint64_t)conn << 40) ^ i, got;

    if (len < sizeof(v))
        return 1;
    memcpy(&got, buf, sizeof(got));
    return got == v;
}

/* The whole buffer through a control pipe; dies on error or EOF (the peer process is gone). */
static void fb_pipe_io(int fd, char *buf, size_t len, int is_write)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = is_write ? write(fd, buf + done, len - done) : read(fd, buf + done, len - done);

        if (n > 0)
            done += (size_t)n;
        else
            FIT_CHECK(n < 0 && errno == EINTR, "control pipe %s: %s", is_write ? "write" : "read",
                      n == 0 ? "peer process exited" : strerror(errno));
    }
}

void fb_pipe_write(int fd, const void *buf, size_t len)
{
    fb_pipe_io(fd, (char *)(uintptr_t)buf, len, 1);
}

void fb_pipe_read(int fd, void *buf, size_t len)
{
    fb_pipe_io(fd, buf, len, 0);
}

void fb_lat_init(fb_lat_t *l, size_t cap)
{
    l->n   = 0;
    l->cap = cap > 0 ? cap : 1;
    l->us  = malloc(l->cap * sizeof(*l->us));
    FIT_CHECK(l->us != NULL, "cannot allocate %zu latency samples", l->cap);
}

void fb_lat_add(fb_lat_t *l, double us)
{
    if (l->n < l->cap)
        l->us[l->n++] = us;
}

static int fb_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile; sorts the samples. 0 when there are none. */
double fb_lat_pct(fb_lat_t *l, double pct)
{
    size_t k;

    if (l->n == 0)
        return 0.0;
    qsort(l->us, l->n, sizeof(*l->us), fb_cmp_double);
    k = (size_t)(pct / 100.0 * (double)l->n + 0.999999);
    k = k < 1 ? 1 : k > l->n ? l->n : k;
    return l->us[k - 1];
}

void fb_lat_free(fb_lat_t *l)
{
    free(l->us);
    l->us = NULL;
    l->n = l->cap = 0;
}

void fb_stall_check(double last_progress, const char *what, uint64_t done, uint64_t want)
{
    if (fit_now() - last_progress > FB_STALL_S)
        FIT_FAIL("%s: no progress for %.0f s (%llu of %llu done)", what, FB_STALL_S,
                 (unsigned long long)done, (unsigned long long)want);
}
