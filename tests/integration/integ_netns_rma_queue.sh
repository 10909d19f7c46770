#!/usr/bin/env bash
# integ_netns_rma_queue.sh TEST_RMA_GROUP PLUGIN [RANKS]
#
# One RMA group of RANKS (64) forked ranks over TCP in a network namespace of
# its own whose listen queues hold 16 connections (net.core.somaxconn=16):
# every rank's listener is dialed by every lower rank, far more than its
# queue holds while it is still dialing the higher ones. The group must form
# and move its data (test_rma_group's checks), and the ranks must take links
# from their queues while they dial: the namespace's ListenOverflows (each a
# dialer dropped to a SYN retry of a second or more) must stay under twice
# the rank count. Ranks that take links only after all their own dials
# overflow the queues about 4-6 times per rank at 64 ranks. Needs root,
# unshare(1) and ip(8); exits 77 (skipped) otherwise. Traffic stays on that
# namespace's loopback.
set -u
group=$1 plugin=$2 ranks=${3:-64}
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
  echo "integ_netns_rma_queue: needs root, unshare and ip: skipped"
  exit 77
fi
exec unshare -n bash -c '
  set -e
  ip link set lo up
  sysctl -q -w net.core.somaxconn=16
  echo "namespace: somaxconn $(cat /proc/sys/net/core/somaxconn)"
  NCCL_SOCKET_IFNAME=lo NCCL_FERRY_BACKEND=socket "$0" --plugin "$1" --ranks "$2"
  over=$(awk "/^TcpExt:/ { if (!h) { split(\$0, k); h = 1 } else { split(\$0, v); for (i in k) if (k[i] == \"ListenOverflows\") print v[i] } }" /proc/net/netstat)
  echo "namespace: listen queue overflows ${over:-?} (bound $((2 * $2)))"
  if [ -z "$over" ] || [ "$over" -ge $((2 * $2)) ]; then
    echo "FAIL: ${over:-no} listen queue overflows for $2 ranks: the ranks let their queues fill while they dialed"
    exit 1
  fi
' "$group" "$plugin" "$ranks"
