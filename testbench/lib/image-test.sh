#!/bin/bash
# The tools image's bench test (issue 56; docs/operations.md, "Tools image"): `make image` from
# this run's nvpeer-tools .deb (testbench/lib/deb-build.sh), then the image run with podman on
# this host:
#   build     the image committed and archived; its entry point the CLI, its version label and
#             the version dpkg installed the .deb's;
#   doctor    `nvpeer doctor --root /host --json` in the container, the host's / mounted at /host
#             read-only (as packaging/kubernetes/nvpeer-node-health.yaml runs it): the same checks
#             with the same verdicts and codes as this host's own `nvpeer doctor --no-probes`, but
#             kernel.log, which is "unknown" there (the kernel log needs CAP_SYSLOG and the
#             /dev/kmsg device, which neither the container nor the DaemonSet's pod has);
#   npd       `nvpeer doctor --root /host --npd`: node-problem-detector's one line within 80 bytes
#             and its exit status, the same as the host's;
#   validate  `nvpeer validate --mem host --json` in the container: the verbs library loads (the
#             image carries libibverbs and its providers) and the run's verdict is the host's own
#             (here: no RDMA device; on the bench's rxe guests the suites run validate itself);
#   labels    `nvpeer labels --root /host` prints the NFD feature file the DaemonSet writes.
# The image and its archive are removed afterwards. Prints "image-test: ok: CASE: DETAIL" or
# "image-test: FAILED: CASE: DETAIL" per case; exit 1 when one failed.
# Usage: image-test.sh DEB CLI  (DEB: nvpeer-tools_<v>_<arch>.deb; CLI: the same CLI, natively)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
deb=$1 cli=$2
export CONTAINERS_CONF=$repo/testbench/lib/containers.conf
ver=$(dpkg-deb -f "$deb" Version)
tag=localhost/nvpeer-tools-bench:$ver
work=$(mktemp -d /tmp/nvpeer-image-test.XXXXXX)
archive=$work/nvpeer-tools.oci.tar
failed=0
ok() { echo "image-test: ok: $1: $2"; }
bad() { echo "image-test: FAILED: $1: $2"; failed=1; }
cleanup() { podman rmi -f "$tag" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
# run ARGS...: the image's CLI in a container without network, the host's / at /host read-only.
run() { timeout 120 podman run --rm --network none -v /:/host:ro "$tag" "$@"; }

if ! make -s -C "$repo" image IMAGE_DEB="$deb" IMAGE_OUT="$archive" IMAGE_TAG="$tag" >"$work/build.log" 2>&1; then
    tail -n 20 "$work/build.log" >&2
    bad build "make image failed: $(tail -n 1 "$work/build.log")"
    exit 1
fi
entry=$(podman image inspect --format '{{json .Config.Entrypoint}}' "$tag")
label=$(podman image inspect --format '{{index .Labels "org.opencontainers.image.version"}}' "$tag")
installed=$(timeout 60 podman run --rm --network none --entrypoint dpkg-query "$tag" -W -f '${Version}' nvpeer-tools)
# (the examples the package ships, which the image keeps: the DaemonSet's manifest among them)
examples=$(timeout 60 podman run --rm --network none --entrypoint /bin/ls "$tag" /usr/share/doc/nvpeer-tools/examples/kubernetes | tr '\n' ' ')
size=$(du -h "$archive" | cut -f1)
if [ "$entry" = '["/usr/bin/nvpeer"]' ] && [ "$label" = "$ver" ] && [ "$installed" = "$ver" ] && [ -s "$archive" ] \
    && [[ "$examples" == *nvpeer-node-health.yaml* ]]; then
    ok build "$tag, OCI archive $size, entry point $entry, nvpeer-tools $installed installed by dpkg, examples: $examples"
else
    bad build "entry point $entry, version label '$label', dpkg's nvpeer-tools '$installed', archive ${size:-missing}, examples '$examples' (want $ver and the Kubernetes examples)"
fi

# The checks as (name status code) lines, from a doctor --json document.
checks() { python3 -c 'import json,sys; [print(c["id"], c["status"], c.get("code") or "-") for c in json.load(sys.stdin)["checks"]]'; }
run doctor --root /host --json >"$work/in.json" 2>"$work/in.err"; in_rc=$?
"$cli" doctor --no-probes --json >"$work/host.json" 2>"$work/host.err"; host_rc=$?
if ! in_checks=$(checks <"$work/in.json" 2>&1); then
    bad doctor "the container's doctor --json (exit $in_rc) is not a report: $(head -c 300 "$work/in.json" "$work/in.err" | tr '\n' ' ')"
elif ! host_checks=$(checks <"$work/host.json" 2>&1); then
    bad doctor "this host's doctor --json (exit $host_rc) is not a report: $(head -c 300 "$work/host.err" | tr '\n' ' ')"
elif [ "$(grep -v '^kernel\.log ' <<<"$in_checks")" != "$(grep -v '^kernel\.log ' <<<"$host_checks")" ] || [ "$in_rc" != "$host_rc" ]; then
    bad doctor "the container (exit $in_rc) and the host (exit $host_rc) differ: $(diff <(echo "$in_checks") <(echo "$host_checks") | grep '^[<>]' | head -n 6 | tr '\n' ';')"
elif ! grep -qx 'kernel\.log unknown NVP-D012' <<<"$in_checks" || ! grep -q 'kernel log not readable' "$work/in.json"; then
    bad doctor "kernel.log in the container: $(grep '^kernel\.log ' <<<"$in_checks") (want unknown: a container without CAP_SYSLOG and the /dev/kmsg device cannot read the kernel log)"
else
    ok doctor "$(echo "$in_checks" | wc -l) checks, the same verdicts and codes as the host's own but kernel.log (unknown: no kernel log in a container), exit $in_rc"
fi

in_npd=$(run doctor --root /host --npd 2>/dev/null); in_rc=$?
host_npd=$("$cli" doctor --no-probes --npd 2>/dev/null); host_rc=$?
if [ "$in_npd" = "$host_npd" ] && [ "$in_rc" = "$host_rc" ] && [ "$(echo "$in_npd" | wc -l)" = 1 ] && [ "${#in_npd}" -le 80 ]; then
    ok npd "exit $in_rc, one line of ${#in_npd} bytes: $in_npd"
else
    bad npd "container exit $in_rc '$in_npd', host exit $host_rc '$host_npd'"
fi

run validate --mem host --json >"$work/v.json" 2>"$work/v.err"; in_rc=$?
"$cli" validate --mem host --json >"$work/hv.json" 2>"$work/hv.err"; host_rc=$?
# The cases as (name status) lines, and the device case's detail.
cases() { python3 -c 'import json,sys; [print(c["name"], c["status"]) for c in json.load(sys.stdin)["cases"]]'; }
device() { python3 -c 'import json,sys; print(*[c.get("detail", "") for c in json.load(sys.stdin)["cases"] if c["name"] == "cap.rdma-device"])'; }
if ! in_cases=$(cases <"$work/v.json" 2>&1) || ! host_cases=$(cases <"$work/hv.json" 2>&1); then
    bad validate "no validate document: container exit $in_rc ($(head -c 200 "$work/v.err")), host exit $host_rc ($(head -c 200 "$work/hv.err"))"
elif [ "$in_cases" != "$host_cases" ] || [ "$in_rc" != "$host_rc" ]; then
    bad validate "the container (exit $in_rc) and the host (exit $host_rc) differ: $(diff <(echo "$in_cases") <(echo "$host_cases") | grep '^[<>]' | head -n 6 | tr '\n' ';')"
elif in_dev=$(device <"$work/v.json") && echo "$in_dev" | grep -q 'could not be loaded'; then
    bad validate "the image lacks the verbs library: $in_dev"
else
    ok validate "$(echo "$in_cases" | wc -l) cases, the same verdicts as the host's, exit $in_rc; the verbs library loaded in the image (${in_dev:-no device case})"
fi

if run labels --root /host >"$work/labels" 2>"$work/labels.err" && grep -q '/nvpeer-gpudirect-rdma.ready=' "$work/labels"; then
    ok labels "$(grep -c '^[^#].*=' "$work/labels") labels, $(grep '/nvpeer-gpudirect-rdma.ready=' "$work/labels")"
else
    bad labels "$(head -c 300 "$work/labels" "$work/labels.err" | tr '\n' ' ')"
fi
exit $failed
