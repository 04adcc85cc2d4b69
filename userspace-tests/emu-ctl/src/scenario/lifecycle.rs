//! Registrations without a race: register, check, deregister, free; unaligned and overlapping
//! ranges.

use super::env::{check, finish, Env};
use crate::error::{EmuError, Result};
use crate::nvp2p::GPU_PAGE_SIZE;
use crate::peer_mem::{qflags, state, RegParams};

pub(super) fn basic(e: &Env) -> Result<()> {
    for _ in 0..e.opts.iterations.clamp(1, 5) {
        let a = e.alloc()?;
        let mr = e.reg(&a)?;
        let q = e.core.query(mr.handle)?;
        e.note(format!(
            "registered {:#x}+{:#x}: state {} nmap {} page_size {:#x}",
            a.va,
            a.size,
            state::name(q.state),
            q.nmap,
            q.page_size
        ));
        check(
            q.state == state::MAPPED && q.flags & qflags::PEER != 0,
            || {
                format!(
                    "MR over GPU memory is {} (peer: {}), expected mapped by a peer client",
                    state::name(q.state),
                    q.flags & qflags::PEER != 0
                )
            },
        )?;
        check(q.page_size == GPU_PAGE_SIZE, || {
            format!("get_page_size returned {:#x}, expected 64 KiB", q.page_size)
        })?;
        check(u64::from(q.nmap) == a.size / GPU_PAGE_SIZE, || {
            format!(
                "dma_map reported {} entries for {} GPU pages",
                q.nmap,
                a.size / GPU_PAGE_SIZE
            )
        })?;
        let pins = e.gpu.list_pins()?;
        check(pins.len() == 1, || {
            format!(
                "{} provider pins for one MR (probe pin in acquire must be released)",
                pins.len()
            )
        })?;
        e.core.deregister(mr.handle, false)?;
        let ps = e.gpu.stats()?;
        check(ps.live_pins == 0, || {
            format!(
                "{} pins live after dereg (rule: put_pages after dereg)",
                ps.live_pins
            )
        })?;
        e.gpu.free(a.va)?;
    }
    sysfs_counters(e)
}

/// sysfs counters move as §1.8 says, for the client that claims MRs (skipped without sysfs).
fn sysfs_counters(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    let clients = e.core.clients()?;
    let Some(name) = clients
        .get(mr.client_index as usize)
        .map(|c| c.name.clone())
    else {
        return Err(EmuError::Check(format!(
            "MR claimed by client index {} which the core does not list",
            mr.client_index
        )));
    };
    let dir = format!("{}/{name}", crate::sysfs::ROOT);
    if !std::path::Path::new(&dir).exists() {
        e.note(format!("no {dir}: sysfs counters not checked"));
        e.core.deregister(mr.handle, false)?;
        e.gpu.free(a.va)?;
        return Ok(());
    }
    let before = crate::sysfs::read(&name)?;
    e.core.deregister(mr.handle, false)?;
    let after = crate::sysfs::read(&name)?;
    let d = |k: &str| -> i128 {
        after[k].parse::<i128>().unwrap_or(0) - before[k].parse::<i128>().unwrap_or(0)
    };
    e.note(format!(
        "sysfs {name}: dealloc +{} dereg_bytes +{}",
        d("num_dealloc_mrs"),
        d("num_dereg_bytes")
    ));
    check(d("num_dealloc_mrs") == 1, || {
        format!(
            "num_dealloc_mrs moved by {} on one dereg",
            d("num_dealloc_mrs")
        )
    })?;
    check(d("num_dereg_bytes") == i128::from(a.size), || {
        format!(
            "num_dereg_bytes moved by {} for {} bytes",
            d("num_dereg_bytes"),
            a.size
        )
    })?;
    e.gpu.free(a.va)?;
    Ok(())
}

pub(super) fn unaligned(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let (addr, len) = (a.va + 0x1234, a.size - 0x3000);
    let mr = e.core.register(RegParams::mr(addr, len)).map_err(|err| {
        EmuError::Check(format!(
            "registration of the unaligned range {addr:#x}+{len:#x} inside GPU memory failed ({err}): \
             rule: the client must cover the range with whole 64 KiB GPU pages before nvidia_p2p_get_pages"
        ))
    })?;
    let q = e.core.query(mr.handle)?;
    e.note(format!(
        "unaligned MR: state {} nmap {} trimmed {}",
        state::name(q.state),
        q.nmap,
        q.flags & qflags::TRIMMED != 0
    ));
    check(q.state == state::MAPPED, || {
        format!("unaligned MR is {}", state::name(q.state))
    })?;
    e.core.deregister(mr.handle, false)?;
    e.gpu.free(a.va)?;
    Ok(())
}

pub(super) fn overlap(e: &Env) -> Result<()> {
    let a = e.gpu.alloc(4 * GPU_PAGE_SIZE, 0)?;
    let g = GPU_PAGE_SIZE;
    let mrs = [
        e.core.register(RegParams::mr(a.va, 3 * g))?,
        e.core.register(RegParams::mr(a.va + g + 100, 2 * g))?,
        e.core.register(RegParams::mr(a.va, 3 * g))?,
    ];
    let inval = e.invalidating(&mrs[0])?;
    let cbs = e.gpu.free(a.va)?;
    e.note(format!(
        "free of one allocation under 3 MRs: {cbs} callbacks"
    ));
    if inval {
        check(cbs == 3, || {
            format!("{cbs} callbacks for 3 pinned MRs over the freed allocation, expected 3")
        })?;
    }
    for mr in mrs {
        let q = e.core.query(mr.handle)?;
        if inval {
            check(q.state != state::MAPPED, || {
                format!("MR {} still mapped after free", mr.handle)
            })?;
        }
        finish(e, mr.handle)?;
    }
    Ok(())
}
