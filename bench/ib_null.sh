#!/usr/bin/env bash
# ib_null.sh: ferry-ib's own CPU cost per message. ferry-bench over fakeibv in
# null-payload mode (FAKEIBV_NULL_PAYLOAD=1: completions, immediates and the
# small control writes arrive, payloads of 4 KiB and more are not moved),
# interleaved with the same run on the copying device, REPS rounds of each.
# Stream message rate (1 connection, depth 8, buffers shared: data unchecked)
# and ping-pong round trip, 16 B .. 1 MiB in x4 steps.
#
#   bench/ib_null.sh [--build DIR] [--reps N] [--time S] OUTDIR
#
# OUTDIR gets ib_null.csv (every ferry-bench row, with device and round),
# summary.csv and summary.md (per device, test and size: the median over the
# rounds and the lowest and highest round), and the logs of each run.
set -uo pipefail
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
BUILD=build REPS=5 TIME=0.15
while [ $# -gt 1 ]; do
  case $1 in
    --build) BUILD=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --time) TIME=$2; shift ;;
    *) usage ;;
  esac
  shift
done
[ $# -eq 1 ] || usage
OUT=$1
case $REPS in ''|*[!0-9]*|0) echo "ib_null: --reps needs a whole number >= 1" >&2; exit 2 ;; esac
bench=$BUILD/bench/ferry-bench plugin=$BUILD/libnccl-net-ferry.so fake=$BUILD/fakeibv/lib
for f in "$bench" "$plugin" "$fake/libibverbs.so.1"; do
  [ -e "$f" ] || { echo "ib_null: $f missing (build ferry-bench, the plugin and fakeibv in $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT/logs" || exit 1
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: bench/ib_null.sh --build $BUILD --reps $REPS --time $TIME OUTDIR"
} >"$OUT/env.txt"
export NCCL_SOCKET_IFNAME=lo NCCL_FERRY_BACKEND=ib LD_LIBRARY_PATH=$fake FAKEIBV_RETRY_TIMEOUT_MS=2000
# --slots 1: every message of a connection uses one buffer, so the stream's
# data check is off (a null device leaves the receive buffer as it was).
args=(--plugin "$plugin" --mode ferry,pingpong --conns 1 --min 16 --max 1M --pp-min 16
      --pp-max 1M --slots 1 --reps 1 --time "$TIME" --timeout 300)
csv=$OUT/ib_null.csv
echo "device,round,test,impl,conns,streams,threads,depth,size_bytes,rep,iterations,seconds,gbytes_per_s,msgs_per_s,lat_p50_us,lat_p99_us" >"$csv"
fail=0
for r in $(seq 1 "$REPS"); do
  # The order alternates, so a drift of the machine hits both alike.
  if [ $((r % 2)) -eq 1 ]; then order="null copy"; else order="copy null"; fi
  for dev in $order; do
    n=1; [ "$dev" = copy ] && n=0
    one=$OUT/logs/$dev-$r.csv
    if FAKEIBV_NULL_PAYLOAD=$n FAKEIBV_STATS=1 "$bench" "${args[@]}" --csv "$one" \
        >"$OUT/logs/$dev-$r.txt" 2>&1; then
      tail -n +2 "$one" | sed "s/^/$dev,$r,/" >>"$csv"
      echo "ib_null: round $r $dev: done"
    else
      echo "ib_null: round $r $dev: FAILED (see $OUT/logs/$dev-$r.txt)"; fail=1
    fi
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/env.txt"
# Per device, test, size: median of the rounds and their range (with 5
# rounds the range holds the true median with 94% confidence).
awk -F, 'NR > 1 {
    k = $1 "," $3 "," $9
    v = ($3 == "stream") ? $14 : $15
    vals[k] = (k in vals) ? vals[k] " " v : v
  }
  END {
    for (k in vals) {
      n = split(vals[k], a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      split(k, f, ",")
      print k "," (f[2] == "stream" ? "msgs_per_s" : "rtt_p50_us") "," med "," a[1] "," a[n] "," n
    }
  }' "$csv" | sort -t, -k2,2r -k1,1r -k3,3n >"$OUT/summary.body"
{ echo "device,test,size_bytes,metric,median,low,high,rounds"; cat "$OUT/summary.body"; } >"$OUT/summary.csv"
rm -f "$OUT/summary.body"
awk -F, 'NR > 1 { m[$2 "," $3 "," $1] = sprintf("%s [%s-%s]", $5, $6, $7); s[$3] = 1; t[$2] = 1 }
  END {
    print "| test | size | null device | copying device | null / copying |"
    print "|---|---|---|---|---|"
    split("stream pingpong", order, " ")
    for (o = 1; o <= 2; o++) {
      tt = order[o]
      if (!(tt in t)) continue
      n = 0; for (x in s) z[++n] = x + 0
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (z[j] < z[i]) { q = z[i]; z[i] = z[j]; z[j] = q }
      for (i = 1; i <= n; i++) {
        a = m[tt "," z[i] ",null"]; b = m[tt "," z[i] ",copy"]
        if (a == "" && b == "") continue
        split(a, x1, " "); split(b, x2, " ")
        r = (x2[1] + 0 > 0) ? sprintf("%.2f", x1[1] / x2[1]) : "-"
        print "| " (tt == "stream" ? "msg/s" : "ping-pong p50 us") " | " z[i] " | " a " | " b " | " r " |"
      }
    }
  }' "$OUT/summary.csv" >"$OUT/summary.md"
cat "$OUT/summary.md"
# The null device must have skipped payloads: each null run's stats line says so.
if [ -e "$OUT/logs/null-1.txt" ] && ! grep -q "null payload: [1-9]" "$OUT/logs/null-1.txt"; then
  echo "ib_null: FAIL: the first null run's fakeibv exit lines count no skipped payload"
  fail=1
fi
exit $fail
