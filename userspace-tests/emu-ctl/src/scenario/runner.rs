//! One scenario run: the emulators reset, the body, then the verdict from the violations both
//! emulators recorded and what the teardown left behind.

use super::env::{Env, Opts};
use super::Scenario;
use crate::error::Result;
use crate::nvp2p;
use crate::peer_mem;

/// Outcome of one scenario run.
#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    /// Scenario name.
    pub name: String,
    /// Passed?
    pub pass: bool,
    /// Verdict line (names the broken rule on failure).
    pub message: String,
    /// Step log.
    pub log: String,
}

/// Runs one scenario with the invariant checks (or the `expect` check) around it.
pub fn run(sc: &Scenario, opts: Opts) -> Result<Outcome> {
    let env = Env::open(opts)?;
    env.gpu.reset()?;
    env.core.reset()?;
    let mut cfg = env.core.config()?;
    cfg.hang_timeout_ms = env.opts.hang_timeout_ms;
    env.core.set_config(cfg)?;
    let body = (sc.run)(&env);
    // Disarm everything the body armed, even when it failed half-way.
    for p in 0..peer_mem::DELAY_POINTS.len() as u32 {
        let _ = env.core.set_delay(p, 0);
    }
    for op in 0..nvp2p::FAULT_OPS as u32 {
        let _ = env.gpu.set_fault(op, nvp2p::fault_mode::OFF, 0, 0, 0);
    }
    // A pin still live after the body is a leak: have the provider record it by name.
    if env.gpu.stats()?.live_pins != 0 {
        let n = env.gpu.check_leaks()?;
        env.note(format!(
            "{n} pin(s) live after the scenario: leak check run"
        ));
    }
    let accounted = env.accounted.lock().map(|a| a.clone()).unwrap_or_default();
    let found: Vec<String> = recorded(&env)?
        .into_iter()
        .filter(|f| {
            !accounted
                .iter()
                .any(|a| f.starts_with(&format!("{a}: provider:")))
        })
        .collect();
    let log = env.log.lock().map(|l| l.clone()).unwrap_or_default();
    let (pass, message) = if env.opts.expect.is_empty() {
        match (body, found.is_empty()) {
            (Ok(()), true) => match leftovers(&env)? {
                None => (true, format!("{}: ok", sc.name)),
                Some(m) => (false, format!("{}: {m}", sc.name)),
            },
            (Ok(()), false) => (
                false,
                format!("{}: violation recorded: {}", sc.name, found.join("; ")),
            ),
            (Err(e), true) => (false, format!("{}: {e}", sc.name)),
            (Err(e), false) => (
                false,
                format!("{}: {e}; violation recorded: {}", sc.name, found.join("; ")),
            ),
        }
    } else {
        let hit: Vec<&String> = found
            .iter()
            .filter(|f| {
                env.opts
                    .expect
                    .iter()
                    .any(|x| f.starts_with(&format!("{x}:")))
            })
            .collect();
        let body_note = match body {
            Ok(()) => String::new(),
            Err(e) => format!(" (scenario itself: {e})"),
        };
        if hit.is_empty() {
            (
                false,
                format!(
                    "{}: NOT caught: expected violation {} was not recorded{body_note}; recorded: [{}]",
                    sc.name,
                    env.opts.expect.join(" or "),
                    found.join("; ")
                ),
            )
        } else {
            (
                true,
                format!(
                    "{}: caught: {}{body_note}",
                    sc.name,
                    hit.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            )
        }
    };
    Ok(Outcome {
        name: sc.name.into(),
        pass,
        message,
        log,
    })
}

/// Every violation either emulator recorded, as `rule: text`.
pub fn recorded(env: &Env) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let ps = env.gpu.stats()?;
    for (i, (name, what)) in nvp2p::VIOLATIONS.iter().enumerate() {
        if ps.violations[i] != 0 {
            out.push(format!("{name}: provider: {what} (x{})", ps.violations[i]));
        }
    }
    for v in env.core.violations()? {
        out.push(format!("{}: core: {}", v.rule, v.text.trim()));
    }
    let cs = env.core.stats()?;
    if cs.deadlocks != 0 && !out.iter().any(|s| s.starts_with("deadlock:")) {
        out.push(format!(
            "deadlock: core: {} lock wait(s) abandoned by the hang detector",
            cs.deadlocks
        ));
    }
    Ok(out)
}

/// What a clean teardown must leave: nothing.
pub(super) fn leftovers(env: &Env) -> Result<Option<String>> {
    let ps = env.gpu.stats()?;
    let cs = env.core.stats()?;
    let mut bad = Vec::new();
    if ps.live_pins != 0 {
        bad.push(format!(
            "{} provider pin(s) still live (rule: every get_pages ends in one put or one callback)",
            ps.live_pins
        ));
    }
    if ps.live_mappings != 0 {
        bad.push(format!(
            "{} DMA mapping(s) still live (rule: dma_map is undone)",
            ps.live_mappings
        ));
    }
    if cs.live_mrs != 0 {
        bad.push(format!("{} MR(s) still registered", cs.live_mrs));
    }
    if cs.acquires != cs.releases {
        bad.push(format!(
            "{} acquire(s) but {} release(s) (rule: acquire ends in exactly one release)",
            cs.acquires, cs.releases
        ));
    }
    Ok(if bad.is_empty() {
        None
    } else {
        Some(bad.join("; "))
    })
}
