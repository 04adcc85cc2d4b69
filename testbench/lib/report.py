#!/usr/bin/env python3
"""Bench results: merge JSON-lines result files, scan kernel logs, print a summary.

Usage:
  report.py scan LOG [--whole-log] [--expect SUITE REGEX]...
                                        print offending kernel report lines; exit 1 if the log fails.
                                        --whole-log: LOG is a finished boot's whole kernel log
                                        (dmesg.txt), which must begin at the boot's first line
                                        --expect: REGEX must appear while SUITE runs (between the
                                        guest's "suite SUITE start" and "end" marks); the suites that
                                        expect reports run last in their boot (testbench/vm), and
                                        from the first expected report on the log is read only for
                                        the expected reports
  report.py summary FILE...             table of all results + "N passed, N failed, N skipped"
"""
import json
import re
import sys

# Kernel reports that fail a run unless the suite declared them expected.
REPORT = re.compile(
    r"BUG:|KASAN|WARNING:|Oops|general protection fault|Kernel panic|kernel BUG at|"
    r"possible circular locking|possible recursive locking|inconsistent lock state|"
    r"DEADLOCK|suspicious RCU usage|unreferenced object|UBSAN|"
    r"panicked at|rust_panic|self-detected stall|hung_task|INFO: task .* blocked|"
    r"VIOLATION"
)
# Lines that match REPORT but are not reports.
BENIGN = re.compile(r"nvpeer-bench:|kasan_multi_shot|KASAN: (initialized|disabled)|"
                    r"kmemleak: Kernel memory leak detector initialized|"
                    r"kmemleak: Automatic memory scanning thread|Lock dependency validator")

EXPECT_BEGIN = re.compile(r"nvpeer-bench: expect-begin (.*)$")
EXPECT_END = re.compile(r"nvpeer-bench: expect-end")
SUITE_START = re.compile(r"nvpeer-bench: suite (\S+) start")
SUITE_END = re.compile(r"nvpeer-bench: suite (\S+) end")


def suite_of_lines(lines):
    """The suite running at each line of the log (None outside the guest's suite marks)."""
    cur, out = None, []
    for line in lines:
        m = SUITE_START.search(line)
        if m:
            cur = m.group(1)
        out.append(cur)
        if SUITE_END.search(line):
            cur = None
    return out


# The first line the kernel logs at boot; a log without it lost its start to the ring buffer.
BOOT_LINE = re.compile(r"\]\s+Linux version ")


def scan(path, whole_log):
    try:
        lines = open(path, errors="replace").read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    # A log whose start was overwritten cannot be judged: reports and the markers that place or
    # excuse them may be gone. Counted as a report line of its own, so that it fails the boot.
    # (Only a finished boot's dmesg.txt: a console log is written at the console's loglevel.)
    if whole_log and lines and not any(BOOT_LINE.search(l) for l in lines[:5]):
        out.append((0, f"kernel log truncated: it begins at '{lines[0][:60]}', not at the boot's "
                       "'Linux version' line (the ring buffer overflowed: log_buf_len in "
                       "testbench/vm; or a suite cleared it: dmesg -C)"))
    allowed = None  # regex of reports a suite announced with tb_expect_begin
    for i, line in enumerate(lines):
        m = EXPECT_BEGIN.search(line)
        if m:
            allowed = re.compile(m.group(1))
            continue
        if EXPECT_END.search(line):
            allowed = None
            continue
        if REPORT.search(line) and not BENIGN.search(line):
            if allowed is not None and allowed.search(line):
                continue
            out.append((i, line))
    return out, lines


def cmd_scan(args):
    path = args[0]
    expects = []  # (suite, regex)
    whole_log = False
    i = 1
    while i < len(args):
        if args[i] == "--whole-log":
            whole_log = True
            i += 1
            continue
        if args[i] != "--expect" or i + 2 >= len(args):
            print(f"report.py scan: bad argument {args[i]!r} (--expect SUITE REGEX)")
            return 2
        expects.append((args[i + 1], re.compile(args[i + 2])))
        i += 3
    res = scan(path, whole_log)
    if not res:
        print(f"missing log {path}")
        return 1
    hits, lines = res
    if expects:
        owner = suite_of_lines(lines)
        # Where each expected report appears: only inside its own suite's run.
        seen = [j for j, l in enumerate(lines)
                if any(owner[j] == su and e.search(l) for su, e in expects)]
        missing = [f"{su}: {e.pattern}" for su, e in expects
                   if not any(owner[j] == su and e.search(lines[j]) for j in seen)]
        # Reports before the first expected one are not excused (a KASAN report disables lockdep
        # and taints the kernel: after it, the log is only read for the expected reports).
        first = min(seen, default=None)
        early = [(j, l) for j, l in hits if first is None or j < first]
        if early:
            print(f"{len(early)} unexpected kernel report line(s) before the expected one:")
            for j, l in early[:20]:
                print(f"  [{owner[j] or 'outside the suites'}] " + l)
            return 1
        if not missing:
            print("expected kernel report(s) seen: " + "; ".join(f"{su}: {e.pattern}" for su, e in expects))
            return 0
        print("expected kernel report NOT seen: " + "; ".join(missing))
        for _, l in hits[:40]:
            print("  " + l)
        return 1
    if not hits:
        return 0
    print(f"{len(hits)} kernel report line(s):")
    shown = set()
    for i, text in hits[:8]:
        if i >= len(lines) or text != lines[i]:
            print("  " + text)  # a finding about the log itself (truncated), not one of its lines
            continue
        for j in range(max(0, i - 2), min(len(lines), i + 25)):
            if j not in shown:
                shown.add(j)
                print("  " + lines[j])
        print("  ...")
    return 1


def cmd_summary(files):
    rows = []
    for f in files:
        try:
            for line in open(f):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    rows.append({"suite": f, "case": "malformed-result", "status": "fail",
                                 "duration": 0, "details": line[:200]})
        except FileNotFoundError:
            pass
    counts = {"pass": 0, "fail": 0, "skip": 0}
    w = max([len(r["suite"]) + len(r["case"]) + 1 for r in rows] + [10])
    print(f"{'suite/case'.ljust(w)}  status  time(s)  details")
    for r in rows:
        st = r.get("status", "fail")
        counts[st if st in counts else "fail"] += 1
        name = f"{r['suite']}/{r['case']}"
        det = (r.get("details") or "").replace("\n", " | ")
        if st == "pass":
            det = det[:60]
        else:
            det = det[:400]
        print(f"{name.ljust(w)}  {st:6}  {float(r.get('duration') or 0):7.1f}  {det}")
    print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    return 1 if counts["fail"] or not rows else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "scan":
        sys.exit(cmd_scan(sys.argv[2:]))
    sys.exit(cmd_summary(sys.argv[2:]))
