/*
 * integ_hostile's pieces: the strangers this test opens against a ferry
 * listener (hostile_peer.c), the environment every case shares, and the
 * cases, one file per family (hostile_strangers.c, hostile_forged.c,
 * hostile_close.c, hostile_stage.c, hostile_cts.c). What each case expects is in
 * integ_hostile.c.
 */
#ifndef FERRY_TESTS_INTEGRATION_HOSTILE_H
#define FERRY_TESTS_INTEGRATION_HOSTILE_H

#include <stdint.h>

#include "harness.h"
#include "socket/sock_wire.h"

#define HOSTILE_MAX 512 /* Strangers one case may open. */

typedef enum hostile_kind {
    HOSTILE_RANDOM,       /* 64 random bytes. */
    HOSTILE_BAD_MAGIC,    /* Hello, magic off by one bit. */
    HOSTILE_BAD_VERSION,  /* Hello, version 0x7777. */
    HOSTILE_BAD_TOKEN,    /* Hello, right magic, wrong token. */
    HOSTILE_BAD_LANE,     /* Hello, right token, lane >= nlanes. */
    HOSTILE_BAD_NLANES,   /* Hello, right token, nlanes 65535. */
    HOSTILE_CLOSE,        /* Connect, then close at once. */
    HOSTILE_RESET,        /* Connect, then RST (SO_LINGER 0). */
    HOSTILE_SILENT,       /* Connect, send nothing. */
    HOSTILE_HALF_HELLO,   /* First 16 bytes of a valid hello, then nothing. */
    HOSTILE_ORPHAN,       /* A valid hello for lane 0 of a connection whose other lanes never come. */
    HOSTILE_HUGE_HELLO,   /* Hello, right token, hdr_size 65535 (a length to trust or not). */
    HOSTILE_TRICKLE,      /* A valid hello, one byte a second (hostile_poll sends them). */
    HOSTILE_KIND_COUNT
} hostile_kind_t;

extern const char *const hostile_names[HOSTILE_KIND_COUNT];

typedef struct hostile {
    hostile_kind_t kind;
    int            fd;       /* -1 once closed by us. */
    int            dropped;  /* The plugin closed its end (EOF or reset seen). */
    double         t_open;
    double         t_byte;   /* TRICKLE: when the last byte went. */
    size_t         sent;     /* TRICKLE: hello bytes sent so far. */
    unsigned char  hello[32];/* TRICKLE: what it sends. */
    char           src[80];  /* Our end, "ip:port": the plugin's log line should name it. */
} hostile_t;

extern hostile_t hostiles[HOSTILE_MAX]; /* Every stranger opened so far. */
extern int nhostiles;

/* What every case shares: the plugin, a listening context and a connecting one. */
typedef struct hostile_env {
    fit_plugin_t               plugin;
    void                      *ctx_l, *ctx_c;
    void                      *listen_comm; /* NULL once a case closed it. */
    char                       handle[NCCL_NET_HANDLE_MAXSIZE];
    const ferry_sock_handle_t *h;
    double                     hello_timeout; /* Seconds (NCCL_FERRY_HELLO_TIMEOUT_MS). */
} hostile_env_t;

/* Kinds the plugin must close on its own (a stall after the hello timeout). */
int hostile_expect_drop(hostile_kind_t k);
/* Kinds that send too little: dropped only after the hello timeout. */
int hostile_is_stall(hostile_kind_t k);
/* A blocking TCP connect to the handle's listen address; the fd. */
int hostile_connect(const ferry_sock_handle_t *h);
/* x->src = our end's "ip:port". */
void hostile_name_src(hostile_t *x);
/* Fails unless every stranger's address:port is in a log line >= from. */
void hostile_expect_logged(int from);
/* A valid hello for lane 0 with the handle's magic and token. */
void hostile_hello(const ferry_sock_handle_t *h, ferry_sock_hello_t *hello);
/* Open a stranger of kind; an orphan says hello as lane `lane` of conn_id (0: its own). */
hostile_t *hostile_open_lane(const ferry_sock_handle_t *h, hostile_kind_t kind, int lane,
                             uint64_t conn_id);
void hostile_open(const ferry_sock_handle_t *h, hostile_kind_t kind);
/* Notice strangers the plugin closed, send trickles their next byte; returns how many are open. */
int hostile_poll(void);
/* NCCL_FERRY_BACKEND=ib: a token holder is a real rank there (its failure fails accept). */
int hostile_backend_ib(void);
void hostile_close_all(void);
/* accept() must return NULL while only strangers exist; until_dropped: 1 bad hellos, 2 stalls too. */
void hostile_pump_accept(const fit_plugin_t *p, void *listen_comm, double seconds,
                         int until_dropped);
/* Fails unless every stranger that must be dropped was (stalls only if stalls_too). */
void hostile_expect_dropped(int stalls_too);
/* The real peer: connect() and accept() in turns until both comms exist; returns the rounds. */
int hostile_real_connect(hostile_env_t *e, void **send_p, void **recv_p);
/* The size sweep up to max_size over the real connection, checked byte for byte. */
void hostile_real_xfer(hostile_env_t *e, void *send_comm, void *recv_comm,
                       size_t max_size, uint64_t seed, const char *what);
/* All of buf on a stranger's non-blocking socket, bounded. */
void hostile_send_all(int fd, const void *buf, size_t len, const char *what);
/* A whole connection of valid hellos from us; the recv comm accept() made of it. */
void *hostile_forge_connection(hostile_env_t *e, uint64_t conn_id, hostile_t **lanes);
/* accept() `rounds` times; none may return a comm. */
void hostile_accept_rounds(hostile_env_t *e, int rounds);

void hostile_case_strangers(hostile_env_t *e);
void hostile_case_flood(hostile_env_t *e);
void hostile_case_burst(hostile_env_t *e);
void hostile_case_hundreds(hostile_env_t *e);
void hostile_case_huge(hostile_env_t *e);
void hostile_case_ib_meta(hostile_env_t *e);
void hostile_case_ib_cts(hostile_env_t *e);
void hostile_case_wrap(hostile_env_t *e);
void hostile_case_half_groups(hostile_env_t *e);
void hostile_case_double_close(hostile_env_t *e);
void hostile_case_forged_stage(hostile_env_t *e);
void hostile_case_junk(hostile_env_t *e);
void hostile_case_hints(hostile_env_t *e);

#endif
