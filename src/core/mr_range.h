/*
 * regMr's bounds check, shared by the backends: a range whose end (plus the
 * rounding a backend adds, e.g. up to a page) lies past the top of the
 * address space is no buffer. It comes from a negative size cast to size_t
 * or a stale pointer; registering it would pin or hand a peer a range that
 * wraps around to address 0.
 */
#ifndef FERRY_CORE_MR_RANGE_H
#define FERRY_CORE_MR_RANGE_H

#include <stddef.h>
#include <stdint.h>

/* 1 if [addr, addr + size + slack) runs past UINTPTR_MAX. */
static inline int ferry_mr_range_wraps(const void *addr, size_t size, size_t slack)
{
    uintptr_t room = UINTPTR_MAX - (uintptr_t)addr;

    return size > room || slack > room - size;
}

#endif
