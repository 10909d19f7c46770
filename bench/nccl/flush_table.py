#!/usr/bin/env python3
"""The flush-time table of compare.sh --flush-time, appended to summary.md.

Reads OUTDIR/logs/flush-prof.txt: the lines libferry-flush-prof.so printed at
each comm's finalize, each prefixed by compare.sh with "build=B rep=R
config=C". One such line holds one rank's flushes of one all_reduce size
(proto=SIMPLE, the only protocol NCCL flushes) or of all sizes (bytes=all):
their count and median microseconds from NCCL's RecvFlushWait to RecvGPUWait.
Per build and size: the median over ranks and repetitions of those medians
for ferry-ib-gdr and nccl-ib-gdr, and ferry / NCCL.
"""
import os
import re
import statistics
import sys

FERRY, NCCL = "ferry-ib-gdr", "nccl-ib-gdr"
FIELD = re.compile(r"(\w+)=(\S+)")


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def load(path):
    """(build, config, bytes) -> {"med": [...], "n": total, "proto": set}."""
    out = {}
    with open(path) as f:
        for line in f:
            if "flush_prof:" not in line:
                continue
            kv = dict(FIELD.findall(line))
            if "median_us" not in kv or kv.get("bytes") in (None, "unknown"):
                continue
            count = int(kv.get("flushes", kv.get("noflush_steps", "0")))
            key = (kv.get("build", "?"), kv.get("config", "?"), kv["bytes"])
            e = out.setdefault(key, {"med": [], "n": 0, "base": [], "proto": set()})
            e["proto"].add(kv.get("proto", "?"))
            if "flushes" in kv and count > 0:
                e["med"].append(float(kv["median_us"]))
                e["n"] += count
            elif count > 0:  # A protocol NCCL does not flush: the same interval, no flush.
                e["base"].append(float(kv["median_us"]))
    return out


def cell(e):
    if e is None:
        return "-", None
    if e["med"]:
        v = statistics.median(e["med"])
        return f"{v:.2f} ({e['n']})", v
    if e["base"]:
        protos = "/".join(sorted(p for p in e["proto"] if p.upper() != "SIMPLE"))
        return f"no flush ({protos}: {statistics.median(e['base']):.2f})", None
    return "-", None


def write_summary(outdir, md):
    """Appends the markdown lines md to OUTDIR/summary.md and prints them."""
    with open(os.path.join(outdir, "summary.md"), "a") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


def section(data):
    md = ["## GDR flush time (NCCL profiler: RecvFlushWait to RecvGPUWait per receive step)\n",
          "Median microseconds per flush (flushes timed), the median over ranks and "
          "repetitions of each rank's median; both configurations loaded "
          "libferry-flush-prof.so (NCCL_PROFILER_PLUGIN, NCCL_FERRY_PROFILER=0), so their "
          "busbw above carries its small cost. Sizes NCCL ran with LL/LL128 issue no flush: "
          "the interval without one is shown as a baseline.\n"]
    for b in sorted({k[0] for k in data}):
        sizes = sorted({k[2] for k in data if k[0] == b and k[2] != "all"}, key=int)
        md.append(f"### build {b}\n")
        md.append(f"| size | {FERRY} us | {NCCL} us | ferry / NCCL |")
        md.append("|---|---|---|---|")
        for s in sizes + ["all"]:
            fc, fv = cell(data.get((b, FERRY, s)))
            nc, nv = cell(data.get((b, NCCL, s)))
            r = f"{fv / nv:.2f}" if fv is not None and nv else "-"
            label = "all sizes" if s == "all" else human(int(s))
            md.append(f"| {label} | {fc} | {nc} | {r} |")
        md.append("")
    return md


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    path = os.path.join(outdir, "logs", "flush-prof.txt")
    if os.path.exists(path):
        md = section(load(path))
    else:
        md = ["## GDR flush time\n",
              "No flush_prof lines (logs/flush-prof.txt): the profiler was not loaded, or no "
              "run got to its finalize.\n"]
    write_summary(outdir, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
