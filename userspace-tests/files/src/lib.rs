//! The files the tools write where a user asks (`--report DIR`, `--junit FILE`, `--out_json FILE`,
//! the fleet's report directory). The tools run as root, often in a shared directory (`/tmp`, a
//! job's working directory), where another user can plant a symbolic link or a directory at the
//! name before the tool runs. So:
//!
//! - a file is written to a temporary file in its directory, then renamed over the name: a reader
//!   sees the old file or the new one, and nothing is ever written into an inode that was there;
//! - a name that is a symbolic link is refused, not replaced and not followed: the user named a
//!   path that is not what they think it is, and says what to do about it;
//! - a report directory that exists must be a directory of the user running the tool (not a link,
//!   not another user's); one that does not exist is created, with its parents, mode 0755.
//!
//! What is refused is an [`Error`] that names the path and the reason; nothing is left behind (the
//! temporary file goes with the error).

use std::fs::{self, DirBuilder, File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of the files written: the reports hold no secret and are read by other users (a CI
/// job's artifact collector).
pub const FILE_MODE: u32 = 0o644;
/// The mode of a report directory this crate creates.
pub const DIR_MODE: u32 = 0o755;
/// The temporary file's name around a random part: hidden (NFD's local source skips names that
/// start with a dot) and not ending in `.prom` (node_exporter's textfile collector reads `*.prom`).
pub const TEMP_PREFIX: &str = ".nvpeer-";
pub const TEMP_SUFFIX: &str = ".tmp";

/// Why a file or directory was not written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name is a symbolic link (planted, or the user's own): not followed, not replaced.
    #[error(
        "{path}: is a symbolic link (to {target}): refusing to write through it; remove it or name another path"
    )]
    Symlink { path: PathBuf, target: String },
    /// A directory at the name of a file.
    #[error("{path}: is a directory: name a file")]
    IsDir { path: PathBuf },
    /// The name of a report directory is something else.
    #[error("{path}: exists and is not a directory")]
    NotDir { path: PathBuf },
    /// A report directory that another user owns (planted in a shared directory).
    #[error(
        "{path}: owned by uid {owner}, not by this user (uid {me}): refusing to write the report into another user's directory; remove it or name another"
    )]
    Foreign { path: PathBuf, owner: u32, me: u32 },
    /// The file's directory does not exist.
    #[error("{path}: its directory does not exist")]
    NoParent { path: PathBuf },
    /// Anything the system refused.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

impl Error {
    /// This error as the `io::Error` of callers that report those (the kind says what it was).
    pub fn into_io(self) -> io::Error {
        let kind = match &self {
            Error::Io { source, .. } => source.kind(),
            Error::NoParent { .. } => io::ErrorKind::NotFound,
            Error::IsDir { .. } => io::ErrorKind::IsADirectory,
            _ => io::ErrorKind::PermissionDenied,
        };
        io::Error::new(kind, self.to_string())
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What is at `path`, without following a last symbolic link; `None` if nothing.
fn what_is(path: &Path) -> Result<Option<fs::Metadata>, Error> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(path)(e)),
    }
}

fn refuse_link(path: &Path, m: &fs::Metadata) -> Result<(), Error> {
    if m.file_type().is_symlink() {
        let target = fs::read_link(path)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".into());
        return Err(Error::Symlink {
            path: path.to_path_buf(),
            target,
        });
    }
    Ok(())
}

/// This process's effective uid.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Writes `body` to `path`: a temporary file beside it, flushed, then renamed over the name. A
/// symbolic link or a directory at `path` is refused; so is a missing directory.
pub fn write_file(path: &Path, body: &[u8]) -> Result<(), Error> {
    if let Some(m) = what_is(path)? {
        refuse_link(path, &m)?;
        if m.is_dir() {
            return Err(Error::IsDir {
                path: path.to_path_buf(),
            });
        }
    }
    let dir = match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::NoParent {
            path: path.to_path_buf(),
        });
    }
    let mut f = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .suffix(TEMP_SUFFIX)
        .permissions(Permissions::from_mode(FILE_MODE))
        .tempfile_in(dir)
        .map_err(io_at(path))?;
    f.write_all(body).map_err(io_at(path))?;
    // (the umask may have taken bits away)
    f.as_file()
        .set_permissions(Permissions::from_mode(FILE_MODE))
        .map_err(io_at(path))?;
    f.as_file().sync_all().map_err(io_at(path))?;
    // (rename(2) replaces the name, never follows it: a link planted since the check above is
    // replaced, and its target stays untouched)
    f.persist(path).map_err(|e| io_at(path)(e.error))?;
    // The rename itself, on disk; a directory that cannot be opened for that is no failure.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A report directory at `dir`: created with its parents (mode 0755) if missing; if it exists, it
/// must be a directory (not a symbolic link) owned by the effective user.
pub fn report_dir(dir: &Path) -> Result<(), Error> {
    match what_is(dir)? {
        Some(m) => {
            refuse_link(dir, &m)?;
            if !m.is_dir() {
                return Err(Error::NotDir {
                    path: dir.to_path_buf(),
                });
            }
            let me = euid();
            if m.uid() != me {
                return Err(Error::Foreign {
                    path: dir.to_path_buf(),
                    owner: m.uid(),
                    me,
                });
            }
            Ok(())
        }
        None => {
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(io_at(dir))?;
            // (created by this process, or planted between the check and the creation: the same
            // checks again)
            let m = what_is(dir)?.ok_or_else(|| Error::NotDir {
                path: dir.to_path_buf(),
            })?;
            refuse_link(dir, &m)?;
            if !m.is_dir() || m.uid() != euid() {
                return Err(Error::Foreign {
                    path: dir.to_path_buf(),
                    owner: m.uid(),
                    me: euid(),
                });
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
