/*
 * integ_pc_sampler LIB PC_TABLE_PY: the flush profiler's PC sampler
 * (bench/nccl/pc_sampler.h) loaded as NCCL loads the profiler, with
 * FERRY_PROF_SAMPLE_HZ set. The thread that records a step state is sampled:
 * it spends ~0.3 s of CPU in spin_here(), so most samples must name this
 * program and that offset, and pc_total must count every record. Then
 * pc_table.py reads the lines as two configurations of compare.sh and must
 * resolve spin_here by addr2line in its table.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flush_prof_abi.h"
#include "soft_check.h"

#define RECORDS 57


static double cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Arithmetic, not clock reads, so the samples land here and not in the vDSO. */
__attribute__((noinline)) static unsigned long spin_here(double seconds)
{
    volatile unsigned long x = 1;
    double end = cpu_s() + seconds;
    unsigned long i;

    while (cpu_s() < end)
        for (i = 0; i < 2000000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf;
    long n;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = calloc(1, (size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = '\0';
    fclose(f);
    return buf;
}

/* Samples on pc_sample lines whose dso ends in self (this program), and all of them. */
static void count_samples(const char *text, const char *self, unsigned long *mine,
                          unsigned long *all, unsigned long *total, unsigned long *records)
{
    const char *p = text;

    *mine = *all = *total = *records = 0;
    while ((p = strstr(p, "pc_")) != NULL) {
        const char *eol = strchr(p, '\n'), *s = strstr(p, "samples="), *d = strstr(p, "dso=");
        unsigned long n = s != NULL ? strtoul(s + 8, NULL, 10) : 0;

        if (strncmp(p, "pc_total:", 9) == 0) {
            const char *r = strstr(p, "records=");

            *total = n;
            *records = r != NULL ? strtoul(r + 8, NULL, 10) : 0;
        } else if (strncmp(p, "pc_sample:", 10) == 0 && d != NULL && (eol == NULL || d < eol)) {
            const char *end = strchr(d, ' ');
            size_t len = strlen(self);

            *all += n;
            if (end != NULL && (size_t)(end - d) >= len && memcmp(end - len, self, len) == 0)
                *mine += n;
        }
        p = eol != NULL ? eol : p + 3;
    }
}

/* pc_table.py over the lines, as compare.sh's ferry-ib and nccl-ib runs; its table must name spin_here. */
static void check_table(const char *dir, const char *text, const char *script)
{
    char logs[512], path[600], cmd[1400];
    FILE *f;
    char *summary;

    snprintf(logs, sizeof(logs), "%s/logs", dir);
    mkdir(logs, 0700);
    snprintf(path, sizeof(path), "%s/flush-prof.txt", logs);
    f = fopen(path, "w");
    if (f == NULL) {
        CHECK(0, "cannot write %s", path);
        return;
    }
    for (int c = 0; c < 2; c++) {
        const char *p = text;

        while (*p != '\0') {
            const char *eol = strchr(p, '\n');
            size_t len = eol != NULL ? (size_t)(eol - p) : strlen(p);

            fprintf(f, "build=t rep=1 config=%s %.*s\n", c == 0 ? "ferry-ib" : "nccl-ib",
                    (int)len, p);
            p += len + (eol != NULL);
        }
    }
    fclose(f);
    snprintf(cmd, sizeof(cmd), "python3 %s %s >/dev/null", script, dir);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    snprintf(path, sizeof(path), "%s/summary.md", dir);
    summary = slurp(path);
    CHECK(summary != NULL && strstr(summary, "spin_here") != NULL,
          "pc_table.py's summary does not name spin_here:\n%s", summary ? summary : "(none)");
    CHECK(summary != NULL && strstr(summary, "ns per record") != NULL, "no per-record line");
    free(summary);
    unlink(path);
    snprintf(path, sizeof(path), "%s/flush-prof.txt", logs);
    unlink(path);
    rmdir(logs);
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/integ_pc_sampler.XXXXXX", out[256], path[300];
    const fp_profiler_v5_t *prof;
    unsigned long mine = 0, all = 0, total = 0, records = 0;
    fp_event_descr_t d;
    void *lib, *ctx = NULL, *coll = NULL, *op = NULL, *step = NULL;
    const char *self;
    char *text;
    int mask = 0, i;

    if (argc != 3) {
        fprintf(stderr, "usage: integ_pc_sampler LIBFERRY_FLUSH_PROF.so PC_TABLE.py\n");
        return 2;
    }
    self = strrchr(argv[0], '/') != NULL ? strrchr(argv[0], '/') + 1 : argv[0];
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    prof = lib != NULL ? dlsym(lib, "ncclProfiler_v5") : NULL;
    if (prof == NULL || mkdtemp(tmpl) == NULL) {
        fprintf(stderr, "FAIL: dlopen/dlsym %s: %s\n", argv[1], dlerror());
        return 1;
    }
    snprintf(out, sizeof(out), "%s/fp.%%p.txt", tmpl);
    snprintf(path, sizeof(path), "%s/fp.%ld.txt", tmpl, (long)getpid());
    setenv("FERRY_FLUSH_PROF_OUT", out, 1);
    setenv("FERRY_PROF_SAMPLE_HZ", "4000", 1);
    CHECK(prof->init(&ctx, 0xc, &mask, "c", 1, 2, 0, NULL) == 0 && ctx != NULL, "init");
    memset(&d, 0, sizeof(d));
    d.type = FP_EVENT_COLL;
    d.coll.count = 4096;
    d.coll.datatype = "ncclFloat32";
    d.coll.proto = "LL";
    d.coll.func = "AllReduce";
    prof->start_event(ctx, &coll, &d);
    d.type = FP_EVENT_PROXY_OP;
    d.parent = coll;
    prof->start_event(ctx, &op, &d);
    d.type = FP_EVENT_PROXY_STEP;
    d.parent = op;
    prof->start_event(ctx, &step, &d);
    CHECK(step != NULL, "step handle");
    for (i = 0; i < RECORDS; i++) {
        prof->record_state(step, i % 2 ? FP_STATE_SEND_WAIT : FP_STATE_SEND_GPU_WAIT, NULL);
        if (i == 0)
            spin_here(0.3); /* The first record armed the sampler on this thread. */
    }
    prof->stop_event(step);
    CHECK(prof->finalize(ctx) == 0, "finalize");
    text = slurp(path);
    CHECK(text != NULL, "no output in %s", path);
    if (text != NULL) {
        count_samples(text, self, &mine, &all, &total, &records);
        /* 0.3 s of CPU at 4 kHz of wall time: at least ~1200. */
        CHECK(total >= 300, "pc_total samples=%lu, expected ~1200", total);
        CHECK(all == total, "pc_sample lines sum to %lu, pc_total says %lu", all, total);
        CHECK(records == RECORDS, "records=%lu, expected %d", records, RECORDS);
        CHECK(mine * 10 >= total * 9, "%lu of %lu samples in %s", mine, total, self);
        check_table(tmpl, text, argv[2]);
    }
    free(text);
    unlink(path);
    rmdir(tmpl);
    if (failures != 0) {
        fprintf(stderr, "integ_pc_sampler: %d failures\n", failures);
        return 1;
    }
    printf("integ_pc_sampler: PASS (%lu samples, %lu in %s)\n", total, mine, self);
    return 0;
}
