//! Fixed-size, byte-aligned layouts (WQE segments, CQEs, EQEs, command entries, RoCE headers)
//! as `zerocopy` structs with big-endian fields, viewed in place over a byte buffer.
//!
//! Owns: the [`View`] trait, which gives every such struct a length-checked `view` /
//! `view_mut` that returns [`Error::Truncated`] instead of panicking on short input.
//! Must not: copy; a view is a reference into the caller's buffer.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, Result};

/// A fixed layout that can be viewed in place over the front of a byte buffer.
///
/// Implementors are `#[repr(C)]`, `Unaligned` (all fields are bytes or `zerocopy`'s
/// big-endian integers), so a view can only fail on length.
pub trait View: FromBytes + IntoBytes + KnownLayout + Immutable + Unaligned + Sized {
    /// The layout's name in the source it follows (e.g. `mlx5_wqe_ctrl_seg`).
    const NAME: &'static str;

    /// The layout's size in bytes.
    const SIZE: usize = core::mem::size_of::<Self>();

    /// Views the first `SIZE` bytes of `buf`.
    fn view(buf: &[u8]) -> Result<&Self> {
        Self::ref_from_prefix(buf)
            .map(|(v, _)| v)
            .map_err(|_| Error::Truncated {
                what: Self::NAME,
                need: Self::SIZE,
                got: buf.len(),
            })
    }

    /// Views the first `SIZE` bytes of `buf`, writable.
    fn view_mut(buf: &mut [u8]) -> Result<&mut Self> {
        let got = buf.len();
        Self::mut_from_prefix(buf)
            .map(|(v, _)| v)
            .map_err(|_| Error::Truncated {
                what: Self::NAME,
                need: Self::SIZE,
                got,
            })
    }
}

/// Implements [`View`] for layouts, naming each after its source.
#[macro_export]
macro_rules! impl_view {
    ($($ty:ty => $name:literal),* $(,)?) => {
        $(impl $crate::view::View for $ty {
            const NAME: &'static str = $name;
        })*
    };
}
