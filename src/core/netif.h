/*
 * Choosing interfaces the way NCCL does: NCCL_SOCKET_IFNAME prefix lists
 * ("eth,ib", "^docker,lo", "=eth0", "^=eth1"), NCCL_SOCKET_FAMILY, and with
 * no list NCCL's default order: ib*, then the NCCL_COMM_ID subnet, then
 * everything but docker, lo and virbr interfaces, then docker, lo, virbr.
 * In the core because both backends pick an interface this way: the socket
 * backend for its data connections, the ib backend for its out-of-band one.
 */
#ifndef FERRY_CORE_NETIF_H
#define FERRY_CORE_NETIF_H

#include <net/if.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define FERRY_NETIF_MAX        16 /* Interfaces kept, like NCCL's MAX_IFS. */
#define FERRY_NETIF_FILTER_MAX 32 /* Names in one filter list. */

typedef struct ferry_netif_filter {
    int  exclude;                      /* Leading '^': names listed are excluded. */
    int  exact;                        /* '=' : names match exactly, not as prefixes. */
    int  n;
    char names[FERRY_NETIF_FILTER_MAX][IF_NAMESIZE + 8];
} ferry_netif_filter_t;

typedef struct ferry_netif {
    char                    name[IF_NAMESIZE];
    struct sockaddr_storage addr;      /* First address of the wanted family. */
    socklen_t               addr_len;
} ferry_netif_t;

/* Parse "[^][=]name[:port][,name...]"; returns 0, or -1 on an unusable list. */
int ferry_netif_filter_parse(const char *text, ferry_netif_filter_t *filter);
/* 1 if ifname passes the filter. */
int ferry_netif_filter_match(const ferry_netif_filter_t *filter, const char *ifname);

/*
 * Fill up to max interfaces; ifname_list "" means NCCL's default order,
 * family AF_UNSPEC means both. Returns the count (0: none usable).
 */
int ferry_netif_find(const char *ifname_list, int family, ferry_netif_t *ifs, int max);

/*
 * Socket addresses as a handle carries them (family, port in network order,
 * 16 address bytes, IPv6 scope), shared by both backends' listen handles.
 */
void ferry_sockaddr_to_wire(const struct sockaddr_storage *sa, uint16_t *family,
                            uint16_t *port, uint8_t addr[16], uint32_t *scope_id);
/* 0 and the address in sa / len_p, or -1 for a family other than AF_INET/AF_INET6. */
int ferry_sockaddr_from_wire(struct sockaddr_storage *sa, socklen_t *len_p, uint16_t family,
                             uint16_t port, const uint8_t addr[16], uint32_t scope_id);
/* Port 0: bind() then lets the kernel pick one. */
void ferry_sockaddr_any_port(struct sockaddr_storage *sa);
/* 1 for connect() errors after which the listener may not be up yet, or the network blinked. */
int ferry_connect_retryable(int err);

/* "1.2.3.4:5678" or "[fe80::1%eth0]:5678". */
void ferry_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len);

#endif
