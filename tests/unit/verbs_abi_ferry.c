/* verbs_abi_list.h under ferry's declarations: the table under test. */
#include "ferry/rdma_cm_abi.h"
#include "ferry/verbs_abi.h"

#include "verbs_abi_table.h"

const struct verbs_abi_entry verbs_abi_ferry[] = {
#include "verbs_abi_list.h"
};
const size_t verbs_abi_ferry_count = sizeof(verbs_abi_ferry) / sizeof(verbs_abi_ferry[0]);
