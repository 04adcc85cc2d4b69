# CPU seconds per stage of make check (sourced by testbench/check). Each timed stage runs in a
# cgroup of its own, made for it under this run's cgroup: whatever the stage forks (compilers,
# guests, daemons that outlive it) is charged to it, and nothing that runs beside it is (the other
# lane, the kernel's build in the background). The run's own cgroup gives the whole run's total.
# Shell-only stages that fork nothing cost what they cost: next to nothing.
#
# Accounting only, never control: the cgroups set no limit. They come from the cgroup v2 hierarchy
# (cpu.stat's usage_usec, which every v2 cgroup has) or, on a v1 machine, the cpuacct controller
# (cpuacct.usage); TB_CPU_KINDS="v1" (or "none") picks one for a test. Where neither can be written (an unprivileged container), TB_CPU_ROOT stays
# empty, no cpu-seconds row is written, and the stage table says so.
# shellcheck shell=bash

# cpu_init: this run's cgroup, under the one this shell is in; the shell moves into it, so that
# everything the run forks is inside. Sets TB_CPU_ROOT and TB_CPU_KIND (v2|v1), exported for the
# lanes' subshells (TB_CPU_MOUNT: the hierarchy's mount point).
cpu_init() {
    TB_CPU_ROOT="" TB_CPU_KIND="" TB_CPU_MOUNT=""
    local mount rel kind dir
    for kind in ${TB_CPU_KINDS:-v2 v1}; do
        case $kind in v1 | v2) TB_CPU_KIND=$kind ;; *) continue ;; esac
        mount=$(cpu_mount) rel=$(cpu_rel "$BASHPID")
        [ -n "$mount" ] && [ -n "$rel" ] || continue
        dir="$mount${rel%/}/nvpeer-check.$$"
        mkdir -p "$dir" 2>/dev/null || continue
        if echo "$BASHPID" >"$dir/cgroup.procs" 2>/dev/null && [ -r "$dir/$(cpu_usage_file)" ]; then
            TB_CPU_ROOT=$dir TB_CPU_MOUNT=$mount
            break
        fi
        rmdir "$dir" 2>/dev/null || true
    done
    [ -n "$TB_CPU_ROOT" ] || TB_CPU_KIND=""
    export TB_CPU_ROOT TB_CPU_KIND TB_CPU_MOUNT
}

# cpu_mount: where TB_CPU_KIND's hierarchy is mounted (v2: cgroup2; v1: the one with cpuacct).
cpu_mount() {
    if [ "$TB_CPU_KIND" = v2 ]; then awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts
    else awk '$3 == "cgroup" && $4 ~ /(^|,)cpuacct(,|$)/ { print $2; exit }' /proc/mounts; fi
}

# cpu_rel PID: PID's cgroup path in that hierarchy.
cpu_rel() {
    if [ "$TB_CPU_KIND" = v2 ]; then sed -n 's/^0:://p' "/proc/$1/cgroup"
    else awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ { print $3; exit }' "/proc/$1/cgroup"; fi
}

cpu_usage_file() { if [ "$TB_CPU_KIND" = v2 ]; then echo cpu.stat; else echo cpuacct.usage; fi; }

# cpu_usage DIR: the CPU seconds charged to cgroup DIR and its children so far (integer).
cpu_usage() {
    if [ "$TB_CPU_KIND" = v2 ]; then
        awk '$1 == "usage_usec" { printf "%d\n", $2 / 1000000 }' "$1/cpu.stat"
    else
        awk '{ printf "%d\n", $1 / 1000000000 }' "$1/cpuacct.usage"
    fi
}

# cpu_current: the cgroup directory this shell is in.
cpu_current() {
    local rel
    rel=$(cpu_rel "$BASHPID")
    echo "$TB_CPU_MOUNT${rel%/}"
}

# cpu_begin NAME: a cgroup for stage NAME under the one this shell is in (a stage inside a stage
# is charged to both), and this shell moved into it. Sets cpu_stage ("NEW PREVIOUS", for cpu_end;
# empty where CPU is not measured): the caller declares it local. (Not in a command substitution:
# the subshell would be the one that moved.)
# shellcheck disable=SC2034 # (cpu_stage: the caller's, read after the call)
cpu_begin() {
    cpu_stage=""
    [ -n "${TB_CPU_ROOT:-}" ] || return 0
    local prev dir
    prev=$(cpu_current)
    case "$prev" in "$TB_CPU_ROOT"*) ;; *) prev=$TB_CPU_ROOT ;; esac
    dir="$prev/$(printf '%s' "$1" | tr -c 'A-Za-z0-9_.+@-' '_').$BASHPID.$RANDOM"
    mkdir "$dir" 2>/dev/null && echo "$BASHPID" >"$dir/cgroup.procs" 2>/dev/null || return 0
    cpu_stage="$dir $prev"
}

# cpu_end NAME "NEW PREVIOUS": this shell back where it was, the stage's row written
# ("cpu-seconds[NAME] N" in TB_TIMINGS), its cgroup removed once nothing runs in it (a process
# that outlived the stage keeps it until cpu_cleanup).
cpu_end() {
    local name=$1 dir=${2%% *} prev=${2#* }
    [ -n "$dir" ] && [ -d "$dir" ] || return 0
    echo "$BASHPID" >"$prev/cgroup.procs" 2>/dev/null || true
    echo "cpu-seconds[$name] $(cpu_usage "$dir")" >>"$TB_TIMINGS"
    rmdir "$dir" 2>/dev/null || true
}

# cpu_job_dir NAME: prints a new cgroup NAME under the run's, for a background job (the kernel's
# build, a lane) whose process joins it with cpu_join and whose CPU cpu_read_job reads once it
# has ended; prints nothing without accounting.
cpu_job_dir() {
    [ -n "${TB_CPU_ROOT:-}" ] || return 0
    mkdir -p "$TB_CPU_ROOT/job-$1" 2>/dev/null && echo "$TB_CPU_ROOT/job-$1"
}

# CPU_JOIN: a command prefix that moves itself into cgroup DIR and execs the rest: `setsid nice
# ... bash -c "$CPU_JOIN" DIR CMD...` (a function can't follow setsid). An empty DIR joins nothing.
# shellcheck disable=SC2016,SC2034 # (expanded by the bash it runs in; used by testbench/check)
CPU_JOIN='[ -z "$0" ] || echo $$ >"$0/cgroup.procs" 2>/dev/null || true; exec "$@"'

# cpu_join DIR: this shell (a lane's subshell) into job cgroup DIR.
cpu_join() { [ -z "$1" ] || echo "$BASHPID" >"$1/cgroup.procs" 2>/dev/null || true; }

# cpu_read_job NAME: "cpu-seconds[NAME] N" for the job of cpu_job_dir NAME.
cpu_read_job() {
    local dir="${TB_CPU_ROOT:-}/job-$1"
    [ -n "${TB_CPU_ROOT:-}" ] && [ -d "$dir" ] || return 0
    echo "cpu-seconds[$1] $(cpu_usage "$dir")" >>"$TB_TIMINGS"
}

# cpu_renice DIR N: every thread in cgroup DIR and below to nice N (a lane that yielded to the
# kernel's build gets its share back: QEMU's vCPU threads carry their own nice value, so the
# threads, not the processes). Needs the cgroup: without accounting, nothing is reniced.
cpu_renice() {
    [ -n "$1" ] && [ -d "$1" ] || return 0
    local f list=cgroup.threads
    [ "$TB_CPU_KIND" = v2 ] || list=tasks
    find "$1" -name "$list" -print0 2>/dev/null | while IFS= read -r -d '' f; do
        # (a thread that ended meanwhile is no error)
        xargs -r renice -n "$2" -p <"$f" >/dev/null 2>&1 || true
    done
}

# cpu_total: "cpu-seconds[total] N": everything this run forked, from its cgroup.
cpu_total() {
    [ -n "${TB_CPU_ROOT:-}" ] || return 0
    echo "cpu-seconds[total] $(cpu_usage "$TB_CPU_ROOT")" >>"$TB_TIMINGS"
}

# cpu_cleanup: the run's cgroups removed, deepest first, this shell moved back out (the EXIT trap;
# a cgroup a process still holds stays, empty of accounting, until it ends: rmdir needs it empty).
cpu_cleanup() {
    [ -n "${TB_CPU_ROOT:-}" ] && [ -d "$TB_CPU_ROOT" ] || return 0
    local parent=${TB_CPU_ROOT%/nvpeer-check.*}
    echo "$BASHPID" >"$parent/cgroup.procs" 2>/dev/null || true
    find "$TB_CPU_ROOT" -depth -mindepth 0 -type d -exec rmdir {} + 2>/dev/null || true
}
