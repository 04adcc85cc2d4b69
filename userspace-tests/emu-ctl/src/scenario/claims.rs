//! Which registrations a client must claim and which it must refuse or leave to others:
//! non-PCI devices, host memory, registrations without INVAL_SUPP.

use super::env::{check, Env};
use crate::error::{EmuError, Result};
use crate::nvp2p::GPU_PAGE_SIZE;
use crate::peer_mem::{self, qflags, state, RegParams};

pub(super) fn non_pci(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mut p = RegParams::mr(a.va, a.size);
    p.device = peer_mem::device::NONPCI;
    match e.core.register(p) {
        Ok(mr) => {
            e.core.deregister(mr.handle, false)?;
            e.gpu.free(a.va)?;
            Err(EmuError::Check(
                "MR mapped for a non-PCI dma_device (rule: check dev_is_pci before to_pci_dev)"
                    .into(),
            ))
        }
        Err(err) => {
            e.note(format!("non-PCI dma_device refused: {err}"));
            e.gpu.free(a.va)?;
            Ok(())
        }
    }
}

pub(super) fn host_memory(e: &Env) -> Result<()> {
    let len = 4 * GPU_PAGE_SIZE as usize;
    let buf = vec![0u8; len + GPU_PAGE_SIZE as usize];
    let addr = (buf.as_ptr() as u64).div_ceil(GPU_PAGE_SIZE) * GPU_PAGE_SIZE;
    let mr = e.core.register(RegParams::mr(addr, len as u64))?;
    let q = e.core.query(mr.handle)?;
    e.note(format!("host memory MR: {}", state::name(q.state)));
    check(q.state == state::HOST, || {
        format!(
            "host memory registered as {} (a client claimed host memory)",
            state::name(q.state)
        )
    })?;
    e.core.deregister(mr.handle, false)?;
    let mut p = RegParams::mr(addr, len as u64);
    p.flags = peer_mem::reg_flags::NO_GUP;
    match e.core.register(p) {
        Ok(mr) => {
            e.core.deregister(mr.handle, false)?;
            Err(EmuError::Check("a peer client claimed host memory (rule: acquire returns 0 for memory that is not the provider's)".into()))
        }
        Err(err) => {
            e.note(format!("host memory without GUP: {err}"));
            drop(buf);
            Ok(())
        }
    }
}

pub(super) fn no_inval_supp(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mut p = RegParams::mr(a.va, a.size);
    p.peer_flags = peer_mem::peer_flags::ALLOW;
    let clients = e.core.clients()?;
    let any_persistent = clients.iter().any(|c| !c.invalidating);
    match e.core.register(p) {
        Ok(mr) => {
            check(any_persistent, || {
                "an invalidating client served a registration without INVAL_SUPP".into()
            })?;
            let q = e.core.query(mr.handle)?;
            check(q.flags & qflags::INVALIDATING == 0, || {
                "CQ-style buffer served by an invalidating client".into()
            })?;
            e.core.deregister(mr.handle, false)?;
        }
        Err(err) => {
            check(!any_persistent, || {
                format!("CQ-style registration failed with a persistent client loaded: {err}")
            })?;
            e.note(format!("no persistent client: refused ({err})"));
        }
    }
    e.gpu.free(a.va)?;
    Ok(())
}
