//! What a user process needs beyond the kernel: a locked-memory limit the libraries can work with,
//! access to the verbs device files, and NCCL/UCX settings that leave GPUDirect RDMA on.

use super::data::{MemlockData, SettingsData, UverbsData};
use super::Ctx;
use crate::report::{Check, Status};
use crate::settings::Effect;

/// Below this soft limit host-memory registrations (NCCL's and UCX's bounce and control buffers,
/// perftest's host side) fail with ENOMEM; NCCL and UCX documentation ask for `unlimited`.
const MEMLOCK_MIN: u64 = 64 << 20;

/// `platform.memlock`: the locked-memory limit processes started like the doctor get.
pub fn memlock(ctx: &Ctx) -> Check {
    const ID: &str = "platform.memlock";
    const T: &str = "locked-memory limit";
    let Some(text) = ctx.root.read("/proc/self/limits") else {
        return Check::new(
            ID,
            T,
            false,
            Status::Unknown,
            "/proc/self/limits is not readable",
        );
    };
    let Some(m) = crate::limits::memlock(&text) else {
        return Check::new(
            ID,
            T,
            false,
            Status::Unknown,
            "no parsable `Max locked memory` row in /proc/self/limits",
        );
    };
    let data = MemlockData {
        soft: m.soft,
        hard: m.hard,
        minimum: MEMLOCK_MIN,
    };
    let summary = format!("soft {}, hard {}", m.soft.human(), m.hard.human());
    if m.soft.at_least(MEMLOCK_MIN) {
        return Check::new(ID, T, false, Status::Pass, summary).data(data);
    }
    let raise = if m.hard.at_least(MEMLOCK_MIN) {
        "`ulimit -l unlimited` in the job's shell (the hard limit allows it), or"
    } else {
        ""
    };
    Check::new(ID, T, false, Status::Warn, format!("{summary}: host-memory registrations beyond it fail with ENOMEM"))
        .fix(format!(
            "Raise it: {raise}`* - memlock unlimited` in /etc/security/limits.d/, `LimitMEMLOCK=infinity` for systemd services, `--ulimit memlock=-1` for containers.."
        ))
        .data(data)
}

/// `rdma.uverbs`: the verbs device files exist and this user can open them.
pub fn uverbs(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.uverbs";
    const T: &str = "/dev/infiniband access";
    let files: Vec<String> = ctx
        .root
        .list("/dev/infiniband")
        .into_iter()
        .filter(|f| f.starts_with("uverbs"))
        .collect();
    if files.is_empty() {
        if ctx.rdma_devices.is_empty() {
            return Check::new(
                ID,
                T,
                true,
                Status::Fail,
                "no /dev/infiniband/uverbs* (no RDMA device)",
            )
            .fix("Load the NIC's RDMA driver and ib_uverbs (`modprobe ib_uverbs`).")
            .data(UverbsData {
                files: Vec::new(),
                denied: Vec::new(),
            });
        }
        return Check::new(ID, T, true, Status::Fail, format!("{} RDMA device(s) but no /dev/infiniband/uverbs*", ctx.rdma_devices.len()))
            .fix("Load ib_uverbs (`modprobe ib_uverbs`); in a container pass the devices through (`--device /dev/infiniband`).")
            .data(UverbsData {
                files: Vec::new(),
                denied: Vec::new(),
            });
    }
    let mut denied = Vec::new();
    let mut details = Vec::new();
    for f in &files {
        let path = ctx.root.path(&format!("/dev/infiniband/{f}"));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(_) => details.push(format!("/dev/infiniband/{f}: read/write")),
            Err(e) => {
                details.push(format!("/dev/infiniband/{f}: {e}"));
                denied.push(f.clone());
            }
        }
    }
    let data = UverbsData {
        files: files.clone(),
        denied: denied.clone(),
    };
    if denied.len() == files.len() {
        Check::new(ID, T, true, Status::Fail, format!("cannot open {}", denied.join(", ")))
            .details(details)
            .fix("Give the user access (udev rule `KERNEL==\"uverbs*\", MODE=\"0666\"`, rdma-core's default, or the `rdma` group) and open the devices read/write.")
            .data(data)
    } else if !denied.is_empty() {
        Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!("cannot open {}", denied.join(", ")),
        )
        .details(details)
        .fix(
            "Give the user access to every uverbs device (udev MODE=\"0666\" or the `rdma` group).",
        )
        .data(data)
    } else {
        Check::new(
            ID,
            T,
            true,
            Status::Pass,
            format!("{} device file(s) open read/write", files.len()),
        )
        .details(details)
        .data(data)
    }
}

/// `libs.settings`: NCCL/UCX variables and nccl.conf entries that switch GPUDirect RDMA off.
pub fn settings(ctx: &Ctx) -> Check {
    const ID: &str = "libs.settings";
    const T: &str = "NCCL/UCX settings";
    let found = crate::settings::findings(&ctx.settings, &ctx.rdma_devices);
    let details: Vec<String> = found
        .iter()
        .map(|f| format!("{}={} ({}): {}", f.key, f.value, f.source, f.why))
        .collect();
    let shown: Vec<String> = ctx
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={} ({})", v.value, v.source))
        .collect();
    let data = SettingsData {
        findings: found.clone(),
        settings: ctx.settings.clone(),
    };
    if found.is_empty() {
        let summary = if shown.is_empty() {
            "nothing set that turns GPUDirect RDMA off".to_string()
        } else {
            format!("nothing turns GPUDirect RDMA off ({} set)", shown.len())
        };
        return Check::new(ID, T, false, Status::Pass, summary)
            .details(shown)
            .data(data);
    }
    let off: Vec<String> = found
        .iter()
        .filter(|f| f.effect != Effect::Required)
        .map(|f| format!("{}={}", f.key, f.value))
        .collect();
    let summary = if off.is_empty() {
        format!(
            "{} set",
            found
                .iter()
                .map(|f| f.key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!("{} limit GPUDirect RDMA", off.join(", "))
    };
    Check::new(ID, T, false, Status::Warn, summary)
        .details(details)
        .fix("Unset them (environment, ~/.nccl.conf, $NCCL_CONF_FILE, /etc/nccl.conf) unless the restriction is intended; the environment overrides the files.")
        .data(data)
}
