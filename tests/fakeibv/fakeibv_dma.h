/*
 * The emulated NIC's DMA into and out of registered host memory, as
 * ThreadSanitizer should see it: not at all.
 *
 * A real NIC writes a receive buffer or a clear-to-send FIFO while the
 * application polls it, and reads a send buffer, without any access the
 * sanitizer could record; the application learns of the DMA from a
 * completion or from a flag word it polls with acquire loads. fakeibv moves
 * those bytes with recv(2), send(2) and process_vm_readv(2)/writev(2) on one
 * of its own threads, which TSan does record, and it then reports every
 * poll of the flag word as a race with the emulator. Around each such copy
 * the thread's memory accesses are ignored (TSan's dynamic annotations), so
 * the application's own accesses are checked as on real hardware, and no
 * report depends on TSan restoring the emulator's stack for a suppression.
 */
#ifndef FAKEIBV_DMA_H
#define FAKEIBV_DMA_H

#if defined(__SANITIZE_THREAD__)
#define FAKEIBV_DMA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAKEIBV_DMA_TSAN 1
#endif
#endif

#ifdef FAKEIBV_DMA_TSAN
/* libtsan's dynamic annotations: each pair nests, per thread. */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);

static inline void fakeibv_dma_begin(void)
{
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
}

static inline void fakeibv_dma_end(void)
{
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
}
#else
static inline void fakeibv_dma_begin(void)
{
}

static inline void fakeibv_dma_end(void)
{
}
#endif

#endif
