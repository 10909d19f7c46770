#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/config_table.h"
#include "core/log.h"

_Static_assert(sizeof(size_t) == sizeof(long long), "8-byte fields hold size_t or long long");

void ferry_cfg_table_store(const ferry_cfg_var_t *var, void *base, long long value)
{
    char *field = (char *)base + var->offset;
    int narrow = (int)value;

    /* The range check already ran: the value fits the field, whatever its type. */
    if (var->width == sizeof(int))
        memcpy(field, &narrow, sizeof(narrow));
    else
        memcpy(field, &value, sizeof(value));
}

long long ferry_cfg_table_value(const ferry_cfg_var_t *var, const void *base)
{
    const char *field = (const char *)base + var->offset;
    long long value;
    int narrow;

    if (var->width == sizeof(int)) {
        memcpy(&narrow, field, sizeof(narrow));
        return narrow;
    }
    memcpy(&value, field, sizeof(value));
    return value;
}

static ferry_status_t ferry_cfg_bad_why(const ferry_cfg_var_t *var, const char *value,
                                        const char *why)
{
    FERRY_WARN("%s='%s' is not valid: %s%sexpected %s; unset it or fix the value", var->name,
               value, why, why[0] ? "; " : "", var->help);
    return FERRY_ERR_USAGE;
}

static ferry_status_t ferry_cfg_bad(const ferry_cfg_var_t *var, const char *value)
{
    return ferry_cfg_bad_why(var, value, "");
}

static ferry_status_t ferry_cfg_parse_choice(const ferry_cfg_var_t *var, void *base,
                                             const char *value)
{
    const ferry_cfg_choice_t *c;

    for (c = var->choices; c != NULL && c->name != NULL; c++) {
        if (strcasecmp(value, c->name) == 0) {
            ferry_cfg_table_store(var, base, c->value);
            return FERRY_OK;
        }
    }
    return ferry_cfg_bad(var, value);
}

ferry_status_t ferry_cfg_table_parse(const ferry_cfg_var_t *var, void *base, const char *value)
{
    char why[256];
    long long n;
    char *end;
    int v;

    switch (var->kind) {
    case FERRY_CFG_KIND_TEXT:
        why[0] = '\0';
        if (strlen(value) >= var->width ||
            (var->check != NULL && var->check(value, why, sizeof(why)) != 0))
            return ferry_cfg_bad_why(var, value, why);
        strcpy((char *)base + var->offset, value);
        return FERRY_OK;
    case FERRY_CFG_KIND_CHOICE:
        return ferry_cfg_parse_choice(var, base, value);
    case FERRY_CFG_KIND_CUSTOM:
        v = var->parse(value);
        if (v < 0)
            return ferry_cfg_bad(var, value);
        ferry_cfg_table_store(var, base, v);
        return FERRY_OK;
    case FERRY_CFG_KIND_SIZE:
        n = ferry_config_parse_size(value);
        if (n < var->min || n > var->max || (n < 0 && strcmp(value, "-1") != 0))
            return ferry_cfg_bad(var, value);
        ferry_cfg_table_store(var, base, n);
        return FERRY_OK;
    case FERRY_CFG_KIND_INT:
        errno = 0;
        n = strtoll(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0' || n < var->min || n > var->max)
            return ferry_cfg_bad(var, value);
        ferry_cfg_table_store(var, base, n);
        return FERRY_OK;
    }
    return FERRY_ERR_INTERNAL;
}

ferry_status_t ferry_cfg_table_load(const ferry_cfg_var_t *vars, int nvars, void *base,
                                    ferry_cfg_src_t *src)
{
    ferry_status_t status;
    const char *value;
    int i;

    for (i = 0; i < nvars; i++) {
        const ferry_cfg_var_t *var = &vars[i];

        src[i] = FERRY_CFG_DEFAULT;
        if (var->kind == FERRY_CFG_KIND_TEXT)
            ((char *)base + var->offset)[0] = '\0';
        else
            ferry_cfg_table_store(var, base, var->def);
        value = getenv(var->name);
        if (value == NULL || *value == '\0' ||
            ((var->flags & FERRY_CFG_F_SHORT_UNSET) && strlen(value) <= 1))
            continue;
        status = ferry_cfg_table_parse(var, base, value);
        if (status != FERRY_OK)
            return status;
        src[i] = FERRY_CFG_ENV;
    }
    return FERRY_OK;
}

const char *ferry_cfg_src_name(ferry_cfg_src_t src)
{
    return src == FERRY_CFG_ENV ? "env" : src == FERRY_CFG_DERIVED ? "derived" : "default";
}

/* The value of one variable as text, the way a user would write it. */
static void ferry_cfg_table_value_str(const ferry_cfg_var_t *var, const void *base, char *out,
                                      size_t len)
{
    const char *text = (const char *)base + var->offset;
    long long n;
    const ferry_cfg_choice_t *c;

    if (var->kind == FERRY_CFG_KIND_TEXT) {
        snprintf(out, len, "%s", text[0] != '\0' ? text : var->unset != NULL ? var->unset : "");
        return;
    }
    n = ferry_cfg_table_value(var, base);
    for (c = var->kind == FERRY_CFG_KIND_CHOICE ? var->choices : NULL; c != NULL && c->name;
         c++) {
        if (c->value == n) {
            snprintf(out, len, "%s", c->name);
            return;
        }
    }
    snprintf(out, len, "%lld", n);
}

void ferry_cfg_table_format(const ferry_cfg_var_t *vars, int nvars, const void *base,
                            const ferry_cfg_src_t *src, char *buf, size_t len)
{
    size_t off = strlen(buf);
    char value[600];
    int i;

    for (i = 0; i < nvars && off + 1 < len; i++) {
        ferry_cfg_table_value_str(&vars[i], base, value, sizeof(value));
        off += (size_t)snprintf(buf + off, len - off, " %s=%s(%s)", vars[i].name, value,
                                ferry_cfg_src_name(src[i]));
    }
}
