// SPDX-License-Identifier: GPL-2.0

//! Tickets: live objects by id, for callbacks that may come late.
//!
//! NVIDIA's free callback gets a ticket (a `u64` id, counting up from 1, never reused), not a
//! pointer: a late or repeated callback looks the ticket up and finds either nothing or an object
//! whose own state says the pin is gone, never freed memory (the scheme AWS EFA uses). The
//! registry is the container only; its owner (`mr.rs`) keeps one instance under a global lock and
//! decides when an entry goes. Nothing here allocates: nodes and snapshot buffers are allocated
//! by the caller before it takes that lock, which NVIDIA's free callback also takes.

use kernel::alloc::KVec;
use kernel::rbtree::{RBTree, RBTreeNode};
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::Arc;

/// A registry entry allocated ahead of the lock.
pub(crate) type Node<T> = RBTreeNode<u64, Arc<T>>;

/// Live objects by ticket.
pub(crate) struct Registry<T> {
    tree: RBTree<u64, Arc<T>>,
    len: usize,
}

impl<T> Registry<T> {
    /// An empty registry.
    pub(crate) fn new() -> Self {
        Self {
            tree: RBTree::new(),
            len: 0,
        }
    }

    /// Lists a node made with [`RBTreeNode::new`] (`(ticket, object)`). Tickets are unique, so
    /// nothing is replaced.
    pub(crate) fn insert(&mut self, node: Node<T>) {
        if self.tree.insert(node).is_none() {
            self.len += 1;
        }
    }

    /// The object listed under `ticket`.
    pub(crate) fn get(&self, ticket: u64) -> Option<Arc<T>> {
        self.tree.get(&ticket).cloned()
    }

    /// Unlists `ticket`; the caller drops the reference after releasing the lock.
    pub(crate) fn remove(&mut self, ticket: u64) -> Option<Arc<T>> {
        let old = self.tree.remove(&ticket);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Number of listed objects.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends a reference to every listed object, in ticket order, without allocating. Returns
    /// `false` (with `out` cleared) when `out` has too little spare capacity for all of them.
    pub(crate) fn snapshot_into(&self, out: &mut KVec<Arc<T>>) -> bool {
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
pub(crate) struct Tickets(Atomic<u64>);

impl Tickets {
    /// Starts at 1.
    pub(crate) const fn new() -> Self {
        Self(Atomic::new(1))
    }

    /// A fresh ticket.
    pub(crate) fn next(&self) -> u64 {
        self.0.fetch_add(1u64, Relaxed)
    }
}
