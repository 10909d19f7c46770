/*
 * The table behind every configuration struct: one row per environment
 * variable (name, kind, field, default, range, what is accepted), parsed
 * into any struct with a parallel array of sources. core/config.c,
 * socket/sock_config.c and ib/ib_config.c each own one table.
 */
#ifndef FERRY_CORE_CONFIG_TABLE_H
#define FERRY_CORE_CONFIG_TABLE_H

#include <stddef.h>

#include "core/config.h"
#include "core/status.h"

typedef enum ferry_cfg_kind {
    FERRY_CFG_KIND_INT,    /* Integer within [min, max]. */
    FERRY_CFG_KIND_SIZE,   /* Bytes, K/M/G suffixes allowed, within [min, max]. */
    FERRY_CFG_KIND_TEXT,   /* Free text up to the field's size, checked by `check` if set. */
    FERRY_CFG_KIND_CHOICE, /* One of `choices` (case-insensitive), stored as its int value. */
    FERRY_CFG_KIND_CUSTOM  /* Parsed by `parse` into an int. */
} ferry_cfg_kind_t;

/* One accepted word of a CHOICE variable; the list ends with a NULL name. */
typedef struct ferry_cfg_choice {
    const char *name;
    int         value;
} ferry_cfg_choice_t;

/* Flags of a variable. */
#define FERRY_CFG_F_SHORT_UNSET 0x1 /* A 1-character value counts as unset (NCCL_SOCKET_IFNAME). */

typedef struct ferry_cfg_var {
    const char      *name;    /* Environment variable. */
    ferry_cfg_kind_t kind;
    size_t           offset;  /* Field in the struct... */
    size_t           width;   /* ...and its size: int or 8 bytes for numbers, the buffer for text. */
    long long        def;     /* Default for every kind but TEXT (which defaults to ""). */
    long long        min, max;
    const char      *help;    /* What is accepted; quoted in errors. */
    const ferry_cfg_choice_t *choices; /* CHOICE only. */
    int            (*parse)(const char *text); /* CUSTOM: the value, or -1 if invalid. */
    /* TEXT, optional: 0 accepts; else why may say what is wrong (quoted in the WARN). */
    int            (*check)(const char *text, char *why, size_t why_len);
    const char      *unset;   /* TEXT: shown for "" in the effective-config line. */
    unsigned         flags;   /* FERRY_CFG_F_*. */
} ferry_cfg_var_t;

/* offsetof and size of a field of _type, for the table's rows. */
#define FERRY_CFG_FIELD_OF(_type, _f) offsetof(_type, _f), sizeof(((_type *)0)->_f)

/*
 * Store every default in base, then each variable the environment sets
 * (src[i] = FERRY_CFG_ENV, others FERRY_CFG_DEFAULT). Stops at the first
 * bad value with a WARN naming it: FERRY_ERR_USAGE.
 */
ferry_status_t ferry_cfg_table_load(const ferry_cfg_var_t *vars, int nvars, void *base,
                                    ferry_cfg_src_t *src);
/* Parse one value into its field; WARN and FERRY_ERR_USAGE when it is not accepted. */
ferry_status_t ferry_cfg_table_parse(const ferry_cfg_var_t *var, void *base, const char *value);
/* Store a number in the field var names (int or 8 bytes, as its width says). */
void ferry_cfg_table_store(const ferry_cfg_var_t *var, void *base, long long value);
/* The number in the field var names. */
long long ferry_cfg_table_value(const ferry_cfg_var_t *var, const void *base);
/* "env", "derived" or "default". */
const char *ferry_cfg_src_name(ferry_cfg_src_t src);
/* Append " NAME=value(source)" for each variable to buf (which holds a string). */
void ferry_cfg_table_format(const ferry_cfg_var_t *vars, int nvars, const void *base,
                            const ferry_cfg_src_t *src, char *buf, size_t len);

#endif
