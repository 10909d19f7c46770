/*
 * fakeibv's emulated librdmacm.so.1: the object model shared by
 * fakeibv_cm.c (API: channels, ids, events), fakeibv_cm_addr.c (IP
 * addresses to emulated ports, rdma_getaddrinfo) and fakeibv_cm_wire.c
 * (the CM thread and its messages). It is a separate library linked
 * against the emulated libibverbs.so.1 and uses only public verbs.
 *
 * The connection manager's MADs (REQ, REP, RTU, REJ, DREQ) travel over a
 * TCP connection from the active side to the passive side's rdma_cm port,
 * on the resolved IP address: that is what a fabric's CM is to us. One
 * thread per process ("fakeibv-cm") watches those sockets while any id
 * has one and turns what arrives into events, in the order real rdma_cm
 * delivers them.
 *
 * Locking: fcm_lock protects every id, channel and event; API calls and
 * the CM thread take it. Messages are small and sent whole with blocking
 * sends under the lock.
 */
#ifndef FAKEIBV_CM_INTERNAL_H
#define FAKEIBV_CM_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include "ferry/rdma_cm_abi.h"
#include <stdint.h>

#define FCM_EXPORT __attribute__((visibility("default")))

#define FCM_MAGIC        0x4d43464bU /* "KFCM" */
#define FCM_REQ_PD_MAX   56          /* RC REQ private data (92 bytes less rdma_cm's header). */
#define FCM_REP_PD_MAX   196
#define FCM_REJ_PD_MAX   148
#define FCM_MAX_DEVS     8
#define FCM_MAX_PORTS    4
#define FCM_REJ_NO_LISTENER 8        /* IB_CM_REJ_INVALID_SERVICE_ID */
#define FCM_REJ_CONSUMER    28       /* IB_CM_REJ_CONSUMER_DEFINED */

/* Message types on the CM connection. */
enum fcm_msg_type { FCM_MSG_REQ = 1, FCM_MSG_REP, FCM_MSG_RTU, FCM_MSG_REJ, FCM_MSG_DREQ,
                    FCM_MSG_DREP };

/* One CM message; every message is sent whole. */
struct fcm_msg {
    uint32_t magic;          /* FCM_MAGIC. */
    uint8_t  type;           /* enum fcm_msg_type. */
    uint8_t  pd_len;         /* Bytes of pd used. */
    uint8_t  link_layer;     /* Sender's port: IBV_LINK_LAYER_*. */
    uint8_t  mtu;            /* Sender's port active_mtu. */
    uint32_t qpn;            /* Sender's QP number (REQ, REP). */
    uint32_t psn;            /* Sender's starting PSN. */
    uint16_t lid;            /* Sender's port LID. */
    uint8_t  resp_res;       /* Sender's responder_resources. */
    uint8_t  init_depth;     /* Sender's initiator_depth. */
    uint8_t  retry_count;    /* REQ: the active side's transport retries. */
    uint8_t  rnr_retry;      /* REQ, REP: RNR retries. */
    uint8_t  srq;
    uint8_t  pad;
    int32_t  status;         /* REJ: the reason. */
    uint8_t  gid[16];        /* Sender's source GID. */
    struct sockaddr_in6 src; /* REQ: the active id's source address (IPv4 in a sockaddr_in). */
    uint8_t  pd[FCM_REP_PD_MAX];
};

/* An emulated port as rdma_cm sees it. */
struct fcm_port {
    uint16_t lid;
    uint8_t  link_layer;
    enum ibv_mtu mtu;
    int      gid_index;      /* The GID rdma_cm uses: RoCE v2 IPv4-mapped, or 0 on IB. */
    union ibv_gid gid;
    uint8_t  ipv4[4];        /* The port's own address (its netdev's, else 127.0.<lid>). */
    unsigned ifindex;        /* Its netdev, lo when it has none. */
};

struct fcm_dev {
    struct ibv_context *ctx; /* The one context librdmacm opens per device. */
    struct ibv_pd *pd;       /* Default PD for rdma_create_qp(id, NULL, ...). */
    int nports;
    struct fcm_port ports[FCM_MAX_PORTS];
};

struct fcm_event {
    struct rdma_cm_event ev;         /* Must be first: consumers hold the pointer. */
    uint8_t pd[FCM_REP_PD_MAX];
    struct fcm_event *next;
};

struct fcm_channel {
    struct rdma_event_channel ch;    /* Must be first. ch.fd is readable while head != NULL. */
    int wfd;                         /* Write end of the pipe behind ch.fd. */
    struct fcm_event *head, *tail;
};

enum fcm_state {
    FCM_IDLE,           /* Created or bound. */
    FCM_ADDR_RESOLVED,  /* resolve_addr done: device, port and source known. */
    FCM_ROUTE_RESOLVED, /* resolve_route done. */
    FCM_LISTEN,         /* fd is a TCP listener. */
    FCM_CONNECTING,     /* Active: TCP connect in progress; the REQ goes once it is up. */
    FCM_REQ_SENT,       /* Active: waiting for REP or REJ. */
    FCM_WAIT_REQ,       /* Passive, internal: accepted TCP, no REQ yet; not the user's. */
    FCM_REQ_RCVD,       /* Passive: CONNECT_REQUEST reported; accept or reject comes. */
    FCM_REP_SENT,       /* Passive: accepted, waiting for the RTU. */
    FCM_ESTABLISHED,
    FCM_DISCONNECTING,  /* rdma_disconnect sent the DREQ: DISCONNECTED comes with the DREP. */
    FCM_DREQ_RCVD,      /* The peer's DREQ reported as DISCONNECTED; our disconnect sends the DREP. */
    FCM_DONE            /* Disconnected, rejected or failed: no fd. */
};

struct fcm_id {
    struct rdma_cm_id id;    /* Must be first. */
    enum fcm_state state;
    int fd;                  /* Listener or CM connection; -1 none. */
    int dev, port;           /* Index into fcm_devs and port number; -1 before resolve. */
    int backlog;
    int tos;                 /* RDMA_OPTION_ID_TOS. */
    int timeout_ms;          /* FAKEIBV_CM_TIMEOUT_MS: how long the CM waits for an answer. */
    uint64_t deadline_ms;    /* CONNECTING, REQ_SENT, REP_SENT: when it gives up. */
    uint64_t refused_until;  /* CONNECTING: a refused TCP connect is retried until then... */
    uint64_t retry_at_ms;    /* ...next at this time (fd is -1 meanwhile). */
    uint32_t psn;
    struct rdma_conn_param param; /* Our connect/accept parameters (private data dropped). */
    struct fcm_msg out;      /* The REQ to send once TCP is up. */
    struct fcm_msg remote;   /* Peer's REQ (passive) or REP (active). */
    uint8_t rbuf[sizeof(struct fcm_msg)]; /* A message coming in, rlen bytes so far. */
    size_t rlen;
    int peer_gone;           /* FCM_REQ_RCVD: the active side closed before we answered. */
    struct fcm_id *listener; /* FCM_WAIT_REQ: the listener it came to. */
    struct fcm_id *next;     /* All ids of the process. */
};

extern pthread_mutex_t fcm_lock;
extern struct fcm_id *fcm_ids;
extern struct fcm_dev fcm_devs[FCM_MAX_DEVS];
extern int fcm_ndevs;

void fcm_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t fcm_now_ms(void);
long fcm_timeout_ms(void);
long fcm_nolisten_retry_ms(void);

/* fakeibv_cm.c */
int fcm_init(void);  /* Devices opened once; 0 or an errno (ENODEV: no rdma_cm device). */
void fcm_event_push(struct fcm_id *id, enum rdma_cm_event_type type, int status,
                    const struct fcm_msg *msg, struct fcm_id *listen_id);
struct fcm_id *fcm_id_new(struct fcm_channel *ch, void *context, enum rdma_port_space ps);
void fcm_id_close_fd(struct fcm_id *id);

/* fakeibv_cm_addr.c */
/* The port that owns local address sa; 0 or ENODEV. */
int fcm_port_for_addr(const struct sockaddr *sa, int *dev_p, int *port_p);
/* The local address the kernel would use to reach dst (port 0). */
int fcm_route_src(const struct sockaddr *dst, struct sockaddr_storage *src);
socklen_t fcm_sa_len(const struct sockaddr *sa);
void fcm_id_set_port(struct fcm_id *id, int dev, int port);

/* fakeibv_cm_wire.c */
void fcm_thread_kick(void);  /* Start the CM thread or wake it: an fd was added. */
int fcm_msg_send(struct fcm_id *id, struct fcm_msg *msg);
void fcm_msg_fill(struct fcm_id *id, struct fcm_msg *msg, int type, const void *pd,
                  int pd_len);
/* Bring id->qp to RTR and RTS against the peer's message. 0 or an errno. */
int fcm_qp_connect(struct fcm_id *id, const struct fcm_msg *peer, int initiator);
void fcm_qp_to_err(struct fcm_id *id);

#endif
