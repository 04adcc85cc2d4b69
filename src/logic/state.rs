// SPDX-License-Identifier: GPL-2.0

//! The per-registration state machine.
//!
//! One registration (`Mr`) is driven by two independent parties: the peer-memory core (acquire,
//! get_pages, dma_map, dma_unmap, put_pages, release) and NVIDIA (the free callback, which may run
//! at any time on any thread while a non-persistent pin is registered). Each event is applied under
//! the registration's lock; `step` says what the new state is and which provider call the caller
//! must make. Provider calls that take NVIDIA's RM lock (put_pages, the core's invalidate) are made
//! *after* dropping our lock; only `nvidia_p2p_dma_unmap_pages` (no RM lock) runs under it.

/// Where one registration stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// No pin (fresh, or between the two halves of a re-pin).
    Idle,
    /// acquire pinned the range; the core has not called get_pages yet.
    Pinned,
    /// get_pages adopted the pin; the core holds a `core_context`.
    Held,
    /// dma_map is inside `nvidia_p2p_dma_map_pages` (our lock dropped).
    Mapping,
    /// DMA mapping and SG table live.
    Mapped,
    /// dma_unmap done; pin still held until put_pages.
    Unmapped,
    /// put_pages / put_pages_persistent in flight (our lock dropped).
    Unpinning,
    /// NVIDIA's free callback is calling the core's invalidate.
    Invalidating,
    /// NVIDIA revoked the pin (callback finished): nothing left to unmap or put.
    Revoked,
    /// The pin is left to NVIDIA's free callback, which NVIDIA calls when the memory is freed: a
    /// put from a foreign process on a non-persistent pin, or a non-persistent put NVIDIA refused
    /// (it then keeps the pin and the callback). The registration stays listed, and the module
    /// loaded, until that callback.
    Orphaned,
    /// The pin was returned with put_pages (terminal).
    Released,
}

/// Something that happened to a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Our `get_pages*` call returned success.
    PinDone,
    /// The core's get_pages (same range as acquire): adopt the pin.
    CoreGetPages,
    /// dma_map is about to call `nvidia_p2p_dma_map_pages`.
    MapBegin,
    /// `nvidia_p2p_dma_map_pages` succeeded and the SG table is built.
    MapOk,
    /// dma_map failed after `MapBegin`.
    MapFailed,
    /// The core's dma_unmap.
    Unmap,
    /// Give the pin back (core put_pages, release with a pin, or a re-pin).
    /// `foreign`: the caller is not the pinning process and the pin is non-persistent.
    Unpin {
        /// Caller is another process and the pin is non-persistent.
        foreign: bool,
    },
    /// Our non-persistent `put_pages` call failed: NVIDIA keeps the pin and its free callback.
    PutFailed,
    /// Our `put_pages*` call returned (a persistent put that failed too: there is no callback to
    /// wait for, and NVIDIA keeps that pin); `repin`: a new pin follows.
    UnpinDone {
        /// A new pin of a different range follows (only after a put that succeeded: after a
        /// failed one NVIDIA may still call back for the old pin, with the same ticket).
        repin: bool,
    },
    /// NVIDIA's free callback found this registration.
    Callback,
    /// The core's invalidate returned inside the callback.
    CallbackDone,
}

/// The provider call the caller must make after applying an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing.
    None,
    /// `nvidia_p2p_dma_unmap_pages`, under the registration lock.
    Unmap,
    /// `nvidia_p2p_put_pages*`, with the registration lock dropped.
    Put,
    /// Unmap under the lock, then put with the lock dropped.
    UnmapThenPut,
    /// Call the core's invalidate (lock dropped), then apply [`Event::CallbackDone`].
    NotifyCore,
    /// The callback overtook a provider call in flight on this pin's table (`put_pages` in
    /// `Unpinning`, `dma_map_pages` in `Mapping`): NVIDIA frees the table when the callback
    /// returns, and the call, once NVIDIA lets it run, names freed memory (the put window and H4,
    /// docs/design.md). No new pin may start until that call returned.
    Overtaken,
}

/// Why an event was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// NVIDIA revoked the pin first; the operation fails, nothing to undo.
    Gone,
    /// The event makes no sense in this state (a core or caller bug); nothing changes.
    Order,
    /// A callback for a registration NVIDIA no longer pins (late or repeated); ignore it.
    Stale,
}

impl State {
    /// Whether NVIDIA still holds a pin registered by this registration.
    pub(crate) fn holds_pin(self) -> bool {
        matches!(
            self,
            State::Pinned
                | State::Held
                | State::Mapping
                | State::Mapped
                | State::Unmapped
                | State::Unpinning
                | State::Invalidating
                | State::Orphaned
        )
    }

    /// Short name used in the debugfs dump (see uapi/debugfs.md).
    pub(crate) fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Pinned => "pinned",
            State::Held => "held",
            State::Mapping => "mapping",
            State::Mapped => "mapped",
            State::Unmapped => "unmapped",
            State::Unpinning => "unpinning",
            State::Invalidating => "invalidating",
            State::Revoked => "revoked",
            State::Orphaned => "orphaned",
            State::Released => "released",
        }
    }
}

/// Applies `event` to `state`.
pub(crate) fn step(state: State, event: Event) -> Result<(State, Action), Refusal> {
    use Action as A;
    use State as S;
    let ok = |s, a| Ok((s, a));
    match (state, event) {
        (S::Idle, Event::PinDone) => ok(S::Pinned, A::None),
        (S::Pinned, Event::CoreGetPages) => ok(S::Held, A::None),
        (S::Held, Event::MapBegin) => ok(S::Mapping, A::None),
        (S::Mapping, Event::MapOk) => ok(S::Mapped, A::None),
        (S::Mapping, Event::MapFailed) => ok(S::Held, A::None),
        // The callback won a race with pinning, get_pages or dma_map: fail the operation.
        (S::Revoked, Event::PinDone | Event::CoreGetPages | Event::MapBegin | Event::MapOk) => {
            Err(Refusal::Gone)
        }
        (S::Revoked, Event::MapFailed) => ok(S::Revoked, A::None),

        (S::Mapped, Event::Unmap) => ok(S::Unmapped, A::Unmap),
        // Nothing mapped (any more): dma_unmap is harmless. Under Invalidating, NVIDIA frees the
        // mapping itself once the callback returns (and the call would be from inside it).
        (
            S::Idle
            | S::Pinned
            | S::Held
            | S::Unmapped
            | S::Unpinning
            | S::Invalidating
            | S::Revoked
            | S::Orphaned
            | S::Released,
            Event::Unmap,
        ) => ok(state, A::None),

        (S::Pinned | S::Held | S::Unmapped, Event::Unpin { foreign: false }) => {
            ok(S::Unpinning, A::Put)
        }
        (S::Mapped, Event::Unpin { foreign: false }) => ok(S::Unpinning, A::UnmapThenPut),
        (S::Pinned | S::Held | S::Unmapped, Event::Unpin { foreign: true }) => {
            ok(S::Orphaned, A::None)
        }
        (S::Mapped, Event::Unpin { foreign: true }) => ok(S::Orphaned, A::Unmap),
        (
            S::Idle | S::Invalidating | S::Revoked | S::Orphaned | S::Released,
            Event::Unpin { .. },
        ) => ok(state, A::None),

        (S::Unpinning, Event::UnpinDone { repin: false }) => ok(S::Released, A::None),
        (S::Unpinning | S::Revoked, Event::UnpinDone { repin: true }) => ok(S::Idle, A::None),
        // The callback ran while put_pages waited for NVIDIA's lock.
        (S::Revoked, Event::UnpinDone { repin: false }) => ok(S::Revoked, A::None),
        // NVIDIA refused the put and still calls back for this pin; or the callback ran after the
        // failed put returned, and the pin is gone.
        (S::Unpinning, Event::PutFailed) => ok(S::Orphaned, A::None),
        (S::Revoked, Event::PutFailed) => ok(S::Revoked, A::None),

        (S::Mapped, Event::Callback) => ok(S::Invalidating, A::NotifyCore),
        // Not mapped for the HCA: no DMA to stop, and the core must not be told (it is either
        // still registering, in which case the next step fails, or already tearing down).
        (S::Idle | S::Pinned | S::Held | S::Unmapped | S::Orphaned, Event::Callback) => {
            ok(S::Revoked, A::None)
        }
        (S::Mapping | S::Unpinning, Event::Callback) => ok(S::Revoked, A::Overtaken),
        (S::Invalidating | S::Revoked | S::Released, Event::Callback) => Err(Refusal::Stale),
        (S::Invalidating, Event::CallbackDone) => ok(S::Revoked, A::None),

        _ => Err(Refusal::Order),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTS: [Event; 13] = [
        Event::PinDone,
        Event::CoreGetPages,
        Event::MapBegin,
        Event::MapOk,
        Event::MapFailed,
        Event::Unmap,
        Event::Unpin { foreign: false },
        Event::Unpin { foreign: true },
        Event::UnpinDone { repin: false },
        Event::Callback,
        Event::CallbackDone,
        Event::UnpinDone { repin: true },
        Event::PutFailed,
    ];

    fn run(events: &[Event]) -> Result<(State, Action), Refusal> {
        let mut s = State::Idle;
        let mut last = Action::None;
        for &e in events {
            let (n, a) = step(s, e)?;
            s = n;
            last = a;
        }
        Ok((s, last))
    }

    #[test]
    fn debugfs_names_are_the_documented_vocabulary() {
        use State::*;
        // uapi/debugfs.md lists these, in this order, for the `state` column.
        let all = [
            Idle,
            Pinned,
            Held,
            Mapping,
            Mapped,
            Unmapped,
            Unpinning,
            Invalidating,
            Revoked,
            Orphaned,
            Released,
        ];
        let names: Vec<&str> = all.iter().map(|s| s.name()).collect();
        assert_eq!(
            names.join(" "),
            "idle pinned held mapping mapped unmapped unpinning invalidating revoked orphaned released"
        );
    }

    #[test]
    fn normal_lifetime() {
        use Event::*;
        let (s, a) = run(&[PinDone, CoreGetPages, MapBegin, MapOk, Unmap]).unwrap();
        assert_eq!((s, a), (State::Unmapped, Action::Unmap));
        let unpinning = [
            PinDone,
            CoreGetPages,
            MapBegin,
            MapOk,
            Unmap,
            Unpin { foreign: false },
        ];
        let (s, a) = run(&unpinning).unwrap();
        assert_eq!((s, a), (State::Unpinning, Action::Put));
        let (s, _) = step(s, UnpinDone { repin: false }).unwrap();
        assert_eq!(s, State::Released);
    }

    #[test]
    fn callback_on_mapped_notifies_core_and_makes_teardown_noops() {
        use Event::*;
        let (s, a) = run(&[PinDone, CoreGetPages, MapBegin, MapOk, Callback]).unwrap();
        assert_eq!((s, a), (State::Invalidating, Action::NotifyCore));
        // Legacy core: dma_unmap and put_pages from inside invalidate are no-ops.
        assert_eq!(step(s, Unmap), Ok((State::Invalidating, Action::None)));
        assert_eq!(
            step(s, Unpin { foreign: false }),
            Ok((State::Invalidating, Action::None))
        );
        assert_eq!(step(s, CallbackDone), Ok((State::Revoked, Action::None)));
        assert_eq!(step(State::Revoked, Callback), Err(Refusal::Stale));
    }

    #[test]
    fn callback_before_mapping_fails_the_registration_quietly() {
        use Event::*;
        // Inside the window between NVIDIA registering the callback and get_pages returning.
        assert_eq!(run(&[Callback, PinDone]), Err(Refusal::Gone));
        assert_eq!(run(&[PinDone, Callback, CoreGetPages]), Err(Refusal::Gone));
        assert_eq!(
            run(&[PinDone, CoreGetPages, Callback, MapBegin]),
            Err(Refusal::Gone)
        );
        // dma_map in flight (H4): no core notification, dma_map fails afterwards.
        let (s, a) = run(&[PinDone, CoreGetPages, MapBegin, Callback]).unwrap();
        assert_eq!((s, a), (State::Revoked, Action::Overtaken));
        assert_eq!(step(s, MapOk), Err(Refusal::Gone));
    }

    #[test]
    fn foreign_put_orphans_the_pin_for_the_callback() {
        use Event::*;
        let (s, a) = run(&[
            PinDone,
            CoreGetPages,
            MapBegin,
            MapOk,
            Unpin { foreign: true },
        ])
        .unwrap();
        assert_eq!((s, a), (State::Orphaned, Action::Unmap));
        assert!(s.holds_pin());
        // The callback later must not notify the core: its core_context is stale.
        assert_eq!(step(s, Callback), Ok((State::Revoked, Action::None)));
    }

    #[test]
    fn failed_put_leaves_the_pin_to_the_callback() {
        use Event::*;
        let unpinning = [PinDone, CoreGetPages, Unpin { foreign: false }];
        let (s, _) = run(&unpinning).unwrap();
        let (s, a) = step(s, PutFailed).unwrap();
        assert_eq!((s, a), (State::Orphaned, Action::None));
        assert!(s.holds_pin());
        // release then does nothing; the callback, when the memory is freed, ends it.
        assert_eq!(step(s, Unpin { foreign: false }), Ok((s, Action::None)));
        assert_eq!(step(s, Callback), Ok((State::Revoked, Action::None)));
        // The callback ran after the failed put returned: the pin is gone.
        let (s, _) = run(&[PinDone, Unpin { foreign: false }, Callback]).unwrap();
        assert_eq!(step(s, PutFailed), Ok((State::Revoked, Action::None)));
    }

    #[test]
    fn put_racing_callback() {
        use Event::*;
        let (s, a) = run(&[PinDone, CoreGetPages, Unpin { foreign: false }, Callback]).unwrap();
        assert_eq!((s, a), (State::Revoked, Action::Overtaken));
        assert_eq!(
            step(s, UnpinDone { repin: false }),
            Ok((State::Revoked, Action::None))
        );
    }

    #[test]
    fn repin() {
        use Event::*;
        let (s, a) = run(&[PinDone, Unpin { foreign: false }]).unwrap();
        assert_eq!(a, Action::Put);
        let (s, _) = step(s, UnpinDone { repin: true }).unwrap();
        assert_eq!(step(s, PinDone), Ok((State::Pinned, Action::None)));
        // The old pin's callback ran while its put waited: that pin is gone, a new one follows.
        let (s, _) = run(&[PinDone, Unpin { foreign: false }, Callback]).unwrap();
        let (s, _) = step(s, UnpinDone { repin: true }).unwrap();
        assert_eq!(step(s, PinDone), Ok((State::Pinned, Action::None)));
        // No new pin while the old one may still call back (mr.rs checks `PinDone` before
        // pinning again): after a failed put (`repin: false`) or a foreign caller's orphan.
        let failed_put = [PinDone, Unpin { foreign: false }, PutFailed];
        assert_eq!(
            step(run(&failed_put).unwrap().0, PinDone),
            Err(Refusal::Order)
        );
        let failed_persistent_put = [
            PinDone,
            Unpin { foreign: false },
            UnpinDone { repin: false },
        ];
        assert_eq!(
            step(run(&failed_persistent_put).unwrap().0, PinDone),
            Err(Refusal::Order)
        );
        let (s, _) = run(&[PinDone, Unpin { foreign: true }]).unwrap();
        assert_eq!(step(s, PinDone), Err(Refusal::Order));
    }

    /// Walks every event sequence up to length 7 and checks the invariants the design relies on:
    /// at most one put per pin, the core is notified only for a mapped registration and at most
    /// once, nothing is unmapped or put after NVIDIA revoked the pin, a callback reports an
    /// overtaken call only while a put or a map is in flight, the registration's own state
    /// refuses a pin until that call returned, and a refused event never changes the state. (That
    /// no *other* registration pins meanwhile is the module's global wait, src/overtaken.rs.)
    #[test]
    fn exhaustive_invariants() {
        fn walk(s: State, depth: u32, puts: u32, notifies: u32, revoked: bool, lost: bool) {
            if depth == 0 {
                return;
            }
            for &e in EVENTS.iter() {
                match step(s, e) {
                    Err(_) => {}
                    Ok((n, a)) => {
                        let mut puts = puts;
                        let mut notifies = notifies;
                        let revoked = revoked || n == State::Revoked;
                        if matches!(a, Action::Put | Action::UnmapThenPut) {
                            assert!(s.holds_pin(), "put without a pin from {s:?}");
                            assert!(!revoked, "put after revocation from {s:?}");
                            puts += 1;
                        }
                        if matches!(a, Action::Unmap | Action::UnmapThenPut) {
                            assert_eq!(s, State::Mapped, "unmap from {s:?}");
                        }
                        if a == Action::NotifyCore {
                            assert_eq!(s, State::Mapped);
                            notifies += 1;
                        }
                        if a == Action::Overtaken {
                            assert!(
                                matches!(s, State::Unpinning | State::Mapping),
                                "overtaken without a call in flight from {s:?}"
                            );
                        }
                        assert!(
                            !(lost && e == Event::PinDone),
                            "pin during an overtaken call"
                        );
                        let lost = match e {
                            Event::UnpinDone { .. }
                            | Event::PutFailed
                            | Event::MapOk
                            | Event::MapFailed => false,
                            _ => lost || a == Action::Overtaken,
                        };
                        assert!(notifies <= 1);
                        // NVIDIA kept a pin whose put failed, and calls back for it: the
                        // registration must stay listed (and the module loaded) until then.
                        if e == Event::PutFailed && !revoked {
                            assert!(n.holds_pin(), "failed put from {s:?} ends in {n:?}");
                        }
                        // A re-pin (UnpinDone{repin}) starts a new pin: reset the put count.
                        let puts = if n == State::Idle && e == (Event::UnpinDone { repin: true }) {
                            0
                        } else {
                            puts
                        };
                        assert!(puts <= 1, "two puts for one pin");
                        let revoked = revoked && n != State::Idle;
                        walk(n, depth - 1, puts, notifies, revoked, lost);
                    }
                }
            }
        }
        walk(State::Idle, 7, 0, 0, false, false);
    }
}
