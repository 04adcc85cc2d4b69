//! `/proc/<pid>/limits`: the locked-memory limit a process (and the libraries it loads) gets.

/// One soft or hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `unlimited`.
    Unlimited,
    /// A byte count.
    Bytes(u64),
}

impl Limit {
    fn parse(s: &str) -> Option<Self> {
        if s == "unlimited" {
            Some(Limit::Unlimited)
        } else {
            s.parse().ok().map(Limit::Bytes)
        }
    }

    /// Whether at least `bytes` can be locked.
    pub fn at_least(self, bytes: u64) -> bool {
        match self {
            Limit::Unlimited => true,
            Limit::Bytes(b) => b >= bytes,
        }
    }

    /// `unlimited` or the size in KiB/MiB/GiB, as `ulimit -l` users read it.
    pub fn human(self) -> String {
        match self {
            Limit::Unlimited => "unlimited".into(),
            Limit::Bytes(b) if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
            Limit::Bytes(b) if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
            Limit::Bytes(b) if b % 1024 == 0 => format!("{} KiB", b >> 10),
            Limit::Bytes(b) => format!("{b} bytes"),
        }
    }
}

/// The `Max locked memory` row: (soft, hard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memlock {
    /// What the process may lock now.
    pub soft: Limit,
    /// What it could raise the soft limit to.
    pub hard: Limit,
}

/// Finds and parses the `Max locked memory` row; `None` when the row is missing or malformed.
pub fn memlock(text: &str) -> Option<Memlock> {
    let row = text
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))?;
    let mut cols = row.split_whitespace();
    let soft = Limit::parse(cols.next()?)?;
    let hard = Limit::parse(cols.next()?)?;
    Some(Memlock { soft, hard })
}
