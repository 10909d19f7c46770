#!/usr/bin/env bash
# Stand-in for build_nccl.sh, for rma_selftest.sh: takes its arguments, logs
# them to $MOCK_BUILD_LOG, and "builds" by copying the mock NCCL in
# $MOCK_NCCL_BUILD (include/, lib/) into --out, with the version.txt the real
# script writes (nccl, arch, only-funcs lines).
set -u
src='' out='' arch=90 only=all
while [ $# -gt 0 ]; do
  case $1 in
    --src) src=$2; shift ;;
    --out) out=$2; shift ;;
    --arch) arch=$2; shift ;;
    -j) shift ;;
    --only-funcs) only=$2; shift ;;
    *) echo "mock build_nccl: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -f "$src/makefiles/version.mk" ] || { echo "mock build_nccl: no $src/makefiles/version.mk" >&2; exit 2; }
echo "mock build_nccl: --out $out --arch $arch --only-funcs $only" | tee -a "${MOCK_BUILD_LOG:-/dev/null}" >&2
echo "mock build_nccl: CUDA_INC=${CUDA_INC:-unset}" >>"${MOCK_BUILD_LOG:-/dev/null}"
mkdir -p "$out" && cp -a "$MOCK_NCCL_BUILD/include" "$MOCK_NCCL_BUILD/lib" "$out/" || exit 1
v() { sed -n "s/^$1[[:space:]]*:*=[[:space:]]*\([0-9]*\).*/\1/p" "$src/makefiles/version.mk"; }
printf 'nccl %s.%s.%s\narch sm_%s\nonly-funcs %s\ncuda mock\nseconds 0\n' \
  "$(v NCCL_MAJOR)" "$(v NCCL_MINOR)" "$(v NCCL_PATCH)" "$arch" "$only" >"$out/version.txt"
