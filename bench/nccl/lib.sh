# shellcheck shell=bash disable=SC2034 # FNB_PLUGIN, FNB_BENCH are read by the sourcing scripts
# Helpers sourced by compare.sh, torch_ddp.sh and run_all.sh: build ferry and
# the bench, start/stop CUDA MPS, check a log for proof of plugin use. Every
# external command that could hang runs under `timeout`.

FNB_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FNB_DIR=$FNB_REPO/bench/nccl
FNB_BUILD=${FNB_BUILD:-$FNB_REPO/build-gpu}
FNB_TORCH_NCCL_DIR=${FNB_TORCH_NCCL_DIR:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}
FNB_MPS_STARTED=0

# Extra variables of each --variant LABEL (comma-separated NAME=value), filled by the scripts.
declare -A FNB_VARIANT_ENV=()

# The environment of one configuration, as NAME=value words for `env`: ferry,
# NCCL's Socket (default, 1x1, 2x2 threads x sockets), or a ferry --variant.
fnb_config_env() {
  case $1 in
    ferry) echo "NCCL_NET_PLUGIN=$FNB_PLUGIN NCCL_NET=ferry" ;;
    # ferry's ib backend and NCCL's own IB, both over fakeibv (compare.sh --ib).
    ferry-ib) echo "NCCL_NET_PLUGIN=$FNB_PLUGIN NCCL_NET=ferry NCCL_FERRY_BACKEND=ib" ;;
    # NCCL_GIN_TYPE=2: with no mlx5 device (fakeibv, or any other provider) NCCL 2.28.9's
    # GIN probe leaves its "not chosen yet" sentinel (ncclGin_t*)-1 in place and calls
    # through it at init (src/plugin/net.cc): SIGSEGV. Naming the proxy GIN type skips
    # that probe; 2.28.3 has no GIN and ignores the variable.
    nccl-ib) echo "NCCL_NET_PLUGIN=none NCCL_NET=IB NCCL_GIN_TYPE=2" ;;
    socket-default) echo "NCCL_NET_PLUGIN=none NCCL_NET=Socket" ;;
    socket-1x1) echo "NCCL_NET_PLUGIN=none NCCL_NET=Socket NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1" ;;
    socket-2x2) echo "NCCL_NET_PLUGIN=none NCCL_NET=Socket NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2" ;;
    # A variant may name its own plugin build (NCCL_NET_PLUGIN=/path/old.so): A/B of two builds;
    # one that names its network too (NCCL_NET_PLUGIN=none,NCCL_NET=Socket) is NCCL's own
    # transport with extra variables (a profiler, say).
    *) case ",${FNB_VARIANT_ENV[$1]}" in
         *,NCCL_NET_PLUGIN=*,NCCL_NET=*|*,NCCL_NET=*,NCCL_NET_PLUGIN=*)
           echo "${FNB_VARIANT_ENV[$1]//,/ }" ;;
         *,NCCL_NET_PLUGIN=*) echo "NCCL_NET=ferry ${FNB_VARIANT_ENV[$1]//,/ }" ;;
         *) echo "NCCL_NET_PLUGIN=$FNB_PLUGIN NCCL_NET=ferry ${FNB_VARIANT_ENV[$1]//,/ }" ;;
       esac ;;
  esac
}

# The Open MPI installation whose mpi.h nccl-tests builds against (MPI_HOME wins).
fnb_mpi_home() {
  local d
  for d in "${MPI_HOME:-}" /usr/lib/x86_64-linux-gnu/openmpi /usr/lib64/openmpi /usr/local; do
    [ -n "$d" ] && [ -f "$d/include/mpi.h" ] && { echo "$d"; return 0; }
  done
  return 1
}

fnb_log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }

# fnb_rotate REP CONFIG...: the configurations in the order repetition REP runs
# them. Orders follow a Williams design: over n repetitions (2n for an odd
# number of configurations) each configuration runs once in every position and
# right after every other one equally often. A run leaves the machine in a state
# the next one inherits (after NCCL's IB the next run was 5 % slower at 4-16 KiB,
# 2026-12-02-gpu-ib-small run 9); a plain rotation (A B C, B C A, ...) gives
# each configuration the same predecessor every time and turns that into a bias.
fnb_rotate() {
  local rep=$1 n i k r v
  shift
  n=$#
  [ "$n" -gt 0 ] || return 0
  local -a cfgs=("$@") order=()
  k=$(((rep - 1) % (n % 2 ? 2 * n : n)))
  r=$((k % n))
  for ((i = 0; i < n; i++)); do
    # Row 0 is 0, 1, n-1, 2, n-2, ...; row r adds r; odd n adds the rows reversed.
    if ((i == 0)); then v=0; elif ((i % 2)); then v=$(((i + 1) / 2)); else v=$((n - i / 2)); fi
    order+=("${cfgs[$(((v + r) % n))]}")
  done
  if ((k >= n)); then
    for ((i = n - 1; i >= 0; i--)); do printf '%s\n' "${order[$i]}"; done
  else
    printf '%s\n' "${order[@]}"
  fi
}

# Default output folder: the device's $OUT when set, else a dated results folder.
fnb_outdir() {
  local dir=${1:-${OUT:-$FNB_REPO/bench/results/$(date +%Y-%m-%d)-gpu}}
  mkdir -p "$dir/logs" && (cd "$dir" && pwd)
}

# Builds tests/fakeibv (the emulated verbs device) standalone into $FNB_BUILD/fakeibv;
# sets FNB_FAKEIBV_DIR to the folder holding its libibverbs.so.1.
fnb_build_fakeibv() {
  local log=$1 dir=$FNB_BUILD/fakeibv
  if ! cmake -S "$FNB_REPO/tests/fakeibv" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$log" 2>&1 ||
     ! cmake --build "$dir" -j "$(nproc)" --target fakeibv fakeibv_cm >>"$log" 2>&1; then
    cat "$log" >&2
    return 1
  fi
  FNB_FAKEIBV_DIR=$(dirname "$(find "$dir" -name libibverbs.so.1 -print -quit)")
  [ -f "$FNB_FAKEIBV_DIR/libibverbs.so.1" ]
}

# Builds libnccl-net-ferry.so into $FNB_BUILD; sets FNB_PLUGIN to its absolute path.
fnb_build_ferry() {
  local log=$1 tests=OFF
  FNB_PLUGIN=$FNB_BUILD/libnccl-net-ferry.so
  # One build recipe: the project's CMake (its flags, map file and sources).
  if ! command -v cmake >/dev/null; then
    fnb_log "cmake not found: install it (apt-get install cmake) to build the plugin"
    return 1
  fi
  # Unit tests need cmocka; only the plugin target is built either way, and a
  # configure that still fails with tests on is retried with them off.
  if pkg-config --exists cmocka 2>/dev/null ||
     { [ -f /usr/include/cmocka.h ] && ldconfig -p 2>/dev/null | grep -q libcmocka; }; then
    tests=ON
  fi
  if ! cmake -S "$FNB_REPO" -B "$FNB_BUILD" -DFERRY_BUILD_TESTS=$tests >"$log" 2>&1 &&
     ! cmake -S "$FNB_REPO" -B "$FNB_BUILD" -DFERRY_BUILD_TESTS=OFF >>"$log" 2>&1; then
    cat "$log" >&2
    return 1
  fi
  if ! cmake --build "$FNB_BUILD" -j "$(nproc)" --target nccl-net-ferry >>"$log" 2>&1; then
    cat "$log" >&2
    return 1
  fi
  [ -f "$FNB_PLUGIN" ] || FNB_PLUGIN=$(find "$FNB_BUILD" -name libnccl-net-ferry.so -print -quit)
  [ -n "$FNB_PLUGIN" ] && [ -f "$FNB_PLUGIN" ]
}

# fnb_prof_gather OUTFILE PREFIX FILE...: the profiler's per-rank files
# (libferry-flush-prof.so) appended to OUTFILE, each line after PREFIX (what
# ran: "build=B rep=R config=C "); the files go (few files come back).
fnb_prof_gather() {
  local out=$1 prefix=$2 f
  shift 2
  for f in "$@"; do
    [ -f "$f" ] || continue
    sed "s|^|$prefix|" "$f" >>"$out"
    rm -f "$f"
  done
}

# Builds the flush-timing NCCL profiler (bench/nccl/flush_profiler.c) in the tree
# fnb_build_ferry configured; sets FNB_FLUSH_PROF to its absolute path.
fnb_build_flush_prof() {
  local log=$1
  if ! cmake --build "$FNB_BUILD" -j "$(nproc)" --target ferry-flush-prof >"$log" 2>&1; then
    cat "$log" >&2
    return 1
  fi
  FNB_FLUSH_PROF=$(find "$FNB_BUILD" -name libferry-flush-prof.so -print -quit)
  [ -n "$FNB_FLUSH_PROF" ] && [ -f "$FNB_FLUSH_PROF" ]
}

# Builds ferry_nccl_bench; sets FNB_BENCH. Without make: the Makefile's
# default case (system NCCL, toolkit in /usr/local/cuda) in one gcc call.
fnb_build_bench() {
  local log=$1 cuda=${CUDA_HOME:-/usr/local/cuda}
  FNB_BENCH=$FNB_BUILD/nccl-bench/ferry_nccl_bench
  if command -v make >/dev/null; then
    make -C "$FNB_DIR" BUILD="$FNB_BUILD/nccl-bench" >"$log" 2>&1 || { cat "$log" >&2; return 1; }
    return 0
  fi
  fnb_log "make not found: building the bench with gcc directly"
  mkdir -p "$FNB_BUILD/nccl-bench"
  gcc -std=c11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
      -isystem "$cuda/include" "$FNB_DIR"/*.c -o "$FNB_BENCH" \
      -L"$cuda/lib64" -l:libnccl.so.2 -lcudart_static -lrt -ldl -lpthread >"$log" 2>&1 ||
    { cat "$log" >&2; return 1; }
}

fnb_mps_running() {
  echo get_server_list | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
}

# Starts the MPS daemon unless one already answers; only ours is stopped later.
fnb_mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/ferry-mps}
  export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/ferry-mpslog}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if fnb_mps_running; then
    fnb_log "MPS already running on $CUDA_MPS_PIPE_DIRECTORY; left as is"
    return 0
  fi
  command -v nvidia-cuda-mps-control >/dev/null || { fnb_log "nvidia-cuda-mps-control not found"; return 1; }
  # No inherited stdout: a daemon holding our pipe would keep `tee` waiting forever.
  timeout 30 nvidia-cuda-mps-control -d </dev/null >/dev/null 2>&1 || { fnb_log "MPS start failed"; return 1; }
  FNB_MPS_STARTED=1
  for _ in $(seq 50); do
    fnb_mps_running && { fnb_log "MPS started ($CUDA_MPS_PIPE_DIRECTORY)"; return 0; }
    sleep 0.2
  done
  fnb_log "MPS daemon does not answer"
  return 1
}

fnb_mps_stop() {
  [ "$FNB_MPS_STARTED" = 1 ] || return 0
  FNB_MPS_STARTED=0
  echo quit | timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1 || fnb_log "MPS stop failed"
  fnb_log "MPS stopped"
}

# fnb_proof_check LOG [NAME]: the plugin NAME was loaded with the v11 ABI and
# every connection NCCL printed ("Channel ... via ...") went through NET/NAME.
# Prints one line of counts; returns 0 only when all of that holds.
fnb_proof_check() {
  local log=$1 name=${2:-ferry} loaded using all net ours ver code abi
  # The net ABI NCCL should load: the newest it knows (v12 from 2.30.3, v11 in
  # 2.28-2.29); an older NCCL's own newest is not checked by number.
  ver=$(sed -n 's/.*NCCL version \([0-9]*\)\.\([0-9]*\)\.\([0-9]*\).*/\1 \2 \3/p' "$log" | head -1)
  code=0
  [ -n "$ver" ] && code=$(printf '%d%02d%02d' $ver)
  if [ "$code" -ge 23003 ]; then abi=v12; elif [ "$code" -ge 22800 ]; then abi=v11; else abi='v[0-9]+'; fi
  loaded=$(grep -cE "NET/Plugin: Loaded net plugin $name \($abi\)" "$log")
  using=$(grep -c "Using network $name" "$log")
  all=$(grep -cE 'Channel .* via ' "$log")
  net=$(grep -cE 'Channel .* via NET/' "$log")
  ours=$(grep -cE "Channel .* via NET/$name/" "$log")
  printf 'loaded-%s=%s using-network=%s channels=%s via-NET=%s via-NET/%s=%s other=%s\n' \
    "${abi/v\[0-9\]+/any}" "$loaded" "$using" "$all" "$net" "$name" "$ours" "$((all - ours))"
  [ "$loaded" -gt 0 ] && [ "$ours" -gt 0 ] && [ "$ours" -eq "$all" ]
}

# The lines a reader wants to see as evidence, from an NCCL_DEBUG=INFO log.
fnb_proof_excerpt() {
  grep -m 2 -E 'NCCL version' "$1"
  grep -m 2 -E 'NET/Plugin: Loaded net plugin|Successfully loaded external network plugin' "$1"
  grep -m 2 -E 'Using network' "$1"
  grep -m 4 -E 'Channel .* via ' "$1"
}

# fnb_rank_pids BIN: the PIDs of processes running BIN itself (argv[0], after
# a wrapper's exec) or through an interpreter (argv[1], a script), not mpirun
# or timeout naming it later.
fnb_rank_pids() {
  local p args bin=$1
  for p in $(pgrep -f -- "$bin"); do
    args=$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | head -2)
    case $args in "$bin"|"$bin"$'\n'*|*$'\n'"$bin") echo "$p" ;; esac
  done
}
