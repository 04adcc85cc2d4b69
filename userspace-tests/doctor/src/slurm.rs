//! `nvpeer doctor --slurm`: the doctor as Slurm's `HealthCheckProgram`, draining this node with
//! the root cause's fault code when it is not ready and resuming it when it is ready again, but
//! only when nvpeer drained it (as LBNL NHC resumes only the nodes it drained itself);
//! `--slurm=prolog` and `--slurm=epilog`, the same drain around each job (see [`Mode`]).
//!
//! Slurm's side (slurm.conf(5), `HealthCheckProgram`): slurmd runs the program as root every
//! `HealthCheckInterval` seconds and at its start, kills it after `HealthCheckTimeout` (60 s by
//! default), passes `SLURMD_NODENAME`, and takes no action itself: the program drains the node
//! with `scontrol update NodeName=... State=DRAIN Reason=...`. The node's state and reason are
//! read with `sinfo --Node --nodes NODE --format '%t|%E'` (compact state, reason). A reason this
//! mode writes starts with [`PREFIX`]; a node drained or down for any other reason is left alone.

use crate::report::{Report, Verdict};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use wait_timeout::ChildExt;

/// How every reason this mode writes begins: what tells its drains from an admin's.
pub const PREFIX: &str = "nvpeer:";

/// The longest reason written (printable ASCII), so that `sinfo -R` stays one line.
pub const MAX_REASON: usize = 120;

/// How long one `sinfo` or `scontrol` may take before it is killed (slurmd kills the whole
/// program after `HealthCheckTimeout`).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Which of slurmd's hooks runs the doctor.
///
/// A prolog or epilog that exits non-zero makes slurmctld drain the node itself, with the reason
/// `Prolog error` or `Epilog error`, and requeue (prolog) the job; but its `drain_nodes` leaves
/// a node that is drained already, and its reason, as they are (slurmctld's node_mgr.c,
/// `_drain_node`; job_mgr.c, the epilog's `return_code`). So the prolog and epilog forms drain
/// the node first, with the fault code, and then exit 1: the job does not start on a node that is
/// not ready, and the reason an operator reads is nvpeer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `HealthCheckProgram`: drain a node that is not ready, resume one nvpeer drained.
    Health,
    /// `Prolog`: before a job; drain a node that is not ready and exit 1 (slurmd then requeues
    /// the job). Never resumes: that is the health check's.
    Prolog,
    /// `Epilog`: after a job; drain a node that is not ready and exit 1. Never resumes.
    Epilog,
}

impl Mode {
    /// The flag as written.
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Health => "--slurm",
            Mode::Prolog => "--slurm=prolog",
            Mode::Epilog => "--slurm=epilog",
        }
    }

    /// The action that needs nothing from Slurm: a prolog or epilog on a node that is ready, or
    /// that could not be checked, leaves the node as it is without asking slurmctld (a job's
    /// start waits on it). `None`: ask Slurm and [`decide`].
    pub fn settled(self, r: &Report) -> Option<Action> {
        match (self, r.verdict) {
            (Mode::Health, _) | (_, Verdict::NotReady) => None,
            (_, Verdict::Ready) => Some(Action::Leave("ready".into())),
            (_, Verdict::CouldNotCheck) => Some(Action::Leave(
                "could not check (nvpeer doctor says why): not drained, the job goes on".into(),
            )),
        }
    }

    /// The exit status's verdict: the doctor's for the health check; for a prolog or epilog,
    /// failed (exit 1) only when the node is not ready, since any other non-zero exit would make
    /// slurmctld drain the node (`Prolog error`) for what the doctor could not check.
    pub fn verdict(self, v: Verdict) -> nvpeer_verdict::Verdict {
        match (self, v) {
            (Mode::Health, v) => v.into(),
            (_, Verdict::NotReady) => nvpeer_verdict::Verdict::Failed,
            (_, _) => nvpeer_verdict::Verdict::Passed,
        }
    }
}

/// What Slurm says about the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// `sinfo`'s compact state: `idle`, `alloc`, `mix`, `drain`, `drng`, `down`, ... (a trailing
    /// `*`, `~`, `#`, `!`, `%`, `$`, `@` or `^` flag included).
    pub state: String,
    /// The reason set on it (`none` when there is none).
    pub reason: String,
}

impl NodeState {
    /// Drained or draining (`drain`, `drng`, with any flag).
    pub fn draining(&self) -> bool {
        self.state.starts_with("drain") || self.state.starts_with("drng")
    }

    /// Whether nvpeer set the reason.
    pub fn ours(&self) -> bool {
        self.reason.starts_with(PREFIX)
    }
}

/// What the health check does to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `scontrol update NodeName=N State=DRAIN Reason=R` (also to change the reason of a node
    /// nvpeer drained for another fault).
    Drain(String),
    /// `scontrol update NodeName=N State=RESUME`: nvpeer drained it and the node is ready.
    Resume,
    /// Nothing; why.
    Leave(String),
}

/// The reason for a node that is not ready: [`PREFIX`], the root cause's code and check id and
/// its summary, printable ASCII within [`MAX_REASON`] bytes.
pub fn reason(r: &Report) -> String {
    let text = match r.root_cause() {
        Some(c) => match c.code {
            Some(code) => format!("{PREFIX} {code} {}: {}", c.id, c.summary),
            None => format!("{PREFIX} {}: {}", c.id, c.summary),
        },
        None => format!("{PREFIX} GPUDirect RDMA not ready (nvpeer doctor names the causes)"),
    };
    let mut out: String = text
        .chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect();
    if out.len() > MAX_REASON {
        out.truncate(MAX_REASON - 3);
        out.push_str("...");
    }
    out
}

/// The action for a report about the node, given what Slurm says about it.
pub fn decide(r: &Report, node: &NodeState) -> Action {
    match r.verdict {
        Verdict::Ready if node.draining() && node.ours() => Action::Resume,
        Verdict::Ready if node.draining() => Action::Leave(format!(
            "ready, but drained by someone else ({}): left to them",
            node.reason
        )),
        Verdict::Ready => Action::Leave("ready".into()),
        Verdict::NotReady => {
            let want = reason(r);
            if node.draining() && !node.ours() {
                Action::Leave(format!(
                    "not ready, already drained by someone else ({}): left as it is",
                    node.reason
                ))
            } else if !node.ours() && node.reason != "none" && !node.reason.is_empty() {
                // An admin's (or another tool's) reason, whatever the state it came with
                // (fail, maint, a reservation): never replaced.
                Action::Leave(format!(
                    "not ready, but {} for a reason of someone else ({}): left as it is",
                    node.state, node.reason
                ))
            } else if node.state.starts_with("down") && !node.ours() {
                Action::Leave(format!("not ready, but down ({})", node.reason))
            } else if node.draining() && node.reason == want {
                Action::Leave("not ready, drained already for this fault".into())
            } else {
                Action::Drain(want)
            }
        }
        Verdict::CouldNotCheck => Action::Leave(
            "could not check (nvpeer doctor says why): neither drained nor resumed".into(),
        ),
    }
}

/// Why the health check could not act.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("{0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("{0} did not finish within {1:?}: killed")]
    Timeout(String, Duration),
    #[error("{0} failed ({1}): {2}")]
    Failed(String, std::process::ExitStatus, String),
    #[error("sinfo knows no node {0}")]
    NoSuchNode(String),
}

/// Where `sinfo` and `scontrol` are: `bin` when given, else found on `PATH`.
pub struct Slurm {
    bin: Option<PathBuf>,
}

impl Slurm {
    pub fn new(bin: Option<&Path>) -> Self {
        Self {
            bin: bin.map(Path::to_path_buf),
        }
    }

    fn program(&self, name: &str) -> PathBuf {
        match &self.bin {
            Some(b) => b.join(name),
            None => PathBuf::from(name),
        }
    }

    /// Runs a Slurm command with a time limit; its standard output.
    fn run(&self, name: &str, args: &[&str]) -> Result<String, SlurmError> {
        use std::io::Read;
        let what = format!("{name} {}", args.join(" "));
        let mut child = Command::new(self.program(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SlurmError::Spawn(what.clone(), e))?;
        // Both pipes drained while the command runs (at most 1 MiB each kept), so that one that
        // writes more than a pipe holds finishes instead of blocking until its time is up.
        let drain = |p: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                if let Some(p) = p {
                    let _ = p.take(1 << 20).read_to_end(&mut v);
                }
                v
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let status = match child.wait_timeout(COMMAND_TIMEOUT) {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Err(SlurmError::Timeout(what.clone(), COMMAND_TIMEOUT)),
            Err(e) => Err(SlurmError::Spawn(what.clone(), e)),
        };
        if status.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let (out, err) = (
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        );
        let status = status?;
        if !status.success() {
            let err = String::from_utf8_lossy(&err);
            return Err(SlurmError::Failed(what, status, err.trim().to_string()));
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The node's state and reason.
    pub fn state(&self, node: &str) -> Result<NodeState, SlurmError> {
        let out = self.run(
            "sinfo",
            &["--noheader", "--Node", "--nodes", node, "--format", "%t|%E"],
        )?;
        let line = out
            .lines()
            .find(|l| !l.trim().is_empty())
            .ok_or_else(|| SlurmError::NoSuchNode(node.to_string()))?;
        let (state, reason) = line.split_once('|').unwrap_or((line, "none"));
        Ok(NodeState {
            state: state.trim().to_string(),
            reason: reason.trim().to_string(),
        })
    }

    /// Carries out `action` on `node`.
    pub fn act(&self, node: &str, action: &Action) -> Result<(), SlurmError> {
        let name = format!("NodeName={node}");
        match action {
            Action::Drain(reason) => {
                let reason = format!("Reason={reason}");
                self.run("scontrol", &["update", &name, "State=DRAIN", &reason])
                    .map(drop)
            }
            Action::Resume => self
                .run("scontrol", &["update", &name, "State=RESUME"])
                .map(drop),
            Action::Leave(_) => Ok(()),
        }
    }
}

/// This node's name in Slurm: `SLURMD_NODENAME` (slurmd sets it for the health check), else
/// the host name up to its first dot (Slurm's default `NodeName` is the short host name).
pub fn node_name() -> Option<String> {
    if let Some(n) = std::env::var_os("SLURMD_NODENAME").filter(|n| !n.is_empty()) {
        return n.into_string().ok();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let short = host.trim().split('.').next()?.to_string();
    (!short.is_empty()).then_some(short)
}

/// One line for slurmd's log: the node, the verdict and what was done.
pub fn line(mode: Mode, node: &str, r: &Report, action: &Action, dry_run: bool) -> String {
    let verdict = match r.verdict {
        Verdict::Ready => "ready",
        Verdict::NotReady => "not ready",
        Verdict::CouldNotCheck => "could not check",
    };
    let done = match (action, dry_run) {
        (Action::Drain(reason), false) => format!("drained: {reason}"),
        (Action::Drain(reason), true) => format!("would drain (--slurm-dry-run): {reason}"),
        (Action::Resume, false) => "resumed (nvpeer had drained it)".to_string(),
        (Action::Resume, true) => "would resume (--slurm-dry-run)".to_string(),
        (Action::Leave(why), _) => format!("left as it is: {why}"),
    };
    let job = match (mode, r.verdict) {
        (Mode::Prolog, Verdict::NotReady) => "; exit 1: the job does not start here",
        (Mode::Epilog, Verdict::NotReady) => "; exit 1",
        _ => "",
    };
    format!(
        "nvpeer doctor {}: node {node} {verdict}; {done}{job}",
        mode.flag()
    )
}
