//! `nvpeer metrics` and `nvpeer labels`: what a monitoring stack and a scheduler read about a
//! node's GPUDirect RDMA, from one reading of it ([`Snapshot`]):
//!
//! - the Prometheus text exposition ([`exposition`]) of nvpeer's counters (debugfs `stats`, read
//!   through nvpeer-uapi), the peer-memory core's counters, who serves `nv_mem`, BAR1 per GPU
//!   (NVML, through the doctor) and one gauge per doctor check, for node_exporter's textfile
//!   collector;
//! - a Node Feature Discovery feature file ([`nfd`]) with the doctor's verdict per path and
//!   nvpeer's version.
//!
//! Both are written atomically ([`output`]). docs/install.md ("Monitoring") lists every series and
//! label; `packaging/systemd/nvpeer-metrics.{service,timer}` refresh them.

mod error;
pub mod exposition;
pub mod nfd;
pub mod output;
pub mod series;
pub mod snapshot;

#[cfg(test)]
mod tests;

pub use error::Error;
pub use snapshot::Snapshot;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Debian's `prometheus-node-exporter` reads `*.prom` files here (its textfile collector).
pub const TEXTFILE_DIR: &str = "/var/lib/prometheus/node-exporter";
/// The file written into the textfile directory.
pub const TEXTFILE_NAME: &str = "nvpeer.prom";
/// nfd-worker's `local` source reads the files here.
pub const NFD_DIR: &str = "/etc/kubernetes/node-feature-discovery/features.d";
/// The file written into the NFD directory.
pub const NFD_NAME: &str = "nvpeer";

/// Where the node is read from.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// Read every file below DIR instead of `/` (fixture trees, a mounted node image).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Skip the doctor's live CUDA, NVML and verbs probes (they only run when --root is `/`):
    /// no BAR1 series, and the dma-buf path "could not check".
    #[arg(long)]
    pub no_probes: bool,
}

/// The NFD feature file.
#[derive(clap::Args, Debug, Clone)]
pub struct NfdArgs {
    /// Write the Node Feature Discovery feature file DIR/nvpeer (default DIR:
    /// /etc/kubernetes/node-feature-discovery/features.d, nfd-worker's local source).
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = NFD_DIR)]
    pub nfd: Option<PathBuf>,
    /// Seconds after which NFD drops the labels unless the file is rewritten (its
    /// `# +expiry-time` directive, NFD 0.14 and later); 0: no expiry.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub nfd_expiry: u64,
}

/// Command-line arguments of `nvpeer metrics`.
#[derive(clap::Args, Debug, Clone)]
pub struct MetricsArgs {
    #[command(flatten)]
    pub source: Source,
    /// Write DIR/nvpeer.prom for node_exporter's textfile collector instead of printing the
    /// metrics (default DIR: /var/lib/prometheus/node-exporter, Debian's
    /// prometheus-node-exporter); written to a temporary file in DIR, then renamed.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = TEXTFILE_DIR)]
    pub textfile: Option<PathBuf>,
    #[command(flatten)]
    pub nfd: NfdArgs,
    /// Skip an output whose directory does not exist instead of failing (a node without
    /// node_exporter or NFD; nvpeer-metrics.service passes it).
    #[arg(long)]
    pub skip_missing_dirs: bool,
}

/// Command-line arguments of `nvpeer labels`.
#[derive(clap::Args, Debug, Clone)]
pub struct LabelsArgs {
    #[command(flatten)]
    pub source: Source,
    #[command(flatten)]
    pub nfd: NfdArgs,
    /// Skip writing when the --nfd directory does not exist instead of failing.
    #[arg(long)]
    pub skip_missing_dirs: bool,
}

/// Reads the node as `source` says.
pub fn snapshot(source: &Source) -> Result<Snapshot, Error> {
    if !source.root.is_dir() {
        return Err(Error::Root(source.root.clone()));
    }
    Ok(Snapshot::take(
        &source.root,
        nvpeer_doctor::probes_for(&source.root, source.no_probes),
    ))
}

/// `nvpeer metrics`: the exposition, printed or written into `--textfile`; with `--nfd` the
/// feature file too, from the same reading. Both outputs are attempted; the first error is
/// returned.
pub fn metrics(args: MetricsArgs) -> Result<(), Error> {
    let snap = snapshot(&args.source)?;
    let text = exposition::encode(&snap)?;
    let prom = match &args.textfile {
        None => print_out(&text),
        Some(dir) => output::write_into(
            dir,
            TEXTFILE_NAME,
            &text,
            "node_exporter's textfile collector",
            args.skip_missing_dirs,
        )
        .map(|_| ()),
    };
    let labels = match &args.nfd.nfd {
        None => Ok(()),
        Some(dir) => write_labels(&snap, dir, &args.nfd, args.skip_missing_dirs),
    };
    prom.and(labels)
}

/// `nvpeer labels`: the NFD feature file, printed or written into `--nfd`.
pub fn labels(args: LabelsArgs) -> Result<(), Error> {
    let snap = snapshot(&args.source)?;
    match &args.nfd.nfd {
        None => print_out(&nfd::feature_file(
            &nfd::labels(&snap),
            nfd::expiry(Duration::from_secs(args.nfd.nfd_expiry)),
        )),
        Some(dir) => write_labels(&snap, dir, &args.nfd, args.skip_missing_dirs),
    }
}

fn write_labels(snap: &Snapshot, dir: &Path, a: &NfdArgs, skip: bool) -> Result<(), Error> {
    let text = nfd::feature_file(
        &nfd::labels(snap),
        nfd::expiry(Duration::from_secs(a.nfd_expiry)),
    );
    output::write_into(dir, NFD_NAME, &text, "Node Feature Discovery", skip).map(|_| ())
}

fn print_out(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| Error::Write {
            path: PathBuf::from("standard output"),
            source,
        })
}
