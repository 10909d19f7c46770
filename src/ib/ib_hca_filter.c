#include <stdlib.h>
#include <string.h>

#include "ib/ib_hca_filter.h"

/*
 * NCCL's parseStringList: characters accumulate into a name until ':' (the
 * port follows, read with atoi, and the rest of the entry up to ',' is
 * skipped) or ',' or the end; empty names are dropped.
 */
int ferry_ib_hca_filter_parse(const char *text, ferry_ib_hca_filter_t *filter)
{
    const char *p = text;
    size_t len = 0;
    char c;

    memset(filter, 0, sizeof(*filter));
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
    do {
        c = *p;
        if (c == ':' || c == ',' || c == '\0') {
            if (len > 0) {
                filter->entries[filter->n].name[len] = '\0';
                filter->entries[filter->n].port = c == ':' ? atoi(p + 1) : -1;
                filter->n++;
                len = 0;
            }
            if (c == ':')
                while (p[1] != ',' && p[1] != '\0')
                    p++;
        } else {
            if (len + 1 >= FERRY_IB_HCA_NAME_MAX)
                return -1;
            filter->entries[filter->n].name[len++] = c;
        }
        p++;
    } while (c != '\0' && filter->n < FERRY_IB_HCA_FILTER_MAX);
    return 0;
}

int ferry_ib_hca_filter_match(const ferry_ib_hca_filter_t *filter, const char *name, int port)
{
    int i, hit = filter->n == 0;

    for (i = 0; i < filter->n && !hit; i++) {
        const char *ref = filter->entries[i].name;
        /* Exact compares the terminating NUL too; a prefix only the reference's length. */
        size_t cmp = filter->exact ? strlen(name) + 1 : strlen(ref);

        hit = strncmp(name, ref, cmp) == 0 &&
              (filter->entries[i].port == -1 || filter->entries[i].port == port);
    }
    return hit ^ filter->exclude;
}
