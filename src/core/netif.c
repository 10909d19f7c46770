#include <errno.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/netif.h"

int ferry_netif_filter_parse(const char *text, ferry_netif_filter_t *filter)
{
    const char *p = text;

    memset(filter, 0, sizeof(*filter));
    if (text == NULL)
        return -1;
    if (*p == '^') {
        filter->exclude = 1;
        p++;
    }
    if (*p == '=') {
        filter->exact = 1;
        p++;
    }
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t name_len = colon != NULL ? (size_t)(colon - p) : len;

        /* ":port" is accepted for NCCL compatibility; it means nothing for IP interfaces. */
        if (name_len >= sizeof(filter->names[0]) || filter->n == FERRY_NETIF_FILTER_MAX)
            return -1;
        if (name_len > 0) {
            memcpy(filter->names[filter->n], p, name_len);
            filter->names[filter->n][name_len] = '\0';
            filter->n++;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return filter->n > 0 ? 0 : -1;
}

int ferry_netif_filter_match(const ferry_netif_filter_t *filter, const char *ifname)
{
    int i, hit = 0;

    for (i = 0; i < filter->n && !hit; i++) {
        if (filter->exact)
            hit = strcmp(ifname, filter->names[i]) == 0;
        else
            hit = strncmp(ifname, filter->names[i], strlen(filter->names[i])) == 0;
    }
    return filter->exclude ? !hit : hit;
}

void ferry_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        char ifname[IF_NAMESIZE] = "";

        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        if (in6->sin6_scope_id != 0 && if_indextoname(in6->sin6_scope_id, ifname) != NULL)
            snprintf(buf, len, "[%s%%%s]:%u", host, ifname, ntohs(in6->sin6_port));
        else
            snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "<family %d>", sa->sa_family);
    }
}

/* NCCL_COMM_ID is "host:port" or "[v6]:port"; fill *addr with its host part. */
static int ferry_netif_comm_id_addr(struct sockaddr_storage *addr)
{
    const char *id = getenv("NCCL_COMM_ID");
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon;
    size_t len;

    if (id == NULL || *id == '\0')
        return -1;
    if (*id == '[') {
        colon = strchr(id, ']');
        if (colon == NULL)
            return -1;
        len = (size_t)(colon - id - 1);
        id++;
    } else {
        colon = strrchr(id, ':');
        len = colon != NULL ? (size_t)(colon - id) : strlen(id);
    }
    if (len >= sizeof(host))
        return -1;
    memcpy(host, id, len);
    host[len] = '\0';
    memset(addr, 0, sizeof(*addr));
    if (inet_pton(AF_INET, host, &((struct sockaddr_in *)addr)->sin_addr) == 1) {
        addr->ss_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)addr)->sin6_addr) == 1) {
        addr->ss_family = AF_INET6;
        return 0;
    }
    return -1;
}

/* 1 if a and b share the subnet given by mask (same family). */
static int ferry_netif_same_subnet(const struct sockaddr *a, const struct sockaddr *b,
                                   const struct sockaddr *mask)
{
    const unsigned char *pa, *pb, *pm;
    size_t i, n;

    if (mask == NULL || a->sa_family != b->sa_family)
        return 0;
    if (a->sa_family == AF_INET) {
        pa = (const unsigned char *)&((const struct sockaddr_in *)a)->sin_addr;
        pb = (const unsigned char *)&((const struct sockaddr_in *)b)->sin_addr;
        pm = (const unsigned char *)&((const struct sockaddr_in *)mask)->sin_addr;
        n = 4;
    } else {
        pa = (const unsigned char *)&((const struct sockaddr_in6 *)a)->sin6_addr;
        pb = (const unsigned char *)&((const struct sockaddr_in6 *)b)->sin6_addr;
        pm = (const unsigned char *)&((const struct sockaddr_in6 *)mask)->sin6_addr;
        n = 16;
    }
    for (i = 0; i < n; i++)
        if ((pa[i] & pm[i]) != (pb[i] & pm[i]))
            return 0;
    return 1;
}

typedef struct ferry_netif_query {
    const ferry_netif_filter_t    *filter;  /* Names wanted, or NULL for "any". */
    const struct sockaddr_storage *subnet;  /* Same subnet as this address, or NULL. */
    int                            family;
} ferry_netif_query_t;

static int ferry_netif_usable(const struct ifaddrs *ifa, const ferry_netif_query_t *q)
{
    int fam;

    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP) || !(ifa->ifa_flags & IFF_RUNNING))
        return 0;
    fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6)
        return 0;
    if (q->family != AF_UNSPEC && fam != q->family)
        return 0;
    /* IPv6 loopback is skipped, as NCCL does. */
    if (fam == AF_INET6 &&
        IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
        return 0;
    if (q->filter != NULL && !ferry_netif_filter_match(q->filter, ifa->ifa_name))
        return 0;
    if (q->subnet != NULL &&
        !ferry_netif_same_subnet(ifa->ifa_addr, (const struct sockaddr *)q->subnet,
                                 ifa->ifa_netmask))
        return 0;
    return 1;
}

static int ferry_netif_collect(const struct ifaddrs *list, const ferry_netif_query_t *q,
                               ferry_netif_t *ifs, int max)
{
    const struct ifaddrs *ifa;
    int n = 0, i, dup;

    for (ifa = list; ifa != NULL && n < max; ifa = ifa->ifa_next) {
        if (!ferry_netif_usable(ifa, q))
            continue;
        /* Only the first address of each interface counts. */
        for (i = 0, dup = 0; i < n && !dup; i++)
            dup = strcmp(ifs[i].name, ifa->ifa_name) == 0;
        if (dup)
            continue;
        snprintf(ifs[n].name, sizeof(ifs[n].name), "%s", ifa->ifa_name);
        ifs[n].addr_len = ifa->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                               : sizeof(struct sockaddr_in6);
        memset(&ifs[n].addr, 0, sizeof(ifs[n].addr));
        memcpy(&ifs[n].addr, ifa->ifa_addr, ifs[n].addr_len);
        n++;
    }
    return n;
}

/* Find with one filter expression, e.g. "^docker,lo,virbr". */
static int ferry_netif_find_by(const struct ifaddrs *list, const char *expr, int family,
                               ferry_netif_t *ifs, int max)
{
    ferry_netif_filter_t filter;
    ferry_netif_query_t q = {&filter, NULL, family};

    if (ferry_netif_filter_parse(expr, &filter) != 0)
        return 0;
    return ferry_netif_collect(list, &q, ifs, max);
}

int ferry_netif_find(const char *ifname_list, int family, ferry_netif_t *ifs, int max)
{
    static const char *const fallback_order[] = {"^docker,lo,virbr", "docker", "lo", "virbr"};
    struct sockaddr_storage comm_id;
    struct ifaddrs *list;
    size_t i;
    int n = 0;

    if (getifaddrs(&list) != 0)
        return 0;
    if (ifname_list != NULL && ifname_list[0] != '\0') {
        n = ferry_netif_find_by(list, ifname_list, family, ifs, max);
        goto out;
    }
    n = ferry_netif_find_by(list, "ib", family, ifs, max);
    if (n == 0 && ferry_netif_comm_id_addr(&comm_id) == 0) {
        ferry_netif_query_t q = {NULL, &comm_id, family};

        n = ferry_netif_collect(list, &q, ifs, 1);
    }
    for (i = 0; n == 0 && i < sizeof(fallback_order) / sizeof(fallback_order[0]); i++)
        n = ferry_netif_find_by(list, fallback_order[i], family, ifs, max);
out:
    freeifaddrs(list);
    return n;
}

void ferry_sockaddr_to_wire(const struct sockaddr_storage *sa, uint16_t *family,
                            uint16_t *port, uint8_t addr[16], uint32_t *scope_id)
{
    *family = sa->ss_family;
    memset(addr, 0, 16);
    *scope_id = 0;
    if (sa->ss_family == AF_INET) {
        *port = ((const struct sockaddr_in *)sa)->sin_port;
        memcpy(addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else {
        *port = ((const struct sockaddr_in6 *)sa)->sin6_port;
        memcpy(addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        *scope_id = ((const struct sockaddr_in6 *)sa)->sin6_scope_id;
    }
}

int ferry_sockaddr_from_wire(struct sockaddr_storage *sa, socklen_t *len_p, uint16_t family,
                             uint16_t port, const uint8_t addr[16], uint32_t scope_id)
{
    memset(sa, 0, sizeof(*sa));
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)sa;

        in->sin_family = AF_INET;
        in->sin_port = port;
        memcpy(&in->sin_addr, addr, 4);
        *len_p = sizeof(*in);
        return 0;
    }
    if (family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;

        in6->sin6_family = AF_INET6;
        in6->sin6_port = port;
        in6->sin6_scope_id = scope_id;
        memcpy(&in6->sin6_addr, addr, 16);
        *len_p = sizeof(*in6);
        return 0;
    }
    return -1;
}

void ferry_sockaddr_any_port(struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET)
        ((struct sockaddr_in *)sa)->sin_port = 0;
    else if (sa->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)sa)->sin6_port = 0;
}

int ferry_connect_retryable(int err)
{
    return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH ||
           err == ENETUNREACH || err == ECONNRESET || err == ECONNABORTED || err == EAGAIN;
}
