// SPDX-License-Identifier: GPL-2.0

//! The registry of live registrations, by ticket, for callbacks that may come late.
//!
//! NVIDIA's free callback gets a ticket (a `u64` id, counting up from 1, never reused), not a
//! pointer: a late or repeated callback looks the ticket up and finds either nothing or a
//! registration whose own state says the pin is gone, never freed memory (the scheme AWS EFA
//! uses). One registry lives under a global lock (`T`); `mr.rs` decides when an entry goes.
//! Nothing allocates under that lock, which NVIDIA's free callback also takes: nodes and snapshot
//! buffers are allocated before it.

use crate::mr::Mr;
use kernel::alloc::KVec;
use kernel::prelude::*;
use kernel::rbtree::{RBTree, RBTreeNode};
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::Arc;

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` from module init, before any client is registered.
    unsafe(uninit) static REGISTRY: Mutex<Option<Registry<Mr>>> = None;
}
// Lock `T` of the lock order (docs/design.md, "Locking"): a leaf, taken under a registration's
// `L` or under no lock of ours, never held while taking another lock, calling out or allocating.

/// Tickets for registrations (registry key and NVIDIA's callback data).
static TICKETS: Tickets = Tickets::new();

/// Initialises the registry.
///
/// # Safety
///
/// Called exactly once, from module init, before any client is registered.
pub(crate) unsafe fn init() {
    // SAFETY: called once, before first use (function contract).
    unsafe { REGISTRY.init() };
    *REGISTRY.lock() = Some(Registry::new());
}

/// A fresh ticket.
pub(crate) fn ticket() -> u64 {
    TICKETS.next()
}

/// Lists a registration's node (allocated by the caller, before this takes the lock); `None`
/// when the registry is not initialised.
pub(crate) fn list(node: Node<Mr>) -> Option<()> {
    REGISTRY.lock().as_mut()?.insert(node);
    Some(())
}

/// The registration listed under `ticket`, with a reference of its own.
pub(crate) fn find(ticket: u64) -> Option<Arc<Mr>> {
    REGISTRY.lock().as_ref()?.get(ticket)
}

/// Unlists registration `ticket`; the reference is dropped after the lock is released.
pub(crate) fn unlist(ticket: u64) {
    let old = REGISTRY
        .lock()
        .as_mut()
        .and_then(|registry| registry.remove(ticket));
    drop(old);
}

/// References to every live registration, in ticket order (for the debugfs dump). The buffer is
/// allocated before the lock is taken; a registry that grew meanwhile is read again.
pub(crate) fn snapshot() -> Result<KVec<Arc<Mr>>> {
    let mut out = KVec::new();
    loop {
        let want = REGISTRY.lock().as_ref().map_or(0, Registry::len);
        // Some slack for registrations listed between the two lock rounds.
        out.reserve(want + want / 8 + 16, GFP_KERNEL)?;
        let guard = REGISTRY.lock();
        let Some(registry) = guard.as_ref() else {
            return Ok(out);
        };
        if registry.snapshot_into(&mut out) {
            return Ok(out);
        }
    }
}

/// A registry entry allocated ahead of the lock.
pub(crate) type Node<T> = RBTreeNode<u64, Arc<T>>;

/// Live objects by ticket.
struct Registry<T> {
    tree: RBTree<u64, Arc<T>>,
    len: usize,
}

impl<T> Registry<T> {
    /// An empty registry.
    fn new() -> Self {
        Self {
            tree: RBTree::new(),
            len: 0,
        }
    }

    /// Lists a node made with [`RBTreeNode::new`] (`(ticket, object)`). Tickets are unique, so
    /// nothing is replaced.
    fn insert(&mut self, node: Node<T>) {
        if self.tree.insert(node).is_none() {
            self.len += 1;
        }
    }

    /// The object listed under `ticket`.
    fn get(&self, ticket: u64) -> Option<Arc<T>> {
        self.tree.get(&ticket).cloned()
    }

    /// Unlists `ticket`; the caller drops the reference after releasing the lock.
    fn remove(&mut self, ticket: u64) -> Option<Arc<T>> {
        let old = self.tree.remove(&ticket);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Number of listed objects.
    fn len(&self) -> usize {
        self.len
    }

    /// Appends a reference to every listed object, in ticket order, without allocating. Returns
    /// `false` (with `out` cleared) when `out` has too little spare capacity for all of them.
    fn snapshot_into(&self, out: &mut KVec<Arc<T>>) -> bool {
        for (_, obj) in self.tree.iter() {
            if out.push_within_capacity(obj.clone()).is_err() {
                out.clear();
                return false;
            }
        }
        true
    }
}

/// Ticket source: never 0, never reused (2^64 registrations do not happen).
struct Tickets(Atomic<u64>);

impl Tickets {
    /// Starts at 1.
    const fn new() -> Self {
        Self(Atomic::new(1))
    }

    /// A fresh ticket.
    fn next(&self) -> u64 {
        self.0.fetch_add(1u64, Relaxed)
    }
}
