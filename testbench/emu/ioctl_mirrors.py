#!/usr/bin/env python3
"""The Python mirrors of the emulators' ioctl ABI, checked against the C headers.

Two suites drive the emulators through Python (testbench/emu/peer_mem/selftest/pmectl.py for the
core emulator, testbench/emu/nvp2p/test_nvp2p.py for the provider); each writes its ioctl numbers
by hand, and an ioctl number holds its direction, its struct's size, the magic and the index. This
compiles a probe against testbench/emu/include with the host's C compiler (as emu-ctl's layout
test does for the Rust mirror), prints every ioctl the headers define, and requires every IOC_*
of each Python mirror to equal its header's. make check runs it with the host unit tests.

Usage: ioctl_mirrors.py   (exit 0: every mirrored number matches; 1: a mismatch, named)
"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "include")
# (header, C prefix, Python mirror, the mirror's name for a C name)
MIRRORS = [
    ("peer_mem_emu_ioctl.h", "PME_IOC_", os.path.join(HERE, "peer_mem/selftest/pmectl.py"),
     lambda c: "IOC_ABI" if c == "ABI_VERSION" else "IOC_" + c),
    ("nvp2p_emu_ioctl.h", "NVP2P_EMU_IOC_", os.path.join(HERE, "nvp2p/test_nvp2p.py"),
     lambda c: "IOC_" + c),
]


# Constants a Python mirror writes by hand besides its ioctl numbers: (header, C prefix, mirror,
# the mirror's prefix), e.g. the provider's allocation flags (ALLOC_MIG = NVP2P_EMU_ALLOC_MIG).
CONSTANTS = [
    ("nvp2p_emu_ioctl.h", "NVP2P_EMU_ALLOC_", os.path.join(HERE, "nvp2p/test_nvp2p.py"), "ALLOC_"),
]


def header_ioctls(header, prefix, what=r"_IO"):
    """{C name without the prefix: number} for every _IO* definition of the header (or, with
    `what` empty, every definition of the prefix)."""
    text = open(os.path.join(INCLUDE, header)).read()
    names = re.findall(rf"^#define\s+{prefix}(\w+)\s+{what}", text, re.M)
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "probe.c"), os.path.join(d, "probe")
        with open(src, "w") as f:
            f.write(f'#include <stdio.h>\n#include <linux/ioctl.h>\n#include "{header}"\nint main(void)\n{{\n')
            for n in names:
                f.write(f'\tprintf("{n} %lu\\n", (unsigned long){prefix}{n});\n')
            f.write("\treturn 0;\n}\n")
        subprocess.run(["cc", "-I", INCLUDE, src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}


def mirror(path):
    """The Python module at `path`, imported without running its main."""
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    bad = checked = 0
    for header, prefix, path, name_of in MIRRORS:
        c = header_ioctls(header, prefix)
        py = mirror(path)
        mirrored = {n: v for n, v in vars(py).items() if n.startswith("IOC_") and isinstance(v, int)}
        known = {name_of(n): (n, v) for n, v in c.items()}
        for n, v in sorted(mirrored.items()):
            checked += 1
            if n not in known:
                print(f"FAIL {os.path.relpath(path, HERE)}: {n} has no {prefix}* in {header}")
                bad += 1
            elif known[n][1] != v:
                print(f"FAIL {os.path.relpath(path, HERE)}: {n} = {v:#x}, {header} has "
                      f"{prefix}{known[n][0]} = {known[n][1]:#x}")
                bad += 1
    for header, prefix, path, py_prefix in CONSTANTS:
        c = header_ioctls(header, prefix, what="")
        py = mirror(path)
        for n, v in sorted(vars(py).items()):
            if not n.startswith(py_prefix) or not isinstance(v, int):
                continue
            checked += 1
            cname = n[len(py_prefix):]
            if c.get(cname) != v:
                print(f"FAIL {os.path.relpath(path, HERE)}: {n} = {v:#x}, {header} has "
                      f"{prefix}{cname} = {c.get(cname, 'nothing')}")
                bad += 1
    print(f"ioctl mirrors: {checked} Python ioctl numbers and constants checked against the C "
          f"headers, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
