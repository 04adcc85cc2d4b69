//! How `reg.*` (and `inval.*`) prove that GPU registrations went through the peer-memory client
//! and not through something else that happened to succeed (issue 37, item 2).
//!
//! Three sources, in order:
//!
//! 1. the peer-memory core's counters of the client (`/sys/kernel/mm/memory_peers/<client>/`,
//!    `num_alloc_mrs` / `num_dealloc_mrs`), where the core keeps them;
//! 2. where it does not (DOCA-OFED >= 24.04 on a kernel without the `mm_kobj` export, i.e. every
//!    7.x kernel), nvpeer's own debugfs `stats` (`registrations`: successful `dma_map`, one per MR
//!    handed to the HCA; `release_calls`: one per registration ended), when nvpeer serves `nv_mem`
//!    and its debugfs can be read. nvpeer's counters are global over its clients, so they count the
//!    persistent client and the invalidating one alike; which one pinned is told apart by
//!    `provider_get_pages_persistent` and `provider_get_pages` (uapi/debugfs.md);
//! 3. otherwise nothing on the node can tell: another module serves `nv_mem` (NVIDIA's
//!    `nvidia_peermem` or Mellanox's `nv_peer_mem` publish no counters), nvpeer's debugfs is not
//!    readable, or no module serves `nv_mem` at all. The case then says so by name
//!    ([`Proof::Unprovable`]) instead of passing on the registrations alone.

use nvpeer_doctor::checks::{nv_mem_providers, NvMemProvider};
use nvpeer_doctor::probes::Probes;
use nvpeer_doctor::root::SysRoot;
use nvpeer_uapi::debugfs::{self, Config, ConfigClient, Stats};
use nvpeer_uapi::memory_peers::{self, PeerCounters};
use std::path::Path;

/// Where the registrations of a GPU VA path are counted on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The core's `memory_peers` counters of its main client.
    Core,
    /// nvpeer's debugfs `stats`; `clients`: the clients its `config` lists (`nv_mem persistent`,
    /// or `nv_mem invalidating, ...` and `nv_mem_nc persistent`).
    Nvpeer { clients: Vec<ConfigClient> },
    /// Nothing here can count them: why, in words.
    Unprovable(String),
}

/// One read of the counters a [`Proof`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    Core(PeerCounters),
    Nvpeer(Stats),
}

/// What moved between two [`Snapshot`]s of the same source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moved {
    /// Registrations made (`num_alloc_mrs`; nvpeer: `registrations`).
    pub made: u64,
    /// Registrations ended (`num_dealloc_mrs`; nvpeer: `release_calls`).
    pub ended: u64,
    /// NVIDIA free callbacks (`num_free_callbacks`; nvpeer: `callbacks`).
    pub callbacks: u64,
    /// nvpeer only: pins through `nvidia_p2p_get_pages_persistent` and `nvidia_p2p_get_pages`.
    pub pins: Option<(u64, u64)>,
    /// The counters' names, for the report: `nv_mem: num_alloc_mrs +3, num_dealloc_mrs +3`.
    pub text: String,
}

/// The verdict on `n` registrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// They went through the peer client: the counters, for the detail.
    Proven(String),
    /// They did not: (detail, probable cause).
    Failed(String, String),
    /// Nothing can tell: why.
    Unprovable(String),
}

/// Decides the source for the node under `root` (`/` on the running system).
pub fn decide(root: &Path) -> Proof {
    if memory_peers::listed(root) {
        return Proof::Core;
    }
    let sys = SysRoot::new(root);
    let ctx = nvpeer_doctor::checks::Ctx::load(&sys, Probes::none());
    let providers = nv_mem_providers(&ctx);
    decide_from(
        &providers,
        debugfs::read_config(root).ok(),
        debugfs::read_stats(root).is_ok(),
    )
}

/// [`decide`] for a core without `memory_peers`, from what the doctor tells about who serves
/// `nv_mem` and what nvpeer's debugfs holds.
pub fn decide_from(
    providers: &[NvMemProvider],
    config: Option<Config>,
    stats_readable: bool,
) -> Proof {
    let no_list = "this peer-memory core keeps no /sys/kernel/mm/memory_peers (DOCA-OFED >= 24.04 \
                   on a kernel without the mm_kobj export)";
    let fallback = "a registration that silently fell back to another path would look the same";
    let others: Vec<String> = providers
        .iter()
        .filter(|p| p.owner != "nvpeer")
        .map(describe)
        .collect();
    let nvpeer = providers.iter().find(|p| p.owner == "nvpeer");
    if !others.is_empty() {
        return Proof::Unprovable(format!(
            "the peer path cannot be proven here: nv_mem is served by {}, which publishes no \
             registration counters, and {no_list}; {fallback}. To prove it: load nvpeer (it counts \
             every registration in /sys/kernel/debug/nvpeer/stats), or run on a core that keeps \
             memory_peers",
            others.join(" and ")
        ));
    }
    match (nvpeer, config, stats_readable) {
        (Some(_), Some(cfg), true) => Proof::Nvpeer {
            clients: cfg.clients,
        },
        (Some(p), _, _) => Proof::Unprovable(format!(
            "the peer path cannot be proven here: nvpeer serves nv_mem (module {}) but its debugfs \
             stats and config cannot be read, and {no_list}; {fallback}. Run as root with debugfs \
             mounted (mount -t debugfs none /sys/kernel/debug)",
            p.module
        )),
        (None, _, _) => Proof::Unprovable(format!(
            "the peer path cannot be proven here: no module that serves nv_mem is loaded \
             (nvpeer, nvidia_peermem, nv_peer_mem), and {no_list}: whatever took these \
             registrations is unknown; {fallback}"
        )),
    }
}

fn describe(p: &NvMemProvider) -> String {
    let whose = match p.owner {
        "nvidia" => "NVIDIA's",
        "mellanox" => "Mellanox's",
        _ => "not identified",
    };
    match &p.version {
        Some(v) => format!("{} ({whose}, {v})", p.module),
        None => format!("{} ({whose})", p.module),
    }
}

impl Proof {
    /// Whether registrations can be counted.
    pub fn counts(&self) -> bool {
        !matches!(self, Proof::Unprovable(_))
    }

    /// Reads the counters this proof names under `root`; `None` when they cannot be read now.
    pub fn snapshot(&self, root: &Path) -> Option<Snapshot> {
        match self {
            Proof::Core => memory_peers::main_client(root).map(Snapshot::Core),
            Proof::Nvpeer { .. } => debugfs::read_stats(root).ok().map(Snapshot::Nvpeer),
            Proof::Unprovable(_) => None,
        }
    }

    /// What `cap.peer-client` says about how registrations are counted.
    pub fn describe(&self) -> String {
        match self {
            Proof::Core => "registrations counted by the core's memory_peers counters".into(),
            Proof::Nvpeer { clients } => format!(
                "registrations counted by nvpeer's debugfs stats (clients: {})",
                clients_text(clients)
            ),
            Proof::Unprovable(why) => why.clone(),
        }
    }

    /// Judges `n` registrations (each one made and ended) between `before` and `after`;
    /// `balanced`: made and ended must also be equal (no pin left behind).
    pub fn judge(
        &self,
        before: Option<&Snapshot>,
        after: Option<&Snapshot>,
        n: u64,
        balanced: bool,
    ) -> Judgement {
        if let Proof::Unprovable(why) = self {
            return Judgement::Unprovable(why.clone());
        }
        let Some(m) = before.zip(after).and_then(|(b, a)| moved(b, a)) else {
            return Judgement::Failed(
                "the peer client's counters could not be read before and after".into(),
                match self {
                    Proof::Core => {
                        "no client under /sys/kernel/mm/memory_peers (module not loaded?)"
                    }
                    _ => "nvpeer's /sys/kernel/debug/nvpeer/stats went away (module unloaded?)",
                }
                .into(),
            );
        };
        let client = match (self, before) {
            (_, Some(Snapshot::Core(c))) => format!("the peer client '{}'", c.client),
            _ => "nvpeer's client".to_string(),
        };
        if m.made < n || m.ended < n {
            return Judgement::Failed(
                format!("{}, expected +{n} each", m.text),
                format!(
                    "registrations did not go through {client} (another client claimed them, or \
                     host pages were pinned)"
                ),
            );
        }
        if balanced && m.made != m.ended {
            return Judgement::Failed(
                m.text.clone(),
                format!("registrations leaked in {client} (dereg did not unpin)"),
            );
        }
        if let (Proof::Nvpeer { clients }, Some((_, invalidating))) = (self, m.pins) {
            if invalidating > 0 && !clients.iter().any(ConfigClient::invalidates) {
                return Judgement::Failed(
                    format!(
                        "{}; nvpeer lists only persistent clients ({})",
                        m.text,
                        clients_text(clients)
                    ),
                    "pins went through nvidia_p2p_get_pages (the invalidating API) while nvpeer \
                     registered no invalidating client: the client mode nvpeer publishes is not \
                     the one it pinned with"
                        .into(),
                );
            }
        }
        Judgement::Proven(m.text)
    }
}

fn clients_text(clients: &[ConfigClient]) -> String {
    if clients.is_empty() {
        return "none listed".into();
    }
    clients
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What moved from `before` to `after`; `None` when they are not of the same source.
pub fn moved(before: &Snapshot, after: &Snapshot) -> Option<Moved> {
    match (before, after) {
        (Snapshot::Core(b), Snapshot::Core(a)) => {
            let d = a.delta(b);
            let g = |k: &str| d.get(k).copied().unwrap_or(0);
            let (made, ended) = (g("num_alloc_mrs"), g("num_dealloc_mrs"));
            Some(Moved {
                made,
                ended,
                callbacks: g("num_free_callbacks"),
                pins: None,
                text: format!(
                    "{}: num_alloc_mrs +{made}, num_dealloc_mrs +{ended}",
                    a.client
                ),
            })
        }
        (Snapshot::Nvpeer(b), Snapshot::Nvpeer(a)) => {
            let d = a.delta(b);
            let g = |k: &str| d.get(k).copied().unwrap_or(0);
            let (made, ended) = (g("registrations"), g("release_calls"));
            let (p, i) = (g("provider_get_pages_persistent"), g("provider_get_pages"));
            Some(Moved {
                made,
                ended,
                callbacks: g("callbacks"),
                pins: Some((p, i)),
                text: format!(
                    "nvpeer stats: registrations +{made}, release_calls +{ended} (persistent pins \
                     +{p}, invalidating pins +{i})"
                ),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvpeer_uapi::fake_root::FakeRoot;

    const PERSISTENT: &str =
        "version 0.1.0\npersistent_api_support 1\npeerdirect_support 0\nclient nv_mem persistent\n";
    const INVALIDATING: &str = "version 0.1.0\npersistent_api_support 0\npeerdirect_support 0\n\
        client nv_mem invalidating, INVALIDATE_UNMAPS\nclient nv_mem_nc persistent\n";

    /// nvpeer loaded under its drop-in name, with its debugfs, no memory_peers.
    fn nvpeer_root(config: &str) -> FakeRoot {
        let r = FakeRoot::new();
        r.file("/sys/module/nvidia_peermem/refcnt", "0\n")
            .file("/sys/module/nvidia_peermem/version", "0.1.0\n")
            .file("/sys/module/nvidia/version", "580.95.05\n")
            .file(debugfs::CONFIG, config)
            .file(debugfs::STATS, stats(0, 0, 0, 0));
        r
    }

    fn stats(reg: u64, rel: u64, persistent: u64, invalidating: u64) -> String {
        format!(
            "acquire_calls {reg}\nregistrations {reg}\nrelease_calls {rel}\n\
             provider_get_pages {invalidating}\nprovider_get_pages_persistent {persistent}\n\
             callbacks 0\n"
        )
    }

    #[test]
    fn the_core_list_wins_when_it_is_there() {
        let r = nvpeer_root(PERSISTENT);
        r.dir("/sys/kernel/mm/memory_peers/nv_mem");
        assert_eq!(decide(r.path()), Proof::Core);
    }

    #[test]
    fn nvpeer_counts_in_both_client_modes() {
        for (config, persistent, n_clients) in [(PERSISTENT, true, 1), (INVALIDATING, false, 2)] {
            let r = nvpeer_root(config);
            let proof = decide(r.path());
            let Proof::Nvpeer { clients } = &proof else {
                panic!("{proof:?}");
            };
            assert_eq!(clients.len(), n_clients);
            let before = proof.snapshot(r.path());
            // 5 registrations through the client of that mode, all deregistered.
            let (p, i) = if persistent { (5, 0) } else { (0, 5) };
            r.file(debugfs::STATS, stats(5, 5, p, i));
            let after = proof.snapshot(r.path());
            match proof.judge(before.as_ref(), after.as_ref(), 5, true) {
                Judgement::Proven(t) => {
                    assert!(t.contains("registrations +5, release_calls +5"), "{t}");
                    assert!(t.contains(&format!("invalidating pins +{i}")), "{t}");
                }
                j => panic!("{j:?}"),
            }
        }
    }

    #[test]
    fn registrations_nvpeer_did_not_see_fail() {
        let r = nvpeer_root(PERSISTENT);
        let proof = decide(r.path());
        let before = proof.snapshot(r.path());
        r.file(debugfs::STATS, stats(2, 2, 2, 0));
        let after = proof.snapshot(r.path());
        match proof.judge(before.as_ref(), after.as_ref(), 5, false) {
            Judgement::Failed(d, c) => {
                assert!(
                    d.contains("registrations +2") && d.contains("expected +5"),
                    "{d}"
                );
                assert!(c.contains("did not go through nvpeer's client"), "{c}");
            }
            j => panic!("{j:?}"),
        }
        // Leaked: made but not ended, where the case asks for a balance.
        r.file(debugfs::STATS, stats(9, 7, 9, 0));
        let leaked = proof.snapshot(r.path());
        assert!(matches!(
            proof.judge(before.as_ref(), leaked.as_ref(), 5, true),
            Judgement::Failed(_, c) if c.contains("leaked")
        ));
        // The stats went away between the two reads.
        assert!(matches!(
            proof.judge(before.as_ref(), None, 5, false),
            Judgement::Failed(_, c) if c.contains("went away")
        ));
    }

    #[test]
    fn invalidating_pins_under_a_persistent_module_fail() {
        let r = nvpeer_root(PERSISTENT);
        let proof = decide(r.path());
        let before = proof.snapshot(r.path());
        r.file(debugfs::STATS, stats(3, 3, 0, 3));
        let after = proof.snapshot(r.path());
        assert!(matches!(
            proof.judge(before.as_ref(), after.as_ref(), 3, false),
            Judgement::Failed(_, c) if c.contains("invalidating API")
        ));
    }

    #[test]
    fn another_module_serving_nv_mem_is_named_as_unprovable() {
        // NVIDIA's nvidia_peermem: its version is the driver's.
        let r = FakeRoot::new();
        r.file("/sys/module/nvidia_peermem/refcnt", "0\n")
            .file("/sys/module/nvidia_peermem/version", "580.95.05\n")
            .file("/sys/module/nvidia/version", "580.95.05\n");
        let proof = decide(r.path());
        let Proof::Unprovable(why) = &proof else {
            panic!("{proof:?}");
        };
        assert!(
            why.contains("cannot be proven")
                && why.contains("nvidia_peermem (NVIDIA's, 580.95.05)"),
            "{why}"
        );
        assert!(!proof.counts());
        assert_eq!(proof.snapshot(r.path()), None);
        assert!(matches!(
            proof.judge(None, None, 1, false),
            Judgement::Unprovable(w) if w == *why
        ));
        // Mellanox's nv_peer_mem.
        let r = FakeRoot::new();
        r.file("/sys/module/nv_peer_mem/refcnt", "0\n")
            .file("/sys/module/nv_peer_mem/version", "1.3-0\n");
        match decide(r.path()) {
            Proof::Unprovable(w) => assert!(w.contains("nv_peer_mem (Mellanox's, 1.3-0)"), "{w}"),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn unreadable_debugfs_and_no_module_are_named_too() {
        // nvpeer under its own name, debugfs not mounted (or not root).
        let r = FakeRoot::new();
        r.file("/sys/module/nvpeer/refcnt", "0\n");
        match decide(r.path()) {
            Proof::Unprovable(w) => {
                assert!(w.contains("nvpeer serves nv_mem (module nvpeer)"), "{w}");
                assert!(w.contains("as root with debugfs mounted"), "{w}");
            }
            p => panic!("{p:?}"),
        }
        let r = FakeRoot::new();
        match decide(r.path()) {
            Proof::Unprovable(w) => assert!(w.contains("no module that serves nv_mem"), "{w}"),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn core_counters_as_before() {
        let r = FakeRoot::new();
        let dir = memory_peers::DIR;
        r.file(&format!("{dir}/nv_mem/num_alloc_mrs"), "1\n")
            .file(&format!("{dir}/nv_mem/num_dealloc_mrs"), "1\n");
        let proof = decide(r.path());
        let before = proof.snapshot(r.path());
        r.file(&format!("{dir}/nv_mem/num_alloc_mrs"), "4\n")
            .file(&format!("{dir}/nv_mem/num_dealloc_mrs"), "4\n")
            .file(&format!("{dir}/nv_mem/num_free_callbacks"), "1\n");
        let after = proof.snapshot(r.path());
        assert_eq!(
            proof.judge(before.as_ref(), after.as_ref(), 3, true),
            Judgement::Proven("nv_mem: num_alloc_mrs +3, num_dealloc_mrs +3".into())
        );
        let m = before
            .as_ref()
            .zip(after.as_ref())
            .and_then(|(b, a)| moved(b, a));
        assert_eq!(m.map(|m| m.callbacks), Some(1));
        // Snapshots of different sources do not compare.
        assert_eq!(
            moved(
                &Snapshot::Nvpeer(Stats::default()),
                &after.unwrap_or(Snapshot::Nvpeer(Stats::default()))
            ),
            None
        );
    }
}
