/*
 * Logging and profiler types NCCL hands to a net plugin's init, plus the
 * helpers every include/nccl header uses to pin its layouts.
 * Values from reference/nccl-net-api.md §2.5.
 */
#ifndef FERRY_NCCL_COMMON_H
#define FERRY_NCCL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/*
 * Layout pins. Every struct these headers describe is checked where it is
 * declared, so any includer compiled for another ABI (or after a bad edit)
 * fails to build instead of corrupting arguments at run time.
 * The numbers are x86-64 / aarch64 LP64 values.
 */
#ifdef __cplusplus
#define FERRY_ABI_ASSERT(_cond, _msg) static_assert(_cond, _msg)
#else
#define FERRY_ABI_ASSERT(_cond, _msg) _Static_assert(_cond, _msg)
#endif
#define FERRY_ABI_SIZE(_type, _size) \
    FERRY_ABI_ASSERT(sizeof(_type) == (_size), "sizeof(" #_type ") != " #_size)
#define FERRY_ABI_OFFSET(_type, _member, _off) \
    FERRY_ABI_ASSERT(offsetof(_type, _member) == (_off), \
                     "offsetof(" #_type ", " #_member ") != " #_off)
/* Function-pointer tables: member _idx sits at _idx pointers from the start. */
#define FERRY_ABI_SLOT(_type, _member, _idx) \
    FERRY_ABI_OFFSET(_type, _member, (_idx) * sizeof(void *))

FERRY_ABI_ASSERT(sizeof(void *) == 8 && sizeof(size_t) == 8 && sizeof(int) == 4,
                 "the pinned layouts assume an LP64 target");

/* Severity NCCL's logger receives first; compared against NCCL_DEBUG. */
typedef enum {
    NCCL_LOG_NONE    = 0, /* Logging disabled. */
    NCCL_LOG_VERSION = 1, /* Version banner only. */
    NCCL_LOG_WARN    = 2, /* Errors; also stored for ncclGetLastError. */
    NCCL_LOG_INFO    = 3, /* Informational, filtered by subsystem mask. */
    NCCL_LOG_ABORT   = 4, /* Fatal; NCCL aborts after printing. */
    NCCL_LOG_TRACE   = 5  /* Debug builds of NCCL only. */
} ncclDebugLogLevel;

/*
 * The logger's first parameter is this enum; ferry's core declares it as int.
 * Both are a 32-bit integer argument in the same register, which is what
 * makes passing NCCL's logger to the core ABI-safe (see src/nccl/plugin.c).
 */
FERRY_ABI_SIZE(ncclDebugLogLevel, 4);

/* Subsystem flags (NCCL_DEBUG_SUBSYS). Default mask is INIT|BOOTSTRAP|ENV. */
typedef enum {
    NCCL_INIT      = 0x1,    /* Communicator and plugin setup. */
    NCCL_COLL      = 0x2,    /* Collectives. */
    NCCL_P2P       = 0x4,    /* Point-to-point transport. */
    NCCL_SHM       = 0x8,    /* Shared-memory transport. */
    NCCL_NET       = 0x10,   /* Network transport and plugins. */
    NCCL_GRAPH     = 0x20,   /* Topology search. */
    NCCL_TUNING    = 0x40,   /* Algorithm/protocol tuning. */
    NCCL_ENV       = 0x80,   /* Environment variables read. */
    NCCL_ALLOC     = 0x100,  /* Allocations. */
    NCCL_CALL      = 0x200,  /* API calls. */
    NCCL_PROXY     = 0x400,  /* Proxy threads. */
    NCCL_NVLS      = 0x800,  /* NVLink SHARP. */
    NCCL_BOOTSTRAP = 0x1000, /* Out-of-band bootstrap. */
    NCCL_REG       = 0x2000, /* Buffer registration. */
    NCCL_PROFILE   = 0x4000, /* Profiler (core only, not in ext-net). */
    NCCL_RAS       = 0x8000, /* RAS subsystem (core only, not in ext-net). */
    NCCL_ALL       = ~0      /* Every subsystem. */
} ncclDebugLogSubSys;

/* NCCL's logger; printf-style, called with __FILE__ (or __func__) and __LINE__. */
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags,
                                  const char *file, int line, const char *fmt, ...);

/* Values of the profiler callback's type argument (v10+). */
enum {
    ncclProfilerNetEventStart         = 0, /* Open an event; pHandle must be non-NULL. */
    ncclProfilerNetEventStop          = 1, /* Close *eHandle. */
    ncclProfilerNetEventUpdate        = 2, /* Update *eHandle with extData. */
    ncclProfilerNetEventUpdateAndStop = 3  /* Update, then close. */
};

/*
 * Profiler callback (v10+ init). pluginId is (type << 16) | version; extData
 * is a plugin-defined descriptor the profiler plugin understands.
 */
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *pHandle,
                                               int64_t pluginId, void *extData);

#endif
