//! What the NIC did with an MR whose GPU memory was freed under it (`inval.*`), in the words a
//! driver developer acts on (issue 37, item 3): the completions of the writes that were in flight
//! at the free (how many succeeded, which error statuses the others had, with the vendor
//! syndrome), what became of the write posted after the free (refused by the post, completed with
//! an error, completed successfully, never completed), and whether bytes still landed at the
//! destination.

use crate::verbs::{self, Completion, Endpoint, Op, VerbsError};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long the write posted after the free may take to complete.
const AFTER_FREE_WAIT: Duration = Duration::from_secs(20);

/// What became of the write posted from the MR after the free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostAfterFree {
    /// `ibv_post_send` refused it (the provider's error).
    Refused(String),
    /// It completed; the completion's status (0: success) and vendor syndrome.
    Completed { status: u32, vendor_err: u32 },
    /// No completion came (the wait's error).
    NoCompletion(String),
}

/// Whether the destination of the write posted after the free changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landed {
    /// Not checked (no peer to ask, or the check itself failed: why).
    Unknown(String),
    /// The destination still holds the pattern written before the post.
    Untouched,
    /// Bytes changed, the first at this offset of the destination.
    Changed(u64),
}

/// Everything the case observed after the free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterFree {
    /// Writes queued before the free (0 for `free-idle`).
    pub inflight_posted: u32,
    /// Their completions polled after the free.
    pub inflight: Vec<Completion>,
    pub post: PostAfterFree,
    pub landed: Landed,
}

fn status_text(status: u32, vendor_err: u32) -> String {
    let name = verbs::wc_status_name(status);
    if vendor_err != 0 {
        format!("'{name}' (status {status}, vendor_err {vendor_err:#x})")
    } else {
        format!("'{name}' (status {status})")
    }
}

impl PostAfterFree {
    /// Posts `op` (work request `wr_id`) from the freed MR (`lkey`, `laddr`, `len`) and waits for
    /// its completion. Completions of the in-flight batch that arrive meanwhile (a NIC may flush
    /// them late) are theirs, not this request's: they go to `seen`, and the wait goes on until
    /// this request's completion or the deadline.
    pub fn wait(
        ep: &mut Endpoint,
        (op, wr_id): (Op, u64),
        (lkey, laddr, len): (u32, u64, u64),
        seen: &mut Vec<Completion>,
    ) -> Self {
        let no_completion = |late: usize| {
            Self::NoCompletion(format!(
                "no completion within {} s ({late} of the in-flight batch's arrived in all, none \
                 for this request)",
                AFTER_FREE_WAIT.as_secs()
            ))
        };
        if let Err(e) = ep.post(op, wr_id, lkey, laddr, len) {
            return Self::Refused(e.to_string());
        }
        let deadline = Instant::now() + AFTER_FREE_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match ep.poll(1, left) {
                Ok(cs) => {
                    let (mine, late): (Vec<_>, Vec<_>) =
                        cs.into_iter().partition(|c| c.wr_id == wr_id);
                    seen.extend(late);
                    if let Some(c) = mine.first() {
                        return Self::Completed {
                            status: c.status,
                            vendor_err: c.vendor_err,
                        };
                    }
                    if left.is_zero() {
                        return no_completion(seen.len());
                    }
                }
                // (the deadline: what arrived meanwhile is said, not the poll's remainder)
                Err(VerbsError::Timeout(_)) => return no_completion(seen.len()),
                Err(e) => return Self::NoCompletion(e.to_string()),
            }
        }
    }
}

impl AfterFree {
    /// The in-flight writes' outcome: `32 writes in flight at the free: 20 completed
    /// successfully, 12 with 'local protection error' (status 4, vendor_err 0x...)`; empty for
    /// `free-idle`.
    pub fn inflight_text(&self) -> String {
        if self.inflight_posted == 0 {
            return String::new();
        }
        let ok = self.inflight.iter().filter(|c| c.ok()).count();
        let mut errors: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for c in self.inflight.iter().filter(|c| !c.ok()) {
            *errors.entry((c.status, c.vendor_err)).or_default() += 1;
        }
        let mut parts = vec![format!("{ok} completed successfully")];
        parts.extend(
            errors
                .iter()
                .map(|((s, v), n)| format!("{n} with {}", status_text(*s, *v))),
        );
        let missing = (self.inflight_posted as usize).saturating_sub(self.inflight.len());
        if missing > 0 {
            parts.push(format!("{missing} without a completion within the wait"));
        }
        format!(
            "{} writes in flight at the free: {}; ",
            self.inflight_posted,
            parts.join(", ")
        )
    }

    /// The write posted after the free, and what reached the destination.
    pub fn post_text(&self) -> String {
        let post = match &self.post {
            PostAfterFree::Refused(e) => format!(
                "the write posted from the MR after the free was refused by ibv_post_send ({e})"
            ),
            PostAfterFree::Completed { status: 0, .. } => {
                "the write posted from the MR after the free completed successfully".to_string()
            }
            PostAfterFree::Completed { status, vendor_err } => format!(
                "the write posted from the MR after the free completed with {}",
                status_text(*status, *vendor_err)
            ),
            PostAfterFree::NoCompletion(e) => format!(
                "the write posted from the MR after the free never completed ({e}): the QP hangs \
                 instead of failing the request"
            ),
        };
        let landed = match &self.landed {
            Landed::Untouched => "; nothing landed at the destination".to_string(),
            Landed::Changed(at) => format!(
                "; data still landed at the destination (first changed byte at offset {at}): the \
                 NIC read the freed pages"
            ),
            Landed::Unknown(why) => format!("; whether data landed is unknown ({why})"),
        };
        format!("{post}{landed}")
    }

    /// Both, as one detail line.
    pub fn text(&self) -> String {
        format!("{}{}", self.inflight_text(), self.post_text())
    }

    /// Whether the post after the free succeeded (the MR kept working).
    pub fn kept_working(&self) -> bool {
        matches!(self.post, PostAfterFree::Completed { status: 0, .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(status: u32, vendor_err: u32) -> Completion {
        Completion {
            wr_id: 0,
            status,
            opcode: 0,
            byte_len: 0,
            imm: 0,
            vendor_err,
        }
    }

    #[test]
    fn in_flight_writes_are_grouped_by_status() {
        let mut inflight = vec![wc(0, 0); 20];
        inflight.extend(vec![wc(4, 0x51); 7]);
        inflight.extend(vec![wc(5, 0); 3]);
        let a = AfterFree {
            inflight_posted: 32,
            inflight,
            post: PostAfterFree::Completed {
                status: 4,
                vendor_err: 0x51,
            },
            landed: Landed::Untouched,
        };
        let t = a.text();
        assert!(t.starts_with("32 writes in flight at the free: 20 completed successfully, 7 with 'local protection error' (status 4, vendor_err 0x51), 3 with 'work request flushed' (status 5), 2 without a completion within the wait; "), "{t}");
        assert!(t.ends_with("after the free completed with 'local protection error' (status 4, vendor_err 0x51); nothing landed at the destination"), "{t}");
        assert!(!a.kept_working());
    }

    #[test]
    fn refused_posts_hangs_and_landed_data_are_said() {
        let a = AfterFree {
            inflight_posted: 0,
            inflight: Vec::new(),
            post: PostAfterFree::Refused("Invalid argument (os error 22)".into()),
            landed: Landed::Unknown("the peer could not be asked".into()),
        };
        assert_eq!(a.inflight_text(), "");
        assert!(a
            .text()
            .contains("refused by ibv_post_send (Invalid argument (os error 22))"));
        assert!(a.text().contains("unknown (the peer could not be asked)"));
        let a = AfterFree {
            post: PostAfterFree::NoCompletion("timed out after 20s".into()),
            ..a
        };
        assert!(a
            .text()
            .contains("never completed (timed out after 20s): the QP hangs"));
        let a = AfterFree {
            post: PostAfterFree::Completed {
                status: 0,
                vendor_err: 0,
            },
            landed: Landed::Changed(0),
            ..a
        };
        assert!(a.kept_working());
        assert!(a.text().contains("completed successfully; data still landed at the destination (first changed byte at offset 0): the NIC read the freed pages"));
    }
}
