// SPDX-License-Identifier: GPL-2.0

//! One registration: the pin of a GPU range and everything derived from it.
//!
//! Lifetimes (hazard H1): an `Arc<Mr>` is shared by
//! - the core, from acquire to release (the `client_context` is `Arc::into_foreign`);
//! - the registry, while the core's lifetime or NVIDIA's pin lasts (the free callback finds the
//!   registration through its ticket there and takes its own reference for the duration of the
//!   callback, so a `release()` run by the core from inside the invalidation, as MLNX_OFED 4.x
//!   does, cannot free state the callback still uses).
//!
//! Locking (hazards H2, H3): `inner` is held only for state changes, for reading NVIDIA's
//! structures, for SG table work and across `nvidia_p2p_dma_unmap_pages` (which does not take
//! NVIDIA's lock). It is never held across `get_pages*`, `put_pages*`, `dma_map_pages` or the
//! core's invalidate. The free callback takes it before returning to NVIDIA, so an unmap running
//! on another thread finishes before NVIDIA frees the page table.
//!
//! This file contains no `unsafe`.

use crate::client;
use crate::ffi;
use crate::logic::range::{self, Cover, Trim};
use crate::logic::sgl;
use crate::logic::state::{step, Action, Event, Refusal, State};
use crate::logic::version::{self, PAGE_SIZE_64KB};
use crate::modref::ModuleRef;
use crate::p2p::{self, DmaMapping, PageTable, PciDev};
use crate::registry;
use crate::sg::{CoreSgt, SgRecord};
use crate::stats::STATS;
use kernel::fmt;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::{pr_err_once, pr_warn_once};
use kernel::sync::{Arc, Mutex, MutexGuard};
use kernel::task::Pid;

/// A registration.
#[pin_data(PinnedDrop)]
pub(crate) struct Mr {
    /// Ticket: registry key and NVIDIA callback data.
    pub(crate) id: u64,
    /// Pinned with the persistent API (no callback) or not.
    persistent: bool,
    /// Thread group that pinned (NVIDIA looks non-persistent pins up by the caller's process).
    owner: Pid,
    #[pin]
    inner: Mutex<Inner>,
    _module: ModuleRef,
}

/// The mutable part of a registration. Kept small: it is most of the record that every live MR
/// costs (`src/footprint.rs`), so counts are derived rather than stored where they can be.
struct Inner {
    state: State,
    cover: Cover,
    /// The user range in `cover`: acquire's, or get_pages' when it asked for another cover.
    trim: Trim,
    pt: Option<PageTable>,
    dm: Option<DmaMapping>,
    pdev: Option<PciDev>,
    sg: Option<SgRecord>,
    /// The core's id for invalidation; meaningful only when `has_core_context`.
    core_context: u64,
    has_core_context: bool,
    /// `cover.len()` is counted in `pinned_bytes` (set with the pin, cleared when it is gone).
    counted: bool,
    core_live: bool,
}

impl Inner {
    fn pin_gone(&mut self) {
        if self.counted {
            STATS.pinned_bytes.sub(self.cover.len());
            self.counted = false;
        }
    }

    /// Bytes this registration counts in `pinned_bytes`.
    fn pinned(&self) -> u64 {
        if self.counted {
            self.cover.len()
        } else {
            0
        }
    }

    fn core_context(&self) -> Option<u64> {
        self.has_core_context.then_some(self.core_context)
    }

    /// Whether nothing keeps this registration listed any more: the core released it and NVIDIA
    /// holds no pin. Once true it stays true; unlisting twice is harmless (a ticket is never reused,
    /// so a second removal finds nothing).
    fn unlistable(&self) -> bool {
        !self.core_live && !self.state.holds_pin()
    }
}

/// The calling process as NVIDIA keys non-persistent pins: its tgid in the initial PID namespace
/// (the group leader's global pid). Two processes in different containers may share a
/// namespace-local tgid; they never share this one (hazard H5).
fn current_tgid() -> Pid {
    kernel::current!().group_leader().pid()
}

/// Says why NVIDIA refused to pin GPU memory in acquire (rate-limited): the core then declines the
/// registration with an errno that does not name the cause. `EINVAL` (not GPU memory: every host
/// registration is offered to acquire first) and nvpeer's own refusals stay quiet.
fn log_pin_refused(e: Error, len: u64, persistent: bool) {
    let call = if persistent { "nvidia_p2p_get_pages_persistent" } else { "nvidia_p2p_get_pages" };
    let cause = if e == ENOMEM {
        "out of BAR1 space or memory: 'nvidia-smi -q -d MEMORY' shows BAR1 use, 'nvpeer doctor' nvpeer's pinned bytes against it; deregister MRs, or enable a larger BAR1 (resizable BAR)"
    } else if e == ENOTSUPP {
        "not supported for this GPU or memory (ENOTSUPP): vGPU, confidential computing, MIG on drivers before 560 with persistent_api_support=1, or no P2P path between the GPU and the NIC; 'nvpeer doctor' names it; dma-buf (ibv_reg_dmabuf_mr) may still work"
    } else if e == EINVAL || e == EFAULT {
        return;
    } else {
        "unexpected error from the NVIDIA driver; see its messages above"
    };
    if ffi::ratelimit() {
        pr_warn!("{} refused to pin {} bytes ({:?}): {}\n", call, len, e, cause);
    }
}

fn refusal(r: Refusal) -> Error {
    match r {
        Refusal::Gone => {
            STATS.err_gone.inc();
            EFAULT
        }
        Refusal::Order | Refusal::Stale => {
            STATS.err_order.inc();
            EINVAL
        }
    }
}

impl Mr {
    /// acquire: pin `[addr, addr + size)` (64 KiB cover) once. `Ok(None)`: not GPU memory we can
    /// pin; the core tries the next client. The pin is carried into get_pages (hazard H7: no probe).
    pub(crate) fn acquire(addr: u64, size: u64, persistent: bool) -> Option<Arc<Mr>> {
        STATS.acquire_calls.inc();
        let Some((cover, trim)) = range::placed(addr, size) else {
            STATS.err_range.inc();
            STATS.acquire_declined.inc();
            return None;
        };
        let Some(mr) = Self::new(cover, trim, persistent) else {
            STATS.acquire_declined.inc();
            return None;
        };
        if let Err(e) = mr.pin(cover, trim) {
            log_pin_refused(e, cover.len(), persistent);
            mr.core_done(mr.inner.lock());
            STATS.acquire_declined.inc();
            return None;
        }
        STATS.acquire_claimed.inc();
        Some(mr)
    }

    fn new(cover: Cover, trim: Trim, persistent: bool) -> Option<Arc<Mr>> {
        let module = ModuleRef::get()?;
        let mr = Arc::pin_init(
            pin_init!(Mr {
                id: registry::next_ticket(),
                persistent,
                owner: current_tgid(),
                inner <- kernel::new_mutex!(Inner {
                    state: State::Idle,
                    cover,
                    trim,
                    pt: None,
                    dm: None,
                    pdev: None,
                    sg: None,
                    core_context: 0,
                    has_core_context: false,
                    counted: false,
                    core_live: true,
                }),
                _module: module,
            }),
            GFP_KERNEL,
        );
        let mr = match mr {
            Ok(mr) => mr,
            Err(_) => {
                STATS.err_nomem.inc();
                return None;
            }
        };
        STATS.live_mrs.inc();
        // Listed before pinning: NVIDIA may call back as soon as it registered the callback,
        // before `get_pages` even returns.
        if registry::insert(mr.clone()).is_err() {
            STATS.err_nomem.inc();
            return None;
        }
        Some(mr)
    }

    /// Pins `cover` (state Idle -> Pinned) and checks the page table.
    fn pin(&self, cover: Cover, trim: Trim) -> Result {
        let r = if self.persistent {
            p2p::get_pages_persistent(cover.start(), cover.len())
        } else {
            p2p::get_pages(cover.start(), cover.len(), self.id, client::FREE_CALLBACK)
        };
        let pt = r.inspect_err(|_| STATS.err_pin.inc())?;
        let mut g = self.inner.lock();
        match step(g.state, Event::PinDone) {
            Ok((s, _)) => g.state = s,
            // The callback already ran: NVIDIA dropped the pin; nothing to put.
            Err(r) => return Err(refusal(r)),
        }
        g.pt = Some(pt);
        g.cover = cover;
        g.trim = trim;
        g.counted = true;
        STATS.pinned_bytes.add(cover.len());
        STATS.pinned_total.add(cover.len());
        // The callback cannot have freed `pt`: it needs this lock first.
        let info = pt.info();
        let bad = if info.abi.is_none() {
            STATS.err_version.inc();
            pr_err_once!(
                "NVIDIA page table version {:#010x} is not supported (known: 0x0001xxxx >= 0x00010002, 0x0002xxxx); update nvpeer\n",
                info.version
            );
            true
        } else if info.page_size != PAGE_SIZE_64KB {
            STATS.err_page_size.inc();
            pr_err_once!("NVIDIA page table with page size type {} (only 64 KiB is supported)\n", info.page_size);
            true
        } else if u64::from(info.entries) != cover.pages() {
            STATS.err_entries.inc();
            true
        } else {
            false
        };
        drop(g);
        if bad {
            self.unpin(false);
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Gives the pin back (or orphans it to the callback when called from a foreign process).
    fn unpin(&self, repin: bool) {
        drop(self.unpin_locked(self.inner.lock(), repin));
    }

    /// [`Self::unpin`] with the lock already held by the caller; returns it held again (the lock
    /// is dropped around `put_pages`, hazard H3, and retaken after it).
    fn unpin_locked<'a>(&'a self, mut g: MutexGuard<'a, Inner>, repin: bool) -> MutexGuard<'a, Inner> {
        let before = g.state;
        // Only a pin can be foreign; the process is looked up only then.
        let foreign = !self.persistent && before.holds_pin() && current_tgid() != self.owner;
        let (s, a) = match step(before, Event::Unpin { foreign }) {
            Ok(x) => x,
            Err(r) => {
                refusal(r);
                return g;
            }
        };
        g.state = s;
        if matches!(a, Action::Unmap | Action::UnmapThenPut) {
            Self::unmap_locked(&mut g);
        }
        // Counted once per pin: release() after put_pages finds it already orphaned.
        if s == State::Orphaned && before != State::Orphaned {
            STATS.orphaned_pins.inc();
            pr_warn_once!(
                "pin released from process {} but taken by {}; left to NVIDIA's free callback (see docs/design.md, H5)\n",
                current_tgid(),
                self.owner
            );
        }
        if !matches!(a, Action::Put | Action::UnmapThenPut) {
            return g;
        }
        let pt = g.pt.take();
        let start = g.cover.start();
        drop(g);
        if let Some(pt) = pt {
            if let Err(e) = p2p::put_pages(self.persistent, start, pt) {
                STATS.err_put.inc();
                pr_warn!("nvidia_p2p_put_pages{} failed: {:?}\n", if self.persistent { "_persistent" } else { "" }, e);
            }
        }
        let mut g = self.inner.lock();
        match step(g.state, Event::UnpinDone { repin }) {
            Ok((s, _)) => g.state = s,
            Err(r) => {
                refusal(r);
            }
        }
        g.pin_gone();
        g
    }

    /// `nvidia_p2p_dma_unmap_pages` under the lock (no NVIDIA lock involved).
    fn unmap_locked(g: &mut Inner) {
        if let (Some(dm), Some(pdev), Some(pt)) = (g.dm.take(), g.pdev, g.pt) {
            Self::drop_mapping(pdev, pt, dm);
        }
        g.pdev = None;
    }

    /// The core is done with this registration (release, or an acquire that returned 0): unlist it
    /// unless NVIDIA still holds the pin (then the callback unlists it). Takes the held lock and
    /// releases it before touching the registry (the registry lock is a leaf).
    fn core_done(&self, mut g: MutexGuard<'_, Inner>) {
        g.core_live = false;
        let done = g.unlistable();
        drop(g);
        if done {
            registry::remove(self.id);
        }
    }

    /// get_pages: adopt the pin from acquire (or replace it if the core asks for another range).
    pub(crate) fn core_get_pages(&self, addr: u64, size: u64, core_context: u64) -> Result {
        STATS.get_pages_calls.inc();
        let (cover, trim) = range::placed(addr, size).ok_or_else(|| {
            STATS.err_range.inc();
            EINVAL
        })?;
        let mut g = self.inner.lock();
        if g.state == State::Pinned && g.cover != cover {
            drop(g);
            STATS.repins.inc();
            self.unpin(true);
            self.pin(cover, trim)?;
            g = self.inner.lock();
        }
        let (s, _) = step(g.state, Event::CoreGetPages).map_err(refusal)?;
        g.state = s;
        g.core_context = core_context;
        g.has_core_context = !self.persistent;
        Ok(())
    }

    /// dma_map: map every page for the HCA and fill the core's SG table; returns the entry count.
    pub(crate) fn core_dma_map(&self, sgt: &CoreSgt<'_>, pdev: Option<PciDev>) -> Result<u32> {
        STATS.dma_map_calls.inc();
        let pdev = pdev.ok_or_else(|| {
            STATS.err_not_pci.inc();
            pr_err_once!("dma_map for a DMA device that is not a PCI function; GPUDirect RDMA needs a PCI HCA\n");
            EINVAL
        })?;
        let pt = {
            let mut g = self.inner.lock();
            let (s, _) = step(g.state, Event::MapBegin).map_err(refusal)?;
            g.state = s;
            g.pt
        };
        let Some(pt) = pt else {
            self.map_failed();
            return Err(EINVAL);
        };
        // NVIDIA's lock is taken in here: ours is not held (H3).
        let dm = match p2p::dma_map_pages(pdev, pt) {
            Ok(dm) => dm,
            Err(e) => {
                STATS.err_dma_map.inc();
                self.map_failed();
                return Err(e);
            }
        };
        let mut g = self.inner.lock();
        if g.state == State::Revoked {
            // The callback ran during the call; NVIDIA frees `dm` with the table. Do not touch it.
            return Err(refusal(Refusal::Gone));
        }
        let mapped = match step(g.state, Event::MapOk) {
            Ok((s, _)) => s,
            Err(r) => {
                Self::drop_mapping(pdev, pt, dm);
                return Err(refusal(r));
            }
        };
        match Self::build_sg(&g, dm, sgt) {
            Ok(rec) => {
                g.state = mapped;
                let n = rec.nents();
                g.sg = Some(rec);
                g.dm = Some(dm);
                g.pdev = Some(pdev);
                STATS.registrations.inc();
                Ok(n)
            }
            Err(e) => {
                Self::drop_mapping(pdev, pt, dm);
                if let Ok((s, _)) = step(g.state, Event::MapFailed) {
                    g.state = s;
                }
                Err(e)
            }
        }
    }

    fn drop_mapping(pdev: PciDev, pt: PageTable, dm: DmaMapping) {
        if let Err(e) = p2p::dma_unmap_pages(pdev, pt, dm) {
            STATS.err_unmap.inc();
            pr_warn!("nvidia_p2p_dma_unmap_pages failed: {:?}\n", e);
        }
    }

    fn map_failed(&self) {
        let mut g = self.inner.lock();
        if let Ok((s, _)) = step(g.state, Event::MapFailed) {
            g.state = s;
        }
    }

    fn build_sg(g: &Inner, dm: DmaMapping, sgt: &CoreSgt<'_>) -> Result<SgRecord> {
        let (ver, entries) = dm.header();
        if !version::dma_mapping_compatible(ver) {
            STATS.err_dma_version.inc();
            pr_err_once!("NVIDIA DMA mapping version {:#010x} is not supported (need 0x0002xxxx >= 0x00020003)\n", ver);
            return Err(EINVAL);
        }
        let n = sgl::plan(&g.cover, entries).map_err(|_| {
            STATS.err_entries.inc();
            EINVAL
        })?;
        // NVIDIA's own array, checked in place and copied straight into the SG table: no
        // temporary copy (the caller holds the lock that keeps the mapping live).
        let addrs = dm.addresses().ok_or(EINVAL)?;
        if addrs.len() != n as usize {
            STATS.err_entries.inc();
            return Err(EINVAL);
        }
        for &a in addrs {
            // An entry is the whole GPU page at `a`: only the address needs checking.
            sgl::entry(a, PAGE_SIZE as u64).map_err(|_| {
                STATS.err_sgl.inc();
                EINVAL
            })?;
        }
        SgRecord::build(sgt, addrs).inspect_err(|_| STATS.err_nomem.inc())
    }

    /// dma_unmap: unmap unless NVIDIA revoked the pages (then NVIDIA unmaps them itself).
    pub(crate) fn core_dma_unmap(&self) {
        STATS.dma_unmap_calls.inc();
        let mut g = self.inner.lock();
        match step(g.state, Event::Unmap) {
            Ok((s, a)) => {
                g.state = s;
                if a == Action::Unmap {
                    Self::unmap_locked(&mut g);
                }
            }
            Err(r) => {
                refusal(r);
            }
        }
    }

    /// Frees the SG table taken out of a registration, if any (outside its lock: it is ours alone).
    fn free_sg(rec: Option<SgRecord>, sgt: Option<&CoreSgt<'_>>) {
        if let Some(rec) = rec {
            if !rec.free(sgt) {
                STATS.err_sg_mismatch.inc();
                pr_warn_once!("put_pages got an sg_table other than the one dma_map filled\n");
            }
        }
    }

    /// put_pages: free the SG table and give the pin back.
    pub(crate) fn core_put_pages(&self, sgt: Option<&CoreSgt<'_>>) {
        STATS.put_pages_calls.inc();
        let mut g = self.inner.lock();
        let rec = g.sg.take();
        drop(self.unpin_locked(g, false));
        Self::free_sg(rec, sgt);
    }

    /// release: the core is done with this registration (exactly once per successful acquire).
    /// One lock round trip when put_pages already gave the pin back (the usual case).
    pub(crate) fn core_release(this: Arc<Mr>) {
        STATS.release_calls.inc();
        let mut g = this.inner.lock();
        let rec = g.sg.take();
        // A pin the core never took over (no get_pages, or get_pages failed).
        let g = this.unpin_locked(g, false);
        this.core_done(g);
        Self::free_sg(rec, None);
    }

    /// NVIDIA's free callback for ticket `id` (runs under NVIDIA's lock, may sleep).
    pub(crate) fn on_free_callback(id: u64) {
        STATS.callbacks.inc();
        let Some(mr) = registry::lookup(id) else {
            STATS.callbacks_stale.inc();
            return;
        };
        let mut g = mr.inner.lock();
        let (s, a) = match step(g.state, Event::Callback) {
            Ok(x) => x,
            Err(_) => {
                STATS.callbacks_stale.inc();
                return;
            }
        };
        g.state = s;
        if a == Action::NotifyCore {
            let cc = g.core_context();
            drop(g);
            STATS.invalidations.inc();
            // The core stops the HCA's DMA before this returns. Legacy cores call dma_unmap,
            // put_pages (no-ops in state Invalidating) and, on MLNX_OFED 4.x, release from here.
            client::invalidate(cc);
            g = mr.inner.lock();
            if let Ok((s, _)) = step(g.state, Event::CallbackDone) {
                g.state = s;
            }
        } else {
            STATS.callbacks_unmapped.inc();
        }
        // Revoked: NVIDIA frees the table and its mappings when we return.
        let pt = g.pt.take();
        let dm = g.dm.take();
        g.pdev = None;
        g.pin_gone();
        let unlist = g.unlistable();
        drop(g);
        if let Some(pt) = pt {
            p2p::free_in_callback(pt, dm);
        }
        if unlist {
            registry::remove(id);
        }
    }

    /// One line of `/sys/kernel/debug/nvpeer/mrs` (format: uapi/debugfs.md).
    pub(crate) fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.inner.lock();
        let (va, size) = g.trim.user_range(&g.cover);
        write!(
            f,
            "id={} kind={} state={} va={:#x} size={} start={:#x} len={} pages={} tgid={} core={}",
            self.id,
            if self.persistent { "persistent" } else { "invalidating" },
            g.state.name(),
            va,
            size,
            g.cover.start(),
            g.cover.len(),
            g.cover.pages(),
            self.owner,
            if g.core_live { "live" } else { "released" },
        )?;
        match g.core_context() {
            Some(cc) => write!(f, " core_context={cc}")?,
            None => write!(f, " core_context=-")?,
        }
        // Read from the live table (the callback needs this lock before NVIDIA frees it).
        match g.pt.map(|pt| pt.info()) {
            Some(i) => write!(f, " pt_version={:#010x} pt_flags={:#x}", i.version, i.flags)?,
            None => write!(f, " pt_version=- pt_flags=-")?,
        }
        let sg = g.sg.as_ref().map_or(0, |s| s.nents());
        writeln!(f, " sg_entries={} pinned_bytes={}", sg, g.pinned())
    }
}

#[pinned_drop]
impl PinnedDrop for Mr {
    fn drop(self: Pin<&mut Self>) {
        STATS.live_mrs.sub(1);
    }
}
