/*
 * Test controls of fakecuda (a stand-in libcuda.so.1, see fakecuda.c).
 * Tests look these up with dlsym in the libcuda.so.1 the plugin opened.
 */
#ifndef FERRY_TESTS_FAKECUDA_H
#define FERRY_TESTS_FAKECUDA_H

/* Copies run so far (at stream synchronisation). */
long fakecuda_copies(void);
/* Streams alive now, and how many were ever made without CU_STREAM_NON_BLOCKING. */
long fakecuda_streams(void);
long fakecuda_blocking(void);
/*
 * Let n more copies succeed, then fail every copy with
 * CUDA_ERROR_ILLEGAL_ADDRESS, sticky as a faulted GPU context; -1 heals.
 */
void fakecuda_fail_copies_after(long n);
/* The next cuMemHostAlloc fails with CUDA_ERROR_OUT_OF_MEMORY. */
void fakecuda_fail_next_host_alloc(int on);
/* While on, queued copies never complete (a GPU that stopped); off lets them finish. */
void fakecuda_hold_copies(int on);

/* cuFlushGPUDirectRDMAWrites calls that succeeded; DMA-BUF fds handed out. */
long fakecuda_flushes(void);
long fakecuda_dmabuf_fds(void);
/*
 * The next cuFlushGPUDirectRDMAWrites returns CUresult r (0 disarms).
 * FAKECUDA_FLUSH_DELAY_US=N makes each successful one take N us.
 */
void fakecuda_fail_next_flush(int r);

typedef long (*fakecuda_copies_fn)(void);
typedef long (*fakecuda_streams_fn)(void);
typedef void (*fakecuda_fail_copies_after_fn)(long);
typedef void (*fakecuda_fail_next_host_alloc_fn)(int);
typedef void (*fakecuda_hold_copies_fn)(int);
typedef long (*fakecuda_flushes_fn)(void);
typedef void (*fakecuda_fail_next_flush_fn)(int);

#endif
