#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib/ib_hca_filter.h"

#define FERRY_IB_HCA_FIELDS 4    /* name:port:rail:plane. */
#define FERRY_IB_HCA_SHOWN  96   /* Characters of a bad entry quoted in why. */

/* Refuse with code; why names the entry (its first characters) and the fault. */
static int __attribute__((format(printf, 6, 7)))
ferry_ib_hca_bad(char *why, size_t why_len, int code, const char *entry, size_t entry_len,
                 const char *fmt, ...)
{
    va_list ap;
    size_t off;

    if (why == NULL || why_len == 0)
        return code;
    off = (size_t)snprintf(why, why_len, "entry '%.*s%s': ",
                           (int)(entry_len < FERRY_IB_HCA_SHOWN ? entry_len : FERRY_IB_HCA_SHOWN),
                           entry, entry_len > FERRY_IB_HCA_SHOWN ? "..." : "");
    if (off < why_len) {
        va_start(ap, fmt);
        vsnprintf(why + off, why_len - off, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* NCCL reads the port with atoi; the same, without atoi's overflow. Empty: any port. */
static int ferry_ib_hca_port(const char *field, size_t len)
{
    long v;

    if (len == 0)
        return -1;
    v = strtol(field, NULL, 10);
    return v < INT_MIN ? INT_MIN : v > INT_MAX ? INT_MAX : (int)v;
}

/* A rail or plane: digits only, 0..FERRY_IB_HCA_ID_MAX; empty is -1 (unknown). */
static int ferry_ib_hca_id(const char *field, size_t len, int *id_p)
{
    int v = 0;
    size_t i;

    *id_p = -1;
    for (i = 0; i < len; i++) {
        if (field[i] < '0' || field[i] > '9')
            return -1;
        v = v * 10 + (field[i] - '0');
        if (v > FERRY_IB_HCA_ID_MAX)
            return -1;
    }
    if (len > 0)
        *id_p = v;
    return 0;
}

/*
 * NCCL's parseStringList: entries split at ',', empty ones and those with an
 * empty name dropped; fields split at ':'. Every entry is checked, also past
 * the FERRY_IB_HCA_FILTER_MAX that are kept and in an exclusion list (whose
 * rails and planes name nothing, as in NCCL: a typo there is still a typo).
 */
int ferry_ib_hca_filter_parse_why(const char *text, ferry_ib_hca_filter_t *filter, char *why,
                                  size_t why_len)
{
    const char *p = text;

    memset(filter, 0, sizeof(*filter));
    if (why != NULL && why_len > 0)
        why[0] = '\0';
    if (p == NULL)
        return 0;
    if (*p == '^') {
        filter->exclude = 1;
        p++;
    }
    if (*p == '=') {
        filter->exact = 1;
        p++;
    }
    while (*p != '\0') {
        const char *entry = p, *field[FERRY_IB_HCA_FIELDS] = {NULL}, *q = p;
        size_t entry_len = strcspn(p, ","), len[FERRY_IB_HCA_FIELDS];
        int nfield = 0, rail, plane;

        memset(len, 0, sizeof(len));
        for (;;) {
            size_t l = strcspn(q, ":,");

            if (nfield < FERRY_IB_HCA_FIELDS) {
                field[nfield] = q;
                len[nfield] = l;
            }
            nfield++;
            q += l;
            if (*q != ':')
                break;
            q++;
        }
        p = entry + entry_len + (entry[entry_len] == ',');
        if (len[0] == 0)
            continue;
        if (len[0] >= FERRY_IB_HCA_NAME_MAX)
            return ferry_ib_hca_bad(why, why_len, FERRY_IB_HCA_ERR_NAME, entry, entry_len,
                                    "the name has %zu characters, more than the %d NCCL keeps",
                                    len[0], FERRY_IB_HCA_NAME_MAX - 1);
        if (nfield > FERRY_IB_HCA_FIELDS)
            return ferry_ib_hca_bad(why, why_len, FERRY_IB_HCA_ERR_FIELDS, entry, entry_len,
                                    "%d fields; an entry is name[:port[:rail[:plane]]]", nfield);
        if (ferry_ib_hca_id(field[2], nfield > 2 ? len[2] : 0, &rail) != 0)
            return ferry_ib_hca_bad(why, why_len, FERRY_IB_HCA_ERR_RAIL, entry, entry_len,
                                    "rail '%.*s' is not a number 0..%d (leave it empty for none)",
                                    (int)(len[2] < 32 ? len[2] : 32), field[2],
                                    FERRY_IB_HCA_ID_MAX);
        if (ferry_ib_hca_id(field[3], nfield > 3 ? len[3] : 0, &plane) != 0)
            return ferry_ib_hca_bad(why, why_len, FERRY_IB_HCA_ERR_PLANE, entry, entry_len,
                                    "plane '%.*s' is not a number 0..%d (leave it empty for "
                                    "none)", (int)(len[3] < 32 ? len[3] : 32), field[3],
                                    FERRY_IB_HCA_ID_MAX);
        if (filter->n == FERRY_IB_HCA_FILTER_MAX)
            continue;
        memcpy(filter->entries[filter->n].name, entry, len[0]);
        filter->entries[filter->n].name[len[0]] = '\0';
        filter->entries[filter->n].port = nfield > 1 ? ferry_ib_hca_port(field[1], len[1]) : -1;
        filter->entries[filter->n].rail = rail;
        filter->entries[filter->n].plane = plane;
        filter->n++;
    }
    return 0;
}

int ferry_ib_hca_filter_parse(const char *text, ferry_ib_hca_filter_t *filter)
{
    return ferry_ib_hca_filter_parse_why(text, filter, NULL, 0);
}

/* The first entry naming port `port` of `name`, or -1. */
static int ferry_ib_hca_filter_find(const ferry_ib_hca_filter_t *filter, const char *name,
                                    int port)
{
    int i;

    for (i = 0; i < filter->n; i++) {
        const char *ref = filter->entries[i].name;
        /* Exact compares the terminating NUL too; a prefix only the reference's length. */
        size_t cmp = filter->exact ? strlen(name) + 1 : strlen(ref);

        if (strncmp(name, ref, cmp) == 0 &&
            (filter->entries[i].port == -1 || filter->entries[i].port == port))
            return i;
    }
    return -1;
}

int ferry_ib_hca_filter_match(const ferry_ib_hca_filter_t *filter, const char *name, int port)
{
    int hit = filter->n == 0 || ferry_ib_hca_filter_find(filter, name, port) >= 0;

    return hit ^ filter->exclude;
}

void ferry_ib_hca_filter_ids(const ferry_ib_hca_filter_t *filter, const char *name, int port,
                             int *rail_p, int *plane_p)
{
    int i = filter->exclude ? -1 : ferry_ib_hca_filter_find(filter, name, port);

    *rail_p = i >= 0 ? filter->entries[i].rail : -1;
    *plane_p = i >= 0 ? filter->entries[i].plane : -1;
}
