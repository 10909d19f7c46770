/*
 * The top of the house: which backends this build of ferry has, in the
 * order NCCL_FERRY_BACKEND=auto tries them (the ib backend first: a usable
 * RDMA port beats TCP), and the services that run beside whichever is
 * chosen. Handed to the core at every init (ferry_nccl_ctx_init): the core
 * below reaches backends only through this set and names none of them.
 */
#include "core/backend.h"
#include "ib/ib.h"
#include "nccl/plugin.h"
#include "proxy/registry.h"
#include "socket/sock.h"

static const ferry_backend_ops_t *const ferry_nccl_backends[] = {
    &ferry_ib_ops,
    &ferry_sock_ops,
    NULL,
};

static void ferry_nccl_services_start(const ferry_config_t *cfg)
{
    ferry_px_dump_start(cfg->dump_signal);
}

static void ferry_nccl_services_stop(void)
{
    ferry_px_dump_stop();
}

const ferry_backend_set_t ferry_nccl_backend_set = {
    .backends = ferry_nccl_backends,
    .services_start = ferry_nccl_services_start,
    .services_stop = ferry_nccl_services_stop,
};

/*
 * NCCL 2.28.9 dlcloses the plugin after its last comm, and v8..v10 have no
 * finalize at all: whatever the process-wide part started (the dump thread
 * and its signal handler) must be gone before the code is unmapped.
 */
__attribute__((destructor)) static void ferry_nccl_services_unload(void)
{
    ferry_px_dump_stop();
}
