#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Check src/ffi.rs against bindgen output of the API headers nvpeer is built with.
#   scripts/ffi-check.sh            bench emulator headers (testbench/emu/include)
#   OFED_DIR=... NVIDIA_SRC=... scripts/ffi-check.sh   the real headers
# Field names/order/types and function signatures are compared as text (check.py); sizes and
# offsets by compiling both declarations into one host program. One line per difference.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
ofed_inc=${OFED_DIR:+$OFED_DIR/include}
nv_inc=${NVIDIA_SRC:+$NVIDIA_SRC/nvidia}
ofed_inc=${ofed_inc:-$root/testbench/emu/include}
nv_inc=${nv_inc:-$root/testbench/emu/include}
[ -f "$ofed_inc/rdma/peer_mem.h" ] || { echo "ffi-check: no $ofed_inc/rdma/peer_mem.h (OFED_DIR)"; exit 1; }
[ -f "$nv_inc/nv-p2p.h" ] || { echo "ffi-check: no $nv_inc/nv-p2p.h (NVIDIA_SRC)"; exit 1; }
# The emulator include dir holds both headers, so it goes last: a real one given alone (only
# NVIDIA_SRC, or only OFED_DIR) must not be shadowed by the emulator's copy.
emu_inc=$root/testbench/emu/include
inc=()
for d in "$nv_inc" "$ofed_inc"; do [ "$d" = "$emu_inc" ] || inc+=(-I"$d"); done
[ "$nv_inc" != "$emu_inc" ] && [ "$ofed_inc" != "$emu_inc" ] || inc+=(-I"$emu_inc")
for t in bindgen rustc python3; do
    command -v $t >/dev/null || { echo "ffi-check: $t not found (run inside the toolchain root: testbench/tb chroot)"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bindgen "$here/ffi-check/wrapper.h" -o "$tmp/bg.rs" --use-core --ctypes-prefix kffi \
    --formatter none --no-layout-tests --no-doc-comments --no-prepend-enum-name \
    --allowlist-type 'peer_memory_client(_ex)?|nvidia_p2p_(page|page_table|dma_mapping)(_t)?' \
    --allowlist-function 'ib_(un)?register_peer_memory_client|nvidia_p2p_.*' \
    --blocklist-type 'sg_table|device|pci_dev' \
    -- -I"$here/ffi-check/stubs" "${inc[@]}" -D__KERNEL__ -funsigned-char -w ${FFI_CHECK_CFLAGS:-}

rc=0
python3 "$here/ffi-check/check.py" "$root/src/ffi.rs" "$tmp/bg.rs" "$tmp/layout.rs" "$tmp/pt" || rc=1
pt=$(cat "$tmp/pt")   # the page-table declaration matching this header (v1 or v2)

# Host stand-in for the parts of the `kernel` crate ffi.rs uses.
cat >"$tmp/kernel.rs" <<'RS'
pub mod bindings {
    #[repr(C)] pub struct sg_table { _p: [u8; 0] }
    #[repr(C)] pub struct device { _p: [u8; 0] }
    #[repr(C)] pub struct pci_dev { _p: [u8; 0] }
}
pub mod ffi {
    pub type c_char = u8;
    pub use core::ffi::{c_int, c_uint, c_ulong, c_ulonglong, c_uchar, c_void};
}
RS
cat >"$tmp/main.rs" <<RS
#![allow(dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals, improper_ctypes)]
use core::mem::{offset_of, size_of};
#[path = "$root/src/ffi.rs"]
mod ffi;
mod bg {
    use kernel::bindings::{device, pci_dev, sg_table};
    use kernel::ffi as kffi;
    include!("$tmp/bg.rs");
}
static mut BAD: u32 = 0;
fn cmp(what: &str, ours: usize, theirs: usize) {
    if ours != theirs {
        println!("ffi-check: {what}: {theirs} in the header, {ours} in src/ffi.rs");
        unsafe { BAD += 1 };
    }
}
fn main() {
include!("$tmp/layout.rs");
    std::process::exit(if unsafe { BAD } == 0 { 0 } else { 1 });
}
RS
rustc --edition=2021 -A warnings --crate-type rlib --crate-name kernel -o "$tmp/libkernel.rlib" "$tmp/kernel.rs"
if ! rustc --edition=2021 -A warnings --extern kernel="$tmp/libkernel.rlib" -L "$tmp" -o "$tmp/layout" "$tmp/main.rs" 2>"$tmp/rustc.err"; then
    echo "ffi-check: the layout program did not compile:"; head -n 30 "$tmp/rustc.err"; exit 1
fi
"$tmp/layout" || rc=1

if [ $rc = 0 ]; then
    echo "ffi-check: ok (src/ffi.rs matches $ofed_inc/rdma/peer_mem.h and $nv_inc/nv-p2p.h, page table $pt)"
fi
exit $rc
