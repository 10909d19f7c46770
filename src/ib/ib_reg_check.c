/*
 * regMr and regMrDmaBuf's argument checks (ib_reg_check.h). A dma-buf is
 * an anonymous-inode file of the kernel's dma-buf filesystem: an fd that is
 * a socket, a pipe, a directory or a device node can never be one, so it is
 * refused here with what it is; a regular file is left to the driver, which
 * refuses what is not a dma-buf at registration (ib_mr.c names it then).
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mr_range.h"
#include "ib/ib_comm.h"
#include "ib/ib_reg_check.h"

ferry_status_t ferry_ib_reg_check_range(const ferry_ib_comm_t *c, const char *fn, void *data,
                                        size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    /* The MR cache rounds the end up to a page: that must not wrap either. */
    if (!ferry_mr_range_wraps(data, size, page - 1))
        return FERRY_OK;
    FERRY_WARN_LIMITED("%s(%p, %zu bytes) on comm to %s (device %s): the range ends past the top "
                       "of the address space (address %p + size %zu wraps around to 0): no "
                       "buffer is there; pass the buffer's own address and size (a negative "
                       "size cast to size_t, or a stale pointer?)", fn, data, size,
                       c->conn.peer, ferry_ib_comm_where(c), data, size);
    return FERRY_ERR_ARGUMENT;
}

/* An fd that is open and might be a dma-buf: 1; else WARN words in why. */
static int ferry_ib_fd_may_be_dmabuf(int fd, char *why, size_t len)
{
    char what[PATH_MAX + 64];
    struct stat st;

    if (fd < 0) {
        snprintf(why, len, "fd %d is negative: regMrDmaBuf needs the dma-buf fd of the range "
                 "(cuMemGetHandleForAddressRange); memory without one goes through regMr", fd);
        return 0;
    }
    if (fcntl(fd, F_GETFD) < 0 || fstat(fd, &st) != 0) {
        snprintf(why, len, "fd %d is not open (closed already?): close the dma-buf fd only "
                 "after regMrDmaBuf returns", fd);
        return 0;
    }
    if ((st.st_mode & S_IFMT) == S_IFREG || (st.st_mode & S_IFMT) == 0)
        return 1;
    ferry_ib_fd_words(fd, what, sizeof(what));
    snprintf(why, len, "fd %d is %s, not a dma-buf: pass the fd "
             "cuMemGetHandleForAddressRange gave for this range", fd, what);
    return 0;
}

ferry_status_t ferry_ib_reg_check_dmabuf(const ferry_ib_comm_t *c, void *data, size_t size,
                                         int type, uint64_t offset, int fd)
{
    char why[PATH_MAX + 256];

    if (type == FERRY_PTR_HOST) {
        FERRY_WARN_LIMITED("regMrDmaBuf(%p, %zu bytes, type NCCL_PTR_HOST (1), fd %d) on comm "
                           "to %s (device %s): host memory has no dma-buf; register it with "
                           "regMr(NCCL_PTR_HOST)", data, size, fd, c->conn.peer,
                           ferry_ib_comm_where(c));
        return FERRY_ERR_ARGUMENT;
    }
    if (type != FERRY_PTR_CUDA && type != FERRY_PTR_DMABUF) {
        FERRY_WARN_LIMITED("regMrDmaBuf(%p, %zu bytes, type %d, fd %d) on comm to %s (device "
                           "%s): type must be NCCL_PTR_CUDA (2) or NCCL_PTR_DMABUF (4)", data,
                           size, type, fd, c->conn.peer, ferry_ib_comm_where(c));
        return FERRY_ERR_ARGUMENT;
    }
    if (offset > UINT64_MAX - size) {
        FERRY_WARN_LIMITED("regMrDmaBuf(%p, %zu bytes, fd %d, offset %llu) on comm to %s (device "
                           "%s): offset + size wraps past 2^64: pass the range's offset inside "
                           "its dma-buf", data, size, fd, (unsigned long long)offset,
                           c->conn.peer, ferry_ib_comm_where(c));
        return FERRY_ERR_ARGUMENT;
    }
    if (!ferry_ib_fd_may_be_dmabuf(fd, why, sizeof(why))) {
        FERRY_WARN_LIMITED("regMrDmaBuf(%p, %zu bytes, GPU memory (DMA-BUF), fd %d) on comm to "
                           "%s (device %s): %s", data, size, fd, c->conn.peer,
                           ferry_ib_comm_where(c), why);
        return FERRY_ERR_ARGUMENT;
    }
    return FERRY_OK;
}
