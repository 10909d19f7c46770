#!/usr/bin/env python3
"""pool_matrix.py: ferry against the better NCCL Socket configuration, pooled
over several mpirun_ab.sh runs of the same binding.

    bench/nccl/pool_matrix.py [--out DIR] [--ferry CONFIG] [--against A+B]
                              LABEL=RUN_DIR[,RUN_DIR...] ...

One LABEL per binding (or any grouping), each with the mpirun_ab.sh output
folders to pool (their raw-mpirun.csv). A single run's medians move by 10-20 %
from one call to the next where the CPU is the limit (one core per rank), so
one run can put a tie on either side of 1.0; pooling the repetitions of every
run of the same code says where it sits.

Per label and size, every repetition is paired with the Socket runs of the
same repetition of its run (the k-th run of each configuration ran in
repetition k), so the drift from one run to the next cancels:
- ratio: the median over all pooled repetitions of ferry's busbw over that
  Socket configuration's, against the better Socket configuration (the one
  this ratio is lowest against);
- interval: the 5th-95th percentile of that median over 2000 bootstrap
  resamples of the paired repetitions (seeded: the same input gives the same
  table);
- won: repetitions in which ferry beat every Socket configuration its run
  measured, over the repetitions that had ferry and at least one of them;
- runs: how many runs had that size.
Writes DIR/pooled.md and DIR/pooled-<label>.csv: summary.csv's columns with
ratios in place of GB/s (ferry's median ratio and interval as busbw_median,
_min and _max; "socket-better" at 1), so
`ratio_plot.sh OUT ferry socket-better LABEL=DIR/pooled-<label>.csv ...`
draws them. DIR defaults to the current folder.
"""
import argparse
import csv
import os
import random
import re
import statistics
import sys

BOOT = 2000
SEED = 22


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def read_run(path):
    """{(config, size): [busbw per repetition, in run order]}."""
    raw = os.path.join(path, "raw-mpirun.csv")
    if not os.path.exists(raw):
        sys.exit(f"pool_matrix.py: {raw} not found (is {path} an mpirun_ab.sh folder?)")
    reps = {}
    with open(raw) as f:
        for r in csv.DictReader(f):
            if r["op"] != "all_reduce":
                continue
            reps.setdefault((r["label"], int(r["size_bytes"])), []).append(float(r["busbw_gbps"]))
    return reps


def boot_median(rng, vals):
    """5th and 95th percentile of the median of vals over bootstrap resamples."""
    meds = sorted(statistics.median([rng.choice(vals) for _ in vals]) for _ in range(BOOT))
    return meds[int(0.05 * BOOT)], meds[int(0.95 * BOOT) - 1]


def pool(dirs, ferry_cfg, against, rng):
    """Rows per size: (size, ratio, lo, hi, better, won, tried, nruns)."""
    paired, won, tried, nruns = {}, {}, {}, {}
    for d in dirs:
        reps = read_run(d)
        for s in sorted({s for (c, s) in reps if c == ferry_cfg}):
            f = reps[(ferry_cfg, s)]
            socks = {c: reps[(c, s)] for c in against if (c, s) in reps}
            if not socks:
                continue
            nruns[s] = nruns.get(s, 0) + 1
            # The k-th run of each configuration ran in repetition k: pair them.
            for c, x in socks.items():
                paired.setdefault((c, s), []).extend(f[k] / x[k] for k in range(min(len(f), len(x)))
                                                     if x[k] > 0)
            n = min(len(f), *(len(x) for x in socks.values()))
            won[s] = won.get(s, 0) + sum(1 for k in range(n)
                                         if f[k] >= max(x[k] for x in socks.values()))
            tried[s] = tried.get(s, 0) + n
    rows = []
    for s in sorted(nruns):
        have = [c for c in against if paired.get((c, s))]
        if not have:
            continue
        # The better Socket configuration is the one ferry's paired ratio is lowest against.
        better = min(have, key=lambda c: statistics.median(paired[(c, s)]))
        r = paired[(better, s)]
        lo, hi = boot_median(rng, r)
        rows.append((s, statistics.median(r), lo, hi, better, won[s], tried[s], nruns[s]))
    return rows


def slug(label):
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower() or "run"


def main():
    p = argparse.ArgumentParser(description="pool mpirun_ab.sh runs per binding")
    p.add_argument("--out", default=".", help="folder for pooled.md and pooled-<label>.csv")
    p.add_argument("--ferry", default="ferry", help="ferry's configuration label")
    p.add_argument("--against", default="socket-default+socket-2x2",
                   help="Socket configurations, joined by '+': ferry is held to the better")
    p.add_argument("groups", nargs="+", metavar="LABEL=RUN_DIR[,RUN_DIR...]")
    args = p.parse_args()
    against = args.against.split("+")
    rng = random.Random(SEED)
    os.makedirs(args.out, exist_ok=True)
    md = ["# ferry / the better of " + " and ".join(against) + ", pooled runs, all_reduce busbw",
          "",
          "Median of the paired per-repetition ratios; [5th-95th percentile of that median over "
          "bootstrap resamples of the repetitions]; repetitions ferry won / repetitions; runs "
          "pooled. Written by "
          "bench/nccl/pool_matrix.py.", ""]
    for group in args.groups:
        if "=" not in group:
            p.error(f"'{group}' is not LABEL=RUN_DIR[,RUN_DIR...]")
        label, dirs = group.split("=", 1)
        rows = pool([d for d in dirs.split(",") if d], args.ferry, against, rng)
        if not rows:
            sys.exit(f"pool_matrix.py: no size of {label} has {args.ferry} and a Socket run")
        md += [f"## {label}", "", "runs: " + ", ".join(dirs.split(",")), "",
               "| size | ratio | interval | better Socket | won | runs |", "|---|---|---|---|---|---|"]
        with open(os.path.join(args.out, f"pooled-{slug(label)}.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["build", "nccl_version", "config", "op", "size_bytes", "runs",
                        "busbw_median", "busbw_min", "busbw_max", "time_us_median",
                        "time_us_min", "time_us_max"])
            for s, ratio, lo, hi, better, won, tried, nruns in rows:
                md.append(f"| {human(s)} | {ratio:.2f} | [{lo:.2f}-{hi:.2f}] | {better} | "
                          f"{won}/{tried} | {nruns} |")
                # Ratios, not GB/s: ferry's pooled ratio against the better Socket at 1.
                w.writerow(["pooled", "", args.ferry, "all_reduce", s, tried, f"{ratio:.4f}",
                            f"{lo:.4f}", f"{hi:.4f}", "", "", ""])
                w.writerow(["pooled", "", "socket-better", "all_reduce", s, tried, "1", "", "",
                            "", "", ""])
        md.append("")
    with open(os.path.join(args.out, "pooled.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
