/*
 * integ_ib_gpu's harness: the ib backend on GPU memory, driven through
 * ncclNetPlugin_v11 in one process on fakeibv in GPU mode, with
 * tests/fakecuda as the process's one libcuda.so.1. Its device memory is
 * PROT_NONE to the CPU, so the test writes and reads GPU buffers only
 * through the driver (gg_write, gg_read). The helpers are in
 * integ_ib_gpu_env.c; the modes in integ_ib_gpu.c, and the automatic flush
 * choice in integ_ib_gpu_flush_auto.c. What each mode expects is in
 * integ_ib_gpu.c.
 */
#ifndef FERRY_TESTS_INTEGRATION_INTEG_IB_GPU_H
#define FERRY_TESTS_INTEGRATION_INTEG_IB_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "fakecuda.h"
#include "fakeibv.h"
#include "harness.h"
#include "harness_cuda.h"

#define GG_SLOT   (((size_t)8 << 20) + 8192) /* The largest message plus room for poison. */
#define GG_EXTRA  4096                       /* Receives are posted this much larger. */
#define GG_POISON 0x3c

/* fakecuda's driver calls, found by gg_libs_open. */
typedef struct gg_cu {
    fit_cu_t drv;
    int (*dmabuf_fd)(void *, unsigned long long, size_t, int, unsigned long long);
    fakecuda_flushes_fn flushes;
    fakecuda_fail_next_flush_fn fail_flush;
} gg_cu_t;

extern gg_cu_t gg_cu;
/* fakeibv_inject, found by gg_libs_open. */
extern int (*gg_inject)(struct ibv_context *, enum fakeibv_fault_kind, uint32_t, unsigned,
                        unsigned, int);
/* The mode flushes with READs (1; 0: cuda, or none; -1: either, counted by the mode). */
extern int gg_reads_flush;

/* A registered buffer: device memory (fakecuda) or host memory. */
typedef struct gg_buf {
    int                gpu;
    unsigned long long dev;
    char              *host;
    size_t             size;
    void              *mh;
    void              *comm;
} gg_buf_t;

/* The plugin, its context and one connected comm pair on device 0. */
typedef struct gg_env {
    fit_plugin_t plugin;
    void        *ctx;
    void        *send_comm, *recv_comm;
} gg_env_t;

/* After init: the plugin loaded libcuda.so.1 (its DMA-BUF question) and libibverbs.so.1. */
void gg_libs_open(void);

char *gg_addr(const gg_buf_t *b, size_t off);
void gg_buf_open(const fit_plugin_t *p, gg_buf_t *b, void *comm, int gpu, size_t size);
void gg_buf_free(gg_buf_t *b);
void gg_write(gg_buf_t *b, size_t off, const void *src, size_t len);
void gg_read(gg_buf_t *b, size_t off, void *dst, size_t len);

/* Opens the plugin and connects a comm pair; need_cuda: gg_libs_open after init. */
void gg_open(gg_env_t *e, const char *path, int need_cuda);
void gg_close_comms(gg_env_t *e);
ncclResult_t gg_wait(gg_env_t *e, void *req, int *size_p, const char *what);

/* The number of the last comm's first flush QP; 0 if there is none. */
uint32_t gg_flush_qpn(void);
/* READs (and *bytes_p, their bytes) fakeibv counted on QP qpn; 0 for qpn 0. */
uint64_t gg_reads(uint32_t qpn, uint64_t *bytes_p);
/*
 * iflush of what a receive got. Returns the request's rc; *req_made says if
 * a request came back (NULL: nothing to flush).
 */
ncclResult_t gg_flush(gg_env_t *e, int n, void **data, int *sizes, void **mhs, int *req_made);
/* One message src -> dst of size bytes, checked in dst byte for byte; then flushed. */
void gg_one(gg_env_t *e, gg_buf_t *src, gg_buf_t *dst, size_t size, uint64_t seed,
            const char *what);
/* The message sizes every sweep uses (0 B..8 MiB) into s; returns how many. */
int gg_sizes(size_t *s);
/* ptrSupport, forceFlush, and an init line 'ib backend GPU memory: ...line_words'. */
void gg_check_props(gg_env_t *e, int want, int want_force, const char *line_words);
/* After the comms closed: deregister and free a GPU buffer pair, finalize, no stray WARN. */
void gg_finish(gg_env_t *e, gg_buf_t *sg, gg_buf_t *rg, const char *mode);

/* --mode autoflush (integ_ib_gpu_flush_auto.c). */
void gg_mode_autoflush(const char *path);

#endif
