/*
 * ferry's description of the NCCL net plugin ABI, versions 8 to 12.
 * Include this (or one net_vN.h) to drive an ncclNetPlugin_vN struct.
 * Written from reference/nccl-net-api.md §2; no text taken from NCCL.
 */
#ifndef FERRY_NCCL_NET_H
#define FERRY_NCCL_NET_H

#include "err.h"
#include "common.h"
#include "net_device.h"
#include "net_const.h"
#include "net_v8.h"
#include "net_v9.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"

#endif
