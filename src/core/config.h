/*
 * ferry's process-wide configuration: the variables both backends read (the
 * backend, the interface and family, connect retries, the hello timeout, the
 * dump signal, the stall warning) and the tuner's, in one table (name,
 * default, help), parsed once from the environment into a ferry_config_t
 * that is then read-only. Each backend owns its own variables and parses
 * them at its init: socket/sock_config.h, ib/ib_config.h. NCCL copies
 * nccl.conf entries into the environment, so getenv sees them too.
 */
#ifndef FERRY_CORE_CONFIG_H
#define FERRY_CORE_CONFIG_H

#include <stddef.h>

#include "core/status.h"

typedef enum ferry_cfg_src {
    FERRY_CFG_DEFAULT, /* Nobody set it. */
    FERRY_CFG_ENV,     /* From the environment (or NCCL's config files). */
    FERRY_CFG_DERIVED  /* Computed from other variables. */
} ferry_cfg_src_t;

/* Index of each variable in the table; also indexes ferry_config_t.src. */
typedef enum ferry_cfg_id {
    FERRY_CFG_BACKEND,
    FERRY_CFG_SOCKET_IFNAME,
    FERRY_CFG_SOCKET_FAMILY,
    FERRY_CFG_RETRY_CNT,
    FERRY_CFG_RETRY_SLEEP_MS,
    FERRY_CFG_HELLO_TIMEOUT_MS,
    FERRY_CFG_DUMP_SIGNAL,
    FERRY_CFG_TUNER,
    FERRY_CFG_TUNER_LL_BW,
    FERRY_CFG_TUNER_CHANNEL_BYTES,
    FERRY_CFG_TUNER_STEP_BYTES,
    FERRY_CFG_STALL_WARN_S,
    FERRY_CFG_RMA,
    FERRY_CFG_COUNT
} ferry_cfg_id_t;

typedef enum ferry_backend_kind {
    FERRY_BACKEND_AUTO,
    FERRY_BACKEND_SOCKET,
    FERRY_BACKEND_IB
} ferry_backend_kind_t;

typedef struct ferry_config {
    ferry_backend_kind_t backend;  /* NCCL_FERRY_BACKEND. */
    char   socket_ifname[256];     /* NCCL_SOCKET_IFNAME, "" = NCCL's default order. */
    int    socket_family;          /* NCCL_SOCKET_FAMILY: AF_UNSPEC, AF_INET or AF_INET6. */
    int    retry_cnt;              /* Connect retries on refused/unreachable. */
    int    retry_sleep_ms;         /* Linear back-off step between retries. */
    int    hello_timeout_ms;       /* Pending inbound stream dropped after this. */
    int    dump_signal;            /* Signal number that dumps state, 0 = off. */
    int    tuner;                  /* 1: the bundled NCCL tuner corrects NCCL's cost model. */
    int    tuner_ll_bw;            /* MB/s of bus bandwidth LL/LL128 reach over a host-staged net. */
    size_t tuner_channel_bytes;    /* Simple collectives: bytes per channel before adding one. */
    size_t tuner_step_bytes;       /* Simple rings: one channel while a 2-channel step moves less. */
    int    stall_warn_s;           /* test() WARNs once about a request without progress this long; 0 off. */
    int    rma;                    /* NCCL_FERRY_RMA: 1 ferry's RMA plugin, 0 NCCL's own. */
    ferry_cfg_src_t src[FERRY_CFG_COUNT];
} ferry_config_t;

/* "auto", "socket" or "ib": the value of NCCL_FERRY_BACKEND that names kind. */
const char *ferry_config_backend_name(ferry_backend_kind_t kind);
/* Parse the environment. On bad input: WARN naming variable, value and what is accepted. */
ferry_status_t ferry_config_load(ferry_config_t *cfg);
/* One line "name=value(source) ..." for the INIT log. */
void ferry_config_format(const ferry_config_t *cfg, char *buf, size_t len);
/* Parse a signal given as "USR1", "SIGUSR1", "10", or "off"/"0"/"" (0). -1 if invalid. */
int ferry_config_parse_signal(const char *text);
/* Parse a size with optional K/M/G suffix (powers of 1024). -1 if invalid. */
long long ferry_config_parse_size(const char *text);

#endif
