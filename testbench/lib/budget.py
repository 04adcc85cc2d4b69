#!/usr/bin/env python3
"""make check's stage table against its recorded budgets (testbench/budgets.txt, and each suite's
in its header: "# bench: budget[-full] KERNEL CACHED FIRST").

Usage:
  budget.py BUDGETS TIMINGS cached|first RESULTS
  budget.py predict BUDGETS TIMINGS cached|first
  budget.py calibrate
  budget.py selftest

TIMINGS holds one "NAME SECONDS" line per stage, boot and suite (written by testbench/check,
testbench/vm and the guest), and two kinds of calibration lines: "calibration SECONDS" (`budget.py
calibrate`: a fixed single-threaded workload on the host, at the start and the end of the run)
and "tcg-calibration SECONDS" (testbench/stock: a fixed boot of Debian's kernel under QEMU TCG,
the same work every run). Prints the table (stage, seconds, budget, ratio) and appends one JSON
result line per budgeted stage to RESULTS.

The guard tells a slow machine from a broken stage. Each calibration over its reference in
BUDGETS (the same lines, measured on the machine the budgets were) gives a speed factor, clamped
to [0.67, 3]: the host's for host stages, TCG's for the VM stages (boot[...], suite[...] and the
stages that are VM boots), the larger of the two for the total. The two differ: on 2026-11-27 a
machine that ran the host workload as fast as the budgets' ran the TCG guests 1.3-3x slower. A
row is over when it took more than twice its budget times its factor, and more than 60 s over it
(the 60 s keep a stage of a few seconds from failing on noise): a healthy run on a machine 1.5x
slower passes, and a stage that doubled on its own is still caught. A CPU row over its budget
fails the run, and so does the total's wall row; a stage's wall row over its budget is marked and
informs (wall_fails: on two shared cores it measures the neighbours too), except where CPU is not
judged (no cgroup measured it, or BUDGETS has no CPU columns), where the wall rows are all there is
and fail. "first" uses the first-run
column (empty cache), "cached" the cached one.

CPU seconds are budgeted beside the wall seconds: "cpu-seconds[NAME] N" rows (testbench/lib/cpu.sh:
each stage's cgroup; testbench/vm: a boot's, paired with its boot[NAME] row) against the third and
fourth columns of NAME's line in BUDGETS ("NAME CACHED FIRST CPU-CACHED CPU-FIRST"; "-" where one
kind is not budgeted: the host checks that run niced beside the lanes have no wall budget, the
kernel's background build and the lanes have no wall row), by the same rule and factors. A CPU
row without a budget fails where BUDGETS budgets CPU at all; where it has no CPU column
(budgets-full.txt today) the CPU rows only inform.
"cpu-seconds[total]" is the whole run's. `predict` prints the one line make check says at its
start: how long the run should take on this machine, from the total's budget and the factors
measured so far, and whether that fits CI's window.
"""
import json
import os
import re
import sys
import time

SLACK_S = 60
# CI's limit for one make check (.ci/run), which `predict` compares against.
CI_WINDOW_S = 90 * 60
FACTOR_MIN, FACTOR_MAX = 0.67, 3.0
# calibrate: iterations of the workload (about 2 s on the reference machine).
CAL_ITER = 12_000_000


def calibrate():
    """Seconds of a fixed single-threaded workload, best of three."""
    best = None
    for _ in range(3):
        t = time.perf_counter()
        x = 0
        for i in range(CAL_ITER):
            x = (x * 31 + i) & 0xFFFFFFFF
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best


CALIBRATIONS = ("calibration", "tcg-calibration")
# Rows that inform and are never budgeted: the time a stalled boot lost before it was booted again
# (testbench/vm). Every other row needs a budget, its CPU row too: one without fails the run.
INFORMATIONAL = ("boot-stall[",)
CPU_ROW = re.compile(r"^cpu-seconds\[(.*)\]$")
# Stages that are VM boots (their time is TCG's), besides boot[...] and suite[...] rows.
VM_STAGES = ("stock-suites", "stock-oldest-suites", "stock-7.3-suites", "bench-suites", "rehearsal-ubuntu", "stock-system", "stock-load",
             "stock-lane", "debug-lane")


def is_vm(name):
    return name.startswith(("boot[", "suite[")) or name in VM_STAGES


# A suite's budget, in its own header: "# bench: budget KERNEL CACHED FIRST" (make check) or
# "# bench: budget-full KERNEL CACHED FIRST" (make check-full), one line per kernel it runs on in
# that depth; KERNEL is "-" for the bench kernel (row suite[NAME]), else the row's tag (stock,
# stock+oldest, stock-7.3: row suite[NAME@KERNEL]).
SUITE_BUDGET = re.compile(r"^# bench: (budget|budget-full) (-|stock|stock\+oldest|stock-[0-9.]+) (\d+) (\d+)\s*$")


def suite_budgets(suites_dir, key):
    """{suite[...] row: (cached, first)} from the suites' headers, for key budget or budget-full."""
    out = {}
    for f in sorted(os.listdir(suites_dir)):
        if not f.endswith(".sh"):
            continue
        for line in open(os.path.join(suites_dir, f)):
            if line.startswith("# bench: budget") and not SUITE_BUDGET.match(line):
                raise ValueError(f"testbench/suites/{f}: {line.strip()!r} is not '# bench: "
                                 f"budget[-full] -|stock|stock+oldest|stock-VERSION CACHED FIRST'")
            m = SUITE_BUDGET.match(line)
            if m and m.group(1) == key:
                tag = m.group(2)
                row = f"suite[{f[:-3]}{'' if tag == '-' else '@' + tag}]"
                if row in out:
                    raise ValueError(f"{f}: two '# bench: {key} {tag}' lines")
                out[row] = (int(m.group(3)), int(m.group(4)))
    return out


def budget_value(tok):
    """A budget column: seconds, or None for "-" (not budgeted)."""
    return None if tok == "-" else int(tok)


def read_budgets(path, cpu=None):
    """Returns ({stage: (cached, first)}, {calibration kind: reference seconds}): the wall budgets
    of PATH (None where "-"), and the suites' own budgets from testbench/suites/*.sh beside it
    (budget-full for budgets-full.txt, else budget). With CPU a dict, fills it with the CPU
    budgets ({stage: (cached, first)}, the optional third and fourth columns). A suite row in PATH
    for a suite that has a file is an error: its budget belongs in its header."""
    budgets, ref = {}, {}
    suites_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "suites")
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.split()[0] in CALIBRATIONS:
            ref[line.split()[0]] = float(line.split()[1])
            continue
        tok = line.split()
        ncol = 4 if len(tok) >= 5 and all(re.fullmatch(r"\d+|-", t) for t in tok[-4:]) else 2
        if len(tok) < ncol + 1 or not all(re.fullmatch(r"\d+|-", t) for t in tok[-ncol:]):
            raise ValueError(f"{path}: {line!r} is not 'NAME CACHED FIRST [CPU-CACHED CPU-FIRST]'")
        name = " ".join(tok[:-ncol])
        m = re.match(r"suite\[([^]@]+)", name)
        if m and os.path.exists(os.path.join(suites_dir, m.group(1) + ".sh")):
            raise ValueError(f"{path}: {name}: a suite's budget belongs in its header "
                             f"(testbench/suites/{m.group(1)}.sh: '# bench: budget ...')")
        wall = (budget_value(tok[-ncol]), budget_value(tok[-ncol + 1]))
        budgets[name] = wall
        if ncol == 4 and cpu is not None:
            cpu[name] = (budget_value(tok[-2]), budget_value(tok[-1]))
    key = "budget-full" if os.path.basename(path) == "budgets-full.txt" else "budget"
    if os.path.isdir(suites_dir):
        budgets.update(suite_budgets(suites_dir, key))
    return budgets, ref


def read_timings(path):
    """Returns ([(stage, seconds)], {calibration kind: [seconds]})."""
    rows, cal = [], {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        name, _, secs = line.rpartition(" ")
        if name.strip() in CALIBRATIONS:
            try:
                cal.setdefault(name.strip(), []).append(float(secs))
            except ValueError:
                pass
            continue
        try:
            rows.append((name.strip(), int(secs)))
        except ValueError:
            continue
    return rows, cal


def speed_factor(ref, cal, what="calibration"):
    """A speed factor (1: as fast as the reference machine) from one kind of calibration, and
    how it was found."""
    if ref is None or not cal:
        return 1.0, f"no {what} (factor 1)"
    raw = max(cal) / ref
    f = min(max(raw, FACTOR_MIN), FACTOR_MAX)
    runs = " and ".join(f"{c:.2f}" for c in cal)
    return f, f"{what} {runs} s against {ref:.2f} s on the budgets' machine: speed factor {f:.2f}" + (
        f" (measured {raw:.2f}, clamped)" if f != raw else "")


def unbudgeted(name, budgets):
    """Whether a row needs a budget it does not have. Rows that only inform need none: the
    INFORMATIONAL ones, and the set-up steps `tb` times inside a budgeted stage (their names are
    descriptions, with spaces: "kernel build (...)" inside bench-kernel, "Debian kernel ...: fetch
    + modules_prepare" inside stock-load; a stage's name has none)."""
    return name not in budgets and not name.startswith(INFORMATIONAL) and " " not in name


def wall_fails(name, cpu_judged):
    """Whether a stage's wall seconds can fail the run. On two cores shared by two lanes and the
    host checks, one stage's wall time says what its neighbours left it as much as what it did (a
    cached run's userspace-build took 80 s alone and 116 s beside a VM); its CPU seconds say what it
    did, and they are judged. So a stage's wall row informs, and two wall rows fail: the total's,
    which is what CI's window holds, and every stage's where CPU is not judged (no cgroup measured
    it, or the budget file has no CPU columns: budgets-full.txt), as the wall is all there is."""
    return name == "total" or not cpu_judged


def over_budget(secs, budget, factor):
    """The guard's rule: more than twice the budget scaled by the speed factor, and 60 s over it."""
    scaled = budget * factor
    return secs > 2 * scaled and secs > scaled + SLACK_S


def selftest():
    """The guard's cases, printed one per line; returns the number that failed."""
    cases = [
        # (what, stage, seconds, budget, reference, calibrations, expected over)
        ("healthy stage on a 1.5x slower host", "lint", 290, 100, 1.0, [1.5, 1.4], False),
        ("stage that doubled on its own, host as fast", "lint", 290, 100, 1.0, [1.0, 1.02], True),
        ("stage that doubled on its own, host 1.5x slower", "lint", 450, 100, 1.0, [1.5, 1.5], True),
        ("a few seconds over on a short stage", "lint", 40, 10, 1.0, [1.0], False),
        ("faster host, same stage time", "lint", 200, 100, 1.0, [0.7], True),
        ("no calibration: factor 1", "lint", 190, 100, None, [], False),
        ("a calibration 5x slower is clamped to 3", "lint", 700, 100, 1.0, [5.0], True),
        # A VM stage is scaled by TCG's factor alone: guests 1.5x slower pass, 2x on top fail.
        ("boot on a machine whose guests run 1.5x slower", "boot[shared@stock]", 290, 100, 20.0, [30.0], False),
        ("boot that doubled on top of slower guests", "boot[shared@stock]", 610, 100, 20.0, [30.0], True),
    ]
    failed = 0
    for what, stage, secs, budget, ref, cal, want in cases:
        kind = "TCG calibration" if is_vm(stage) else "host calibration"
        factor, how = speed_factor(ref, cal, kind)
        got = over_budget(secs, budget, factor)
        ok = got == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {stage} {secs} s against {budget} s, {how} -> "
              f"{'over' if got else 'within'}")
    # A row without a budget fails, unless it only informs.
    known = {"lint": (10, 10)}
    for name, want in (("suite[99-new]", True), ("lint", False),
                       ("boot-stall[shared@stock]", False),
                       ("kernel build (/var/cache/nvpeer-testbench/kernel-850dcb9584903d7e)", False),
                       ("Debian kernel 7.3.4+deb13-amd64: fetch + modules_prepare", False)):
        got = unbudgeted(name, known)
        ok = got == want
        failed += not ok
        cases.append(None)
        print(f"{'ok  ' if ok else 'FAIL'} a row without a budget: {name} -> {'fails' if got else 'passes'}")
    # A suite's budget comes from its header, by depth and kernel; one left in the table fails.
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "suites"))
        with open(os.path.join(d, "suites", "99-new.sh"), "w") as f:
            f.write("# a suite\n# bench: budget stock 20 30\n# bench: budget-full - 40 50\n")
        for txt, body, want in (
                ("budgets.txt", "lint 5 6\n", {"lint": (5, 6), "suite[99-new@stock]": (20, 30)}),
                ("budgets-full.txt", "lint 5 6\n", {"lint": (5, 6), "suite[99-new]": (40, 50)}),
                ("budgets.txt", "suite[99-new@stock] 20 30\n", ValueError)):
            with open(os.path.join(d, txt), "w") as f:
                f.write(body)
            try:
                got = read_budgets(os.path.join(d, txt))[0]
            except ValueError as e:
                got = ValueError
                err = str(e)
            ok = got == want
            failed += not ok
            cases.append(None)
            print(f"{'ok  ' if ok else 'FAIL'} suite budgets from headers, {txt} with {body.strip()!r}: "
                  f"{err if got is ValueError else got}")
    # CPU rows, end to end: a table of wall and CPU rows against budgets with CPU columns.
    with tempfile.TemporaryDirectory() as d:
        bud, tim, res = (os.path.join(d, n) for n in ("budgets.txt", "timings", "results"))
        with open(bud, "w") as f:
            f.write("calibration 1.0\nlint 100 100 100 100\nhost-unit-tests - - 300 300\n"
                    "boot[shared] 100 100 200 200\nbench-kernel-build - - 1000 1000\ntotal 500 500 900 900\n")
        for what, rows, want in (
                ("CPU within its budget", ["lint 50", "cpu-seconds[lint] 150"], []),
                ("CPU that doubled on its own", ["lint 50", "cpu-seconds[lint] 400"], ["cpu-seconds[lint]"]),
                ("a niced stage: CPU judged, wall not", ["host-unit-tests 5000", "cpu-seconds[host-unit-tests] 200"], []),
                ("a boot's CPU row pairs with boot[...]", ["boot[shared] 90", "cpu-seconds[shared] 500"],
                 ["cpu-seconds[shared]"]),
                ("a CPU row alone (the background build)", ["cpu-seconds[bench-kernel-build] 2100"],
                 ["cpu-seconds[bench-kernel-build]"]),
                ("a CPU row without a budget", ["cpu-seconds[new-stage] 5"], ["cpu-seconds[new-stage]"]),
                ("the total's CPU", ["total 400", "cpu-seconds[total] 950"], []),
                ("a stage's wall doubled beside busy neighbours, its CPU within: informs",
                 ["lint 400", "cpu-seconds[lint] 90"], []),
                ("the total's wall over: fails", ["total 1300", "cpu-seconds[total] 800"], ["total"]),
                ("no CPU measured: a stage's wall fails", ["lint 400"], ["lint"])):
            with open(tim, "w") as f:
                f.write("calibration 1.0\n" + "\n".join(rows) + "\n")
            open(res, "w").close()
            import contextlib
            import io
            with contextlib.redirect_stderr(io.StringIO()):
                main(["budget.py", bud, tim, "first", res])
            got = [json.loads(x)["case"] for x in open(res) if json.loads(x)["status"] == "fail"]
            ok = got == want
            failed += not ok
            cases.append(None)
            print(f"{'ok  ' if ok else 'FAIL'} {what}: {' '.join(rows)} -> failed {got or 'none'}")
        # A budget file without CPU columns (budgets-full.txt): the wall is all that is judged.
        nocpu = os.path.join(d, "budgets-full.txt")
        with open(nocpu, "w") as f:
            f.write("calibration 1.0\nlint 100 100\n")
        with open(tim, "w") as f:
            f.write("calibration 1.0\nlint 400\ncpu-seconds[lint] 90\n")
        open(res, "w").close()
        with contextlib.redirect_stderr(io.StringIO()):
            main(["budget.py", nocpu, tim, "first", res])
        got = [json.loads(x)["case"] for x in open(res) if json.loads(x)["status"] == "fail"]
        ok = got == ["lint"]
        failed += not ok
        cases.append(None)
        print(f"{'ok  ' if ok else 'FAIL'} no CPU columns in the budgets: a stage's wall fails -> failed {got or 'none'}")
        with open(tim, "w") as f:
            f.write("calibration 2.0\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            predict(["budget.py", "predict", bud, tim, "first"])
        # (500 s budget x factor 2: 17 min, inside 90)
        ok = "about 17 min" in out.getvalue() and "fits" in out.getvalue()
        failed += not ok
        cases.append(None)
        print(f"{'ok  ' if ok else 'FAIL'} predict on a 2x slower host: {out.getvalue().strip()}")
    print(f"budget guard selftest: {len(cases) - failed} passed, {failed} failed")
    return failed


def factors(ref, cal):
    """(host factor, TCG factor, how they were found) from a run's calibration lines."""
    host, host_how = speed_factor(ref.get("calibration"), cal.get("calibration"), "host calibration")
    tcg, tcg_how = speed_factor(ref.get("tcg-calibration"), cal.get("tcg-calibration"), "TCG calibration")
    return host, tcg, host_how, tcg_how


def factor_for(name, host, tcg):
    """The speed factor a row is scaled by: TCG's for VM stages, the larger for the total."""
    if name == "total":
        return max(host, tcg)
    return tcg if is_vm(name) else host


def cpu_pairs(rows, cpu_rows):
    """{cpu row key: the wall row it belongs to}: NAME's own row, or boot[NAME] for a boot's
    (testbench/vm writes cpu-seconds[GROUP@KERNEL] beside boot[GROUP@KERNEL]); None for a CPU
    row with no wall row (the kernel's background build, the lanes, the total)."""
    walls = {n for n, _ in rows}
    out = {}
    for key in cpu_rows:
        out[key] = key if key in walls else f"boot[{key}]" if f"boot[{key}]" in walls else None
    return out


def predict(argv):
    """The line make check prints at its start (usage: predict BUDGETS TIMINGS cached|first)."""
    budgets, ref = read_budgets(argv[2])
    _, cal = read_timings(argv[3])
    host, tcg, host_how, tcg_how = factors(ref, cal)
    col = 0 if argv[4] == "cached" else 1
    total = budgets.get("total", (None, None))[col]
    if total is None:
        print(f"make check: no total budget in {argv[2]}: no estimate")
        return 0
    known = "tcg-calibration" in cal
    factor = max(host, tcg) if known else host
    est = total * factor
    how = (f"its {argv[4]}-run budget of {total / 60:.0f} min x this machine's speed factor {factor:.2f}"
           f" ({'the larger of host and TCG' if known else 'host; the TCG factor comes with the stock kernel'})")
    if est <= CI_WINDOW_S:
        verdict = f"fits CI's {CI_WINDOW_S // 60}-minute window"
    else:
        verdict = (f"does NOT fit CI's {CI_WINDOW_S // 60}-minute window on this machine; every case runs"
                   f" anyway (nothing is skipped), the guard judges each stage by the same factor")
    print(f"make check ({argv[4]} run): expect about {est / 60:.0f} min ({how}): {verdict}")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "calibrate":
        print(f"calibration {calibrate():.3f}")
        return 0
    if len(argv) == 2 and argv[1] == "selftest":
        return 1 if selftest() else 0
    if len(argv) == 5 and argv[1] == "predict" and argv[4] in ("cached", "first"):
        return predict(argv)
    if len(argv) != 5 or argv[3] not in ("cached", "first"):
        print(__doc__, file=sys.stderr)
        return 2
    cpu_budgets = {}
    try:
        budgets, ref = read_budgets(argv[1], cpu_budgets)
    except ValueError as e:
        print(f"budgets: {e}", file=sys.stderr)
        with open(argv[4], "a") as f:
            f.write(json.dumps({"suite": "budget", "case": "budgets-readable", "status": "fail",
                                "duration": 0, "details": str(e)}) + "\n")
        return 0
    all_rows, cal = read_timings(argv[2])
    cpu = {}
    rows = []
    for name, secs in all_rows:
        m = CPU_ROW.match(name)
        if m:
            cpu[m.group(1)] = secs
        else:
            rows.append((name, secs))
    host, tcg, host_how, tcg_how = factors(ref, cal)
    how = f"{host_how}; {tcg_how}"
    col = 0 if argv[3] == "cached" else 1
    kind = argv[3]
    bname = os.path.basename(argv[1])
    results = []
    pairs = cpu_pairs(rows, cpu)
    cpu_of = {wall: key for key, wall in pairs.items() if wall is not None}
    # (a CPU row alone: the background build, the lanes, the total; listed after the stages)
    alone = [key for key, wall in pairs.items() if wall is None]
    w = max([len(n) for n, _ in rows] + [len(k) for k in alone] + [10])

    informed = []

    def judge(label, name, secs, budget, what, fails=True):
        """The ratio column and, when over, a failure result (FAILS) or a mark that informs.
        BUDGET None: not budgeted."""
        if budget is None:
            return "-", "-", ""
        factor = factor_for(name, host, tcg)
        ratio = secs / budget if budget else float("inf") if secs else 0.0
        if over_budget(secs, budget, factor) and not fails:
            informed.append(f"{label} {secs} s ({ratio:.2f}x)")
            return str(budget), f"{ratio:.2f}", "  over (wall: informs)"
        if over_budget(secs, budget, factor):
            results.append({"suite": "budget", "case": label, "status": "fail", "duration": secs,
                            "details": f"{label} took {secs} {what}, more than twice its {kind} budget of "
                                       f"{budget} s times this machine's speed factor {factor:.2f} "
                                       f"(testbench/{bname}; {tcg_how if is_vm(name) else host_how}): find what grew, or "
                                       f"record a new budget with its reason"})
            return str(budget), f"{ratio:.2f}", "  OVER BUDGET"
        return str(budget), f"{ratio:.2f}", ""

    def missing_budget(label, secs, what):
        results.append({"suite": "budget", "case": label, "status": "fail", "duration": secs,
                        "details": f"{label} took {secs} {what} and has no budget in testbench/"
                                   f"{bname}: record one (the measured figure rounded up, with its reason)"})

    print(f"stage table ({kind} budgets, testbench/{bname}; a row is over above 2x its budget times the"
          f" machine's speed factor; CPU rows and the total fail, a stage's wall row informs):", file=sys.stderr)
    print(f"    {host_how}\n    {tcg_how}", file=sys.stderr)
    print(f"    {'stage'.ljust(w)}  seconds  budget  ratio    cpu-s  budget  ratio", file=sys.stderr)
    for name, secs in rows + [(k, None) for k in alone]:
        key = cpu_of.get(name, name if secs is None else None)
        mark = ""
        if secs is None:
            wcols = ("-", "-", "-")
        elif name not in budgets:
            wcols = (str(secs), "-", "-")
            if unbudgeted(name, budgets):
                missing_budget(name, secs, "s")
        else:
            b, r, m = judge(name, name, secs, budgets[name][col], "s", fails=wall_fails(name, bool(cpu) and bool(cpu_budgets)))
            wcols, mark = (str(secs), b, r), m
        if key is not None and key in cpu:
            csecs = cpu[key]
            cb = cpu_budgets.get(name if secs is not None else key)
            label = f"cpu-seconds[{key}]"
            if cb is None:
                ccols = (str(csecs), "-", "-")
                # (a budget file with no CPU column at all, budgets-full.txt, leaves CPU informational)
                if cpu_budgets:
                    missing_budget(label, csecs, "CPU-s")
            else:
                b, r, m = judge(label, name if secs is not None else key, csecs, cb[col], "CPU-s")
                ccols, mark = (str(csecs), b, r), mark or m
        else:
            ccols = ("", "", "")
        print(f"    {name.ljust(w)}  {wcols[0]:>7}  {wcols[1]:>6}  {wcols[2]:>5}  {ccols[0]:>7}  {ccols[1]:>6}"
              f"  {ccols[2]:>5}{mark}".rstrip(), file=sys.stderr)
    if cpu:
        # (stages and the kernel's build; not the lanes or the total, which hold them, nor a
        # boot's row, which its stage's holds)
        top = sorted(((v, k) for k, v in cpu.items()
                      if k not in ("total", "stock-lane", "debug-lane") and not (pairs.get(k) or "").startswith("boot[")),
                     reverse=True)[:6]
        if "total" in cpu:
            print(f"    CPU seconds: {cpu['total']} in all; the largest stages: "
                  + ", ".join(f"{k} {v}" for v, k in top), file=sys.stderr)
    else:
        print("    CPU seconds: not measured (no writable cgroup: testbench/lib/cpu.sh)", file=sys.stderr)
    if informed:
        print("    over 2x in wall seconds only (their CPU within budget; they inform, the run does not fail"
              " on them): " + ", ".join(informed), file=sys.stderr)
    missing = [n for n in budgets if n not in dict(rows) and budgets[n][col]]
    if not results:
        results.append({"suite": "budget", "case": f"stages-within-2x[{kind}]", "status": "pass",
                        "duration": 0,
                        "details": f"{sum(1 for n, _ in rows if n in budgets)} budgeted stages"
                                   f", {sum(1 for k in cpu if cpu_budgets.get(pairs.get(k) or k))} CPU rows; {how}"
                                   + (f"; not run: {' '.join(missing)}" if missing else "")
                                   + (f"; over in wall seconds only: {', '.join(informed)}" if informed else "")})
    with open(argv[4], "a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
