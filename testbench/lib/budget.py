#!/usr/bin/env python3
"""make check's stage table against its recorded budgets (testbench/budgets.txt, and each suite's
in its header: "# bench: budget[-full] KERNEL CACHED FIRST").

Usage:
  budget.py BUDGETS TIMINGS cached|first RESULTS
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
stage fails when it took more than twice its budget times its factor, and more than 60 s over it
(the 60 s keep a stage of a few seconds from failing on noise): a healthy run on a machine 1.5x
slower passes, and a stage that doubled on its own is still caught. "first" uses the first-run
column (empty cache), "cached" the cached one.
"""
import json
import os
import re
import sys
import time

SLACK_S = 60
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
# Rows that inform and are never budgeted: a boot's CPU time, the time a stalled boot lost before
# it was booted again (testbench/vm). Every other row needs a budget: one without fails the run.
INFORMATIONAL = ("cpu-seconds[", "boot-stall[")
# Stages that are VM boots (their time is TCG's), besides boot[...] and suite[...] rows.
VM_STAGES = ("stock-suites", "stock-oldest-suites", "stock-7.3-suites", "bench-suites", "rehearsal-ubuntu", "stock-system", "stock-load")


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


def read_budgets(path):
    """Returns ({stage: (cached, first)}, {calibration kind: reference seconds}): the stages of
    PATH, and the suites' own budgets from testbench/suites/*.sh beside it (budget-full for
    budgets-full.txt, else budget). A suite row in PATH for a suite that has a file is an error:
    its budget belongs in its header."""
    budgets, ref = {}, {}
    suites_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "suites")
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.split()[0] in CALIBRATIONS:
            ref[line.split()[0]] = float(line.split()[1])
            continue
        name, cached, first = line.rsplit(None, 2)
        m = re.match(r"suite\[([^]@]+)", name)
        if m and os.path.exists(os.path.join(suites_dir, m.group(1) + ".sh")):
            raise ValueError(f"{path}: {name}: a suite's budget belongs in its header "
                             f"(testbench/suites/{m.group(1)}.sh: '# bench: budget ...')")
        budgets[name] = (int(cached), int(first))
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
    for name, want in (("suite[99-new]", True), ("lint", False), ("cpu-seconds[shared]", False),
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
    print(f"budget guard selftest: {len(cases) - failed} passed, {failed} failed")
    return failed


def main(argv):
    if len(argv) == 2 and argv[1] == "calibrate":
        print(f"calibration {calibrate():.3f}")
        return 0
    if len(argv) == 2 and argv[1] == "selftest":
        return 1 if selftest() else 0
    if len(argv) != 5 or argv[3] not in ("cached", "first"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        budgets, ref = read_budgets(argv[1])
    except ValueError as e:
        print(f"budgets: {e}", file=sys.stderr)
        with open(argv[4], "a") as f:
            f.write(json.dumps({"suite": "budget", "case": "budgets-readable", "status": "fail",
                                "duration": 0, "details": str(e)}) + "\n")
        return 0
    rows, cal = read_timings(argv[2])
    host, host_how = speed_factor(ref.get("calibration"), cal.get("calibration"), "host calibration")
    tcg, tcg_how = speed_factor(ref.get("tcg-calibration"), cal.get("tcg-calibration"), "TCG calibration")
    how = f"{host_how}; {tcg_how}"

    def factor_of(name):
        if name == "total":
            return max(host, tcg)
        return tcg if is_vm(name) else host
    col = 0 if argv[3] == "cached" else 1
    results = []
    w = max([len(n) for n, _ in rows] + [10])
    print(f"stage table ({argv[3]} budgets, testbench/{os.path.basename(argv[1])}; a stage fails above 2x its budget"
          f" times the machine's speed factor):", file=sys.stderr)
    print(f"    {host_how}\n    {tcg_how}", file=sys.stderr)
    print(f"    {'stage'.ljust(w)}  seconds  budget  ratio", file=sys.stderr)
    for name, secs in rows:
        b = budgets.get(name)
        if b is None:
            print(f"    {name.ljust(w)}  {secs:7d}       -      -", file=sys.stderr)
            if unbudgeted(name, budgets):
                results.append({"suite": "budget", "case": name, "status": "fail", "duration": secs,
                                "details": f"{name} took {secs} s and has no budget in testbench/"
                                           f"{os.path.basename(argv[1])}: record one (the measured "
                                           f"figure rounded up, with its reason)"})
            continue
        budget = b[col]
        ratio = secs / budget if budget else float("inf") if secs else 0.0
        factor = factor_of(name)
        over = over_budget(secs, budget, factor)
        mark = "  OVER BUDGET" if over else ""
        print(f"    {name.ljust(w)}  {secs:7d}  {budget:6d}  {ratio:5.2f}{mark}", file=sys.stderr)
        if over:
            results.append({"suite": "budget", "case": name, "status": "fail", "duration": secs,
                            "details": f"{name} took {secs} s, more than twice its {argv[3]} budget of "
                                       f"{budget} s times this machine's speed factor {factor:.2f} "
                                       f"(testbench/budgets.txt; {tcg_how if is_vm(name) else host_how}): find what grew, or "
                                       f"record a new budget with its reason"})
    missing = [n for n in budgets if n not in dict(rows) and budgets[n][col] > 0]
    if not results:
        results.append({"suite": "budget", "case": f"stages-within-2x[{argv[3]}]", "status": "pass",
                        "duration": 0,
                        "details": f"{sum(1 for n, _ in rows if n in budgets)} budgeted stages; {how}"
                                   + (f"; not run: {' '.join(missing)}" if missing else "")})
    with open(argv[4], "a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
