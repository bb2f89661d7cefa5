//! Trailing lists and byte arrays of command layouts: the `pas[]`/`klm_pas_mtt[]` big-endian
//! 64-bit entries after a fixed layout (`u8 pas[][0x40]` in `mlx5_ifc.h`), and fields wider than
//! 64 bits (`rgid_rip[16][0x8]`).
//!
//! Owns: the bounds-checked accessors every object command with such a list shares (CQ, EQ,
//! QP, mkey, MANAGE_PAGES) and the `be64_list!` macro that gives a layout its `pas`/`set_pas`.
//! Must not: know any particular command.

use crate::error::{Error, Result};

/// How many whole 8-byte entries fit in `buf` after byte `base`.
pub(crate) const fn be64_capacity(buf_len: usize, base: usize) -> usize {
    buf_len.saturating_sub(base) / 8
}

/// Reads big-endian 64-bit entry `index` of the list that starts at byte `base` of `buf`.
///
/// Errors: [`Error::IndexOutOfRange`] if the entry does not lie wholly inside `buf`.
pub(crate) fn be64_get(what: &'static str, buf: &[u8], base: usize, index: usize) -> Result<u64> {
    let len = be64_capacity(buf.len(), base);
    let oob = Error::IndexOutOfRange { what, index, len };
    if index >= len {
        return Err(oob);
    }
    // index < len <= (buf.len() - base) / 8, so these additions cannot overflow.
    let start = base + index * 8;
    let bytes: [u8; 8] = buf
        .get(start..start + 8)
        .and_then(|s| s.try_into().ok())
        .ok_or(oob)?;
    Ok(u64::from_be_bytes(bytes))
}

/// Writes big-endian 64-bit entry `index` of the list that starts at byte `base` of `buf`.
///
/// Errors: [`Error::IndexOutOfRange`] if the entry does not lie wholly inside `buf`.
pub(crate) fn be64_set(
    what: &'static str,
    buf: &mut [u8],
    base: usize,
    index: usize,
    value: u64,
) -> Result<()> {
    let len = be64_capacity(buf.len(), base);
    let oob = Error::IndexOutOfRange { what, index, len };
    if index >= len {
        return Err(oob);
    }
    let start = base + index * 8;
    let slot = buf.get_mut(start..start + 8).ok_or(oob)?;
    slot.copy_from_slice(&value.to_be_bytes());
    Ok(())
}

/// `fixed + 8 * n`, saturating (a length no buffer can have rather than a wrapped small one).
pub(crate) const fn with_be64_list(fixed: usize, n: usize) -> usize {
    fixed.saturating_add(n.saturating_mul(8))
}

/// Reads `N` bytes at byte `off` (a byte array field such as `rgid_rip[16][0x8]`); bytes missing
/// from a short buffer read as zero, like [`crate::prm::Field::get`].
pub(crate) fn bytes_get<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = off
            .checked_add(i)
            .and_then(|j| buf.get(j))
            .copied()
            .unwrap_or(0);
    }
    out
}

/// Writes `N` bytes at byte `off`. Errors: [`Error::Truncated`] if the buffer ends first.
pub(crate) fn bytes_set<const N: usize>(
    what: &'static str,
    buf: &mut [u8],
    off: usize,
    value: &[u8; N],
) -> Result<()> {
    let got = buf.len();
    let need = off.saturating_add(N);
    let dst = buf
        .get_mut(off..need)
        .ok_or(Error::Truncated { what, need, got })?;
    dst.copy_from_slice(value);
    Ok(())
}

/// Implements the `pas[]` accessors of a layout whose fixed part is followed by a BE64 list.
macro_rules! be64_list {
    ($ty:ident, $what:literal, $base:expr, $get:ident, $set:ident, $cap:ident) => {
        impl<T: AsRef<[u8]>> $ty<T> {
            #[doc = concat!("Entry `index` of `", $what, "` (a BE64 after the fixed layout).\n\n",
                "Errors: [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) past the buffer's end.")]
            pub fn $get(&self, index: usize) -> $crate::Result<u64> {
                $crate::cmd::list::be64_get($what, self.buf.as_ref(), $base, index)
            }

            #[doc = concat!("How many `", $what, "` entries the buffer has room for.")]
            pub fn $cap(&self) -> usize {
                $crate::cmd::list::be64_capacity(self.buf.as_ref().len(), $base)
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $ty<T> {
            #[doc = concat!("Sets entry `index` of `", $what, "`.\n\n",
                "Errors: [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) past the buffer's end.")]
            pub fn $set(&mut self, index: usize, value: u64) -> $crate::Result<&mut Self> {
                $crate::cmd::list::be64_set($what, self.buf.as_mut(), $base, index, value)?;
                Ok(self)
            }
        }
    };
}
pub(crate) use be64_list;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn be64_list_bounds() {
        let mut b = [0u8; 0x110 + 16];
        assert_eq!(be64_capacity(b.len(), 0x110), 2);
        be64_set("x", &mut b, 0x110, 1, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(&b[0x118..0x120], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(be64_get("x", &b, 0x110, 1).unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(
            be64_get("x", &b, 0x110, 2),
            Err(Error::IndexOutOfRange {
                what: "x",
                index: 2,
                len: 2
            })
        );
        assert!(be64_get("x", &b[..4], 0x110, 0).is_err());
        assert!(be64_get("x", &b, 0x110, usize::MAX).is_err());
    }
}
