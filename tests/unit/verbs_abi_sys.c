/* verbs_abi_list.h under rdma-core's own headers: the reference table. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "verbs_abi_table.h"

const struct verbs_abi_entry verbs_abi_sys[] = {
#include "verbs_abi_list.h"
};
const size_t verbs_abi_sys_count = sizeof(verbs_abi_sys) / sizeof(verbs_abi_sys[0]);
