//! Errors of the emulator driver.

use nix::errno::Errno;

/// What went wrong talking to an emulator device.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// The control device could not be opened (module not loaded, no permission).
    #[error("cannot open {path}: {source} (is the emulator module loaded?)")]
    Open {
        /// Device path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// An ioctl failed.
    #[error("{op} failed: {errno} ({desc})", desc = errno.desc())]
    Ioctl {
        /// Name of the operation.
        op: &'static str,
        /// errno returned by the kernel.
        errno: Errno,
    },
    /// A value given on the command line or in a scenario is not valid.
    #[error("{0}")]
    Invalid(String),
    /// Reading or writing a sysfs/debugfs file failed.
    #[error("{path}: {source}")]
    File {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A scenario's expectation did not hold; the message names the broken rule.
    #[error("{0}")]
    Check(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, EmuError>;

/// Maps an ioctl result to [`EmuError::Ioctl`].
pub(crate) fn ioctl_res<T>(op: &'static str, r: nix::Result<T>) -> Result<T> {
    r.map_err(|errno| EmuError::Ioctl { op, errno })
}

impl From<nvpeer_uapi::Error> for EmuError {
    /// A file the module or the peer-memory core publishes: unreadable is [`EmuError::File`],
    /// anything else (a number that is not one) [`EmuError::Invalid`], with the same message.
    fn from(e: nvpeer_uapi::Error) -> Self {
        match e {
            nvpeer_uapi::Error::Read { path, source } => EmuError::File {
                path: path.display().to_string(),
                source,
            },
            other => EmuError::Invalid(other.to_string()),
        }
    }
}

impl EmuError {
    /// The errno of a failed ioctl, if this is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            EmuError::Ioctl { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}
