#!/usr/bin/env bash
# quota_ab.sh: ferry configurations side by side with each rank in a cgroup of
# its own that holds a CPU limit, as two containers (Kubernetes pods with a
# CPU limit, docker --cpus) each running one rank would.
#
# Makes two cgroups (cgroup v1's cpu hierarchy, or v2 with the cpu
# controller), one for ferry-bench's sender and one for its receiver, each
# with QUOTA CPUs of time per 100 ms period. Then, for each repetition, runs
# ferry-bench --mode ferry once per configuration (the order rotates from one
# repetition to the next), and writes in OUTDIR:
#   quota_ab.csv   every ferry-bench row, with the configuration and the
#                  periods in which the kernel throttled each side
#   quota_ab.md    per connections and size: median GB/s and p99 latency per
#                  configuration, and each configuration over the first,
#                  paired by repetition (median ratio, repetitions it won)
#
#   bench/quota_ab.sh [--quota CPUS] [--reps N] [--bin FERRY-BENCH]
#                     --config LABEL[:VAR=V[,VAR=V...]]... OUTDIR [-- FERRY-BENCH OPTIONS]
#
# The first --config is the reference (e.g. "defaults:" with no variables).
# Needs root. Defaults: --quota 1, --reps 5, --bin build-bench/bench/ferry-bench; ferry-bench
# options after "--" (sizes, --conns, --time), NCCL_SOCKET_IFNAME=lo unless set.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/cgroup_quota.sh"

QUOTA=1
REPS=5
BIN=build-bench/bench/ferry-bench
OUTDIR=
CONFIGS=()
declare -A CONFIG_ENV=()
while [ $# -gt 0 ]; do
  case $1 in
    --quota) QUOTA=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --config) CONFIGS+=("${2%%:*}"); CONFIG_ENV[${2%%:*}]=$([[ $2 == *:* ]] && echo "${2#*:}"); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "quota_ab.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) OUTDIR=$1 ;;
  esac
  shift
done
BENCH_OPTS=("$@")
[ -n "$OUTDIR" ] || { echo "quota_ab.sh: name an OUTDIR (see --help)" >&2; exit 2; }
[ "${#CONFIGS[@]}" -ge 1 ] || { echo "quota_ab.sh: give at least one --config" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "quota_ab.sh: needs root to make cgroups" >&2; exit 2; }
bin=$BIN
[ -x "$bin" ] || { echo "quota_ab.sh: no $bin (build it: bench/run-loopback.sh)" >&2; exit 2; }
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

CGROUPS=()
cleanup() { for d in "${CGROUPS[@]}"; do rmdir "$d" 2>/dev/null; done; }
trap cleanup EXIT
for side in recv send; do
  d=$(cgq_make "ferry-ab-$side-$$") || { echo "quota_ab.sh: cannot make a cgroup here" >&2; exit 1; }
  CGROUPS+=("$d")
  cgq_set "$d" "$QUOTA" || { echo "quota_ab.sh: cannot set a $QUOTA-CPU limit on $d" >&2; exit 1; }
done
cg_recv=${CGROUPS[0]}
cg_send=${CGROUPS[1]}
mkdir -p "$OUTDIR"
csv=$OUTDIR/quota_ab.csv
rm -f "$csv"
n=${#CONFIGS[@]}
for ((rep = 1; rep <= REPS; rep++)); do
  for ((k = 0; k < n; k++)); do
    label=${CONFIGS[$(((k + rep - 1) % n))]}
    vars=()
    IFS=, read -ra vars <<<"${CONFIG_ENV[$label]}"
    t_recv=$(cgq_throttled "$cg_recv"); t_send=$(cgq_throttled "$cg_send")
    one=$OUTDIR/.rep.csv
    echo "== rep $rep/$REPS: $label ${CONFIG_ENV[$label]}"
    if ! env "${vars[@]}" "$bin" --mode ferry --reps 1 --cgroup-recv "$cg_recv" \
        --cgroup-send "$cg_send" --csv "$one" "${BENCH_OPTS[@]}" >"$OUTDIR/$label-rep$rep.txt" 2>&1; then
      echo "quota_ab.sh: ferry-bench failed ($label, rep $rep): see $OUTDIR/$label-rep$rep.txt" >&2
      exit 1
    fi
    t_recv=$(($(cgq_throttled "$cg_recv") - t_recv)); t_send=$(($(cgq_throttled "$cg_send") - t_send))
    [ -f "$csv" ] || echo "config,round,throttled_recv,throttled_send,$(head -1 "$one")" >"$csv"
    tail -n +2 "$one" | sed "s/^/$label,$rep,$t_recv,$t_send,/" >>"$csv"
    rm -f "$one"
  done
done

python3 - "$csv" "$QUOTA" "${CONFIGS[@]}" >"$OUTDIR/quota_ab.md" <<'PY'
import csv, statistics, sys
path, quota, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = list(csv.DictReader(open(path)))
def size_str(b):
    b = int(b)
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return "%d%s" % (b // div, unit)
    return str(b)
pts = {}    # (conns, size) -> config -> round -> row
thr = {}    # config -> round -> throttled periods, both sides
for r in rows:
    key = (int(r["conns"]), int(r["size_bytes"]))
    pts.setdefault(key, {}).setdefault(r["config"], {})[int(r["round"])] = r
    thr.setdefault(r["config"], {})[int(r["round"])] = int(r["throttled_recv"]) + int(r["throttled_send"])
ref = configs[0]
print("# quota_ab: ferry configurations, each rank in a cgroup of %s CPU%s of time\n" %
      (quota, "" if float(quota) == 1 else "s"))
print("Median GB/s [median p99 latency, us] per configuration; each other configuration over "
      "`%s`, paired by repetition: median ratio, repetitions it won.\n" % ref)
print("| conns | size | " + " | ".join(configs) + " | " +
      " | ".join("%s / %s" % (c, ref) for c in configs[1:]) + " |")
print("|" + "---|" * (1 + 2 * len(configs)))
for key in sorted(pts):
    by = pts[key]
    cells, ratios = [], []
    for c in configs:
        runs = list(by.get(c, {}).values())
        cells.append("%.3f [%.0f]" % (statistics.median(float(r["gbytes_per_s"]) for r in runs),
                                      statistics.median(float(r["lat_p99_us"]) for r in runs))
                     if runs else "-")
    for c in configs[1:]:
        common = sorted(set(by.get(c, {})) & set(by.get(ref, {})))
        pairs = [float(by[c][k]["gbytes_per_s"]) / float(by[ref][k]["gbytes_per_s"])
                 for k in common if float(by[ref][k]["gbytes_per_s"]) > 0]
        ratios.append("%.2f, %d/%d" % (statistics.median(pairs), sum(p > 1 for p in pairs),
                                       len(pairs)) if pairs else "-")
    print("| %d | %s | %s | %s |" % (key[0], size_str(key[1]), " | ".join(cells), " | ".join(ratios)))
print("\nPeriods (100 ms) in which the kernel throttled a side, per run, both sides together:")
for c in configs:
    v = list(thr.get(c, {}).values())
    print("- %s: median %s over %d runs" % (c, statistics.median(v) if v else "-", len(v)))
PY
cat "$OUTDIR/quota_ab.md"
