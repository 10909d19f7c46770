/*
 * A sampling profiler of NCCL's proxy thread, inside libferry-flush-prof.so,
 * for machines with no perf and no hardware counters (the GPU machine): a
 * CLOCK_MONOTONIC timer raises SIGPROF on that one thread FERRY_PROF_SAMPLE_HZ
 * times a second and the handler keeps the interrupted program counter. Wall
 * time, not CPU time: a thread's CPU-time timer fires only at the kernel's
 * tick (250 Hz here), and NCCL's proxy thread spins, so the two agree; a
 * syscall it blocks in shows as the libc function that made it. At finalize the counts go out per
 * program counter with the shared object it lies in (path and offset, for
 * addr2line: the plugin's own functions are hidden from dladdr), as
 * pc_sample lines, and one pc_total line with the step-state records seen,
 * so two transports are compared per proxy step (pc_table.py).
 */
#ifndef FERRY_PC_SAMPLER_H
#define FERRY_PC_SAMPLER_H

#include <stdio.h>

/* Called on every step-state record: the first thread to call it is sampled
 * (NCCL's proxy progress thread records every step state). Counts the record. */
void fp_sampler_record(void);

/* Stops sampling and writes the pc_sample and pc_total lines (once per process). */
void fp_sampler_report(FILE *f, int rank);

#endif
