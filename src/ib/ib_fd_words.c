/*
 * What an fd is, for a WARN about a registration refused for its fd
 * (ib_reg_check.c before registering, ib_mr.c when the driver refuses it).
 */
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ib/ib_reg_check.h"

void ferry_ib_fd_words(int fd, char *buf, size_t len)
{
    char path[64], target[PATH_MAX];
    const char *kind = "a file";
    struct stat st;
    ssize_t n;

    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(buf, len, "not an open fd");
        return;
    }
    switch (st.st_mode & S_IFMT) {
    case S_IFSOCK: kind = "a socket"; break;
    case S_IFIFO:  kind = "a pipe"; break;
    case S_IFDIR:  kind = "a directory"; break;
    case S_IFCHR:  kind = "a character device"; break;
    case S_IFBLK:  kind = "a block device"; break;
    case S_IFREG:  kind = "a regular file"; break;
    case 0:        kind = "an anonymous inode"; break;
    default:       break;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        n = 0;
    target[n] = '\0';
    snprintf(buf, len, "%s%s%s%s", kind, n > 0 ? " (" : "", target, n > 0 ? ")" : "");
}
