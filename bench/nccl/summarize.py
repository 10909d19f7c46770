#!/usr/bin/env python3
"""Summarize a compare.sh output folder into summary.md and summary.csv.

Reads raw-<build>.csv (ferry_nccl_bench rows, one file per NCCL build, label =
configuration), runs.tsv (exit status of every run) and proof-<build>.txt.
Per build, op and size: the median over repetitions of busbw and of time for
each configuration, and ferry's ratio to each Socket configuration. Medians
and ratios only: absolute numbers drift between runs and machines.
"""
import csv
import os
import random
import statistics
import sys

# The configurations compared, the first being ferry's (compare.sh --ib: ferry's ib
# backend and NCCL's own IB over fakeibv).
CONFIGS = os.environ.get("FNB_SUMMARY_CONFIGS", "ferry,socket-default,socket-2x2").split(",")
NAMES = {"socket-default": "Socket default", "socket-2x2": "Socket 2x2", "nccl-ib": "NCCL IB",
         "ferry-ib": "ferry ib"}


def name(config):
    return NAMES.get(config, config)
TIME_TABLE_MAX = 512 << 10  # Latency-bound sizes get a time table too.


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def fmt(v, digits):
    return f"{v:.{digits}f}" if v is not None else "-"


def load_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def group(rows):
    """(op, size, label) -> list of (busbw, time_us)."""
    out = {}
    for r in rows:
        key = (r["op"], int(r["size_bytes"]), r["label"])
        out.setdefault(key, []).append((float(r["busbw_gbps"]), float(r["time_us"])))
    return out


def median(groups, key, idx):
    vals = [v[idx] for v in groups.get(key, [])]
    return statistics.median(vals) if vals else None


def paired(groups, op, size, a, b):
    """Per-repetition busbw ratios a / b: the k-th run of each configuration
    ran in the same repetition. Returns (median, low, high, wins, n) with a
    95 % bootstrap interval of the median, or None when the runs do not pair
    up (a failed run) or there are fewer than 5."""
    va, vb = groups.get((op, size, a), []), groups.get((op, size, b), [])
    if len(va) != len(vb) or len(va) < 5:
        return None
    r = [x[0] / y[0] for x, y in zip(va, vb) if y[0] > 0]
    if len(r) != len(va):
        return None
    rng = random.Random(1)
    boot = sorted(statistics.median(rng.choices(r, k=len(r))) for _ in range(2000))
    return statistics.median(r), boot[49], boot[1950], sum(1 for v in r if v > 1), len(r)


def paired_section(groups, op, sizes, others, md):
    """Ratios of one repetition's runs, which the same drift touched alike."""
    cells = {(s, c): paired(groups, op, s, CONFIGS[0], c) for s in sizes for c in others}
    if all(v is None for v in cells.values()):
        return
    md.append(f"\n### {op}: {name(CONFIGS[0])} / each, busbw ratio paired by repetition: "
              "median [95 % bootstrap interval], repetitions won\n")
    md.append("| size | " + " | ".join(f"{name(CONFIGS[0])} / {name(c)}" for c in others) + " |")
    md.append("|---|" + "---|" * len(others))
    for s in sizes:
        row = []
        for c in others:
            v = cells[(s, c)]
            row.append("-" if v is None else f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}], {v[3]}/{v[4]}")
        md.append(f"| {human(s)} | " + " | ".join(row) + " |")


def build_section(build, rows, proof, md, summary):
    version = sorted({r["nccl_version"] for r in rows})
    groups = group(rows)
    variants = sorted({k[2] for k in groups} - set(CONFIGS))
    runs = {c: max((len(v) for k, v in groups.items() if k[2] == c), default=0)
            for c in CONFIGS + variants}
    md.append(f"## NCCL {', '.join(version) or '?'} ({build})\n")
    md.extend(f"    {line}" for line in proof)
    if proof:
        md.append("")
    md.append("2 ranks on GPU 0, NCCL_HOSTID per rank (all traffic over the network "
              "transport), MPS, NCCL_SOCKET_IFNAME=lo. Runs per configuration: "
              + ", ".join(f"{c} {runs[c]}" for c in CONFIGS + variants)
              + ". Interleaved; the order of each repetition follows a Williams design, so each "
              "configuration runs in every position and right after every other equally often.\n")
    # nccl-tests -c 0 (a bound measured without checking) writes N/A there.
    wrong = sum(int(r["wrong"]) for r in rows if r["wrong"].isdigit())
    unchecked = sum(1 for r in rows if not r["wrong"].isdigit())
    if wrong:
        md.append(f"**{wrong} wrong elements in the comparison runs.**\n")
    if unchecked:
        md.append(f"Results not checked in {unchecked} of {len(rows)} rows (nccl-tests -c 0).\n")
    for op in sorted({k[0] for k in groups}):
        sizes = sorted({k[1] for k in groups if k[0] == op})
        md.append(f"### {op}: median busbw, GB/s (ratio > 1: ferry faster)\n")
        md.append("| size | " + " | ".join(name(c) for c in CONFIGS) + " | "
                  + " | ".join(f"{name(CONFIGS[0])} / {name(c)}" for c in CONFIGS[1:]) + " |")
        md.append("|---|" + "---|" * (2 * len(CONFIGS) - 1))
        for s in sizes:
            bw = [median(groups, (op, s, c), 0) for c in CONFIGS]
            md.append(f"| {human(s)} | " + " | ".join(fmt(b, 2) for b in bw) + " | "
                      + " | ".join(ratio(bw[0], b) for b in bw[1:]) + " |")
        if variants:
            md.append(f"\n### {op}: ferry variants, median busbw GB/s (ratio to ferry's defaults)\n")
            md.append("| size | ferry | " + " | ".join(variants) + " |")
            md.append("|---|---|" + "---|" * len(variants))
            for s in sizes:
                base = median(groups, (op, s, CONFIGS[0]), 0)
                cells = []
                for v in variants:
                    bw = median(groups, (op, s, v), 0)
                    cells.append(f"{fmt(bw, 2)} ({ratio(bw, base)})")
                md.append(f"| {human(s)} | {fmt(base, 2)} | " + " | ".join(cells) + " |")
        paired_section(groups, op, sizes, CONFIGS[1:] + variants, md)
        small = [s for s in sizes if s <= TIME_TABLE_MAX]
        if small:
            md.append(f"\n### {op}: median time per operation, us (ratio < 1: ferry faster)\n")
            md.append("| size | " + " | ".join(name(c) for c in CONFIGS) + " | "
                      + " | ".join(f"{name(CONFIGS[0])} / {name(c)}" for c in CONFIGS[1:]) + " |")
            md.append("|---|" + "---|" * (2 * len(CONFIGS) - 1))
            for s in small:
                t = [median(groups, (op, s, c), 1) for c in CONFIGS]
                md.append(f"| {human(s)} | " + " | ".join(fmt(x, 1) for x in t) + " | "
                          + " | ".join(ratio(t[0], x) for x in t[1:]) + " |")
        md.append("")
        for (o, s, c), vals in sorted(groups.items()):
            if o != op:
                continue
            bws = [v[0] for v in vals]
            ts = [v[1] for v in vals]
            summary.append([build, ", ".join(version), c, o, s, len(vals),
                            statistics.median(bws), min(bws), max(bws),
                            statistics.median(ts), min(ts), max(ts)])


def proof_digest(lines):
    """The verdict, the NCCL library line, and one line of each kind of evidence."""
    keep, seen = [], set()
    for line in lines:
        kind = next((k for k in ("proof ", "# NCCL", "# wrong", "Loaded net plugin",
                                 "Using network", " via ") if k in line), None)
        if kind and kind not in seen:
            seen.add(kind)
            keep.append(line.strip())
    return keep


def failed_runs(outdir):
    path = os.path.join(outdir, "runs.tsv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if r["exit"] != "0"]


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    md = [f"# compare.sh summary: {', '.join(name(c) for c in CONFIGS)}\n"]
    summary = []
    builds = sorted(f[4:-4] for f in os.listdir(outdir)
                    if f.startswith("raw-") and f.endswith(".csv"))
    proofs = sorted(f[6:-4] for f in os.listdir(outdir)
                    if f.startswith("proof-") and f.endswith(".txt"))
    for b in sorted(set(builds) | set(proofs)):
        proof_path = os.path.join(outdir, f"proof-{b}.txt")
        proof = open(proof_path).read().splitlines() if os.path.exists(proof_path) else []
        proof = proof_digest(proof)
        raw_path = os.path.join(outdir, f"raw-{b}.csv")
        rows = load_rows(raw_path) if os.path.exists(raw_path) else []
        build_section(b, rows, proof, md, summary)
    failed = failed_runs(outdir)
    if failed:
        md.append("## Failed runs\n")
        md.extend(f"- {r['build']} rep {r['rep']} {r['config']}: exit {r['exit']} "
                  f"after {r['seconds']} s (logs/{r['build']}-rep{r['rep']}-{r['config']}.log)"
                  for r in failed)
        md.append("")
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(outdir, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["build", "nccl_version", "config", "op", "size_bytes", "runs",
                    "busbw_median", "busbw_min", "busbw_max",
                    "time_us_median", "time_us_min", "time_us_max"])
        w.writerows(summary)
    print("\n".join(md))
    return 0 if summary else 1


if __name__ == "__main__":
    sys.exit(main())
