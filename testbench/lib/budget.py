#!/usr/bin/env python3
"""make check's stage table against its recorded budgets (testbench/budgets.txt).

Usage:
  budget.py BUDGETS TIMINGS cached|first RESULTS

TIMINGS holds one "NAME SECONDS" line per stage, boot and suite (written by testbench/check,
testbench/vm and the guest). Prints the table (stage, seconds, budget, ratio) and appends one
JSON result line per budgeted stage to RESULTS: a stage fails when it took more than twice its
budget and more than 60 s over it (the 60 s keep a stage of a few seconds from failing on noise).
"first" uses the first-run column (empty cache), "cached" the cached one.
"""
import json
import os
import sys

SLACK_S = 60


def read_budgets(path):
    budgets = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, cached, first = line.rsplit(None, 2)
        budgets[name] = (int(cached), int(first))
    return budgets


def read_timings(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        name, _, secs = line.rpartition(" ")
        try:
            rows.append((name.strip(), int(secs)))
        except ValueError:
            continue
    return rows


def main(argv):
    if len(argv) != 5 or argv[3] not in ("cached", "first"):
        print(__doc__, file=sys.stderr)
        return 2
    budgets = read_budgets(argv[1])
    rows = read_timings(argv[2])
    col = 0 if argv[3] == "cached" else 1
    results = []
    w = max([len(n) for n, _ in rows] + [10])
    print(f"stage table ({argv[3]} budgets, testbench/{os.path.basename(argv[1])}; a stage fails above 2x its budget):",
          file=sys.stderr)
    print(f"    {'stage'.ljust(w)}  seconds  budget  ratio", file=sys.stderr)
    for name, secs in rows:
        b = budgets.get(name)
        if b is None:
            print(f"    {name.ljust(w)}  {secs:7d}       -      -", file=sys.stderr)
            continue
        budget = b[col]
        ratio = secs / budget if budget else float("inf") if secs else 0.0
        over = secs > 2 * budget and secs > budget + SLACK_S
        mark = "  OVER BUDGET" if over else ""
        print(f"    {name.ljust(w)}  {secs:7d}  {budget:6d}  {ratio:5.2f}{mark}", file=sys.stderr)
        if over:
            results.append({"suite": "budget", "case": name, "status": "fail", "duration": secs,
                            "details": f"{name} took {secs} s, more than twice its {argv[3]} budget of "
                                       f"{budget} s (testbench/budgets.txt): find what grew, or "
                                       f"record a new budget with its reason"})
    missing = [n for n in budgets if n not in dict(rows) and budgets[n][col] > 0]
    if not results:
        results.append({"suite": "budget", "case": f"stages-within-2x[{argv[3]}]", "status": "pass",
                        "duration": 0,
                        "details": f"{sum(1 for n, _ in rows if n in budgets)} budgeted stages"
                                   + (f"; not run: {' '.join(missing)}" if missing else "")})
    with open(argv[4], "a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
