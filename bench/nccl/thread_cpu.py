#!/usr/bin/env python3
"""Per-thread CPU of running processes over a window, from /proc.

    thread_cpu.py --window S PID...        one sample: prints TSV rows
    thread_cpu.py --table OUTDIR           threads-*.tsv of a run -> threads.md

Sample: reads /proc/PID/task/*/stat and status at the start and the end of
the window; per thread, CPU seconds per second of wall (utime + stime), the
voluntary and involuntary context switches per second, the CPU it last ran on
and its name (NCCL names its proxy threads, CUDA its helpers, ferry its
own). In between, every 20 ms, the CPU each thread is on: which threads
share a core. Columns: pid, tid, name, cpu, vol_per_s, invol_per_s,
last_cpu, cpus (CPU:percent of those looks, most first), sys (the part of cpu
spent in the kernel: a thread that moves bytes through sockets spends most of
its time copying them there).

Table: mpirun_ab.sh --threads and regenerate.sh --threads write one
threads-rep<R>-<config>.tsv per run;
the table gives, per configuration and thread name (threads of one name in a
rank summed, then ranks averaged), the median over repetitions. It tells which
threads a rank's cores go to: a CPU-bound rank shows its threads' CPU adding
up to the cores it was given.
"""
import glob
import os
import re
import statistics
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def read_stat(pid, tid):
    """(name, CPU ticks, CPU last run on, kernel ticks) of a thread, None once it is gone."""
    try:
        with open("/proc/%s/task/%s/stat" % (pid, tid)) as f:
            stat = f.read()
    except OSError:
        return None
    # The name is in parentheses and may hold spaces; fields follow the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    return (stat[stat.index("(") + 1:stat.rindex(")")], int(fields[11]) + int(fields[12]),
            int(fields[36]), int(fields[12]))


def read_switches(pid, tid):
    try:
        with open("/proc/%s/task/%s/status" % (pid, tid)) as f:
            status = f.read()
    except OSError:
        return None
    return (int(re.search(r"\bvoluntary_ctxt_switches:\s+(\d+)", status).group(1)),
            int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status).group(1)))


def snapshot(pids, switches):
    """{(pid, tid): (name, ticks, last_cpu, sys_ticks[, vol, invol])}; the switches only when asked."""
    snap = {}
    for pid in pids:
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:  # The rank exited before or during the window.
            continue
        for tid in tids:
            t = read_stat(pid, tid)
            sw = read_switches(pid, tid) if switches and t is not None else ()
            if t is not None and sw is not None:
                snap[(pid, tid)] = t + sw
    return snap


def where(snap, seen):
    for key, t in snap.items():
        counts = seen.setdefault(key, {})
        counts[t[2]] = counts.get(t[2], 0) + 1


def host_times():
    """The host's CPU time by kind from /proc/stat's first line, in ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    return {"user": v[0] + v[1], "sys": v[2] + v[5], "softirq": v[6], "idle": v[3] + v[4],
            "steal": v[7] if len(v) > 7 else 0}


def sample(window, pids):
    seen = {}
    h0 = host_times()
    t0, a = time.monotonic(), snapshot(pids, True)
    where(a, seen)
    # In between, only where each thread runs: one stat read per thread.
    while time.monotonic() - t0 < window - 0.02:
        time.sleep(0.02)
        where(snapshot(pids, False), seen)
    t1, b = time.monotonic(), snapshot(pids, True)
    h1 = host_times()
    wall = t1 - t0
    # The whole host, in CPUs: busy with anything (these ranks or not) and idle.
    print("# host CPUs: " + " ".join("%s %.2f" % (k, (h1[k] - h0[k]) / TICK / wall) for k in h1))
    print("pid\ttid\tname\tcpu\tvol_per_s\tinvol_per_s\tlast_cpu\tcpus\tsys")
    for key in sorted(b, key=lambda k: (int(k[0]), int(k[1]))):
        if key not in a:
            continue
        name, ticks, last, sys_ticks, vol, invol = b[key]
        _, ticks0, _, sys0, vol0, invol0 = a[key]
        counts = seen.get(key, {})
        total = sum(counts.values()) or 1
        cpus = ",".join("%d:%d" % (c, round(100.0 * n / total))
                        for c, n in sorted(counts.items(), key=lambda cn: -cn[1]))
        print("%s\t%s\t%s\t%.3f\t%.0f\t%.0f\t%d\t%s\t%.3f" % (
            key[0], key[1], name, (ticks - ticks0) / TICK / wall, (vol - vol0) / wall,
            (invol - invol0) / wall, last, cpus, (sys_ticks - sys0) / TICK / wall))


def table(outdir):
    # per config -> per thread name -> list over runs of the per-rank mean
    data = {}
    hosts = {}  # per config -> kind of host CPU time -> list over runs
    for path in sorted(glob.glob(os.path.join(outdir, "logs", "threads-rep*-*.tsv"))):
        config = re.match(r"threads-rep\d+-(.*)\.tsv", os.path.basename(path)).group(1)
        per_rank = {}
        with open(path) as f:
            lines = f.read().splitlines()
        rows = [line.split("\t") for line in lines if not line.startswith(("pid", "#"))]
        for line in lines:
            if line.startswith("# host CPUs: "):
                w = line[len("# host CPUs: "):].split()
                for k, v in zip(w[0::2], w[1::2]):
                    hosts.setdefault(config, {}).setdefault(k, []).append(float(v))
        # Rows of 7 columns come from runs before the cpus column, of 8 before sys.
        for r in (r for r in rows if len(r) in (7, 8, 9)):
            pid, name, cpu, vol, invol = r[0], r[2], r[3], r[4], r[5]
            sys_cpu = float(r[8]) if len(r) == 9 else float("nan")
            # Numbered thread names (cuda00001400006, NCCL Progress 3) collapse to one kind.
            kind = re.sub(r"\d+", "N", name).strip()
            acc = per_rank.setdefault(kind, {}).setdefault(pid, [0.0, 0.0, 0.0, 0, 0.0])
            acc[0] += float(cpu)
            acc[1] += float(vol)
            acc[2] += float(invol)
            acc[3] += 1
            acc[4] += sys_cpu
        for kind, ranks in per_rank.items():
            n = len(ranks)
            mean = [sum(r[i] for r in ranks.values()) / n for i in range(5)]
            data.setdefault(config, {}).setdefault(kind, []).append(mean)
    out = ["# CPU per rank by thread (mpirun_ab.sh or regenerate.sh --threads)", "",
           "CPU seconds per second of wall per rank (threads of one kind summed), of them in the",
           "kernel (sys), voluntary and involuntary switches per second, threads of that kind per",
           "rank: medians over repetitions.",
           ""]
    for config in sorted(data):
        out += ["## %s" % config, "", "| thread | CPU | sys | vol/s | invol/s | threads |",
                "|---|---|---|---|---|---|"]
        kinds = data[config]
        total = 0.0
        for kind in sorted(kinds, key=lambda k: -statistics.median(m[0] for m in kinds[k])):
            ms = kinds[kind]
            cpu = statistics.median(m[0] for m in ms)
            total += cpu
            sys_med = statistics.median(m[4] for m in ms)
            out.append("| %s | %.2f | %s | %.0f | %.0f | %.0f |" % (
                kind, cpu, "?" if sys_med != sys_med else "%.2f" % sys_med,
                statistics.median(m[1] for m in ms), statistics.median(m[2] for m in ms),
                statistics.median(m[3] for m in ms)))
        out += ["| all | %.2f | | | | |" % total, ""]
        if config in hosts:
            out += ["Whole host, CPUs (medians): " + ", ".join(
                "%s %.2f" % (k, statistics.median(v)) for k, v in hosts[config].items()), ""]
    with open(os.path.join(outdir, "threads.md"), "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


def main(argv):
    if len(argv) == 3 and argv[1] == "--table":
        table(argv[2])
        return 0
    if len(argv) >= 4 and argv[1] == "--window":
        sample(float(argv[2]), argv[3:])
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
