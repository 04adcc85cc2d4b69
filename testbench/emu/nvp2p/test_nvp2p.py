#!/usr/bin/env python3
"""Tests of nvp2p_emu.ko through /dev/nvp2p_emu (run as root in the bench guest).

Usage: test_nvp2p.py CASE...   runs the cases in this one process (the bench guest is slow to
                               start Python); prints one line per case:
                               "RESULT <case> pass|fail <seconds> <details>"; exit 1 if any failed
       test_nvp2p.py --list

The ioctl ABI is testbench/emu/include/nvp2p_emu_ioctl.h, mirrored here with ctypes.
"""
import ctypes
import errno
import os
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
libc.ioctl.restype = ctypes.c_int

U64, U32, S32 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32
MAGIC = 0xE7
GPU_PAGE = 0x10000
ENOTSUPP = 524


def _s(name, fields):
    return type(name, (ctypes.Structure,), {"_fields_": fields})


Alloc = _s("Alloc", [("size", U64), ("flags", U32), ("reserved", U32), ("va", U64),
                     ("handle", U64), ("p2p_token", U64), ("va_space", U32), ("pad", U32)])
Free = _s("Free", [("va", U64), ("handle", U64), ("callbacks", U32), ("pad", U32)])
PidOp = _s("PidOp", [("tgid", S32), ("callbacks", U32), ("allocs", U32), ("pad", U32)])
AllocInfo = _s("AllocInfo", [("handle", U64), ("va", U64), ("size", U64), ("tgid", S32),
                             ("flags", U32), ("state", U32), ("pins", U32), ("first_phys", U64)])
PinInfo = _s("PinInfo", [("id", U64), ("alloc_handle", U64), ("va", U64), ("len", U64),
                         ("tgid", S32), ("persistent", U32), ("state", U32), ("mappings", U32)])
List = _s("List", [("kind", U32), ("cap", U32), ("buf", U64), ("count", U32), ("pad", U32)])
Fault = _s("Fault", [("op", U32), ("mode", U32), ("err", S32), ("n", U32), ("skip", U32),
                     ("pad", U32), ("injected", U64)])
Config = _s("Config", [("pt_abi", U32), ("reserved0", U32), ("bar1_budget", U64),
                       ("cb_delay_ns", U64), ("cb_after_delay_ns", U64),
                       ("reg_window_delay_ns", U64), ("get_cost_ns", U64),
                       ("get_page_cost_ns", U64), ("unmap_delay_ns", U64), ("map_cost_ns", U64),
                       ("map_page_cost_ns", U64), ("put_cost_ns", U64),
                       ("put_page_cost_ns", U64)])
Stats = _s("Stats", [("calls", U64 * 16), ("failures", U64 * 16), ("violations", U64 * 32),
                     ("violations_total", U64), ("live_allocs", U64), ("live_pins", U64),
                     ("live_persistent_pins", U64), ("pinned_pages", U64),
                     ("live_mappings", U64), ("callbacks", U64), ("put_after_teardown", U64),
                     ("bar1_used", U64), ("quarantined", U64), ("free_calls_in_callback", U64),
                     ("api_window_hits", U64), ("api_ns", U64), ("model_ns", U64),
                     ("delay_ns", U64), ("reserved", U64 * 1)])
Client = _s("Client", [("op", U32), ("flags", U32), ("handle", U64), ("va", U64), ("len", U64),
                       ("peer_bdf", U32), ("peer_domain", U32), ("ret", S32), ("callbacks", U32),
                       ("pt_version", U32), ("pt_entries", U32), ("pt_page_size", U32),
                       ("pt_flags", U32), ("phys0", U64), ("phys1", U64), ("map_version", U32),
                       ("map_entries", U32), ("dma0", U64), ("dma1", U64), ("state", U32),
                       ("pad", U32)])

SIZES = {Alloc: 48, Free: 24, PidOp: 16, AllocInfo: 48, PinInfo: 48, List: 24, Fault: 32,
         Config: 96, Stats: 640, Client: 112}


def _iowr(nr, st):
    return (3 << 30) | (ctypes.sizeof(st) << 16) | (MAGIC << 8) | nr


def _io(nr):
    return (MAGIC << 8) | nr


IOC_ALLOC, IOC_FREE, IOC_LIST = _iowr(0, Alloc), _iowr(1, Free), _iowr(2, List)
IOC_DESTROY_CONTEXT, IOC_PROCESS_EXIT, IOC_GPU_TEARDOWN = (_iowr(3, PidOp), _iowr(4, PidOp),
                                                          _iowr(5, PidOp))
IOC_SET_FAULT, IOC_GET_CONFIG, IOC_SET_CONFIG = _iowr(6, Fault), _iowr(7, Config), _iowr(8, Config)
IOC_STATS, IOC_RESET, IOC_CLIENT, IOC_CHECK_LEAKS = (_iowr(9, Stats), _io(0x0a),
                                                     _iowr(0x0b, Client), _io(0x0c))

ALLOC_COHERENT, ALLOC_MIG, ALLOC_NO_P2P = 1, 2, 8
OP_GET, OP_GET_P, OP_PUT, OP_PUT_P, OP_MAP, OP_UNMAP = range(6)
FAULT_OFF, FAULT_ONCE, FAULT_EVERY_N = 0, 1, 2
(V_CALL_IN_CB, V_UNMAP_IN_CB, V_FREED_TABLE, V_UNKNOWN_TABLE, V_WRONG_PEER, V_WRONG_PROCESS_PUT,
 V_DOUBLE_PUT, V_LEAKED_PIN, V_STALE_MAPPING) = range(9)
V_PUT_VA_MISMATCH = 13
V_DMA_MAP_UAF, V_PUT_PERSISTENT_ON_NONPERSISTENT, V_DANGLING_OUT_PARAM = 14, 15, 16
V_COUNT = 17
C_PIN, C_MAP, C_UNMAP, C_UNPIN, C_STATUS, C_CLOSE = range(6)
F_PERSISTENT, F_PUT_IN_CB, F_UNMAP_IN_CB, F_NULL_CB, F_NULL_DATA, F_FORCE_BAR1, F_TOKEN, \
    F_WRONG_PEER, F_FREE_IN_CB, F_KEEP_FAILED_PT, F_PUT_PERSISTENT, F_PUT_NONPERSISTENT, \
    F_PUT_WRONG_VA, F_ODD_FLAGS = (1 << i for i in range(14))
S_PINNED, S_MAPPED, S_REVOKED, S_PT_DANGLING = 1, 2, 4, 8
EDU = 0xffffffff


class Fail(Exception):
    pass


NOTES = []


def note(msg):
    NOTES.append(msg)


def check(cond, msg):
    if not cond:
        raise Fail(msg)


OPEN = []   # devices a case left open (closed after each case, so cases stay independent)


class Dev:
    def __init__(self):
        self.fd = os.open("/dev/nvp2p_emu", os.O_RDWR)
        OPEN.append(self)

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def ioctl(self, cmd, arg=None):
        """Returns the ioctl result, or -errno."""
        r = libc.ioctl(self.fd, cmd, ctypes.byref(arg) if arg is not None else None)
        return -ctypes.get_errno() if r < 0 else r

    def must(self, cmd, arg=None):
        r = self.ioctl(cmd, arg)
        if r < 0:
            raise Fail(f"ioctl {cmd:#x} failed: {os.strerror(-r)}")
        return r

    def alloc(self, size, flags=0):
        a = Alloc(size=size, flags=flags)
        self.must(IOC_ALLOC, a)
        return a

    def free(self, va):
        f = Free(va=va)
        self.must(IOC_FREE, f)
        return f.callbacks

    def stats(self):
        s = Stats()
        self.must(IOC_STATS, s)
        return s

    def config(self):
        c = Config()
        self.must(IOC_GET_CONFIG, c)
        return c

    def set_config(self, **kw):
        c = self.config()
        for k, v in kw.items():
            setattr(c, k, v)
        self.must(IOC_SET_CONFIG, c)

    def fault(self, op, mode, err=0, n=1, skip=0):
        f = Fault(op=op, mode=mode, err=err, n=n, skip=skip)
        self.must(IOC_SET_FAULT, f)
        return f

    def client(self, op, handle=0, va=0, length=0, flags=0, peer=EDU):
        c = Client(op=op, handle=handle, va=va, len=length, flags=flags, peer_bdf=peer)
        self.must(IOC_CLIENT, c)
        return c

    def pin(self, va, length, flags=0):
        return self.client(C_PIN, va=va, length=length, flags=flags)

    def listing(self, kind, rec):
        lst = List(kind=kind, cap=0)
        self.must(IOC_LIST, lst)
        n = lst.count
        buf = (rec * max(n, 1))()
        lst = List(kind=kind, cap=n, buf=ctypes.addressof(buf))
        self.must(IOC_LIST, lst)
        return list(buf[:min(n, lst.count)])


def fresh():
    d = Dev()
    d.must(IOC_RESET)
    return d


def violations(d, rule=None):
    s = d.stats()
    return s.violations_total if rule is None else s.violations[rule]


# ---------------------------------------------------------------- cases

def case_abi_sizes():
    for st, size in SIZES.items():
        check(ctypes.sizeof(st) == size, f"{st.__name__}: {ctypes.sizeof(st)} != {size}")
    note("ioctl structure sizes match the header")


def case_alloc_list_free():
    d = fresh()
    a = d.alloc(3 * GPU_PAGE + 100)      # rounded up to 4 GPU pages
    check(a.va % GPU_PAGE == 0, f"va {a.va:#x} not 64 KiB aligned")
    check(a.handle > 0 and a.p2p_token != 0, "no handle/token")
    allocs = d.listing(0, AllocInfo)
    mine = [x for x in allocs if x.handle == a.handle]
    check(len(mine) == 1, f"allocation not listed: {allocs}")
    check(mine[0].size == 4 * GPU_PAGE and mine[0].tgid == os.getpid(), "wrong size/tgid in LIST")
    # The range is real, CPU-accessible memory of this process.
    buf = (ctypes.c_char * 16).from_address(a.va + GPU_PAGE + 8)
    buf.value = b"gpu-page-1"
    check((ctypes.c_char * 16).from_address(a.va + GPU_PAGE + 8).value == b"gpu-page-1",
          "CPU write/read through the mapping failed")
    check(d.stats().live_allocs == 1, "live_allocs != 1")
    check(d.free(a.va) == 0, "callbacks on a free without pins")
    check(d.stats().live_allocs == 0, "allocation still live after FREE")
    check(d.ioctl(IOC_FREE, Free(va=a.va)) == -errno.EINVAL, "double FREE not rejected")
    d.close()
    note(f"alloc at {a.va:#x}, listed, CPU-accessible, freed")


def case_gup_fails():
    """Like cudaMalloc memory: get_user_pages on the range must fail."""
    d = fresh()
    a = d.alloc(2 * GPU_PAGE)
    fd = os.open("/proc/self/mem", os.O_RDONLY)
    try:
        try:
            os.pread(fd, 16, a.va)
            raise Fail("reading the GPU range through /proc/self/mem (GUP) succeeded")
        except OSError as e:
            check(e.errno in (errno.EIO, errno.EFAULT), f"unexpected errno {e.errno}")
    finally:
        os.close(fd)
    d.free(a.va)
    d.close()
    note("GUP on the emulated GPU range fails, as on a real one")


def case_pin_map_unmap_put():
    d = fresh()
    a = d.alloc(4 * GPU_PAGE)
    c = d.pin(a.va, 2 * GPU_PAGE)
    check(c.ret == 0, f"get_pages failed: {c.ret}")
    check(c.pt_version == 0x00020000, f"pt version {c.pt_version:#x}")
    check(c.pt_entries == 2 and c.pt_page_size == 1, "entries/page_size")
    check(c.phys0 and c.phys1 and c.phys1 != c.phys0 + GPU_PAGE,
          f"GPU pages physically contiguous ({c.phys0:#x}, {c.phys1:#x})")
    check(c.phys0 % GPU_PAGE == 0, "physical address not 64 KiB aligned")
    m = d.client(C_MAP, handle=c.handle)
    check(m.ret == 0, f"dma_map_pages failed: {m.ret}")
    check(m.map_version == 0x00020003 and m.map_entries == 2, "mapping version/entries")
    check(m.dma0 != 0 and m.dma1 != 0, "no DMA addresses")
    s = d.stats()
    check(s.live_pins == 1 and s.live_mappings == 1 and s.pinned_pages == 2, "gauges after map")
    check(s.bar1_used == 2 * GPU_PAGE, f"bar1_used {s.bar1_used}")
    pins = d.listing(1, PinInfo)
    check(len(pins) == 1 and pins[0].mappings == 1 and pins[0].tgid == os.getpid(), "pin LIST")
    u = d.client(C_UNMAP, handle=c.handle)
    check(u.ret == 0, f"dma_unmap_pages: {u.ret}")
    p = d.client(C_UNPIN, handle=c.handle)
    check(p.ret == 0 and not (p.state & S_PINNED), f"put_pages: {p.ret} state {p.state}")
    s = d.stats()
    check(s.live_pins == 0 and s.live_mappings == 0 and s.bar1_used == 0, "gauges after put")
    check(s.calls[OP_GET] == 1 and s.calls[OP_MAP] == 1 and s.calls[OP_UNMAP] == 1
          and s.calls[OP_PUT] == 1, "call counters")
    check(s.violations_total == 0, "violations on a correct sequence")
    d.client(C_CLOSE, handle=c.handle)
    d.free(a.va)
    d.close()
    note(f"pin/map/unmap/put ok: phys {c.phys0:#x},{c.phys1:#x} dma {m.dma0:#x},{m.dma1:#x}")


def case_get_pages_validation():
    d = fresh()
    a = d.alloc(4 * GPU_PAGE)
    host = ctypes.create_string_buffer(4 * GPU_PAGE)
    bad = [
        ("misaligned va", dict(va=a.va + 0x1000, length=GPU_PAGE)),
        ("length not 64K multiple", dict(va=a.va, length=GPU_PAGE + 0x1000)),
        ("zero length", dict(va=a.va, length=0)),
        ("NULL callback", dict(va=a.va, length=GPU_PAGE, flags=F_NULL_CB)),
        ("beyond allocation", dict(va=a.va + 2 * GPU_PAGE, length=4 * GPU_PAGE)),
        ("host memory", dict(va=(ctypes.addressof(host) + GPU_PAGE) & ~(GPU_PAGE - 1),
                             length=GPU_PAGE)),
    ]
    for name, kw in bad:
        c = d.pin(**kw)
        check(c.ret == -errno.EINVAL, f"{name}: ret {c.ret}, expected -EINVAL")
        d.client(C_CLOSE, handle=c.handle)
    m = d.pin(a.va, GPU_PAGE, flags=F_PERSISTENT | F_FORCE_BAR1)
    check(m.ret == -ENOTSUPP, f"FORCE_BAR1 on non-coherent: {m.ret}")
    d.client(C_CLOSE, handle=m.handle)
    s = d.stats()
    check(s.live_pins == 0 and s.violations_total == 0, "state after rejected pins")
    check(s.failures[OP_GET] == 6, f"get_pages failures {s.failures[OP_GET]}")
    # NULL data is accepted (nv_p2p_get_pages checks the callback only; RM gets its own data).
    c = d.pin(a.va, GPU_PAGE, flags=F_NULL_DATA)
    check(c.ret == 0, f"NULL data: ret {c.ret}, expected 0 (the real driver accepts it)")
    p = d.client(C_UNPIN, handle=c.handle)
    check(p.ret == 0 and d.stats().live_pins == 0, f"put of the NULL-data pin: {p.ret}")
    d.client(C_CLOSE, handle=c.handle)
    check(d.stats().violations_total == 0, "violations on a NULL-data pin")
    d.free(a.va)
    d.close()
    note("misaligned, NULL callback, out-of-range and host VA -EINVAL; NULL data accepted")


def case_free_runs_callback():
    d = fresh()
    a = d.alloc(2 * GPU_PAGE)
    c = d.pin(a.va, 2 * GPU_PAGE)
    check(c.ret == 0, f"pin {c.ret}")
    check(d.client(C_MAP, handle=c.handle).ret == 0, "map")
    check(d.free(a.va) == 1, "FREE did not run exactly one callback")
    st = d.client(C_STATUS, handle=c.handle)
    check(st.callbacks == 1 and st.state & S_REVOKED and not st.state & S_PINNED,
          f"client state after free: cb {st.callbacks} state {st.state}")
    s = d.stats()
    check(s.live_pins == 0 and s.live_mappings == 0 and s.callbacks == 1, "teardown after callback")
    p = d.client(C_UNPIN, handle=c.handle)   # legal: returns 0, touches nothing
    check(p.ret == 0, f"put after teardown returned {p.ret}")
    s = d.stats()
    check(s.put_after_teardown == 1 and s.violations_total == 0, "put-after-teardown accounting")
    d.client(C_CLOSE, handle=c.handle)
    d.close()
    note("cudaFree ran the callback synchronously, tore down the mapping; later put returned 0")


def case_persistent_outlives_free():
    d = fresh()
    a = d.alloc(2 * GPU_PAGE)
    c = d.pin(a.va, 2 * GPU_PAGE, flags=F_PERSISTENT)
    check(c.ret == 0, f"persistent pin {c.ret}")
    check(d.client(C_MAP, handle=c.handle).ret == 0, "map persistent")
    check(d.free(a.va) == 0, "callback ran for a persistent pin")
    st = d.client(C_STATUS, handle=c.handle)
    check(st.state & S_PINNED and st.pt_entries == 2 and st.map_entries == 2,
          "persistent pin did not outlive cudaFree")
    s = d.stats()
    check(s.live_pins == 1 and s.live_persistent_pins == 1 and s.live_allocs == 0, "gauges")
    check(d.client(C_UNMAP, handle=c.handle).ret == 0, "unmap")
    check(d.client(C_UNPIN, handle=c.handle).ret == 0, "put_pages_persistent")
    s = d.stats()
    check(s.live_pins == 0 and s.violations_total == 0, "after put_persistent")
    d.client(C_CLOSE, handle=c.handle)
    # MIG: supported (the instance's internal third-party object, RmP2PGetPagesPersistent), but
    # never with FORCE_BAR1.
    mig = d.alloc(GPU_PAGE, ALLOC_MIG | ALLOC_COHERENT)
    m = d.pin(mig.va, GPU_PAGE, flags=F_PERSISTENT)
    check(m.ret == 0, f"persistent on MIG: {m.ret}")
    check(d.client(C_UNPIN, handle=m.handle).ret == 0, "put_pages_persistent on MIG")
    d.client(C_CLOSE, handle=m.handle)
    m = d.pin(mig.va, GPU_PAGE, flags=F_PERSISTENT | F_FORCE_BAR1)
    check(m.ret == -ENOTSUPP, f"FORCE_BAR1 persistent on MIG: {m.ret}")
    d.client(C_CLOSE, handle=m.handle)
    check(d.stats().live_pins == 0 and d.stats().violations_total == 0, "after the MIG pins")
    d.free(mig.va)
    d.close()
    note("persistent pin outlived cudaFree until put_pages_persistent; MIG pinned, MIG with "
         "FORCE_BAR1 -> -ENOTSUPP")


def case_pt_abi_and_flags():
    d = fresh()
    a = d.alloc(GPU_PAGE, ALLOC_COHERENT)
    c = d.pin(a.va, GPU_PAGE)
    check(c.pt_version == 0x00020000 and c.pt_flags == 1, f"v2 coherent: {c.pt_version:#x} {c.pt_flags}")
    d.client(C_CLOSE, handle=c.handle)
    d.set_config(pt_abi=1)
    c = d.pin(a.va, GPU_PAGE)
    check(c.ret == 0 and c.pt_version == 0x00010002 and c.pt_flags == 0,
          f"v1: {c.pt_version:#x} flags {c.pt_flags}")
    d.client(C_CLOSE, handle=c.handle)
    check(d.ioctl(IOC_SET_CONFIG, Config(pt_abi=3)) == -errno.EINVAL, "pt_abi=3 accepted")
    d.must(IOC_RESET)
    check(d.config().pt_abi == 2, "reset did not restore pt_abi")
    d.free(a.va)
    d.close()
    note("page table v2 (flags) and v1 (0x00010002) selectable at run time")


def case_bar1_budget():
    d = fresh()
    a = d.alloc(4 * GPU_PAGE)
    d.set_config(bar1_budget=2 * GPU_PAGE)
    c1 = d.pin(a.va, 2 * GPU_PAGE)
    check(c1.ret == 0, f"first pin {c1.ret}")
    c2 = d.pin(a.va + 2 * GPU_PAGE, GPU_PAGE)
    check(c2.ret == -errno.ENOMEM, f"over budget: {c2.ret}")
    d.client(C_CLOSE, handle=c1.handle)
    c3 = d.pin(a.va + 2 * GPU_PAGE, GPU_PAGE)
    check(c3.ret == 0, f"pin after release: {c3.ret}")
    d.client(C_CLOSE, handle=c3.handle)
    d.client(C_CLOSE, handle=c2.handle)
    d.must(IOC_RESET)
    d.free(a.va)
    d.close()
    note("BAR1 budget exhaustion -> -ENOMEM, released on put")


def case_fault_injection():
    d = fresh()
    a = d.alloc(2 * GPU_PAGE)
    d.fault(OP_GET, FAULT_ONCE, -errno.EIO, skip=1)
    c1 = d.pin(a.va, GPU_PAGE)
    c2 = d.pin(a.va, GPU_PAGE)
    c3 = d.pin(a.va, GPU_PAGE)
    check((c1.ret, c2.ret, c3.ret) == (0, -errno.EIO, 0), f"ONCE/skip: {c1.ret},{c2.ret},{c3.ret}")
    d.fault(OP_MAP, FAULT_EVERY_N, -ENOTSUPP, n=2)
    rets = [d.client(C_MAP, handle=h).ret for h in (c1.handle, c3.handle)]
    check(rets == [0, -ENOTSUPP], f"EVERY_N map: {rets}")
    f = d.fault(OP_MAP, FAULT_OFF)
    check(f.injected == 1, f"injected count {f.injected}")
    d.fault(OP_PUT, FAULT_ONCE, -errno.EIO)
    p = d.client(C_UNPIN, handle=c1.handle)
    check(p.ret == -errno.EIO and p.state & S_PINNED, "injected put failure must leave the pin")
    s = d.stats()
    check(s.failures[OP_GET] == 1 and s.failures[OP_MAP] == 1 and s.failures[OP_PUT] == 1,
          "failure counters")
    for h in (c1.handle, c2.handle, c3.handle):
        d.client(C_CLOSE, handle=h)
    check(d.stats().live_pins == 0 and d.stats().violations_total == 0, "cleanup")
    check(d.ioctl(IOC_SET_FAULT, Fault(op=9, mode=1, err=-5)) == -errno.EINVAL, "bad op accepted")
    check(d.ioctl(IOC_SET_FAULT, Fault(op=0, mode=1, err=5)) == -errno.EINVAL, "positive err accepted")
    check(d.ioctl(IOC_SET_FAULT, Fault(op=0, mode=2, err=-5, n=0)) == -errno.EINVAL, "n=0 accepted")
    # Only what the real call can return (nv-p2p.c 595): put -ENOMEM/-EIO, unmap nothing.
    refused = [(OP_PUT, -errno.EINVAL), (OP_PUT, -errno.EBUSY), (OP_GET, -errno.EFAULT),
               (OP_MAP, -errno.ENODEV), (OP_UNMAP, -errno.EIO), (OP_UNMAP, -errno.EINVAL)]
    for op, err in refused:
        check(d.ioctl(IOC_SET_FAULT, Fault(op=op, mode=1, err=err)) == -errno.EINVAL,
              f"fault {err} on op {op} accepted: the real call never returns it")
    for op, err in ((OP_PUT, -errno.ENOMEM), (OP_GET, -errno.ENODEV), (OP_GET, -errno.EBUSY),
                    (OP_MAP, -errno.EINVAL)):
        d.fault(op, FAULT_ONCE, err)
        d.fault(op, FAULT_OFF)
    d.free(a.va)
    d.close()
    note("once/skip and every-N faults injected on get_pages, dma_map, put_pages; errnos the real "
         "calls never return refused")


def case_put_blocks_behind_callback():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    b = d.alloc(GPU_PAGE)
    ca = d.pin(a.va, GPU_PAGE)
    cb = d.pin(b.va, GPU_PAGE)
    check(ca.ret == 0 and cb.ret == 0, "pins")
    d.set_config(cb_delay_ns=1_500_000_000)
    t = threading.Thread(target=lambda: d.free(a.va))
    t.start()
    time.sleep(0.4)
    start = time.monotonic()
    p = d.client(C_UNPIN, handle=cb.handle)
    waited = time.monotonic() - start
    t.join()
    check(p.ret == 0, f"put {p.ret}")
    check(waited > 0.6, f"put_pages did not wait for the running callback ({waited:.2f} s)")
    d.must(IOC_RESET)
    for h in (ca.handle, cb.handle):
        d.client(C_CLOSE, handle=h)
    d.free(b.va)
    check(d.stats().violations_total == 0, "violations")
    d.close()
    note(f"put_pages blocked {waited:.2f} s behind an in-flight free callback (RM lock)")


def case_free_in_registration_window():
    """cudaFree between pinning and callback registration makes get_pages fail."""
    d = fresh()
    a = d.alloc(GPU_PAGE)
    d.set_config(reg_window_delay_ns=1_200_000_000)
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("pin", d.pin(a.va, GPU_PAGE)))
    t.start()
    time.sleep(0.4)
    cbs = d.free(a.va)
    t.join()
    c = res["pin"]
    check(cbs == 0, f"free in the window ran {cbs} callbacks")
    check(c.ret == -errno.EINVAL, f"get_pages after a free in the window returned {c.ret}")
    s = d.stats()
    check(s.live_pins == 0 and s.bar1_used == 0 and s.violations_total == 0, "state after window race")
    d.must(IOC_RESET)
    d.close()
    note("free during the registration window: get_pages -EINVAL, no callback, nothing leaked")


def case_rm_cost_model():
    """Each RM call spends its own modelled cost: per call plus per 64 KiB page."""
    d = fresh()
    a = d.alloc(4 * GPU_PAGE)
    ms = 1_000_000
    # Distinct totals, so that a call spending another call's cost, or skipping its per-call
    # or per-page part, is caught: get 0.2 s (per call only), map 0.6 s (per page only),
    # put 0.4 s (both), unmap nothing.
    d.set_config(get_cost_ns=200 * ms, get_page_cost_ns=0, map_cost_ns=0,
                 map_page_cost_ns=150 * ms, put_cost_ns=200 * ms, put_page_cost_ns=50 * ms)

    def timed(f):
        start = time.monotonic()
        r = f()
        return r, time.monotonic() - start
    st_before = d.stats()
    api_before = st_before.api_ns
    c, t_get = timed(lambda: d.pin(a.va, 4 * GPU_PAGE))
    check(c.ret == 0, f"pin {c.ret}")
    m, t_map = timed(lambda: d.client(C_MAP, handle=c.handle))
    check(m.ret == 0, f"map {m.ret}")
    u, t_unmap = timed(lambda: d.client(C_UNMAP, handle=c.handle))
    check(u.ret == 0, f"unmap {u.ret}")
    p, t_put = timed(lambda: d.client(C_UNPIN, handle=c.handle))
    check(p.ret == 0, f"put {p.ret}")
    # Lower bounds are the model; the upper bounds (model + 0.35 s of slack for the TCG guest)
    # only tell the calls' costs apart.
    for name, took, model in (("get_pages", t_get, 0.2), ("dma_map_pages", t_map, 0.6),
                              ("dma_unmap_pages", t_unmap, 0.0), ("put_pages", t_put, 0.4)):
        check(model <= took < model + 0.35, f"{name} of 4 pages took {took:.3f} s, modelled {model} s")
    # The provider's own account of the time inside its entry points covers the four calls.
    api_s = (d.stats().api_ns - api_before) / 1e9
    check(1.2 <= api_s <= t_get + t_map + t_unmap + t_put,
          f"api_ns grew by {api_s:.3f} s; modelled 1.2 s, measured around the calls "
          f"{t_get + t_map + t_unmap + t_put:.3f} s")
    # The model's waits are exact: model_ns grew by the modelled 1.2 s to the nanosecond, and
    # the waits overshot it by no more than 50 ms over the three calls (a wait ends at a ktime
    # deadline; only a reschedule right before it can overshoot).
    st = d.stats()
    model_ns = st.model_ns - st_before.model_ns
    over_ns = (st.delay_ns - st_before.delay_ns) - model_ns
    check(model_ns == 1_200_000_000, f"model_ns grew by {model_ns} ns, modelled 1.2 s")
    check(0 <= over_ns <= 50 * ms, f"the model's waits overshot it by {over_ns} ns")
    # Out of range: a per-page or per-call cost above 60 s.
    cfg = d.config()
    for bad in (dict(get_page_cost_ns=61_000 * ms), dict(put_cost_ns=61_000 * ms)):
        for k, v in bad.items():
            setattr(cfg, k, v)
        check(d.ioctl(IOC_SET_CONFIG, cfg) == -errno.EINVAL, f"config {bad} accepted")
        cfg = d.config()
    d.must(IOC_RESET)
    d.client(C_CLOSE, handle=c.handle)
    d.free(a.va)
    d.close()
    note(f"modelled RM cost, 4 pages: get {t_get:.2f} s, map {t_map:.2f} s, unmap {t_unmap:.2f} s, "
         f"put {t_put:.2f} s (model 0.2/0.6/0/0.4)")


def _exit_with_order(d, nvidia_first):
    """A child pins through one fd ("RDMA") memory allocated through another ("nvidia"),
    closes them in the given order and exits. Returns the callbacks that ran.
    (At a plain exit the kernel runs the deferred file releases in an order of its own.)"""
    base = d.stats().callbacks
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ga = Dev()        # the "nvidia" fd
            rd = Dev()        # the "RDMA" fd holding the pin
            a = ga.alloc(2 * GPU_PAGE)
            c = rd.pin(a.va, 2 * GPU_PAGE)
            os.write(w, b"1" if c.ret == 0 else b"0")
            # The mapping holds the nvidia file open (vm_file): unmap it so that closing the
            # fd releases it now, as the last reference.
            libc.munmap(ctypes.c_void_p(a.va), ctypes.c_size_t(a.size))
            for dev in ((ga, rd) if nvidia_first else (rd, ga)):
                dev.close()
        finally:
            os._exit(0)
    os.close(w)
    ok = os.read(r, 1)
    os.waitpid(pid, 0)
    os.close(r)
    check(ok == b"1", "child could not pin")
    s = d.stats()
    check(s.live_pins == 0 and s.live_allocs == 0 and s.violations_total == 0,
          f"after exit: pins {s.live_pins} allocs {s.live_allocs} violations {s.violations_total}")
    return s.callbacks - base


def case_process_exit():
    d = fresh()
    n = _exit_with_order(d, nvidia_first=True)
    check(n == 1, f"nvidia fd closed first: {n} callbacks, expected 1")
    n = _exit_with_order(d, nvidia_first=False)
    check(n == 0, f"RDMA fd closed first: {n} callbacks, expected 0 (the client put)")

    # SIMULATE_PROCESS_EXIT of a live process from another one.
    r, w = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            x = Dev()
            a = x.alloc(GPU_PAGE)
            c = x.pin(a.va, GPU_PAGE)
            os.write(w, b"1" if c.ret == 0 else b"0")
            os.read(r2, 1)
            st = x.client(C_STATUS, handle=c.handle)
            os._exit(0 if st.callbacks == 1 and st.state & S_REVOKED else 3)
        finally:
            os._exit(4)
    check(os.read(r, 1) == b"1", "child 2 could not pin")
    op = PidOp(tgid=pid)
    d.must(IOC_PROCESS_EXIT, op)
    check(op.allocs == 1 and op.callbacks == 1, f"PROCESS_EXIT: {op.allocs} allocs {op.callbacks} cbs")
    os.write(w2, b"x")
    _, status = os.waitpid(pid, 0)
    check(os.WEXITSTATUS(status) == 0, f"child saw no callback ({os.WEXITSTATUS(status)})")
    for f in (r, w, r2, w2):
        os.close(f)
    check(d.stats().violations_total == 0, "violations")
    d.close()
    note("nvidia fd closed first: callback; RDMA fd first: put; SIMULATE_PROCESS_EXIT(pid): callback")


def case_gpu_teardown():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    p = d.pin(a.va, GPU_PAGE, flags=F_PERSISTENT)
    op = PidOp()
    d.must(IOC_GPU_TEARDOWN, op)
    check(op.allocs == 1 and op.callbacks == 1, f"teardown {op.allocs}/{op.callbacks}")
    check(d.stats().live_pins == 1, "persistent pin should remain until put")
    d.client(C_CLOSE, handle=p.handle)
    d.client(C_CLOSE, handle=c.handle)
    check(d.stats().live_pins == 0 and d.stats().violations_total == 0, "after close")
    d.close()
    note("GPU teardown revoked callback pins, kept the persistent one until put")


def case_no_p2p_registration():
    d = fresh()
    a = d.alloc(2 * GPU_PAGE, ALLOC_NO_P2P)
    for name, flags in [("get_pages", 0), ("get_pages_persistent", F_PERSISTENT),
                        ("get_pages by token", F_TOKEN)]:
        c = d.pin(a.va, GPU_PAGE, flags=flags)
        check(c.ret == -errno.EINVAL, f"{name} on a range not registered for P2P: {c.ret}")
        d.client(C_CLOSE, handle=c.handle)
    s = d.stats()
    check(s.live_pins == 0 and s.violations_total == 0, "state after the refused pins")
    check(s.failures[OP_GET] == 2 and s.failures[OP_GET_P] == 1,
          f"failures get {s.failures[OP_GET]} persistent {s.failures[OP_GET_P]}")
    d.free(a.va)
    b = d.alloc(GPU_PAGE)
    c = d.pin(b.va, GPU_PAGE)
    check(c.ret == 0, f"an ordinary allocation beside it: {c.ret}")
    d.client(C_CLOSE, handle=c.handle)
    d.free(b.va)
    d.close()
    note("a range never registered for P2P: every get_pages flavour -EINVAL, no pin left")


def case_token_lookup():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE, flags=F_TOKEN)
    check(c.ret == 0, f"token lookup pin: {c.ret}")
    d.client(C_CLOSE, handle=c.handle)
    d.free(a.va)
    d.close()
    note("get_pages with p2p_token/va_space found the allocation")


def case_bad_ioctl_input():
    d = fresh()
    check(d.ioctl(IOC_ALLOC, Alloc(size=0)) == -errno.EINVAL, "size 0")
    check(d.ioctl(IOC_ALLOC, Alloc(size=GPU_PAGE, flags=0x80)) == -errno.EINVAL, "bad flags")
    check(d.ioctl(IOC_ALLOC, Alloc(size=GPU_PAGE, reserved=1)) == -errno.EINVAL, "reserved")
    check(d.ioctl(IOC_ALLOC, Alloc(size=1 << 50)) == -errno.ENOMEM, "huge size")
    check(d.ioctl(IOC_FREE, Free()) == -errno.EINVAL, "free nothing")
    check(d.ioctl(IOC_LIST, List(kind=7)) == -errno.EINVAL, "list kind")
    check(d.ioctl(IOC_LIST, List(kind=0, cap=1 << 20, buf=8)) == -errno.EINVAL, "list cap")
    check(d.ioctl(IOC_CLIENT, Client(op=99)) == -errno.EINVAL, "client op")
    check(d.ioctl(IOC_CLIENT, Client(op=C_MAP, handle=12345)) == -errno.ENOENT, "client handle")
    check(d.ioctl(IOC_PROCESS_EXIT, PidOp(tgid=-1)) == -errno.EINVAL, "negative pid")
    check(d.ioctl(_io(0x7f)) == -errno.ENOTTY, "unknown ioctl")
    check(d.ioctl(IOC_STATS, None) == -errno.EFAULT, "NULL arg")
    import mmap
    try:
        mmap.mmap(d.fd, GPU_PAGE)
        raise Fail("plain mmap of the device succeeded")
    except OSError as e:
        check(e.errno == errno.EINVAL, f"plain mmap errno {e.errno}")
    check(d.stats().live_allocs == 0, "something leaked")
    d.close()
    note("bad ioctl input rejected with clear errnos")


# ---- strictness: each provokes one violation on purpose

def _expect_violation(d, rule, before):
    s = d.stats()
    check(s.violations[rule] == before[rule] + 1,
          f"violation {rule} count {s.violations[rule]} (before {before[rule]})")
    check(s.violations_total == sum(before) + 1, f"other violations: {list(s.violations)[:V_COUNT]}")


def _vlog_has(*needles):
    """The debugfs violation log names every one of needles."""
    txt = open("/sys/kernel/debug/nvp2p_emu/violations").read()
    check(all(n in txt for n in needles), f"debugfs violations lack {needles}: {txt[-400:]}")


def case_violation_put_in_callback():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE, flags=F_PUT_IN_CB)
    before = list(d.stats().violations)
    check(d.free(a.va) == 1, "callback")
    _expect_violation(d, V_CALL_IN_CB, before)
    check(d.stats().live_pins == 0, "pin not torn down")
    # As the real driver (the RM lock is already held by the callback's thread): -EIO.
    st = d.client(C_STATUS, handle=c.handle)
    check(st.ret == -errno.EIO, f"put_pages inside the callback returned {st.ret}, expected -EIO")
    d.client(C_CLOSE, handle=c.handle)
    d.close()
    note("put_pages inside the free callback: -EIO as in the real driver, recorded")


def case_unmap_in_callback_legal():
    """dma_unmap_pages inside the free callback is legal (nv-p2p.c: no RM lock, the container
    lives until the callback returns): nothing recorded."""
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE, flags=F_UNMAP_IN_CB)
    check(d.client(C_MAP, handle=c.handle).ret == 0, "map")
    check(d.free(a.va) == 1, "FREE did not run the callback")
    s = d.stats()
    check(s.violations_total == 0, f"violations {list(s.violations)[:V_COUNT]}")
    # It takes no RM lock: it works inside the callback, as in the real driver.
    st = d.client(C_STATUS, handle=c.handle)
    check(st.ret == 0, f"dma_unmap_pages inside the callback returned {st.ret}, expected 0")
    d.client(C_CLOSE, handle=c.handle)
    check(d.stats().live_mappings == 0, "mapping leaked")
    d.close()
    note("dma_unmap_pages inside the free callback: works (0), nothing recorded")


def case_put_on_persistent_table():
    """put_pages on a persistent table: RM finds no pin of the process, so 0 and the pin stays."""
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE, flags=F_PERSISTENT)
    check(c.ret == 0, f"persistent pin {c.ret}")
    p = d.client(C_UNPIN, handle=c.handle, flags=F_PUT_NONPERSISTENT)
    check(p.ret == 0, f"put_pages on a persistent table returned {p.ret}, expected 0")
    s = d.stats()
    check(p.state & S_PINNED and s.live_pins == 1, "the persistent pin must stay (the real put finds nothing)")
    check(s.violations_total == 0, "violations")
    d.client(C_CLOSE, handle=c.handle)       # the right put
    check(d.stats().live_pins == 0, "pin left after put_pages_persistent")
    d.free(a.va)
    d.close()
    note("put_pages on a persistent table: 0, pin kept (a leak unless put_pages_persistent follows)")


def case_persistent_odd_flags():
    """Flag bits no driver defines are ignored (nv_p2p_get_pages: a u8, bit 0 only), not refused."""
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE, flags=F_PERSISTENT | F_ODD_FLAGS)
    check(c.ret == 0, f"persistent pin with flags 0x1fe returned {c.ret}, expected 0")
    # Not taken for FORCE_BAR1 (whose tables dma_map refuses with -ENOTSUPP).
    check(d.client(C_MAP, handle=c.handle).ret == 0, "map of the pin with odd flags")
    d.client(C_CLOSE, handle=c.handle)
    check(d.stats().live_pins == 0 and d.stats().violations_total == 0, "after the pin")
    d.free(a.va)
    d.close()
    note("get_pages_persistent with flags 0x1fe: pinned as with 0 (bits beyond FORCE_BAR1 ignored)")


def case_violation_put_wrong_va():
    """The real put ignores the va: the pin is released; the mismatch is recorded."""
    d = fresh()
    a = d.alloc(2 * GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    check(d.client(C_MAP, handle=c.handle).ret == 0, "map")
    d.client(C_UNMAP, handle=c.handle)
    before = list(d.stats().violations)
    p = d.client(C_UNPIN, handle=c.handle, flags=F_PUT_WRONG_VA)
    check(p.ret == 0, f"put with the wrong va returned {p.ret}")
    _expect_violation(d, V_PUT_VA_MISMATCH, before)
    check(d.stats().live_pins == 0, "the pin must be released, as the real put does")
    _vlog_has("released anyway")
    d.client(C_CLOSE, handle=c.handle)
    check(d.free(a.va) == 0, "no callback may run after the put")
    d.close()
    note("put_pages with another va: pin released (the real put finds it by its table), recorded")


def case_violation_freed_table():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    d.free(a.va)
    before = list(d.stats().violations)
    m = d.client(C_MAP, handle=c.handle)      # dma_map on the torn-down table
    check(m.ret == -errno.EINVAL, f"map on freed table returned {m.ret}")
    _expect_violation(d, V_FREED_TABLE, before)
    d.client(C_CLOSE, handle=c.handle)
    d.close()
    note("dma_map_pages on a freed page table recorded")


def _pin_freed_by_another_thread(d):
    """A client pin whose allocation another thread freed: its callback tore the table down."""
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    t = threading.Thread(target=d.free, args=(a.va,))
    t.start()
    t.join()
    return c


def _late_map_is_a_window_hit(d, c):
    """The map on c's torn-down table: dma-map-uaf (a window hit), never freed-table; c closed."""
    before = d.stats()
    m = d.client(C_MAP, handle=c.handle)
    check(m.ret == -errno.EINVAL, f"map on a table freed by another thread returned {m.ret}")
    check(d.stats().violations[V_FREED_TABLE] == before.violations[V_FREED_TABLE],
          "the late map was judged a freed-table error (by a later table at the same address?)")
    _expect_violation(d, V_DMA_MAP_UAF, list(before.violations))
    check(d.stats().api_window_hits == before.api_window_hits + 1, "api_window_hits not counted")
    d.client(C_CLOSE, handle=c.handle)


def case_violation_dma_map_uaf():
    # A map on a table that a free callback run by another thread tore down: the window of the
    # NVIDIA API that no client of the non-persistent API can close (its check and the call cannot
    # be atomic against the callback). The real driver reads the freed table and writes into its
    # container: recorded as dma-map-uaf, failed with -EINVAL.
    d = fresh()
    c = _pin_freed_by_another_thread(d)
    _late_map_is_a_window_hit(d, c)
    # The same while the map waits for the RM lock: the free's callback holds it (cb_delay), the
    # map has read the live table and waits; the teardown frees the table under it.
    b = d.alloc(GPU_PAGE)
    c = d.pin(b.va, GPU_PAGE)
    d.set_config(cb_delay_ns=1_200_000_000)
    t = threading.Thread(target=d.free, args=(b.va,))
    t.start()
    time.sleep(0.4)
    before = list(d.stats().violations)
    m = d.client(C_MAP, handle=c.handle)
    t.join()
    d.set_config(cb_delay_ns=0)
    check(m.ret == -errno.EINVAL, f"map whose table was freed while it waited returned {m.ret}")
    _expect_violation(d, V_DMA_MAP_UAF, before)
    _vlog_has("waited for the RM lock", "nv_p2p_insert_dma_mapping")
    d.client(C_CLOSE, handle=c.handle)
    check(d.stats().live_mappings == 0, "mapping left")
    d.close()
    note("dma_map_pages on a table freed by another thread's callback, before the call and while it "
         "waited for the RM lock: dma-map-uaf recorded twice, -EINVAL")


def case_dma_map_uaf_after_address_reuse():
    # The H4 window again, with the freed table's address handed to later tables before the late
    # map comes: each of them pinned and put. A stale pointer must still be judged by the table it
    # pointed to (freed by another thread's callback: dma-map-uaf), never by a later table put at
    # the same address (freed-table, a client error). Production kernels reuse a freed slab address
    # at once, so without the emulator keeping the freed table's memory this judged wrongly.
    d = fresh()
    c = _pin_freed_by_another_thread(d)
    for _ in range(32):
        b = d.alloc(GPU_PAGE)
        n = d.pin(b.va, GPU_PAGE)
        check(d.client(C_UNPIN, handle=n.handle).ret == 0, "put of a later table")
        d.client(C_CLOSE, handle=n.handle)
        check(d.free(b.va) == 0, "free of a later allocation")
    _late_map_is_a_window_hit(d, c)
    d.close()
    note("a late map after 32 later tables were pinned and put: still dma-map-uaf, no freed-table")


def case_violation_put_persistent_on_nonpersistent():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    before = list(d.stats().violations)
    p = d.client(C_UNPIN, handle=c.handle, flags=F_PUT_PERSISTENT)
    check(p.ret == -errno.EINVAL, f"put_pages_persistent on a get_pages table returned {p.ret}")
    _expect_violation(d, V_PUT_PERSISTENT_ON_NONPERSISTENT, before)
    check(p.state & S_PINNED and d.stats().live_pins == 1, "the pin must be left as it was")
    _vlog_has("NULL dereference")
    d.client(C_CLOSE, handle=c.handle)       # the right put
    check(d.stats().live_pins == 0, "pin left after the right put")
    d.free(a.va)
    d.close()
    note("put_pages_persistent on a non-persistent table: recorded (NULL dereference in the real "
         "driver), -EINVAL, pin untouched")


def case_failed_pin_out_params():
    """What a failed get_pages leaves in *page_table, per failure point (nv_p2p_get_pages)."""
    d = fresh()
    a = d.alloc(4 * GPU_PAGE)
    mig = d.alloc(GPU_PAGE, ALLOC_MIG | ALLOC_COHERENT)
    host = ctypes.create_string_buffer(4 * GPU_PAGE)
    host_va = (ctypes.addressof(host) + GPU_PAGE) & ~(GPU_PAGE - 1)

    def outcome(**kw):
        c = d.pin(**kw)
        d.client(C_CLOSE, handle=c.handle)
        return c.ret, bool(c.state & S_PT_DANGLING)
    # Before the table is stored: untouched (NULL here).
    for name, kw in (("misaligned va", dict(va=a.va + 0x1000, length=GPU_PAGE)),
                     ("NULL callback", dict(va=a.va, length=GPU_PAGE, flags=F_NULL_CB))):
        ret, dangling = outcome(**kw)
        check(ret == -errno.EINVAL and not dangling, f"{name}: ret {ret}, dangling {dangling}")
    # RM refuses after the table was stored; the error path frees it, the pointer stays.
    d.set_config(bar1_budget=GPU_PAGE)
    for name, kw, err in (("host memory", dict(va=host_va, length=GPU_PAGE), -errno.EINVAL),
                          ("zero length", dict(va=a.va, length=0), -errno.EINVAL),
                          ("BAR1 exhausted", dict(va=a.va, length=2 * GPU_PAGE), -errno.ENOMEM),
                          ("FORCE_BAR1 persistent on MIG", dict(va=mig.va, length=GPU_PAGE,
                                                                flags=F_PERSISTENT | F_FORCE_BAR1),
                           -ENOTSUPP)):
        ret, dangling = outcome(**kw)
        check(ret == err and dangling, f"{name}: ret {ret}, dangling {dangling}")
    d.must(IOC_RESET)
    d.fault(OP_GET, FAULT_ONCE, -errno.EIO)
    ret, dangling = outcome(va=a.va, length=GPU_PAGE)
    check(ret == -errno.EIO and dangling, f"injected RM failure: ret {ret}, dangling {dangling}")
    # Freed between pinning and callback registration: the error path's put stores NULL.
    d.set_config(reg_window_delay_ns=800_000_000)
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("pin", d.pin(a.va, GPU_PAGE)))
    t.start()
    time.sleep(0.3)
    d.free(a.va)
    t.join()
    d.must(IOC_RESET)
    c = res["pin"]
    d.client(C_CLOSE, handle=c.handle)
    check(c.ret == -errno.EINVAL and not c.state & S_PT_DANGLING,
          f"freed in the registration window: ret {c.ret}, state {c.state}")
    s = d.stats()
    check(s.live_pins == 0 and s.violations_total == 0, "state after the failed pins")
    d.free(mig.va)
    d.close()
    note("failed get_pages: untouched before the table is stored (alignment, NULL callback), "
         "dangling after an RM refusal (host memory, length 0, BAR1, MIG, injected), NULL after "
         "a free in the registration window")


def case_violation_dangling_out_param():
    d = fresh()
    host = ctypes.create_string_buffer(4 * GPU_PAGE)
    host_va = (ctypes.addressof(host) + GPU_PAGE) & ~(GPU_PAGE - 1)
    # A client that keeps what the failed get_pages left and passes it back.
    c = d.pin(host_va, GPU_PAGE, flags=F_KEEP_FAILED_PT)
    check(c.ret == -errno.EINVAL and c.state & S_PT_DANGLING,
          f"pin of host memory: ret {c.ret}, state {c.state}")
    before = list(d.stats().violations)
    p = d.client(C_UNPIN, handle=c.handle)
    check(p.ret == 0, f"put_pages on the dangling pointer returned {p.ret}")
    _expect_violation(d, V_DANGLING_OUT_PARAM, before)
    before = list(d.stats().violations)
    m = d.client(C_MAP, handle=c.handle)
    check(m.ret == -errno.EINVAL, f"dma_map_pages on the dangling pointer returned {m.ret}")
    _expect_violation(d, V_DANGLING_OUT_PARAM, before)
    _vlog_has("failed get_pages left behind")
    d.client(C_CLOSE, handle=c.handle)
    check(d.stats().live_pins == 0, "pins left")
    d.close()
    note("the dangling *page_table of a failed get_pages passed back to put_pages and "
         "dma_map_pages: recorded each time")


def case_violation_double_put():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE, flags=F_PERSISTENT)
    check(d.client(C_UNPIN, handle=c.handle).ret == 0, "first put")
    before = list(d.stats().violations)
    p = d.client(C_UNPIN, handle=c.handle)
    check(p.ret == -errno.EINVAL, f"second put_persistent returned {p.ret}")
    _expect_violation(d, V_DOUBLE_PUT, before)
    d.client(C_CLOSE, handle=c.handle)
    d.free(a.va)
    d.close()
    note("second put_pages_persistent recorded")


def case_violation_wrong_peer_and_stale_mapping():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    check(d.client(C_MAP, handle=c.handle).ret == 0, "map")
    before = list(d.stats().violations)
    u = d.client(C_UNMAP, handle=c.handle, flags=F_WRONG_PEER)
    check(u.ret == 0, f"unmap {u.ret}")
    _expect_violation(d, V_WRONG_PEER, before)
    before = list(d.stats().violations)
    u = d.client(C_UNMAP, handle=c.handle)    # the mapping is gone
    _expect_violation(d, V_STALE_MAPPING, before)
    d.client(C_CLOSE, handle=c.handle)
    d.free(a.va)
    d.close()
    note("unmap with the wrong peer and unmap of an unmapped mapping recorded")


def case_violation_wrong_process_put():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    before = list(d.stats().violations)
    pid = os.fork()
    if pid == 0:
        try:
            p = d.client(C_UNPIN, handle=c.handle)
            os._exit(0 if p.ret == 0 else 3)
        finally:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    check(os.WEXITSTATUS(status) == 0, "child put did not return 0")
    _expect_violation(d, V_WRONG_PROCESS_PUT, before)
    check(d.stats().live_pins == 1, "wrong-process put released the pin")
    check(d.free(a.va) == 1, "callback must still fire after a wrong-process put")
    d.client(C_CLOSE, handle=c.handle)
    d.close()
    note("put_pages from a forked child: returned 0, did nothing, recorded; callback still fired")


def case_violation_leak_check():
    d = fresh()
    a = d.alloc(GPU_PAGE)
    c = d.pin(a.va, GPU_PAGE)
    before = list(d.stats().violations)
    check(d.must(IOC_CHECK_LEAKS) == 1, "CHECK_LEAKS count")
    _expect_violation(d, V_LEAKED_PIN, before)
    txt = open("/sys/kernel/debug/nvp2p_emu/violations").read()
    check("leaked-pin" in txt, f"debugfs violations: {txt[:300]}")
    d.client(C_CLOSE, handle=c.handle)
    d.free(a.va)
    d.close()
    note("live pin reported by CHECK_LEAKS and in debugfs")


CASES = {k[5:]: v for k, v in sorted(globals().items()) if k.startswith("case_")}

def run(names):
    failed = 0
    for name in names:
        fn = CASES.get(name.replace("-", "_"))
        start = time.monotonic()
        status = "pass"
        if fn is None:
            status, details = "fail", "no such case"
        else:
            NOTES.clear()
            try:
                fn()
                details = "; ".join(NOTES)
            except Fail as e:
                status, details = "fail", f"FAIL: {e}"
            except Exception as e:  # an unexpected error is a failure of the case
                status, details = "fail", f"ERROR: {type(e).__name__}: {e}"
            finally:
                while OPEN:
                    OPEN.pop().close()
        failed += status == "fail"
        details = details.replace("\n", " ")
        print(f"RESULT {name} {status} {time.monotonic() - start:.3f} {details}", flush=True)
    return failed


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "--list":
        print("\n".join(n.replace("_", "-") for n in CASES))
        sys.exit(0)
    sys.exit(1 if run(sys.argv[1:]) else 0)
