//! The `mem.*` cases: the memory backend alone (allocation, free, copies), before any registration.

use super::Suite;
use crate::cli::MemKind;
use crate::pattern;
use crate::report::CaseResult;

impl Suite {
    pub(super) fn mem_cases(&mut self) {
        let max = self.args.max_size;
        self.case("mem.alloc-free", |s| {
            let Some(be) = s.backend.clone() else {
                return CaseResult::skip("mem.alloc-free", "no memory backend");
            };
            let mut b = match be.alloc(max as usize) {
                Ok(b) => b,
                Err(e) => {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        e.to_string(),
                        "GPU out of memory or driver error",
                    )
                }
            };
            let mut detail = format!("{max} bytes at {:#x}", b.addr());
            if be.cpu_access() {
                let p = pattern::generate(s.seed, 0, max as usize);
                if let Err(e) = b.write(0, &p) {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        e.to_string(),
                        "copy to the buffer failed",
                    );
                }
                let mut back = vec![0u8; max as usize];
                if let Err(e) = b.read(0, &mut back) {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        e.to_string(),
                        "copy from the buffer failed",
                    );
                }
                if let Some(i) = pattern::first_mismatch(s.seed, 0, &back) {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        format!("pattern mismatch at byte {i}"),
                        "memory corrupts data",
                    );
                }
                detail.push_str(", pattern written and read back");
            }
            match b.release() {
                Ok(()) => CaseResult::pass("mem.alloc-free", format!("{detail}, freed")),
                Err(e) => CaseResult::fail("mem.alloc-free", e.to_string(), "free failed"),
            }
        });
        if self.backend.as_ref().map(|b| b.kind()) == Some(MemKind::CudaDmabuf) {
            self.case("mem.dmabuf-export", |s| {
                let mut sizes = vec![];
                for sz in [1u64, 65536, 65537, max] {
                    let mut b = match s.alloc(sz) {
                        Ok(b) => b,
                        Err(e) => return CaseResult::fail("mem.dmabuf-export", format!("{sz} bytes: {e}"), "cuMemGetHandleForAddressRange failed: driver/kernel without dma-buf export"),
                    };
                    let Some(d) = b.dmabuf() else {
                        return CaseResult::fail("mem.dmabuf-export", "no fd", "export returned nothing");
                    };
                    let link = std::fs::read_link(format!("/proc/self/fd/{}", d.fd)).map(|p| p.display().to_string()).unwrap_or_default();
                    if !link.contains("dmabuf") {
                        return CaseResult::fail("mem.dmabuf-export", format!("fd {} is '{link}'", d.fd), "the exported fd is not a dma-buf");
                    }
                    if let Err(e) = b.release() {
                        return CaseResult::fail("mem.dmabuf-export", e.to_string(), "free after export failed");
                    }
                    sizes.push(sz.to_string());
                }
                CaseResult::pass("mem.dmabuf-export", format!("exported, checked (anon_inode:dmabuf) and freed: {} bytes", sizes.join(", ")))
            });
        }
    }
}
