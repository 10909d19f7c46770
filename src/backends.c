/*
 * The top of the house: which backends this build of ferry has, in the
 * order NCCL_FERRY_BACKEND=auto tries them (the ib backend first: a usable
 * RDMA port beats TCP), and the services that run beside whichever is
 * chosen. The core below reaches backends only through this list.
 */
#include "core/backend.h"
#include "ib/ib.h"
#include "proxy/registry.h"
#include "socket/sock.h"

const ferry_backend_ops_t *const ferry_backends[] = {
    &ferry_ib_ops,
    &ferry_sock_ops,
    NULL,
};

void ferry_services_start(const ferry_config_t *cfg)
{
    ferry_px_dump_start(cfg->dump_signal);
}

void ferry_services_stop(void)
{
    ferry_px_dump_stop();
}

/*
 * NCCL 2.28.9 dlcloses the plugin after its last comm, and v8..v10 have no
 * finalize at all: whatever the process-wide part started (the dump thread
 * and its signal handler) must be gone before the code is unmapped.
 */
__attribute__((destructor)) static void ferry_services_unload(void)
{
    ferry_px_dump_stop();
}
