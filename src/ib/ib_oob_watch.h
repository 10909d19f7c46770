/*
 * The process' watch over the ib comms' out-of-band sockets.
 *
 * Each comm keeps its OOB TCP socket (or, in rdmacm mode, one end of a
 * socketpair) open to learn that its peer is gone, and to read a merged
 * device's rejoin messages. Reading every comm's socket once a millisecond
 * costs a recv() per comm and millisecond in NCCL's proxy thread: at a
 * thousand comms, nearly every test() would make a system call. Instead one
 * epoll set per process holds every socket, one-shot: whichever data-path
 * thread comes first after a millisecond asks it (one epoll_wait for all
 * comms), and marks the sockets that have something to read. A comm reads
 * its socket only when marked, then rearms it.
 *
 * A mark that was not due (a slot handed to a new comm right after another
 * thread's epoll_wait saw the old one) costs one empty recv; a socket that
 * cannot be watched (no epoll, no slot) is read every time, as before.
 */
#ifndef FERRY_IB_OOB_WATCH_H
#define FERRY_IB_OOB_WATCH_H

#include <stdint.h>

/* A socket's place in the watch; 0: not watched (read it every time). */
typedef uint32_t ferry_ib_oob_watch_t;

/* How often the process' epoll set is asked: the comms' liveness period. */
#define FERRY_IB_OOB_WATCH_NS 1000000ULL

/* who names the comm (peer, device) in the WARN when the socket cannot join. */
ferry_ib_oob_watch_t ferry_ib_oob_watch_add(int fd, const char *who);
/* Before fd is closed (a forked child may share the file: epoll would keep it). */
void ferry_ib_oob_watch_del(ferry_ib_oob_watch_t w, int fd);
/*
 * 1 when the socket should be read now: marked readable (the mark is
 * taken), or not watched. now_ns paces the epoll_wait (coarse clock).
 */
int ferry_ib_oob_watch_take(ferry_ib_oob_watch_t w, uint64_t now_ns);
/* After reading without EOF: watch again. 0, or the errno (then del, and read every time). */
int ferry_ib_oob_watch_rearm(ferry_ib_oob_watch_t w, int fd);
/* epoll_wait calls so far (tests, the dump). */
uint64_t ferry_ib_oob_watch_polls(void);

#endif
