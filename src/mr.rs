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
//! structures, for filling the SG table and across `nvidia_p2p_dma_unmap_pages` (which does not
//! take NVIDIA's lock); nothing is allocated under it. It is never held across `get_pages*`,
//! `put_pages*`, `dma_map_pages` or the core's invalidate. The free callback takes it before
//! returning to NVIDIA, so an unmap running on another thread finishes before NVIDIA frees the
//! page table. Every NVIDIA call on a handle is an `unsafe` block here whose `// SAFETY:` comment
//! rests on [`Inner`]'s invariant.
//!
//! Every operation here (pin, map, unmap, release, the free callback) reads or changes [`Inner`]
//! under its lock, and each `// SAFETY:` comment rests on the one invariant stated on that type.
//! The registry of live registrations, by ticket, is `registry.rs`.

use crate::ffi;
use crate::invalidate;
use crate::logic::range::{self, Cover, Trim};
use crate::logic::sgl;
use crate::logic::state::{step, Action, Event, Refusal, State};
use crate::modref::ModuleRef;
use crate::overtaken::{self, Overtaken};
use crate::p2p::{self, DmaMapping, FreeCallback, PageTable, PciDev};
use crate::registry::{self, Node};
use crate::sg::{CoreSgt, SgRecord};
use crate::stats::STATS;
use kernel::ffi::c_int;
use kernel::fmt;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::rbtree::RBTreeNode;
use kernel::sync::{Arc, Mutex, MutexGuard};
use kernel::task::Pid;

/// A registration.
#[pin_data(PinnedDrop)]
pub(crate) struct Mr {
    /// Ticket: registry key and NVIDIA's callback data.
    ticket: u64,
    /// Pinned with the persistent API (no callback) or not.
    persistent: bool,
    /// Thread group that pinned (NVIDIA looks non-persistent pins up by the caller's process).
    owner: Pid,
    /// Lock `L` of the lock order (docs/design.md, "Locking"): taken under the core's locks (`G`,
    /// `M`) and NVIDIA's (`R`, in the free callback), before the registry's `T`; never held
    /// across `get_pages*`, `put_pages*`, `dma_map_pages` or the core's invalidate (H3), nor for
    /// an allocation.
    #[pin]
    inner: Mutex<Inner>,
    _module: ModuleRef,
}

/// The part of a registration its lock protects.
///
/// # Invariants
///
/// `page_table` is `Some` only while NVIDIA holds the pin it names and has not freed it: it is
/// stored after `get_pages*` returned, in a state that holds the pin, and taken out before
/// `put_pages*` and by the free callback before that returns (NVIDIA frees a non-persistent
/// table only after its callback returned, and the callback needs this lock first). The same
/// holds for `mapping`, made from that table for `dma_device`. So while the lock is held, the
/// handles in here are live. `overtaken` is `Some` only in state `Revoked`, from the callback
/// that found a put or map in flight until that call's caller, once the call returned, takes it.
struct Inner {
    state: State,
    cover: Cover,
    /// The user range in `cover`: acquire's, or get_pages' when it asked for another cover.
    trim: Trim,
    page_table: Option<PageTable>,
    mapping: Option<DmaMapping>,
    dma_device: Option<PciDev>,
    sg: Option<SgRecord>,
    /// The core's id for invalidation (invalidating client, after get_pages).
    core_context: Option<u64>,
    /// `cover.len()` is counted in `pinned_bytes` (set with the pin, cleared when it is gone).
    counted: bool,
    /// The core has not released the registration yet.
    core_live: bool,
    /// A free callback overtook this registration's put or map, which has not returned yet
    /// (counted in [`crate::overtaken`] while `Some`).
    overtaken: Option<Overtaken>,
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

    /// Whether nothing keeps this registration listed any more: the core released it and NVIDIA
    /// holds no pin. Once true it stays true; unlisting twice is harmless (a ticket is never
    /// reused, so a second removal finds nothing).
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
/// registration is offered to acquire first), nvpeer's own refusals and a fatal signal that ended
/// the wait before the pin (`ERESTARTSYS`, src/overtaken.rs) stay quiet.
fn log_pin_refused(e: Error, len: u64, persistent: bool) {
    let call = if persistent {
        "nvidia_p2p_get_pages_persistent"
    } else {
        "nvidia_p2p_get_pages"
    };
    let cause = if e == ENOMEM {
        "out of BAR1 space or memory: 'nvidia-smi -q -d MEMORY' shows BAR1 use, 'nvpeer doctor' \
         nvpeer's pinned bytes against it; deregister MRs, or enable a larger BAR1 (resizable BAR)"
    } else if e == ENOTSUPP {
        "not supported for this GPU or memory (ENOTSUPP): vGPU, confidential computing, MIG on \
         drivers before 560 with persistent_api_support=1, or no P2P path between the GPU and the \
         NIC; 'nvpeer doctor' names it; dma-buf (ibv_reg_dmabuf_mr) may still work"
    } else if e == EINVAL || e == EFAULT || e == ERESTARTSYS {
        return;
    } else {
        "unexpected error from the NVIDIA driver; see its messages above"
    };
    if ffi::ratelimit() {
        pr_warn!(
            "{} refused to pin {} bytes ({:?}): {}\n",
            call,
            len,
            e,
            cause
        );
    }
}

/// Counts an event the state machine refused (`err_revoked` or `err_order`).
fn count_refusal(r: Refusal) {
    match r {
        Refusal::Gone => STATS.err_revoked.inc(),
        Refusal::Order | Refusal::Stale => STATS.err_order.inc(),
    }
}

/// Counts a refused event and converts it into the error the core gets.
fn refused(r: Refusal) -> Error {
    count_refusal(r);
    match r {
        Refusal::Gone => EFAULT,
        Refusal::Order | Refusal::Stale => EINVAL,
    }
}

impl Mr {
    /// acquire: pin `[addr, addr + size)` (64 KiB cover) once. `None`: not GPU memory we can
    /// pin; the core tries the next client. The pin is carried into get_pages (hazard H7: no
    /// probe).
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

    /// A fresh registration, listed under its ticket.
    fn new(cover: Cover, trim: Trim, persistent: bool) -> Option<Arc<Mr>> {
        let module = ModuleRef::get()?;
        let mr = Arc::pin_init(
            pin_init!(Mr {
                ticket: registry::ticket(),
                persistent,
                owner: current_tgid(),
                inner <- kernel::new_mutex!(Inner {
                    state: State::Idle,
                    cover,
                    trim,
                    page_table: None,
                    mapping: None,
                    dma_device: None,
                    sg: None,
                    core_context: None,
                    counted: false,
                    core_live: true,
                    overtaken: None,
                }),
                _module: module,
            }),
            GFP_KERNEL,
        );
        let Ok(mr) = mr else {
            STATS.err_nomem.inc();
            return None;
        };
        STATS.live_mrs.inc();
        // Listed before pinning: NVIDIA may call back as soon as it registered the callback,
        // before `get_pages` even returns. The node is allocated before the registry lock.
        let Ok(node): Result<Node<Mr>> = RBTreeNode::new(mr.ticket, mr.clone(), GFP_KERNEL) else {
            STATS.err_nomem.inc();
            return None;
        };
        registry::list(node)?;
        Some(mr)
    }

    /// Pins `cover` (state Idle -> Pinned) and checks the page table.
    fn pin(&self, cover: Cover, trim: Trim) -> Result {
        // Not while a put or map a callback overtook may still release or map whatever pin gets
        // its freed table's memory (the put window and H4, docs/design.md).
        overtaken::wait_before_pin()?;
        let pinned = if self.persistent {
            p2p::get_pages_persistent(cover.start(), cover.len())
        } else {
            // No put of ours is in flight while NVIDIA allocates this pin's table (the put
            // window, src/overtaken.rs).
            overtaken::gated(|| p2p::get_pages::<Mr>(cover.start(), cover.len(), self.ticket))
        };
        let page_table = pinned.inspect_err(|_| STATS.err_pin.inc())?;
        let mut inner = self.inner.lock();
        match step(inner.state, Event::PinDone) {
            Ok((next, _)) => inner.state = next,
            // The callback already ran: NVIDIA dropped the pin (and frees the table); nothing
            // to put. It was this pin's callback: a registration pins only while no earlier pin
            // of it can call back (a fresh one, or a re-pin after the old pin's put returned).
            Err(r) => return Err(refused(r)),
        }
        inner.cover = cover;
        inner.trim = trim;
        inner.counted = true;
        STATS.pinned_bytes.add(cover.len());
        STATS.pinned_bytes_total.add(cover.len());
        // INVARIANT: get_pages* returned the table and the state holds its pin; a free callback
        // would have found this lock held and turned the state into `Revoked` first.
        let page_table = inner.page_table.insert(page_table);
        // SAFETY: under the lock, a table in the registration is live (`Inner`'s invariant).
        let info = unsafe { page_table.info() };
        let bad = if info.abi.is_none() {
            STATS.err_page_table_version.inc();
            err_once!(
                "NVIDIA page table version {:#010x} is not supported (known: 0x0001xxxx >= \
                 0x00010002, 0x0002xxxx); update nvpeer\n",
                info.version
            );
            true
        } else if info.page_size != ffi::NVIDIA_P2P_PAGE_SIZE_64KB {
            STATS.err_page_size.inc();
            err_once!(
                "NVIDIA page table with page size type {} (only 64 KiB is supported)\n",
                info.page_size
            );
            true
        } else if u64::from(info.entries) != cover.pages() {
            STATS.err_entries.inc();
            true
        } else {
            false
        };
        drop(inner);
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
    fn unpin_locked<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        repin: bool,
    ) -> MutexGuard<'a, Inner> {
        let before = inner.state;
        // Only a pin can be foreign; the process is looked up only then.
        let foreign = !self.persistent && before.holds_pin() && current_tgid() != self.owner;
        let (next, action) = match step(before, Event::Unpin { foreign }) {
            Ok(x) => x,
            Err(r) => {
                // The caller has no error to return.
                count_refusal(r);
                return inner;
            }
        };
        inner.state = next;
        if matches!(action, Action::Unmap | Action::UnmapThenPut) {
            Self::unmap_locked(&mut inner);
        }
        // Counted once per pin: release() after put_pages finds it already orphaned.
        if next == State::Orphaned && before != State::Orphaned {
            STATS.orphaned_pins.inc();
            warn_once!(
                "pin released from process {} but taken by {}; left to NVIDIA's free callback \
                 (see docs/design.md, H5)\n",
                current_tgid(),
                self.owner
            );
        }
        if !matches!(action, Action::Put | Action::UnmapThenPut) {
            return inner;
        }
        // INVARIANT: taken out before the put; a callback from now on finds no table.
        let page_table = inner.page_table.take();
        let start = inner.cover.start();
        let len = inner.cover.len();
        drop(inner);
        let mut put_failed = false;
        // A non-persistent pin NVIDIA kept after refusing its put: it still calls back for it.
        let mut kept = None;
        if let Some(page_table) = page_table {
            let put = if self.persistent {
                Self::put_persistent(start, page_table)
            } else {
                overtaken::gated(|| self.put_gated(start, page_table))
            };
            if let Err((e, table)) = put {
                put_failed = true;
                STATS.err_put.inc();
                if self.persistent {
                    // No callback will come for it: NVIDIA keeps it until the memory or the
                    // driver goes; the handle is given up (nothing of ours can end that pin).
                    drop(table);
                    pr_warn!(
                        "nvidia_p2p_put_pages_persistent failed twice ({:?}): NVIDIA keeps the pin \
                         of {} bytes at {:#x}\n",
                        e,
                        len,
                        start
                    );
                } else {
                    pr_warn!(
                        "nvidia_p2p_put_pages failed ({:?}): the pin at {:#x} is left to NVIDIA's \
                         free callback; nvpeer stays loaded until the memory is freed\n",
                        e,
                        start
                    );
                    kept = Some(table);
                }
            }
        }
        // A re-pin may follow only once NVIDIA calls back no more for this pin: its put returned
        // (or its callback ran meanwhile). After a failed put NVIDIA may still hold the pin, and
        // its callback, which carries the same ticket, would revoke the new pin: the
        // registration ends here instead (`Orphaned` or `Released`, in which `core_get_pages`
        // pins nothing).
        let repin = repin && !put_failed;
        let mut inner = self.inner.lock();
        // The put returned: if a callback overtook it, pins may start again.
        drop(inner.overtaken.take());
        let event = if kept.is_some() {
            Event::PutFailed
        } else {
            Event::UnpinDone { repin }
        };
        match step(inner.state, event) {
            Ok((next, _)) => inner.state = next,
            Err(r) => count_refusal(r),
        }
        if inner.state == State::Orphaned {
            // INVARIANT: the put failed, so NVIDIA did not free the table, and its callback has
            // not run (that would have made the state `Revoked` under this lock first): the table
            // is live, NVIDIA still holds its pin (still counted), and the callback takes it out.
            inner.page_table = kept;
        } else {
            inner.pin_gone();
        }
        inner
    }

    /// The persistent put of `page_table`, taken out of the registration under its lock, tried
    /// twice: its only failure before RM is `-ENOMEM` for NVIDIA's stack, and a failed persistent
    /// put leaves the table live (no callback can free it), so a second call is safe.
    fn put_persistent(
        start: u64,
        page_table: PageTable,
    ) -> core::result::Result<(), (Error, PageTable)> {
        // SAFETY: live when taken out under the lock (`Inner`'s invariant) and given up here; a
        // persistent table stays live until a put of it succeeds.
        match unsafe { p2p::put_pages(true, start, page_table) } {
            Ok(()) => Ok(()),
            Err((e, table)) => {
                pr_warn!(
                    "nvidia_p2p_put_pages_persistent failed ({:?}); trying again\n",
                    e
                );
                // SAFETY: as above: the failed put left the table live and ours.
                unsafe { p2p::put_pages(true, start, table) }
            }
        }
    }

    /// The non-persistent put of `page_table`, taken out of the registration under its lock
    /// (state `Unpinning`); call under the gate (src/overtaken.rs).
    fn put_gated(
        &self,
        start: u64,
        page_table: PageTable,
    ) -> core::result::Result<(), (Error, PageTable)> {
        if self.inner.lock().state == State::Revoked {
            // A free callback overtook this put before it took the gate: NVIDIA gave the pin
            // back and frees (or freed) the table. Nothing to put, and nothing to name.
            return Ok(());
        }
        // SAFETY: live when taken out under the lock (`Inner`'s invariant) and given up here. If
        // a free callback runs before NVIDIA takes this put, NVIDIA frees the table and then
        // finds no pin of this process at this address and table: no pin of ours was made
        // meanwhile, as this call holds the gate (the put window, src/overtaken.rs).
        unsafe { p2p::put_pages(false, start, page_table) }
    }

    /// `nvidia_p2p_dma_unmap_pages` under the lock (no NVIDIA lock involved).
    fn unmap_locked(inner: &mut Inner) {
        // INVARIANT: the mapping is given up here (or was never made).
        let mapping = inner.mapping.take();
        let dma_device = inner.dma_device.take();
        if let (Some(mapping), Some(dma_device), Some(page_table)) =
            (mapping, dma_device, inner.page_table.as_ref())
        {
            // SAFETY: under the lock, the table and the mapping in the registration are live
            // (`Inner`'s invariant); we are not in the free callback.
            let unmapped = unsafe { p2p::dma_unmap_pages(&dma_device, page_table, mapping) };
            if let Err(e) = unmapped {
                STATS.err_unmap.inc();
                pr_warn!("nvidia_p2p_dma_unmap_pages failed: {:?}\n", e);
            }
        }
    }

    /// The core is done with this registration (release, or an acquire that returned 0): unlist
    /// it unless NVIDIA still holds the pin (then the callback unlists it). Takes the held lock and
    /// releases it before touching the registry (the registry lock is a leaf).
    fn core_done(&self, mut inner: MutexGuard<'_, Inner>) {
        inner.core_live = false;
        let done = inner.unlistable();
        drop(inner);
        if done {
            registry::unlist(self.ticket);
        }
    }

    /// get_pages: adopt the pin from acquire (or replace it if the core asks for another range).
    pub(crate) fn core_get_pages(&self, addr: u64, size: u64, core_context: u64) -> Result {
        STATS.get_pages_calls.inc();
        let (cover, trim) = range::placed(addr, size).ok_or_else(|| {
            STATS.err_range.inc();
            EINVAL
        })?;
        let mut inner = self.inner.lock();
        if inner.state == State::Pinned && inner.cover != cover {
            STATS.repins.inc();
            let unpinned = self.unpin_locked(inner, true);
            // Pin again only where the new pin would be accepted: `Idle`, the old pin gone for
            // good (its put returned, or its callback ran). Not after its put failed (`Released`)
            // or a foreign caller left it to the callback (`Orphaned`): a callback of the old pin
            // could revoke the new one, which would then be refused without a put and stay live.
            // From `Idle` on, only the new pin's own callback can revoke the registration, and
            // that callback frees the pin: `pin` refuses it with nothing to put.
            if let Err(r) = step(unpinned.state, Event::PinDone) {
                return Err(refused(r));
            }
            drop(unpinned);
            self.pin(cover, trim)?;
            inner = self.inner.lock();
        }
        let (next, _) = step(inner.state, Event::CoreGetPages).map_err(refused)?;
        inner.state = next;
        inner.core_context = (!self.persistent).then_some(core_context);
        Ok(())
    }

    /// dma_map: map every page for the HCA and fill the core's SG table; returns the entry count
    /// (the core's `int`).
    pub(crate) fn core_dma_map(
        &self,
        sgt: &mut CoreSgt<'_>,
        dma_device: Option<PciDev>,
    ) -> Result<c_int> {
        STATS.dma_map_calls.inc();
        let dma_device = dma_device.ok_or_else(|| {
            STATS.err_not_pci.inc();
            err_once!(
                "dma_map for a DMA device that is not a PCI function; GPUDirect RDMA needs a PCI \
                 HCA\n"
            );
            EINVAL
        })?;
        // The SG table first, with no lock held (the free callback waits for our lock while it
        // holds NVIDIA's): nothing that can sleep may run between reading the table's address
        // and NVIDIA's call, which would widen the H4 window. The cover is fixed once get_pages
        // returned; a state that refuses the map below frees the table unused.
        let pages = self.inner.lock().cover.pages();
        let sg = match u32::try_from(pages)
            .map_err(|_| EINVAL)
            .and_then(|n| sgt.alloc(n))
        {
            Ok(sg) => sg,
            Err(e) => {
                STATS.err_nomem.inc();
                return Err(e);
            }
        };
        let table = {
            let mut inner = self.inner.lock();
            let (next, _) = step(inner.state, Event::MapBegin).map_err(refused)?;
            inner.state = next;
            inner.page_table.as_ref().map(PageTable::as_raw)
        };
        let Some(table) = table else {
            drop(sg);
            self.map_failed();
            return Err(EINVAL);
        };
        // SAFETY: NVIDIA's lock is taken in here, so ours is not held (H3). In state `Mapping`
        // no path of ours puts or frees the table, and the address goes to the call with nothing
        // between: it stays live unless NVIDIA's free callback frees it first (the H4 window,
        // docs/design.md: a non-persistent pin only; the persistent API has no callback).
        let mapped = unsafe { p2p::dma_map_pages(&dma_device, table) };
        let mapping = match mapped {
            Ok(mapping) => mapping,
            Err(e) => {
                STATS.err_dma_map.inc();
                drop(sg);
                self.map_failed();
                return Err(e);
            }
        };
        let mut inner = self.inner.lock();
        // The map returned: if a callback overtook it, pins may start again.
        drop(inner.overtaken.take());
        if inner.state == State::Revoked {
            // The callback ran during the call; NVIDIA frees `mapping` with the table. Do not
            // touch it.
            drop(inner);
            drop(sg);
            return Err(refused(Refusal::Gone));
        }
        // INVARIANT: the callback has not run (state not revoked), so the table and the mapping
        // made from it are live; from here they are given up only under this lock.
        inner.mapping = Some(mapping);
        inner.dma_device = Some(dma_device);
        let filled = match step(inner.state, Event::MapOk) {
            // The count goes back in the core's `int`: one that does not fit fails the map here,
            // undone below, rather than reaching the core truncated.
            Ok((mapped, _)) => Self::fill_sg(&inner, sg)
                .and_then(|rec| Ok((mapped, c_int::try_from(rec.nents())?, rec))),
            Err(r) => Err(refused(r)),
        };
        match filled {
            Ok((mapped, n, rec)) => {
                inner.state = mapped;
                inner.sg = Some(rec);
                STATS.registrations.inc();
                Ok(n)
            }
            Err(e) => {
                Self::unmap_locked(&mut inner);
                if let Ok((next, _)) = step(inner.state, Event::MapFailed) {
                    inner.state = next;
                }
                Err(e)
            }
        }
    }

    /// A map that failed after `MapBegin` (no call made, or the call returned an error).
    fn map_failed(&self) {
        let mut inner = self.inner.lock();
        // The map returned: if a callback overtook it, pins may start again.
        drop(inner.overtaken.take());
        if let Ok((next, _)) = step(inner.state, Event::MapFailed) {
            inner.state = next;
        }
    }

    /// Checks the mapping in `inner` and fills the SG table allocated for it (no allocation).
    fn fill_sg(inner: &Inner, sg: crate::sg::SgAlloc<'_, '_>) -> Result<SgRecord> {
        let mapping = inner.mapping.as_ref().ok_or(EINVAL)?;
        // SAFETY: under the lock, the mapping in the registration is live (`Inner`'s invariant),
        // for as long as `inner` is borrowed.
        let info = unsafe { mapping.info() };
        let Some(addrs) = info.addresses else {
            STATS.err_dma_mapping_version.inc();
            err_once!(
                "NVIDIA DMA mapping version {:#010x} is not supported (need 0x0002xxxx >= \
                 0x00020003)\n",
                info.version
            );
            return Err(EINVAL);
        };
        let n = u32::try_from(addrs.len()).map_err(|_| EINVAL)?;
        sgl::check_entry_count(&inner.cover, n).map_err(|_| {
            STATS.err_entries.inc();
            EINVAL
        })?;
        for &a in addrs {
            // An entry is the whole GPU page at `a`: only the address needs checking.
            sgl::check_address(a, PAGE_SIZE as u64).map_err(|_| {
                STATS.err_sgl.inc();
                EINVAL
            })?;
        }
        // NVIDIA's own array, checked in place and copied straight into the SG table.
        sg.fill(addrs)
    }

    /// dma_unmap: unmap unless NVIDIA revoked the pages (then NVIDIA unmaps them itself).
    pub(crate) fn core_dma_unmap(&self) {
        STATS.dma_unmap_calls.inc();
        let mut inner = self.inner.lock();
        match step(inner.state, Event::Unmap) {
            Ok((next, action)) => {
                inner.state = next;
                if action == Action::Unmap {
                    Self::unmap_locked(&mut inner);
                }
            }
            Err(r) => count_refusal(r),
        }
    }

    /// Frees the SG table taken out of a registration, if any (outside its lock: it is ours alone).
    fn free_sg(rec: Option<SgRecord>, sgt: Option<&mut CoreSgt<'_>>) {
        if let Some(rec) = rec {
            if !rec.free(sgt) {
                STATS.err_sg_mismatch.inc();
                warn_once!("put_pages got an sg_table other than the one dma_map filled\n");
            }
        }
    }

    /// put_pages: free the SG table and give the pin back.
    pub(crate) fn core_put_pages(&self, sgt: Option<&mut CoreSgt<'_>>) {
        STATS.put_pages_calls.inc();
        let mut inner = self.inner.lock();
        let rec = inner.sg.take();
        drop(self.unpin_locked(inner, false));
        Self::free_sg(rec, sgt);
    }

    /// release: the core is done with this registration (exactly once per successful acquire).
    /// One lock round trip when put_pages already gave the pin back (the usual case).
    pub(crate) fn core_release(this: Arc<Mr>) {
        STATS.release_calls.inc();
        let mut inner = this.inner.lock();
        let rec = inner.sg.take();
        // A pin the core never took over (no get_pages, or get_pages failed).
        let inner = this.unpin_locked(inner, false);
        this.core_done(inner);
        Self::free_sg(rec, None);
    }

    /// One line of `/sys/kernel/debug/nvpeer/mrs` (format: uapi/debugfs.md).
    pub(crate) fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        let (va, size) = inner.trim.user_range(&inner.cover);
        write!(
            f,
            "id={} kind={} state={} va={:#x} size={} start={:#x} len={} pages={} tgid={} core={}",
            self.ticket,
            if self.persistent {
                "persistent"
            } else {
                "invalidating"
            },
            inner.state.name(),
            va,
            size,
            inner.cover.start(),
            inner.cover.len(),
            inner.cover.pages(),
            self.owner,
            if inner.core_live { "live" } else { "released" },
        )?;
        match inner.core_context {
            Some(core_context) => write!(f, " core_context={core_context}")?,
            None => write!(f, " core_context=-")?,
        }
        // SAFETY: under the lock, a table in the registration is live (`Inner`'s invariant).
        match inner.page_table.as_ref().map(|t| unsafe { t.info() }) {
            Some(i) => write!(f, " pt_version={:#010x} pt_flags={:#x}", i.version, i.flags)?,
            None => write!(f, " pt_version=- pt_flags=-")?,
        }
        let sg = inner.sg.as_ref().map_or(0, |rec| rec.nents());
        writeln!(f, " sg_entries={} pinned_bytes={}", sg, inner.pinned())
    }
}

impl FreeCallback for Mr {
    /// NVIDIA's free callback for `ticket` (runs under NVIDIA's lock, may sleep).
    fn on_free(ticket: u64) {
        STATS.callbacks.inc();
        let Some(mr) = registry::find(ticket) else {
            STATS.callbacks_stale.inc();
            return;
        };
        let mut inner = mr.inner.lock();
        let (next, action) = match step(inner.state, Event::Callback) {
            Ok(x) => x,
            Err(_) => {
                STATS.callbacks_stale.inc();
                return;
            }
        };
        inner.state = next;
        if action == Action::NotifyCore {
            let core_context = inner.core_context;
            drop(inner);
            STATS.invalidations.inc();
            // The core stops the HCA's DMA before this returns. Legacy cores call dma_unmap,
            // put_pages (no-ops in state Invalidating) and, on MLNX_OFED 4.x, release from here.
            invalidate::invalidate(core_context);
            inner = mr.inner.lock();
            if let Ok((next, _)) = step(inner.state, Event::CallbackDone) {
                inner.state = next;
            }
        } else {
            if action == Action::Overtaken {
                // Counted before NVIDIA frees the table (when we return); uncounted by the put or
                // map once it returned.
                inner.overtaken = Some(Overtaken::new());
            }
            STATS.callbacks_unmapped.inc();
        }
        // Revoked: NVIDIA frees the table and its mappings when we return.
        // INVARIANT: both handles are given up here, before the callback returns.
        let page_table = inner.page_table.take();
        let mapping = inner.mapping.take();
        inner.dma_device = None;
        inner.pin_gone();
        let unlistable = inner.unlistable();
        drop(inner);
        if let Some(page_table) = page_table {
            // SAFETY: inside NVIDIA's free callback for this pin, before it returns; the mapping
            // was made from this table.
            unsafe { p2p::free_in_callback(page_table, mapping) };
        }
        if unlistable {
            registry::unlist(ticket);
        }
    }
}

#[pinned_drop]
impl PinnedDrop for Mr {
    fn drop(self: Pin<&mut Self>) {
        STATS.live_mrs.sub(1);
    }
}
