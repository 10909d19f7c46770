#!/usr/bin/env bash
# rma_selftest.sh: checks rma_check (byte checks, messages, bounded waits) and
# rma_check.sh (NCCL build folder keyed on --only-funcs and its reuse, the
# gin_check build, runs, proof verdicts for ferry-socket, ferry-ib, nccl-ib
# and their gin- runs, tables, exit status) on a machine without a GPU,
# against a mock NCCL one-sided API and CUDA runtime over shared memory
# (mock_rma_nccl.c), a mock NCCL build script (mock_build_nccl.sh), a mock
# nvcc whose "gin_check" is the mock rma_check under gin_check's name
# (mock_nvcc), and the mock MPS control in this folder. gin_check.cu itself
# is compiled (not linked, not run) by the real nvcc when there is one, with
# NCCL's device headers from DIR.
#
#   bash bench/nccl/selftest/rma_selftest.sh [--nccl-src DIR]
#
# DIR is an NCCL 2.30+ source tree (default .ext/nccl-src/2.30.7-1): its
# nccl.h.in is turned into nccl.h the way NCCL's build does it, and
# rma_check.sh's NCCL build (RMA_CHECK_BUILD_NCCL) copies that mock "build"
# into its build folder (RMA_CHECK_BUILD_ROOT), so NCCL itself is not built. Needs gcc, mpicc and mpirun (Open MPI), cmake,
# CUDA headers (CUDA_HOME, default /usr/local/cuda). ferry is built into
# build-gpu/ (FNB_BUILD) and fakeibv for the ib runs, as on the GPU machine.
# Proves nothing about NCCL or ferry: that is the GPU machine's job. Prints
# "N passed, N failed".
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
NCCL_SRC=$REPO/.ext/nccl-src/2.30.7-1
[ "${1:-}" = --nccl-src ] && NCCL_SRC=${2:-}
REAL_CUDA=${CUDA_HOME:-/usr/local/cuda}
for tool in gcc mpicc mpirun cmake; do
  command -v "$tool" >/dev/null || { echo "rma_selftest.sh: $tool not found" >&2; exit 2; }
done
[ -f "$REAL_CUDA/include/cuda_runtime.h" ] || { echo "rma_selftest.sh: no CUDA headers in $REAL_CUDA" >&2; exit 2; }
[ -f "$NCCL_SRC/src/nccl.h.in" ] || { echo "rma_selftest.sh: no src/nccl.h.in under '$NCCL_SRC'" >&2; exit 2; }
WORK=$(mktemp -d /tmp/rma-selftest.XXXXXX)
export MOCK_SHM_PREFIX=/rc-mock-$$
trap 'rm -rf "$WORK"; rm -f /dev/shm"$MOCK_SHM_PREFIX"-*' EXIT
PASSED=0
FAILED=0

# shellcheck source=checks.sh
source "$HERE/checks.sh"

# A mock NCCL "build" and CUDA toolkit: nccl.h from the real nccl.h.in, the
# mock as libnccl.so and libcudart.so, an nvcc that does nothing.
mock_build() {
  local mk=$NCCL_SRC/makefiles/version.mk major minor patch flags
  major=$(sed -n 's/^NCCL_MAJOR[[:space:]]*:*=[[:space:]]*//p' "$mk")
  minor=$(sed -n 's/^NCCL_MINOR[[:space:]]*:*=[[:space:]]*//p' "$mk")
  patch=$(sed -n 's/^NCCL_PATCH[[:space:]]*:*=[[:space:]]*//p' "$mk")
  NCCL_VER=$major.$minor.$patch
  mkdir -p "$WORK/nccl/include" "$WORK/nccl/lib" "$WORK/cuda/bin" "$WORK/cuda/lib64" "$WORK/bin"
  sed -e "s/\${nccl:Major}/$major/g" -e "s/\${nccl:Minor}/$minor/g" -e "s/\${nccl:Patch}/$patch/g" \
      -e "s/\${nccl:Suffix}//g" -e "s/\${nccl:Version}/$(printf '%d%02d%02d' "$major" "$minor" "$patch")/g" \
      "$NCCL_SRC/src/nccl.h.in" >"$WORK/nccl/include/nccl.h" || return 1
  printf 'nccl %s\narch sm_90\ncuda mock\nseconds 0\n' "$NCCL_VER" >"$WORK/nccl/version.txt"
  ln -s "$REAL_CUDA/include" "$WORK/cuda/include"
  ln -s "$HERE/mock_nvcc" "$WORK/cuda/bin/nvcc"
  # A source tree of just what rma_check.sh reads (the copy it builds from).
  mkdir -p "$WORK/src/src" "$WORK/src/makefiles" && touch "$WORK/src/src/Makefile" &&
    cp "$NCCL_SRC/src/nccl.h.in" "$WORK/src/src/" && cp "$mk" "$WORK/src/makefiles/" || return 1
  ln -s "$HERE/nvidia-cuda-mps-control" "$WORK/bin/nvidia-cuda-mps-control"
  flags=(-std=c11 -shared -fPIC -O1 -Wall -Wextra -Werror -isystem "$WORK/nccl/include"
         -isystem "$REAL_CUDA/include")
  gcc "${flags[@]}" -o "$WORK/nccl/lib/libnccl.so" "$HERE/mock_rma_nccl.c" -lrt &&
    gcc "${flags[@]}" -o "$WORK/cuda/lib64/libcudart.so" "$HERE/mock_rma_nccl.c" -lrt &&
    mpicc -std=c11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
      -Wmissing-prototypes -Wformat=2 -Wwrite-strings -isystem "$WORK/nccl/include" \
      -isystem "$REAL_CUDA/include" "$HERE/../rma_check.c" -o "$WORK/rma_check" \
      -L"$WORK/nccl/lib" -Wl,-rpath,"$WORK/nccl/lib" -lnccl
}

check build 0 mock_build
[ -x "$WORK/rma_check" ] || { echo "$PASSED passed, $((FAILED + 1)) failed (no build)"; exit 1; }

# gin_check.cu compiled for real (no link, no run): NCCL's device headers as
# its build installs them (nccl_device/, and DOCA's device headers under
# nccl_device/gin/gdaki/doca_gpunetio), every warning an error, as
# rma_check.sh compiles it. Skipped without a real nvcc.
gin_compile() {
  local inc=$WORK/gin-inc doca=$NCCL_SRC/src/transport/net_ib/gdaki/doca-gpunetio/include
  local mpi
  mkdir -p "$inc/nccl_device/gin/gdaki/doca_gpunetio" &&
    cp "$WORK/nccl/include/nccl.h" "$NCCL_SRC/src/include/nccl_device.h" "$inc/" &&
    cp -r "$NCCL_SRC/src/include/nccl_device/." "$inc/nccl_device/" &&
    cp -r "$doca/doca_gpunetio_device.h" "$doca/common" "$doca/device" \
      "$inc/nccl_device/gin/gdaki/doca_gpunetio/" || return 1
  mpi=$(mpicc --showme:incdirs | awk '{ for (i = 1; i <= NF; i++) printf "-I%s ", $i }')
  # shellcheck disable=SC2086 # one -I word per MPI include folder
  "$REAL_CUDA/bin/nvcc" -std=c++17 -O2 -arch=sm_90 -Werror all-warnings \
    -Xcompiler -Wall,-Wextra,-Werror -I"$inc" $mpi -c "$HERE/../gin_check.cu" -o "$WORK/gin_check.o"
}
if [ -x "$REAL_CUDA/bin/nvcc" ]; then
  check gin-compile 0 gin_compile
  if [ -s "$WORK/gin-compile.out" ]; then
    FAILED=$((FAILED + 1)); echo "FAIL gin-compile: nvcc said something:"; head -5 "$WORK/gin-compile.out"
  else
    PASSED=$((PASSED + 1)); echo "ok   gin-compile: no warnings"
  fi
else
  echo "skip gin-compile: no $REAL_CUDA/bin/nvcc"
fi

rc_run() { # rc_run ENV... -- rma_check args: 2 ranks, bounded
  local envs=()
  while [ "$1" != -- ]; do envs+=(-x "$1"); shift; done
  shift
  timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none \
    -x MOCK_SHM_PREFIX "${envs[@]}" "$WORK/rma_check" "$@" </dev/null
}

check pass 0 rc_run MOCK_NONE=1 -- -b 8 -e 1M -m 0.01 -t 5
expect pass '^rma_check: PASS: 10 sizes'
expect pass '^perf size=1048576 iters=[0-9]* median_rtt_us='
expect pass '^check size=8 iters=2 dirs=0->1,1->0 ok'
check corrupt 1 rc_run MOCK_CORRUPT_SIZE=2048 -- -b 8 -e 8K -m 0.01 -t 5
expect corrupt -E 'MISMATCH size 2048 direction 0->1 iteration 0 offset 1024: expected 0x[0-9a-f]{2} got 0x[0-9a-f]{2}'
expect corrupt '^rma_check: FAIL: 4 wrong bytes at size 2048'
check past-end 1 rc_run MOCK_PAST_SIZE=512 -- -b 8 -e 8K -m 0.01 -t 5
expect past-end 'offset 512 (past the end of the put: must stay untouched)'
check no-signal 1 rc_run MOCK_DROP_SIGNAL_SIZE=32 -- -b 8 -e 8K -m 0.01 -t 2
expect no-signal 'FAIL rank 1: ncclWaitSignal (check), size 32, iteration 0: not done after 2 s (peer rank 0)'
check one-rank 1 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 "$WORK/rma_check"
expect one-rank 'needs exactly 2 ranks (mpirun -np 2), got 1'
check bad-size 2 "$WORK/rma_check" -e 12Q
expect bad-size "a size in bytes > 0, with K, M or G"

# rma_check.sh against the mock build: the build folder, every run, proofs,
# tables, exit status.
FUNCS="AllReduce Sum f32 * *|SendRecv"
OF_DIR=$WORK/b/nccl-$NCCL_VER-sm90-of$(printf '%s' "$FUNCS" | sha1sum | cut -c1-8)
sh_run() { # sh_run OUT ENV... -- script args
  local out=$1 envs=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env PATH="$WORK/bin:$PATH" CUDA_HOME="$WORK/cuda" RMA_CHECK_BUILD_ROOT="$WORK/b" \
    RMA_CHECK_BUILD_NCCL="$HERE/mock_build_nccl.sh" MOCK_NCCL_BUILD="$WORK/nccl" \
    MOCK_BUILD_LOG="$WORK/build.log" MOCK_NVCC_LOG="$WORK/nvcc.log" \
    RMA_CHECK_BIN="$WORK/script-bin/rma_check" MOCK_GIN_INNER="$WORK/script-bin/rma_check" \
    CUDA_MPS_PIPE_DIRECTORY="$WORK/mps" MOCK_MPS_LOG="$WORK/mps.log" "${envs[@]}" \
    timeout 600 bash "$HERE/../rma_check.sh" --nccl-src "$WORK/src" --out "$WORK/$out" \
    --min-time 0.01 --sizes 8:64K --factor 8 "$@"
}
# expect_file NAME FILE GREP_ARGS...: FILE (written by check NAME) matches.
expect_file() {
  local name=$1 file=$2
  shift 2
  if grep -q "$@" "$file" 2>/dev/null; then
    PASSED=$((PASSED + 1)); echo "ok   $name: $file: $*"
  else
    FAILED=$((FAILED + 1)); echo "FAIL $name: $file: no match for $*"
  fi
}
# count_is NAME WANT FILE GREP_ARGS...: FILE has WANT matching lines.
count_is() {
  local name=$1 want=$2 file=$3 n
  shift 3
  n=$(grep -c "$@" "$file" 2>/dev/null)
  if [ "${n:-0}" -eq "$want" ]; then
    PASSED=$((PASSED + 1)); echo "ok   $name: $want lines of $* in $(basename "$file")"
  else
    FAILED=$((FAILED + 1)); echo "FAIL $name: ${n:-0} lines of $* in $file, wanted $want"
  fi
}
check script-both 0 sh_run out-both MOCK_NONE=1 -- --backend both
expect script-both -F "building NCCL $NCCL_VER (sm_90, kernels: $FUNCS) into $OF_DIR"
expect_file script-both "$WORK/build.log" -xF "mock build_nccl: --out $OF_DIR --arch 90 --only-funcs $FUNCS"
expect_file script-both "$OF_DIR/version.txt" -xF "only-funcs $FUNCS"
# The mock toolkit's include folder is the real one; where that holds NCCL
# headers, NCCL builds with an include folder without them.
if [ -e "$REAL_CUDA/include/nccl.h" ]; then
  expect_file script-both "$WORK/build.log" -xF "mock build_nccl: CUDA_INC=$WORK/b/cuda-include-without-nccl"
  expect script-both -F "NCCL builds with CUDA_INC=$WORK/b/cuda-include-without-nccl"
  check shadow-inc 0 test -e "$WORK/b/cuda-include-without-nccl/cuda_runtime.h" -a \
    ! -e "$WORK/b/cuda-include-without-nccl/nccl.h" -a ! -e "$WORK/b/cuda-include-without-nccl/nccl_device"
else
  expect_file script-both "$WORK/build.log" -xF "mock build_nccl: CUDA_INC=unset"
fi
expect_file script-both "$WORK/nvcc.log" -E "gin_check\.cu -o $WORK/script-bin/gin_check .*-rpath -Xlinker $OF_DIR/lib -lnccl"
expect_file script-both "$WORK/nvcc.log" -E "^nvcc .*-arch=sm_90 .*-I$OF_DIR/include"
expect script-both '^- ferry-socket: bytes PASS, proof PASS'
expect script-both '^- gin-ferry-socket: bytes PASS, proof PASS'
expect script-both '^- nccl-ib: bytes PASS, proof PASS'
expect script-both '^- gin-nccl-ib: bytes PASS, proof PASS'
expect script-both '^- ferry-ib: bytes PASS, proof PASS'
expect script-both '^- gin-ferry-ib: bytes PASS, proof PASS'
# Two tables (host API, GIN), each with every column filled and both ratios.
count_is script-both 2 "$WORK/out-both/README.md" '^| size | ferry-socket GB/s | one-way us | ferry-ib GB/s | one-way us | nccl-ib (fakeibv) GB/s | one-way us | ferry-socket / nccl-ib | ferry-ib / nccl-ib |$'
count_is script-both 2 "$WORK/out-both/README.md" -E '^\| 64 KiB( \| [0-9.]+){6} \| [0-9.]+x \| [0-9.]+x \|$'
count_is script-both 1 "$WORK/out-both/perf.csv" '^gin-ferry-ib,65536,'
expect_file script-both "$WORK/out-both/proofs.txt" -E '^rma-plugin-from-ferry-lib=2 assigned-ferry=2 assigned-other=0 net-plugin-ferry=2 gin-proxy-ferry=2 gin-other=0 gin-check-ginType-2=1$'
expect_file script-both "$WORK/out-both/proofs.txt" '^env: .*NCCL_FERRY_BACKEND=ib NCCL_FERRY_IB_GDR=1 RC_IB=1'
expect_file script-both "$WORK/out-both/env.txt" -F -e "--only-funcs '$FUNCS'"
expect script-both 'MPS stopped'
# The same kernel set again: the build is reused, not redone.
check script-reuse 0 sh_run out-reuse MOCK_NONE=1 -- --backend socket --skip-gin
expect script-reuse -F "already built in $OF_DIR: reused"
count_is script-reuse 1 "$WORK/build.log" 'mock build_nccl: --out'
expect script-reuse '^- ferry-socket: bytes PASS, proof PASS'
count_is script-reuse 0 "$WORK/out-reuse/README.md" 'gin-'
# Every kernel: its own folder, build_nccl.sh without --only-funcs.
check script-all-funcs 0 sh_run out-all MOCK_NONE=1 -- --backend socket --skip-gin --only-funcs all --build-only
expect_file script-all-funcs "$WORK/build.log" -xF "mock build_nccl: --out $WORK/b/nccl-$NCCL_VER-sm90-all --arch 90 --only-funcs all"
# A folder whose version.txt names another kernel set is rebuilt.
sed -i 's/^only-funcs .*/only-funcs AllGather/' "$OF_DIR/version.txt"
check script-stale-funcs 0 sh_run out-stale MOCK_NONE=1 -- --backend socket --skip-gin --build-only
expect script-stale-funcs -F "building NCCL $NCCL_VER (sm_90, kernels: $FUNCS) into $OF_DIR"
count_is script-stale-funcs 3 "$WORK/build.log" 'mock build_nccl: --out'
# ferry's RMA not assigned on ib (NCCL fell back to its own): ferry-ib fails its proof.
check script-ib-fallback 1 sh_run out-fb MOCK_NONE=1 MOCK_RMA_FALLBACK=ib -- --backend ib
expect script-ib-fallback '^- nccl-ib: bytes PASS, proof PASS'
expect script-ib-fallback '^- ferry-ib: bytes PASS, proof FAIL'
expect script-ib-fallback '^- gin-ferry-ib: bytes PASS, proof FAIL'
expect script-ib-fallback 'ferry-ib: bytes PASS, proof FAIL (rma-plugin-from-ferry-lib=2 assigned-ferry=0 assigned-other=2 net-plugin-ferry=2)'
# No GIN assigned: the host API run passes, its gin run fails its proof.
check script-no-gin 1 sh_run out-ng MOCK_NONE=1 MOCK_NO_GIN=1 -- --backend socket
expect script-no-gin '^- ferry-socket: bytes PASS, proof PASS'
expect script-no-gin 'gin-ferry-socket: bytes PASS, proof FAIL (.* gin-proxy-ferry=0 gin-other=0 gin-check-ginType-2=0)'
check script-no-proof 1 sh_run out-np MOCK_NO_PROOF=1 -- --backend socket
expect script-no-proof 'ferry-socket: bytes PASS, proof FAIL (rma-plugin-from-ferry-lib=2 assigned-ferry=0 assigned-other=2'
check script-corrupt 1 sh_run out-cor MOCK_CORRUPT_SIZE=512 -- --backend socket
expect script-corrupt '^- ferry-socket: bytes FAIL, proof PASS'
expect script-corrupt '^- gin-ferry-socket: bytes FAIL, proof PASS'
expect_file script-corrupt "$WORK/out-cor/logs/gin-ferry-socket.log" 'gin_check: MISMATCH size 512'
check script-hang 1 sh_run out-hang MOCK_DROP_SIGNAL_SIZE=8 -- --backend socket --run-timeout 10
expect script-hang 'ferry-socket: bytes FAIL (killed after 10 s)'
expect script-hang 'gin-ferry-socket: bytes FAIL (killed after 10 s)'
# gin_check warns under another CUDA: built again with warnings allowed, run.
check script-gin-warn 0 sh_run out-gw MOCK_NONE=1 MOCK_NVCC_FAIL=strict -- --backend socket
expect script-gin-warn 'gin_check does not build warning-free'
expect script-gin-warn 'gin_check built WITH WARNINGS'
expect script-gin-warn '^- gin-ferry-socket: bytes PASS, proof PASS'
# gin_check does not build: the host API run still runs, the gin run fails.
check script-gin-nobuild 1 sh_run out-gnb MOCK_NONE=1 MOCK_NVCC_FAIL=all -- --backend socket
expect script-gin-nobuild 'gin_check build failed (log: '
expect script-gin-nobuild '^- ferry-socket: bytes PASS, proof PASS'
expect script-gin-nobuild '^- gin-ferry-socket: bytes FAIL (gin_check did not build: logs/build-gin-check.log), proof FAIL'
check script-gin-nobuild-only 1 sh_run out-gnbo MOCK_NONE=1 MOCK_NVCC_FAIL=all -- --backend socket --build-only
# A tree whose nccl.h.in has no one-sided API (as NCCL before 2.29).
mkdir -p "$WORK/old/src" "$WORK/old/makefiles" && touch "$WORK/old/src/Makefile" "$WORK/old/src/nccl.h.in" &&
  cp "$NCCL_SRC/makefiles/version.mk" "$WORK/old/makefiles/"
check script-old-nccl 2 sh_run out-old MOCK_NONE=1 -- --nccl-src "$WORK/old"
expect script-old-nccl 'declares no ncclPutSignal'

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
