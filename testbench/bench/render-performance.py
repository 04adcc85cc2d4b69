#!/usr/bin/env python3
"""Render the tables of docs/performance.md from bench-results/history/runs.json.

    testbench/bench/render-performance.py                 # every table, as Markdown, to stdout
    testbench/bench/render-performance.py --check docs/performance.md   # exit 1 if the doc differs
    testbench/bench/render-performance.py --update docs/performance.md  # rewrite the doc's tables
    testbench/bench/render-performance.py --run ID        # everything stored for one run

Each table is printed between `<!-- render-performance.py: NAME -->` and `<!-- end: NAME -->`;
--check and --update work on the doc's blocks with the same markers and leave the rest alone.
"Current" is the latest run of each configuration; "since cd5dd12" is every run whose code has the
core emulator's first two fixes (the field `includes`). bench-results/history/README.md documents
the JSON. Python 3 standard library only.
"""
import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HISTORY = REPO / 'bench-results' / 'history' / 'runs.json'
CONFIGS = [('stock', 'production kernel, translated IOMMU domain', 'make bench-stock'),
           ('stock-pt', 'production kernel, IOMMU in passthrough', 'make bench-stock-pt'),
           ('bench', 'KASAN + lockdep + kmemleak bench kernel', 'make bench')]
NVPEER = ['nvpeer-inval', 'nvpeer-persistent']
CLASSIC = ['classic', 'classic-persistent']
NVIDIA = 'nvidia-peermem'
DASH = '–'


def places(vals):
    """Decimals to print a series with: 3 if any value has a third decimal, else 2."""
    return 3 if any(v is not None and abs(v * 100 - round(v * 100)) > 1e-6 for v in vals) else 2


def fmt(v, dg=None):
    """A ratio as recorded: 1.10, 1.098; a series shares one number of decimals (places)."""
    if v is None:
        return DASH
    return f'{v:.{places([v]) if dg is None else dg}f}'


def row(vals):
    dg = places(vals)
    return [fmt(v, dg) for v in vals]


def fnum(v):
    if v is None:
        return DASH
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return f'{v:,}' if isinstance(v, int) and abs(v) >= 10000 else str(v)


def span(lo, hi, f=None, dg=None):
    if f is None:
        dg = places([lo, hi]) if dg is None else dg
        f = lambda v: fmt(v, dg)
    return f(lo) if lo == hi else f'{f(lo)}-{f(hi)}'


def vspan(vals, dg=None):
    """min-max of a series, printed with the series' decimals."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return DASH
    return span(min(vals), max(vals), dg=places(vals) if dg is None else dg)


def table(header, rows):
    out = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    out += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
    return '\n'.join(out)


def key(run):
    return (run['date'] or '', (run['time'] or '').split('-')[0])


def current(runs, config):
    cands = [r for r in runs if r['config'] == config and r['regdereg_ratio']]
    return max(cands, key=key) if cands else None


def since_cd5dd12(runs, config):
    return sorted((r for r in runs if r['config'] == config and 'cd5dd12' in r['includes']
                   and r['regdereg_ratio']), key=key)


def ranges(run, figure):
    """The run's stated ranges for one figure: 'lo-hi (scope); ...'."""
    got = [x for x in run['ranges'] if x['figure'] == figure]
    dg = places([v for x in got for v in (x['lo'], x['hi'])])
    return '; '.join(span(x['lo'], x['hi'], dg=dg) + (f' ({x["scope"]})' if x['scope'] else '')
                     for x in got) or None


def at_or_below(vals, limit):
    vals = [v for v in vals if v is not None]
    return sum(v <= limit + 1e-9 for v in vals), len(vals)


def label(run):
    return f'`{run["id"]}`'


# ---- blocks ---------------------------------------------------------------------------------

def block_ratio(d):
    sizes = d['sizes']
    rows = []
    for config, what, _ in CONFIGS:
        r = current(d['runs'], config)
        for p in NVPEER + CLASSIC + [NVIDIA]:
            vals = r['regdereg_ratio'].get(p)
            if not vals:
                continue
            n, of = at_or_below(vals, 1.05)
            first = f'{what} ({label(r)}, {r["commit"] or DASH}, x {r["dilation"]})'
            rows.append([first if p == 'nvpeer-inval' else '', p] + row(vals)
                        + [f'{n} of {of}' if p in NVPEER else DASH])
    return table(['configuration', 'path'] + sizes + ['≤ 1.05x'], rows)


def block_vs_classic(d):
    sizes = d['sizes']
    rows = []
    for config, what, _ in CONFIGS:
        r = current(d['runs'], config)
        vs = r['vs_classic'] or {}
        first = True
        for p, name in [('nvpeer-inval', 'nvpeer-inval'), ('nvpeer-persistent', 'nvpeer-persistent'),
                        ('floor_bound', 'floor bound')]:
            vals = vs.get(p)
            if vals:
                cells, rng = row(vals), vspan(vals)
                n, of = at_or_below(vals, 0.60)
                tally = f'{n} of {of}' if p in NVPEER else DASH
            else:
                stated = ranges(r, p)
                if not stated:
                    continue
                cells, rng, tally = [DASH] * len(sizes), stated, DASH
            rows.append([what if first else '', name] + cells + [rng, tally])
            first = False
    return table(['configuration', 'row'] + sizes + ['range', '≤ 0.60x'], rows)


def block_vs_nvidia(d):
    """nvpeer against NVIDIA's own nvidia-peermem in the same run: the ratio of their ratios to
    the floor, per size (target 0.55x); a line when no current run has measured NVIDIA's module."""
    sizes = d['sizes']
    rows = []
    for config, what, _ in CONFIGS:
        r = current(d['runs'], config)
        theirs = r['regdereg_ratio'].get(NVIDIA)
        if not theirs:
            continue
        first = True
        for p in NVPEER:
            mine = r['regdereg_ratio'].get(p)
            if not mine:
                continue
            vals = [None if a is None or b in (None, 0) else round(a / b, 3)
                    for a, b in zip(mine, theirs)]
            n, of = at_or_below(vals, 0.55)
            rows.append([f'{what} ({label(r)})' if first else '', p] + row(vals) + [f'{n} of {of}'])
            first = False
    if not rows:
        return ("No current run has measured NVIDIA's module yet: its path (`nvidia-peermem`, "
                "\"What is measured\") is in every run since issue 21, and the next `make bench-stock`, "
                "`make bench-stock-pt` and `make bench` give this table.")
    return table(['configuration', 'path'] + sizes + ['≤ 0.55x'], rows)


def block_parts(d):
    cur = [current(d['runs'], c) for c, _, _ in CONFIGS]

    def classic_ratio(r):
        stated = ranges(r, 'classic_ratio')
        if stated:
            return stated
        vals = [v for p in CLASSIC for v in (r['regdereg_ratio'].get(p) or [])]
        return vspan(vals) if vals else None

    figures = [
        ('classic client, reg + dereg against the floor', classic_ratio),
        ("nvpeer's own share of the floor's cycle", lambda r: ranges(r, 'nvpeer_own_share')),
        ("classic client's own share", lambda r: ranges(r, 'classic_own_share')),
        ("emulated core's share", lambda r: ranges(r, 'core_share')),
        ('a client costing nothing (1 + provider + core)', lambda r: ranges(r, 'zero_cost_client')),
        ('nvpeer cycles/s against the floor at the same threads', lambda r: ranges(r, 'threads_nvpeer')),
        ('classic cycles/s against the floor at the same threads', lambda r: ranges(r, 'threads_classic')),
    ]
    rows = [[name] + [f(r) or DASH for r in cur] for name, f in figures]
    return table(['figure'] + [w for _, w, _ in CONFIGS], rows)


def mem_get(per, paths, field, floor_whole=None):
    """One figure for a client: 'a / b' over its two modes, or the figure stated for the client."""
    vals = []
    for p in paths:
        m = per.get(p, {})
        v = m.get(field)
        if v is None and field == 'kmalloc_whole_above_floor' and floor_whole is not None \
                and m.get('kmalloc_whole') is not None:
            v = m['kmalloc_whole'] - floor_whole
        vals.append(v)
    if all(v is None for v in vals):
        # A figure stated for the client without naming its mode: key 'nvpeer-client' etc.
        return fnum(per.get(paths[0].split('-')[0] + '-client', {}).get(field))
    return fnum(vals[0]) if vals[0] == vals[1] else ' / '.join(fnum(v) for v in vals)


def block_memory(d):
    rows = []
    for config, _, _ in CONFIGS:
        for r in sorted((r for r in d['runs'] if r['config'] == config and r['memory']
                         and r['memory'].get('live_mrs') and '74e2a79' in r['includes']), key=key):
            m = r['memory']
            per = m.get('per_path', {})
            fw = per.get('floor', {}).get('kmalloc_whole')
            alloc = [mem_get(per, ['floor', 'floor-persistent'], 'allocations'),
                     mem_get(per, NVPEER, 'allocations'), mem_get(per, CLASSIC, 'allocations')]
            alloc = DASH if alloc == [DASH] * 3 else '; '.join(alloc)
            rows.append([label(r), fnum(m.get('live_mrs')), fnum(m.get('nvpeer_own_bytes')),
                         fnum(fw), mem_get(per, NVPEER, 'kmalloc_whole_above_floor', fw),
                         mem_get(per, CLASSIC, 'kmalloc_whole_above_floor', fw),
                         alloc])
    return table(['run', 'live MRs', "nvpeer's own (debugfs)", 'floor (whole objects)',
                  'nvpeer + core above the floor', 'classic + core above the floor',
                  'allocations per MR: floor; nvpeer; classic'], rows)


def block_scale(d):
    rows = []
    for config, _, _ in CONFIGS:
        for r in sorted((r for r in d['runs'] if r['config'] == config and r['scale']
                         and 'reached' in r['scale']['per_path'].get('floor', {})
                         and 'cd5dd12' in r['includes']), key=key):
            per = r['scale']['per_path']
            fl, nv = per.get('floor', {}), per.get('nvpeer-inval', {})
            above = nv.get('kmalloc_whole_above_floor')
            if above is None and nv.get('kmalloc_whole') is not None and fl.get('kmalloc_whole'):
                above = nv['kmalloc_whole'] - fl['kmalloc_whole']
            reached = (f'{fnum(fl["reached"])} / {fnum(nv["reached"])}'
                       if 'reached' in fl and 'reached' in nv else DASH)

            def pair(field):
                a, b = fl.get(field), nv.get(field)
                return DASH if a is None and b is None else f'{fnum(a)} / {fnum(b)}'
            rows.append([label(r), r['commit'] or DASH, reached, fnum(fl.get('kmalloc_whole')),
                         fnum(above), pair('allocations'), pair('reg_us'), pair('dereg_us')])
    return table(['run', 'commit', 'MRs reached: floor / nvpeer', 'floor (whole objects)',
                  'core + nvpeer above the floor', 'allocations per MR: floor / nvpeer',
                  'µs to register per MR: floor / nvpeer', 'µs to deregister: floor / nvpeer'], rows)


def block_spread_runs(d):
    rows = []
    for config, what, _ in CONFIGS[:2]:
        tot = [0, 0, 0, 0]
        runs = since_cd5dd12(d['runs'], config)
        for r in runs:
            rd, vs = r['regdereg_ratio'], r['vs_classic'] or {}
            a = [v for p in NVPEER for v in rd.get(p) or []]
            b = [v for p in NVPEER for v in (vs.get(p) or [])]
            n1, of1 = at_or_below(a, 1.10)
            n2, of2 = at_or_below(b, 0.60)
            tot = [tot[0] + n1, tot[1] + of1, tot[2] + n2, tot[3] + of2]
            cyc = r['cycles_per_cell'] or {}
            rows.append([label(r), r['commit'] or DASH, f'x {r["dilation"]}',
                         f'{cyc.get("at_64k", DASH)} / {cyc.get("min", DASH)}',
                         vspan(rd.get('nvpeer-inval') or [None]), vspan(rd.get('nvpeer-persistent') or [None]),
                         f'{n1} of {of1}', vspan(b) if b else DASH,
                         f'{n2} of {of2}' if of2 else DASH])
        rows.append([f'**{what}: {len(runs)} runs**', '', '', '', '', '',
                     f'**{tot[0]} of {tot[1]}**', '', f'**{tot[2]} of {tot[3]}**'])
    return table(['run', 'commit', 'dilation', 'cycles at 64K / least', 'nvpeer-inval',
                  'nvpeer-persistent', '≤ 1.10x', 'nvpeer vs classic', '≤ 0.60x'], rows)


SERIES_PATHS = ['floor', 'classic', 'nvidia-peermem', 'nvpeer-inval', 'nvpeer-persistent']


def series_runs(d, field):
    """The current run of each configuration that has the series `field`."""
    out = []
    for config, what, _ in CONFIGS:
        r = current(d['runs'], config)
        if r and r.get(field):
            out.append((what, r))
    return out


def block_live(d):
    """The 64 KiB cell with L other MRs live, per path: median µs, ratio to none live, and the
    client's own µs per cycle (issue 38: nvpeer's own share flat within 10 % up to 100k)."""
    rows = []
    runs = series_runs(d, 'live')
    paths = [p for p in SERIES_PATHS if any(p in r['live']['per_path'] for _, r in runs)]
    for what, r in runs:
        per = r['live']['per_path']
        ls = sorted({x['live'] for p in per for x in per[p]})
        for i, n in enumerate(ls):
            cells = []
            for p in paths:
                x = next((x for x in per.get(p, []) if x['live'] == n), None)
                if x is None:
                    cells.append(DASH)
                elif x.get('stopped_by'):
                    cells.append(f'not reached ({fnum(x.get("not_reached"))} held)')
                else:
                    own = f'; own {x["client_us"]:.1f}' if x.get('client_us') is not None else ''
                    ratio = f'{x["ratio"]:.2f}x' if x.get('ratio') is not None else DASH
                    cells.append(f'{fnum(round(x["median_us"]))} ({ratio}){own}')
            rows.append([f'{what} ({label(r)})' if i == 0 else '', fnum(n)] + cells)
    if not rows:
        return 'No current run has the live-MR series yet.'
    return table(['configuration', 'L live'] + paths, rows)


def block_inval_scale(d):
    """One free of an allocation carrying N MRs, and K frees at once, per path."""
    rows = []
    runs = series_runs(d, 'inval_scale')
    paths = [p for p in SERIES_PATHS if any(p in r['inval_scale']['per_path'] for _, r in runs)]
    for what, r in runs:
        per = r['inval_scale']['per_path']
        ns = sorted({f['mrs'] for p in per for f in per[p]['frees']})
        first = f'{what} ({label(r)})'
        for n in ns:
            cells = []
            for p in paths:
                f = next((f for f in (per.get(p) or {}).get('frees', []) if f['mrs'] == n), None)
                cells.append(DASH if f is None else
                             f'{fnum(round(f["free_us"]))}; {f["per_mr_us"]:.1f} per MR; cb {fnum(f["callbacks"])}')
            rows.append([first, fnum(n)] + cells)
            first = ''
        conc = [(per.get(p) or {}).get('concurrent') for p in paths]
        if any(conc):
            k = next(c for c in conc if c)
            rows.append(['', f'{k["frees"]} at once, {fnum(k["mrs_each"])} each']
                        + [DASH if c is None else
                           f'slowest {fnum(round(c["slowest_us"]))}; cb {fnum(c["callbacks"])}' for c in conc])
    if not rows:
        return 'No current run has the invalidation-at-scale series yet.'
    return table(['configuration', 'MRs on the freed allocation'] + paths, rows)


BLOCKS = [('ratio', block_ratio), ('vs-classic', block_vs_classic), ('vs-nvidia', block_vs_nvidia),
          ('parts', block_parts), ('memory', block_memory), ('scale', block_scale),
          ('live', block_live), ('inval-scale', block_inval_scale),
          ('spread-runs', block_spread_runs)]


def render(d):
    return {name: f'<!-- render-performance.py: {name} -->\n{fn(d)}\n<!-- end: {name} -->'
            for name, fn in BLOCKS}


def render_run(d, rid):
    r = next((r for r in d['runs'] if r['id'] == rid), None)
    if r is None:
        sys.exit(f'no run {rid}; runs: ' + ', '.join(x['id'] for x in d['runs']))
    out = [f'## {r["id"]}', '']
    for k in ('config', 'command', 'kernel', 'iommu', 'date', 'time', 'commit', 'includes',
              'duration_min', 'cases_passed', 'cases_total', 'kernel_log_clean', 'cost_model',
              'dilation', 'calibration_us', 'cycles_per_cell'):
        out.append(f'- {k}: {json.dumps(r[k], ensure_ascii=False)}')
    sizes = d['sizes']
    for field, title in (('regdereg_ratio', 'reg + dereg, median, ratio to the floor'),
                         ('vs_classic', 'reg + dereg, median, ratio to the classic client')):
        if r[field]:
            out += ['', f'### {title}', '',
                    table(['row'] + sizes, [[p] + row(vals)
                                            for p, vals in r[field].items()])]
    if r['split']:
        out += ['', '### mean ratio taken apart: ratio = 1 + provider + core + client', '',
                table(['size'] + list(r['split']),
                      [[s] + [f'{c[0]:.3f} = 1 {c[1]:+.3f} {c[2]:+.3f} {c[3]:+.3f}'
                              for c in (r['split'][p][i] for p in r['split'])]
                       for i, s in enumerate(sizes)])]
    if r['ranges']:
        out += ['', '### stated ranges', '',
                table(['figure', 'range', 'scope'],
                      [[x['figure'], stated(x), x['scope'] or ''] for x in r['ranges']])]
    for field in ('memory', 'scale'):
        if r[field]:
            out += ['', f'### {field}', '', '```json', json.dumps(r[field], indent=1), '```']
    for title, t in r['tables'].items():
        out += ['', f'### {title}', '', table(t['header'], t['rows'])]
    if r['notes']:
        out += ['', r['notes']]
    for g in d['groups']:
        if rid in (g['runs'] or []):
            out += ['', f'### group {g["id"]} (figures stated over runs {", ".join(g["runs"])})', '']
            if g['ranges']:
                out += [table(['figure', 'range', 'scope'],
                              [[x['figure'], stated(x), x['scope'] or ''] for x in g['ranges']]), '']
            if g['notes']:
                out.append(g['notes'])
    return '\n'.join(out)


def stated(x):
    """A stated range: ratios and shares with their decimals, other figures as numbers."""
    if max(abs(x['lo']), abs(x['hi'])) < 10 and isinstance(x['lo'] + x['hi'], float):
        return span(x['lo'], x['hi'])
    return span(x['lo'], x['hi'], fnum)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument('--check', metavar='DOC', help='exit 1 if DOC\'s rendered tables are not current')
    g.add_argument('--update', metavar='DOC', help='rewrite the rendered tables in DOC')
    g.add_argument('--run', metavar='ID', help='print everything stored for one run')
    ap.add_argument('--history', default=str(HISTORY), help='runs.json (default: %(default)s)')
    args = ap.parse_args()
    d = json.loads(Path(args.history).read_text(encoding='utf-8'))
    if args.run:
        print(render_run(d, args.run))
        return 0
    blocks = render(d)
    if not (args.check or args.update):
        print('\n\n'.join(blocks.values()))
        return 0
    path = Path(args.check or args.update)
    text = path.read_text(encoding='utf-8')
    stale = []
    for name, new in blocks.items():
        pat = re.compile(rf'<!-- render-performance\.py: {re.escape(name)} -->\n(?:.*?\n)?'
                         rf'<!-- end: {re.escape(name)} -->', re.S)
        m = pat.search(text)
        if not m:
            print(f'{path}: no markers for table "{name}"', file=sys.stderr)
            continue
        if m.group(0) != new:
            stale.append(name)
            text = text[:m.start()] + new + text[m.end():]
    if args.check:
        for name in stale:
            print(f'{path}: table "{name}" differs from {args.history}', file=sys.stderr)
        return 1 if stale else 0
    if stale:
        path.write_text(text, encoding='utf-8')
    print(f'{path}: {len(stale)} table(s) rewritten', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
