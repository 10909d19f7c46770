/*
 * regMr and regMrDmaBuf's argument checks, made before anything is
 * registered: a range that wraps the address space, regMrDmaBuf of host
 * memory, an fd that is not open or cannot be a dma-buf. Each refusal is a
 * WARN naming the comm's peer and what to try, and FERRY_ERR_ARGUMENT.
 */
#ifndef FERRY_IB_REG_CHECK_H
#define FERRY_IB_REG_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct ferry_ib_comm;

/* regMr's and regMrDmaBuf's range: [data, data + size) page-rounded must not wrap. */
ferry_status_t ferry_ib_reg_check_range(const struct ferry_ib_comm *c, const char *fn, void *data,
                                        size_t size);
/* regMrDmaBuf's type, fd and offset, after the range. */
ferry_status_t ferry_ib_reg_check_dmabuf(const struct ferry_ib_comm *c, void *data, size_t size,
                                         int type, uint64_t offset, int fd);
/* What fd is, for a WARN: "a pipe (pipe:[123])"; never fails. */
void ferry_ib_fd_words(int fd, char *buf, size_t len);

#endif
