//! What an `nvpeer` command concluded, and the exit status that says it: defined here once.
//!
//! Every command (`doctor`, `validate`, `bench`, their `--fleet` forms, `metrics`, `labels`)
//! returns a [`Verdict`]; `nvpeer`'s `main` turns it into the process's status, and a fleet's
//! rank 0 sends it to every rank, which exits with it. Scripts, Slurm's `HealthCheckProgram`,
//! node-problem-detector and CI read these three statuses; they never change meaning.

pub mod codes;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The conclusion of one command, ordered from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// Exit status 0: every check, case or measurement that ran passed (the node is ready; a
    /// file was written).
    Passed,
    /// Exit status 1: the node was checked and is not ready, or a case or measurement ran and
    /// got a wrong or failed result.
    Failed,
    /// Exit status 2: it could not check or run: bad arguments, a missing prerequisite, a file
    /// that could not be written.
    CouldNotRun,
}

impl Verdict {
    /// Every verdict, best first.
    pub const ALL: [Verdict; 3] = [Verdict::Passed, Verdict::Failed, Verdict::CouldNotRun];

    /// The process exit status that says it.
    pub const fn exit_status(self) -> u8 {
        match self {
            Verdict::Passed => 0,
            Verdict::Failed => 1,
            Verdict::CouldNotRun => 2,
        }
    }

    /// The verdict an exit status says; `None` for a status no command exits with.
    pub const fn from_exit_status(status: u8) -> Option<Self> {
        match status {
            0 => Some(Verdict::Passed),
            1 => Some(Verdict::Failed),
            2 => Some(Verdict::CouldNotRun),
            _ => None,
        }
    }

    /// `Failed` when `failed`, else `Passed`.
    pub const fn failed_if(failed: bool) -> Self {
        if failed {
            Verdict::Failed
        } else {
            Verdict::Passed
        }
    }

    /// The worse of the two (a run of several parts ends with its worst).
    pub fn worse(self, other: Self) -> Self {
        self.max(other)
    }
}

impl From<Verdict> for std::process::ExitCode {
    fn from(v: Verdict) -> Self {
        std::process::ExitCode::from(v.exit_status())
    }
}

/// On a wire or in a document: the exit status, a number.
impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.exit_status())
    }
}

/// A status no command exits with is refused, not carried on.
impl<'de> Deserialize<'de> for Verdict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let status = u8::deserialize(d)?;
        Verdict::from_exit_status(status)
            .ok_or_else(|| serde::de::Error::custom(format!("exit status {status}: not 0, 1 or 2")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statuses_never_change_meaning() {
        let statuses: Vec<u8> = Verdict::ALL.iter().map(|v| v.exit_status()).collect();
        assert_eq!(statuses, [0, 1, 2]);
        for v in Verdict::ALL {
            assert_eq!(Verdict::from_exit_status(v.exit_status()), Some(v));
        }
        assert_eq!(Verdict::from_exit_status(3), None);
        assert_eq!(Verdict::from_exit_status(101), None);
    }

    #[test]
    fn the_worst_part_decides() {
        assert_eq!(Verdict::Passed.worse(Verdict::Failed), Verdict::Failed);
        assert_eq!(
            Verdict::CouldNotRun.worse(Verdict::Failed),
            Verdict::CouldNotRun
        );
        assert_eq!(Verdict::Passed.worse(Verdict::Passed), Verdict::Passed);
        assert_eq!(Verdict::failed_if(true), Verdict::Failed);
        assert_eq!(Verdict::failed_if(false), Verdict::Passed);
    }

    #[test]
    fn on_the_wire_a_number_and_only_a_known_one() {
        assert_eq!(serde_json::to_string(&Verdict::Failed).unwrap(), "1");
        assert_eq!(
            serde_json::from_str::<Verdict>("2").unwrap(),
            Verdict::CouldNotRun
        );
        let err = serde_json::from_str::<Verdict>("7")
            .unwrap_err()
            .to_string();
        assert!(err.contains("exit status 7"), "{err}");
        assert!(serde_json::from_str::<Verdict>("-1").is_err());
    }
}
