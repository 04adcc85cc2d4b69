//! Where this process stands in the fleet, read from the environment its launcher set: the rank,
//! the world size, and the rendezvous (rank 0's host and port). nvpeer never asks for a host list
//! of its own: the launcher placed the processes, and only Slurm says where rank 0 runs; under
//! MPI and Kubernetes the rendezvous host is given (`--rendezvous` or [`RENDEZVOUS_ENV`]).
//!
//! The variables, as each launcher documents them (docs/validation.md, "Fleet", cites the
//! pages):
//!
//! | launcher | rank | world size | rank 0's host |
//! |---|---|---|---|
//! | Slurm (`srun`) | `SLURM_PROCID` | `SLURM_NTASKS` | first host of `SLURM_STEP_NODELIST` (else `SLURM_NODELIST`) |
//! | Open MPI (`mpirun`) | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `--rendezvous` |
//! | MPICH / Hydra (PMI) | `PMI_RANK` | `PMI_SIZE` | `--rendezvous` |
//! | Kubernetes indexed Job | `JOB_COMPLETION_INDEX` | `--world-size` / [`WORLD_SIZE_ENV`] | `--rendezvous` |
//!
//! An MPI launcher's variables win over Slurm's: `mpirun` inside an `sbatch` script inherits the
//! batch step's `SLURM_PROCID` (0 in every process) while Open MPI or Hydra number the ranks.

use std::fmt;

/// The rendezvous host (and optional port) where no launcher says where rank 0 runs.
pub const RENDEZVOUS_ENV: &str = "NVPEER_FLEET_RENDEZVOUS";
/// The world size of a Kubernetes indexed Job (its `spec.completions`), which Kubernetes does
/// not put in the environment.
pub const WORLD_SIZE_ENV: &str = "NVPEER_FLEET_WORLD_SIZE";

/// The engine that started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Launcher {
    Slurm,
    OpenMpi,
    /// MPICH's Hydra or another PMI-1 process manager.
    Pmi,
    Kubernetes,
}

impl Launcher {
    /// The variable that carries the rank.
    pub fn rank_var(self) -> &'static str {
        match self {
            Launcher::Slurm => "SLURM_PROCID",
            Launcher::OpenMpi => "OMPI_COMM_WORLD_RANK",
            Launcher::Pmi => "PMI_RANK",
            Launcher::Kubernetes => "JOB_COMPLETION_INDEX",
        }
    }

    /// The variable that carries the world size (Kubernetes: ours).
    pub fn size_var(self) -> &'static str {
        match self {
            Launcher::Slurm => "SLURM_NTASKS",
            Launcher::OpenMpi => "OMPI_COMM_WORLD_SIZE",
            Launcher::Pmi => "PMI_SIZE",
            Launcher::Kubernetes => WORLD_SIZE_ENV,
        }
    }

    /// Detection order: an MPI launcher before Slurm (see the module documentation).
    const ORDER: [Launcher; 4] = [
        Launcher::OpenMpi,
        Launcher::Pmi,
        Launcher::Slurm,
        Launcher::Kubernetes,
    ];
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Slurm => "Slurm",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Pmi => "PMI (MPICH Hydra)",
            Launcher::Kubernetes => "Kubernetes indexed Job",
        })
    }
}

/// Rank 0's address: where it listens and every other rank connects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rendezvous {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Rendezvous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// This process's place in the fleet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    pub launcher: Launcher,
    pub rank: u32,
    pub world: u32,
    pub rendezvous: Rendezvous,
}

/// Why the placement could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LauncherError {
    #[error(
        "no launcher found: run under srun (SLURM_PROCID), mpirun (OMPI_COMM_WORLD_RANK or \
         PMI_RANK) or a Kubernetes indexed Job (JOB_COMPLETION_INDEX); --fleet starts no \
         processes of its own"
    )]
    NoLauncher,
    #[error("{launcher}: {var} is not set")]
    Missing {
        launcher: Launcher,
        var: &'static str,
    },
    #[error("{var}={value}: not a number")]
    NotNumber { var: &'static str, value: String },
    #[error("{launcher}: rank {rank} is not below the world size {world}")]
    RankOutOfRange {
        launcher: Launcher,
        rank: u32,
        world: u32,
    },
    #[error("{launcher}: a world of {world} process(es): a fleet needs at least 2 nodes")]
    TooSmall { launcher: Launcher, world: u32 },
    #[error(
        "{launcher}: no rendezvous host: give --rendezvous HOST[:PORT] (or {RENDEZVOUS_ENV}), \
         the address where rank 0 runs"
    )]
    NoRendezvous { launcher: Launcher },
    #[error("rendezvous '{0}': expected HOST, HOST:PORT or [IPv6]:PORT")]
    BadRendezvous(String),
    #[error("Slurm node list '{list}': {why}")]
    Hostlist { list: String, why: String },
    #[error(
        "Slurm: {tasks} tasks on {nodes} node(s): the fleet pairs nodes, one process per node \
         (srun --ntasks-per-node=1)"
    )]
    SharedNodes { tasks: u32, nodes: usize },
    #[error("--world-size {flag} disagrees with {var}={env}")]
    WorldDisagrees {
        flag: u32,
        var: &'static str,
        env: u32,
    },
}

/// What the command line says about the placement (the launcher says the rest).
#[derive(Debug, Clone, Default)]
pub struct Given<'a> {
    /// `--rendezvous HOST[:PORT]` (else [`RENDEZVOUS_ENV`]).
    pub rendezvous: Option<&'a str>,
    /// `--world-size` (else the launcher's, or [`WORLD_SIZE_ENV`] for Kubernetes).
    pub world: Option<u32>,
    /// The port when the rendezvous names none (`-p`).
    pub port: u16,
}

/// Reads the placement from `env` (a lookup of environment variables: [`std::env::var`] in the
/// CLI, a table in tests).
pub fn detect(
    env: &dyn Fn(&str) -> Option<String>,
    given: &Given<'_>,
) -> Result<Placement, LauncherError> {
    let launcher = Launcher::ORDER
        .into_iter()
        .find(|l| env(l.rank_var()).is_some())
        .ok_or(LauncherError::NoLauncher)?;
    let rank = number(env, launcher.rank_var())?;
    let from_env = match env(launcher.size_var()) {
        Some(_) => Some(number(env, launcher.size_var())?),
        None => None,
    };
    let world = match (given.world, from_env) {
        (Some(flag), Some(e)) if launcher != Launcher::Kubernetes && flag != e => {
            return Err(LauncherError::WorldDisagrees {
                flag,
                var: launcher.size_var(),
                env: e,
            })
        }
        (Some(flag), _) => flag,
        (None, Some(e)) => e,
        (None, None) => {
            return Err(LauncherError::Missing {
                launcher,
                var: launcher.size_var(),
            })
        }
    };
    if world < 2 {
        return Err(LauncherError::TooSmall { launcher, world });
    }
    if rank >= world {
        return Err(LauncherError::RankOutOfRange {
            launcher,
            rank,
            world,
        });
    }
    let explicit = given
        .rendezvous
        .map(str::to_string)
        .or_else(|| env(RENDEZVOUS_ENV).filter(|v| !v.trim().is_empty()));
    let rendezvous = match (explicit, launcher) {
        (Some(r), _) => parse_rendezvous(&r, given.port)?,
        (None, Launcher::Slurm) => {
            let list = env("SLURM_STEP_NODELIST")
                .or_else(|| env("SLURM_NODELIST"))
                .ok_or(LauncherError::Missing {
                    launcher,
                    var: "SLURM_STEP_NODELIST",
                })?;
            let hosts = expand_hostlist(&list).map_err(|why| LauncherError::Hostlist {
                list: list.clone(),
                why,
            })?;
            if (hosts.len() as u64) < u64::from(world) {
                return Err(LauncherError::SharedNodes {
                    tasks: world,
                    nodes: hosts.len(),
                });
            }
            Rendezvous {
                host: hosts[0].clone(),
                port: given.port,
            }
        }
        (None, l) => return Err(LauncherError::NoRendezvous { launcher: l }),
    };
    Ok(Placement {
        launcher,
        rank,
        world,
        rendezvous,
    })
}

fn number(env: &dyn Fn(&str) -> Option<String>, var: &'static str) -> Result<u32, LauncherError> {
    let v = env(var).unwrap_or_default();
    v.trim().parse().map_err(|_| LauncherError::NotNumber {
        var,
        value: v.clone(),
    })
}

/// Parses `HOST`, `HOST:PORT` or `[IPv6]:PORT` (a bare IPv6 address is a host without a port).
pub fn parse_rendezvous(s: &str, default_port: u16) -> Result<Rendezvous, LauncherError> {
    let s = s.trim();
    let bad = || LauncherError::BadRendezvous(s.to_string());
    let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad);
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, tail) = rest.split_once(']').ok_or_else(bad)?;
        match tail {
            "" => (h, default_port),
            t => (h, port(t.strip_prefix(':').ok_or_else(bad)?)?),
        }
    } else if s.matches(':').count() > 1 {
        (s, default_port)
    } else if let Some((h, p)) = s.split_once(':') {
        (h, port(p)?)
    } else {
        (s, default_port)
    };
    if host.is_empty() || host.chars().any(char::is_whitespace) {
        return Err(bad());
    }
    Ok(Rendezvous {
        host: host.to_string(),
        port,
    })
}

/// Expands Slurm's compressed host list (`node[01-04,07],gpu5,rack[1-2]-n[1-2]`) in Slurm's
/// order: comma-separated entries outside brackets, each bracket a list of numbers and ranges
/// whose zero padding is kept (`01-04`: `01`, `02`, ...), several brackets in one name expanded
/// left to right (the last one varying fastest).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for entry in split_top(list)? {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let mut names = vec![String::new()];
        let mut rest = entry;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| format!("'{entry}': '[' without ']'"))?;
            let prefix = &rest[..open];
            let values =
                expand_ranges(&rest[open + 1..close]).map_err(|why| format!("'{entry}': {why}"))?;
            names = names
                .iter()
                .flat_map(|n| values.iter().map(move |v| format!("{n}{prefix}{v}")))
                .collect();
            if names.len() > MAX_HOSTS {
                return Err(format!("more than {MAX_HOSTS} hosts"));
            }
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(format!("'{entry}': ']' without '['"));
        }
        hosts.extend(names.into_iter().map(|n| format!("{n}{rest}")));
        if hosts.len() > MAX_HOSTS {
            return Err(format!("more than {MAX_HOSTS} hosts"));
        }
    }
    if hosts.is_empty() {
        return Err("no host".into());
    }
    Ok(hosts)
}

/// The most hosts a list may expand to (a typo like `n[0-99999999]` must not exhaust memory).
const MAX_HOSTS: usize = 1 << 20;

/// Splits at the commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut out) = (0u32, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth > 0 => return Err("nested '['".into()),
            '[' => depth = 1,
            ']' if depth == 0 => return Err("']' without '['".into()),
            ']' => depth = 0,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err("'[' without ']'".into());
    }
    out.push(&list[start..]);
    Ok(out)
}

/// `01-04,07` → `01`, `02`, `03`, `04`, `07` (the width of the lower bound is kept).
fn expand_ranges(body: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in body.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(format!("'{part}' is not a number or a range of numbers"));
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| format!("'{lo}' is too large"))?,
            hi.parse().map_err(|_| format!("'{hi}' is too large"))?,
        );
        if a > b {
            return Err(format!("range '{part}' runs backwards"));
        }
        if b - a >= MAX_HOSTS as u64 {
            return Err(format!("range '{part}' is larger than {MAX_HOSTS} hosts"));
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn given(rendezvous: Option<&str>, world: Option<u32>) -> Given<'_> {
        Given {
            rendezvous,
            world,
            port: 18515,
        }
    }

    #[test]
    fn hostlists_expand_as_slurm_writes_them() {
        assert_eq!(
            expand_hostlist("node[01-04,07]").unwrap(),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(
            expand_hostlist("gpu5,node[8-10],login").unwrap(),
            ["gpu5", "node8", "node9", "node10", "login"]
        );
        assert_eq!(
            expand_hostlist("rack[1-2]-n[1-2]").unwrap(),
            ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
        );
        assert_eq!(
            expand_hostlist("n[098-101]").unwrap(),
            ["n098", "n099", "n100", "n101"]
        );
        assert_eq!(
            expand_hostlist("a-b.example,c").unwrap(),
            ["a-b.example", "c"]
        );
        for bad in [
            "",
            "n[1-",
            "n[3-1]",
            "n[a-b]",
            "n]1[",
            "n[1[2]]",
            "n[0-99999999]",
        ] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slurm() {
        let e = env_of(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_NODELIST", "gpu[07-10]"),
            ("SLURM_NODELIST", "gpu[01-20]"),
        ]);
        let p = detect(&e, &given(None, None)).unwrap();
        assert_eq!(
            p,
            Placement {
                launcher: Launcher::Slurm,
                rank: 2,
                world: 4,
                rendezvous: Rendezvous {
                    host: "gpu07".into(),
                    port: 18515
                }
            }
        );
        // The job's list when the step's is missing; --rendezvous overrides both.
        let e = env_of(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NODELIST", "a,b"),
        ]);
        assert_eq!(detect(&e, &given(None, None)).unwrap().rendezvous.host, "a");
        let p = detect(&e, &given(Some("10.0.0.9:2000"), None)).unwrap();
        assert_eq!(p.rendezvous.to_string(), "10.0.0.9:2000");
        // Two tasks per node: refused, naming the fix.
        let e = env_of(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_STEP_NODELIST", "n[1-4]"),
        ]);
        let err = detect(&e, &given(None, None)).unwrap_err();
        assert!(err.to_string().contains("--ntasks-per-node=1"), "{err}");
        let e = env_of(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]);
        assert!(matches!(
            detect(&e, &given(None, None)),
            Err(LauncherError::Missing {
                var: "SLURM_STEP_NODELIST",
                ..
            })
        ));
    }

    #[test]
    fn open_mpi_and_pmi_need_a_rendezvous() {
        let e = env_of(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "8")]);
        assert_eq!(
            detect(&e, &given(None, None)),
            Err(LauncherError::NoRendezvous {
                launcher: Launcher::OpenMpi
            })
        );
        let p = detect(&e, &given(Some("head"), None)).unwrap();
        assert_eq!((p.launcher, p.rank, p.world), (Launcher::OpenMpi, 3, 8));
        assert_eq!(p.rendezvous.to_string(), "head:18515");
        let e = env_of(&[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            (RENDEZVOUS_ENV, "[fd00::1]:7000"),
        ]);
        let p = detect(&e, &given(None, None)).unwrap();
        assert_eq!((p.launcher, p.rank, p.world), (Launcher::Pmi, 1, 2));
        assert_eq!(
            p.rendezvous,
            Rendezvous {
                host: "fd00::1".into(),
                port: 7000
            }
        );
    }

    #[test]
    fn mpi_inside_a_slurm_batch_step_wins() {
        // mpirun in an sbatch script: every process inherits the batch step's SLURM_PROCID=0.
        let e = env_of(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_NODELIST", "n[1-4]"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ]);
        let p = detect(&e, &given(Some("n1"), None)).unwrap();
        assert_eq!((p.launcher, p.rank, p.world), (Launcher::OpenMpi, 2, 4));
    }

    #[test]
    fn kubernetes_indexed_job() {
        let e = env_of(&[
            ("JOB_COMPLETION_INDEX", "1"),
            (RENDEZVOUS_ENV, "fleet-0.fleet"),
        ]);
        assert!(matches!(
            detect(&e, &given(None, None)),
            Err(LauncherError::Missing {
                launcher: Launcher::Kubernetes,
                var: WORLD_SIZE_ENV
            })
        ));
        let p = detect(&e, &given(None, Some(4))).unwrap();
        assert_eq!((p.launcher, p.rank, p.world), (Launcher::Kubernetes, 1, 4));
        assert_eq!(p.rendezvous.host, "fleet-0.fleet");
        let e = env_of(&[
            ("JOB_COMPLETION_INDEX", "0"),
            (WORLD_SIZE_ENV, "3"),
            (RENDEZVOUS_ENV, "h:1"),
        ]);
        assert_eq!(detect(&e, &given(None, None)).unwrap().world, 3);
    }

    #[test]
    fn inconsistent_values_are_refused() {
        let g = given(Some("h"), None);
        assert_eq!(detect(&env_of(&[]), &g), Err(LauncherError::NoLauncher));
        let e = env_of(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")]);
        assert!(matches!(
            detect(&e, &g),
            Err(LauncherError::RankOutOfRange {
                rank: 4,
                world: 4,
                ..
            })
        ));
        let e = env_of(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")]);
        assert!(matches!(
            detect(&e, &g),
            Err(LauncherError::TooSmall { .. })
        ));
        let e = env_of(&[("PMI_RANK", "x"), ("PMI_SIZE", "4")]);
        assert!(matches!(
            detect(&e, &g),
            Err(LauncherError::NotNumber {
                var: "PMI_RANK",
                ..
            })
        ));
        let e = env_of(&[("PMI_RANK", "0"), ("PMI_SIZE", "4")]);
        assert!(matches!(
            detect(&e, &given(Some("h"), Some(5))),
            Err(LauncherError::WorldDisagrees {
                flag: 5,
                env: 4,
                ..
            })
        ));
        assert_eq!(detect(&e, &given(Some("h"), Some(4))).unwrap().world, 4);
        for bad in ["", "h:", "h:0", "h:99999", "[::1", "[::1]x", "a b"] {
            assert!(parse_rendezvous(bad, 1).is_err(), "{bad}");
        }
        assert_eq!(parse_rendezvous("::1", 5).unwrap().host, "::1");
    }

    proptest::proptest! {
        #[test]
        fn hostlist_never_panics(s in "[a-z0-9,\\[\\]\\-]{0,24}") {
            let _ = expand_hostlist(&s);
        }

        #[test]
        fn ranges_expand_to_their_length(a in 0u32..500, len in 0u32..50) {
            let b = a + len;
            let hosts = expand_hostlist(&format!("n[{a}-{b}]")).unwrap();
            proptest::prop_assert_eq!(hosts.len() as u32, len + 1);
            proptest::prop_assert_eq!(&hosts[0], &format!("n{a}"));
        }
    }
}
