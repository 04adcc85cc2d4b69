//! What one two-node client may ask the server for. Every request is checked here before the
//! server allocates, registers or posts anything for it, so a malformed or hostile request is
//! answered with an error instead of an abort (a length of 2^64 used to reach the allocator).

use crate::peer::Req;

/// Longest a client may make the server wait for receive completions in one request.
pub const MAX_WAIT_MS: u64 = 600_000;
/// Most ping-pong rounds in one `Pong` request.
pub const MAX_PONG_ITERS: u32 = 10_000_000;
/// Most outstanding work requests a client may ask a QP for.
pub const MAX_DEPTH: u32 = 1 << 16;

/// The server's state as far as checks need it.
pub trait View {
    /// Length of buffer `id`, if it exists.
    fn buf_len(&self, id: u32) -> Option<u64>;
    /// Bytes of test memory the client holds now.
    fn held(&self) -> u64;
    /// Depth of the connected QP, if one is connected.
    fn depth(&self) -> Option<u32>;
}

/// Checks `q` against `view` and a memory limit of `mem_limit` bytes per client.
pub fn check(q: &Req, view: &dyn View, mem_limit: u64) -> Result<(), String> {
    let buf = |id: u32| view.buf_len(id).ok_or_else(|| format!("no buffer {id}"));
    let inside = |id: u32, off: u64, len: u64| -> Result<(), String> {
        let size = buf(id)?;
        match off.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(format!(
                "range {off}+{len} lies outside buffer {id} ({size} bytes)"
            )),
        }
    };
    let connected = || view.depth().ok_or_else(|| "not connected".to_string());
    match *q {
        Req::Hello { .. } | Req::Counters | Req::Bye | Req::Free { .. } | Req::Drop { .. } => {
            Ok(())
        }
        Req::Alloc { size, .. } => {
            if size == 0 {
                return Err("refused: a buffer of 0 bytes".into());
            }
            let total = view.held().checked_add(size);
            if total.is_none_or(|t| t > mem_limit) {
                return Err(format!(
                    "refused: {size} more bytes would exceed this server's limit of {mem_limit} \
                     bytes per client (--server-mem-limit), {} held",
                    view.held()
                ));
            }
            Ok(())
        }
        Req::Connect { depth, .. } if depth == 0 || depth > MAX_DEPTH => {
            Err(format!("refused: QP depth {depth} (1 to {MAX_DEPTH})"))
        }
        Req::Connect { .. } => Ok(()),
        Req::Fill { id, off, len, .. } | Req::Verify { id, off, len, .. } => inside(id, off, len),
        Req::PostRecv {
            id,
            off,
            len,
            count,
        } => {
            inside(id, off, len)?;
            figures::size::check_message(len)?;
            let depth = connected()?;
            if count > depth {
                return Err(format!(
                    "refused: {count} receives on a QP of depth {depth}"
                ));
            }
            Ok(())
        }
        Req::WaitRecv { count, timeout_ms } => {
            let depth = connected()?;
            if count > depth.saturating_mul(2) || timeout_ms > MAX_WAIT_MS {
                return Err(format!(
                    "refused: wait for {count} completions for {timeout_ms} ms (at most twice the \
                     QP depth {depth}, {MAX_WAIT_MS} ms)"
                ));
            }
            Ok(())
        }
        Req::Pong {
            id, size, iters, ..
        } => {
            inside(id, 0, size)?;
            figures::size::check_message(size)?;
            connected()?;
            if iters > MAX_PONG_ITERS {
                return Err(format!(
                    "refused: {iters} ping-pong rounds (at most {MAX_PONG_ITERS})"
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    struct Fake {
        bufs: HashMap<u32, u64>,
        held: u64,
        depth: Option<u32>,
    }

    impl View for Fake {
        fn buf_len(&self, id: u32) -> Option<u64> {
            self.bufs.get(&id).copied()
        }
        fn held(&self) -> u64 {
            self.held
        }
        fn depth(&self) -> Option<u32> {
            self.depth
        }
    }

    fn fake() -> Fake {
        Fake {
            bufs: HashMap::from([(1, 65536)]),
            held: 65536,
            depth: Some(8),
        }
    }

    #[test]
    fn requests_beyond_the_limits_are_refused() {
        let v = fake();
        let lim = 1 << 20;
        assert!(check(
            &Req::Alloc {
                size: 4096,
                host: true
            },
            &v,
            lim
        )
        .is_ok());
        for size in [0, lim, u64::MAX] {
            assert!(
                check(&Req::Alloc { size, host: false }, &v, lim).is_err(),
                "{size}"
            );
        }
        let fill = |off, len| Req::Fill {
            id: 1,
            off,
            len,
            seed: 0,
        };
        assert!(check(&fill(0, 65536), &v, lim).is_ok());
        assert!(check(&fill(1, 65536), &v, lim).is_err());
        assert!(check(&fill(u64::MAX, 2), &v, lim).is_err());
        assert!(check(
            &Req::Verify {
                id: 2,
                off: 0,
                len: 1,
                seed: 0
            },
            &v,
            lim
        )
        .is_err());
        let recv = |count| Req::PostRecv {
            id: 1,
            off: 0,
            len: 4096,
            count,
        };
        assert!(check(&recv(8), &v, lim).is_ok());
        assert!(check(&recv(9), &v, lim).is_err());
        let wait = |count, timeout_ms| Req::WaitRecv { count, timeout_ms };
        assert!(check(&wait(16, 1000), &v, lim).is_ok());
        assert!(check(&wait(17, 1000), &v, lim).is_err());
        assert!(check(&wait(1, MAX_WAIT_MS + 1), &v, lim).is_err());
        let pong = |size, iters| Req::Pong {
            id: 1,
            size,
            iters,
            rkey: 0,
            raddr: 0,
        };
        assert!(check(&pong(4096, 1000), &v, lim).is_ok());
        assert!(check(&pong(65537, 1), &v, lim).is_err());
        assert!(check(&pong(1, MAX_PONG_ITERS + 1), &v, lim).is_err());
        let unconnected = Fake {
            depth: None,
            ..fake()
        };
        assert!(check(&recv(1), &unconnected, lim).is_err());
    }

    fn any_req() -> impl Strategy<Value = Req> {
        prop_oneof![
            (any::<u64>(), any::<bool>()).prop_map(|(size, host)| Req::Alloc { size, host }),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(id, off, len)| Req::Fill {
                id,
                off,
                len,
                seed: 1
            }),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(id, off, len)| Req::Verify {
                id,
                off,
                len,
                seed: 1
            }),
            (any::<u32>(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
                |(id, off, len, count)| Req::PostRecv {
                    id,
                    off,
                    len,
                    count
                }
            ),
            (any::<u32>(), any::<u64>())
                .prop_map(|(count, timeout_ms)| Req::WaitRecv { count, timeout_ms }),
            (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(id, size, iters)| Req::Pong {
                id,
                size,
                iters,
                rkey: 0,
                raddr: 0
            }),
        ]
    }

    proptest! {
        #[test]
        fn accepted_requests_stay_inside_what_the_client_owns(q in any_req()) {
            let v = fake();
            let lim = 1u64 << 30;
            if check(&q, &v, lim).is_ok() {
                match q {
                    Req::Alloc { size, .. } => prop_assert!(size > 0 && v.held + size <= lim),
                    Req::Fill { id, off, len, .. } | Req::Verify { id, off, len, .. }
                    | Req::PostRecv { id, off, len, .. } => {
                        prop_assert!(off + len <= v.bufs[&id]);
                    }
                    Req::Pong { id, size, .. } => prop_assert!(size <= v.bufs[&id]),
                    _ => {}
                }
            }
        }
    }
}
