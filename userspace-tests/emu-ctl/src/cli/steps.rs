//! `nvpeer emu steps ...`: registration steps in one process, from the command line.

use crate::error::{EmuError, Result};
use crate::nvp2p::Gpu;
use crate::peer_mem::{self, Core, RegParams};

/// One parsed step of `nvpeer emu steps`.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Alloc(u64),
    Reg(u64, Option<u64>),
    Free,
    Dereg,
    Activate,
    Sleep(u64),
    Show,
}

fn parse_step(s: &str) -> Result<Step> {
    let mut it = s.split(':');
    let bad = || {
        EmuError::Invalid(format!(
            "bad step '{s}' (alloc:SIZE reg[:OFF[:LEN]] free dereg activate sleep:MS show)"
        ))
    };
    let num = |v: Option<&str>| -> Result<Option<u64>> {
        v.map(|x| {
            // Offsets are often written in hex (`reg:0x1234:300K`); sizes take units.
            match x.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).map_err(|_| bad()),
                None => nvpeer_figures::size::parse_or_zero(x).map_err(|_| bad()),
            }
        })
        .transpose()
    };
    Ok(match it.next().unwrap_or("") {
        "alloc" => Step::Alloc(num(it.next())?.unwrap_or(256 << 10)),
        "reg" => Step::Reg(num(it.next())?.unwrap_or(0), num(it.next())?),
        "free" => Step::Free,
        "dereg" => Step::Dereg,
        "activate" => Step::Activate,
        "sleep" => Step::Sleep(num(it.next())?.ok_or_else(bad)?),
        "show" => Step::Show,
        _ => return Err(bad()),
    })
}

pub(super) fn steps_cmd(steps: &[String]) -> Result<u8> {
    let steps: Vec<Step> = steps.iter().map(|s| parse_step(s)).collect::<Result<_>>()?;
    let gpu = Gpu::open()?;
    let core = Core::open()?;
    let mut allocs = Vec::new();
    let mut mrs = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        match st {
            Step::Alloc(size) => {
                let a = gpu.alloc(*size, 0)?;
                println!("[{i}] alloc va {:#x} size {:#x}", a.va, a.size);
                allocs.push(a);
            }
            Step::Reg(off, len) => {
                let a = *allocs
                    .last()
                    .ok_or_else(|| EmuError::Invalid("reg before alloc".into()))?;
                let len = len.unwrap_or(a.size.saturating_sub(*off));
                match core.register(RegParams::mr(a.va + off, len)) {
                    Ok(mr) => {
                        println!(
                            "[{i}] reg mr {} state {} core_context {:#x}",
                            mr.handle,
                            peer_mem::state::name(mr.state),
                            mr.core_context
                        );
                        mrs.push(mr);
                    }
                    Err(e) => println!("[{i}] reg failed: {e}"),
                }
            }
            Step::Free => {
                let a = allocs
                    .pop()
                    .ok_or_else(|| EmuError::Invalid("free without alloc".into()))?;
                println!("[{i}] free va {:#x}: {} callback(s)", a.va, gpu.free(a.va)?);
            }
            Step::Dereg => {
                let mr = mrs
                    .pop()
                    .ok_or_else(|| EmuError::Invalid("dereg without reg".into()))?;
                core.deregister(mr.handle, false)?;
                println!("[{i}] dereg mr {}", mr.handle);
            }
            Step::Activate => {
                core.activate(0, false)?;
                println!("[{i}] activate");
            }
            Step::Sleep(ms) => std::thread::sleep(std::time::Duration::from_millis(*ms)),
            Step::Show => {
                for mr in &mrs {
                    let q = core.query(mr.handle)?;
                    println!(
                        "[{i}] mr {} {} invalidations {} revoked {}",
                        mr.handle,
                        peer_mem::state::name(q.state),
                        q.invalidations,
                        q.flags & peer_mem::qflags::REVOKED != 0
                    );
                }
                let s = gpu.stats()?;
                println!(
                    "[{i}] provider: live pins {} callbacks {} violations {}",
                    s.live_pins, s.callbacks, s.violations_total
                );
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn steps_parse() {
        assert_eq!(parse_step("alloc:1M").unwrap(), Step::Alloc(1 << 20));
        assert_eq!(
            parse_step("reg:0x1000:64K").unwrap(),
            Step::Reg(0x1000, Some(65536))
        );
        assert_eq!(parse_step("reg").unwrap(), Step::Reg(0, None));
        assert_eq!(parse_step("sleep:100").unwrap(), Step::Sleep(100));
        assert!(parse_step("sleep").is_err());
        assert!(parse_step("bogus").is_err());
    }

    proptest! {
        /// Whatever is typed, a step or an error, never a panic.
        #[test]
        fn any_string_parses_or_is_an_error(s in any::<String>()) {
            let _ = parse_step(&s);
        }

        /// The same over strings made of the steps' own words, numbers, units and separators,
        /// where the number parsers are reached.
        #[test]
        fn step_like_strings_parse_or_are_errors(
            s in "(alloc|reg|free|dereg|activate|sleep|show|x)?(:(0x)?[0-9a-fA-FkKmMgGtTpPiBb.+-]{0,24}){0,4}",
        ) {
            let _ = parse_step(&s);
        }

        /// Numbers written in decimal or in hex come back as given.
        #[test]
        fn numbers_round_trip(size in any::<u64>(), off in any::<u64>(), ms in any::<u64>()) {
            prop_assert_eq!(parse_step(&format!("alloc:{size}")).unwrap(), Step::Alloc(size));
            prop_assert_eq!(
                parse_step(&format!("reg:{off:#x}:{size}")).unwrap(),
                Step::Reg(off, Some(size))
            );
            prop_assert_eq!(parse_step(&format!("sleep:{ms}")).unwrap(), Step::Sleep(ms));
        }
    }
}
