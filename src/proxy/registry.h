/* Every live comm, so a dump can show them all. */
#ifndef FERRY_PROXY_REGISTRY_H
#define FERRY_PROXY_REGISTRY_H

#include <stdio.h>

#include "proxy/ring.h"

/* Adds the comm and gives it its serial number. */
void ferry_px_registry_add(ferry_px_ring_t *comm);
void ferry_px_registry_remove(ferry_px_ring_t *comm);
/*
 * Call fn on every live comm under the registry lock (a comm cannot be
 * freed meanwhile); fn NULL only counts. Returns the number of comms.
 */
int ferry_px_registry_foreach(void (*fn)(ferry_px_ring_t *comm, void *arg), void *arg);
/* Write every live comm, its transport and in-flight requests (ring_dump.c); returns the number of comms. */
int ferry_px_registry_dump(FILE *out);

/* Install the dump on signal signo (0: off). Starts the ferry-dump thread. */
int ferry_px_dump_start(int signo);
/* Restore the previous handler and join the ferry-dump thread. */
void ferry_px_dump_stop(void);

#endif
