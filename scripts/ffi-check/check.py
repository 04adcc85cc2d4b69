#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Compare nvpeer's hand-written FFI (src/ffi.rs) with bindgen output of the API headers.

Text level: every struct field (name, order, normalised type) and every imported function
(parameter and return types). Layout level: writes a Rust program that prints size_of/offset_of
of both sides, run by ffi-check.sh. Exit status 1 on any difference, one line per difference.
"""
import re
import sys

# Our Rust name -> the C (bindgen) name.
STRUCTS = {
    "PeerMemoryClient": "peer_memory_client",
    "PeerMemoryClientEx": "peer_memory_client_ex",
    "NvidiaP2pPage": "nvidia_p2p_page",
    "NvidiaP2pDmaMapping": "nvidia_p2p_dma_mapping",
}
# Fields whose C type is a union/array we declare as a plain array of the same size.
SIZE_ONLY = {("NvidiaP2pPage", "registers")}
FUNCS = [
    "ib_register_peer_memory_client", "ib_unregister_peer_memory_client",
    "nvidia_p2p_get_pages", "nvidia_p2p_get_pages_persistent", "nvidia_p2p_dma_map_pages",
    "nvidia_p2p_dma_unmap_pages", "nvidia_p2p_put_pages", "nvidia_p2p_put_pages_persistent",
    "nvidia_p2p_free_page_table", "nvidia_p2p_free_dma_mapping",
]
TYPE_MAP = {
    "u64_": "u64", "u32_": "u32", "u8_": "u8", "uint64_t": "u64", "uint32_t": "u32",
    "uint8_t": "u8", "size_t": "usize", "nvidia_p2p_page_size_type": "u32",
    "kffi::c_ulonglong": "u64", "kffi::c_uint": "u32", "kffi::c_uchar": "u8",
    "kffi::c_int": "c_int", "kffi::c_ulong": "c_ulong", "kffi::c_char": "c_char",
    "kffi::c_void": "c_void", "bindings::sg_table": "sg_table", "bindings::device": "device",
    "bindings::pci_dev": "pci_dev", "invalidate_peer_memory": "InvalidateFn",
    "nvidia_p2p_page_table_t": "nvidia_p2p_page_table", "nvidia_p2p_dma_mapping_t": "nvidia_p2p_dma_mapping",
    "PEER_NAME_MAX": "64", "PEER_VER_MAX": "16", "IB_PEER_MEMORY_NAME_MAX": "64",
    "IB_PEER_MEMORY_VER_MAX": "16",
}
for ours, c in STRUCTS.items():
    TYPE_MAP[ours] = c
TYPE_MAP["NvidiaP2pPageTable"] = "nvidia_p2p_page_table"


def strip_comments(s):
    s = re.sub(r"//[^\n]*", "", s)
    return re.sub(r"#\[[^\]]*\]", "", s)


def norm(t, aliases):
    for _ in range(3):
        t = re.sub(r"\s*::\s*", "::", t)
        t = t.replace("::core::option::Option", "Option").replace("::core::ffi::", "kffi::")
        t = re.sub(r"\b(\d+)usize\b", r"\1", t)
        t = re.sub(r"\b[a-z_][a-z0-9_]*\s*:(?!:)\s*", "", t)  # parameter names
        for k, v in sorted(aliases.items(), key=lambda kv: -len(kv[0])):
            t = re.sub(r"(?<![\w:])" + re.escape(k) + r"(?!\w)", v, t)
        for k, v in sorted(TYPE_MAP.items(), key=lambda kv: -len(kv[0])):
            t = re.sub(r"(?<![\w])" + re.escape(k) + r"(?!\w)", v, t)
    t = t.replace("kffi::", "")
    return re.sub(r",([)>\]])", r"\1", re.sub(r"\s+", "", t))


def split_top(s):
    out, depth, cur = [], 0, ""
    prev = ""
    for ch in s:
        if ch in "(<[":
            depth += 1
        elif ch in ")]" or (ch == ">" and prev != "-"):
            depth -= 1
        prev = ch
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [x.strip() for x in out if x.strip()]


def body(src, start):
    depth, i = 0, start
    while i < len(src):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return src[start + 1:i]
        i += 1
    return ""


def parse(src):
    src = strip_comments(src)
    src = re.sub(r"\s*::\s*", "::", src)
    aliases = {}
    for m in re.finditer(r"pub(?:\(crate\))?\s+type\s+(\w+)\s*=\s*([^;]+);", src):
        aliases[m.group(1)] = m.group(2)
    structs = {}
    for m in re.finditer(r"pub(?:\(crate\))?\s+(?:struct|union)\s+(\w+)\s*(?=\{)", src):
        fields = []
        for f in split_top(body(src, m.end())):
            fm = re.match(r"pub(?:\(crate\))?\s+(\w+)\s*:\s*(.+)$", f, re.S)
            if fm:
                fields.append((fm.group(1), fm.group(2)))
        structs[m.group(1)] = fields
    funcs = {}
    for m in re.finditer(r"pub(?:\(crate\))?\s+fn\s+(\w+)\s*\((.*?)\)\s*(->\s*[^;]+)?;", src, re.S):
        params = [re.sub(r"^\w+\s*:\s*", "", p) for p in split_top(m.group(2))]
        funcs[m.group(1)] = (params, (m.group(3) or "->()")[2:].strip())
    return structs, funcs, aliases


def main():
    ours_src, bg_src, layout_out, pt_out = sys.argv[1:5]
    o_structs, o_funcs, o_alias = parse(open(ours_src).read())
    b_structs, b_funcs, b_alias = parse(open(bg_src).read())
    problems = []
    pairs = dict(STRUCTS)
    # v2 page tables (driver 580+) add `flags`; compare with the matching declaration.
    has_flags = any(n == "flags" for n, _ in b_structs.get("nvidia_p2p_page_table", []))
    pt_name = "NvidiaP2pPageTableV2" if has_flags else "NvidiaP2pPageTable"
    with open(pt_out, "w") as fo:
        fo.write(pt_name + "\n")
    pairs[pt_name] = "nvidia_p2p_page_table"
    for ours, c in pairs.items():
        of, bf = o_structs.get(ours), b_structs.get(c)
        if of is None or bf is None:
            problems.append(f"struct {ours} / {c}: missing on {'our' if of is None else 'bindgen'} side")
            continue
        if ours == "NvidiaP2pPageTableV2":  # base + flags
            of = o_structs["NvidiaP2pPageTable"] + [f for f in of if f[0] != "base"]
            o_structs[ours] = of
        on = [f[0] for f in of]
        bn = [f[0] for f in bf]
        if on != bn:
            problems.append(f"struct {c}: fields {bn} in the header, {on} in src/ffi.rs")
            continue
        for (name, ot), (_, bt) in zip(of, bf):
            if (ours, name) in SIZE_ONLY:
                continue
            a, b = norm(ot, o_alias), norm(bt, b_alias)
            if a != b:
                problems.append(f"struct {c}.{name}: header type {b}, src/ffi.rs type {a}")
    for f in FUNCS:
        if f not in o_funcs or f not in b_funcs:
            problems.append(f"function {f}: missing on {'our' if f not in o_funcs else 'bindgen'} side")
            continue
        (op, orr), (bp, br) = o_funcs[f], b_funcs[f]
        a = [norm(x, o_alias) for x in op] + ["->" + norm(orr, o_alias)]
        b = [norm(x, b_alias) for x in bp] + ["->" + norm(br, b_alias)]
        if a != b:
            problems.append(f"function {f}: header ({', '.join(b)}), src/ffi.rs ({', '.join(a)})")
    # Layout program: sizes and offsets of both sides.
    lines = []
    for ours, c in pairs.items():
        lines.append(f'    cmp("sizeof {c}", size_of::<ffi::{ours}>(), size_of::<bg::{c}>());')
        for name, _ in b_structs.get(c, []):
            if any(n == name for n, _ in o_structs.get(ours, [])):
                path = f"base.{name}" if ours == "NvidiaP2pPageTableV2" and name != "flags" else name
                lines.append(f'    cmp("offsetof {c}.{name}", offset_of!(ffi::{ours}, {path}), offset_of!(bg::{c}, {name}));')
    with open(layout_out, "w") as fo:
        fo.write("{\n" + "\n".join(lines) + "\n}\n")
    for p in problems:
        print("ffi-check: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
