//! What `nvpeer validate` and `nvpeer bench` conclude; `nvpeer`'s main turns it into the exit
//! status, in one place.

/// The outcome of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every case or measurement that ran passed.
    Passed,
    /// A case or measurement failed: the node ran it and got a wrong or failed result.
    Failed,
    /// It could not run: bad arguments, a missing prerequisite, a report that could not be
    /// written.
    CouldNotRun,
}

impl Verdict {
    /// The exit status: 0, 1 or 2 (shown under `--help`).
    pub fn exit_status(self) -> u8 {
        match self {
            Verdict::Passed => 0,
            Verdict::Failed => 1,
            Verdict::CouldNotRun => 2,
        }
    }

    /// The verdict of a run that ended with `status` (the two-node server's loop).
    pub fn from_status(status: u8) -> Self {
        match status {
            0 => Verdict::Passed,
            1 => Verdict::Failed,
            _ => Verdict::CouldNotRun,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for v in [Verdict::Passed, Verdict::Failed, Verdict::CouldNotRun] {
            assert_eq!(Verdict::from_status(v.exit_status()), v);
        }
        assert_eq!(Verdict::from_status(101), Verdict::CouldNotRun);
    }
}
