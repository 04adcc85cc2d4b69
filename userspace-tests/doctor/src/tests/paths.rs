//! One verdict per path, root causes named once, which library takes which path, and the checks
//! added with them (MIG, BAR1 through NVML, memlock, uverbs access, NCCL/UCX settings, the kernel
//! log, DKMS).

use super::*;
use crate::nvml::{Bar1, Mig, NvmlGpu, NvmlProbe};
use crate::paths::{Path as GdrPath, State};

fn report_req(f: &Fx, probes: Probes, require: Require) -> Report {
    let args = Args {
        no_probes: true,
        ..Args::new(f.dir.path().to_path_buf(), require)
    };
    diagnose(&args, probes)
}

/// Live probes of a node whose NIC imports no dma-buf.
pub(super) fn no_dmabuf_probes() -> Probes {
    let mut p = dmabuf_probes();
    p.verbs = VerbsProbe::Probed {
        results: vec![DmabufProbe {
            device: "mlx5_0".into(),
            errno: Some(95),
            verdict: "unsupported",
        }],
    };
    p
}

fn state(r: &Report, p: GdrPath) -> State {
    r.path(p).state
}

fn uses<'a>(r: &'a Report, lib: &str) -> &'a crate::paths::LibraryUse {
    r.libraries
        .iter()
        .find(|l| l.library == lib)
        .unwrap_or_else(|| panic!("no library {lib}"))
}

/// An inbox RDMA stack: ib_core without the peer-memory API, nothing loaded.
fn inbox(f: &Fx) {
    f.rm("/sys/module/nvidia_peermem");
    f.file(
        "/proc/kallsyms",
        nv_syms("nvidia")
            + "0 T ib_register_device\t[ib_core]\n0 T ib_umem_dmabuf_get\t[ib_core]\n",
    );
}

#[test]
fn dmabuf_only_node_is_ready_unless_nvpeer_is_required() {
    let f = Fx::healthy();
    inbox(&f);
    let r = report_req(&f, dmabuf_probes(), Require::Any);
    assert_eq!(state(&r, GdrPath::Dmabuf), State::Ready);
    assert_eq!(state(&r, GdrPath::Nvpeer), State::NotReady);
    assert_eq!(state(&r, GdrPath::NvidiaPeermem), State::NotReady);
    assert_eq!(r.verdict, Verdict::Ready);
    assert_eq!(r.exit_code, 0);
    // One root cause for both peer paths, named once.
    assert_eq!(r.path(GdrPath::Nvpeer).root_cause, Some("rdma.peer_api"));
    assert_eq!(
        r.path(GdrPath::NvidiaPeermem).root_cause,
        Some("rdma.peer_api")
    );
    let t = r.render_table(false);
    assert_eq!(t.matches("root cause rdma.peer_api").count(), 1, "{t}");
    assert!(
        t.contains("same root cause as above (rdma.peer_api)"),
        "{t}"
    );
    assert!(
        t.contains("READY for GPUDirect RDMA through dma-buf"),
        "{t}"
    );
    // What follows from the missing API says so instead of repeating a fix.
    assert_eq!(check(&r, "nvpeer.module").because_of, Some("rdma.peer_api"));
    assert_eq!(check(&r, "peer.clients").because_of, Some("rdma.peer_api"));
    assert!(
        t.contains("↳ [NVP-D016] follows from \"OFED peer-memory API\""),
        "{t}"
    );
    // NCCL, UCX and NVSHMEM take dma-buf; UCC and Open MPI's btl_openib have no path.
    assert_eq!(uses(&r, "NCCL").path, Some(GdrPath::Dmabuf));
    assert_eq!(uses(&r, "UCX ≥ 1.18").path, Some(GdrPath::Dmabuf));
    assert_eq!(uses(&r, "NCCL GIN/GDAKI").path, Some(GdrPath::Dmabuf));
    assert_eq!(uses(&r, "Open MPI btl_openib").path, None);
    // The strict answer of earlier releases.
    let strict = report_req(&f, dmabuf_probes(), Require::Nvpeer);
    assert_eq!(strict.verdict, Verdict::NotReady);
    assert_eq!(strict.exit_code, 1);
    assert!(strict
        .render_table(false)
        .contains("NOT READY for GPUDirect RDMA through peer memory through nvpeer"));
}

#[test]
fn nvidia_own_module_is_a_ready_path() {
    let f = Fx::healthy();
    f.nvidia_dropin();
    let r = report_req(&f, no_dmabuf_probes(), Require::Any);
    assert_eq!(status(&r, "nvidia.peermem"), Status::Pass);
    assert_eq!(state(&r, GdrPath::NvidiaPeermem), State::Ready);
    assert_eq!(state(&r, GdrPath::Nvpeer), State::NotReady);
    assert_eq!(r.path(GdrPath::Nvpeer).root_cause, Some("nvpeer.module"));
    assert_eq!(state(&r, GdrPath::Dmabuf), State::NotReady);
    assert_eq!(
        r.verdict,
        Verdict::Ready,
        "NVIDIA's module is a working path"
    );
    assert_eq!(uses(&r, "NCCL").path, Some(GdrPath::NvidiaPeermem));
    assert_eq!(
        report_req(&f, no_dmabuf_probes(), Require::Nvpeer).exit_code,
        1
    );
    assert_eq!(
        report_req(&f, no_dmabuf_probes(), Require::NvidiaPeermem).exit_code,
        0
    );
    assert_eq!(
        report_req(&f, no_dmabuf_probes(), Require::Dmabuf).exit_code,
        1
    );
}

#[test]
fn nvpeer_as_the_dropin_leaves_nvidias_path_not_in_use() {
    let r = report_req(&Fx::healthy(), no_dmabuf_probes(), Require::Any);
    assert_eq!(state(&r, GdrPath::Nvpeer), State::Ready);
    assert_eq!(state(&r, GdrPath::NvidiaPeermem), State::NotInUse);
    assert_eq!(status(&r, "nvidia.peermem"), Status::Skip);
    assert_eq!(uses(&r, "NCCL").path, Some(GdrPath::Nvpeer));
    assert_eq!(
        uses(&r, "UCC TL/MLX5 (mcast, alltoall)").path,
        Some(GdrPath::Nvpeer)
    );
    // Structurally blind probes (memory_peers only, on a core without it) take no path.
    assert_eq!(uses(&r, "Open MPI btl_openib").path, None);
    assert!(
        r.render_table(false)
            .contains("not in use: not in use: nvpeer"),
        "{}",
        r.render_table(false)
    );
}

#[test]
fn neither_path_gets_no_pass_on_dmabuf() {
    let f = Fx::healthy();
    inbox(&f);
    let r = report_req(&f, no_dmabuf_probes(), Require::Any);
    assert_eq!(status(&r, "rdma.dmabuf"), Status::Fail);
    assert!(ALL_PATHS.iter().all(|p| state(&r, *p) == State::NotReady));
    assert_eq!(r.verdict, Verdict::NotReady);
    assert_eq!(r.exit_code, 1);
    assert!(r.libraries.iter().all(|l| l.path.is_none()));
    // Without the live probes, dma-buf cannot be judged: could not check, not a pass.
    let r = report_req(&f, Probes::none(), Require::Any);
    assert_eq!(status(&r, "rdma.dmabuf"), Status::Unknown);
    assert_eq!(r.verdict, Verdict::CouldNotCheck);
}

const ALL_PATHS: [GdrPath; 3] = crate::paths::ALL;

#[test]
fn a_missing_driver_is_the_one_root_cause() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia").rm("/proc/driver/nvidia");
    f.file(
        "/proc/kallsyms",
        "0 T ib_register_peer_memory_client\t[ib_core]\n0 T ib_umem_dmabuf_get\t[ib_core]\n",
    );
    let r = report_req(&f, Probes::none(), Require::Any);
    assert_eq!(
        check(&r, "nvidia.p2p_symbols").because_of,
        Some("nvidia.driver")
    );
    for p in [GdrPath::Nvpeer, GdrPath::Dmabuf] {
        assert_eq!(r.path(p).root_cause, Some("nvidia.driver"), "{p:?}");
    }
    assert_eq!(
        state(&r, GdrPath::NvidiaPeermem),
        State::NotInUse,
        "nvpeer holds its place"
    );
    let t = r.render_table(false);
    assert_eq!(t.matches("root cause nvidia.driver").count(), 1, "{t}");
    // The follower shows no fix of its own.
    assert!(
        !t.contains("→ Load the NVIDIA driver (`modprobe nvidia`); these functions"),
        "{t}"
    );
}

#[test]
fn json_carries_paths_and_libraries() {
    let r = report_req(&Fx::healthy(), dmabuf_probes(), Require::Any);
    let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(v["require"], "any");
    let paths: Vec<&str> = v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["nvpeer", "nvidia_peermem", "dmabuf"]);
    assert_eq!(v["paths"][2]["state"], "ready");
    assert_eq!(v["libraries"][0]["library"], "NCCL");
    assert_eq!(v["libraries"][0]["path"], "dmabuf");
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "rdma.peer_api")
        .unwrap();
    assert_eq!(c["paths"], serde_json::json!(["nvpeer", "nvidia_peermem"]));
}

// ---------------------------------------------------------------- NCCL / UCX settings

pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn nccl_settings_change_the_path_nccl_takes() {
    let f = Fx::healthy();
    let mut p = dmabuf_probes();
    p.env = env(&[("NCCL_DMABUF_ENABLE", "0")]);
    let r = report_req(&f, p.clone(), Require::Any);
    assert_eq!(uses(&r, "NCCL").path, Some(GdrPath::Nvpeer));
    assert_eq!(uses(&r, "UCX ≥ 1.18").path, Some(GdrPath::Dmabuf));
    assert_eq!(status(&r, "libs.settings"), Status::Warn);
    p.env = env(&[
        ("NCCL_NET_GDR_LEVEL", "LOC"),
        ("UCX_IB_GPU_DIRECT_RDMA", "no"),
    ]);
    let r = report_req(&f, p.clone(), Require::Any);
    assert_eq!(uses(&r, "NCCL").path, None);
    assert!(uses(&r, "NCCL")
        .why
        .contains("NCCL_NET_GDR_LEVEL=LOC (environment)"));
    assert_eq!(uses(&r, "UCX ≥ 1.18").path, None);
    assert_eq!(
        r.verdict,
        Verdict::Ready,
        "settings are the user's choice, not a broken node"
    );
    p.env = env(&[("NCCL_IB_HCA", "=mlx5_9")]);
    let r = report_req(&f, p, Require::Any);
    assert_eq!(
        data(check(&r, "libs.settings"))["findings"][0]["effect"],
        "rdma_off"
    );
    assert_eq!(
        status(
            &report_req(&f, dmabuf_probes(), Require::Any),
            "libs.settings"
        ),
        Status::Pass
    );
}

#[test]
fn nccl_conf_precedence() {
    let f = Fx::new();
    f.file(
        "/etc/nccl.conf",
        "# comment\nNCCL_NET_GDR_LEVEL=LOC\nNCCL_DMABUF_ENABLE=0\nNCCL_IB_HCA=mlx5\n",
    );
    f.file(
        "/home/u/.nccl.conf",
        "NCCL_DMABUF_ENABLE=1\nNCCL_IB_HCA=^mlx5_1\n",
    );
    f.file("/tmp/alt.conf", "NCCL_IB_HCA==mlx5_0:1\n");
    let root = crate::root::SysRoot::new(f.dir.path());
    let s = crate::settings::effective(
        &root,
        &env(&[("NCCL_NET_GDR_LEVEL", "PHB")]),
        Some("/home/u"),
    );
    assert_eq!(s["NCCL_NET_GDR_LEVEL"].value, "PHB");
    assert_eq!(s["NCCL_NET_GDR_LEVEL"].source, "environment");
    assert_eq!(s["NCCL_DMABUF_ENABLE"].value, "1");
    assert_eq!(s["NCCL_DMABUF_ENABLE"].source, "/home/u/.nccl.conf");
    assert_eq!(s["NCCL_IB_HCA"].value, "^mlx5_1");
    // NCCL_CONF_FILE replaces ~/.nccl.conf.
    let s = crate::settings::effective(
        &root,
        &env(&[("NCCL_CONF_FILE", "/tmp/alt.conf")]),
        Some("/home/u"),
    );
    assert_eq!(s["NCCL_IB_HCA"].value, "=mlx5_0:1");
    assert_eq!(s["NCCL_DMABUF_ENABLE"].source, "/etc/nccl.conf");
}

#[test]
fn nccl_ib_hca_matching() {
    let devs: Vec<String> = ["mlx5_0", "mlx5_1", "mlx5_10", "rxe0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let sel = |spec| {
        crate::settings::ib_hca_selects(spec, &devs)
            .into_iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    };
    assert_eq!(sel("mlx5_1"), ["mlx5_1", "mlx5_10"]);
    assert_eq!(sel("=mlx5_1"), ["mlx5_1"]);
    assert_eq!(sel("^mlx5"), ["rxe0"]);
    assert_eq!(sel("^=mlx5_0,mlx5_1:1"), ["mlx5_10", "rxe0"]);
    assert_eq!(sel("=mlx5_0:1,rxe0:1"), ["mlx5_0", "rxe0"]);
    assert!(sel("bnxt").is_empty());
}

// ---------------------------------------------------------------- memlock, uverbs

#[test]
fn memlock_limits() {
    let f = Fx::healthy();
    assert_eq!(status(&f.report(), "platform.memlock"), Status::Pass);
    f.file(
        "/proc/self/limits",
        "Max locked memory         65536                65536                bytes\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "platform.memlock"), Status::Warn);
    assert!(check(&r, "platform.memlock").summary.contains("64 KiB"));
    f.file(
        "/proc/self/limits",
        "Max locked memory         8388608              unlimited            bytes\n",
    );
    assert!(check(&f.report(), "platform.memlock")
        .fix
        .as_ref()
        .unwrap()
        .contains("ulimit -l unlimited"));
    f.file(
        "/proc/self/limits",
        "Max locked memory         lots                 x\n",
    );
    assert_eq!(status(&f.report(), "platform.memlock"), Status::Unknown);
    f.rm("/proc/self/limits");
    assert_eq!(status(&f.report(), "platform.memlock"), Status::Unknown);
}

#[test]
fn uverbs_access() {
    let f = Fx::healthy();
    assert_eq!(status(&f.report(), "rdma.uverbs"), Status::Pass);
    f.rm("/dev/infiniband");
    let r = f.report();
    assert_eq!(status(&r, "rdma.uverbs"), Status::Fail);
    assert!(check(&r, "rdma.uverbs")
        .fix
        .as_ref()
        .unwrap()
        .contains("--device /dev/infiniband"));
    assert_eq!(r.verdict, Verdict::NotReady);
    // A device node that cannot be opened read/write (a directory here: EISDIR even for root).
    fs::create_dir_all(f.p("/dev/infiniband/uverbs0")).unwrap();
    let r = f.report();
    assert_eq!(status(&r, "rdma.uverbs"), Status::Fail);
    assert_eq!(
        data(check(&r, "rdma.uverbs"))["denied"],
        serde_json::json!(["uverbs0"])
    );
}

// ---------------------------------------------------------------- kernel log, DKMS

#[test]
fn symbol_version_errors_in_the_kernel_log() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    f.file(
        "/dev/kmsg",
        "4,812,90000,-;nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client\n\
         3,813,90001,-;nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -22)\n\
         3,814,90002,-;nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -22)\n",
    );
    let r = f.report();
    let c = check(&r, "kernel.log");
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.contains("CRC mismatch"), "{}", c.summary);
    assert_eq!(
        data(c)["errors"].as_array().unwrap().len(),
        2,
        "duplicates are folded"
    );
    assert_eq!(check(&r, "nvpeer.module").because_of, Some("kernel.log"));
    assert_eq!(r.path(GdrPath::Nvpeer).root_cause, Some("kernel.log"));
    // Once nvpeer is loaded, this boot's earlier failures are history.
    f.nvpeer_as("nvidia_peermem");
    assert_eq!(status(&f.report(), "kernel.log"), Status::Warn);
    f.file(
        "/dev/kmsg",
        "[   12.000001] mlx5_ib: Unknown symbol ib_umem_get_peer (err -2)\n",
    );
    assert_eq!(status(&f.report(), "kernel.log"), Status::Warn);
    f.rm("/dev/kmsg");
    let r = f.report();
    assert_eq!(status(&r, "kernel.log"), Status::Unknown);
    assert_eq!(
        r.verdict,
        Verdict::Ready,
        "an unreadable log (dmesg_restrict) does not block"
    );
}

#[test]
fn dkms_state_for_the_running_kernel() {
    let f = Fx::healthy();
    assert_eq!(status(&f.report(), "kernel.dkms"), Status::Skip);
    f.rm("/sys/module/nvidia_peermem");
    f.dkms_built_for("7.1.3");
    let r = f.report();
    let c = check(&r, "kernel.dkms");
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.summary
            .contains("built for 7.1.3 but not for the running 7.2.12"),
        "{}",
        c.summary
    );
    assert_eq!(r.path(GdrPath::Nvpeer).root_cause, Some("kernel.dkms"));
    f.file(
        "/var/lib/dkms/nvpeer/0.1.0/build/make.log",
        "error[E0514]\n",
    );
    assert!(check(&f.report(), "kernel.dkms")
        .summary
        .contains("make.log"));
    f.file(
        &format!("/var/lib/dkms/nvpeer/0.1.0/{REL}/x86_64/module/nvidia-peermem.ko.xz"),
        "x",
    );
    assert_eq!(status(&f.report(), "kernel.dkms"), Status::Pass);
}

// ---------------------------------------------------------------- NVML: BAR1, MIG

pub(super) fn nvml_gpu(free: u64, mig: Result<Mig, String>) -> NvmlProbe {
    NvmlProbe::Ok {
        driver: Some("580.95.05".into()),
        gpus: vec![NvmlGpu {
            index: 0,
            bdf: "0000:03:00.0".into(),
            name: "NVIDIA H200".into(),
            bar1: Ok(Bar1 {
                total: 256 << 30,
                used: (256 << 30) - free,
                free,
            }),
            mig,
        }],
    }
}

/// nvpeer's debugfs `stats` with `pinned` bytes pinned.
pub(super) fn pinned_stats(f: &Fx, pinned: u64) {
    f.file(
        "/sys/kernel/debug/nvpeer/stats",
        format!("acquire_calls 3\nlive_mrs 1\npinned_bytes {pinned}\n"),
    );
}

#[test]
fn bar1_used_free_and_nvpeer_pins() {
    let f = Fx::healthy();
    pinned_stats(&f, 2 << 30);
    let mut p = Probes::none();
    p.nvml = nvml_gpu(200 << 30, Err("not supported".into()));
    let r = f.report_with(p.clone());
    let c = check(&r, "gpu.bar1");
    assert_eq!(c.status, Status::Pass);
    assert!(
        c.summary.contains("used 57344 MiB, free 204800 MiB"),
        "{}",
        c.summary
    );
    assert_eq!(data(c)["nvpeer_pinned_bytes"], 2u64 << 30);
    // One GPU: the pins are its own, set against its BAR1 (2 of 256 GiB) and against what is in
    // use (2 of 56 GiB).
    assert!(
        c.details.iter().any(|d| d.contains(
            "nvpeer has 2048 MiB pinned on 0000:03:00.0 (the only GPU): 0.8 % of its BAR1 \
             (262144 MiB), 3.6 % of the BAR1 in use"
        )),
        "{:#?}",
        c.details
    );
    assert_eq!(data(c)["nvpeer_pinned"]["attributed"], true);
    assert_eq!(data(c)["nvpeer_pinned"]["percent_of_bar1"], 0.8);
    assert_eq!(data(c)["nvpeer_pinned"]["free_bar1_bytes"], 200u64 << 30);
    assert_eq!(data(c)["pinned_warn_percent"], 75);

    // Little free, little of it nvpeer's: the fix points at the other mappings.
    p.nvml = nvml_gpu(512 << 20, Err("not supported".into()));
    let r = f.report_with(p.clone());
    let c = check(&r, "gpu.bar1");
    assert_eq!(c.status, Status::Warn);
    assert!(c.summary.contains("little BAR1 left"), "{}", c.summary);
    let fix = c.fix.as_deref().unwrap();
    assert!(fix.contains("nvpeer's pins are 2048 MiB of it"), "{fix}");
    assert!(fix.contains("other mappings"), "{fix}");

    // nvpeer holds 200 of 256 GiB (78.1 %, above 75 %) while 50 GiB are still free: a warning
    // of its own, with the fix for nvpeer's pins.
    pinned_stats(&f, 200 << 30);
    p.nvml = nvml_gpu(50 << 30, Err("not supported".into()));
    let c = check(&f.report_with(p.clone()), "gpu.bar1").clone();
    assert_eq!(c.status, Status::Warn);
    assert_eq!(
        c.summary,
        "nvpeer has pinned 78.1 % of BAR1 on 0000:03:00.0 (204800 of 262144 MiB, above 75 %)"
    );
    assert!(c.fix.as_deref().unwrap().contains("debugfs nvpeer/mrs"));
    assert!(!c.summary.contains("little BAR1 left"));

    // Both: the pins and little free; the free warning says the pins are most of what is used.
    p.nvml = nvml_gpu(512 << 20, Err("not supported".into()));
    let c = check(&f.report_with(p), "gpu.bar1").clone();
    assert!(
        c.summary.contains("nvpeer has pinned 78.1 %"),
        "{}",
        c.summary
    );
    assert!(c.summary.contains("little BAR1 left"), "{}", c.summary);
    assert!(c
        .fix
        .as_deref()
        .unwrap()
        .contains("Most of the BAR1 in use is nvpeer's pins"));

    // Without NVML: the size from sysfs, the reason used/free are missing, and the pins are
    // still set against the size.
    let mut p = Probes::none();
    p.nvml = NvmlProbe::LibraryMissing;
    let c = check(&f.report_with(p.clone()), "gpu.bar1").clone();
    assert!(data(&c)["source"]
        .as_str()
        .unwrap()
        .contains("libnvidia-ml.so.1 not found"));
    assert_eq!(c.status, Status::Warn);
    assert!(c.summary.contains("78.1 % of BAR1 on 0000:03:00.0"));
    assert!(data(&c)["nvpeer_pinned"]["percent_of_used"].is_null());
    pinned_stats(&f, 2 << 30);
    assert_eq!(status(&f.report_with(p), "gpu.bar1"), Status::Pass);
}

#[test]
fn bar1_pins_over_several_gpus_are_not_attributed() {
    let f = Fx::healthy();
    // A second GPU with 32 GiB of BAR1: 288 GiB together.
    f.gpu("pci0000:80", &["0000:80:01.0", "0000:81:00.0"], 1, 32 << 30);
    pinned_stats(&f, 200 << 30);
    let c = check(&f.report(), "gpu.bar1").clone();
    // 200 of 288 GiB: 69.4 %, below the warning, but said to be a lower bound for one GPU.
    assert_eq!(c.status, Status::Pass, "{}", c.summary);
    assert!(
        c.details.iter().any(|d| d.contains(
            "nvpeer has 204800 MiB pinned over 2 GPUs: 69.4 % of their BAR1 together \
             (294912 MiB); debugfs counts all GPUs together, so one GPU's share is not known"
        )),
        "{:#?}",
        c.details
    );
    assert_eq!(data(&c)["nvpeer_pinned"]["attributed"], false);
    assert!(data(&c)["nvpeer_pinned"]["gpu"].is_null());
    // 250 of 288 GiB: above 75 % of the sum, so some GPU is above 75 % of its own.
    pinned_stats(&f, 250 << 30);
    let c = check(&f.report(), "gpu.bar1").clone();
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.summary.contains(
            "nvpeer has pinned 86.8 % of the BAR1 of all GPUs together (256000 of 294912 MiB, \
             above 75 %), so at least one GPU has more than 75 % of its own pinned"
        ),
        "{}",
        c.summary
    );
}

#[test]
fn mig_mode() {
    let f = Fx::healthy();
    assert_eq!(status(&f.report(), "gpu.mig"), Status::Skip);
    let mut p = Probes::none();
    p.nvml = nvml_gpu(
        200 << 30,
        Ok(Mig {
            current: true,
            pending: true,
        }),
    );
    let r = f.report_with(p.clone());
    assert_eq!(status(&r, "gpu.mig"), Status::Warn);
    assert!(check(&r, "gpu.mig")
        .fix
        .as_ref()
        .unwrap()
        .contains("persistent_api_support=1"));
    p.nvml = nvml_gpu(
        200 << 30,
        Ok(Mig {
            current: false,
            pending: true,
        }),
    );
    let r = f.report_with(p.clone());
    assert_eq!(status(&r, "gpu.mig"), Status::Pass);
    assert!(check(&r, "gpu.mig").details[0].contains("changes at the next GPU reset"));
    p.nvml = NvmlProbe::Failed {
        error: "nvmlInit: driver not loaded".into(),
    };
    assert_eq!(
        status(&f.report_with(p.clone()), "gpu.mig"),
        Status::Unknown
    );
    p.nvml = NvmlProbe::LibraryMissing;
    assert_eq!(status(&f.report_with(p), "gpu.mig"), Status::Unknown);
}

// ---------------------------------------------------------------- partial libcuda, topology

#[test]
fn a_library_without_the_cuda_entry_points_is_reported_not_called() {
    // libc stands in for a stub libcuda.so: it exports none of the entry points.
    let lib = unsafe { libloading::Library::new("libc.so.6") }.expect("libc.so.6");
    let missing = crate::probes::missing_symbols(&lib, &crate::probes::CUDA_REQUIRED);
    assert_eq!(missing, crate::probes::CUDA_REQUIRED.to_vec());
    assert_eq!(
        crate::probes::missing_symbols(&lib, &["malloc", "cuDriverGetVersion"]),
        ["cuDriverGetVersion"]
    );
    // A probe result without the API version still renders.
    let mut p = Probes::none();
    p.cuda = CudaProbe::Ok {
        driver_api: None,
        gpus: vec![gpu_ok("0000:03:00.0")],
    };
    assert!(check(&Fx::healthy().report_with(p), "gpu.cuda")
        .summary
        .contains("lacks cuDriverGetVersion"));
}

#[test]
fn best_nic_per_gpu() {
    let f = Fx::healthy();
    // A second NIC on another root port: PHB from the GPU; mlx5_0 under the same switch stays best.
    f.bridge("pci0000:00", &["0000:00:02.0"], None);
    f.nic("pci0000:00", &["0000:00:02.0", "0000:05:00.0"], 0, "mlx5_1");
    let r = f.report();
    let best = &data(check(&r, "pci.topology"))["best"][0];
    assert_eq!(best["gpu"], "0000:03:00.0");
    assert_eq!(best["nics"], serde_json::json!(["mlx5_0"]));
    assert_eq!(best["class"], "PIX");
    assert_eq!(status(&r, "pci.topology"), Status::Pass);
}
