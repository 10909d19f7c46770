#!/usr/bin/env python3
"""regen_stats.py: the tables of a bench/regenerate.sh run.

    bench/nccl/regen_stats.py DIR

Reads DIR/raw.csv (or raw.csv.xz), DIR/topics.txt, DIR/env.txt and, when there,
DIR/budget.txt, DIR/notes.md (the recorder's words, under the title) and
DIR/ratios.png (regen_plot.sh); writes
DIR/summary.csv and DIR/README.md.

Per topic, operation and size, each repetition's busbw of ferry's
configuration (the topic's first; each --variant, named ferry-LABEL, the same
way, in rows of its own) is paired with each baseline's busbw of the
same repetition (the runs of one repetition share its drift). The ratio is
taken from the times nccl-tests prints (busbw is the same factor times size
over time for both, so the busbw ratio is the inverse ratio of the times;
the printed busbw has two decimals, which at small sizes is a coarse step:
0.04 against 0.05 GB/s). For each
baseline: the median of those ratios and its 95 % bootstrap interval (2,000
resamples of the repetitions, seeded, so the same input gives the same
table). The row reports the baseline ferry fares worst against. An interval
that contains 1.0 reads "level"; otherwise "1.23x (1.10-1.35)".
"""
import csv
import io
import lzma
import os
import random
import statistics
import sys
from collections import defaultdict

from pool_matrix import human  # the same size words as the other tables

BOOT = 2000
SEED = 41


def read_raw(d):
    path = os.path.join(d, "raw.csv")
    if os.path.exists(path):
        text = open(path).read()
    elif os.path.exists(path + ".xz"):
        text = lzma.open(path + ".xz", "rt").read()
    else:
        sys.exit(f"regen_stats.py: no raw.csv or raw.csv.xz in {d}")
    return list(csv.DictReader(io.StringIO(text)))


def read_topics(d):
    topics = []
    with open(os.path.join(d, "topics.txt")) as f:
        for line in f:
            name, setup, configs = line.rstrip("\n").split("|")
            topics.append((name, setup, configs.split()))
    return topics


def read_env(d):
    env = {}
    path = os.path.join(d, "env.txt")
    if os.path.exists(path):
        for line in open(path):
            k, _, v = line.partition(": ")
            env[k.strip()] = v.strip()
    return env


def subjects(configs):
    """ferry's configuration (first) and its variants; the NCCL baselines."""
    ferries = [configs[0]] + [c for c in configs[1:] if c.startswith("ferry-") and c != configs[0]]
    return ferries, [c for c in configs if c not in ferries]


def interval(ratios, rng):
    meds = []
    for _ in range(BOOT):
        meds.append(statistics.median(rng.choice(ratios) for _ in ratios))
    meds.sort()
    return meds[int(0.025 * BOOT)], meds[int(0.975 * BOOT) - 1]


MIN_REPS = 5  # fewer repetitions than this: the row says so


def verdict(med, lo, hi, n):
    few = f" [{n} reps]" if n < MIN_REPS else ""
    if lo <= 1.0 <= hi:
        return "level" + few
    return f"{med:.2f}x ({lo:.2f}-{hi:.2f})" + few


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: regen_stats.py DIR")
    d = sys.argv[1]
    rows = read_raw(d)
    topics = read_topics(d)
    env = read_env(d)
    # busbw[(topic, op, size, config)][rep] = busbw; times[...] the same in us
    busbw = defaultdict(dict)
    times = defaultdict(dict)
    versions = set()
    for r in rows:
        key = (r["topic"], r["op"], int(r["size"]), r["config"])
        busbw[key][int(r["rep"])] = float(r["busbw"])
        times[key][int(r["rep"])] = float(r["time_us"])
        versions.add(r["nccl_version"])
    rng = random.Random(SEED)
    out = []
    for name, setup, configs in topics:
        ferries, bases = subjects(configs)
        ops = sorted({k[1] for k in busbw if k[0] == name})
        for op, ferry in ((op, ferry) for ferry in ferries for op in ops):
            sizes = sorted({k[2] for k in busbw if k[0] == name and k[1] == op})
            for size in sizes:
                mine = busbw.get((name, op, size, ferry), {})
                mine_t = times.get((name, op, size, ferry), {})
                worst = None
                for base in bases:
                    theirs = busbw.get((name, op, size, base), {})
                    got = paired(mine_t, times.get((name, op, size, base), {}), rng)
                    if got is None:
                        continue
                    med, lo, hi, reps = got
                    if worst is None or med < worst[1]:
                        worst = (base, med, lo, hi, len(reps),
                                 statistics.median(theirs[k] for k in reps))
                if worst is None:
                    continue
                base, med, lo, hi, n, base_bw = worst
                out.append({
                    "topic": name, "op": op, "size": size, "ferry": ferry,
                    "variant": int(ferry != configs[0]), "against": base,
                    "reps": n, "ferry_busbw": round(statistics.median(mine.values()), 3),
                    "against_busbw": round(base_bw, 3), "ratio": round(med, 4),
                    "lo": round(lo, 4), "hi": round(hi, 4), "verdict": verdict(med, lo, hi, n),
                })
    with open(os.path.join(d, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0].keys()) if out else ["topic"])
        w.writeheader()
        w.writerows(out)
    # After the baselines, so that their intervals draw the same resamples
    # with or without variants in the run.
    write_readme(d, topics, out, env, versions, against_variants(topics, times, rng))
    return 0


def against_variants(topics, times, rng):
    """ferry's defaults over each variant, paired by repetition as against a
    baseline: what a --variant changes, without the baselines' spread."""
    rows = []
    for name, _, configs in topics:
        ferries, _ = subjects(configs)
        for variant in ferries[1:]:
            for op, size in sorted({(k[1], k[2]) for k in times if k[0] == name}):
                got = paired(times.get((name, op, size, configs[0]), {}),
                             times.get((name, op, size, variant), {}), rng)
                if got is None:
                    continue
                med, lo, hi, reps = got
                rows.append((name, op, variant, size, med, lo, hi, verdict(med, lo, hi, len(reps))))
    return rows


def paired(mine_t, theirs_t, rng):
    """Busbw of mine over theirs from the times of the repetitions both ran:
    (median, interval low, high, those repetitions), or None."""
    reps = [k for k in sorted(set(mine_t) & set(theirs_t)) if mine_t[k] > 0]
    if not reps:
        return None
    ratios = [theirs_t[k] / mine_t[k] for k in reps]
    lo, hi = interval(ratios, rng)
    return statistics.median(ratios), lo, hi, reps


def row_text(items):
    """'4 KiB-64 KiB level; 256 KiB 1.23x (1.10-1.35); ...': runs of 'level' merged."""
    parts = []
    i = 0
    while i < len(items):
        j = i
        if items[i]["verdict"].startswith("level"):
            while j + 1 < len(items) and items[j + 1]["verdict"] == items[i]["verdict"]:
                j += 1
        span = human(items[i]["size"]) if i == j else f"{human(items[i]['size'])}-{human(items[j]['size'])}"
        parts.append(f"{span} {items[i]['verdict']}")
        i = j + 1
    return "; ".join(parts)


def tree_note(env):
    mod = env.get("dirty-files", "?")
    if mod == "?":
        return "run from a copy of that commit's tree"
    return f"{mod} modified tracked files"


def write_readme(d, topics, out, env, versions, vs_variants):
    lines = ["# Regenerated results", ""]
    notes = os.path.join(d, "notes.md")
    if os.path.exists(notes):  # What the recorder adds: the run's place, caveats.
        lines.extend(open(notes).read().rstrip("\n").split("\n"))
        lines.append("")
    lines.append(f"Command: `{env.get('command', 'bench/regenerate.sh')}` (SRC: an nccl-tests "
                 f"source tree, {env.get('nccl-tests', '?')}).")
    variants = [line[len("variant: "):].strip() for line in open(os.path.join(d, "env.txt"))
                if line.startswith("variant: ")] if os.path.exists(os.path.join(d, "env.txt")) else []
    if variants:
        lines.append("Variants: " + "; ".join(variants) + ".")
    lines.append(f"NCCL {', '.join(sorted(versions))}; commit {env.get('commit', '?').split()[0][:12]} "
                 f"({tree_note(env)}); {env.get('date', '?')}; "
                 f"{env.get('gpu', '?')}; CUDA {env.get('cuda', '?')}; {env.get('host', '?')}.")
    lines.append("")
    lines.append("Busbw of ferry over the baseline, by size: the median of ratios paired by "
                 "repetition, with its 95 % bootstrap interval; \"level\" where the interval "
                 "contains 1.0. Against the baseline ferry fares worst against at that size.")
    lines.append("")
    lines.append("| setup | ferry against | result |")
    lines.append("|---|---|---|")
    for name, setup, configs in topics:
        ferries, bases = subjects(configs)
        for ferry in ferries:
            who = "" if ferry == configs[0] else f" ({ferry})"
            for op in sorted({o["op"] for o in out if o["topic"] == name}):
                items = [o for o in out if o["topic"] == name and o["op"] == op and o["ferry"] == ferry]
                against = " / ".join(bases)
                lines.append(f"| {setup}, {op}{who} | {against} (the worse for ferry per size) | {row_text(items)} |")
    lines.append("")
    for name, setup, configs in topics:
        ferries, _ = subjects(configs)
        for op, ferry in ((op, ferry) for ferry in ferries
                          for op in sorted({o["op"] for o in out if o["topic"] == name})):
            lines.append(f"## {name}, {op}{'' if ferry == configs[0] else ', ' + ferry}: {setup}")
            lines.append("")
            lines.append(f"| size | {ferry} GB/s | baseline | baseline GB/s | ratio | 95 % interval | reps | verdict |")
            lines.append("|---|---|---|---|---|---|---|---|")
            for o in (o for o in out if o["topic"] == name and o["op"] == op and o["ferry"] == ferry):
                lines.append(f"| {human(o['size'])} | {o['ferry_busbw']:.2f} | {o['against']} | "
                             f"{o['against_busbw']:.2f} | {o['ratio']:.3f} | {o['lo']:.3f}-{o['hi']:.3f} | "
                             f"{o['reps']} | {o['verdict']} |")
            lines.append("")
    if vs_variants:
        lines.append("## ferry's defaults against each variant")
        lines.append("")
        lines.append("Busbw of ferry's defaults over the variant's, paired by repetition as above.")
        lines.append("")
        lines.append("| topic | operation | variant | size | ratio | 95 % interval | verdict |")
        lines.append("|---|---|---|---|---|---|---|")
        for name, op, variant, size, med, lo, hi, text in vs_variants:
            lines.append(f"| {name} | {op} | {variant} | {human(size)} | {med:.3f} | {lo:.3f}-{hi:.3f} | {text} |")
        lines.append("")
    budget = os.path.join(d, "budget.txt")
    if os.path.exists(budget):
        lines.append("## Cut short by --budget")
        lines.append("")
        lines.extend(f"- {line.strip()}" for line in open(budget) if line.strip())
        lines.append("")
    if os.path.exists(os.path.join(d, "ratios.png")):
        lines.append("![ferry's busbw over the baseline by size, with 95 % intervals](ratios.png)")
        lines.append("")
    lines.append("## Method")
    lines.append("")
    lines.append("See the header of `bench/regenerate.sh`: a calibration run sets the iterations "
                 "per size for a fixed minimum time per size; every repetition runs every "
                 "configuration once in a Williams-design order; nccl-tests checks every result "
                 "(-c 1); a proof run per topic shows that every channel went through ferry "
                 "(`proofs.txt`). Every run's rows are in `raw.csv.xz`, their exit status and "
                 "time in `runs.tsv`.")
    lines.append("")
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
