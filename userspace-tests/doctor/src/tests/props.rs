//! Property tests: every parser of a file the doctor reads takes arbitrary input without
//! panicking, and reads back what a well-formed file says.

use crate::kernel::{Kallsyms, KernelConfig};
use crate::kmsg::{message, symbol_error, symbol_errors, SymbolErrorKind};
use crate::limits::{memlock, Limit};
use crate::pci::ConfigSpace;
use crate::root::parse_num;
use crate::settings::{ib_hca_selects, parse_conf};
use proptest::prelude::*;

proptest! {
    #[test]
    fn parsers_never_panic(text in "\\PC*", bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
        let _ = memlock(&text);
        let _ = symbol_errors(&text);
        let _ = parse_conf(&text);
        let _ = Kallsyms::parse(&text);
        let _ = KernelConfig::parse("x".into(), &text);
        let _ = crate::checks::parse_bar1(&text);
        let _ = parse_num(&text);
        let _ = ib_hca_selects(&text, &["mlx5_0".to_string()]);
        let c = ConfigSpace(bytes);
        let _ = c.devctl();
        let _ = c.acs_control();
    }

    #[test]
    fn resource_lines_of_any_numbers(rows in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>()), 0..8)) {
        let text: String = rows.iter().map(|(a, b, c)| format!("{a:#018x} {b:#018x} {c:#018x}\n")).collect();
        // Never panics, even for a range covering all of u64 (its size does not fit).
        if let Some(size) = crate::checks::parse_bar1(&text) {
            prop_assert!(size > 0);
        }
    }

    #[test]
    fn memlock_reads_back(soft in proptest::option::of(any::<u64>()), hard in proptest::option::of(any::<u64>())) {
        let show = |v: Option<u64>| v.map(|b| b.to_string()).unwrap_or_else(|| "unlimited".into());
        let text = format!("Limit  Soft Limit  Hard Limit  Units\nMax core file size  0  unlimited  bytes\nMax locked memory  {}  {}  bytes\n", show(soft), show(hard));
        let m = memlock(&text).unwrap();
        let lim = |v: Option<u64>| v.map(Limit::Bytes).unwrap_or(Limit::Unlimited);
        prop_assert_eq!(m.soft, lim(soft));
        prop_assert_eq!(m.hard, lim(hard));
    }

    #[test]
    fn loader_errors_read_back(module in "[a-z_][a-z0-9_]{0,20}", sym in "[A-Za-z_][A-Za-z0-9_]{0,40}", seq in any::<u32>(), mismatch in any::<bool>(), kmsg in any::<bool>()) {
        let msg = if mismatch { format!("{module}: disagrees about version of symbol {sym}") } else { format!("{module}: Unknown symbol {sym} (err -2)") };
        let line = if kmsg { format!("4,{seq},{},-;{msg}", u64::from(seq) * 7) } else { format!("[{:>5}.{:06}] {msg}", seq % 100000, seq % 1000000) };
        let log = format!("{line}\n SUBSYSTEM=module\n{line}\n");
        let errs = symbol_errors(&log);
        prop_assert_eq!(errs.len(), 1);
        prop_assert_eq!(&errs[0].module, &module);
        prop_assert_eq!(&errs[0].symbol, &sym);
        prop_assert_eq!(errs[0].kind, if mismatch { SymbolErrorKind::VersionMismatch } else { SymbolErrorKind::Unknown });
        prop_assert_eq!(message(&line), Some(msg.as_str()));
        let other = format!("{module}: loaded {sym}");
        prop_assert!(symbol_error(&other).is_none());
    }

    #[test]
    fn nccl_conf_reads_back(pairs in proptest::collection::vec(("NCCL_[A-Z_]{1,20}", "[^\\n\\r]{0,30}"), 0..10)) {
        let text: String = pairs.iter().map(|(k, v)| format!("{k}={v}\n# {k}=ignored\n")).collect();
        let parsed = parse_conf(&text);
        let want: Vec<(String, String)> = pairs.clone();
        prop_assert_eq!(parsed, want);
    }

    #[test]
    fn kallsyms_reads_back(names in proptest::collection::btree_set("[a-z_][a-z0-9_]{0,30}", 1..20), module in proptest::option::of("[a-z_]{1,12}")) {
        let text: String = names.iter().map(|n| match &module {
            Some(m) => format!("ffffffffc0001000 T {n}\t[{m}]\n"),
            None => format!("0000000000000000 t {n}\n"),
        }).collect();
        let k = Kallsyms::parse(&text);
        for n in &names {
            prop_assert_eq!(k.owner(n), Some(module.clone().unwrap_or_else(|| "vmlinux".into())));
        }
        prop_assert_eq!(k.addresses_hidden, module.is_none());
    }

    #[test]
    fn numbers_read_back(v in any::<u64>()) {
        prop_assert_eq!(parse_num(&v.to_string()), Some(v));
        prop_assert_eq!(parse_num(&format!("{v:#x}")), Some(v));
        prop_assert_eq!(parse_num(&format!(" 0X{v:X}\n")), Some(v));
    }
}
