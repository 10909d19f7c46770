#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/config.h"
#include "core/config_table.h"
#include "core/log.h"

/* Designated, so rows may name the optional members that follow help. */
#define FERRY_CFG_FIELD(_f) .offset = offsetof(ferry_config_t, _f), \
                            .width = sizeof(((ferry_config_t *)0)->_f)

static const ferry_cfg_choice_t ferry_cfg_backends[] = {
    {"auto", FERRY_BACKEND_AUTO}, {"socket", FERRY_BACKEND_SOCKET}, {"ib", FERRY_BACKEND_IB},
    {NULL, 0},
};

static const ferry_cfg_choice_t ferry_cfg_families[] = {
    {"AF_INET", AF_INET}, {"AF_INET6", AF_INET6}, {NULL, 0},
};

static const ferry_cfg_var_t ferry_cfg_vars[FERRY_CFG_COUNT] = {
    [FERRY_CFG_BACKEND]          = {"NCCL_FERRY_BACKEND", FERRY_CFG_KIND_CHOICE,
                                    FERRY_CFG_FIELD(backend), FERRY_BACKEND_AUTO, 0, 0,
                                    "auto, socket or ib", .choices = ferry_cfg_backends},
    [FERRY_CFG_SOCKET_IFNAME]    = {"NCCL_SOCKET_IFNAME", FERRY_CFG_KIND_TEXT,
                                    FERRY_CFG_FIELD(socket_ifname), 0, 0, 0,
                                    "interface prefixes, ^ to exclude, = for exact names",
                                    /* NCCL treats a 1-character NCCL_SOCKET_IFNAME as unset; so do we. */
                                    .flags = FERRY_CFG_F_SHORT_UNSET},
    [FERRY_CFG_SOCKET_FAMILY]    = {"NCCL_SOCKET_FAMILY", FERRY_CFG_KIND_CHOICE,
                                    FERRY_CFG_FIELD(socket_family), AF_UNSPEC, 0, 0,
                                    "AF_INET or AF_INET6", .choices = ferry_cfg_families},
    [FERRY_CFG_RETRY_CNT]        = {"NCCL_SOCKET_RETRY_CNT", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(retry_cnt), 34, 0, 1000000,
                                    "connect retries, 0..1000000"},
    [FERRY_CFG_RETRY_SLEEP_MS]   = {"NCCL_SOCKET_RETRY_SLEEP_MSEC", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(retry_sleep_ms), 100, 0, 60000,
                                    "connect back-off step in ms, 0..60000"},
    [FERRY_CFG_HELLO_TIMEOUT_MS] = {"NCCL_FERRY_HELLO_TIMEOUT_MS", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(hello_timeout_ms), 10000, 10, 3600000,
                                    "ms an inbound stream may take to say hello"},
    [FERRY_CFG_DUMP_SIGNAL]      = {"NCCL_FERRY_DUMP_SIGNAL", FERRY_CFG_KIND_CUSTOM,
                                    FERRY_CFG_FIELD(dump_signal), 0, 0, 0,
                                    "signal name or number that dumps all comms, off by default",
                                    .parse = ferry_config_parse_signal},
    [FERRY_CFG_TUNER]            = {"NCCL_FERRY_TUNER", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(tuner), 1, 0, 1,
                                    "0 or 1 (1: ferry's bundled tuner corrects NCCL's cost model)"},
    [FERRY_CFG_TUNER_LL_BW]      = {"NCCL_FERRY_TUNER_LL_BW", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(tuner_ll_bw), 1000, 1, 1000000,
                                    "1..1000000 (MB/s of bus bandwidth NCCL's LL protocols reach over ferry)"},
    [FERRY_CFG_TUNER_CHANNEL_BYTES] = {"NCCL_FERRY_TUNER_CHANNEL_BYTES", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(tuner_channel_bytes), 2 << 20, 0, 1LL << 40,
                                    "a size up to 1T (collective bytes per NCCL channel; 0 leaves channels to NCCL)"},
    [FERRY_CFG_TUNER_STEP_BYTES] = {"NCCL_FERRY_TUNER_STEP_BYTES", FERRY_CFG_KIND_SIZE,
                                    FERRY_CFG_FIELD(tuner_step_bytes), 0, 0, 1LL << 40,
                                    "a size up to 1T (a Simple ring collective whose ring step "
                                    "on 2 channels would move fewer bytes runs on one; 0: off; "
                                    "the same on every rank)"},
    [FERRY_CFG_STALL_WARN_S]     = {"NCCL_FERRY_STALL_WARN_S", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(stall_warn_s), 60, 0, 86400,
                                    "0..86400 (s a request may go without progress before test() "
                                    "warns about it once; 0: never)"},
    [FERRY_CFG_RMA]              = {"NCCL_FERRY_RMA", FERRY_CFG_KIND_INT,
                                    FERRY_CFG_FIELD(rma), 1, 0, 1,
                                    "0 or 1 (1: ferry's RMA plugin carries NCCL's one-sided "
                                    "operations; 0: it declines and NCCL uses its own)"},
};

static const struct {
    const char *name;
    int         signo;
} ferry_cfg_signals[] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"QUIT", SIGQUIT},
    {"URG", SIGURG},   {"PWR", SIGPWR},   {"WINCH", SIGWINCH},
};

int ferry_config_parse_signal(const char *text)
{
    char *end;
    long n;
    size_t i;

    if (text == NULL || *text == '\0' || strcasecmp(text, "off") == 0)
        return 0;
    if (strncasecmp(text, "SIG", 3) == 0)
        text += 3;
    for (i = 0; i < sizeof(ferry_cfg_signals) / sizeof(ferry_cfg_signals[0]); i++)
        if (strcasecmp(text, ferry_cfg_signals[i].name) == 0)
            return ferry_cfg_signals[i].signo;
    errno = 0;
    n = strtol(text, &end, 10);
    /* SIGKILL/SIGSTOP cannot be caught; SIGSEGV and friends must stay fatal. */
    if (errno != 0 || *end != '\0' || n < 0 || n >= NSIG || n == SIGKILL ||
        n == SIGSTOP || n == SIGSEGV || n == SIGBUS || n == SIGFPE || n == SIGILL ||
        n == SIGABRT)
        return -1;
    return (int)n;
}

long long ferry_config_parse_size(const char *text)
{
    char *end;
    long long n;
    int shift = 0;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    n = strtoll(text, &end, 10);
    if (errno != 0 || end == text)
        return -1;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    /* "9999999999G" overflowed (undefined; it could wrap into a valid range): refuse it. */
    if (n > (LLONG_MAX >> shift) || n < -(LLONG_MAX >> shift))
        return -1;
    n *= 1LL << shift;
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    return *end == '\0' ? n : -1;
}

ferry_status_t ferry_config_load(ferry_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    return ferry_cfg_table_load(ferry_cfg_vars, FERRY_CFG_COUNT, cfg, cfg->src);
}

const char *ferry_config_backend_name(ferry_backend_kind_t kind)
{
    static const char *const names[] = {"auto", "socket", "ib"};

    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

void ferry_config_format(const ferry_config_t *cfg, char *buf, size_t len)
{
    const char *family = cfg->socket_family == AF_INET    ? "AF_INET"
                         : cfg->socket_family == AF_INET6 ? "AF_INET6"
                                                          : "any";
    /* The backend's variables follow, appended by its format_config (core/backend.h). */
    snprintf(buf, len,
             "backend=%s(%s) ifname=%s(%s) family=%s(%s) retry=%dx%dms(%s) "
             "hello_timeout=%dms(%s) dump_signal=%d(%s) tuner=%d(%s) tuner_ll_bw=%dMB/s(%s) "
             "tuner_channel_bytes=%zu(%s) tuner_step_bytes=%zu(%s) stall_warn=%ds(%s) rma=%d(%s)",
             ferry_config_backend_name(cfg->backend), ferry_cfg_src_name(cfg->src[FERRY_CFG_BACKEND]),
             cfg->socket_ifname[0] ? cfg->socket_ifname : "<nccl order>",
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SOCKET_IFNAME]), family,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_SOCKET_FAMILY]), cfg->retry_cnt,
             cfg->retry_sleep_ms, ferry_cfg_src_name(cfg->src[FERRY_CFG_RETRY_CNT]),
             cfg->hello_timeout_ms, ferry_cfg_src_name(cfg->src[FERRY_CFG_HELLO_TIMEOUT_MS]),
             cfg->dump_signal, ferry_cfg_src_name(cfg->src[FERRY_CFG_DUMP_SIGNAL]), cfg->tuner,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_TUNER]), cfg->tuner_ll_bw,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_TUNER_LL_BW]), cfg->tuner_channel_bytes,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_TUNER_CHANNEL_BYTES]), cfg->tuner_step_bytes,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_TUNER_STEP_BYTES]), cfg->stall_warn_s,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_STALL_WARN_S]), cfg->rma,
             ferry_cfg_src_name(cfg->src[FERRY_CFG_RMA]));
}
