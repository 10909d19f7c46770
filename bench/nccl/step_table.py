#!/usr/bin/env python3
"""The proxy-step phase tables of compare.sh --step-time, appended to summary.md.

Reads OUTDIR/logs/flush-prof.txt: the lines libferry-flush-prof.so printed at
each comm's finalize, each prefixed by compare.sh with "build=B rep=R
config=C". Keeps the step_prof lines: one rank's time in one phase (proxy-step
state) of the steps of one all_reduce size, as a sample count and a median in
microseconds. Per build and size, for each ferry / NCCL configuration pair
present: per phase, the median over ranks and repetitions of those medians,
with the total samples, for both, and ferry / NCCL.

With --regen OUTDIR it reads regenerate.sh --step-time's OUTDIR/step-prof.txt(.xz)
instead (build = topic/operation) and appends to OUTDIR/README.md, per topic,
operation and size, one table of every configuration that ran (topics.txt's
order, ferry's first) with ferry's ratio to each of the others.
"""
import lzma
import os
import statistics
import sys

from flush_table import FIELD, human, write_summary  # Same lines file, same conventions.

PAIRS = (("ferry-ib", "nccl-ib"), ("ferry-ib-gdr", "nccl-ib-gdr"))
PHASES = ("SendGPUWait", "SendPeerWait", "SendWait", "RecvWait", "RecvFlushWait", "RecvGPUWait")


def load(path):
    """(build, config, bytes, phase) -> {"med": [...], "n": total}; (build, bytes) -> protos."""
    cells, protos = {}, {}
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        for line in f:
            if "step_prof:" not in line:
                continue
            kv = dict(FIELD.findall(line))
            if "median_us" not in kv or kv.get("bytes") in (None, "unknown"):
                continue
            count = int(kv.get("steps", "0"))
            if count == 0 or kv.get("phase") not in PHASES:
                continue
            build = kv.get("build", "?")
            key = (build, kv.get("config", "?"), kv["bytes"], kv["phase"])
            e = cells.setdefault(key, {"med": [], "n": 0})
            e["med"].append(float(kv["median_us"]))
            e["n"] += count
            protos.setdefault((build, kv["bytes"]), set()).add(kv.get("proto", "?"))
    return cells, protos


def cell(e):
    if e is None:
        return "-", None
    v = statistics.median(e["med"])
    return f"{v:.2f} ({e['n']})", v


def table(cells, build, size, configs, ratio_names=None):
    """One row per phase: each configuration's cell, then configs[0] over each other's."""
    first, others = configs[0], configs[1:]
    ratio_names = ratio_names or [f"{first} / {c}" for c in others]
    md = ["| phase | " + " | ".join(f"{c} us" for c in configs) + " | " +
          " | ".join(ratio_names) + " |", "|---|" + "---|" * (len(configs) + len(others))]
    for phase in PHASES:
        es = [cells.get((build, c, size, phase)) for c in configs]
        if all(e is None for e in es):
            continue
        shown = [cell(e) for e in es]
        fv = shown[0][1]
        rs = [f"{fv / v:.2f}" if fv is not None and v else "-" for _, v in shown[1:]]
        md.append(f"| {phase} | " + " | ".join(c for c, _ in shown) + " | " + " | ".join(rs) + " |")
    return md + [""]


def section(cells, protos):
    md = ["## Proxy step phases (NCCL profiler: time in each proxy-step state)\n",
          "Median microseconds per phase (phase samples), the median over ranks and "
          "repetitions of each rank's median. A phase runs from the record of its state to "
          "the step's next state or its end. Send: SendGPUWait (the GPU fills the step's "
          "buffer), SendPeerWait (data ready: NCCL records it just before each isend call, so "
          "it is the call itself and, where isend gives no request yet, the wait for the "
          "receiver's clear-to-send), SendWait (isend accepted until its test() says done). "
          "Receive: RecvWait (irecv posted until its test() says done), RecvFlushWait (the "
          "GDR flush, when there is one), RecvGPUWait (until the GPU is done with the step). "
          "A repeated state counts as two samples. Both configurations loaded "
          "libferry-flush-prof.so, so their busbw above carries its small cost.\n"]
    for b in sorted({k[0] for k in cells}):
        md.append(f"### build {b}\n")
        for ferry, nccl in PAIRS:
            sizes = sorted({k[2] for k in cells if k[0] == b and k[1] in (ferry, nccl)}, key=int)
            for s in sizes:
                proto = "/".join(sorted(protos.get((b, s), ())))
                md.append(f"#### {ferry} vs {nccl}, {human(int(s))} ({proto})\n")
                md.extend(table(cells, b, s, [ferry, nccl], ["ferry / NCCL"]))
    return md


def regen_configs(outdir):
    """topic -> its configurations, ferry's first (topics.txt: "topic|setup|c1 c2 ...")."""
    order = {}
    with open(os.path.join(outdir, "topics.txt")) as f:
        for line in f:
            parts = line.rstrip("\n").split("|")
            if len(parts) == 3:
                order[parts[0]] = parts[2].split()
    return order


def regen_section(cells, protos, order):
    md = ["## Proxy step phases (--step-time)\n",
          "Median microseconds per proxy-step state (phase samples), the median over ranks "
          "and repetitions of each rank's median, from NCCL's profiler "
          "(libferry-flush-prof.so, loaded into every configuration, so the rows above "
          "carry its cost on all sides). Send: SendGPUWait (the GPU fills the step's buffer), "
          "SendPeerWait (the isend call, and where it gives no request yet the wait for the "
          "receiver's clear-to-send), SendWait (isend accepted "
          "until its test() says done). Receive: RecvWait (irecv posted until its test() says "
          "done), RecvFlushWait (the GDR flush), RecvGPUWait (until the GPU is done with the "
          "step).\n"]
    for b in sorted({k[0] for k in cells}):
        configs = [c for c in order.get(b.split("/")[0], [])
                   if any(k[0] == b and k[1] == c for k in cells)]
        if len(configs) < 2:
            continue
        for s in sorted({k[2] for k in cells if k[0] == b}, key=int):
            proto = "/".join(sorted(protos.get((b, s), ())))
            md.append(f"### {b}, {human(int(s))} ({proto})\n")
            md.extend(table(cells, b, s, configs))
    return md


def regen_main(outdir):
    path = os.path.join(outdir, "step-prof.txt")
    if not os.path.exists(path):
        path += ".xz"  # A recorded run keeps its lines compressed.
    cells, protos = load(path) if os.path.exists(path) else ({}, {})
    md = regen_section(cells, protos, regen_configs(outdir)) if cells else []
    if len(md) < 3:
        md = ["## Proxy step phases (--step-time)\n",
              "No step_prof lines of two configurations of one run (step-prof.txt): the "
              "profiler was not loaded, or no run got to its finalize.\n"]
    with open(os.path.join(outdir, "README.md"), "a") as f:
        f.write("\n" + "\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if cells else 1


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--regen":
        return regen_main(sys.argv[2])
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    path = os.path.join(outdir, "logs", "flush-prof.txt")
    cells, protos = load(path) if os.path.exists(path) else ({}, {})
    if cells:
        md = section(cells, protos)
    else:
        md = ["## Proxy step phases\n",
              "No step_prof lines (logs/flush-prof.txt): the profiler was not loaded, or no "
              "run got to its finalize.\n"]
    write_summary(outdir, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
