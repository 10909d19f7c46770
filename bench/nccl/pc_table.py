#!/usr/bin/env python3
"""The proxy thread's CPU by function, compare.sh --pc-sample, appended to summary.md.

Reads OUTDIR/logs/flush-prof.txt: the pc_sample and pc_total lines of
libferry-flush-prof.so's PC sampler (bench/nccl/pc_sampler.h), each prefixed by
compare.sh with "build=B rep=R config=C". Resolves each sampled offset to a
function with addr2line where its shared object is on this machine (run it
where the benchmark ran) and falls back to the nearest exported symbol dladdr
gave (marked "~"). Per build, for each ferry / NCCL configuration pair:
nanoseconds of proxy-thread time per step-state record, by shared object and
by function (the largest differences first), summed over ranks and
repetitions. A run of one size says most (--sizes 16K): the records then all
belong to that size.
"""
import os
import subprocess
import sys
from collections import defaultdict

from flush_table import FIELD, write_summary

PAIRS = (("ferry-ib", "nccl-ib"), ("ferry-ib-gdr", "nccl-ib-gdr"))
TOP = 30


def load(path):
    """samples[(build, config)][(dso, off, sym)] = n; totals[(build, config)] = [samples, records, hz]."""
    samples = defaultdict(lambda: defaultdict(int))
    totals = defaultdict(lambda: [0, 0, 0])
    with open(path) as f:
        for line in f:
            if "pc_sample:" not in line and "pc_total:" not in line:
                continue
            kv = dict(FIELD.findall(line))
            key = (kv.get("build", "?"), kv.get("config", "?"))
            if "pc_total:" in line:
                t = totals[key]
                t[0] += int(kv["samples"])
                t[1] += int(kv["records"])
                t[2] = int(kv["hz"])
            else:
                samples[key][(kv["dso"], kv["off"], kv["sym"])] += int(kv["samples"])
    return samples, totals


def resolve(samples):
    """(dso, off) -> function name, through addr2line where the object is here."""
    offs = defaultdict(set)
    for per in samples.values():
        for dso, off, _ in per:
            offs[dso].add(off)
    names = {}
    for dso, s in offs.items():
        if not os.path.isfile(dso):
            continue
        order = sorted(s)
        try:
            out = subprocess.run(["addr2line", "-f", "-e", dso] + order, capture_output=True,
                                 text=True, timeout=120).stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            continue
        for i, off in enumerate(order):
            if 2 * i < len(out) and out[2 * i] not in ("??", ""):
                names[(dso, off)] = out[2 * i]
    return names


def per_record(samples, totals, names, key):
    """{dso: ns}, {(dso, func): ns} per step-state record."""
    n_samples, records, hz = totals.get(key, (0, 0, 0))
    by_dso, by_fn = defaultdict(float), defaultdict(float)
    if records == 0 or hz == 0:
        return by_dso, by_fn
    scale = 1e9 / hz / records
    for (dso, off, sym), n in samples.get(key, {}).items():
        base = os.path.basename(dso)
        fn = names.get((dso, off)) or ("~" + sym)
        by_dso[base] += n * scale
        by_fn[(base, fn)] += n * scale
    return by_dso, by_fn


def rows(a, b, limit):
    keys = sorted(set(a) | set(b), key=lambda k: -abs(a.get(k, 0) - b.get(k, 0)))[:limit]
    return [(k, a.get(k, 0.0), b.get(k, 0.0)) for k in keys]


def main(outdir, pairs=PAIRS):
    path = os.path.join(outdir, "logs", "flush-prof.txt")
    if not os.path.isfile(path):
        print(f"pc_table.py: no {path}", file=sys.stderr)
        return 1
    samples, totals = load(path)
    if not totals:
        print(f"pc_table.py: no pc_total line in {path} (FERRY_PROF_SAMPLE_HZ unset?)",
              file=sys.stderr)
        return 1
    names = resolve(samples)
    md = ["## Proxy thread CPU by function (PC sampler, FERRY_PROF_SAMPLE_HZ)\n",
          "Nanoseconds of NCCL's proxy thread per step-state record (wall time, sampled: "
          "the thread spins), summed over ranks "
          "and repetitions; records are the six step states NCCL's profiler reports, so "
          "the two transports are compared per unit of proxy work. `~name`: addr2line "
          "found no symbol, the nearest exported one is shown.\n"]
    for build in sorted({k[0] for k in totals}):
        for ferry, nccl in pairs:
            fk, nk = (build, ferry), (build, nccl)
            if fk not in totals or nk not in totals:
                continue
            fd, ff = per_record(samples, totals, names, fk)
            nd, nf = per_record(samples, totals, names, nk)
            md.append(f"### build {build}: {ferry} against {nccl}\n")
            for label, key in ((ferry, fk), (nccl, nk)):
                s, r, hz = totals[key]
                md.append(f"- {label}: {s} samples at {hz} Hz, {r} records, "
                          f"{1e9 * s / hz / r if r and hz else 0:.0f} ns per record")
            md.append("")
            md.append(f"| shared object | {ferry} ns | {nccl} ns | difference |")
            md.append("|---|---|---|---|")
            for k, a, b in rows(fd, nd, TOP):
                md.append(f"| {k} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
            md.append("")
            md.append(f"| shared object: function | {ferry} ns | {nccl} ns | difference |")
            md.append("|---|---|---|---|")
            for (dso, fn), a, b in rows(ff, nf, TOP):
                md.append(f"| {dso}: {fn} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
            md.append("")
    write_summary(outdir, md)
    return 0


if __name__ == "__main__":
    # pc_table.py [OUTDIR [FERRY:NCCL ...]]: other configuration pairs than compare.sh's
    # (mpirun_ab.sh variants that load the profiler, say).
    args = sys.argv[1:]
    sys.exit(main(args[0] if args else ".",
                  tuple(tuple(p.split(":", 1)) for p in args[1:]) or PAIRS))
