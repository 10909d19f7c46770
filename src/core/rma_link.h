/*
 * An RMA group's TCP links, set up the same way by both backends (the
 * socket backend's carry the data; the ib backend's carry its out-of-band
 * messages), as netif.c is shared: listen() opens a listener and publishes
 * its address and a token in NCCL's handle; connect() dials every higher
 * rank (the listener's backlog takes it without the peer's help) and takes
 * one link from every lower rank, so no order of calls across ranks
 * deadlocks; between dials it takes the links already waiting, so that in
 * a group of thousands no backlog overflows. A dialer's first message, its hello, quotes the token, its
 * rank and the group's size; anything else that knocks is closed and
 * logged, and taking goes on. Each backend keeps its own message format:
 * it sends its hello itself and reads one for ferry_rma_link_take.
 */
#ifndef FERRY_CORE_RMA_LINK_H
#define FERRY_CORE_RMA_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/status.h"

/* What a backend's listen() puts in NCCL's handle (FERRY_HANDLE_SIZE bytes at most). */
typedef struct ferry_rma_link_handle {
    uint32_t magic;     /* The backend's. */
    uint16_t family;
    uint16_t port;      /* Network order. */
    uint8_t  addr[16];
    uint32_t scope_id;
    uint32_t spare;
    uint64_t token;     /* A dialer must quote it in its hello. */
} ferry_rma_link_handle_t;

/* What a hello says (each backend's own message carries it). */
typedef struct ferry_rma_link_hello {
    uint32_t rank;   /* The dialer's. */
    uint64_t nranks; /* Its group's size. */
    uint64_t token;  /* The listener's token, as its handle gave it. */
} ferry_rma_link_hello_t;

/*
 * A non-blocking listener on addr's interface, any port; addr then holds
 * the bound address. -1 with errno set and *step_p the call that failed
 * ("socket()" or "bind/listen").
 */
int ferry_rma_link_listen(struct sockaddr_storage *addr, socklen_t *addr_len,
                          const char **step_p);
/* Fill NCCL's handle (zeroed first) with magic, token and the listener's address. */
void ferry_rma_link_publish(void *handle, uint32_t magic, uint64_t token,
                            const struct sockaddr_storage *addr);

#define FERRY_RMA_LINK_ADDR 64 /* Bytes of a peer's address as messages name it. */

/* Where a backend keeps rank r's link: its fd (-1 until linked) and address. */
typedef struct ferry_rma_link_peer {
    int  *fd;
    char *addr;
} ferry_rma_link_peer_t;

/* A backend's side of its links: names, limits, and its hello's format. */
typedef struct ferry_rma_link_ops {
    const char *backend;        /* "socket", "ib": for messages. */
    uint32_t    magic;          /* Its handles'. */
    int         connect_ms;     /* All of connect's dialing and taking. */
    int         hello_ms;       /* One connect; one hello. */
    void      (*addr_str)(const struct sockaddr *sa, char *buf, size_t len);
    /* On each dialed socket before its connect (TCP options); nonzero, errno set: give up. */
    int       (*tune)(int fd, const char *peer);
    /* Our hello h on a dialed link, within ms. */
    ferry_status_t (*send_hello)(int fd, const ferry_rma_link_hello_t *h, int ms);
    /* A dialer's hello within ms: NULL and *h filled, or why not. */
    const char *(*read_hello)(int fd, int ms, ferry_rma_link_hello_t *h);
    /* A dialer's link passed its hello: set it up (TCP options). */
    ferry_status_t (*adopt)(int fd, const char *peer);
    ferry_rma_link_peer_t (*peer)(void *group, int rank);
} ferry_rma_link_ops_t;

/* One connect of a group's links. */
typedef struct ferry_rma_link {
    const ferry_rma_link_ops_t *ops;
    void       *group;          /* The backend's, for ops->peer. */
    int         rank;
    int         nranks;
    int         listen_fd;      /* Our listener... */
    const char *listen_addr;    /* ...its address, for messages... */
    uint64_t    token;          /* ...and the token it published. */
    int         retry_cnt;      /* Connects retried while a listener may not be up yet... */
    int         retry_sleep_ms; /* ...sleeping this many ms times the attempt between. */
} ferry_rma_link_t;

/* handles, nranks (1..max_ranks) and rank (below it) make a group position; else a WARN. */
ferry_status_t ferry_rma_link_position(void *const *handles, int nranks, int rank, int max_ranks);

/*
 * Collective: dial every higher rank with its handle (handles[r]: what its
 * listen() published) and say hello, then take a link from every lower
 * rank. A WARN names the rank and what to check when one fails.
 */
ferry_status_t ferry_rma_link_connect(const ferry_rma_link_t *link, void *const *handles);

#endif
