//! The distribution the node runs (`/etc/os-release`), and the names of its packages that close
//! each gap the checks find: fix lines speak the node's own words (Ubuntu's `linux-lib-rust-*`,
//! `doca-ofed-*-dkms`, `nvidia-dkms-*-open`; Debian's `rustc-X.Y`), and generic words elsewhere.

use crate::root::SysRoot;

/// What `/etc/os-release` (or `/usr/lib/os-release`) says of the distribution.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Distro {
    /// `ID` (`ubuntu`, `debian`, `rhel`, ...).
    pub id: String,
    /// `ID_LIKE`, split on spaces.
    pub id_like: Vec<String>,
    /// `VERSION_ID` (`26.04`), empty when absent (Debian testing).
    pub version_id: String,
    /// `PRETTY_NAME`, or `ID VERSION_ID` when absent.
    pub pretty: String,
}

/// The family whose package names a fix line uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Ubuntu and its derivatives.
    Ubuntu,
    /// Debian and derivatives other than Ubuntu's.
    Debian,
    /// Anything else (or no os-release).
    Other,
}

impl Distro {
    /// Reads os-release under `root`; `None` when neither file is readable.
    pub fn load(root: &SysRoot) -> Option<Self> {
        let text = root
            .read("/etc/os-release")
            .or_else(|| root.read("/usr/lib/os-release"))?;
        Some(Self::parse(&text))
    }

    /// Parses os-release text (`KEY=value`, values optionally quoted).
    pub fn parse(text: &str) -> Self {
        let mut d = Distro::default();
        for line in text.lines() {
            let Some((k, v)) = line.trim().split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
            match k.trim() {
                "ID" => d.id = v.to_lowercase(),
                "ID_LIKE" => d.id_like = v.split_whitespace().map(str::to_lowercase).collect(),
                "VERSION_ID" => d.version_id = v,
                "PRETTY_NAME" => d.pretty = v,
                _ => {}
            }
        }
        if d.pretty.is_empty() {
            d.pretty = format!("{} {}", d.id, d.version_id).trim().to_string();
        }
        d
    }

    /// The package family.
    pub fn family(&self) -> Family {
        let is = |name: &str| self.id == name || self.id_like.iter().any(|l| l == name);
        if is("ubuntu") {
            Family::Ubuntu
        } else if is("debian") {
            Family::Debian
        } else {
            Family::Other
        }
    }
}

/// The family of an optional distro (`Other` when unknown).
pub fn family(d: Option<&Distro>) -> Family {
    d.map_or(Family::Other, Distro::family)
}

/// `major.minor` of a kernel release (`7.0.0-14-generic` -> (7, 0)).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether this is one of Ubuntu's generic kernels from 6.8 on, which carry no inbox peer-memory
/// API (Canonical, "NVIDIA GPUDirect over InfiniBand migration paths": the SAUCE interface lives
/// on only in the 5.4 and 5.15 kernels and the `linux-nvidia` flavour).
pub fn ubuntu_generic_without_inbox_peer_api(d: Option<&Distro>, release: &str) -> bool {
    family(d) == Family::Ubuntu
        && (release.ends_with("-generic") || release.ends_with("-generic-64k"))
        && kernel_version(release).is_some_and(|v| v >= (6, 8))
}

/// The flavour of an Ubuntu kernel release: what follows the ABI number
/// (`7.0.0-14-generic` -> `generic`, `7.0.0-14-generic-64k` -> `generic-64k`).
pub fn ubuntu_flavour(release: &str) -> Option<&str> {
    let mut parts = release.splitn(3, '-');
    let (_version, abi, flavour) = (parts.next()?, parts.next()?, parts.next()?);
    (abi.chars().all(|c| c.is_ascii_digit()) && !flavour.is_empty()).then_some(flavour)
}

/// The fix line's words for installing the OFED peer-memory core.
pub fn ofed_install(d: Option<&Distro>, release: Option<&str>) -> String {
    match family(d) {
        Family::Ubuntu => format!(
            "install DOCA-OFED from Ubuntu's archive: `apt install doca-ofed-<version>-dkms` (e.g. doca-ofed-26.01-dkms), or the prebuilt signed modules `linux-modules-doca-ofed-<version>-{}`",
            release.and_then(ubuntu_flavour).unwrap_or("generic")
        ),
        _ => "install DOCA-OFED or MLNX_OFED (NVIDIA's doca-ofed / mlnx-ofed-kernel-dkms packages)"
            .to_string(),
    }
}

/// The fix line's words for the Rust build artifacts of kernel `release`.
pub fn rust_artifacts_install(d: Option<&Distro>, release: &str) -> String {
    match family(d) {
        Family::Ubuntu => format!("`apt install linux-lib-rust-{release}`"),
        _ => "run `make modules_prepare` in this kernel's full source tree with its .config (docs/install.md)".to_string(),
    }
}

/// The fix line's words for installing rustc `version` (`1.93.1`), the kernel's compiler: Ubuntu
/// packages versioned compilers (`rustc-1.93`); elsewhere rustup has every release. The build
/// preflight finds either by its version.
pub fn rustc_install(d: Option<&Distro>, version: &str) -> String {
    let mm: Vec<&str> = version.splitn(3, '.').take(2).collect();
    let mm = mm.join(".");
    match family(d) {
        Family::Ubuntu => format!(
            "`apt install rustc-{mm}` (the preflight finds it by its versioned name), or `rustup toolchain install {version}`"
        ),
        Family::Debian | Family::Other => format!(
            "`rustup toolchain install {version}` (the preflight finds rustup's toolchain of that version), or the distribution's rustc when it is that version"
        ),
    }
}

/// The fix line's words for NVIDIA's open kernel modules.
pub fn nvidia_open_install(d: Option<&Distro>) -> &'static str {
    match family(d) {
        Family::Ubuntu => "`apt install nvidia-dkms-<version>-open` (or `ubuntu-drivers install --gpgpu`)",
        Family::Debian => "`apt install nvidia-open-kernel-dkms` (contrib)",
        Family::Other => "NVIDIA's open kernel modules (`nvidia-open`, or the .run installer with `-m=kernel-open`)",
    }
}

/// The fix line's words for enrolling DKMS's signing key (Secure Boot).
pub fn mok_enroll(d: Option<&Distro>) -> &'static str {
    match family(d) {
        Family::Ubuntu => "DKMS signs with the MOK key in /var/lib/shim-signed/mok/; enroll it once with `mokutil --import /var/lib/shim-signed/mok/MOK.der` and confirm at the next boot",
        _ => "DKMS signs with its key (/var/lib/dkms/mok.pub); enroll it once with `mokutil --import /var/lib/dkms/mok.pub` and confirm at the next boot",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UBUNTU: &str = "PRETTY_NAME=\"Ubuntu 26.04 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"26.04\"\nID=ubuntu\nID_LIKE=debian\n";
    const DEBIAN: &str =
        "PRETTY_NAME=\"Debian GNU/Linux 14 (forky)\"\nNAME=\"Debian GNU/Linux\"\nID=debian\n";

    #[test]
    fn parses_os_release() {
        let u = Distro::parse(UBUNTU);
        assert_eq!(u.id, "ubuntu");
        assert_eq!(u.version_id, "26.04");
        assert_eq!(u.pretty, "Ubuntu 26.04 LTS");
        assert_eq!(u.family(), Family::Ubuntu);
        let d = Distro::parse(DEBIAN);
        assert_eq!(d.family(), Family::Debian);
        assert_eq!(d.version_id, "");
        let mint = Distro::parse("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n");
        assert_eq!(mint.family(), Family::Ubuntu);
        assert_eq!(mint.pretty, "linuxmint");
        assert_eq!(
            Distro::parse("ID=rhel\nVERSION_ID=10\n").family(),
            Family::Other
        );
    }

    #[test]
    fn ubuntu_generic_from_6_8_has_no_inbox_api() {
        let u = Distro::parse(UBUNTU);
        assert!(ubuntu_generic_without_inbox_peer_api(
            Some(&u),
            "7.0.0-14-generic"
        ));
        assert!(ubuntu_generic_without_inbox_peer_api(
            Some(&u),
            "6.8.0-50-generic"
        ));
        assert!(!ubuntu_generic_without_inbox_peer_api(
            Some(&u),
            "5.15.0-100-generic"
        ));
        assert!(!ubuntu_generic_without_inbox_peer_api(
            Some(&u),
            "6.8.0-1010-nvidia"
        ));
        let d = Distro::parse(DEBIAN);
        assert!(!ubuntu_generic_without_inbox_peer_api(
            Some(&d),
            "7.0.0-14-generic"
        ));
        assert!(!ubuntu_generic_without_inbox_peer_api(
            None,
            "7.0.0-14-generic"
        ));
    }

    #[test]
    fn ubuntu_flavours() {
        assert_eq!(ubuntu_flavour("7.0.0-14-generic"), Some("generic"));
        assert_eq!(ubuntu_flavour("7.0.0-14-generic-64k"), Some("generic-64k"));
        assert_eq!(ubuntu_flavour("6.8.0-1010-nvidia"), Some("nvidia"));
        assert_eq!(ubuntu_flavour("7.3.4+deb13-amd64"), None);
        let u = Distro::parse(UBUNTU);
        assert!(ofed_install(Some(&u), Some("7.0.0-14-generic-64k"))
            .contains("linux-modules-doca-ofed-<version>-generic-64k"));
    }

    #[test]
    fn words_off_ubuntu() {
        let d = Distro::parse(DEBIAN);
        assert!(!ofed_install(Some(&d), Some("7.2.12+deb14-amd64")).contains("Ubuntu"));
        assert!(ofed_install(None, None).contains("DOCA-OFED or MLNX_OFED"));
        assert!(rustc_install(Some(&d), "1.97.1").contains("rustup toolchain install 1.97.1"));
        assert!(!rustc_install(Some(&d), "1.97.1").contains("apt install rustc-"));
        assert!(nvidia_open_install(Some(&d)).contains("nvidia-open-kernel-dkms"));
        assert!(nvidia_open_install(None).contains("kernel-open"));
        assert!(mok_enroll(Some(&d)).contains("/var/lib/dkms/mok.pub"));
        assert!(rust_artifacts_install(Some(&d), "7.2.12").contains("modules_prepare"));
    }

    #[test]
    fn package_words() {
        let u = Distro::parse(UBUNTU);
        assert!(ofed_install(Some(&u), Some("7.0.0-14-generic"))
            .contains("linux-modules-doca-ofed-<version>-generic"));
        assert!(rust_artifacts_install(Some(&u), "7.0.0-14-generic")
            .contains("linux-lib-rust-7.0.0-14-generic"));
        assert!(rustc_install(Some(&u), "1.93.1").contains("rustc-1.93"));
        assert!(rustc_install(None, "1.93.1").contains("rustup toolchain install 1.93.1"));
        assert_eq!(kernel_version("7.3.4+deb13-amd64"), Some((7, 3)));
        assert_eq!(kernel_version("garbage"), None);
    }
}
