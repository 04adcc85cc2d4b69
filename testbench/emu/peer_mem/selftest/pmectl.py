#!/usr/bin/env python3
"""Minimal driver of /dev/peer_mem_emu (ABI: testbench/emu/include/peer_mem_emu_ioctl.h)
for bench suites. Prints flat KEY=VALUE lines (nested keys joined with '.', list items by
index: query.state, fault_fired.0, 1.name), one per line, easy to grep from bash. Subcommands:
  abi (and config) | stats | clients | config | setconfig MODEL FLAGS HANG_MS HOLD_MS | reset
  model N (keep the other settings) | cfgflag BIT 0|1 (set or clear one PME_CFG_* bit)
  violations | fault POINT NTH TIMES [ERRNO] | delay POINT MS
  reghost LEN [PEERFLAGS]   register an anonymous host buffer, query, close the fd
  regbad                    register an unmapped range with and without ALLOW (errno)
  exitleak                  register a host MR and exit without DEREGISTER
  mr SIZE OFF LEN PEERFLAGS DEVICE STEP...
                            mmap SIZE bytes of /dev/pme_selftest_mem (pme_selftest "mem"
                            client), REGISTER [OFF, OFF+LEN) of it (key reg.*), then the steps:
                            reset, q (QUERY, key qN.*), inv (pme_selftest invalidate_all),
                            dereg, sysfs:NAME (counters, key sN.*), stats (key tN.*)
"""
import ctypes
import fcntl
import mmap
import os
import struct
import sys

DEV = "/dev/peer_mem_emu"
MAGIC = 0xE8


def _ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (MAGIC << 8) | nr


W, R = 1, 2
F_REG = "<QQIIIIIIQII"
F_OP = "<II"
F_QUERY = "<IIIIQQQQQIIII"
F_CFG = "<IIII"
F_FAULT = "<IIII"
F_DELAY = "<II"
F_STATS = "<" + "Q" * (14 + 16 + 16 + 2)
F_VIOL = "<IIIIQ192s"
F_CLIENT = "<IIQQ64s16s"

IOC_ABI = _ioc(R, 0x00, 4)
IOC_REGISTER = _ioc(R | W, 0x01, struct.calcsize(F_REG))
IOC_ACTIVATE = _ioc(W, 0x02, struct.calcsize(F_OP))
IOC_DEREGISTER = _ioc(W, 0x03, struct.calcsize(F_OP))
IOC_QUERY = _ioc(R | W, 0x04, struct.calcsize(F_QUERY))
IOC_SET_CONFIG = _ioc(W, 0x05, struct.calcsize(F_CFG))
IOC_GET_CONFIG = _ioc(R, 0x06, struct.calcsize(F_CFG))
IOC_SET_FAULT = _ioc(W, 0x07, struct.calcsize(F_FAULT))
IOC_SET_DELAY = _ioc(W, 0x08, struct.calcsize(F_DELAY))
IOC_GET_STATS = _ioc(R, 0x09, struct.calcsize(F_STATS))
IOC_GET_VIOLATION = _ioc(R | W, 0x0A, struct.calcsize(F_VIOL))
IOC_GET_CLIENT = _ioc(R | W, 0x0B, struct.calcsize(F_CLIENT))
IOC_RESET = _ioc(0, 0x0C, 0)

STAT_NAMES = ["violations", "deadlocks", "core_bug_hits", "rejected_clients",
              "live_clients", "live_mrs", "regs_ok", "regs_failed", "deregs",
              "invalidate_calls", "invalidate_unknown", "hw_revokes", "acquires",
              "releases"]


def _call(fd, req, fmt, *vals):
    buf = bytearray(struct.pack(fmt, *vals)) if vals else bytearray(struct.calcsize(fmt))
    fcntl.ioctl(fd, req, buf, True)
    return struct.unpack(fmt, bytes(buf))


def _cstr(b):
    return b.split(b"\0", 1)[0].decode(errors="replace")


def stats(fd):
    v = _call(fd, IOC_GET_STATS, F_STATS)
    d = dict(zip(STAT_NAMES, v[:14]))
    d["delay_hits"] = list(v[14:30])
    d["fault_fired"] = list(v[30:46])
    d["client_calls"], d["client_ns"] = v[46], v[47]
    return d


def clients(fd):
    out, i = [], 0
    while True:
        try:
            v = _call(fd, IOC_GET_CLIENT, F_CLIENT, i, 0, 0, 0, b"", b"")
        except OSError:
            return out
        out.append({"index": v[0], "flags": v[1], "usecnt": v[2], "reg_id": v[3],
                    "name": _cstr(v[4]), "version": _cstr(v[5])})
        i += 1


def violations(fd):
    out, i = [], 0
    while True:
        try:
            v = _call(fd, IOC_GET_VIOLATION, F_VIOL, i, 0, 0, 0, 0, b"")
        except OSError:
            return out
        out.append({"rule": v[1], "pid": v[2], "text": _cstr(v[5])})
        i += 1


def register(fd, addr, length, peer_flags, access=1, device=0, flags=0):
    v = _call(fd, IOC_REGISTER, F_REG, addr, length, access, peer_flags, device,
              flags, 0, 0, 0, 0, 0)
    return {"handle": v[6], "state": v[7], "core_context": v[8], "client_index": v[9]}


def query(fd, handle):
    v = _call(fd, IOC_QUERY, F_QUERY, handle, *([0] * 12))
    return {"state": v[1], "flags": v[2], "nmap": v[3], "core_context": v[4],
            "page_size": v[5], "dma_stopped_ns": v[6], "addr": v[7], "length": v[8],
            "invalidations": v[9], "owner_pid": v[10]}


def _buf_addr(m):
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


def emit(obj, prefix=""):
    """Print obj as flat KEY=VALUE lines."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            emit(v, f"{prefix}{k}.")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            emit(v, f"{prefix}{i}.")
    else:
        print(f"{prefix[:-1]}={obj}")


def main(argv):
    fd = os.open(DEV, os.O_RDWR)
    cmd = argv[0] if argv else "stats"
    if cmd == "abi":
        v = _call(fd, IOC_GET_CONFIG, F_CFG)
        emit({"abi": _call(fd, IOC_ABI, "<I")[0], "model": v[0], "flags": v[1]})
    elif cmd in ("model", "cfgflag"):
        v = list(_call(fd, IOC_GET_CONFIG, F_CFG))
        if cmd == "model":
            v[0] = int(argv[1], 0)
        elif int(argv[2]):
            v[1] |= int(argv[1], 0)
        else:
            v[1] &= ~int(argv[1], 0)
        _call(fd, IOC_SET_CONFIG, F_CFG, *v)
    elif cmd == "stats":
        emit(stats(fd))
    elif cmd == "clients":
        emit(clients(fd))
    elif cmd == "config":
        v = _call(fd, IOC_GET_CONFIG, F_CFG)
        emit({"model": v[0], "flags": v[1], "hang_timeout_ms": v[2],
              "hold_timeout_ms": v[3]})
    elif cmd == "setconfig":
        _call(fd, IOC_SET_CONFIG, F_CFG, *[int(x, 0) for x in argv[1:5]])
    elif cmd == "reset":
        fcntl.ioctl(fd, IOC_RESET)
    elif cmd == "violations":
        emit(violations(fd))
    elif cmd == "fault":
        err = int(argv[4]) if len(argv) > 4 else 0
        _call(fd, IOC_SET_FAULT, F_FAULT, int(argv[1]), err, int(argv[2]), int(argv[3]))
    elif cmd == "delay":
        _call(fd, IOC_SET_DELAY, F_DELAY, int(argv[1]), int(argv[2]))
    elif cmd in ("reghost", "exitleak"):
        length = int(argv[1], 0) if len(argv) > 1 and cmd == "reghost" else 65536
        pflags = int(argv[2], 0) if len(argv) > 2 else 3
        m = mmap.mmap(-1, length + 4096)
        addr = _buf_addr(m) + 100  # deliberately unaligned
        r = register(fd, addr, length, pflags)
        r["query"] = query(fd, r["handle"])
        r["stats_live"] = stats(fd)["live_mrs"]
        if cmd == "reghost":
            _call(fd, IOC_DEREGISTER, F_OP, r["handle"], 0)
            try:
                _call(fd, IOC_DEREGISTER, F_OP, r["handle"], 0)
                r["second_dereg"] = "accepted"
            except OSError as e:
                r["second_dereg"] = e.errno
        emit(r)
        return 0  # exitleak: the fd is closed by process exit
    elif cmd == "mr":
        size, off, length, pflags, dev = (int(x, 0) for x in argv[1:6])
        mfd = os.open("/dev/pme_selftest_mem", os.O_RDWR)
        m = mmap.mmap(mfd, size)
        base = _buf_addr(m)
        out = {"base_mod_64k": base % 65536}
        try:
            out["reg"] = register(fd, base + off, length, pflags, device=dev)
        except OSError as e:
            out["reg"] = {"errno": e.errno}
            emit(out)
            return 0
        h = out["reg"]["handle"]
        for i, step in enumerate(argv[6:]):
            if step == "reset":
                fcntl.ioctl(fd, IOC_RESET)
            elif step == "q":
                out[f"q{i}"] = query(fd, h)
            elif step == "inv":
                with open("/sys/module/pme_selftest/parameters/invalidate_all", "w") as f:
                    f.write("1")
            elif step == "dereg":
                _call(fd, IOC_DEREGISTER, F_OP, h, 0)
            elif step.startswith("sysfs:"):
                d = f"/sys/kernel/mm/memory_peers/{step[6:]}"
                out[f"s{i}"] = {n: open(f"{d}/{n}").read().strip() for n in sorted(os.listdir(d))}
            elif step == "stats":
                out[f"t{i}"] = stats(fd)
            else:
                sys.exit(f"unknown step {step}")
        emit(out)
    elif cmd == "regbad":
        # below mmap_min_addr: never mapped, GUP fails with EFAULT; with and without ALLOW
        for key, pflags in (("allow", 3), ("noallow", 0)):
            try:
                r = register(fd, 0x1000, 8192, pflags)
                emit({key: {"unexpected": r}})
                return 1
            except OSError as e:
                emit({key: {"errno": e.errno}})
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
