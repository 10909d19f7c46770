/*
 * fakeibv fault injection: failing verbs on demand (from the environment or
 * fakeibv_inject()), and events on live objects (peer loss, QP fatal, port
 * down) for a consumer's error paths.
 *
 * Environment form, read once: FAKEIBV_FAIL_<VERB>=<after>[:<count>[:<errno>]]
 * e.g. FAKEIBV_FAIL_MODIFY_QP=2:3:ETIMEDOUT lets two calls pass, then fails
 * three with ETIMEDOUT. count defaults to 1; errno is a name or a number.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fakeibv_internal.h"

struct fakeibv_fault_slot {
    unsigned after;   /* Calls still allowed to succeed before failing. */
    unsigned count;   /* Calls still to fail. */
    int err;          /* errno for the failing calls. */
};

static const struct {
    enum fakeibv_fault_kind kind;
    const char *env;
    int def_err;
} fakeibv_verb_faults[] = {
    { FAKEIBV_FAULT_REG_MR, "FAKEIBV_FAIL_REG_MR", ENOMEM },
    { FAKEIBV_FAULT_CREATE_QP, "FAKEIBV_FAIL_CREATE_QP", ENOMEM },
    { FAKEIBV_FAULT_MODIFY_QP, "FAKEIBV_FAIL_MODIFY_QP", ETIMEDOUT },
    { FAKEIBV_FAULT_CREATE_CQ, "FAKEIBV_FAIL_CREATE_CQ", ENOMEM },
};
#define FAKEIBV_NVERB_FAULTS (sizeof(fakeibv_verb_faults) / sizeof(fakeibv_verb_faults[0]))

static pthread_mutex_t fakeibv_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fakeibv_fault_slot fakeibv_slots[FAKEIBV_NVERB_FAULTS];
static pthread_once_t fakeibv_fault_once = PTHREAD_ONCE_INIT;

static int fakeibv_errno_parse(const char *s, int def)
{
    static const struct { const char *name; int err; } names[] = {
        { "ENOMEM", ENOMEM }, { "EINVAL", EINVAL }, { "ETIMEDOUT", ETIMEDOUT },
        { "EAGAIN", EAGAIN }, { "EBUSY", EBUSY }, { "EIO", EIO }, { "EPERM", EPERM },
        { "EFAULT", EFAULT }, { "ENOSPC", ENOSPC },
    };
    size_t i;

    if (s == NULL || *s == '\0')
        return def;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i].name) == 0)
            return names[i].err;
    return atoi(s) > 0 ? atoi(s) : def;
}

static void fakeibv_fault_load(void)
{
    size_t i;

    for (i = 0; i < FAKEIBV_NVERB_FAULTS; i++) {
        const char *s = getenv(fakeibv_verb_faults[i].env);
        char buf[64], *count, *err;

        fakeibv_slots[i].err = fakeibv_verb_faults[i].def_err;
        if (s == NULL || *s == '\0')
            continue;
        snprintf(buf, sizeof(buf), "%s", s);
        count = strchr(buf, ':');
        if (count != NULL)
            *count++ = '\0';
        err = count != NULL ? strchr(count, ':') : NULL;
        if (err != NULL)
            *err++ = '\0';
        fakeibv_slots[i].after = (unsigned)strtoul(buf, NULL, 0);
        fakeibv_slots[i].count = count != NULL ? (unsigned)strtoul(count, NULL, 0) : 1;
        fakeibv_slots[i].err = fakeibv_errno_parse(err, fakeibv_verb_faults[i].def_err);
    }
}

static int fakeibv_fault_index(enum fakeibv_fault_kind kind)
{
    size_t i;

    for (i = 0; i < FAKEIBV_NVERB_FAULTS; i++)
        if (fakeibv_verb_faults[i].kind == kind)
            return (int)i;
    return -1;
}

int fakeibv_fault_check(enum fakeibv_fault_kind kind)
{
    int i = fakeibv_fault_index(kind), err = 0;
    struct fakeibv_fault_slot *s;

    pthread_once(&fakeibv_fault_once, fakeibv_fault_load);
    if (i < 0)
        return 0;
    s = &fakeibv_slots[i];
    pthread_mutex_lock(&fakeibv_fault_lock);
    if (s->count > 0) {
        if (s->after > 0) {
            s->after--;
        } else {
            s->count--;
            err = s->err;
        }
    }
    pthread_mutex_unlock(&fakeibv_fault_lock);
    if (err != 0)
        FAKEIBV_INFO("injected failure of %s: %s", fakeibv_verb_faults[i].env + 13, strerror(err));
    return err;
}

static int fakeibv_inject_qp(enum fakeibv_fault_kind kind, uint32_t qpn)
{
    struct fakeibv_qp *qp = fakeibv_qp_lookup_get(qpn);
    struct ibv_async_event ev = { .event_type = IBV_EVENT_QP_FATAL };

    if (qp == NULL)
        return ENOENT;
    if (kind == FAKEIBV_FAULT_QP_DROP) {
        /* Its requests stop reaching the peer (the outbound stream is cut)
         * and the retry timer decides the outcome; the peer's requests to
         * it still arrive until it is in ERR. ferry's tests rely on that
         * one-way loss; QP_LINK_DOWN cuts both ways. */
        if (qp->out_fd >= 0)
            shutdown(qp->out_fd, SHUT_RDWR);
        fakeibv_qp_set_broken_locked(qp);
        pthread_mutex_unlock(&qp->lock);
        return 0;
    }
    if (kind == FAKEIBV_FAULT_QP_LINK_DOWN) {
        /* As if the QP's cable were pulled: nothing more goes out or comes
         * in, on either QP, and the retry timers decide the outcome. */
        fakeibv_qp_link_down_locked(qp);
        pthread_mutex_unlock(&qp->lock);
        return 0;
    }
    fakeibv_qp_to_err_locked(qp);
    ev.element.qp = &qp->qpx.qp_base;
    pthread_mutex_unlock(&qp->lock);
    fakeibv_async_raise(qp->ctx, &ev);
    return 0;
}

static int fakeibv_inject_port(struct ibv_context *ctx, enum fakeibv_fault_kind kind,
                               uint32_t port)
{
    struct ibv_async_event ev;
    struct fakeibv_device *dev;

    if (ctx == NULL || port < 1 || port > (uint32_t)fakeibv_config()->nports)
        return EINVAL;
    dev = fakeibv_ctx(ctx)->dev;
    memset(&ev, 0, sizeof(ev));
    ev.element.port_num = (int)port;
    if (kind == FAKEIBV_FAULT_PORT_ERR) {
        /* Down first, so that no QP connects or accepts a stream on it
         * after the sweep; then every QP on it loses its link. */
        __atomic_store_n(&dev->ports[port - 1].state, IBV_PORT_DOWN, __ATOMIC_RELEASE);
        fakeibv_qps_port_down(dev, (int)port);
        ev.event_type = IBV_EVENT_PORT_ERR;
    } else {
        /* QPs brought to RTR from now on connect; the dropped ones stay
         * dropped (in ERR once their sends time out) until RESET. */
        __atomic_store_n(&dev->ports[port - 1].state, IBV_PORT_ACTIVE, __ATOMIC_RELEASE);
        ev.event_type = IBV_EVENT_PORT_ACTIVE;
    }
    FAKEIBV_INFO("%s port %u: %s (injected)", dev->dev.name, port,
                 kind == FAKEIBV_FAULT_PORT_ERR ? "DOWN" : "ACTIVE");
    fakeibv_sysfs_port_state(dev, (int)port);
    fakeibv_sysfs_port_counters(dev, (int)port);
    fakeibv_async_raise(fakeibv_ctx(ctx), &ev);
    return 0;
}

FAKEIBV_EXPORT int fakeibv_inject(struct ibv_context *ctx, enum fakeibv_fault_kind kind,
                                  uint32_t target, unsigned after, unsigned count, int err)
{
    int i = fakeibv_fault_index(kind);
    struct ibv_async_event ev;

    pthread_once(&fakeibv_fault_once, fakeibv_fault_load);
    if (i >= 0) {
        pthread_mutex_lock(&fakeibv_fault_lock);
        fakeibv_slots[i].after = after;
        fakeibv_slots[i].count = count;
        fakeibv_slots[i].err = err > 0 ? err : fakeibv_verb_faults[i].def_err;
        pthread_mutex_unlock(&fakeibv_fault_lock);
        return 0;
    }
    switch (kind) {
    case FAKEIBV_FAULT_QP_DROP:
    case FAKEIBV_FAULT_QP_FATAL:
    case FAKEIBV_FAULT_QP_LINK_DOWN:
        return fakeibv_inject_qp(kind, target);
    case FAKEIBV_FAULT_PORT_ERR:
    case FAKEIBV_FAULT_PORT_ACTIVE:
        return fakeibv_inject_port(ctx, kind, target);
    case FAKEIBV_FAULT_DEVICE_FATAL:
        if (ctx == NULL)
            return EINVAL;
        memset(&ev, 0, sizeof(ev));
        ev.event_type = IBV_EVENT_DEVICE_FATAL;
        fakeibv_async_raise(fakeibv_ctx(ctx), &ev);
        return 0;
    default:
        return EINVAL;
    }
}
