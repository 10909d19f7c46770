/*
 * The registry of live comms: a dump walks it, and a comm leaves it before
 * its memory goes away. The text of a dump is dump_text.c's.
 */
#include <pthread.h>
#include <stdio.h>

#include "proxy/registry.h"

/* Guards the list and every comm's presence on it; comms unregister before they are freed. */
static pthread_mutex_t ferry_px_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_px_ring_t *ferry_px_registry_head;
static uint32_t ferry_px_registry_serial;

void ferry_px_registry_add(ferry_px_ring_t *comm)
{
    pthread_mutex_lock(&ferry_px_registry_lock);
    comm->serial = ++ferry_px_registry_serial;
    comm->reg_prev = NULL;
    comm->reg_next = ferry_px_registry_head;
    if (ferry_px_registry_head != NULL)
        ferry_px_registry_head->reg_prev = comm;
    ferry_px_registry_head = comm;
    pthread_mutex_unlock(&ferry_px_registry_lock);
}

void ferry_px_registry_remove(ferry_px_ring_t *comm)
{
    pthread_mutex_lock(&ferry_px_registry_lock);
    if (comm->reg_prev != NULL)
        comm->reg_prev->reg_next = comm->reg_next;
    else if (ferry_px_registry_head == comm)
        ferry_px_registry_head = comm->reg_next;
    if (comm->reg_next != NULL)
        comm->reg_next->reg_prev = comm->reg_prev;
    comm->reg_next = comm->reg_prev = NULL;
    pthread_mutex_unlock(&ferry_px_registry_lock);
}

int ferry_px_registry_foreach(void (*fn)(ferry_px_ring_t *comm, void *arg), void *arg)
{
    ferry_px_ring_t *comm;
    int n = 0;

    pthread_mutex_lock(&ferry_px_registry_lock);
    for (comm = ferry_px_registry_head; comm != NULL; comm = comm->reg_next, n++)
        if (fn != NULL)
            fn(comm, arg);
    pthread_mutex_unlock(&ferry_px_registry_lock);
    return n;
}
