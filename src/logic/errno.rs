// SPDX-License-Identifier: GPL-2.0

//! The errno nvpeer hands the peer-memory core, which passes it on to user space.
//!
//! NVIDIA's P2P API returns the kernel-internal `ENOTSUPP` (524) when a GPU or a mapping does not
//! support P2P; `ibv_reg_mr` would report it as "Unknown error 524". The codes from 512 up are
//! not part of the user ABI (include/linux/errno.h): 524 becomes `EOPNOTSUPP`, the others that
//! can come out of a driver call (`ETOOSMALL` to `ERECALLCONFLICT`, 525-530) become `EIO`. The
//! restart codes (512-523) are left alone: the syscall layer turns them into `EINTR` or restarts.

/// `ENOTSUPP`, kernel-internal.
pub(crate) const ENOTSUPP: i32 = 524;
/// `EOPNOTSUPP`, the user-visible "operation not supported".
pub(crate) const EOPNOTSUPP: i32 = 95;
/// `EIO`.
pub(crate) const EIO: i32 = 5;

/// Maps a positive errno to the one user space may see.
pub(crate) const fn user_errno(errno: i32) -> i32 {
    match errno {
        ENOTSUPP => EOPNOTSUPP,
        525..=530 => EIO,
        _ => errno,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_codes_never_pass() {
        assert_eq!(user_errno(ENOTSUPP), EOPNOTSUPP);
        for e in 525..=530 {
            assert_eq!(user_errno(e), EIO, "errno {e}");
        }
    }

    #[test]
    fn user_codes_and_restarts_pass_unchanged() {
        for e in (1..=133).chain(512..=523) {
            assert_eq!(user_errno(e), e, "errno {e}");
        }
    }
}
