/*
 * test_rma_socket: ferry's RMA plugin (ncclRmaPlugin_v14 / _v13) over the
 * socket backend,
 * driven as NCCL's RMA proxy drives it: forked ranks, listen handles
 * all-gathered through shared memory, connect(handles[], nranks, rank),
 * createContext, collective regMrSym, then one-sided operations checked
 * byte for byte, with the targets moving only through rmaProgress/test.
 *
 * Cases (--case):
 *   data      v14, 3 ranks: iputSignal (ADD and signal-only INC) to the next
 *             rank, data checked the moment the signal is seen; iget from the
 *             next rank; iput + iflush to the rank after, checked after the
 *             flush; 8 B .. 64 MiB; test() of a finished request; then one
 *             rank closes first and the others see no error.
 *   v13       the same over ncclRmaPlugin_v13 (GIN v13 layout), smaller sizes.
 *   threads   the data case up to 1 MiB with a second thread per rank calling
 *             rmaProgress and queryLastError all along, as NCCL's RMA progress
 *             thread does while another thread posts, tests and registers
 *             (for TSan).
 *   misuse    strangers knock on rank 2's listener before the group connects
 *             (junk bytes, a hello cut short): closed and WARNed, the group
 *             connects anyway; rank out of range, a put beyond the target's region refused at
 *             the source (return code and text), a bad signal op, a foreign
 *             handle to test(); then with the source check off (test knob
 *             FERRY_TEST_RMA_NO_SOURCE_CHECK) the target refuses it: the
 *             request fails, both sides WARN, nothing is written, and the
 *             group keeps working.
 *   stall     rank 1 stops progressing while rank 0's put waits for its answer:
 *             the stall WARN (NCCL_FERRY_STALL_WARN_S=1) and the signal dump
 *             (NCCL_FERRY_DUMP_SIGNAL=USR1) both show the RMA request with its
 *             counters; then rank 1 resumes and the put completes.
 *   gpu       NCCL_FERRY_GPU_STAGING=1 on tests/fakecuda: the window and the
 *             signal words in GPU memory (regMrSym type NCCL_PTR_CUDA): a put
 *             with signal from host memory into it, a get out of it, a put
 *             from it, each checked byte for byte through the driver.
 *   gpu-dmabuf  (ib) the same with the windows registered through
 *             regMrSymDmaBuf, on a host with DMA-BUF and no peer-memory module.
 *   killed    rank 2 is SIGKILLed: ranks 0 and 1 see queryLastError report it
 *             within a bound, and a put to it fails instead of hanging.
 *   dereg     (socket) regions deregistered while operations on them still
 *             move: test_rma_dereg.c.
 *   split, split-fail  operations larger than one message of the transport,
 *             and (ib) one of their parts failing: test_rma_split.c.
 *
 * With NCCL_FERRY_BACKEND=ib (fakeibv) the same cases run over verbs
 * (src/ib/ib_rma_*.c): the puts are RDMA WRITEs, the signals atomic
 * fetch-and-adds, gets and flushes RDMA READs, answered by the target's
 * HCA without its CPU. Where the backends differ: a range beyond the
 * target's region is refused at the source with ncclInvalidArgument (the
 * WARN also names the QP), and there is no target-side refusal to test
 * (an HCA refuses a bad rkey range by failing the QP); in the killed case
 * rank 2 is stopped (SIGSTOP) before the survivors post their puts, so
 * they are in flight when it dies (its HCA would answer them otherwise).
 */
/*
 * The program's files, one job each: this header (what they share);
 * test_rma_driver.c (main: the plugin, the case, the forked ranks and what
 * the parent does to them); test_rma_common.c (the two ABI versions behind
 * one set of calls, barriers and byte checks, a rank's setup and teardown);
 * test_rma_data.c (data, v13, threads); test_rma_gpu.c; test_rma_misuse.c;
 * test_rma_faults.c (stall, killed); test_rma_dereg.c; test_rma_split.c.
 */
#ifndef FERRY_TEST_RMA_H
#define FERRY_TEST_RMA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "nccl/rma.h"

#define NRANKS      3
#define MAX_SIZE    (64u << 20)
#define PLAIN_OFF   MAX_SIZE           /* Where plain iput + iflush land in the window. */
#define PLAIN_SIZE  (1u << 20)
#define WIN_SIZE    (MAX_SIZE + PLAIN_SIZE)
#define GUARD       4096               /* Bytes after the window that nothing may touch. */
#define NSIG_WORDS  (2 * NRANKS)       /* ADD words by source, then INC words by source. */
#define WAIT_S      15.0

/* Shared between the forked ranks: handles and a barrier per step. */
typedef struct shared {
    char        handles[NRANKS][NCCL_NET_HANDLE_MAXSIZE];
    _Atomic int arrived[64];
    _Atomic int ready_to_die;
    _Atomic int strangers_done; /* misuse: the parent's junk reached rank 2's listener. */
    _Atomic int stopped_pid;    /* ib stall: rank 1, about to stop itself (SIGSTOP). */
    _Atomic uint32_t split_qpn; /* split-fail: rank 0's QP towards rank 2. */
} shared_t;

/* test_rma_driver.c */
extern shared_t *sh;
extern int my_rank;
extern int wait_strangers; /* misuse: connect only after the strangers knocked. */
extern int use_v13;
extern const ncclRma_v14_t *v14;
extern const ncclRma_v13_t *v13;
extern void *rctx;         /* RMA context, once created: barrier waits move it. */
extern int with_thread;    /* threads case: a progress thread per rank. */
extern int on_ib;          /* NCCL_FERRY_BACKEND=ib: RMA over verbs (fakeibv). */
extern const char *plugin_path; /* The library under test (--plugin). */

/* test_rma_common.c: the two ABI versions behind one set of calls. */
ncclResult_t rma_init(void **ctx);
ncclResult_t rma_create(void *coll, void **ctx);
ncclResult_t rma_reg(void *coll, void *data, size_t size, uint64_t flags, void **mh);
ncclResult_t rma_iput(uint64_t soff, void *smh, size_t size, uint64_t doff, void *dmh,
                      uint32_t rank, void **req);
ncclResult_t rma_iput_signal(uint64_t soff, void *smh, size_t size, uint64_t doff, void *dmh,
                             uint32_t rank, uint64_t sig_off, void *sig_mh, uint64_t value,
                             uint32_t op, void **req);
ncclResult_t rma_iget(uint64_t roff, void *rmh, size_t size, uint64_t loff, void *lmh,
                      uint32_t rank, void **req);
ncclResult_t rma_iflush(void *mh, uint32_t rank, void **req);
ncclResult_t rma_test(void *coll, void *req, int *done);
void rma_progress(void);
int rma_has_error(void);

/* test_rma_common.c: helpers. */
/* All ranks reach step k; the waiting keeps this rank's RMA moving (peers may need answers). */
void barrier(int k);
unsigned char pat(int src, int round, size_t i);
void fill(unsigned char *buf, size_t n, int src, int round);
void check_bytes(const unsigned char *buf, size_t n, int src, int round, const char *what);
/* test() until done; returns its last result (success expected unless want_err). */
ncclResult_t wait_req(void *coll, void *req, const char *what);
void wait_word(volatile uint64_t *w, uint64_t want, const char *what);

/* test_rma_common.c: one rank's group, regions and context. */
typedef struct rank_state {
    void          *ctx, *coll;
    unsigned char *src, *win;
    uint64_t      *sig;
    void          *src_mh, *win_mh, *sig_mh;
} rank_state_t;

void rank_setup(rank_state_t *s, int step0);
void rank_teardown(rank_state_t *s);

/* The cases, each run by every rank. */
void case_data(void);   /* test_rma_data.c: data, v13, threads. */
void case_gpu(void);    /* test_rma_gpu.c */
extern int gpu_dmabuf;  /* test_rma_gpu.c: case gpu-dmabuf (ib). */
void case_misuse(void); /* test_rma_misuse.c */
void case_stall(void);  /* test_rma_faults.c */
void case_killed(void); /* test_rma_faults.c */
void case_dereg(void);  /* test_rma_dereg.c */
void case_split(void);      /* test_rma_split.c */
void case_split_fail(void); /* test_rma_split.c: ib */
void case_off(void);        /* test_rma_off.c: NCCL_FERRY_RMA=0 */
/* test_rma_misuse.c, in the parent: the strangers at rank 2's listener. */
void knock_on_rank2(void);

#endif
