#!/usr/bin/env bash
# selftest.sh: checks ferry_nccl_bench (launcher, result checks, exit codes,
# MPS handling) and compare.sh (proof verdicts, summary) on a machine without
# a GPU, against the mock CUDA runtime, NCCL and MPS control in this folder.
# The real thing runs on the GPU machine only; this catches the mistakes that
# would waste its time. Needs gcc, make, cmake, python3 and CUDA headers
# (CUDA_HOME, default /usr/local/cuda). Prints "N passed, N failed".
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
WORK=$(mktemp -d /tmp/fnb-selftest.XXXXXX)
# A killed rank leaves its mock shared memory file behind; they share this prefix.
export MOCK_SHM_PREFIX=/fnb-mock-$$
trap 'rm -rf "$WORK"; rm -f /dev/shm"$MOCK_SHM_PREFIX"-*' EXIT
PASSED=0
FAILED=0

mock_build() {
  local flags=(-shared -fPIC -O1 -Wall -Wextra -Werror -Wno-unused-parameter -isystem "$CUDA_HOME/include")
  mkdir -p "$WORK/lib" "$WORK/torchlib" &&
  gcc "${flags[@]}" -o "$WORK/lib/libcudart.so" "$HERE/mock_cudart.c" &&
  gcc "${flags[@]}" -Wl,-soname,libnccl.so.2 -o "$WORK/lib/libnccl.so.2" "$HERE/mock_nccl.c" -lpthread -lrt &&
  gcc "${flags[@]}" -DMOCK_VERSION=22809 -Wl,-soname,libnccl.so.2 -o "$WORK/torchlib/libnccl.so.2" \
      "$HERE/mock_nccl.c" -lpthread -lrt &&
  make -s -C "$HERE/.." BUILD="$WORK/build-gpu/nccl-bench" CUDA_HOME="$CUDA_HOME" LDFLAGS= \
      LDLIBS="-L$WORK/lib -l:libnccl.so.2 -lcudart -Wl,-rpath,$WORK/lib -ldl"
}

# shellcheck source=checks.sh
source "$HERE/checks.sh"

mps_log_is() {
  local name=$1 want=$2 got
  got=$(tr '\n' ' ' <"$MOCK_MPS_LOG")
  if [ "$got" = "$want" ]; then
    PASSED=$((PASSED + 1)); echo "ok   $name: MPS calls '$want'"
  else
    FAILED=$((FAILED + 1)); echo "FAIL $name: MPS calls '$got', wanted '$want'"
  fi
  : >"$MOCK_MPS_LOG"
}

mock_build || { echo "mock build failed"; echo "0 passed, 1 failed"; exit 1; }
export PATH=$HERE:$PATH CUDA_MPS_PIPE_DIRECTORY=$WORK/mps CUDA_MPS_LOG_DIRECTORY=$WORK/mpslog
export MOCK_MPS_LOG=$WORK/mps.log FNB_BUILD=$WORK/build-gpu FNB_TORCH_NCCL_DIR=$WORK/torchlib
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY"
: >"$MOCK_MPS_LOG"
B=$WORK/build-gpu/nccl-bench/ferry_nccl_bench

check all_ops 0 "$B" -b 4K -e 1M -f 4 -n 3 -w 1 --csv "$WORK/all.csv" --label t
expect all_ops -E '^# wrong elements: 0 \(OK\)'
expect all_ops -E 'MPS: started'
check all_ops_rows 0 test "$(grep -c ',t$' "$WORK/all.csv")" -eq 25
mps_log_is all_ops "start get_server_list quit "

check wrong 1 env MOCK_CORRUPT=1 "$B" -l 4K,64K -o all_reduce,sendrecv -n 2
expect wrong -E 'sendrecv +65536 +16384 +float .* 1$'
expect wrong 'rank 1 found wrong results'

check init_fails 2 env MOCK_FAIL_INIT=1 "$B" -l 4K
expect init_fails 'rank 1 failed (exit 2)'

start=$SECONDS
check hang_killed 2 env MOCK_HANG_INIT=1 "$B" -l 4K -T 2
expect hang_killed 'timeout (2 s), stopping the ranks'
check hang_bounded 0 test $((SECONDS - start)) -lt 15
: >"$MOCK_MPS_LOG"

nvidia-cuda-mps-control -d
check mps_kept 0 "$B" -l 4K -o broadcast
expect mps_kept 'MPS: already running'
mps_log_is mps_kept "start get_server_list "
echo quit | nvidia-cuda-mps-control; : >"$MOCK_MPS_LOG"

check no_mps 0 "$B" -l 4K -o broadcast --no-mps
mps_log_is no_mps ""

check three_ranks 0 "$B" -N 3 -l 4K,1M -n 50 -w 4 --iter-bytes 8M --csv "$WORK/three.csv"
check three_ranks_iters 0 grep -q '^all_gather,1048572,87381,float,.*,8,3,' "$WORK/three.csv"
check distinct_gpus 0 env MOCK_NGPUS=4 "$B" -N 2 -l 4K
expect distinct_gpus 'NCCL_HOSTID=host<r>: no, MPS: off'
check bad_option 2 "$B" -o nonsense

# fnb_rotate: 2-7 configurations, one full cycle of orders; every configuration
# once per position and right after each other one equally often.
rotate_cycle() {
  local n=$1 rep j cfgs=()
  for ((j = 0; j < n; j++)); do cfgs+=("c$j"); done
  for ((rep = 1; rep <= (n % 2 ? 2 * n : n); rep++)); do
    fnb_rotate "$rep" "${cfgs[@]}" | tr '\n' ' '
    echo
  done
}
rotate_balanced() {
  (source "$HERE/../lib.sh" && for n in 2 3 4 5 6 7; do rotate_cycle "$n"; echo; done) |
    python3 -c '
import collections, sys
for block in sys.stdin.read().strip().split("\n\n"):
    rows = [l.split() for l in block.splitlines()]
    n = len(rows[0])
    pos = collections.Counter((c, i) for r in rows for i, c in enumerate(r))
    nxt = collections.Counter(p for r in rows for p in zip(r, r[1:]))
    assert all(sorted(r) == sorted(rows[0]) for r in rows), rows
    assert len(set(pos.values())) == 1 and len(pos) == n * n, (n, pos)
    assert len(set(nxt.values())) == 1 and len(nxt) == n * (n - 1), (n, nxt)
    print(n, "configurations:", len(rows), "orders, balanced")
'
}
check rotate_balanced 0 rotate_balanced
expect rotate_balanced -e '^7 configurations: 14 orders, balanced$'

check compare_usage 0 "$HERE/../compare.sh" --help
expect compare_usage -e '^--step-time (implies --ib)'
expect compare_usage -e 'Exit 0 only if everything passed.$'
check compare_quick 0 "$HERE/../compare.sh" --quick --sizes 4K "$WORK/cmp"
check compare_summary 0 grep -q 'proof system: PASS' "$WORK/cmp/summary.md"
check compare_bad_channel 1 env MOCK_CHANNEL_NET=Socket "$HERE/../compare.sh" --quick --sizes 4K "$WORK/cmp2"
check compare_bad_summary 0 grep -q 'proof system: FAIL' "$WORK/cmp2/summary.md"
check compare_torch 0 "$HERE/../compare.sh" --quick --nccl torch --sizes 4K "$WORK/cmp3"
check compare_torch_version 0 grep -q '^## NCCL 2.28.9 (torch)' "$WORK/cmp3/summary.md"

# The helpers around compare.sh: probe (the mock NCCL logs no TUNING lines, so
# only that it runs and writes its report), plot, and the TCP ceiling (real
# raw-TCP ferry-bench on loopback).
check probe_runs 0 "$HERE/../tuning_probe.sh" --sizes 4K "$WORK/probe" ferry:X=1 socket:X=1
check probe_report 0 grep -q '^## socket' "$WORK/probe/probe.md"
if command -v gnuplot >/dev/null; then
  check plot 0 "$HERE/../plot.sh" "$WORK/cmp/summary.csv" "$WORK/cmp.png" system "selftest"
  check plot_png 0 test -s "$WORK/cmp.png"
fi
check plot_usage 2 "$HERE/../plot.sh"
check ceiling 0 env NCCL_SOCKET_IFNAME=lo "$HERE/../tcp_ceiling.sh" --reps 1 --size 1M --conns 1 "$WORK/ceil"
check ceiling_report 0 grep -q '^# loopback TCP ceiling: [0-9.]* GB/s per direction' "$WORK/ceil/ceiling.md"
# duplex.sh reuses the ferry-bench tcp_ceiling.sh just built (real traffic, loopback).
check duplex 0 env NCCL_SOCKET_IFNAME=lo "$HERE/../../duplex.sh" --build "$FNB_BUILD" --reps 1 \
      --time 0.2 --size 256K --conns 1 --variant s2:NCCL_FERRY_STREAMS=2 "$WORK/dx"
check duplex_report 0 grep -q '^# duplex: ferry [0-9.]* GB/s, raw TCP [0-9.]* GB/s per direction (ferry/raw [0-9.]*)' "$WORK/dx/duplex.md"
check duplex_variant 0 grep -q 'variant s2 (NCCL_FERRY_STREAMS=2): [0-9.]* GB/s per direction' "$WORK/dx/duplex.md"
check duplex_bad_option 2 "$HERE/../../duplex.sh" --nonsense
# --rank-cpus: each direction's sender and receiver bound where the two ranks are.
check duplex_rank_cpus 0 env NCCL_SOCKET_IFNAME=lo "$HERE/../../duplex.sh" --build "$FNB_BUILD" --reps 1 \
      --time 0.2 --size 256K --conns 1 --rank-cpus 0:1 "$WORK/dxr"
check duplex_rank_cpus_report 0 grep -q 'ranks on CPUs 0:1' "$WORK/dxr/duplex.md"
check duplex_rank_cpus_bad 2 "$HERE/../../duplex.sh" --rank-cpus 0-1
check duplex_rank_cpus_bad_msg 0 grep -q 'rank-cpus takes A:B' "$WORK/duplex_rank_cpus_bad.out"
# pcie_load (built with the bench, against the mock runtime) and loaded_ceiling.sh.
check pcie_load 0 "$WORK/build-gpu/nccl-bench/pcie_load" --rate 0.5 --seconds 0.3
expect pcie_load 'pcie_load: [0-9.]* GB/s each way'
check pcie_load_bad 2 "$WORK/build-gpu/nccl-bench/pcie_load" --rate -1
check loaded_ceiling 0 env NCCL_SOCKET_IFNAME=lo "$HERE/../loaded_ceiling.sh" --reps 1 --time 0.2 --rate 0.5 "$WORK/lc"
check loaded_ceiling_report 0 grep -q '^# loopback TCP ceiling with the job.s PCIe traffic: raw [0-9.]* GB/s' "$WORK/lc/loaded_ceiling.md"
# cpuload.sh against the mock: both configurations run and get their section.
# mpirun_ab.sh against the mock mpirun and all_reduce_perf: proof, rows, a variant
# naming its own plugin build, and a wrong element failing the run.
check mpirun_ab 0 "$HERE/../mpirun_ab.sh" --tests "$HERE/mock_all_reduce_perf" --reps 2 \
      --configs ferry,socket-default --variant old:NCCL_NET_PLUGIN=/nonexistent/old.so "$WORK/mab"
expect mpirun_ab '^| 256 MiB | 2.00 | 1.00 | - | 2.00 | - |'
check mpirun_ab_proof 0 grep -q '^proof passed' "$WORK/mab/proof-mpirun.txt"
check mpirun_ab_bindings 0 grep -q 'rank 1 bound to' "$WORK/mab/bindings.txt"
check mpirun_ab_plugin 0 grep -q '^# plugin=/nonexistent/old.so$' "$WORK/mab/logs/mpirun-rep2-old.log"
check mpirun_ab_own_plugin 0 grep -q "^# plugin=$FNB_BUILD/libnccl-net-ferry.so\$" "$WORK/mab/logs/mpirun-rep1-ferry.log"
# Each repetition starts one configuration further along: rep 1 ferry first, rep 2 old first.
check mpirun_ab_rotation 0 test "$(awk -F'\t' 'NR > 1 { printf "%s:%s ", $2, $3 }' "$WORK/mab/runs.tsv")" = \
      "1:ferry 1:socket-default 1:old 2:socket-default 2:old 2:ferry "
if command -v gnuplot >/dev/null; then
  check ratio_plot 0 "$HERE/../ratio_plot.sh" "$WORK/ratio.png" ferry socket-default "two reps=$WORK/mab/summary.csv"
  check ratio_plot_png 0 test -s "$WORK/ratio.png"
  check ratio_plot_no_pair 2 "$HERE/../ratio_plot.sh" "$WORK/ratio2.png" ferry nonesuch "x=$WORK/mab/summary.csv"
  # Against the better of two: 3.0 / max(1.0, 2.0) at 4 KiB, 2.0 / max(4.0, 1.0) at 8 KiB.
  printf '%s\n' build,nccl_version,config,op,size_bytes,runs,busbw_median \
    mpirun,2.28.3,ferry,all_reduce,4096,1,3.0 mpirun,2.28.3,socket-default,all_reduce,4096,1,1.0 \
    mpirun,2.28.3,socket-2x2,all_reduce,4096,1,2.0 mpirun,2.28.3,ferry,all_reduce,8192,1,2.0 \
    mpirun,2.28.3,socket-default,all_reduce,8192,1,4.0 mpirun,2.28.3,socket-2x2,all_reduce,8192,1,1.0 \
    >"$WORK/best.csv"
  check ratio_plot_best 0 "$HERE/../ratio_plot.sh" "$WORK/ratio3.png" ferry socket-default+socket-2x2 \
    "best=$WORK/best.csv"
  expect ratio_plot_best '^ratio_plot.sh: best 4096 1.500$'
  expect ratio_plot_best '^ratio_plot.sh: best 8192 0.500$'

fi
# pool_matrix.py: two runs pooled per repetition. Paired against socket-2x2: 2/2, 4/2 and
# 2.5/3 (median 1.00); against socket-default: 2/1, 4/2, 2.5/1 (median 2.00): the better Socket
# is 2x2. ferry beat both in repetitions 1 and 2 of run a, not in run b's one.
mkdir -p "$WORK/pool/a" "$WORK/pool/b"
printf '%s\n' op,size_bytes,busbw_gbps,label all_reduce,4096,2,ferry all_reduce,4096,1,socket-default \
  all_reduce,4096,2,socket-2x2 all_reduce,4096,4,ferry all_reduce,4096,2,socket-default \
  all_reduce,4096,2,socket-2x2 >"$WORK/pool/a/raw-mpirun.csv"
printf '%s\n' op,size_bytes,busbw_gbps,label all_reduce,4096,2.5,ferry all_reduce,4096,1,socket-default \
  all_reduce,4096,3,socket-2x2 >"$WORK/pool/b/raw-mpirun.csv"
check pool_matrix 0 "$HERE/../pool_matrix.py" --out "$WORK/pool" "two runs=$WORK/pool/a,$WORK/pool/b"
expect pool_matrix '^| 4 KiB | 1.00 | \[0.83-2.00\] | socket-2x2 | 2/3 | 2 |$'
check pool_matrix_csv 0 grep -q '^pooled,,ferry,all_reduce,4096,3,1.0000,' "$WORK/pool/pooled-two-runs.csv"
check pool_matrix_no_run 1 "$HERE/../pool_matrix.py" --out "$WORK/pool" "x=$WORK/pool/none"
expect pool_matrix_no_run 'raw-mpirun.csv not found'
# cpu_matrix.sh: one mpirun_ab.sh run per binding, the ratio table over them.
check cpu_matrix 0 "$HERE/../cpu_matrix.sh" --tests "$HERE/mock_all_reduce_perf" --reps 1 \
      --bindings 1,none "$WORK/cm"
expect cpu_matrix '^| 4 KiB | 2.00 (1/1) | 2.00 (1/1) |$'
expect cpu_matrix '^| 256 MiB | 2.00 (1/1) | 2.00 (1/1) |$'
check cpu_matrix_bindings 0 grep -q 'bound to' "$WORK/cm/1/bindings.txt"
check cpu_matrix_bad_binding 2 "$HERE/../cpu_matrix.sh" --tests "$HERE/mock_all_reduce_perf" \
      --bindings 1,two "$WORK/cm2"
# --rank-quota / binding qC: each rank in a cgroup of its own with a CPU limit, removed after.
if [ "$(id -u)" = 0 ] && { [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] ||
     grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; }; then
  check cpu_matrix_quota 0 "$HERE/../cpu_matrix.sh" --tests "$HERE/mock_all_reduce_perf" --reps 1 \
        --bindings q1.5 "$WORK/cmq"
  expect cpu_matrix_quota '^| 256 MiB | 2.00 (1/1) |$'
  check cpu_matrix_quota_ranks 0 test "$(grep -c 'in cgroup .*/ferry-rank-[0-9]*-[01], limit 1.5 CPUs' \
        "$WORK/cmq/q1.5/bindings.txt")" = 2
  check cpu_matrix_quota_gone 0 test -z "$(find /sys/fs/cgroup -maxdepth 2 -name 'ferry-rank-*')"
else
  echo "selftest: cpu_matrix_quota skipped (needs root and a cgroup cpu controller)"
fi
check mpirun_ab_bad_quota 2 "$HERE/../mpirun_ab.sh" --tests "$HERE/mock_all_reduce_perf" \
      --rank-quota lots "$WORK/mabq"
check mpirun_ab_wrong 1 env MOCK_WRONG=1 "$HERE/../mpirun_ab.sh" --tests "$HERE/mock_all_reduce_perf" \
      --reps 1 --configs socket-default "$WORK/mab2"
# A variant that names NCCL_NET too is NCCL's own transport with extra variables.
check mpirun_ab_socket_variant 0 "$HERE/../mpirun_ab.sh" --tests "$HERE/mock_all_reduce_perf" --reps 1 \
      --configs ferry --variant sock:NCCL_NET_PLUGIN=none,NCCL_NET=Socket,X=1 "$WORK/mab5"
check mpirun_ab_socket_variant_net 0 grep -q '^all_reduce,4096,.*,1.00,0,.*,Socket,sock$' "$WORK/mab5/raw-mpirun.csv"
# nccl-tests -c 0 (a bound measured without checking): N/A is not a failure,
# and the summary says the rows went unchecked.
check mpirun_ab_unchecked 0 env MOCK_UNCHECKED=1 "$HERE/../mpirun_ab.sh" --tests "$HERE/mock_all_reduce_perf" \
      --reps 1 --configs socket-default "$WORK/mab3"
check mpirun_ab_unchecked_note 0 grep -q '^Results not checked in 9 of 9 rows' "$WORK/mab3/summary.md"
# --threads: each run's threads sampled mid-run, a table per configuration.
# The ranks stay busy well past the window (3-5 s in): on a loaded machine
# their start alone can take seconds.
check mpirun_ab_threads 0 env MOCK_BUSY_S=10 "$HERE/../mpirun_ab.sh" --tests "$HERE/mock_all_reduce_perf" \
      --reps 1 --configs ferry,socket-default --threads 3 "$WORK/mab4"
check mpirun_ab_threads_rows 0 test "$(awk -F'\t' 'NR > 1 && $3 == "bash" && $4 > 0.2' \
      "$WORK/mab4/logs/threads-rep1-ferry.tsv" | wc -l)" = 2
# Each busy rank was seen on some CPU in most of the window's looks.
check mpirun_ab_threads_where 0 test "$(awk -F'\t' 'NR > 1 && $3 == "bash" && $8 ~ /^[0-9]+:([5-9][0-9]|100)(,|$)/' \
      "$WORK/mab4/logs/threads-rep1-ferry.tsv" | wc -l)" = 2
check mpirun_ab_threads_table 0 grep -q '^| bash | [01]\.[0-9][0-9] |' "$WORK/mab4/threads.md"
check mpirun_ab_threads_bad 2 "$HERE/../mpirun_ab.sh" --tests "$HERE/mock_all_reduce_perf" --threads soon
check mpirun_ab_no_tests 2 "$HERE/../mpirun_ab.sh" --tests /nonexistent/all_reduce_perf
check cpuload 0 "$HERE/../cpuload.sh" --size 4K --iters 2 --settle 1 "$WORK/cpu"
check cpuload_report 0 grep -q '^## socket-2x2 (exit 0)' "$WORK/cpu/cpuload.md"

# regenerate.sh end to end against a stand-in nccl-tests tree (its Makefile
# installs the mock as both binaries), the mock mpirun and MPS: the build from
# the source path, calibration bands, rotated repetitions, the proof, the
# table with paired ratios and "level", and the outputs a record keeps.
mkdir -p "$WORK/nt/src"
printf '%s\n' 'BUILDDIR ?= ../build' '$(BUILDDIR)/%_perf:' \
  '	mkdir -p $(BUILDDIR) && cp '"$HERE"'/mock_all_reduce_perf $@' >"$WORK/nt/src/Makefile"
check regen 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" --nccl-tests "$WORK/nt" \
      --topics socket2,socket8 --reps 3 --sizes 4K:1M --out "$WORK/regen"
expect regen '^| socket, 2 ranks on one GPU, unbound, all_reduce | socket-default / socket-2x2 .* | 4 KiB 2.00x (2.00-2.00) \[3 reps\]; 16 KiB 2.00x'
expect regen '^| socket, 8 ranks on one GPU, unbound, alltoall |'
check regen_files 0 test -s "$WORK/regen/raw.csv.xz" -a -s "$WORK/regen/summary.csv" -a -s "$WORK/regen/logs.tar.xz"
check regen_outputs 0 test "$(find "$WORK/regen" -type f | wc -l)" -le 8
check regen_proof 0 grep -q '^proof socket2: PASS' "$WORK/regen/proofs.txt"
check regen_rotation 0 test "$(awk -F'\t' '$1 == "socket2" { printf "%s:%s ", $3, $4 }' "$WORK/regen/runs.tsv")" = \
      "1:ferry 1:socket-default 1:socket-2x2 2:socket-default 2:socket-2x2 2:ferry 3:socket-2x2 3:ferry 3:socket-default "
# Level: equal busbw gives an interval that holds 1.0.
check regen_level 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" MOCK_FERRY_BW=1.00 "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 2 --sizes 4K:16K --out "$WORK/regen2"
expect regen_level '| 4 KiB-16 KiB level \[2 reps\] |'
# --variant: ferry with extra variables, in the same rotation, rows of its own
# against the NCCL baselines, and a table of ferry's defaults against it.
check regen_variant 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 2 --sizes 4K:16K --variant t1=NCCL_FERRY_THREADS=1 \
      --out "$WORK/regen6"
expect regen_variant '^| socket, 2 ranks on one GPU, unbound, all_reduce (ferry-t1) | socket-default / socket-2x2 (the worse'
expect regen_variant '^Variants: ferry-t1 = ferry.s configuration + NCCL_FERRY_THREADS=1'
expect regen_variant '^| socket2 | all_reduce | ferry-t1 | 16 KiB | 1.000 | 1.000-1.000 | level \[2 reps\] |$'
check regen_variant_env 0 test "$(tar -xJOf "$WORK/regen6/logs.tar.xz" --wildcards '*rep1-ferry-t1-b1.log' |
      grep -c '^# ferry-threads=1$')" -ge 1
check regen_variant_default_env 0 test "$(tar -xJOf "$WORK/regen6/logs.tar.xz" --wildcards '*rep1-ferry-b1.log' |
      grep -c '^# ferry-threads=$')" -ge 1
check regen_variant_bad 2 "$HERE/../../regenerate.sh" --nccl-tests "$WORK/nt" --variant 'Bad Label=X=1'
# --budget: a share too small for every repetition cuts them and says so;
# --cores-per-rank binds the ranks and names it in the setup.
check regen_budget 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 200 --sizes 4K:16K --budget 100 \
      --cores-per-rank 1 --out "$WORK/regen4"
expect regen_budget 'of 200 repetitions (its share of --budget 100 was'
expect regen_budget '^| socket, 2 ranks on one GPU, 1 core per rank (bound), all_reduce |'
check regen_budget_spent 1 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 2 --sizes 4K:16K --budget 10 --out "$WORK/regen5"
check regen_budget_spent_note 0 grep -q 'socket2: not run, the budget of 10 s was spent' "$WORK/regen5/budget.txt"
# --ops with one operation: the 8-rank topic is one pair to run, and gets the
# whole budget less the reserve, not half of it.
check regen_budget_ops 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket8 --ops alltoall --reps 1 --sizes 4K:16K --budget 900 \
      --out "$WORK/regen8"
expect regen_budget_ops 'socket8 alltoall: a share of [0-9]* s of --budget 900 (1 pair(s) to run)'
check regen_wrong 1 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" MOCK_WRONG=1 "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 1 --sizes 1M:1M --out "$WORK/regen3"
# --ops: an 8-rank topic runs only the operations named, and the command says so.
check regen_ops 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket8 --reps 1 --sizes 4K:16K --ops alltoall --out "$WORK/regen7"
expect regen_ops '^| socket, 8 ranks on one GPU, unbound, alltoall |'
check regen_ops_only 0 test "$(awk -F'\t' 'NR > 1 { print $2 }' "$WORK/regen7/runs.tsv" | sort -u)" = alltoall
check regen_ops_command 0 grep -q -- '--ops alltoall' "$WORK/regen7/README.md"
# --step-time: the profiler built and loaded into every configuration's runs,
# each rank's lines gathered, and a table per size with ferry's ratio to each.
check regen_steps 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 2 --sizes 4K:16K --step-time --out "$WORK/regen9"
check regen_steps_table 0 grep -q '^| SendWait | 10.00 (200) | 20.00 (200) | 20.00 (200) | 0.50 | 0.50 |$' \
      "$WORK/regen9/README.md"
check regen_steps_heading 0 grep -q '^### socket2/all_reduce, 16 KiB (SIMPLE)$' "$WORK/regen9/README.md"
check regen_steps_kept 0 test -s "$WORK/regen9/step-prof.txt.xz"
check regen_steps_command 0 grep -q -- '--step-time' "$WORK/regen9/README.md"
# --threads: every measured run's ranks sampled from /proc while they run
# (the mock, a bash script, keeps its ranks on the CPU for MOCK_BUSY_S), NCCL's thread names
# asked for, and the table in the README.
check regen_threads 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 1 --sizes 4K:4K --threads 1 --env MOCK_BUSY_S=5 \
      --out "$WORK/regen10"
check regen_threads_table 0 grep -Eq '^\| bash \| (0\.[3-9][0-9]|1\.[0-9]{2}) \| [0-9.]+ \|' \
      "$WORK/regen10/README.md"
check regen_threads_heading 0 grep -q '^### socket2-all_reduce-socket-2x2-b1$' "$WORK/regen10/README.md"
check regen_threads_host 0 grep -q '^Whole host, CPUs (medians): user ' "$WORK/regen10/README.md"
check regen_threads_names 0 test "$(tar -xJOf "$WORK/regen10/logs.tar.xz" --wildcards '*rep1-ferry-b1.log' |
      grep -c '^# set-thread-name=1$')" -eq 1
check regen_threads_bad 2 "$HERE/../../regenerate.sh" --nccl-tests "$WORK/nt" --threads 0.5
expect regen_threads_bad 'threads needs whole seconds'
check regen_ops_bad 2 "$HERE/../../regenerate.sh" --nccl-tests "$WORK/nt" --ops reduce_scatter
expect regen_ops_bad 'ops takes all_reduce, alltoall or both'
# --env: the variable reaches every run (the mock's ferry busbw, 4.00 over 1.00), and the command says so.
check regen_env 0 env FNB_BUILD="$FNB_BUILD" REGEN_NT_BUILD="$WORK/ntbuild" "$HERE/../../regenerate.sh" \
      --nccl-tests "$WORK/nt" --topics socket2 --reps 1 --sizes 4K:4K --env MOCK_FERRY_BW=4.00 --out "$WORK/regen8"
check regen_env_rows 0 grep -q '^| 4 KiB | 4.00 |' "$WORK/regen8/README.md"
check regen_env_command 0 grep -q -- '--env MOCK_FERRY_BW=4.00' "$WORK/regen8/README.md"
check regen_env_bad 2 "$HERE/../../regenerate.sh" --nccl-tests "$WORK/nt" --env 'lower=1'
expect regen_env_bad "env 'lower=1': NAME=value"
check regen_usage 2 "$HERE/../../regenerate.sh" --topics socket2
expect regen_usage 'nccl-tests SRC is required'
check regen_bad_topic 2 "$HERE/../../regenerate.sh" --nccl-tests "$WORK/nt" --topics nonesuch

# torch_ddp.py's checks and its timed steps on the CPU (gloo), each rank bound to a CPU of its
# own, where a python with torch is installed (Debian's python3-torch will do).
TORCH_PY=
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import torch' 2>/dev/null; then TORCH_PY=$py; break; fi
done
if [ -n "$TORCH_PY" ]; then
  check torch_ddp_cpu 0 timeout 240 "$TORCH_PY" "$HERE/../torch_ddp.py" --backend gloo --device cpu \
        --time-steps 3 --time-hidden 64 --host-ms 1 --rank-cpus 0:0
  expect torch_ddp_cpu '^torch_ddp: step time median [0-9.]* ms, p10 [0-9.]*, p90 [0-9.]*, over 3 steps'
  expect torch_ddp_cpu '^torch_ddp: PASS$'
  check torch_ddp_bad_cpus 2 "$TORCH_PY" "$HERE/../torch_ddp.py" --backend gloo --device cpu \
        --rank-cpus 0
  expect torch_ddp_bad_cpus 'names 1 ranks, --world is 2'
else
  echo "skip torch_ddp_cpu: no python with torch"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
