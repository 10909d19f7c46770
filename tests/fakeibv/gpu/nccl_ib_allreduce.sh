#!/bin/bash
# NCCL's own IB transport over fakeibv on the GPU machine: 2 processes on
# GPU 0, all_reduce sums checked, in two modes:
#   host : fakeibv offers no DMA-BUF -> NCCL stages through host memory
#   gdr  : fakeibv offers DMA-BUF, NCCL_NET_GDR_LEVEL=SYS -> NCCL registers
#          GPU buffers and fakeibv moves them with cuMemcpy (GPU mode);
#          NCCL_NET_FORCE_FLUSH=1 makes NCCL issue its flush READ too
#   roce : as host over FAKEIBV_LINK=eth, each rank under test/with_sysfs.sh
#          and no NCCL_IB_GID_INDEX: NCCL must pick GID 3 (RoCE v2, IPv4)
#          itself from /sys/class/infiniband/.../gid_attrs/types (root only)
# plus a verbs-only GPU self-test of fakeibv (no NCCL).
#
# usage: tests/fakeibv/gpu/nccl_ib_allreduce.sh [host|gdr|roce|selftest ...]
#   env NCCL_LIB_DIR=<dir with libnccl.so.2>  (default: system NCCL 2.28.3;
#       e.g. /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib for 2.28.9)
#   env MAX_FLOATS=<n>  largest all_reduce (default 16M floats = 64 MiB)
#   env KEEP=1          keep the work folder with all logs
# Needs: cmake, a C compiler, CUDA (nvcc or gcc + CUDA headers), NCCL headers.
# Prints a PASS/FAIL line per mode and a summary; exit 0 only if all pass.
set -u
case "${1:-}" in -h|--help) sed -n '2,16p' "$0"; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)                     # tests/fakeibv
modes=${*:-selftest host gdr roce}
work=${WORK:-$(mktemp -d /tmp/fakeibv-gpu.XXXXXX)}
mkdir -p "$work"
max_floats=${MAX_FLOATS:-16777216}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
declare -A result

log() { printf '[%s] %s\n' "$(date +%T)" "$*"; }

mps_started=0
# shellcheck disable=SC2317 # Called through the EXIT trap.
cleanup() {
    if [ "$mps_started" = 1 ]; then
        echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    fi
    [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

# ---- build fakeibv (standalone CMake project: no dependency on ferry) ----
log "building fakeibv in $work/build"
if ! cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/cmake.log" 2>&1 ||
   ! cmake --build "$work/build" -j8 --target fakeibv >>"$work/cmake.log" 2>&1; then
    cat "$work/cmake.log"
    echo "FAIL: fakeibv did not build"
    exit 1
fi
fakelib="$work/build/fakeibv/lib"
if [ ! -e "$fakelib/libibverbs.so" ] || [ ! -e "$fakelib/libibverbs.so.1" ]; then
    echo "FAIL: no $fakelib/libibverbs.so{,.1}"
    exit 1
fi

# ---- build the test programs ----
cc_cuda() { # out src extra-args...
    local out=$1 in=$2; shift 2
    if command -v nvcc >/dev/null; then
        nvcc -O2 -o "$out" "$in" "$@"
    else
        gcc -O2 -std=gnu11 -I"$cuda_home/include" -o "$out" "$in" -L"$cuda_home/lib64" "$@" -lcudart
    fi
}
nccl_ldflags=()
if [ -n "${NCCL_LIB_DIR:-}" ]; then
    nccl_ldflags=(-L"$NCCL_LIB_DIR" -Xlinker -rpath -Xlinker "$NCCL_LIB_DIR")
    # shellcheck disable=SC2054 # -Wl,-rpath,DIR is one argument.
    command -v nvcc >/dev/null || nccl_ldflags=(-L"$NCCL_LIB_DIR" -Wl,-rpath,"$NCCL_LIB_DIR")
    [ -e "$NCCL_LIB_DIR/libnccl.so" ] || ln -sf "$NCCL_LIB_DIR/libnccl.so.2" "$work/libnccl.so"
    nccl_ldflags+=(-L"$work")
fi
log "compiling test programs"
: >"$work/cc.log"
case " $modes " in
*" host "*|*" gdr "*|*" roce "*)
    if ! cc_cuda "$work/nccl_allreduce" "$here/nccl_allreduce.c" "${nccl_ldflags[@]}" -lnccl >>"$work/cc.log" 2>&1; then
        cat "$work/cc.log"; echo "FAIL: nccl_allreduce did not compile"; exit 1
    fi ;;
esac
if ! cc_cuda "$work/fakeibv_gpu_selftest" "$here/fakeibv_gpu_selftest.c" -I"$src" -I"$src/../../include" -L"$fakelib" -libverbs >>"$work/cc.log" 2>&1; then
    cat "$work/cc.log"; echo "FAIL: fakeibv_gpu_selftest did not compile"; exit 1
fi

# ---- CUDA MPS, so the two ranks' kernels run concurrently on one GPU ----
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mpslog}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d 2>/dev/null; then
    mps_started=1
    log "MPS started"
else
    log "MPS not started (already running, or not available); continuing"
fi

# ---- one 2-rank run ----
run_nccl() { # mode
    local mode=$1 dir="$work/$1" r pids=() rc=0 wrap=()
    mkdir -p "$dir"
    # roce: each rank in its own mount namespace showing its fakeibv sysfs
    # tree at /sys/class/infiniband, where NCCL looks for the GID types.
    [ "$mode" = roce ] && wrap=("$src/test/with_sysfs.sh")
    rm -f "$dir/id"
    for r in 0 1; do
        (
            export LD_LIBRARY_PATH="$fakelib${NCCL_LIB_DIR:+:$NCCL_LIB_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            # NCCL_GIN_TYPE=2: NCCL 2.28.9 crashes at init when no device is mlx5
            # (its GIN probe calls through a sentinel pointer); see ../README.md.
            export NCCL_HOSTID=host$r NCCL_NET=IB NCCL_IB_DISABLE=0 NCCL_NVLS_ENABLE=0 NCCL_GIN_TYPE=2
            export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV
            export NCCL_SOCKET_IFNAME=lo NCCL_IB_HCA=fakeib0
            export FAKEIBV_RETRY_TIMEOUT_MS=15000   # a stuck peer fails in 15 s, not 34 s
            if [ "$mode" = roce ]; then
                export FAKEIBV_LINK=eth FAKEIBV_DMABUF=0 NCCL_NET_GDR_LEVEL=LOC
                unset NCCL_IB_GID_INDEX
            elif [ "$mode" = gdr ]; then
                # FORCE_FLUSH: Hopper needs no flush, so without it NCCL never
                # issues the 1-byte RDMA READ from GPU memory; force it.
                export FAKEIBV_DMABUF=1 NCCL_NET_GDR_LEVEL=SYS NCCL_DMABUF_ENABLE=1 NCCL_NET_FORCE_FLUSH=1
            else
                export FAKEIBV_DMABUF=0 NCCL_NET_GDR_LEVEL=LOC
            fi
            exec timeout 150 "${wrap[@]}" "$work/nccl_allreduce" $r 2 "$dir/id" "$max_floats"
        ) >"$dir/rank$r.log" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do
        wait "${pids[$r]}" || { echo "  rank $r exited $?"; rc=1; }
    done
    for r in 0 1; do
        grep -q "DONE rank $r: OK" "$dir/rank$r.log" || { echo "  rank $r: sums not confirmed"; rc=1; }
        grep -q "via NET/IB" "$dir/rank$r.log" || { echo "  rank $r: no 'via NET/IB' channel in the log"; rc=1; }
        grep -q "fakeib0" "$dir/rank$r.log" || { echo "  rank $r: NCCL never named fakeib0"; rc=1; }
    done
    if [ "$mode" = roce ]; then
        for r in 0 1; do
            grep -Eq "qpn [0-9]+ mtu [0-9]+ GID 3 \(" "$dir/rank$r.log" ||
                { echo "  rank $r: NCCL did not choose GID index 3 by itself"; rc=1; }
            if grep -q "ncclIbRoceGetVersionNum" "$dir/rank$r.log"; then
                echo "  rank $r: NCCL could not read gid_attrs/types"; rc=1
            fi
        done
    fi
    if [ "$mode" = gdr ]; then
        grep -q "via NET/IB/[0-9]*/GDRDMA" "$dir/rank0.log" "$dir/rank1.log" ||
            { echo "  no GDRDMA channel: NCCL did not put GPU buffers on the NIC (see DMA-BUF lines below)"; rc=1; }
    else
        if grep -q "GDRDMA" "$dir/rank0.log" "$dir/rank1.log"; then
            echo "  host mode unexpectedly used GDRDMA"; rc=1
        fi
    fi
    grep -h -E "via NET/IB|NET/IB : Using|DMA-BUF|DmaBuf|GDR|RESULT|DONE|FAIL|WARN" "$dir"/rank*.log | sort | uniq -c | sort -rn | head -25 | sed 's/^/  | /'
    if [ $rc -ne 0 ]; then
        for r in 0 1; do echo "  ---- tail of rank$r.log ----"; tail -40 "$dir/rank$r.log" | sed 's/^/  | /'; done
    fi
    return $rc
}

run_selftest() {
    LD_LIBRARY_PATH="$fakelib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKEIBV_DEBUG=1 \
        timeout 120 "$work/fakeibv_gpu_selftest" >"$work/selftest.log" 2>&1
    local rc=$?
    sed 's/^/  | /' "$work/selftest.log" | grep -v "^  | fakeibv\[.*qpn" | head -20
    grep -q "GPU mode on" "$work/selftest.log" || { echo "  fakeibv did not load libcuda.so.1"; rc=1; }
    return $rc
}

for m in $modes; do
    log "mode $m"
    t0=$(date +%s)
    case $m in
    selftest) run_selftest ;;
    host|gdr) run_nccl "$m" ;;
    roce)
        if [ "$(id -u)" -ne 0 ]; then
            echo "  SKIP: roce needs root (test/with_sysfs.sh bind-mounts sysfs)"
            result[$m]=SKIP
            continue
        fi
        run_nccl "$m" ;;
    *) echo "unknown mode $m (use selftest, host, gdr, roce)"; false ;;
    esac
    if [ $? -eq 0 ]; then result[$m]=PASS; else result[$m]=FAIL; fi
    log "mode $m: ${result[$m]} ($(( $(date +%s) - t0 )) s)"
done

echo "================ fakeibv GPU summary ================"
all=0
for m in $modes; do
    printf '%-9s %s\n' "$m" "${result[$m]}"
    [ "${result[$m]}" = PASS ] || [ "${result[$m]}" = SKIP ] || all=1
done
[ "${KEEP:-0}" = 1 ] && echo "logs kept in $work"
if [ $all -eq 0 ]; then echo "OVERALL: PASS"; else echo "OVERALL: FAIL (rerun with KEEP=1 to keep all logs)"; fi
exit $all
