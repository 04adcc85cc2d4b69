#!/usr/bin/env python3
"""Add a registration-benchmark run to bench-results/history/runs.json, and keep its raw data.

    testbench/bench/import-run.py bench-results/stock [--notes TEXT] [--dry-run]

RESULT_DIR is what `make bench-stock`, `make bench-stock-pt` or `make bench` left (testbench/bench/
run): regpath.json (every path merged), tables.md (the tables as printed), run-info.json (when, at
which commit, which kernel and IOMMU mode, the VM's exit status), vm.log (every case's verdict),
the host's and the guest's calibration. The run's figures are read from regpath.json, its tables
verbatim from tables.md; those files (not the per-path documents, which regpath.json holds) are
copied to bench-results/regpath/<run id>/ (committed).
Then `testbench/bench/render-performance.py --update docs/performance.md` renders them.
bench-results/history/README.md documents each field. Python 3 standard library only.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HISTORY = REPO / 'bench-results' / 'history' / 'runs.json'
RAW = REPO / 'bench-results' / 'regpath'
CONFIG = {('stock', 'default'): ('stock', 'make bench-stock', 'stock', 'translated'),
          ('stock', 'pt'): ('stock-pt', 'make bench-stock-pt', 'stock', 'passthrough'),
          ('bench', 'default'): ('bench', 'make bench', 'debug', 'translated')}
SIZE = {'64K': 1 << 16, '256K': 1 << 18, '1M': 1 << 20, '4M': 1 << 22, '16M': 1 << 24,
        '64M': 1 << 26, '256M': 1 << 28, '1G': 1 << 30}
FLOORS = ('floor', 'floor-persistent')
KEPT = ('regpath.json', 'tables.md', 'run-info.json')
NVPEER = ('nvpeer-inval', 'nvpeer-persistent')
CLASSIC = ('classic', 'classic-persistent')


class ImportError_(Exception):
    pass


def load(path):
    try:
        return json.loads(Path(path).read_text(encoding='utf-8'))
    except (OSError, ValueError) as e:
        raise ImportError_(f'{path}: {e}') from e


def rnd(v, dg):
    """v to dg decimals; a whole number for dg 0."""
    if v is None:
        return None
    return int(round(v)) if dg == 0 else round(v, dg)


def cell(path, size, threads=1):
    return next((c for c in path.get('cells') or []
                 if c.get('size') == size and c.get('threads') == threads), None)


def per_size(path, sizes, f):
    vals = [f(c) if c else None for c in (cell(path, SIZE[s]) for s in sizes)]
    return vals if any(v is not None for v in vals) else None


def parse_tables(text):
    """The Markdown tables of `nvpeer emu regpath table`: {title: {header, rows}}."""
    tables, title = {}, None
    for line in text.splitlines():
        if line.startswith('### '):
            title = line[4:].strip()
        elif title and line.startswith('|') and not line.startswith('|---'):
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            t = tables.setdefault(title, {'header': None, 'rows': []})
            if t['header'] is None:
                t['header'] = cells
            else:
                t['rows'].append(cells)
    return tables


def verdicts(vm_log):
    """(passed, total, kernel log clean) from the VM's summary."""
    passed = total = None
    clean = None
    for line in vm_log.splitlines():
        m = re.match(r'\s*(\d+) passed, (\d+) failed, (\d+) skipped', line)
        if m:
            passed = int(m.group(1))
            total = passed + int(m.group(2)) + int(m.group(3))
        m = re.match(r'\s*(?:\S*/kernel-log|kernel/dmesg-clean\[[^]]*\])\s+(\w+)', line)
        if m:
            clean = m.group(1) == 'pass'
    return passed, total, clean


def split_of(c):
    """A cell's mean ratio taken apart: [ratio, provider, core, client], or None."""
    s = (c.get('ratios') or {}).get('cycle_mean_split') or {}
    if s.get('ratio') is None:
        return None
    return [rnd(s.get(k), 3) for k in ('ratio', 'provider', 'core', 'client')]


def ranges(paths, sizes):
    """The figures the doc's "where the excess goes" table reads, over every size."""
    out = []

    def add(figure, vals, scope):
        vals = [v for v in vals if v is not None]
        if vals:
            out.append({'figure': figure, 'lo': min(vals), 'hi': max(vals), 'scope': scope})

    def part(names, i):
        return [s[i] for p in names if p in paths
                for s in per_size(paths[p], sizes, split_of) or [] if s]

    def threads(names):
        return [rnd((c.get('ratios') or {}).get('regs_per_s'), 2) for p in names if p in paths
                for c in paths[p].get('cells') or [] if c.get('threads', 0) >= 4]
    add('nvpeer_own_share', part(NVPEER, 3), None)
    add('classic_own_share', part(CLASSIC, 3), None)
    add('core_share', part(NVPEER, 2), 'nvpeer paths')
    add('zero_cost_client', [round(1 + s[1] + s[2], 3) for p in NVPEER if p in paths
                             for s in per_size(paths[p], sizes, split_of) or [] if s],
        'nvpeer paths')
    add('threads_nvpeer', threads(NVPEER), '4-8 threads, every size')
    add('threads_classic', threads(CLASSIC), '4-8 threads, every size')
    return out


def memory(paths):
    per = {}
    for name, p in paths.items():
        m = p.get('memory') or {}
        if not m or m.get('error'):
            continue
        per[name] = {k: v for k, v in {
            'mrs': m.get('mrs'),
            'sunreclaim': rnd(m.get('meminfo_sunreclaim_bytes_per_mr'), 0),
            'sunreclaim_above_floor': rnd(m.get('sunreclaim_bytes_per_mr_above_floor'), 0),
            'kmalloc_nominal': rnd(m.get('kmalloc_nominal_bytes_per_mr'), 0),
            'kmalloc_nominal_above_floor': rnd(m.get('nominal_bytes_per_mr_above_floor'), 0),
            'kmalloc_whole': m.get('kmalloc_profile_bytes_per_mr'),
            'kmalloc_whole_above_floor': rnd(m.get('profile_bytes_per_mr_above_floor'), 0),
            'allocations': rnd(m.get('kernel_allocations_per_mr'), 1),
            'client_own_bytes': m.get('client_own_bytes_per_mr'),
        }.items() if v is not None}
    if not per:
        return None
    own = (per.get('nvpeer-inval') or {}).get('client_own_bytes')
    return {'live_mrs': (per.get('floor') or {}).get('mrs'), 'nvpeer_own_bytes': own,
            'per_path': per}


def scale(paths):
    per = {}
    for name, p in paths.items():
        s = p.get('scale')
        if not s:
            continue
        per[name] = {k: v for k, v in {
            'target': s.get('target'), 'reached': s.get('reached'), 'stopped_by': s.get('stopped_by'),
            'kmalloc_whole': s.get('kmalloc_profile_bytes_per_mr'),
            'kmalloc_whole_above_floor': rnd(s.get('profile_bytes_per_mr_above_floor'), 0),
            'allocations': rnd(s.get('kernel_allocations_per_mr'), 1),
            'reg_us': rnd(s.get('reg_us_per_mr'), 0), 'dereg_us': rnd(s.get('dereg_us_per_mr'), 0),
        }.items() if v is not None}
    return {'mrs': max((v.get('target') or 0) for v in per.values()), 'per_path': per} if per else None


def live_series(paths):
    """The 64 KiB cell with L other MRs live: median µs, ratio to none live, client's own µs."""
    per = {}
    for name, p in paths.items():
        rows = p.get('live_mrs') or []
        base = next((r for r in rows if r.get('live_mrs') == 0), None)
        b = ((base or {}).get('cycle') or {}).get('median_ns')
        out = []
        for r in sorted(rows, key=lambda r: r.get('live_mrs') or 0):
            if r.get('stopped_by'):
                out.append({'live': r.get('live_mrs'), 'not_reached': r.get('not_reached'),
                            'stopped_by': r['stopped_by']})
                continue
            med = (r.get('cycle') or {}).get('median_ns')
            own = (r.get('time_split_ns_per_cycle') or {}).get('client_own')
            out.append({'live': r.get('live_mrs'), 'median_us': rnd(med and med / 1000, 1),
                        'ratio': rnd(med / b, 3) if med and b else None,
                        'client_us': rnd(own and own / 1000, 2)})
        if out:
            per[name] = out
    return {'per_path': per} if per else None


def inval_series(paths):
    """One free of an allocation carrying N MRs, and K frees at once."""
    per = {}
    for name, p in paths.items():
        s = p.get('inval_scale') or {}
        frees = [{'mrs': f.get('mrs'), 'free_us': rnd(f.get('free_ns', 0) / 1000, 1),
                  'per_mr_us': rnd(f.get('free_ns_per_mr', 0) / 1000, 2),
                  'callbacks': f.get('callbacks'), 'state_after': f.get('mr_state_after_free')}
                 for f in s.get('frees') or []]
        c = s.get('concurrent')
        conc = None
        if c and c.get('free_ns'):
            conc = {'frees': c.get('threads'), 'mrs_each': c.get('mrs_each'),
                    'slowest_us': rnd(max(c['free_ns']) / 1000, 1), 'callbacks': c.get('callbacks')}
        if frees or conc:
            per[name] = {'frees': frees, 'concurrent': conc}
    return {'per_path': per} if per else None


def build(res, d, notes):
    info = load(res / 'run-info.json')
    doc = load(res / 'regpath.json')
    key = (info.get('kernel'), info.get('iommu'))
    if key not in CONFIG:
        raise ImportError_(f'no configuration for kernel {key[0]}, IOMMU {key[1]}')
    config, command, kernel, iommu = CONFIG[key]
    day, start = info['started'].split()
    paths = {p['path']: p for p in doc.get('paths') or [] if p.get('path')}
    if 'floor' not in paths:
        raise ImportError_(f'{res}/regpath.json has no floor path')
    sizes = d['sizes']
    cm = next(iter(paths.values())).get('cost_model') or {}
    h0, m0 = map(int, start.split(':'))
    h1, m1 = map(int, info['ended'].split(':'))
    minutes = (h1 * 60 + m1 - h0 * 60 - m0) % (24 * 60)
    passed, total, clean = verdicts((res / 'vm.log').read_text(encoding='utf-8', errors='replace'))
    includes = [c for c in d['changes'] if subprocess.run(
        ['git', '-C', str(REPO), 'merge-base', '--is-ancestor', c, info['commit']],
        capture_output=True, check=False).returncode == 0]
    cal = {}
    for side in ('host', 'guest'):
        f = res / f'{side}-calibration.json'
        if f.exists():
            cal[side] = rnd(load(f)['median_ns_per_iter'] / 1000, 1)
    floor_cells = [c for c in paths['floor'].get('cells') or [] if c.get('threads') == 1]
    c64 = cell(paths['floor'], SIZE['64K'])
    regdereg = {p: v for p in paths if p not in FLOORS
                for v in [per_size(paths[p], sizes,
                                   lambda c: rnd((c.get('ratios') or {}).get('cycle_median'), 3))]
                if v}
    vs_classic = {p: v for p in NVPEER if p in paths
                  for v in [per_size(paths[p], sizes, lambda c: rnd(
                      (c.get('ratios') or {}).get('cycle_median_vs_classic'), 2))] if v}
    tables = parse_tables((res / 'tables.md').read_text(encoding='utf-8'))
    bounds = next((t for title, t in tables.items() if 'ratio to the classic C client' in title), None)
    if bounds and 'floor bound' in bounds['header']:
        i = bounds['header'].index('floor bound')
        fb = {r[0]: r[i] for r in bounds['rows']}
        vals = [float(fb[s].rstrip('x')) if re.fullmatch(r'[\d.]+x', fb.get(s, '')) else None
                for s in sizes]
        if any(v is not None for v in vals):
            vs_classic['floor_bound'] = vals
    split = {p: v for p, path in paths.items() if path.get('via') == 'core'
             for v in [per_size(path, sizes, split_of)] if v}
    suffix = f' (tree {info["tree"]} beyond {info["commit"]})' if info.get('tree') != 'clean' else ''
    return {
        'id': f'{config}-{day.replace("-", "")}-{start.replace(":", "")}',
        'config': config, 'command': command, 'kernel': kernel, 'iommu': iommu,
        'date': day, 'time': f'{start}-{info["ended"]}', 'commit': info['commit'],
        'includes': includes, 'duration_min': minutes,
        'cases_passed': passed, 'cases_total': total, 'kernel_log_clean': clean,
        'cost_model': cm.get('preset'), 'dilation': rnd(cm.get('dilate'), 2),
        'calibration_us': cal or None,
        'cycles_per_cell': {'at_64k': c64.get('cycles') if c64 else None,
                            'min': min((c.get('cycles') or 0) for c in floor_cells)
                            if floor_cells else None},
        'regdereg_ratio': regdereg, 'vs_classic': vs_classic or None, 'split': split or None,
        'ranges': ranges(paths, sizes), 'memory': memory(paths), 'scale': scale(paths),
        'live': live_series(paths), 'inval_scale': inval_series(paths),
        'tables': tables,
        'notes': ' '.join(x for x in [doc.get('machine', '') + '.', f'Host: {info.get("host")}.'
                                      + suffix, f'VM exit status {info.get("rc")}.'
                                      if str(info.get('rc')) != '0' else '', notes or ''] if x),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('result_dir', help='bench-results/stock, bench-results/stock-pt or bench-results')
    ap.add_argument('--notes', help='words to keep with the run')
    ap.add_argument('--history', default=str(HISTORY), help='runs.json (default: %(default)s)')
    ap.add_argument('--dry-run', action='store_true', help='print the run; change nothing')
    args = ap.parse_args()
    res = Path(args.result_dir)
    try:
        d = load(args.history)
        run = build(res, d, args.notes)
    except (ImportError_, KeyError, OSError) as e:
        print(f'import-run: {e}', file=sys.stderr)
        return 1
    if args.dry_run:
        print(json.dumps({k: v for k, v in run.items() if k != 'tables'}, indent=1, ensure_ascii=False))
        return 0
    if any(r['id'] == run['id'] for r in d['runs']):
        print(f'import-run: {run["id"]} is already in {args.history}', file=sys.stderr)
        return 1
    raw = RAW / run['id']
    raw.mkdir(parents=True, exist_ok=False)
    # The per-path documents are left out: regpath.json holds each of them whole.
    for f in sorted(res.iterdir()):
        if f.is_file() and (f.name in KEPT or f.name.endswith('-calibration.json')
                            or f.suffix == '.log'):
            shutil.copy2(f, raw / f.name)
    d['runs'].append(run)
    Path(args.history).write_text(json.dumps(d, indent=1, ensure_ascii=False) + '\n', encoding='utf-8')
    print(f'{run["id"]}: added to {args.history}; raw data in {raw.relative_to(REPO)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
