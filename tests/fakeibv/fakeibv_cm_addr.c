/*
 * Addresses: which emulated port an IP address belongs to, the source
 * address a destination is reached from, and rdma_getaddrinfo.
 *
 * A port's own address is its RoCE GID's IPv4 (the FAKEIBV_NETDEV
 * interface's address, else the loopback address 127.0.<lid> that fakeibv
 * already puts in its GIDs) and, on InfiniBand, 127.0.<lid> as well. An
 * address that is no port's own maps by interface, as real rdma_cm maps a
 * netdev to its RDMA device: the first port whose netdev carries it, and
 * for loopback addresses the first port without a netdev.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fakeibv_cm_internal.h"

socklen_t fcm_sa_len(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int fcm_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
    return 0;
}

/* The interface index that holds address sa in this namespace, 0 if none. */
static unsigned fcm_ifindex_of(const struct sockaddr *sa)
{
    struct ifaddrs *ifa, *it;
    unsigned idx = 0;

    if (getifaddrs(&ifa) != 0)
        return 0;
    for (it = ifa; it != NULL && idx == 0; it = it->ifa_next) {
        if (it->ifa_addr == NULL || it->ifa_addr->sa_family != sa->sa_family)
            continue;
        if (sa->sa_family == AF_INET &&
            ((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr.s_addr ==
                ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr)
            idx = if_nametoindex(it->ifa_name);
        if (sa->sa_family == AF_INET6 &&
            memcmp(&((struct sockaddr_in6 *)(void *)it->ifa_addr)->sin6_addr,
                   &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16) == 0)
            idx = if_nametoindex(it->ifa_name);
    }
    freeifaddrs(ifa);
    return idx;
}

int fcm_port_for_addr(const struct sockaddr *sa, int *dev_p, int *port_p)
{
    unsigned lo = if_nametoindex("lo"), want;
    int d, p;

    if (sa->sa_family == AF_INET) {
        const uint8_t *ip = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;

        for (d = 0; d < fcm_ndevs; d++)
            for (p = 1; p <= fcm_devs[d].nports; p++)
                if (memcmp(fcm_devs[d].ports[p - 1].ipv4, ip, 4) == 0)
                    goto found;
    }
    want = fcm_is_loopback(sa) ? lo : fcm_ifindex_of(sa);
    if (want == 0)
        return ENODEV;
    for (d = 0; d < fcm_ndevs; d++)
        for (p = 1; p <= fcm_devs[d].nports; p++)
            if (fcm_devs[d].ports[p - 1].ifindex == want)
                goto found;
    return ENODEV;
found:
    *dev_p = d;
    *port_p = p;
    return 0;
}

int fcm_route_src(const struct sockaddr *dst, struct sockaddr_storage *src)
{
    socklen_t len = sizeof(*src);
    int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = 0;

    if (fd < 0)
        return errno;
    /* A UDP connect picks the route and source address without sending anything. */
    if (connect(fd, dst, fcm_sa_len(dst)) != 0 || getsockname(fd, (struct sockaddr *)src, &len) != 0)
        rc = errno;
    close(fd);
    if (rc == 0) {
        if (src->ss_family == AF_INET)
            ((struct sockaddr_in *)src)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)src)->sin6_port = 0;
    }
    return rc;
}

void fcm_id_set_port(struct fcm_id *id, int dev, int port)
{
    const struct fcm_port *p = &fcm_devs[dev].ports[port - 1];

    id->dev = dev;
    id->port = port;
    id->id.verbs = fcm_devs[dev].ctx;
    id->id.port_num = (uint8_t)port;
    id->id.route.addr.addr.ibaddr.sgid = p->gid;
    id->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
}

static struct sockaddr *fcm_sa_dup(const struct sockaddr *sa, socklen_t len)
{
    struct sockaddr *copy = malloc(len);

    if (copy != NULL)
        memcpy(copy, sa, len);
    return copy;
}

FCM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
                                const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
    struct addrinfo h, *ai = NULL;
    struct rdma_addrinfo *r;
    int rc;

    memset(&h, 0, sizeof(h));
    h.ai_socktype = SOCK_STREAM;
    if (hints != NULL) {
        h.ai_family = hints->ai_family;
        if (hints->ai_flags & RAI_PASSIVE)
            h.ai_flags |= AI_PASSIVE;
        if (hints->ai_flags & RAI_NUMERICHOST)
            h.ai_flags |= AI_NUMERICHOST;
    }
    rc = getaddrinfo(node, service, &h, &ai);
    if (rc != 0) {
        errno = rc == EAI_SYSTEM ? errno : ENOENT;
        return rc;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        freeaddrinfo(ai);
        errno = ENOMEM;
        return EAI_MEMORY;
    }
    r->ai_flags = hints != NULL ? hints->ai_flags : 0;
    r->ai_family = ai->ai_family;
    r->ai_qp_type = hints != NULL && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
    r->ai_port_space = hints != NULL && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
    if (r->ai_flags & RAI_PASSIVE) {
        r->ai_src_addr = fcm_sa_dup(ai->ai_addr, ai->ai_addrlen);
        r->ai_src_len = ai->ai_addrlen;
    } else {
        r->ai_dst_addr = fcm_sa_dup(ai->ai_addr, ai->ai_addrlen);
        r->ai_dst_len = ai->ai_addrlen;
        if (hints != NULL && hints->ai_src_addr != NULL) {
            r->ai_src_addr = fcm_sa_dup(hints->ai_src_addr, hints->ai_src_len);
            r->ai_src_len = hints->ai_src_len;
        }
    }
    freeaddrinfo(ai);
    *res = r;
    return 0;
}

FCM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
    while (res != NULL) {
        struct rdma_addrinfo *next = res->ai_next;

        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_route);
        free(res->ai_connect);
        free(res);
        res = next;
    }
}
