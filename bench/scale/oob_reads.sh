#!/usr/bin/env bash
# oob_reads.sh: the system calls ib comms make to watch their out-of-band
# sockets, counted with strace over one ferry-scale run per plugin build:
# recv() of the liveness read (64 bytes, MSG_DONTWAIT) and epoll_wait() of the
# process' watch (64 events, no wait). Loopback and fakeibv only.
#
#   bench/scale/oob_reads.sh FERRY_SCALE FAKEIBV_LIB_DIR PLUGIN.so [PLUGIN.so...]
#
# Env: PAIRS (default 1024), ROUNDS (default 10). Prints, per plugin, the
# ferry-scale rows and the two counts (both processes together).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
command -v strace >/dev/null || { echo "oob_reads.sh: strace not installed" >&2; exit 2; }
bin=$1 lib=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in "$@"; do
  NCCL_SOCKET_IFNAME=lo LD_LIBRARY_PATH=$lib strace -f -e trace=recvfrom,epoll_wait -e signal=none \
    -o "$tmp/st" "$bin" --plugin "$p" --backend ib --pairs "${PAIRS:-1024}" --rounds "${ROUNDS:-10}" \
    2>/dev/null | sed "s|^|$p: |"
  echo "$p: liveness recv $(grep -c ', 64, MSG_DONTWAIT' "$tmp/st" || true)," \
       "watch epoll_wait $(grep -c 'epoll_wait(.*, 64, 0)' "$tmp/st" || true)"
done
