// SPDX-License-Identifier: GPL-2.0

//! Tickets: the live registrations, by id.
//!
//! NVIDIA's free callback gets a ticket (a `u64` id, counting up from 1, never reused), not a
//! pointer: a late or repeated callback looks the ticket up and finds either nothing or a
//! registration whose state says the pin is gone, never freed memory (the scheme AWS EFA uses).
//! The registry also lists every registration for the debugfs dump. An entry holds one reference
//! and is removed when both lifetimes are over: the core's (acquire..release) and NVIDIA's
//! (pin..put or callback).
//!
//! Lock order: the registry lock is a leaf; it is never held while taking a registration lock or
//! calling NVIDIA or the core.

use crate::mr::Mr;
use kernel::prelude::*;
use kernel::rbtree::{RBTree, RBTreeNode};
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::Arc;

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` from module init, before any client is registered.
    unsafe(uninit) static REGISTRY: Mutex<Option<RBTree<u64, Arc<Mr>>>> = None;
}

static NEXT_TICKET: Atomic<u64> = Atomic::new(1);

/// Initialises the registry.
///
/// # Safety
///
/// Called exactly once, from module init, before anything else in this file.
pub(crate) unsafe fn init() {
    // SAFETY: called once, before first use (function contract).
    unsafe { REGISTRY.init() };
    *REGISTRY.lock() = Some(RBTree::new());
}

/// A fresh ticket (never 0, never reused: 2^64 registrations do not happen).
pub(crate) fn next_ticket() -> u64 {
    NEXT_TICKET.fetch_add(1u64, Relaxed)
}

/// Lists `mr` under `mr.id`.
pub(crate) fn insert(mr: Arc<Mr>) -> Result {
    let node = RBTreeNode::new(mr.id, mr, GFP_KERNEL)?;
    let mut g = REGISTRY.lock();
    let tree = g.as_mut().ok_or(EINVAL)?;
    // Ids are unique, so nothing is replaced.
    let _old = tree.insert(node);
    Ok(())
}

/// The registration with ticket `id`, if still listed.
pub(crate) fn lookup(id: u64) -> Option<Arc<Mr>> {
    REGISTRY.lock().as_ref()?.get(&id).cloned()
}

/// Unlists ticket `id`; the reference is dropped after the lock is released.
pub(crate) fn remove(id: u64) {
    let old = {
        let mut g = REGISTRY.lock();
        g.as_mut().and_then(|t| t.remove(&id))
    };
    drop(old);
}

/// References to every listed registration, in ticket order (for the debugfs dump).
pub(crate) fn snapshot() -> Result<KVec<Arc<Mr>>> {
    let g = REGISTRY.lock();
    let mut v = KVec::new();
    if let Some(t) = g.as_ref() {
        for (_, mr) in t.iter() {
            v.push(mr.clone(), GFP_KERNEL)?;
        }
    }
    Ok(v)
}
