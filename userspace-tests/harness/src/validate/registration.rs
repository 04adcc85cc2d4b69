//! The registration matrix per path (`reg.*`): sizes around host and GPU page edges, unaligned
//! offsets, and what the registrations move in the peer client's counters.

use super::peer_path::{Judgement, Snapshot};
use super::Suite;
use crate::causes;
use crate::mem::Buffer;
use crate::reg::{Mr, RegPath, Registrar};
use crate::report::CaseResult;
use std::time::Instant;

/// Registration sizes of the matrix: edges around host and GPU pages, powers of two, the max.
pub fn matrix_sizes(max: u64) -> Vec<u64> {
    let mut v: Vec<u64> = vec![1, 2, 3, 7, 4095, 4096, 4097, 65535, 65536, 65537, 2 << 20];
    let mut p = 1u64 << 17;
    while p <= max {
        v.push(p);
        match p.checked_mul(2) {
            Some(n) => p = n,
            None => break,
        }
    }
    v.push(max);
    v.retain(|s| *s <= max);
    v.sort_unstable();
    v.dedup();
    v
}

/// Offsets not aligned to the 64 KiB GPU page (and one that is, as a control).
pub const OFFSETS: [u64; 7] = [1, 4095, 4096, 65535, 65536, 65537, 3 * 65536 + 123];

impl Suite {
    /// Registers `len` at `off` of `buf` on `path`, returns the MR or a failed case.
    pub(super) fn try_reg(
        &self,
        name: &str,
        reg: &Registrar,
        buf: &dyn Buffer,
        off: u64,
        len: u64,
    ) -> Result<Mr, CaseResult> {
        reg.register(buf, off as usize, len as usize).map_err(|e| {
            CaseResult::fail(
                name,
                format!(
                    "{} of {len} bytes at offset {off}: {}",
                    reg.path.label(),
                    e.msg
                ),
                causes::registration(self.args.common.mem, reg.path, e.errno, len, &self.facts),
            )
        })
    }

    /// The verdict on `n` registrations made (and ended) since `before`: proven through the peer
    /// client's counters (or nothing to prove: host memory, dma-buf), failed, or named as
    /// unprovable on this node ([`peer_path::Proof`]). `balanced`: every pin made must be ended.
    fn reg_verdict(
        &self,
        name: &str,
        path: RegPath,
        before: &Option<Snapshot>,
        n: u64,
        balanced: bool,
        done: String,
    ) -> CaseResult {
        if !self.peer_registered(path) {
            return CaseResult::pass(name, done);
        }
        let after = self.counters();
        match self
            .proof
            .judge(before.as_ref(), after.as_ref(), n, balanced)
        {
            Judgement::Proven(c) => CaseResult::pass(name, format!("{done}; {c}")),
            Judgement::Failed(d, cause) => {
                CaseResult::fail(name, format!("{done}, but {d}"), cause)
            }
            Judgement::Unprovable(why) => CaseResult::skip(
                name,
                format!("{done}; NOT PROVEN through the peer client: {why}"),
            ),
        }
    }

    pub(super) fn reg_cases(&mut self, path: RegPath) {
        let tag = format!("[{}]", path.label());
        let name = format!("reg.sizes{tag}");
        self.case(&name.clone(), |s| s.reg_sizes(&name, path));
        let name = format!("reg.offsets{tag}");
        self.case(&name.clone(), |s| s.reg_offsets(&name, path));
        let name = format!("reg.many-small{tag}");
        self.case(&name.clone(), |s| s.reg_many_small(&name, path));
        let name = format!("reg.churn{tag}");
        self.case(&name.clone(), |s| s.reg_churn(&name, path));
    }

    /// What every `reg.*` case starts with: the path's registrar and a buffer of `size` bytes,
    /// or the case's result when it cannot run (a skip) or cannot allocate (a failure).
    fn reg_setup(
        &self,
        name: &str,
        path: RegPath,
        size: u64,
    ) -> Result<(Registrar, Box<dyn Buffer>), CaseResult> {
        if let Some(w) = self.no_regs(path) {
            return Err(CaseResult::skip(name, w));
        }
        let buf = self
            .alloc(size)
            .map_err(|e| CaseResult::fail(name, e.to_string(), "allocation failed"))?;
        Ok((self.registrar(path), buf))
    }

    fn reg_sizes(&self, name: &str, path: RegPath) -> CaseResult {
        let max = self.args.max_size;
        let (reg, buf) = match self.reg_setup(name, path, max) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let sizes = matrix_sizes(max);
        let before = self.counters();
        for &sz in &sizes {
            match self.try_reg(name, &reg, buf.as_ref(), 0, sz) {
                Ok(mr) => mr.dereg(),
                Err(r) => return r,
            }
        }
        let done = format!(
            "{} sizes 1 B .. {max} B registered and deregistered",
            sizes.len()
        );
        self.reg_verdict(name, path, &before, sizes.len() as u64, false, done)
    }

    fn reg_offsets(&self, name: &str, path: RegPath) -> CaseResult {
        let len = 8192u64;
        let size = OFFSETS.iter().max().copied().unwrap_or(0) + 2 * 65536 + len;
        let (reg, buf) = match self.reg_setup(name, path, size) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let before = self.counters();
        let mut n = 0;
        for off in OFFSETS {
            for l in [1, len, 65536 + 17] {
                match self.try_reg(name, &reg, buf.as_ref(), off, l) {
                    Ok(mr) => mr.dereg(),
                    Err(r) => return r,
                }
                n += 1;
            }
        }
        let done = format!("{n} unaligned (offset, length) pairs registered and deregistered");
        self.reg_verdict(name, path, &before, n, false, done)
    }

    fn reg_many_small(&self, name: &str, path: RegPath) -> CaseResult {
        let count = self.args.small_mrs.max(1) as u64;
        let stride = 65536u64;
        let (reg, buf) = match self.reg_setup(name, path, count * stride) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let before = self.counters();
        let mut mrs = Vec::new();
        for i in 0..count {
            match self.try_reg(name, &reg, buf.as_ref(), i * stride + 512, 4096) {
                Ok(mr) => mrs.push(mr),
                Err(mut r) => {
                    r.detail = format!("after {i} live MRs: {}", r.detail);
                    return r;
                }
            }
        }
        let keys: std::collections::HashSet<u32> = mrs.iter().map(|m| m.lkey()).collect();
        if !path.is_emu_core() && keys.len() != mrs.len() {
            return CaseResult::fail(
                name,
                format!("{} distinct lkeys for {} MRs", keys.len(), mrs.len()),
                "the NIC handed out duplicate keys",
            );
        }
        drop(mrs);
        let done = format!("{count} MRs of 4 KiB held at once, then deregistered");
        self.reg_verdict(name, path, &before, count, false, done)
    }

    fn reg_churn(&self, name: &str, path: RegPath) -> CaseResult {
        let churn = self.args.churn.max(1) as u64;
        let (reg, buf) = match self.reg_setup(name, path, 1 << 20) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let before = self.counters();
        let t = Instant::now();
        for i in 0..churn {
            match self.try_reg(name, &reg, buf.as_ref(), (i % 3) * 4096, 1 << 19) {
                Ok(mr) => mr.dereg(),
                Err(mut r) => {
                    r.detail = format!("cycle {i}: {}", r.detail);
                    return r;
                }
            }
        }
        let per = t.elapsed().as_secs_f64() * 1e6 / churn as f64;
        let done = format!("{churn} reg/dereg cycles of 512 KiB, {per:.1} us each");
        self.reg_verdict(name, path, &before, churn, true, done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_covers_edges() {
        let m = matrix_sizes(4 << 20);
        assert_eq!(m.first(), Some(&1));
        assert_eq!(m.last(), Some(&(4 << 20)));
        for s in [4095, 4096, 4097, 65535, 65536, 65537] {
            assert!(m.contains(&s), "{s}");
        }
        assert!(m.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(matrix_sizes(3), vec![1, 2, 3]);
        let odd = matrix_sizes(100_000);
        assert_eq!(odd.last(), Some(&100_000));
        assert!(OFFSETS.iter().filter(|o| *o % 65536 != 0).count() >= 5);
    }

    proptest::proptest! {
        #[test]
        fn matrix_never_overflows(max in 1u64..=u64::MAX) {
            let m = matrix_sizes(max);
            proptest::prop_assert_eq!(m.last(), Some(&max));
            proptest::prop_assert!(m.windows(2).all(|w| w[0] < w[1]));
            proptest::prop_assert!(m.len() <= 11 + 48);
        }
    }
}
