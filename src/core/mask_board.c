/* The local ranks' masks in one per-job file (mask_board.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mask_board.h"

static uint64_t ferry_mask_slot_check(const ferry_mask_slot_t *s)
{
    const uint8_t *p = (const uint8_t *)s;
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;

    for (i = 0; i < offsetof(ferry_mask_slot_t, check); i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

int ferry_mask_board_job_key(char *buf, size_t len)
{
    const char *ns = getenv("PMIX_NAMESPACE"), *ompi = getenv("OMPI_MCA_ess_base_jobid");
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    const char *run = getenv("TORCHELASTIC_RUN_ID");
    size_t i;
    int n;

    if (len == 0)
        return 0;
    if (ns != NULL && *ns != '\0')
        n = snprintf(buf, len, "pmix.%s", ns);
    else if (ompi != NULL && *ompi != '\0')
        n = snprintf(buf, len, "ompi.%s", ompi);
    else if (job != NULL && *job != '\0' && step != NULL && *step != '\0')
        n = snprintf(buf, len, "slurm.%s.%s", job, step);
    else if (run != NULL && *run != '\0')
        n = snprintf(buf, len, "torch.%s", run);
    else
        return 0;
    if (n < 0 || (size_t)n >= len)
        return 0;
    for (i = 0; buf[i] != '\0'; i++) {
        char c = buf[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_'))
            buf[i] = '_';
    }
    return 1;
}

int ferry_mask_board_path(const char *dir, char *buf, size_t len)
{
    char key[128];
    int n;

    if (!ferry_mask_board_job_key(key, sizeof(key)))
        return 0;
    n = snprintf(buf, len, "%s/ferry-%u-%s", dir, (unsigned)geteuid(), key);
    return n > 0 && (size_t)n < len;
}

/* The file is this user's regular file, closed to others; else why, and 0. */
static int ferry_mask_board_trusted(int fd, const char *path, char *why, size_t why_len)
{
    struct stat st;

    if (fstat(fd, &st) != 0) {
        snprintf(why, why_len, "%s: fstat: %s", path, strerror(errno));
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "%s is not a regular file", path);
        return 0;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, why_len, "%s belongs to uid %u, not this process' %u", path,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        return 0;
    }
    if ((st.st_mode & 077) != 0) {
        snprintf(why, why_len, "%s is open to other users (mode %03o)", path,
                 (unsigned)(st.st_mode & 0777));
        return 0;
    }
    return 1;
}

/* O_NOFOLLOW refuses a symlink at path (ELOOP); the rest is checked on the open file. */
static int ferry_mask_board_open(const char *path, int flags, char *why, size_t why_len)
{
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);

    if (fd < 0) {
        snprintf(why, why_len, "%s: %s", path,
                 errno == ELOOP ? "a symbolic link, refused" : strerror(errno));
        return -1;
    }
    if (!ferry_mask_board_trusted(fd, path, why, why_len)) {
        close(fd);
        return -1;
    }
    return fd;
}

int ferry_mask_board_publish(const char *path, int index, const cpu_set_t *mask, char *why,
                             size_t why_len)
{
    ferry_mask_slot_t s;
    ssize_t n;
    int fd, c;

    if (index < 0 || index >= FERRY_MASK_BOARD_SLOTS) {
        snprintf(why, why_len, "local rank %d is outside the board's 0..%d", index,
                 FERRY_MASK_BOARD_SLOTS - 1);
        return 0;
    }
    memset(&s, 0, sizeof(s));
    s.magic = FERRY_MASK_BOARD_MAGIC;
    s.version = FERRY_MASK_BOARD_VERSION;
    s.index = (uint32_t)index;
    s.pid = (int32_t)getpid();
    for (c = 0; c < FERRY_MASK_BOARD_CPUS && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, mask)) {
            s.mask[c / 8] |= (uint8_t)(1u << (c % 8));
            s.ncpus++;
        }
    s.check = ferry_mask_slot_check(&s);
    fd = ferry_mask_board_open(path, O_RDWR | O_CREAT, why, why_len);
    if (fd < 0)
        return 0;
    n = pwrite(fd, &s, sizeof(s), (off_t)index * (off_t)sizeof(s));
    if (n != (ssize_t)sizeof(s))
        snprintf(why, why_len, "%s: writing slot %d: %s", path, index,
                 n < 0 ? strerror(errno) : "short write");
    close(fd);
    return n == (ssize_t)sizeof(s);
}

/* 1 if slot i as read belongs to a live local rank i. */
static int ferry_mask_slot_ok(const ferry_mask_slot_t *s, int i)
{
    if (s->magic != FERRY_MASK_BOARD_MAGIC || s->version != FERRY_MASK_BOARD_VERSION ||
        s->index != (uint32_t)i || s->pid <= 0 || s->ncpus == 0 ||
        s->check != ferry_mask_slot_check(s))
        return 0;
    /* A slot left by a process of an earlier run under the same key does not count. */
    return kill((pid_t)s->pid, 0) == 0 || errno == EPERM;
}

int ferry_mask_board_read(const char *path, int self, int nslots, const cpu_set_t *mask,
                          int *valid, int *overlap, char *why, size_t why_len)
{
    ferry_mask_slot_t s;
    int fd, i, c;

    *valid = 0;
    *overlap = 0;
    if (nslots > FERRY_MASK_BOARD_SLOTS)
        nslots = FERRY_MASK_BOARD_SLOTS;
    fd = ferry_mask_board_open(path, O_RDONLY, why, why_len);
    if (fd < 0)
        return 0;
    for (i = 0; i < nslots; i++) {
        if (i == self ||
            pread(fd, &s, sizeof(s), (off_t)i * (off_t)sizeof(s)) != (ssize_t)sizeof(s) ||
            !ferry_mask_slot_ok(&s, i))
            continue;
        (*valid)++;
        for (c = 0; c < FERRY_MASK_BOARD_CPUS && c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, mask) && (s.mask[c / 8] & (1u << (c % 8)))) {
                (*overlap)++;
                break;
            }
    }
    close(fd);
    return 1;
}

int ferry_mask_board_leave(const char *path, int index, int nslots, char *why, size_t why_len)
{
    ferry_mask_slot_t s, zero;
    int fd, i, live = 0;

    if (why_len > 0)
        why[0] = '\0';
    if (nslots > FERRY_MASK_BOARD_SLOTS)
        nslots = FERRY_MASK_BOARD_SLOTS;
    fd = ferry_mask_board_open(path, O_RDWR, why, why_len);
    if (fd < 0)
        return 0;
    /* Only this process' own slot: a rank of another run under the key keeps its own. */
    memset(&zero, 0, sizeof(zero));
    if (index >= 0 && index < FERRY_MASK_BOARD_SLOTS &&
        pread(fd, &s, sizeof(s), (off_t)index * (off_t)sizeof(s)) == (ssize_t)sizeof(s) &&
        s.pid == (int32_t)getpid())
        (void)!pwrite(fd, &zero, sizeof(zero), (off_t)index * (off_t)sizeof(zero));
    /*
     * Each rank clears its slot before it looks at the others', so of two
     * that leave at once at least the later one sees both cleared; both may
     * remove the file (the second unlink finds it gone: harmless). A slot
     * of a rank that died counts as left.
     */
    for (i = 0; i < nslots && !live; i++)
        live = pread(fd, &s, sizeof(s), (off_t)i * (off_t)sizeof(s)) == (ssize_t)sizeof(s) &&
               ferry_mask_slot_ok(&s, i);
    close(fd);
    if (live)
        return 0;
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(why, why_len, "%s: unlink: %s", path, strerror(errno));
        return 0;
    }
    return 1;
}
