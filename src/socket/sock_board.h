/*
 * The socket backend's use of the job's mask board (core/mask_board.h): the
 * CPU budget chosen at init from an estimate of the local ranks that share
 * this rank's CPUs (core/cpu_share.h) is checked against their real masks
 * once they have all published them.
 *
 * init publishes this rank's mask; the first listen or connect of the
 * process (NCCL connects only after every rank has initialised, so the
 * siblings have published by then) reads the board once. With every local
 * rank's slot there, the ranks whose masks overlap this one's are counted
 * and the budget derived again from that count; streams, helper threads and
 * the pool size follow it only while no socket comm or listen exists and
 * the helper pool has not started (the first listen comes before both, so
 * that is the usual case); otherwise the init numbers stay. With slots
 * missing the estimate stays. Every step that fails is an INFO, never an
 * error: the estimate is a fine answer.
 */
#ifndef FERRY_SOCKET_SOCK_BOARD_H
#define FERRY_SOCKET_SOCK_BOARD_H

#include "socket/sock_config.h"

/* At init (under api.c's lock): raw is the config as read, before anything was derived. */
void ferry_sock_board_publish(const ferry_sock_config_t *raw);
/* At every listen and connect: the first call of each init reads the board; later ones return. */
void ferry_sock_board_check(void);
/* At finalize: leave the board (the last rank to leave removes the file). */
void ferry_sock_board_leave(void);

#endif
