//! The NVIDIA driver's registry keys as `/proc/driver/nvidia/params` shows them.
//!
//! Keys outside the driver's named options (`PeerMappingOverride` among them) are set only
//! through `NVreg_RegistryDwords` (every GPU) or `NVreg_RegistryDwordsPerDevice` (some GPUs). The
//! module parameter is created with permission 0, so `/sys/module/nvidia/parameters` does not list
//! it; the driver prints both strings verbatim into its params file as `RegistryDwords: "..."` and
//! `RegistryDwordsPerDevice: "..."` (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c,
//! `nv_procfs_read_params`; kernel-open/common/inc/nv-linux.h, `NV_MODULE_STRING_PARAMETER`).
//!
//! How the driver reads a string (src/nvidia/arch/nvalloc/unix/src/osapi.c,
//! `rm_parse_option_string`): whitespace is dropped, entries are separated by `;`, an entry is
//! `key=value` with exactly one `=` (others are ignored), and the value is read as C's
//! `strtoul(value, NULL, 0)` reads it (decimal, `0x` hex, a leading `0` for octal). In the
//! per-device string an entry `pci=DDDD:BB:DD.F` starts the keys of that GPU.

use serde::Serialize;

/// Where the driver shows its options.
pub const PARAMS: &str = "/proc/driver/nvidia/params";

/// One key's value for every GPU, and per GPU where the per-device string sets it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeyValue {
    /// From `RegistryDwords` (every GPU), if set there.
    pub global: Option<u64>,
    /// From `RegistryDwordsPerDevice`: `(bdf as written, value)`, in order.
    pub per_device: Vec<(String, u64)>,
}

impl KeyValue {
    /// Whether the key is nonzero for the GPU `bdf` (lower-case `DDDD:BB:DD.F`): its per-device
    /// entry wins over the global one.
    pub fn nonzero_for(&self, bdf: &str) -> bool {
        self.per_device
            .iter()
            .rev()
            .find(|(d, _)| same_bdf(d, bdf))
            .map(|(_, v)| *v)
            .or(self.global)
            .is_some_and(|v| v != 0)
    }
}

/// A PCI address as the per-device string writes it (nv-reg.h: `bus:slot`, `domain:bus:slot` or
/// `domain:bus:slot.func`, hexadecimal), as `(domain, bus, slot, function)`.
fn pci_address(s: &str) -> Option<(u32, u32, u32, u32)> {
    let (rest, func) = match s.split_once('.') {
        Some((r, f)) => (r, u32::from_str_radix(f, 16).ok()?),
        None => (s, 0),
    };
    let hex = |p: &str| u32::from_str_radix(p, 16).ok();
    let parts: Vec<&str> = rest.split(':').collect();
    match parts[..] {
        [b, d] => Some((0, hex(b)?, hex(d)?, func)),
        [dom, b, d] => Some((hex(dom)?, hex(b)?, hex(d)?, func)),
        _ => None,
    }
}

/// Whether two PCI addresses name one function, compared as numbers.
fn same_bdf(a: &str, b: &str) -> bool {
    matches!((pci_address(a), pci_address(b)), (Some(x), Some(y)) if x == y)
}

/// `strtoul(s, NULL, 0)` for a whole string, kept as the driver keeps it (32 bits): `None` when it
/// is not entirely a number (the driver would take the leading digits; an entry like that is a
/// typo the doctor reports as unset).
fn c_number(s: &str) -> Option<u64> {
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .map(|v| u64::from(v as u32))
}

/// The `key=value` entries of one registry string, whitespace dropped, in order.
fn entries(s: &str) -> impl Iterator<Item = (String, String)> + '_ {
    s.split(';').filter_map(|e| {
        let e: String = e.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let mut parts = e.split('=');
        let (k, v) = (parts.next()?, parts.next()?);
        (parts.next().is_none() && !k.is_empty()).then(|| (k.to_string(), v.to_string()))
    })
}

/// The quoted value of the params line `name: "..."`.
fn quoted<'a>(params: &'a str, name: &str) -> Option<&'a str> {
    params.lines().find_map(|l| {
        let v = l.strip_prefix(name)?.strip_prefix(':')?.trim();
        v.strip_prefix('"')?.strip_suffix('"')
    })
}

/// The value of registry key `key` in the params file's text (key names compare exactly, as the
/// driver's registry does); `None` when the text has neither registry line (not the driver's
/// params file, or a format this reading does not know).
pub fn key(params: &str, key: &str) -> Option<KeyValue> {
    let global = quoted(params, "RegistryDwords");
    let per_device = quoted(params, "RegistryDwordsPerDevice");
    if global.is_none() && per_device.is_none() {
        return None;
    }
    let mut out = KeyValue::default();
    if let Some(s) = global {
        for (k, v) in entries(s) {
            if k == key {
                if let Some(n) = c_number(&v) {
                    out.global = Some(n);
                }
            }
        }
    }
    if let Some(s) = per_device {
        let mut device: Option<String> = None;
        for (k, v) in entries(s) {
            if k == "pci" {
                device = Some(v);
            } else if k == key {
                if let (Some(d), Some(n)) = (&device, c_number(&v)) {
                    out.per_device.push((d.clone(), n));
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS_TEXT: &str = "ResmanDebugLevel: 4294967295\nEnableStreamMemOPs: 0\nRegistryDwords: \"RmFoo=1; PeerMappingOverride=0x1;\"\nRegistryDwordsPerDevice: \"\"\n";

    #[test]
    fn the_global_string_is_read_with_c_numbers_and_spaces_dropped() {
        let v = key(PARAMS_TEXT, "PeerMappingOverride").unwrap();
        assert_eq!(v.global, Some(1));
        assert!(v.nonzero_for("0000:03:00.0"));
        assert_eq!(key(PARAMS_TEXT, "RmFoo").unwrap().global, Some(1));
        assert_eq!(
            key(PARAMS_TEXT, "peermappingoverride").unwrap().global,
            None
        );
        let tabs = "RegistryDwords: \"\tPeerMappingOverride = 1 ;\"\n";
        assert_eq!(key(tabs, "PeerMappingOverride").unwrap().global, Some(1));
        for (s, want) in [
            ("010", Some(8)),
            ("0", Some(0)),
            ("12", Some(12)),
            ("1x", None),
            ("+1", None),
            ("0x+1", None),
            ("0x100000000", Some(0)),
        ] {
            assert_eq!(c_number(s), want, "{s}");
        }
    }

    #[test]
    fn unset_and_malformed_entries_leave_the_key_unset() {
        let none = "RegistryDwords: \"\"\nRegistryDwordsPerDevice: \"\"\n";
        assert_eq!(key(none, "PeerMappingOverride"), Some(KeyValue::default()));
        let bad = "RegistryDwords: \"PeerMappingOverride=1=2;PeerMappingOverride\"\n";
        assert_eq!(key(bad, "PeerMappingOverride").unwrap().global, None);
        // A later malformed entry leaves an earlier value, as in the per-device string.
        let later = "RegistryDwords: \"PeerMappingOverride=1;PeerMappingOverride=x\"\n";
        assert_eq!(key(later, "PeerMappingOverride").unwrap().global, Some(1));
        // Not the params file: nothing read.
        assert_eq!(key("", "PeerMappingOverride"), None);
    }

    /// `/proc/driver/nvidia/params` of the lent H200 (open modules 580.159.04, no option set):
    /// bench-results/gpu/h200-20261203/nvidia-params.txt.
    #[test]
    fn the_recorded_h200_params_set_no_key() {
        let text = include_str!("../../../bench-results/gpu/h200-20261203/nvidia-params.txt");
        assert!(text.contains("RegistryDwords: \"\"\n"));
        assert_eq!(key(text, "PeerMappingOverride"), Some(KeyValue::default()));
        assert_eq!(quoted(text, "RegistryDwordsPerDevice"), Some(""));
    }

    #[test]
    fn a_per_device_entry_wins_for_its_gpu_only() {
        let p = "RegistryDwords: \"PeerMappingOverride=1\"\nRegistryDwordsPerDevice: \"pci=0000:03:00.0;PeerMappingOverride=0;pci=41:00;PeerMappingOverride=1;pci=0:5:0.1;PeerMappingOverride=0\"\n";
        let v = key(p, "PeerMappingOverride").unwrap();
        assert_eq!(
            v.per_device,
            vec![
                ("0000:03:00.0".to_string(), 0),
                ("41:00".to_string(), 1),
                ("0:5:0.1".to_string(), 0)
            ]
        );
        assert!(!v.nonzero_for("0000:03:00.0"));
        // bus:slot (function 0), and domain:bus:slot.func compared as numbers.
        assert!(v.nonzero_for("0000:41:00.0"));
        assert!(!v.nonzero_for("0000:05:00.1"));
        assert!(v.nonzero_for("0000:05:00.0"));
    }
}
