//! Page-aligned host memory (anonymous mmap): the baseline backend.

use super::{check_range, page_size, round_up, Backend, Buffer, MemError};
use crate::cli::MemKind;

pub struct HostBackend;

impl Backend for HostBackend {
    fn kind(&self) -> MemKind {
        MemKind::Host
    }
    fn facts(&self) -> Vec<(String, String)> {
        vec![("page size".into(), page_size().to_string())]
    }
    fn alloc(&self, size: usize) -> Result<Box<dyn Buffer>, MemError> {
        Ok(Box::new(HostBuffer::new(size)?))
    }
}

/// An anonymous private mapping.
///
/// # Invariants
/// While `ptr` is non-null it points to a live mapping of `map_len` bytes created by `new`,
/// and `len <= map_len`.
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
    map_len: usize,
}

impl HostBuffer {
    pub fn new(size: usize) -> Result<Self, MemError> {
        let map_len = round_up(size.max(1), page_size())
            .ok_or_else(|| MemError::Unsupported(format!("size {size} is too large")))?;
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MemError::Os {
                what: format!("mmap of {map_len} bytes"),
                err: std::io::Error::last_os_error(),
            });
        }
        Ok(HostBuffer {
            ptr: p.cast(),
            len: size,
            map_len,
        })
    }

    /// The bytes of the buffer (for the CPU-side checks of host memory).
    pub fn as_slice(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: per the invariant the mapping is live and at least `len` bytes long.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Buffer for HostBuffer {
    fn addr(&self) -> u64 {
        self.ptr as u64
    }
    fn len(&self) -> usize {
        self.len
    }
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), MemError> {
        if self.ptr.is_null() {
            return Err(MemError::Released);
        }
        check_range(offset, data.len(), self.len)?;
        // SAFETY: range checked against the live mapping; `data` cannot overlap our mapping
        // through a safe reference we handed out mutably.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemError> {
        if self.ptr.is_null() {
            return Err(MemError::Released);
        }
        check_range(offset, out.len(), self.len)?;
        // SAFETY: range checked against the live mapping. The NIC may write concurrently; the
        // harness only reads after the transfer's completion was polled.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn release(&mut self) -> Result<(), MemError> {
        if self.ptr.is_null() {
            return Ok(());
        }
        // SAFETY: unmapping exactly the mapping created in `new`; the pointer is cleared so it
        // is never used again.
        let r = unsafe { libc::munmap(self.ptr.cast(), self.map_len) };
        self.ptr = std::ptr::null_mut();
        if r != 0 {
            return Err(MemError::Os {
                what: "munmap".into(),
                err: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }
    fn is_released(&self) -> bool {
        self.ptr.is_null()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_roundtrip_and_release() {
        let mut b = HostBuffer::new(10_000).unwrap();
        assert_eq!(b.addr() % page_size() as u64, 0);
        b.write(9_990, &[7u8; 10]).unwrap();
        let mut out = [0u8; 10];
        b.read(9_990, &mut out).unwrap();
        assert_eq!(out, [7u8; 10]);
        assert!(b.write(9_991, &[0u8; 10]).is_err());
        b.release().unwrap();
        assert!(b.is_released());
        assert!(matches!(b.read(0, &mut out), Err(MemError::Released)));
        b.release().unwrap();
    }
}
