/*
 * integ_ib_multirail's shared parts: the environment of one case (the
 * plugin, its merged device and fakeibv's white-box entry points) and the
 * helpers both of its files use. The cases are listed in
 * integ_ib_multirail.c; integ_ib_multirail_fail.c holds those where the
 * merged device fails whole (alone-down) or is refused (refuse).
 */
#ifndef FERRY_INTEG_IB_MULTIRAIL_H
#define FERRY_INTEG_IB_MULTIRAIL_H

#include "fakeibv.h"
#include "harness.h"
#include "ib/ib_comm.h"

typedef int (*mr_inject_fn)(struct ibv_context *, enum fakeibv_fault_kind, uint32_t, unsigned,
                            unsigned, int);

typedef int (*mr_counters_fn)(struct ibv_context *, uint8_t, struct fakeibv_port_counters *);

typedef int (*mr_qp_stats_fn)(uint32_t, struct fakeibv_qp_stats *);

typedef struct mr_env {
    fit_plugin_t  plugin;
    void         *ctx;
    int           dev;
    mr_inject_fn  inject;
    mr_counters_fn counters;
    mr_qp_stats_fn qp_stats;
    void         *send_comm, *recv_comm;
    int           down_after; /* failover: message after which the port goes down. */
    int           downed;
} mr_env_t;

/* Open the plugin, init it and find the merged device (FIT_MERGE); fakeibv's entry points. */
void mr_open(mr_env_t *e, const char *path);
/* The comm's connection state (same build: the plugin's layout). */
const ferry_ib_conn_t *mr_conn(void *comm);
/* Inject kind on the port of the send comm's member m. */
void mr_port(mr_env_t *e, int m, enum fakeibv_fault_kind kind);

/* The cases of integ_ib_multirail_fail.c. */
void mr_alone(const char *path, int close_at_once);
void mr_refuse(const char *path, int all);

#endif
