#!/usr/bin/env python3
"""trace_plot.py TRACE.json OUT.png [WINDOW_US]: a timeline picture of one rank's
Chrome trace from NCCL's example profiler, drawn with gnuplot (no matplotlib
needed): one row per event name (proxy steps, NCCL's NET step states, ferry's
net events), a bar per event, over the WINDOW_US (default 3000) microseconds
around the first all_reduce of 1 MiB or more that has net events."""
import json, re, subprocess, sys, tempfile, os

def load(path):
    text = open(path).read().strip()
    text = re.sub(r'(:\s*)(0x[0-9a-fA-F]+|[A-Za-z_][A-Za-z_0-9]*)(\s*[,}])',
                  lambda m: m.group(1) + (m.group(2) if m.group(2) in ("true", "false", "null")
                                          else '"' + m.group(2) + '"') + m.group(3), text)
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(text.rstrip(",\n") + "]")

def name_of(s):
    if s[0] == "NET":
        return "NCCL step: %s" % s[1]
    if s[0] in ("NET_IB", "NET_SOCK"):
        return "ferry request (%s event)" % s[0]
    return "NCCL proxy: %s" % s[1]

def main():
    path, png = sys.argv[1], sys.argv[2]
    window = float(sys.argv[3]) if len(sys.argv) > 3 else 3000.0
    ev = [e for e in load(path) if isinstance(e, dict) and e.get("ph") in ("b", "e")]
    open_, spans = {}, []
    for e in ev:
        key = (e.get("cat"), e.get("name"), e.get("id"))
        if e["ph"] == "b":
            open_[key] = e
        elif key in open_:
            b = open_.pop(key)
            spans.append((b.get("cat"), b.get("name"), float(b["ts"]), float(e["ts"]), b.get("args", {})))
    net = [s for s in spans if s[0] in ("NET_IB", "NET_SOCK") and s[4].get("size", 0) >= 1 << 20]
    if not net:
        net = [s for s in spans if s[0] in ("NET_IB", "NET_SOCK")]
    if not net:
        sys.exit("trace_plot: no net events in " + path)
    t0 = min(s[2] for s in net)
    t1 = t0 + window
    show = [s for s in spans if s[3] >= t0 and s[2] <= t1 and s[0] in ("PROXY", "NET", "NET_IB", "NET_SOCK")]
    rows = []
    for cat in ("PROXY", "NET", "NET_IB", "NET_SOCK"):
        for s in show:
            label = name_of(s)
            if s[0] == cat and label not in rows:
                rows.append(label)
    with tempfile.TemporaryDirectory() as d:
        dat = os.path.join(d, "spans.dat")
        with open(dat, "w") as f:
            for s in show:
                y = rows.index(name_of(s))
                a, b = max(s[2], t0) - t0, min(s[3], t1) - t0
                f.write("%f %d %f %f %d\n" % ((a + b) / 2, y, (b - a) / 2, 0.35, 0 if s[0] == "PROXY" else 1 if s[0] == "NET" else 2))
        ytics = ", ".join('"%s" %d' % (r.replace('"', ''), i) for i, r in enumerate(rows))
        gp = """set terminal pngcairo size 1400,%d font ",10" noenhanced
set output "%s"
set title "%s: %.0f us from the first large net event (rank trace of NCCL's example profiler)"
set xlabel "us"
set ytics (%s)
set yrange [-1:%d]
set xrange [0:%f]
set style fill solid 0.8
set palette defined (0 "#4e79a7", 1 "#f28e2b", 2 "#59a14f")
unset colorbox
plot "%s" using 1:2:3:4:5 with boxxyerror palette notitle
""" % (160 + 28 * len(rows), png, os.path.basename(path), window, ytics, len(rows), window, dat)
        subprocess.run(["gnuplot"], input=gp.encode(), check=True)

if __name__ == "__main__":
    main()
