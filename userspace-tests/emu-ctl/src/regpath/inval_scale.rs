//! Invalidation at scale (issue 38, item 3): one free ("cudaFree") of an allocation that carries
//! N live MRs of one GPU page each, and K such frees at once from K threads: how long until the
//! free returns, how many free callbacks it ran, and what that is per MR.
//!
//! A client of the invalidating API gets one callback per pin it holds; a persistent one none (its
//! pins outlive the free until deregistration): `regpath check` holds every path to that.

use super::cli::MeasureArgs;
use super::document::{ConcurrentFrees, InvalScale, OneFree};
use super::path::{Handle, Path};
use super::stats::ns;
use crate::error::{EmuError, Result};
use crate::nvp2p::{Gpu, GPU_PAGE_SIZE};
use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::Instant;

/// Allocates `mrs` GPU pages and registers each as an MR; on an error, undoes what it did.
fn carrying(path: &Path, gpu: &Gpu, mrs: u32) -> Result<(u64, Vec<Handle>)> {
    let a = gpu.alloc(u64::from(mrs.max(1)) * GPU_PAGE_SIZE, 0)?;
    let mut hs = Vec::with_capacity(mrs as usize);
    for i in 0..u64::from(mrs) {
        match path.reg(a.va + i * GPU_PAGE_SIZE, GPU_PAGE_SIZE) {
            Ok(h) => hs.push(h),
            Err(e) => {
                for h in hs {
                    let _ = path.dereg(h);
                }
                let _ = gpu.free(a.va);
                return Err(e);
            }
        }
    }
    Ok((a.va, hs))
}

fn one_free(path: &Path, gpu: &Gpu, mrs: u32) -> Result<OneFree> {
    let (va, hs) = carrying(path, gpu, mrs)?;
    let t = Instant::now();
    let freed = gpu.free(va);
    let free_ns = ns(t.elapsed());
    let mut states = BTreeMap::new();
    for &h in &hs {
        *states.entry(path.state_after_free(h)).or_default() += 1;
    }
    let t = Instant::now();
    let mut dereg = Ok(());
    for h in hs {
        dereg = dereg.and(path.dereg(h));
    }
    let dereg_after_ns = ns(t.elapsed());
    let callbacks = freed?;
    dereg?;
    Ok(OneFree {
        mrs,
        free_ns,
        free_ns_per_mr: free_ns as f64 / f64::from(mrs.max(1)),
        callbacks,
        dereg_after_ns,
        mr_state_after_free: states,
    })
}

fn concurrent(path: &Path, gpu: &Gpu, threads: u32, mrs_each: u32) -> Result<ConcurrentFrees> {
    let mut held = Vec::new();
    for _ in 0..threads {
        match carrying(path, gpu, mrs_each) {
            Ok(c) => held.push(c),
            Err(e) => {
                for (va, hs) in held {
                    let _ = gpu.free(va);
                    for h in hs {
                        let _ = path.dereg(h);
                    }
                }
                return Err(e);
            }
        }
    }
    let start = Barrier::new(held.len());
    let timed: Vec<(u64, Result<u32>)> = std::thread::scope(|s| {
        let workers: Vec<_> = held
            .iter()
            .map(|(va, _)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let t = Instant::now();
                    let r = gpu.free(*va);
                    (ns(t.elapsed()), r)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    (
                        0,
                        Err(EmuError::Invalid("a freeing thread panicked".into())),
                    )
                })
            })
            .collect()
    });
    let mut dereg = Ok(());
    for (_, hs) in held {
        for h in hs {
            dereg = dereg.and(path.dereg(h));
        }
    }
    let mut callbacks = 0;
    let mut free_ns = Vec::new();
    for (t, r) in timed {
        callbacks += r?;
        free_ns.push(t);
    }
    dereg?;
    Ok(ConcurrentFrees {
        threads,
        mrs_each,
        free_ns,
        callbacks,
    })
}

/// The series `--inval-mrs` and `--inval-concurrent` ask for.
pub(super) fn inval_scale(m: &MeasureArgs, path: &Path, gpu: &Gpu) -> Result<InvalScale> {
    let frees = m
        .inval_mrs
        .iter()
        .map(|&n| one_free(path, gpu, n))
        .collect::<Result<Vec<_>>>()?;
    let concurrent = match m.inval_concurrent {
        0 => None,
        k => Some(concurrent(path, gpu, k, m.inval_concurrent_mrs)?),
    };
    Ok(InvalScale { frees, concurrent })
}

/// Problems of a path's series: a client of the invalidating API (`persistent` false) must get
/// one callback per MR of the freed allocation, a persistent one none.
pub(super) fn check(name: &str, persistent: bool, s: &InvalScale) -> Vec<String> {
    let per_mr = u32::from(!persistent);
    let mut bad = Vec::new();
    for f in &s.frees {
        if f.callbacks != f.mrs * per_mr {
            bad.push(format!(
                "{name}: a free under {} MRs ran {} callbacks, expected {}",
                f.mrs,
                f.callbacks,
                f.mrs * per_mr
            ));
        }
        if f.free_ns == 0 {
            bad.push(format!("{name}: a free under {} MRs took no time", f.mrs));
        }
    }
    if let Some(c) = &s.concurrent {
        let want = c.threads * c.mrs_each * per_mr;
        if c.callbacks != want || c.free_ns.len() != c.threads as usize {
            bad.push(format!(
                "{name}: {} concurrent frees of {} MRs each ran {} callbacks over {} frees, expected \
                 {want} over {}",
                c.threads,
                c.mrs_each,
                c.callbacks,
                c.free_ns.len(),
                c.threads
            ));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(mrs: u32, callbacks: u32) -> OneFree {
        OneFree {
            mrs,
            free_ns: 1000,
            free_ns_per_mr: 1000.0 / f64::from(mrs),
            callbacks,
            dereg_after_ns: 10,
            mr_state_after_free: BTreeMap::new(),
        }
    }

    #[test]
    fn callbacks_follow_the_client_mode() {
        let s = InvalScale {
            frees: vec![free(1, 1), free(10, 10)],
            concurrent: Some(ConcurrentFrees {
                threads: 2,
                mrs_each: 4,
                free_ns: vec![5, 6],
                callbacks: 8,
            }),
        };
        assert!(check("nvpeer-inval", false, &s).is_empty());
        // The same counts from a persistent client: every free is named.
        assert_eq!(check("nvpeer-persistent", true, &s).len(), 3);
        let quiet = InvalScale {
            frees: vec![free(10, 0)],
            concurrent: None,
        };
        assert!(check("nvpeer-persistent", true, &quiet).is_empty());
        assert_eq!(
            check("nvpeer-inval", false, &quiet),
            ["nvpeer-inval: a free under 10 MRs ran 0 callbacks, expected 10"]
        );
        // The document round-trips.
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(serde_json::from_value::<InvalScale>(v).unwrap(), s);
    }
}
