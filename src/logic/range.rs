// SPDX-License-Identifier: GPL-2.0

//! GPU page geometry: the 64 KiB-aligned cover of a user range.
//!
//! `nvidia_p2p_get_pages` only accepts 64 KiB aligned start and length, while the peer-memory core
//! hands the client the raw user range. Every size here comes from user space, so all arithmetic
//! is checked: an overflowing range is "not ours", never a panic.

/// Shift of the only GPU page size NVIDIA's P2P API produces (64 KiB).
pub(crate) const GPU_PAGE_SHIFT: u32 = 16;
/// The GPU page size in bytes.
pub(crate) const GPU_PAGE_SIZE: u64 = 1 << GPU_PAGE_SHIFT;
const GPU_PAGE_MASK: u64 = GPU_PAGE_SIZE - 1;

/// A 64 KiB aligned byte range `[start, start + len)` with `len > 0`.
///
/// # Invariants
///
/// `start` and `len` are multiples of [`GPU_PAGE_SIZE`], `len > 0` and `start + len` does not
/// overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cover {
    start: u64,
    len: u64,
}

impl Cover {
    /// First byte of the cover.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// Length in bytes (a whole number of GPU pages).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Number of 64 KiB pages.
    pub(crate) fn pages(&self) -> u64 {
        self.len >> GPU_PAGE_SHIFT
    }
}

/// Smallest 64 KiB aligned range that contains `[addr, addr + size)`.
///
/// Returns `None` for an empty range or when the end (rounded up) does not fit in 64 bits.
pub(crate) fn cover(addr: u64, size: u64) -> Option<Cover> {
    if size == 0 {
        return None;
    }
    let end = addr.checked_add(size)?;
    let end = end.checked_add(GPU_PAGE_MASK)? & !GPU_PAGE_MASK;
    let start = addr & !GPU_PAGE_MASK;
    // INVARIANT: both ends are aligned, `end > start` because `size > 0`, no overflow above.
    Some(Cover {
        start,
        len: end - start,
    })
}

/// The cover of `[addr, addr + size)` and where the range sits in it.
pub(crate) fn placed(addr: u64, size: u64) -> Option<(Cover, Trim)> {
    let c = cover(addr, size)?;
    // `c` is the smallest aligned range holding the user range, so both offsets are below one GPU
    // page and fit; no subtraction can wrap (`cover` checked the end).
    let lead = u16::try_from(addr - c.start).ok()?;
    let tail = u16::try_from(c.start + c.len - (addr + size)).ok()?;
    Some((c, Trim { lead, tail }))
}

/// Where a user range sits in its cover: the bytes of the cover before and after it, each less
/// than one GPU page. Made only by [`placed`], together with its cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trim {
    lead: u16,
    tail: u16,
}

impl Trim {
    /// The user range `(addr, size)` in `c`, the cover [`placed`] returned with this trim.
    pub(crate) fn user_range(&self, c: &Cover) -> (u64, u64) {
        let lead = u64::from(self.lead);
        (c.start + lead, c.len - lead - u64::from(self.tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_gives_the_user_range_back() {
        // Aligned, unaligned, the largest lead (0xffff), the largest tail (0xffff), the top of the
        // address space.
        for (addr, size) in [
            (0x10_0000, 0x2_0000),
            (0x1_0001, 0x1_0000),
            (0x1_ffff, 2),
            (0x1_0000, 1),
            (0xffff, 1),
            (u64::MAX - 0x1_ffff, 0x1_0000),
        ] {
            let p = placed(addr, size);
            assert!(p.is_some(), "{addr:#x}+{size:#x} refused");
            assert_eq!(p.map(|(c, _)| c), cover(addr, size));
            assert_eq!(p.map(|(c, t)| t.user_range(&c)), Some((addr, size)));
        }
        // What `cover` refuses, `placed` refuses.
        assert_eq!(placed(0x10_0000, 0), None);
        assert_eq!(placed(u64::MAX, 2), None);
    }

    #[test]
    fn aligned_range_is_its_own_cover() {
        let c = cover(0x10_0000, 0x2_0000).unwrap();
        assert_eq!((c.start(), c.len(), c.pages()), (0x10_0000, 0x2_0000, 2));
    }

    #[test]
    fn unaligned_range_grows_both_ways() {
        let c = cover(0x1_0001, 0x1_0000).unwrap();
        assert_eq!((c.start(), c.len(), c.pages()), (0x1_0000, 0x2_0000, 2));
        let c = cover(0x1_ffff, 2).unwrap();
        assert_eq!((c.start(), c.len()), (0x1_0000, 0x2_0000));
    }

    #[test]
    fn one_byte() {
        let c = cover(0x12_3456, 1).unwrap();
        assert_eq!((c.start(), c.len()), (0x12_0000, 0x1_0000));
    }

    #[test]
    fn empty_and_overflowing_ranges_are_refused() {
        assert_eq!(cover(0x1000, 0), None);
        assert_eq!(cover(u64::MAX, 1), None);
        assert_eq!(cover(u64::MAX - 0xffff, 0x1000), None); // end rounds past 2^64
        assert_eq!(cover(1, u64::MAX), None);
    }

    #[test]
    fn highest_representable_cover() {
        let c = cover(u64::MAX - 0x1_ffff, 0x1_0000).unwrap();
        assert_eq!(c.start() + c.len(), u64::MAX - 0xffff);
    }
}
