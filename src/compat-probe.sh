#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# compat-probe.sh SRCTREE: rustc flags selecting nvpeer's side of each Rust kernel API difference
# between the kernels it builds for (src/compat.rs), read from the target kernel's own rust/kernel
# sources (Kbuild passes $(srctree)), never from its version number. Prints --cfg NAME for each
# difference the target has. (No --check-cfg: it would switch on rustc's cfg checking for the
# kernel's own cfgs too, which kbuild does not declare.) A new difference is one probe here and one
# function in src/compat.rs.
srctree=$1
kernel=$srctree/rust/kernel
if [ ! -f "$kernel/module_param.rs" ]; then
    echo "compat-probe: no $kernel/module_param.rs: the target kernel's Rust sources are needed" >&2
    exit 0
fi
# ModuleParamAccess::value() returns the value (T: Copy) rather than a reference to it.
grep -qE 'pub fn value\(&self\) -> T\b' "$kernel/module_param.rs" && echo "--cfg nvpeer_param_value_copy"
exit 0
