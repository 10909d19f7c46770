#!/usr/bin/env bash
# rma_check.sh: NCCL's host one-sided API (ncclPutSignal / ncclWaitSignal on
# symmetric windows, NCCL >= 2.30) and its Device API's GIN (a kernel's puts
# with signals, through NCCL's GIN CPU proxy) over ferry's RMA plugin,
# checked byte for byte and timed, on a GPU machine (one GPU: the 2 ranks
# share it under MPS, each its own NCCL_HOSTID, so NCCL sees two nodes and its
# RMA goes through the RMA plugin's CPU proxy instead of a copy engine).
#
#   bench/nccl/rma_check.sh --nccl-src DIR [--out DIR] [--backend socket|ib|both]
#                           [--commit ID] [--build-only] [--sizes 8:64M] [--factor 4]
#                           [--min-time 0.2] [--run-timeout 150] [--build-budget S]
#                           [--only-funcs SPEC|all] [--skip-gin]
#
# DIR is an NCCL source tree of release 2.30 or later (its top folder). It is
# built for the GPU's own architecture into
# bench/nccl/build/nccl-<version>-sm<arch>-<funcs> (ignored by git) unless a
# finished build of that release, architecture and kernel set is there
# already (its version.txt says so), from a copy of DIR made once into
# bench/nccl/build/nccl-src-<version>, so an interrupted build resumes where
# it stopped. --only-funcs SPEC builds only the collective kernels SPEC names
# (build_nccl.sh --only-funcs; default "AllReduce Sum f32 * *|SendRecv", a
# few minutes); "all" builds every kernel (most of an hour). <funcs> is "all"
# or "of" and 8 hex digits of SPEC's sha1. ferry is built from this checkout
# into build-gpu/, tests/fakeibv too for the ib runs, bench/nccl/rma_check.c
# with the C compiler and bench/nccl/gin_check.cu with nvcc, both against the
# NCCL built (rpath to it). --build-only stops after the builds (one call
# builds, a second on the same warm machine runs). --build-budget S
# interrupts the NCCL build after S seconds (SIGINT: make removes what it had
# half written) and exits 3: the same command again resumes it.
#
# Runs (each one mpirun of 2 ranks, bounded by --run-timeout seconds; every
# wait inside rma_check and gin_check is bounded too):
#   socket  ferry-socket: ferry as net plugin and RMA plugin, socket backend
#           over lo (NCCL_FERRY_BACKEND=socket, NCCL_FERRY_GPU_STAGING=1: the
#           windows are GPU memory, staged through pinned host copies).
#   ib      nccl-ib: the baseline, NCCL's own IB transport and its own RMA
#           (RMA_IB_PROXY) on the emulated verbs device (tests/fakeibv, DMA-BUF
#           on, so GPU windows register), no net plugin and NCCL_RMA_PLUGIN=none.
#           NCCL_RMA_PLUGIN=none only drops the default libnccl-rma.so: NCCL
#           2.30 still asks the net plugin's library for an RMA plugin
#           (src/plugin/rma.cc), so the baseline loads no net plugin at all.
#           ferry-ib: ferry as net plugin and RMA plugin on its ib backend over
#           fakeibv (DMA-BUF on: NCCL registers the GPU windows through
#           regMrSymDmaBuf; NCCL_FERRY_IB_GDR=1 keeps regMrSym of CUDA memory
#           as its fallback, since fakeibv has no peer-memory module to find;
#           its GPU mode moves the bytes with the CUDA driver).
#   both    all three (default).
# Proof of a ferry run: NCCL loaded the RMA plugin from ferry's library,
# assigned "ferry" to every communicator and no other RMA plugin; of nccl-ib:
# RMA_IB_PROXY assigned and no net plugin loaded.
# Unless --skip-gin, each run X is followed by gin-X: bench/nccl/gin_check,
# a kernel per rank putting into the peer's window with a GIN signal and
# waiting on its own, same environment. Its proof adds NCCL's GIN lines: the
# GIN proxy (type 2) assigned to every communicator under the RMA plugin's
# name (NCCL's GIN proxy takes it: "ferry" or "RMA_IB_PROXY"), no other GIN,
# and gin_check's own report of the communicator's ginType=2.
# Every run sets NCCL_GIN_TYPE=2: NCCL's symmetric memory across nodes needs
# a GIN, and the one it can have here is its GIN proxy over the RMA plugin
# (the GDAKI probe wants an mlx5 device). Where fakeibv's emulation lacks
# something NCCL's IB RMA needs, nccl-ib fails, its proof says so, the table
# shows "n/a" for the baseline and the script exits 1; --backend socket
# leaves the ib runs out.
#
# Output (DIR, default $OUT, else bench/results/<date>-rma): README.md (the
# verdicts and two tables, host API and GIN: per size GB/s and one-way us of
# ferry-socket, ferry-ib and nccl-ib, and each ferry run over nccl-ib),
# perf.csv (every timed size of every run), proofs.txt (per run: verdict,
# counted log lines, excerpt), runs.tsv, env.txt, logs/.
# Exit 0 only when every run asked for passed its byte checks and its proof.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NCCL_SRC=
OUT_ARG=
BACKEND=both
COMMIT=
BUILD_ONLY=0
SIZES=8:64M
FACTOR=4
MIN_TIME=0.2
RUN_TIMEOUT=150
BUILD_BUDGET=
ONLY_FUNCS="AllReduce Sum f32 * *|SendRecv"
SKIP_GIN=0

usage() { sed -n '2,69p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --nccl-src) NCCL_SRC=${2:-}; shift ;;
    --out) OUT_ARG=${2:-}; shift ;;
    --backend) BACKEND=${2:-}; shift ;;
    --commit) COMMIT=${2:-}; shift ;;
    --build-only) BUILD_ONLY=1 ;;
    --sizes) SIZES=${2:-}; shift ;;
    --factor) FACTOR=${2:-}; shift ;;
    --min-time) MIN_TIME=${2:-}; shift ;;
    --run-timeout) RUN_TIMEOUT=${2:-}; shift ;;
    --build-budget) BUILD_BUDGET=${2:-}; shift ;;
    --only-funcs) ONLY_FUNCS=${2:-}; shift ;;
    --skip-gin) SKIP_GIN=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "rma_check.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

die_usage() { echo "rma_check.sh: $*" >&2; exit 2; }
[ -n "$NCCL_SRC" ] || die_usage "--nccl-src DIR is required (an NCCL 2.30+ source tree)"
{ [ -f "$NCCL_SRC/src/Makefile" ] && [ -f "$NCCL_SRC/makefiles/version.mk" ]; } ||
  die_usage "--nccl-src: '$NCCL_SRC' holds no src/Makefile and makefiles/version.mk (not an NCCL tree)"
grep -q ncclPutSignal "$NCCL_SRC/src/nccl.h.in" 2>/dev/null ||
  die_usage "--nccl-src: '$NCCL_SRC/src/nccl.h.in' declares no ncclPutSignal (NCCL 2.30 or later is needed)"
case $BACKEND in socket|ib|both) ;; *) die_usage "--backend is socket, ib or both" ;; esac
case $SIZES in [0-9]*:[0-9]*) ;; *) die_usage "--sizes is FIRST:LAST (e.g. 8:64M)" ;; esac
case $FACTOR in 2|4|8|16) ;; *) die_usage "--factor is 2, 4, 8 or 16" ;; esac
case $MIN_TIME in ''|*[!0-9.]*) die_usage "--min-time needs seconds (e.g. 0.2)" ;; esac
case $RUN_TIMEOUT in [1-9][0-9]|[1-5][0-9][0-9]) ;; *) die_usage "--run-timeout needs whole seconds, 10-599" ;; esac
case $BUILD_BUDGET in ''|[1-9][0-9]|[1-9][0-9][0-9]|[1-9][0-9][0-9][0-9]) ;;
  *) die_usage "--build-budget needs whole seconds, 10-9999" ;; esac
[ -n "$ONLY_FUNCS" ] || die_usage "--only-funcs needs a SPEC (NCCL's ONLY_FUNCS, e.g. \"AllReduce Sum f32 * *|SendRecv\") or all"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || die_usage "no nvcc in $CUDA_HOME/bin (set CUDA_HOME): NCCL's build needs it"
command -v mpirun >/dev/null || die_usage "mpirun not found (Open MPI)"

OUTDIR=$(fnb_outdir "${OUT_ARG:-${OUT:-$FNB_REPO/bench/results/$(date +%Y-%m-%d)-rma}}") || exit 2
LOGS=$OUTDIR/logs
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0

# ---- builds ------------------------------------------------------------------

mk_var() { sed -n "s/^$1[[:space:]]*:*=[[:space:]]*\([0-9]*\).*/\1/p" "$NCCL_SRC/makefiles/version.mk" | head -1; }
NCCL_VER="$(mk_var NCCL_MAJOR).$(mk_var NCCL_MINOR).$(mk_var NCCL_PATCH)"
NCCL_CODE=$(( $(mk_var NCCL_MAJOR) * 10000 + $(mk_var NCCL_MINOR) * 100 + $(mk_var NCCL_PATCH) ))
ARCH=$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
case $ARCH in ''|*[!0-9]*) fnb_log "cannot read the GPU's compute capability; building for sm_90"; ARCH=90 ;; esac
# The build folder names the kernel set: a build of another set is another folder.
if [ "$ONLY_FUNCS" = all ]; then
  FUNCS_TAG=all
else
  FUNCS_TAG=of$(printf '%s' "$ONLY_FUNCS" | sha1sum | cut -c1-8)
fi
# Overrides for the selftest (bench/nccl/selftest/rma_selftest.sh):
# RMA_CHECK_BUILD_ROOT the folder of the NCCL builds and source copy,
# RMA_CHECK_BUILD_NCCL the NCCL build script, RMA_CHECK_NCCL_OUT another NCCL
# build folder, RMA_CHECK_BIN and GIN_CHECK_BIN where rma_check and
# gin_check are built.
BUILD_ROOT=${RMA_CHECK_BUILD_ROOT:-$FNB_DIR/build}
BUILD_NCCL=${RMA_CHECK_BUILD_NCCL:-$FNB_DIR/build_nccl.sh}
NCCL_OUT=${RMA_CHECK_NCCL_OUT:-$BUILD_ROOT/nccl-$NCCL_VER-sm$ARCH-$FUNCS_TAG}
NCCL_COPY=$BUILD_ROOT/nccl-src-$NCCL_VER
RC_BIN=${RMA_CHECK_BIN:-$FNB_DIR/build/rma_check/rma_check}
GC_BIN=${GIN_CHECK_BIN:-$(dirname "$RC_BIN")/gin_check}

build_nccl() {
  if [ -f "$NCCL_OUT/version.txt" ] && [ -e "$NCCL_OUT/lib/libnccl.so" ] &&
     grep -qx "nccl $NCCL_VER" "$NCCL_OUT/version.txt" && grep -qx "arch sm_$ARCH" "$NCCL_OUT/version.txt" &&
     grep -qxF "only-funcs $ONLY_FUNCS" "$NCCL_OUT/version.txt"; then
    fnb_log "NCCL $NCCL_VER for sm_$ARCH (kernels: $ONLY_FUNCS) already built in $NCCL_OUT: reused"
    return 0
  fi
  # Built from a copy made once: a source tree carried anew for each call gets
  # new timestamps, and make would then redo an interrupted build from scratch.
  if [ ! -f "$NCCL_COPY/.rma-check-copied" ]; then
    if ! { rm -rf "$NCCL_COPY" && mkdir -p "$NCCL_COPY" && cp -a "$NCCL_SRC/." "$NCCL_COPY/" &&
           touch "$NCCL_COPY/.rma-check-copied"; }; then
      fnb_log "cannot copy $NCCL_SRC to $NCCL_COPY"
      return 1
    fi
  fi
  local only=() cuda_inc=() inc e
  [ "$ONLY_FUNCS" = all ] || only=(--only-funcs "$ONLY_FUNCS")
  # A CUDA toolkit that ships an NCCL's headers (nccl.h, nccl_device/ in its
  # include folder) shadows the tree's own: NCCL's host compiles put
  # -I$(CUDA_INC) before its include folder and fail on the older headers.
  # Such a toolkit gets an include folder of its own without them (CUDA_INC,
  # which NCCL's makefiles take from the environment).
  if [ -e "$CUDA_HOME/include/nccl.h" ] || [ -e "$CUDA_HOME/include/nccl_device" ]; then
    inc=$BUILD_ROOT/cuda-include-without-nccl
    rm -rf "$inc" && mkdir -p "$inc" || return 1
    for e in "$CUDA_HOME"/include/*; do
      case ${e##*/} in nccl*.h|nccl_device) continue ;; esac
      ln -s "$(readlink -f "$e")" "$inc/${e##*/}" || return 1
    done
    cuda_inc=(env "CUDA_INC=$inc")
    fnb_log "$CUDA_HOME/include holds NCCL headers (nccl.h version code $(sed -n 's/^#define NCCL_VERSION_CODE[[:space:]]*//p' "$CUDA_HOME/include/nccl.h" 2>/dev/null)): NCCL builds with CUDA_INC=$inc, the toolkit's headers without them"
  fi
  fnb_log "building NCCL $NCCL_VER (sm_$ARCH, kernels: $ONLY_FUNCS) into $NCCL_OUT: the long step${BUILD_BUDGET:+ (at most $BUILD_BUDGET s)}"
  # One source copy serves every kernel set: make's objects live in NCCL_OUT.
  # timeout signals its whole process group, make and the compilers included.
  timeout -s INT -k 30 "${BUILD_BUDGET:-0}" \
    "${cuda_inc[@]}" bash "$BUILD_NCCL" --src "$NCCL_COPY" --out "$NCCL_OUT" --arch "$ARCH" -j "$(nproc)" "${only[@]}" \
    2>"$LOGS/build-nccl.log"
}

# rma_check against the NCCL just built; the rpath makes it load that one, not the system's.
build_rma_check() {
  local mpi cc=mpicc mpiflags=()
  if ! command -v mpicc >/dev/null; then
    mpi=$(fnb_mpi_home) || { fnb_log "no mpicc and no mpi.h found (set MPI_HOME)"; return 1; }
    cc=gcc
    mpiflags=(-isystem "$mpi/include" -L"$mpi/lib" "-Wl,-rpath,$mpi/lib" -lmpi)
  fi
  mkdir -p "$(dirname "$RC_BIN")"
  "$cc" -std=c11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
    -Wmissing-prototypes -Wformat=2 -Wwrite-strings \
    -isystem "$NCCL_OUT/include" -isystem "$CUDA_HOME/include" "$FNB_DIR/rma_check.c" -o "$RC_BIN" \
    -L"$NCCL_OUT/lib" -Wl,-rpath,"$NCCL_OUT/lib" -lnccl \
    -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart "${mpiflags[@]}" \
    >"$LOGS/build-rma-check.log" 2>&1 || { cat "$LOGS/build-rma-check.log" >&2; return 1; }
}

# Open MPI's compile and link words as nvcc takes them.
nvcc_mpi_flags() {
  local mpi w words
  if command -v mpicc >/dev/null; then
    words="$(mpicc --showme:compile) $(mpicc --showme:link)" || return 1
  else
    mpi=$(fnb_mpi_home) || return 1
    words="-I$mpi/include -L$mpi/lib -Wl,-rpath,$mpi/lib -lmpi"
  fi
  for w in $words; do
    case $w in
      -I*|-L*|-l*|-D*) echo "$w" ;;
      -Wl,*) echo "-Xlinker"; echo "${w#-Wl,}" ;;
      *) echo "-Xcompiler"; echo "$w" ;;
    esac
  done
}

# gin_check (a CUDA program: its kernels use NCCL's device headers) with nvcc,
# for this GPU's architecture. NCCL's include folder goes first with -I: the
# CUDA toolkit's include folder may hold an older nccl.h.
build_gin_check() {
  local mpiflags=()
  mapfile -t mpiflags < <(nvcc_mpi_flags)
  if [ "${#mpiflags[@]}" -eq 0 ]; then
    fnb_log "no mpicc and no mpi.h found for gin_check (set MPI_HOME)"
    return 1
  fi
  mkdir -p "$(dirname "$GC_BIN")"
  local common=(-std=c++17 -O2 -g -arch="sm_$ARCH" -I"$NCCL_OUT/include" "$FNB_DIR/gin_check.cu"
                -o "$GC_BIN" -L"$NCCL_OUT/lib" -Xlinker -rpath -Xlinker "$NCCL_OUT/lib" -lnccl
                "${mpiflags[@]}")
  "$CUDA_HOME/bin/nvcc" -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror "${common[@]}" \
    >"$LOGS/build-gin-check.log" 2>&1 && return 0
  tail -n 20 "$LOGS/build-gin-check.log" >&2
  # Another CUDA than the one it was written against may warn in NCCL's
  # headers: the GPU time is better spent running it than stopping here.
  fnb_log "gin_check does not build warning-free (above); building it with warnings allowed"
  "$CUDA_HOME/bin/nvcc" -Xcompiler -Wall,-Wextra "${common[@]}" >>"$LOGS/build-gin-check.log" 2>&1 ||
    { tail -n 20 "$LOGS/build-gin-check.log" >&2; return 1; }
  fnb_log "gin_check built WITH WARNINGS: see $LOGS/build-gin-check.log"
}

record_env() {
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if [ -n "$COMMIT" ]; then
      echo "commit: $COMMIT (given: the tree ran as a copy)"
    else
      echo "commit: $(git -C "$FNB_REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
      echo "dirty-files: $(git -C "$FNB_REPO" status --porcelain 2>/dev/null | grep -vc '^??')"
    fi
    echo "host: $(uname -r), $(nproc) CPUs"
    echo "gpu: $(timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "cuda: $("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "nccl: $NCCL_VER from $NCCL_SRC, built for sm_$ARCH (kernels: $ONLY_FUNCS) in $NCCL_OUT"
    [ -f "$NCCL_OUT/version.txt" ] && sed 's/^/nccl-build: /' "$NCCL_OUT/version.txt"
    echo "mpirun: $(mpirun --version 2>/dev/null | head -1)"
    echo "command: bench/nccl/rma_check.sh --nccl-src $NCCL_SRC --backend $BACKEND --sizes $SIZES --factor $FACTOR --min-time $MIN_TIME --run-timeout $RUN_TIMEOUT --only-funcs '$ONLY_FUNCS'$([ "$SKIP_GIN" = 1 ] && echo ' --skip-gin')"
  } >"$OUTDIR/env.txt"
}

build_start=$SECONDS
build_nccl
brc=$?
if [ $brc -eq 124 ] || [ $brc -eq 137 ]; then
  fnb_log "NCCL build interrupted after --build-budget $BUILD_BUDGET s; run the same command again to resume it"
  exit 3
elif [ $brc -ne 0 ]; then
  tail -n 30 "$LOGS/build-nccl.log" >&2
  fnb_log "NCCL build failed (logs: $LOGS/build-nccl.log, $NCCL_OUT/build.log)"
  exit 1
fi
fnb_build_ferry "$LOGS/build-ferry.log" || { fnb_log "ferry build failed"; exit 1; }
if [ "$BACKEND" != socket ]; then
  fnb_build_fakeibv "$LOGS/build-fakeibv.log" || { fnb_log "fakeibv build failed"; exit 1; }
fi
build_rma_check || { fnb_log "rma_check build failed"; exit 1; }
# A gin_check that does not build fails the gin runs, not the host API's.
GIN_BUILT=1
if [ "$SKIP_GIN" = 0 ] && ! build_gin_check; then
  GIN_BUILT=0
  fnb_log "gin_check build failed (log: $LOGS/build-gin-check.log): the gin runs will fail"
fi
fnb_log "builds done in $((SECONDS - build_start)) s"
record_env
if [ "$BUILD_ONLY" = 1 ]; then
  fnb_log "--build-only: NCCL in $NCCL_OUT, ferry $FNB_PLUGIN, rma_check $RC_BIN$([ "$SKIP_GIN" = 0 ] && echo ", gin_check $GC_BIN")"
  [ "$GIN_BUILT" = 1 ]
  exit
fi

# ---- runs --------------------------------------------------------------------

fnb_mps_start || exit 1
trap fnb_mps_stop EXIT

# The rank wrapper: each rank its own host identity, both on GPU 0; on fakeibv
# each rank also sees the emulated device's sysfs tree.
WRAP=$LOGS/rank.sh
# shellcheck disable=SC2016 # the rank script expands these
{
  echo '#!/bin/bash'
  echo 'export NCCL_HOSTID=host$OMPI_COMM_WORLD_RANK NCCL_TESTS_DEVICE=0'
  echo 'if [ "${RC_IB:-0}" = 1 ]; then exec '"$FNB_REPO"'/tests/fakeibv/test/with_sysfs.sh "$@"; fi'
  echo 'exec "$@"'
} >"$WRAP"
chmod +x "$WRAP"

# The environment of one run (X or gin-X), as NAME=value words.
run_env() {
  local ib="RC_IB=1 LD_LIBRARY_PATH=${FNB_FAKEIBV_DIR:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FAKEIBV_DMABUF=1 NCCL_NET_GDR_LEVEL=SYS"
  case ${1#gin-} in
    ferry-socket) echo "NCCL_NET_PLUGIN=$FNB_PLUGIN NCCL_NET=ferry NCCL_FERRY_BACKEND=socket NCCL_FERRY_GPU_STAGING=1" ;;
    nccl-ib) echo "NCCL_NET_PLUGIN=none NCCL_NET=IB NCCL_RMA_PLUGIN=none $ib" ;;
    ferry-ib) echo "NCCL_NET_PLUGIN=$FNB_PLUGIN NCCL_NET=ferry NCCL_FERRY_BACKEND=ib NCCL_FERRY_IB_GDR=1 $ib" ;;
  esac
}

# rma_proof RUN LOG: whose RMA (and, for gin-X, whose GIN) NCCL assigned to
# the communicators, and whether that is the one RUN must use. One line of
# counts; 0 when it holds.
rma_proof() {
  local run=$1 log=$2 base=${1#gin-} want loaded assigned other net gin ginother gintype
  case $base in nccl-ib) want=RMA_IB_PROXY ;; *) want=ferry ;; esac
  loaded=$(grep -c 'RMA/Plugin: Successfully loaded external plugin .*libnccl-net-ferry' "$log")
  assigned=$(grep -c "RMA/Plugin: Assigned plugin $want to comm" "$log")
  other=$(grep 'RMA/Plugin: Assigned plugin' "$log" | grep -vc "Assigned plugin $want to comm")
  net=$(grep -cE 'NET/Plugin: Loaded net plugin ferry|Successfully loaded external network plugin .*ferry' "$log")
  printf 'rma-plugin-from-ferry-lib=%s assigned-%s=%s assigned-other=%s net-plugin-ferry=%s' \
    "$loaded" "$want" "$assigned" "$other" "$net"
  # NCCL's GIN proxy is named after the RMA plugin it drives (src/gin/gin_host_proxy.cc).
  gin=$(grep -c "GIN/Plugin: Assigned plugin $want type 2 to comm" "$log")
  ginother=$(grep 'GIN/Plugin: Assigned plugin' "$log" | grep -vc "Assigned plugin $want type 2 to comm")
  gintype=$(grep -c '^gin_check: deviceApiSupport=1 ginType=2' "$log")
  [ "$run" = "$base" ] || printf ' gin-proxy-%s=%s gin-other=%s gin-check-ginType-2=%s' \
    "$want" "$gin" "$ginother" "$gintype"
  echo
  # Each of the 2 ranks assigns an RMA plugin (and a GIN) to its communicator.
  if [ "$assigned" -lt 2 ] || [ "$other" -ne 0 ]; then return 1; fi
  if [ "$run" != "$base" ] && { [ "$gin" -lt 2 ] || [ "$ginother" -ne 0 ] || [ "$gintype" -lt 1 ]; }; then
    return 1
  fi
  case $base in
    ferry-*) [ "$loaded" -gt 0 ] && [ "$net" -gt 0 ] ;;
    nccl-ib) [ "$net" -eq 0 ] ;;
  esac
}

rma_excerpt() {
  grep -m 1 'NCCL version' "$1"
  grep -m 2 -E 'NET/Plugin: Loaded net plugin|Successfully loaded external network plugin' "$1"
  grep -m 4 -E 'RMA/Plugin' "$1"
  grep -m 4 -E 'GIN/Plugin|GIN Proxy|ginType=' "$1"
  grep -m 1 -E 'ib backend GPU memory' "$1"
  grep -m 2 -E 'Symmetric memory is not supported|host RMA is not supported|One-sided RMA requires|User requested GIN|GIN is disabled|GIN not supported' "$1"
  grep -m 1 -E 'not available on ferry' "$1"
  grep -m 3 -E 'MISMATCH|wrong|(rma|gin)_check: (PASS|FAIL)' "$1"
}

BASES=()
case $BACKEND in
  socket) BASES=(ferry-socket) ;;
  ib) BASES=(nccl-ib ferry-ib) ;;
  both) BASES=(ferry-socket nccl-ib ferry-ib) ;;
esac
RUNS=()
for b in "${BASES[@]}"; do
  RUNS+=("$b")
  [ "$SKIP_GIN" = 1 ] || RUNS+=("gin-$b")
done
echo "run,size,iters,median_rtt_us,min_rtt_us,oneway_us,gbps" >"$OUTDIR/perf.csv"
printf 'run\texit\tseconds\tbytes\tproof\n' >"$OUTDIR/runs.tsv"
: >"$OUTDIR/proofs.txt"
declare -A VERDICT=()
failed=0
for run in "${RUNS[@]}"; do
  log=$LOGS/$run.log
  if [ "$run" = "${run#gin-}" ]; then prog=rma_check bin=$RC_BIN; else prog=gin_check bin=$GC_BIN; fi
  xs=()
  # shellcheck disable=SC2046 # run_env prints NAME=value words
  for kv in $(run_env "$run") NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 NCCL_GIN_TYPE=2 \
            NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV \
            CUDA_MPS_PIPE_DIRECTORY="$CUDA_MPS_PIPE_DIRECTORY"; do
    xs+=(-x "$kv")
  done
  fnb_log "$run: $prog, 2 ranks, sizes $SIZES x$FACTOR"
  start=$SECONDS
  # stdin from /dev/null: mpirun forwards stdin. The waits inside the program
  # end before this timeout; it catches a hang in NCCL's init or registration.
  if [ "$prog" = gin_check ] && [ "$GIN_BUILT" = 0 ]; then
    echo "gin_check: FAIL: gin_check did not build (logs/build-gin-check.log)" >"$log"
    rc=127
  else
    timeout -k 10 "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none \
      "${xs[@]}" "$WRAP" "$bin" -b "${SIZES%%:*}" -e "${SIZES##*:}" -f "$FACTOR" \
      -m "$MIN_TIME" -t 45 </dev/null >"$log" 2>&1
    rc=$?
  fi
  secs=$((SECONDS - start))
  bytes=FAIL
  grep -q "^$prog: PASS" "$log" && [ $rc -eq 0 ] && bytes=PASS
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then bytes="FAIL (killed after ${RUN_TIMEOUT} s)"; fi
  [ "$prog" = gin_check ] && [ "$GIN_BUILT" = 0 ] && bytes="FAIL (gin_check did not build: logs/build-gin-check.log)"
  # The rpath should make it load the NCCL just built, not the system's.
  if [ "$bytes" = PASS ] && ! grep -q "^$prog: NCCL $NCCL_CODE (built against $NCCL_CODE)" "$log"; then
    bytes="FAIL (the NCCL loaded is not $NCCL_VER: see the log's first line)"
  fi
  counts=$(rma_proof "$run" "$log")
  proof=FAIL
  rma_proof "$run" "$log" >/dev/null && proof=PASS
  VERDICT[$run]="bytes $bytes, proof $proof"
  if [ "$bytes" != PASS ] || [ "$proof" != PASS ]; then failed=1; fi
  awk -v r="$run" '$1 == "perf" { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      printf "%s,%s,%s,%s,%s,%s,%s\n", r, v["size"], v["iters"], v["median_rtt_us"],
             v["min_rtt_us"], v["oneway_us"], v["gbps"] }' "$log" >>"$OUTDIR/perf.csv"
  printf '%s\t%s\t%s\t%s\t%s\n' "$run" "$rc" "$secs" "$bytes" "$proof" >>"$OUTDIR/runs.tsv"
  {
    echo "== $run: bytes $bytes, proof $proof (exit $rc, ${secs} s)"
    echo "env: $(run_env "$run") NCCL_GIN_TYPE=2"
    echo "$counts"
    rma_excerpt "$log" | cut -c1-240
    echo
  } >>"$OUTDIR/proofs.txt"
  fnb_log "$run: bytes $bytes, proof $proof ($counts)"
done

# ---- report ------------------------------------------------------------------

# perf_table PREFIX: per size, GB/s and one-way us of PREFIXferry-socket,
# PREFIXferry-ib and PREFIXnccl-ib, and each ferry run over nccl-ib.
perf_table() {
  echo "| size | ferry-socket GB/s | one-way us | ferry-ib GB/s | one-way us | nccl-ib (fakeibv) GB/s | one-way us | ferry-socket / nccl-ib | ferry-ib / nccl-ib |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  awk -F, -v p="$1" 'NR > 1 && (p == "" || index($1, p) == 1) && substr($1, length(p) + 1) !~ /^gin-/ {
                    run = substr($1, length(p) + 1); key = $2
                    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
                    g[run "," key] = $7; u[run "," key] = $6 }
    function h(b) { return b >= 1048576 ? b / 1048576 " MiB" : b >= 1024 ? b / 1024 " KiB" : b " B" }
    function f(x, fmt) { return x == "" ? "n/a" : sprintf(fmt, x) }
    function r(a, b) { return (a != "" && b != "" && b + 0 > 0) ? sprintf("%.2fx", a / b) : "n/a" }
    END { for (i = 1; i <= n; i++) { s = order[i]
            a = g["ferry-socket," s]; c = g["ferry-ib," s]; b = g["nccl-ib," s]
            printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", h(s),
                   f(a, "%.4f"), f(u["ferry-socket," s], "%.1f"), f(c, "%.4f"), f(u["ferry-ib," s], "%.1f"),
                   f(b, "%.4f"), f(u["nccl-ib," s], "%.1f"), r(a, b), r(c, b) } }' "$OUTDIR/perf.csv"
}

{
  echo "# NCCL one-sided API and Device API GIN through ferry's RMA plugin"
  echo
  echo "\`bench/nccl/rma_check.sh\`, $(sed -n 's/^date: //p' "$OUTDIR/env.txt"), NCCL $NCCL_VER (built from source for sm_$ARCH, kernels: $ONLY_FUNCS),"
  echo "$(sed -n 's/^gpu: //p' "$OUTDIR/env.txt"); commit $(sed -n 's/^commit: //p' "$OUTDIR/env.txt")."
  echo "2 ranks on one GPU under MPS, each its own NCCL_HOSTID, ncclMemAlloc'd symmetric windows;"
  echo "every size checked byte for byte both ways, then a ping-pong: one-way time = median round"
  echo "trip / 2, GB/s = size / one-way time."
  echo
  for run in "${RUNS[@]}"; do echo "- $run: ${VERDICT[$run]}"; done
  echo
  echo "Host API: ncclPutSignal + ncclWaitSignal (rma_check), round trips timed on the host."
  echo
  perf_table ""
  if [ "$SKIP_GIN" = 0 ]; then
    echo
    echo "Device API GIN (gin_check): a kernel's put with a signal increment, through NCCL's GIN"
    echo "proxy (NCCL_GIN_TYPE=2) over the RMA plugin; the ping-pong runs inside one kernel per"
    echo "rank, round trips timed with the GPU's global timer."
    echo
    perf_table gin-
  fi
  echo
  echo "The baseline is NCCL's own RMA (RMA_IB_PROXY) on the emulated verbs device, as ferry-ib"
  echo "is ferry's on it: both move their bytes by fakeibv's CPU copies, not a NIC, so the ratios"
  echo "compare CPU-driven paths on one host, not ferry against InfiniBand hardware."
  echo
  echo "Files: perf.csv (every timed size), proofs.txt (per run: counted log lines and excerpt),"
  echo "runs.tsv, env.txt, logs/ (NCCL_DEBUG=INFO logs, build logs)."
} >"$OUTDIR/README.md"
cat "$OUTDIR/README.md"
exit $failed
