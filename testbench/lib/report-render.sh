#!/bin/bash
# The report's bench test (`nvpeer validate --report`, docs/validation.md, "The report"): the CLI
# renders the report of the committed fixtures (userspace-tests/harness/tests/fixtures/: a
# `validate --mem emu` document and two `bench --json` documents, written by the harness's own
# types), headless Chromium opens it, and the run fails when
#   - the browser logs anything to its console: the page has no script and a Content Security
#     Policy of `default-src 'none'`, so a script error or any resource the page tries to load
#     (a stylesheet, an image, a font, a file:// or network address, present or missing) is a
#     console message; a broken page proves the check sees them, on every run;
#   - the DOM the browser parsed lacks a section, a case of the fixture, or a plot, or holds an
#     element that loads or runs something;
#   - no screenshot comes out.
# The same checks then run on the report of a real `nvpeer validate --mem host` on this host.
# Usage: report-render.sh [CLI]  (default $NVPEER_CLI, else userspace-tests/target/release/nvpeer)
# Writes bench-results/report/: page/ (the report) and report.png (1280x2000 screenshot).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cli=${1:-${NVPEER_CLI:-$repo/userspace-tests/target/release/nvpeer}}
fixtures=$repo/userspace-tests/harness/tests/fixtures
out=$repo/bench-results/report
fail() { echo "report-render: FAILED: $*"; exit 1; }
command -v chromium >/dev/null || fail "no chromium (Debian package chromium; testbench/check installs it)"
[ -x "$cli" ] || fail "no nvpeer CLI at $cli"
cli=$(realpath "$cli")
work=$(mktemp -d /tmp/nvpeer-report.XXXXXX)
trap 'rm -rf "$work"' EXIT

# chrome ARGS...: headless Chromium with a profile of its own, no background traffic, its log
# (console messages included) on stderr.
chrome() {
    nice -n 10 timeout 120 chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$work/profile" --no-first-run --disable-background-networking \
        --disable-component-update --disable-sync --disable-extensions \
        --enable-logging=stderr --v=0 "$@"
}
# console LOG: the console messages in a Chromium log.
console() { grep -E ':CONSOLE[:(]' "$1" || true; }

# 1. The report, by the CLI.
rm -rf "$out/page"
mkdir -p "$out"
# (from the repository, so that the page names the fixtures by their paths in it)
fx=userspace-tests/harness/tests/fixtures
(cd "$repo" && "$cli" validate --report bench-results/report/page --report-from "$fx/validate-emu.json" \
    --report-bench "$fx/bench-host.json,$fx/bench-emu-reg.json") >"$work/cli.log" 2>&1 \
    || fail "nvpeer validate --report exited $?: $(tail -n 3 "$work/cli.log")"
page=$out/page/index.html
[ -s "$page" ] || fail "no $page"
grep -q "Content-Security-Policy\" content=\"default-src 'none'" "$page" \
    || fail "the page lost its Content Security Policy (the console check needs it)"

# 2. The check must see a broken page's errors: the same policy, a script, a stylesheet, an
# image and a background that are not allowed (or not there).
mkdir -p "$work/broken"
cat >"$work/broken/index.html" <<'HTML'
<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<link rel="stylesheet" href="missing.css"><style>body{background:url(missing.png)}</style></head>
<body><img src="plot.svg"><script>notDefined()</script></body></html>
HTML
chrome --dump-dom "file://$work/broken/index.html" >/dev/null 2>"$work/broken.log" || true
n=$(console "$work/broken.log" | wc -l)
[ "$n" -ge 3 ] || fail "the console check saw $n message(s) on a page with 4 errors: it would miss them on the report"

# 3. The report in the browser: a screenshot and the parsed DOM, with no console message.
chrome --screenshot="$out/report.png" --window-size=1280,2000 "file://$page" >/dev/null 2>"$work/shot.log" \
    || fail "chromium --screenshot failed: $(tail -n 3 "$work/shot.log")"
chrome --dump-dom "file://$page" >"$work/dom.html" 2>"$work/dom.log" || fail "chromium --dump-dom failed"
msgs=$(console "$work/shot.log"; console "$work/dom.log")
[ -z "$msgs" ] || fail "console messages on the report: $(echo "$msgs" | head -n 3)"
[ "$(head -c 8 "$out/report.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
    || fail "no PNG screenshot at $out/report.png"

# check_dom DOM JSON PLOTS: the page the browser parsed against the validate document it shows
# (PLOTS: the number of plots expected, or "any"); prints "N cases, M plots".
check_dom() {
    python3 - "$@" <<'PY'
import html.parser, json, sys
dom = open(sys.argv[1]).read()
doc = json.load(open(sys.argv[2]))
want_plots = sys.argv[3]
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.tags, self.code, self.bad = [], {}, [], []
        self.in_code = False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if "id" in a:
            self.ids.append(a["id"])
        if tag in ("script", "link", "img", "iframe", "object", "embed", "image", "use") \
                or any(k == "src" or k.startswith("on") or k == "xlink:href" for k in a) \
                or (a.get("href") or "").startswith(("http:", "https:", "//")):
            self.bad.append(tag)
        self.in_code = tag == "code"
    def handle_endtag(self, tag):
        self.in_code = False
    def handle_data(self, data):
        if self.in_code:
            self.code.append(data)
p = P()
p.feed(dom)
errors = []
order = [i for i in p.ids if i in ("verdict", "environment", "cases", "plots", "files")]
if order != ["verdict", "environment", "cases", "plots", "files"]:
    errors.append(f"sections {order}")
if p.bad:
    errors.append(f"elements that load or run: {p.bad}")
names = [c["name"] for c in doc["cases"]] + doc["not_run"]
missing = [n for n in names if n not in p.code]
if missing:
    errors.append(f"cases missing: {missing}")
plots = p.tags.get("svg", 0)
if want_plots != "any" and plots != int(want_plots):
    errors.append(f"{plots} plots, expected {want_plots}")
for e in errors:
    print("report-render:", e)
if errors:
    sys.exit(1)
print(f"{len(names)} cases, {plots} plots")
PY
}

# 4. What the browser parsed: three plots of the bench fixtures (bandwidth, latency,
# registration); validate's fixture timed no transfer (emu).
parsed=$(check_dom "$work/dom.html" "$fixtures/validate-emu.json" 3) \
    || fail "the fixtures' page as the browser parsed it: $(echo "$parsed" | sed 's/^report-render: //' | paste -sd ';' -)"

# 5. A real run on this host: `validate --mem host --report` (a host without an RDMA device
# reports cap.rdma-device failed and exits 2; with one, the cases run and their transfers are
# plotted), its page through the same checks.
rc=0
"$cli" validate --mem host --report "$work/live" >"$work/live.log" 2>&1 || rc=$?
[ "$rc" -le 2 ] && [ -s "$work/live/index.html" ] \
    || fail "nvpeer validate --mem host --report exited $rc: $(tail -n 3 "$work/live.log")"
chrome --dump-dom "file://$work/live/index.html" >"$work/live-dom.html" 2>"$work/live-dom.log" \
    || fail "chromium --dump-dom failed on the live run's page"
msgs=$(console "$work/live-dom.log")
[ -z "$msgs" ] || fail "console messages on the live run's page: $(echo "$msgs" | head -n 3)"
live=$(check_dom "$work/live-dom.html" "$work/live/validate.json" any) \
    || fail "the live run's page as the browser parsed it: $(echo "$live" | sed 's/^report-render: //' | paste -sd ';' -)"

echo "report-render: ok: headless Chromium $(chromium --version 2>/dev/null | awk '{print $2}'), no console message (the broken page's $n seen), sections in order: the fixtures' report ($parsed; bench-results/report/report.png), this host's validate --mem host (exit $rc; $live)"
