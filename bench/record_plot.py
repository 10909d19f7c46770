#!/usr/bin/env python3
"""record_plot.py: draw a recorded run's README tables into its folder as plot.png.

    bench/record_plot.py DIR [DIR...]
    bench/record_plot.py --selftest     (ctest bench_record_plot)

Reads DIR/README.md (a bench/results/<folder>/ record), finds its markdown
tables and draws them with gnuplot (pngcairo, 900 px wide, panels stacked)
into DIR/plot.png:

- a table indexed by message size (a column of sizes such as "4 KiB", "64K",
  "1 MiB" or, under a "size"/"bytes" header, plain byte counts; or a header
  row of sizes, one row per series) gives a line panel: log2 x axis of size,
  one line per numeric column (or row). Columns left of the size column
  ("NCCL", "conns", "run") split the lines into groups;
- any other table with a numeric column gives a horizontal bar chart of its
  first numeric column by row label (call cost per build, per configuration).

Each table's panel is titled by the heading above it and its caption (the
last sentence of the paragraph above the table where that ends in ':' or is
all bold, or a short paragraph opening "Name: ..."). Series of different
units (GB/s, us, ratios) get one panel each, so no axis mixes them; a ratio
panel (the header, row or caption says "ratio" or "a / b", or the cells end
in "x") has a dashed line at 1.0, a panel whose values span over 100x a log
y axis (8 B..64 MiB sweeps). A cell is numeric when it is a number with an optional unit ("x",
"GB/s", "us", ...) and optional notes: an interval "(1.10-1.35)" or
"[0.90, 1.02]" becomes an error bar, a bare range "0.61-0.69" a point at its
middle with the range as its bar, and anything else in brackets ("(was 137)",
"[168]", "(0/5)") or a trailing ", 4/6" (repetitions won) is ignored. A
column is plotted only when every non-empty cell but "-" is numeric, so
verdict columns ("level", "1.38x") and lists ("3.60, 3.24, 3.00") are left
out; so are repetition counts ("reps"). An "interval" column ("95 %
interval": 0.625-1.300) gives the error bars of the column left of it.
Where ImageMagick's convert is installed the PNG is cut to 64 colours
(a third of the bytes, the same look).

Exit status: 0 every DIR plotted; 2 some DIR had no plottable table (named on
stderr; the others are still plotted) or bad usage; 1 gnuplot failed (or,
with --selftest, a check failed).
GNUPLOT=CMD runs CMD instead of gnuplot.
"""
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

WIDTH = 900
LINE_PANEL_PX = 230   # a line panel, its title and axes
PLOT_WIDTH_PX = 0.57 * WIDTH   # its plot area: lmargin 0.09, rmargin 0.66
CHAR_PX = 6.5         # one character of a tic label
BAR_ROW_PX = 22       # one bar
KEY_ROW_PX = 13       # one key entry: panels with many grow to hold their key

NUM = r'(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?'
UNIT = r'(?:GB/s|Gb/s|MB/s|msg/s|us|µs|ns|ms|s|x|%)'
VALUE_RE = re.compile(
    r'^[~≈]?\s*(' + NUM + r')(?:\s*-\s*(' + NUM + r'))?\s*(' + UNIT + r')?'
    r'\s*((?:[(\[][^)\]]*[)\]]\s*)*)(?:,\s*\d+/\d+)?\s*((?:[(\[][^)\]]*[)\]]\s*)*)$')
INTERVAL_RE = re.compile(r'^\s*(' + NUM + r')\s*(?:-|–|,|\.\.)\s*(' + NUM + r')\s*$')
SIZE_RE = re.compile(r'^(\d+(?:\.\d+)?)\s*(B|K|KB|KiB|M|MB|MiB|G|GB|GiB)?$', re.I)
SCALE = {'': 1, 'b': 1, 'k': 1 << 10, 'kb': 1 << 10, 'kib': 1 << 10, 'm': 1 << 20,
         'mb': 1 << 20, 'mib': 1 << 20, 'g': 1 << 30, 'gb': 1 << 30, 'gib': 1 << 30}
# Unit words in headers and captions, first match wins; "us" only as a word,
# so "busbw" is no unit.
UNIT_WORDS = [(r'GB/s', 'GB/s'), (r'Gb/s', 'Gb/s'), (r'MB/s', 'MB/s'), (r'msg/s', 'msg/s'),
              (r'ms/GB', 'ms/GB'), (r'CPU-s', 'CPU-s per s'), (r'\bmicroseconds?\b', 'us'),
              (r'\bnanoseconds?\b', 'ns'), (r'\bus\b', 'us'), (r'\bµs\b', 'us'),
              (r'\bns\b', 'ns'), (r'\bms\b', 'ms')]
CELL_UNIT = {'GB/s': 'GB/s', 'Gb/s': 'Gb/s', 'MB/s': 'MB/s', 'msg/s': 'msg/s', 'us': 'us',
             'µs': 'us', 'ns': 'ns', 'ms': 'ms', 's': 's', '%': '%', 'x': 'ratio'}
SKIP_HEADERS = {'reps', 'repetitions', 'runs', 'n'}


def clean(text):
    """Markdown emphasis, code and links out: labels and titles are plain text."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)
    text = re.sub(r'\*\*|`', '', text)
    return re.sub(r'(?<![\w/])\*(?=\S)|(?<=\S)\*(?![\w/])', '', text).strip()


def num(text):
    return float(text.replace(',', ''))   # "10,677": a thousands separator


def parse_value(cell):
    """(value, low, high, unit) of a numeric cell, or None."""
    m = VALUE_RE.match(clean(cell))
    if not m:
        return None
    value, low, high = num(m.group(1)), None, None
    if m.group(2):   # a bare range: its middle, the range as the bar
        low, high = value, num(m.group(2))
        value = (low + high) / 2
    for note in re.findall(r'[(\[]([^)\]]*)[)\]]', (m.group(4) or '') + (m.group(5) or '')):
        iv = INTERVAL_RE.match(note)
        if iv and low is None:
            low, high = num(iv.group(1)), num(iv.group(2))
    return value, low, high, CELL_UNIT.get(m.group(3) or '', '')


def parse_size(cell, plain_ok):
    """Bytes of a size cell ("4 KiB", "64K", "16"), or None; a unitless
    number counts only where the header says it is a size."""
    m = SIZE_RE.match(clean(cell))
    if not m or (not m.group(2) and not plain_ok):
        return None
    return int(float(m.group(1)) * SCALE[(m.group(2) or '').lower()])


def size_label(nbytes):
    """"4K", "1M", "8B": ferry-bench's short form, so 512K and 1M fit side by side."""
    for unit, scale in (('G', 1 << 30), ('M', 1 << 20), ('K', 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return '%d%s' % (nbytes // scale, unit)
    return '%dB' % nbytes


def split_row(line):
    cells = line.strip().strip('|').split('|')
    return [c.strip() for c in cells]


def find_tables(lines):
    """Every markdown table outside code fences: dicts with header, rows,
    heading (the last heading above it), caption and note."""
    tables, heading, fenced, i = [], '', False, 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith('```'):
            fenced = not fenced
        elif not fenced and line.startswith('#'):
            heading = clean(line.lstrip('#'))
        elif (not fenced and line.lstrip().startswith('|') and i + 1 < len(lines)
              and re.match(r'^\s*\|?\s*:?-{3,}', lines[i + 1])):
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith('|'):
                end += 1
            tables.append({'header': split_row(line),
                           'rows': [split_row(r) for r in lines[i + 2:end]],
                           'heading': heading, 'caption': caption_before(lines, i),
                           'note': note_after(lines, end)})
            i = end
            continue
        i += 1
    return tables


def caption_before(lines, i):
    """What introduces a table: the last sentence of the paragraph above it
    when that ends in ':' or is all bold (not a command indented as code)."""
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    para = []
    while j >= 0 and lines[j].strip() and not lines[j].startswith('    ') \
            and not lines[j].lstrip().startswith(('|', '#', '```', '![')):
        para.insert(0, lines[j].strip())
        if re.match(r'^[-*] ', lines[j].strip()):
            break   # a list item starts here
        j -= 1
    listed = bool(para) and re.match(r'^[-*] ', para[0]) is not None
    raw = re.sub(r'^[-*] ', '', ' '.join(para))
    text = clean(raw)
    # A short paragraph of its own opening "Host API: ..." names the table.
    named = len(para) <= 3 and not listed and re.match(r'^([^:.;]{3,40}):\s', raw)
    if named and not text.endswith(':'):
        raw = re.split(r'(?<=[.;])\s', raw)[0].rstrip('.;')
    elif not (text.endswith(':') or re.match(r'^\*\*.*\*\*$', raw)):
        return ''
    # Commands in backticks ("`a=1 b --c`") are the method, not what the
    # table shows; file names in backticks stay.
    text = re.sub(r'`([^`]*)`', lambda m: '...' if re.search('[ =]', m.group(1)) else m.group(1),
                  raw)
    text = re.sub(r'\(\.\.\.[,;]?\s*', '(', text)
    text = re.sub(r'^\.\.\.[,;]?\s*|\(\)', '', re.sub(r'\s+', ' ', text))
    text = clean(text).strip(' ,;:')
    return re.split(r'(?<=[^.][.;)])\s+(?=[A-Z(`*])', text)[-1]


def note_after(lines, end):
    """A parenthesised note right under a table, e.g. "(ratio a / b, GB/s.)",
    past the plot's own image line."""
    j = end
    while j < len(lines) and (not lines[j].strip() or lines[j].startswith('![')):
        j += 1
    return clean(lines[j]) if j < len(lines) and lines[j].strip().startswith('(') else ''


UNIT_SLASH_RE = re.compile(r'GB/s|Gb/s|MB/s|msg/s|ms/GB|switches/s|\d+/\d+')


def ratio_at(text):
    """Where text first says "ratio" or "a / b" (unit slashes such as GB/s
    and counts such as 4/6 masked), or -1."""
    plain = UNIT_SLASH_RE.sub(lambda m: 'U' * len(m.group(0)), clean(text))
    found = [m.start() for m in (re.search(r'\bratios?\b', plain, re.I),
                                 re.search('/', plain)) if m]
    return min(found) if found else -1


def is_ratio_text(text):
    return ratio_at(text) >= 0


def text_unit(text):
    for pattern, unit in UNIT_WORDS:
        if re.search(pattern, text):
            return unit
    return ''


def ratio_or_unit(text):
    """'ratio', a unit or '' for one text; where it names both ("Median GB/s
    and ratios", "ratio a / b, GB/s") the one named first."""
    if not text:
        return ''
    at, unit = ratio_at(text), text_unit(text)
    if at < 0 or not unit:
        return 'ratio' if at >= 0 else unit
    unit_at = min(m.start() for m in (re.search(p, clean(text)) for p, _ in UNIT_WORDS) if m)
    return 'ratio' if at < unit_at else unit


def series_kind(points, texts):
    """The unit of a series: its cells' own unit, else the first of texts (its
    header, its group, the caption) that names a ratio or a unit."""
    units = {p[4] for p in points if p[4]}
    if len(units) == 1:
        return units.pop()
    for text in texts:
        kind = ratio_or_unit(text)
        if kind:
            return kind
    return ''


def column_values(rows, j):
    """The parsed cells of column j, or None when any is not numeric."""
    vals = []
    for row in rows:
        cell = clean(row[j]) if j < len(row) else ''
        if cell in ('', '-', '—'):
            vals.append(None)
            continue
        v = parse_value(cell)
        if v is None:
            return None
        vals.append(v)
    return vals if any(v is not None for v in vals) else None


def group_label(header, row, cols):
    """Row label from columns cols: a bare number reads with its header ("conns 4")."""
    parts = []
    for j in cols:
        cell = clean(row[j]) if j < len(row) else ''
        parts.append('%s %s' % (clean(header[j]), cell) if re.match(r'^' + NUM + '$', cell)
                     and clean(header[j]) else cell)
    return ', '.join(p for p in parts if p)


def size_column(table):
    """Index of the table's size column among its first three, or None."""
    for j in range(min(3, len(table['header']))):
        plain_ok = re.search(r'size|bytes', table['header'][j], re.I) is not None
        sizes = [parse_size(r[j], plain_ok) if j < len(r) else None for r in table['rows']]
        if sum(s is not None for s in sizes) >= max(2, len(sizes) // 2 + 1):
            return j
    return None


def size_header_start(table):
    """k when header cells k.. are all sizes (one row per series), else None."""
    header = table['header']
    for k in range(1, min(4, len(header) - 1)):
        if all(parse_size(h, False) for h in header[k:]):
            return k
    return None


def unit_of_header(header, j):
    """A column header's unit, or that of the nearest header left of it that
    has one ("median" after "test() ns, 7 runs")."""
    for i in range(j, -1, -1):
        if i < j and is_ratio_text(header[i]):
            continue
        if text_unit(header[i]):
            return header[i]
    return ''


def column_names(header):
    """Header cells, a repeated one ("one-way us" after each "X GB/s") led by
    the first word of the nearest distinct header left of it."""
    names = [clean(h) for h in header]
    out = list(names)
    for j, name in enumerate(names):
        if names.count(name) > 1:
            left = [h for h in names[:j] if names.count(h) == 1 and h]
            if left:
                out[j] = '%s %s' % (left[-1].split()[0], name)
    return out


def merge_intervals(header, columns):
    """An "interval" column ("95 % interval": 0.625-1.300) becomes the error
    bars of the column left of it, not a series of its own."""
    for j in sorted(columns):
        if 'interval' in header[j].lower() and j - 1 in columns:
            columns[j - 1] = [v if v is None or iv is None else (v[0], iv[1], iv[2], v[3])
                              for v, iv in zip(columns[j - 1], columns[j])]
            del columns[j]


def size_series_by_column(table, sj):
    """Line series of a table with a size column sj: one per numeric column
    right of it and per group of the columns left of it."""
    header, rows, series = table['header'], table['rows'], []
    names = column_names(header)
    plain_ok = re.search(r'size|bytes', header[sj], re.I) is not None
    sizes = [parse_size(r[sj], plain_ok) if sj < len(r) else None for r in rows]
    context = [table['caption'], table['note']]
    columns = {j: column_values(rows, j) for j in range(sj + 1, len(header))
               if clean(header[j]).lower() not in SKIP_HEADERS and column_values(rows, j)}
    merge_intervals(header, columns)
    for j, vals in columns.items():
        groups = {}
        for row, size, v in zip(rows, sizes, vals):
            if size is not None and v is not None:
                groups.setdefault(group_label(header, row, range(sj)), []).append((size,) + v)
        for group, points in groups.items():
            name = '%s: %s' % (group, names[j]) if group else names[j]
            texts = [header[j], group] + ([] if is_ratio_text(header[j]) else
                                          [unit_of_header(header, j)]) + context
            series.append({'name': name, 'points': points,
                           'kind': series_kind(points, texts)})
    return series


def size_series_by_row(table, k):
    """Line series of a table whose header cells k.. are sizes: one per row."""
    header, series = table['header'], []
    sizes = [parse_size(h, False) for h in header[k:]]
    for row in table['rows']:
        points = []
        for size, cell in zip(sizes, row[k:]):
            v = parse_value(cell) if clean(cell) not in ('', '-') else None
            if v is not None:
                points.append((size,) + v)
        if points:
            name = group_label(header, row, range(k))
            texts = [name, header[0], table['caption'], table['note']]
            series.append({'name': name, 'points': points, 'kind': series_kind(points, texts)})
    return series


def bar_series(table):
    """Bars of the first numeric column of a table with no sizes, by row label
    (the first column; a numeric first column takes the next one along)."""
    header, rows = table['header'], table['rows']
    label_cols = [0]
    if len(header) > 2 and column_values(rows, 0) and not column_values(rows, 1):
        label_cols.append(1)
    for j in range(label_cols[-1] + 1, len(header)):
        vals = column_values(rows, j)
        if vals and clean(header[j]).lower() not in SKIP_HEADERS:
            bars = [(group_label(header, r, label_cols), clean(r[j])) + v
                    for r, v in zip(rows, vals) if v is not None]
            if len(bars) < 2:
                return []
            points = [b[2:] for b in bars]
            texts = [header[j], unit_of_header(header, j), table['caption'], table['note']]
            return [{'name': clean(header[j]), 'bars': bars,
                     'kind': series_kind([(0,) + p for p in points], texts)}]
    return []


def table_panels(table):
    """The panels of one table: line panels by unit, or one bar panel."""
    title = table['heading'] + ('\n' + table['caption'] if table['caption'] else '')
    sj, k = size_column(table), size_header_start(table)
    if sj is not None:
        series = size_series_by_column(table, sj)
    elif k is not None:
        series = size_series_by_row(table, k)
    else:
        return [{'type': 'bar', 'title': title, 'series': s} for s in bar_series(table)]
    kinds = []
    for s in series:
        if s['kind'] not in kinds:
            kinds.append(s['kind'])
    return [{'type': 'line', 'title': title, 'kind': kind,
             'series': [s for s in series if s['kind'] == kind]} for kind in kinds]


def quote(text):
    """A gnuplot double-quoted string (titles keep their line breaks)."""
    text = text.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')
    return '"' + text + '"'


def shorten(text, width):
    return text if len(text) <= width else text[:width - 3] + '...'


def ylabel(kind):
    return {'ratio': 'ratio (1.0 = level)', '': 'value (as in the table)',
            'us': 'microseconds', 'ns': 'nanoseconds', 'ms': 'milliseconds'}.get(kind, kind)


def wrap_title(title):
    """Title lines are cut at 140 characters, what 900 px hold."""
    return '\n'.join(shorten(t, 140) for t in title.split('\n'))


def size_tics(sizes):
    """(size, label) per tic; a label that would touch the one before it on
    the log axis (32M beside 64M on an 8B..64M axis) is left blank."""
    span = max(math.log2(sizes[-1] * 1.69 / sizes[0]), 1)
    px_per_doubling = PLOT_WIDTH_PX / span
    tics, last = [], None
    for x in sizes:
        label = size_label(x)
        if last is not None and math.log2(x / last[0]) * px_per_doubling < \
                CHAR_PX * (len(label) + len(last[1])) / 2 + 8:
            label = ''
        else:
            last = (x, label)
        tics.append((x, label))
    return tics


def line_panel_script(panel, n):
    """gnuplot lines for one size panel; its data as datablocks $Dn_i."""
    out, plots, sizes = [], [], set()
    for i, s in enumerate(panel['series']):
        out.append('$D%d_%d << EOD' % (n, i))
        for x, y, lo, hi, _ in sorted(s['points'], key=lambda p: p[0]):
            out.append('%d %g %g %g' % (x, y, y if lo is None else lo, y if hi is None else hi))
            sizes.add(x)
        out.append('EOD')
        has_bars = any(p[2] is not None for p in s['points'])
        # Two rows of one size (two runs of it) are points, not a line between them.
        repeated = len({p[0] for p in s['points']}) < len(s['points'])
        style = ('yerrorbars' if repeated else 'yerrorlines') if has_bars else (
            'points' if repeated else 'linespoints')
        cols = '1:2:3:4' if has_bars else '1:2'
        # gnuplot has 8 colours; past them dashes and point shapes tell lines apart.
        plots.append('$D%d_%d using %s with %s lw 2 lc %d dt %d pt %d ps 0.8 title %s'
                     % (n, i, cols, style, i % 8 + 1, i // 8 + 1, (7, 5, 9, 11)[i // 8 % 4],
                        quote(shorten(s['name'], 40))))
    if panel['kind'] == 'ratio':
        plots.append('1 with lines dt 2 lw 1 lc rgb "gray40" notitle')
    ys = [v for s in panel['series'] for p in s['points'] for v in p[1:4] if v is not None]
    log_y = panel['kind'] != 'ratio' and min(ys) > 0 and max(ys) / min(ys) > 100
    if log_y:
        out += ['set logscale y 10', 'set format y "%g"']   # 8 B..64 MiB spans decades
    lo, hi = min(sizes), max(sizes)
    tics = ', '.join('%s %d' % (quote(label), x) for x, label in size_tics(sorted(sizes)))
    out += ['set logscale x 2', 'set xtics (%s)' % tics,
            'set xrange [%g:%g]' % (lo / 1.3, hi * 1.3),
            # Room above and below the points; GB/s and times start at 0.
            'set offsets 0, 0, graph 0.06, graph 0.06' if panel['kind'] == 'ratio' or log_y
            else 'set offsets 0, 0, graph 0.06, 0',
            '' if panel['kind'] == 'ratio' or log_y or min(ys) < 0 else 'set yrange [0:*]',
            'set xlabel "message size (log2 scale)"',
            'set ylabel %s' % quote(ylabel(panel['kind'])),
            'set lmargin at screen 0.09', 'set rmargin at screen 0.66',
            'set key outside right top font ",8" width -4',
            'plot ' + ', \\\n  '.join(plots)]
    return out


def bar_panel_script(panel, n):
    """gnuplot lines for one horizontal bar panel, first row on top."""
    s = panel['series']
    bars = s['bars']
    out = ['$B%d << EOD' % n]
    for i, (label, text, value, lo, hi, _) in enumerate(bars):
        y = len(bars) - 1 - i
        out.append('%g %d %g %g %s' % (value, y, value if lo is None else lo,
                                       value if hi is None else hi, quote(text)))
    out.append('EOD')
    tics = ', '.join('%s %d' % (quote(shorten(b[0], 44)), len(bars) - 1 - i)
                     for i, b in enumerate(bars))
    width = max(len(shorten(b[0], 44)) for b in bars)
    xlabel = s['name'] + (' (%s)' % ylabel(s['kind'])
                          if s['kind'] and s['kind'] not in s['name'] else '')
    plots = ['$B%d using ($1/2):2:($1/2):(0.35) with boxxyerror fs solid 0.5 lc rgb "#4477aa" '
             'notitle' % n,
             '$B%d using 1:2:3:4 with xerrorbars pt 0 lc rgb "black" notitle' % n,
             '$B%d using 4:2:5 with labels left offset 0.5,0 font ",8" notitle' % n]
    if s['kind'] == 'ratio':
        out.append('set arrow from 1, graph 0 to 1, graph 1 nohead dt 2 lc rgb "gray40"')
    out += ['set ytics (%s)' % tics, 'set yrange [-0.6:%g]' % (len(bars) - 0.4),
            # Room right of the longest bar for its value's text.
            'set xrange [0:*]', 'set offsets 0, graph %g, 0, 0'
            % min(0.6, (CHAR_PX * max(len(b[1]) for b in bars) + 16) / (0.6 * WIDTH)),
            'set lmargin %d' % min(width + 2, 48), 'set grid x',
            'set xlabel %s' % quote(xlabel), 'plot ' + ', \\\n  '.join(plots)]
    return out


def panel_height(panel):
    if panel['type'] == 'bar':
        return 110 + BAR_ROW_PX * len(panel['series']['bars'])
    return LINE_PANEL_PX + max(0, KEY_ROW_PX * len(panel['series']) - 150) \
        + 14 * panel['title'].count('\n')


def gnuplot_script(panels, png):
    """One multiplot, panels stacked top to bottom, each in its own share."""
    heights = [panel_height(p) for p in panels]
    total = sum(heights)
    out = ['set terminal pngcairo size %d,%d font "sans,9" noenhanced' % (WIDTH, total),
           'set output %s' % quote(png), 'set multiplot']
    top = total
    for n, (panel, h) in enumerate(zip(panels, heights)):
        top -= h
        out += ['reset', 'set origin 0,%g' % (top / total), 'set size 1,%g' % (h / total)]
        # The title centred on the image, not on the plot area, whose margins
        # move with the key and the bar labels: long titles then stay whole.
        title = wrap_title(panel['title'])
        out += ['set label 99 %s at screen 0.5, screen %g center front'
                % (quote(title), (top + h - 14) / total),
                'set tmargin %d' % (title.count('\n') + 3)]
        out += (bar_panel_script if panel['type'] == 'bar' else line_panel_script)(panel, n)
    return '\n'.join(out + ['unset multiplot', 'set output']) + '\n'


def shrink(png):
    """pngcairo's anti-aliased text takes thousands of colours; a 64-colour
    palette (ImageMagick, where installed) looks the same at a third of the
    bytes, which keeps records small in git; -strip drops its timestamps, so
    a rerun on the same README gives the same file."""
    if shutil.which('convert'):
        subprocess.run(['convert', png, '-strip', '+dither', '-colors', '64', 'PNG8:' + png],
                       stderr=subprocess.DEVNULL)


def plot_record(folder):
    """0 plotted, 2 nothing to plot, 1 gnuplot failed."""
    readme = os.path.join(folder, 'README.md')
    try:
        with open(readme, encoding='utf-8') as f:
            lines = f.read().split('\n')
    except OSError as e:
        print('record_plot: %s: %s' % (folder, e), file=sys.stderr)
        return 2
    panels = [p for t in find_tables(lines) for p in table_panels(t)]
    if not panels:
        print('record_plot: %s: no table with a numeric column; no plot' % folder,
              file=sys.stderr)
        return 2
    png = os.path.join(folder, 'plot.png')
    with tempfile.NamedTemporaryFile('w', suffix='.gp', delete=False) as gp:
        gp.write(gnuplot_script(panels, png))
    try:
        cmd = os.environ.get('GNUPLOT', 'gnuplot').split() + [gp.name]
        res = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    finally:
        os.unlink(gp.name)
    if res.returncode != 0 or not os.path.exists(png) or not os.path.getsize(png):
        print('record_plot: %s: gnuplot failed:\n%s' % (folder, res.stderr), file=sys.stderr)
        return 1
    shrink(png)
    print('%s: %d panel(s), %d bytes' % (png, len(panels), os.path.getsize(png)))
    return 0


SELFTEST_SIZED = '''# selftest

| size | ferry GB/s | ferry / raw |
|---|---|---|
| 4 KiB | 1.5 | 1.10x (1.00-1.20) |
| 1 MiB | 3.0 | 0.95x |
'''


def selftest():
    """ctest bench_record_plot: a size table gives a non-empty plot.png and
    exit 0, a README with no table exit 2 and no plot; a few cells parse."""
    fails = []
    if parse_value('1.23x (1.10-1.35)') != (1.23, 1.10, 1.35, 'ratio') \
            or parse_value('level') is not None or parse_value('3.60, 3.24') is not None:
        fails.append('cell parsing')
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (('sized', SELFTEST_SIZED), ('bare', '# no table\n\nJust 42.\n')):
            os.mkdir(os.path.join(tmp, name))
            with open(os.path.join(tmp, name, 'README.md'), 'w') as f:
                f.write(text)

        def run(name):
            return subprocess.run([sys.executable, __file__, os.path.join(tmp, name)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        png = os.path.join(tmp, 'sized', 'plot.png')
        if run('sized').returncode != 0 or not os.path.exists(png) or not os.path.getsize(png):
            fails.append('no plot.png for a size table')
        if run('bare').returncode != 2 or os.path.exists(os.path.join(tmp, 'bare', 'plot.png')):
            fails.append('a README without a table did not exit 2')
    print('FAIL bench_record_plot: ' + '; '.join(fails) if fails else 'PASS bench_record_plot')
    return 1 if fails else 0


def main(argv):
    if len(argv) == 2 and argv[1] == '--selftest':
        return selftest()
    if len(argv) < 2 or argv[1] in ('-h', '--help'):
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    status = [plot_record(d) for d in argv[1:]]
    return 1 if 1 in status else (2 if 2 in status else 0)


if __name__ == '__main__':
    sys.exit(main(sys.argv))
