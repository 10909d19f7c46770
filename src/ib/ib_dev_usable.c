/*
 * NCCL_FERRY_BACKEND=auto asks whether ib would work before choosing it:
 * verbs load, a port is ACTIVE and passes NCCL_IB_HCA, and an RC QP can be
 * created on it (a host whose uverbs device opens but has no resources, or
 * a container without the memlock limit, fails here instead of at the
 * first connect). Everything it opens it closes again; the library stays.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ib/ib.h"
#include "ib/ib_dev_port.h"
#include "ib/ib_env_set.h"

/* An RC QP on a throw-away CQ, destroyed again: 0, or -1 with the failing verb in why. */
static int ferry_ib_usable_qp(ferry_ib_hca_t *hca, int port, char *why, size_t len)
{
    struct ibv_qp_init_attr init;
    struct ibv_cq *cq;
    struct ibv_qp *qp;

    cq = ferry_ibv.create_cq(hca->ctx, 2, NULL, NULL, 0);
    if (cq == NULL) {
        snprintf(why, len, "%s:%d: ibv_create_cq failed: %s", hca->name, port, strerror(errno));
        return -1;
    }
    memset(&init, 0, sizeof(init));
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 1;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = ferry_ibv.create_qp(hca->pd, &init);
    if (qp == NULL) {
        snprintf(why, len, "%s:%d: ibv_create_qp(RC) failed: %s%s", hca->name, port,
                 strerror(errno), errno == ENOMEM ? " (check ulimit -l)" : "");
        ferry_ibv.destroy_cq(cq);
        return -1;
    }
    ferry_ibv.destroy_qp(qp);
    ferry_ibv.destroy_cq(cq);
    return 0;
}

/* Append "; " and one reason to the reasons so far. */
static void ferry_ib_usable_note(char *why, size_t len, const char *note)
{
    size_t off = strlen(why);

    if (off + 1 < len)
        snprintf(why + off, len - off, "%s%s", off > 0 ? "; " : "", note);
}

/* The RDMA ports auto saw, for the WARN when none of them is usable. */
typedef struct ferry_ib_usable_census {
    int  ports;         /* Every port of every device that opened. */
    int  hca_matched;   /* Of those, the ones NCCL_IB_HCA lets through (any state). */
    char names[256];    /* "mlx5_0:1, mlx5_0:2", cut short. */
} ferry_ib_usable_census_t;

static void ferry_ib_usable_count(ferry_ib_usable_census_t *c, const char *hca, int port,
                                  const ferry_ib_hca_filter_t *filter)
{
    size_t off = strlen(c->names);

    if (off + 1 < sizeof(c->names))
        snprintf(c->names + off, sizeof(c->names) - off, "%s%s:%d", c->ports > 0 ? ", " : "",
                 hca, port);
    c->ports++;
    c->hca_matched += ferry_ib_hca_filter_match(filter, hca, port);
}

/* 1 when a port of device passes and takes a QP (then why names it); else reasons appended. */
static int ferry_ib_usable_device(struct ibv_device *device, const ferry_ib_config_t *cfg,
                                  const ferry_ib_hca_filter_t *filter,
                                  ferry_ib_usable_census_t *census, char *why, size_t len)
{
    ferry_ib_hca_t hca;
    char note[320];
    int port, ok = 0;

    if (ferry_ib_hca_open(&hca, device, cfg->merge_vfs, note, sizeof(note)) != FERRY_OK) {
        ferry_ib_usable_note(why, len, note);
        return 0;
    }
    for (port = 1; port <= hca.attr.phys_port_cnt && !ok; port++) {
        struct ibv_port_attr attr;
        uint32_t speed_ex;
        const char *skip;

        ferry_ib_usable_count(census, hca.name, port, filter);
        if (ferry_ibv_query_port_ex(hca.ctx, (uint8_t)port, &attr, &speed_ex) != 0) {
            snprintf(note, sizeof(note), "%s:%d: ibv_query_port failed: %s", hca.name, port,
                     strerror(errno));
            ferry_ib_usable_note(why, len, note);
            continue;
        }
        skip = ferry_ib_port_skip_reason(hca.name, port, &attr, filter);
        if (skip != NULL) {
            snprintf(note, sizeof(note), "%s:%d %s", hca.name, port, skip);
            ferry_ib_usable_note(why, len, note);
            continue;
        }
        if (ferry_ib_usable_qp(&hca, port, note, sizeof(note)) != 0) {
            ferry_ib_usable_note(why, len, note);
        } else {
            snprintf(why, len, "%s:%d is ACTIVE and takes an RC QP", hca.name, port);
            ok = 1;
        }
    }
    ferry_ib_hca_close(&hca);
    return ok;
}

/*
 * RDMA devices exist but no port is usable: meant to run, so why must say
 * what to fix. An NCCL_IB_HCA that matches no port at all is the cause
 * worth naming alone; otherwise the per-port reasons stand.
 */
static ferry_usable_t ferry_ib_usable_no_port(const ferry_ib_config_t *ibcfg,
                                              const ferry_ib_usable_census_t *census,
                                              char *why, size_t len)
{
    if (ibcfg->hca[0] != '\0' && census->ports > 0 && census->hca_matched == 0) {
        snprintf(why, len, "NCCL_IB_HCA=%.200s matches none of the RDMA ports %s; fix NCCL_IB_HCA",
                 ibcfg->hca, census->names);
        return FERRY_UNUSABLE_MEANT;
    }
    ferry_ib_usable_note(why, len, "no RDMA port here is usable; fix that");
    return FERRY_UNUSABLE_MEANT;
}

/* Not usable, and no RDMA device found: meant only if the user set ib variables. */
static ferry_usable_t ferry_ib_usable_none(char *why, size_t len)
{
    char vars[256];
    size_t off = strlen(why);
    int n = ferry_ib_env_set(vars, sizeof(vars));

    if (n == 0)
        return FERRY_UNUSABLE;
    if (off + 1 < len)
        snprintf(why + off, len - off, ", yet %s %s set; install or load the RDMA driver and "
                 "rdma-core, or unset the NCCL_IB_* variables", vars, n == 1 ? "is" : "are");
    return FERRY_UNUSABLE_MEANT;
}

ferry_usable_t ferry_ib_usable(const ferry_config_t *cfg, char *why, size_t len)
{
    ferry_ib_usable_census_t census;
    ferry_ib_config_t ibcfg;
    ferry_ib_hca_filter_t filter;
    struct ibv_device **list;
    char err[1024];
    int n = 0, i, ok = 0;

    (void)cfg;
    memset(&census, 0, sizeof(census));
    if (ferry_ib_config_load(&ibcfg) != FERRY_OK) {
        snprintf(why, len, "an NCCL_IB_* variable is not valid (see the WARN above); fix it");
        return FERRY_UNUSABLE_MEANT;
    }
    /* The user's own choice: nothing to warn about. */
    if (ibcfg.disable) {
        snprintf(why, len, "NCCL_IB_DISABLE=1");
        return FERRY_UNUSABLE;
    }
    if (ferry_ibv_load(ibcfg.verbs_lib, err, sizeof(err)) != FERRY_OK) {
        snprintf(why, len, "%s", err);
        return ferry_ib_usable_none(why, len);
    }
    ferry_ib_hca_filter_parse(ibcfg.hca, &filter); /* Validated by the config load. */
    list = ferry_ibv.get_device_list(&n);
    if (list == NULL) {
        snprintf(why, len, "ibv_get_device_list failed: %s", strerror(errno));
        return ferry_ib_usable_none(why, len);
    }
    why[0] = '\0';
    for (i = 0; i < n && !ok; i++)
        ok = ferry_ib_usable_device(list[i], &ibcfg, &filter, &census, why, len);
    ferry_ibv.free_device_list(list);
    if (ok)
        return FERRY_USABLE;
    if (n > 0)
        return ferry_ib_usable_no_port(&ibcfg, &census, why, len);
    snprintf(why, len, "no RDMA device (ibv_get_device_list found none in %s)",
             ferry_ibv_loaded_path());
    return ferry_ib_usable_none(why, len);
}
