/*
 * makeVDevice from many threads at once, as NCCL may call it (one
 * communicator's init per thread). Runs with FAKEIBV_NDEV=2
 * FAKEIBV_NPORTS=2 (4 InfiniBand ports) and NCCL_SOCKET_IFNAME=lo.
 *
 * Each round starts from a fresh init (ports only), releases the threads
 * together from a barrier, and each asks for its own port list; two of them
 * ask for a list another thread asks for too. Every device returned must be
 * the ports its caller listed, in its getProperties (vProps and name) both
 * right away and after all threads are done; callers of one list get one
 * device; the table holds exactly one device per distinct list.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/config.h"
#include "ib/ib.h"
#include "test_ib_util.h"

#define VDEV_ROUNDS  300
#define VDEV_THREADS 10
#define VDEV_LISTS   8 /* Distinct port lists; threads 8 and 9 repeat lists 0 and 5. */

/* Port lists over fakeib0:1 fakeib0:2 fakeib1:1 fakeib1:2 (devices 0..3); order matters. */
static const struct {
    int n;
    int devs[4];
} vdev_lists[VDEV_THREADS] = {
    { 2, { 0, 1 } }, { 2, { 2, 3 } }, { 2, { 0, 2 } }, { 2, { 1, 3 } },
    { 2, { 1, 0 } }, { 3, { 0, 1, 2 } }, { 4, { 3, 2, 1, 0 } }, { 2, { 0, 3 } },
    { 2, { 0, 1 } }, { 3, { 0, 1, 2 } },
};

typedef struct vdev_call {
    pthread_barrier_t *go;
    int                list;
    ferry_status_t     status;
    int                dev;
    char               why[256]; /* Empty when the device's properties right after were right. */
} vdev_call_t;

/* "" if the properties of dev name exactly list `list`'s ports, else what differs. */
static void vdev_props_check(int dev, int list, char *why, size_t len)
{
    ferry_props_t p;
    char name[256];
    size_t off = 0;
    int i;

    why[0] = '\0';
    if (ferry_ib_get_properties(dev, &p) != FERRY_OK) {
        snprintf(why, len, "getProperties(%d) failed", dev);
        return;
    }
    name[0] = '\0';
    for (i = 0; i < vdev_lists[list].n; i++)
        off += (size_t)snprintf(name + off, sizeof(name) - off, "%s%s", i ? "+" : "",
                                ferry_ib_state.devs[vdev_lists[list].devs[i]].name);
    if (p.vdevs_n != vdev_lists[list].n ||
        memcmp(p.vdevs, vdev_lists[list].devs, sizeof(int) * (size_t)p.vdevs_n) != 0 ||
        strcmp(p.name, name) != 0)
        snprintf(why, len, "device %d for list %d (%s) has %d member(s) [%d %d %d %d], name %s",
                 dev, list, name, p.vdevs_n, p.vdevs[0], p.vdevs_n > 1 ? p.vdevs[1] : -1,
                 p.vdevs_n > 2 ? p.vdevs[2] : -1, p.vdevs_n > 3 ? p.vdevs[3] : -1, p.name);
}

static void *vdev_thread(void *arg)
{
    vdev_call_t *c = arg;

    pthread_barrier_wait(c->go);
    c->status = ferry_ib_make_vdevice(&c->dev, vdev_lists[c->list].n, vdev_lists[c->list].devs);
    if (c->status == FERRY_OK)
        vdev_props_check(c->dev, c->list, c->why, sizeof(c->why));
    return NULL;
}

static void test_make_vdevice_concurrent(void **state)
{
    ferry_config_t core_cfg;
    int round, t, bad_rounds = 0, first_bad = -1;
    char first_why[512] = "";

    (void)state;
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    unsetenv("NCCL_IB_MERGE_NICS");
    unsetenv("NCCL_IB_HCA");
    assert_int_equal(ferry_config_load(&core_cfg), FERRY_OK);
    for (round = 0; round < VDEV_ROUNDS; round++) {
        pthread_barrier_t go;
        pthread_t th[VDEV_THREADS];
        vdev_call_t calls[VDEV_THREADS];
        char why[256] = "";
        int bad = 0;

        test_ib_log_reset();
        assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
        assert_int_equal(ferry_ib_state.ndev, 4);
        assert_int_equal(pthread_barrier_init(&go, NULL, VDEV_THREADS), 0);
        for (t = 0; t < VDEV_THREADS; t++) {
            memset(&calls[t], 0, sizeof(calls[t]));
            calls[t].go = &go;
            calls[t].list = t;
            assert_int_equal(pthread_create(&th[t], NULL, vdev_thread, &calls[t]), 0);
        }
        for (t = 0; t < VDEV_THREADS; t++)
            assert_int_equal(pthread_join(th[t], NULL), 0);
        pthread_barrier_destroy(&go);
        for (t = 0; t < VDEV_THREADS && !bad; t++) {
            if (calls[t].status != FERRY_OK) {
                snprintf(why, sizeof(why), "makeVDevice of list %d failed (%d)", t,
                         (int)calls[t].status);
                bad = 1;
            } else if (calls[t].why[0] != '\0') {
                snprintf(why, sizeof(why), "right after the call: %s", calls[t].why);
                bad = 1;
            } else {
                vdev_props_check(calls[t].dev, t, why, sizeof(why));
                bad = why[0] != '\0';
            }
        }
        if (!bad && (calls[8].dev != calls[0].dev || calls[9].dev != calls[5].dev)) {
            snprintf(why, sizeof(why), "one port list, two devices: %d and %d, %d and %d",
                     calls[0].dev, calls[8].dev, calls[5].dev, calls[9].dev);
            bad = 1;
        }
        if (!bad && atomic_load(&ferry_ib_state.nvdev) != 4 + VDEV_LISTS) {
            snprintf(why, sizeof(why), "%d devices after %d distinct lists over 4 ports",
                     atomic_load(&ferry_ib_state.nvdev), VDEV_LISTS);
            bad = 1;
        }
        if (!bad && test_ib_log_count(FERRY_LOG_WARN, NULL) != 0) {
            snprintf(why, sizeof(why), "a WARN: %s", test_ib_log_find(FERRY_LOG_WARN, ""));
            bad = 1;
        }
        ferry_ib_fini();
        if (bad) {
            if (first_bad < 0) {
                first_bad = round;
                snprintf(first_why, sizeof(first_why), "%s", why);
            }
            bad_rounds++;
        }
    }
    printf("  %d rounds of %d concurrent makeVDevice calls (%d distinct port lists): %d round(s) "
           "wrong\n", VDEV_ROUNDS, VDEV_THREADS, VDEV_LISTS, bad_rounds);
    if (bad_rounds > 0)
        fail_msg("%d of %d rounds returned a wrong device; the first, round %d: %s", bad_rounds,
                 VDEV_ROUNDS, first_bad, first_why);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_make_vdevice_concurrent),
    };

    return cmocka_run_group_tests_name("ib_vdev", tests, NULL, NULL);
}
