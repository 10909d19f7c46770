/*
 * The WARN NCCL_FERRY_BACKEND=auto logs when it passes over a backend that
 * was meant to run here (FERRY_UNUSABLE_MEANT, core/backend.h) and takes the
 * next one: the job still runs, but not on the transport its host or its
 * variables ask for. ferry-info, which sees the plugin only through its log,
 * reports a run with this WARN as degraded; both sides use this head.
 */
#ifndef FERRY_CORE_AUTO_FALLBACK_H
#define FERRY_CORE_AUTO_FALLBACK_H

/* "NCCL_FERRY_BACKEND=auto: using the socket backend, not ib: <why>; ..." */
#define FERRY_AUTO_FALLBACK_HEAD "NCCL_FERRY_BACKEND=auto: using the "

#endif
