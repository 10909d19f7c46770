#!/bin/bash
# Checks test/with_sysfs.sh: under it, a fakeibv process's tree shows at the
# hard-coded paths NCCL reads, and the host's other classes stay visible.
# usage: with_sysfs_check.sh <test_fakeibv_sysfs binary>
# Needs root (mount namespace); otherwise it exits 77 (ctest: skipped).
set -u
bin=$1 here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: needs root for a private mount namespace (CI runs as root)"
    exit 77
fi
# shellcheck disable=SC2016 # expanded by the inner shell.
out=$(FAKEIBV_LINK=eth FAKEIBV_NDEV=1 "$here/with_sysfs.sh" bash -c '
    "$1" --child </dev/null >/dev/null || { echo "fakeibv process failed"; exit 1; }
    echo "pci=$(realpath /sys/class/infiniband/fakeib0/device)"
    echo "subsystem=$(realpath /sys/class/infiniband/fakeib0/device/subsystem)"
    echo "type3=$(cat /sys/class/infiniband/fakeib0/ports/1/gid_attrs/types/3)"
    echo "ndev3=$(cat /sys/class/infiniband/fakeib0/ports/1/gid_attrs/ndevs/3)"
    echo "numa=$(cat /sys/class/infiniband/fakeib0/device/numa_node)"
    echo "uverbs=$(cat /sys/class/infiniband_verbs/uverbs0/ibdev)"
    echo "root=$FAKEIBV_SYSFS_ROOT"
    [ -e /sys/class/net/lo ] && echo "net=ok"
' with_sysfs "$bin" 2>&1)
echo "$out"
root=$(echo "$out" | sed -n 's/^root=//p')
ok=1
echo "$out" | grep -qx "pci=$root/devices/pci0000:00/0000:f0:00.0" || ok=0
echo "$out" | grep -qx "subsystem=$root/bus/pci" || ok=0
echo "$out" | grep -qx "type3=RoCE v2" || ok=0
echo "$out" | grep -qx "ndev3=lo" || ok=0
echo "$out" | grep -qx "numa=0" || ok=0
echo "$out" | grep -qx "uverbs=fakeib0" || ok=0
echo "$out" | grep -qx "net=ok" || ok=0
if [ -z "$root" ] || [ -e "$root" ]; then echo "FAIL: with_sysfs.sh left '$root' behind"; ok=0; fi
[ -e /sys/class/infiniband/fakeib0 ] && { echo "FAIL: the bind mount leaked to the host"; ok=0; }
[ "$ok" -eq 1 ] || { echo "FAIL"; exit 1; }
echo "PASS: with_sysfs.sh shows fakeibv's tree at /sys/class/infiniband"
