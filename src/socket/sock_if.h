/*
 * Choosing interfaces the way NCCL does: NCCL_SOCKET_IFNAME prefix lists
 * ("eth,ib", "^docker,lo", "=eth0", "^=eth1"), NCCL_SOCKET_FAMILY, and with
 * no list NCCL's default order: ib*, then the NCCL_COMM_ID subnet, then
 * everything but docker, lo and virbr interfaces, then docker, lo, virbr.
 */
#ifndef FERRY_SOCK_IF_H
#define FERRY_SOCK_IF_H

#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define FERRY_SOCK_IF_MAX      16 /* Interfaces kept, like NCCL's MAX_IFS. */
#define FERRY_SOCK_FILTER_MAX  32 /* Names in one filter list. */

typedef struct ferry_sock_filter {
    int  exclude;                      /* Leading '^': names listed are excluded. */
    int  exact;                        /* '=' : names match exactly, not as prefixes. */
    int  n;
    char names[FERRY_SOCK_FILTER_MAX][IF_NAMESIZE + 8];
} ferry_sock_filter_t;

typedef struct ferry_sock_if {
    char                    name[IF_NAMESIZE];
    struct sockaddr_storage addr;      /* First address of the wanted family. */
    socklen_t               addr_len;
} ferry_sock_if_t;

/* Parse "[^][=]name[:port][,name...]"; returns 0, or -1 on an unusable list. */
int ferry_sock_filter_parse(const char *text, ferry_sock_filter_t *filter);
/* 1 if ifname passes the filter. */
int ferry_sock_filter_match(const ferry_sock_filter_t *filter, const char *ifname);

/*
 * Fill up to max interfaces; ifname_list "" means NCCL's default order,
 * family AF_UNSPEC means both. Returns the count (0: none usable).
 */
int ferry_sock_if_find(const char *ifname_list, int family, ferry_sock_if_t *ifs, int max);

/* "1.2.3.4:5678" or "[fe80::1%eth0]:5678". */
void ferry_sock_addr_str(const struct sockaddr *sa, char *buf, size_t len);

#endif
