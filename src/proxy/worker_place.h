/*
 * Where helper threads run beside the thread that posts (NCCL's proxy
 * thread). With place_away a comm's helpers keep off the CPU its posts last
 * came from: on a rank with two CPUs that leaves the proxy thread one core
 * and gives the helpers the other, instead of the scheduler waking a helper
 * on its waker's core (worker_place.c). Posts note their CPU on the comm
 * (caller_cpu, stream.c).
 */
#ifndef FERRY_PROXY_WORKER_PLACE_H
#define FERRY_PROXY_WORKER_PLACE_H

#include "proxy/stream.h"

/* A helper's start: the CPUs it may use are the ones it runs on now (near the NIC, or the mask). */
void ferry_px_place_start(ferry_px_worker_t *w);
/*
 * Before each sweep: if the posting CPU moved since the worker last looked,
 * cut it out of the worker's CPUs (one sched_setaffinity per move; never to
 * an empty set).
 */
void ferry_px_place_follow(ferry_px_worker_t *w);

#endif
