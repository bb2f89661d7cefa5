//! PRM bit fields: the addressing scheme of every mlx5 firmware command layout.
//!
//! The mlx5 PRM (and the kernel's `include/linux/mlx5/mlx5_ifc.h`, which transcribes it as
//! `struct mlx5_ifc_*_bits { u8 field[width]; }`) numbers the bits of a layout as one
//! big-endian bit stream: bit 0 is the most significant bit of byte 0, bit 8 the most
//! significant bit of byte 1, and a field of `width` bits at `bit_off` occupies bits
//! `bit_off .. bit_off + width`. This is what the kernel's `MLX5_SET`/`MLX5_GET` and
//! rdma-core's `DEVX_SET`/`DEVX_GET` compute with `__mlx5_bit_off` / `__mlx5_dw_bit_off`.
//!
//! Owns: [`Field`] (one field's position) and the [`prm_layout!`](crate::prm_layout) macro
//! that turns a list of fields into a typed view with a getter and a checked setter per field.
//! Must not: know any particular command; those live in [`crate::cmd`].

use crate::error::{Error, Result};

/// One field of a PRM layout: its name in `mlx5_ifc.h`, its first bit and its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The field's name as `mlx5_ifc.h` spells it (e.g. `log_sq_size`).
    pub name: &'static str,
    /// First bit, PRM numbering (bit 0 = MSB of byte 0).
    pub bit_off: usize,
    /// Width in bits, 1..=64.
    pub width: usize,
}

impl Field {
    /// A field at `bit_off` of `width` bits.
    pub const fn new(name: &'static str, bit_off: usize, width: usize) -> Self {
        Self {
            name,
            bit_off,
            width,
        }
    }

    /// The number of bytes a buffer needs for this field to be inside it.
    pub const fn end_byte(&self) -> usize {
        (self.bit_off + self.width).div_ceil(8)
    }

    /// The largest value the field can hold.
    pub const fn max(&self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// Reads the field. Bytes missing from a short buffer read as zero (views check the
    /// length up front, so this only matters for raw callers); it never panics.
    pub fn get(&self, buf: &[u8]) -> u64 {
        let (first, nbytes, shift) = self.span();
        let mut acc: u128 = 0;
        for i in 0..nbytes {
            acc = (acc << 8) | u128::from(buf.get(first + i).copied().unwrap_or(0));
        }
        ((acc >> shift) as u64) & self.max()
    }

    /// Writes the field, leaving every other bit of the buffer as it was.
    ///
    /// Errors: [`Error::FieldOverflow`] if `value` has bits above the field's width (the PRM
    /// would silently drop them, which hides bugs such as a 3-bit `log_sra_max` given 20);
    /// [`Error::Truncated`] if the buffer ends before the field does.
    pub fn set(&self, buf: &mut [u8], value: u64) -> Result<()> {
        if value > self.max() {
            return Err(Error::FieldOverflow {
                what: self.name,
                value,
                bits: self.width as u32,
            });
        }
        if buf.len() < self.end_byte() {
            return Err(Error::Truncated {
                what: self.name,
                need: self.end_byte(),
                got: buf.len(),
            });
        }
        let (first, nbytes, shift) = self.span();
        let bytes = &mut buf[first..first + nbytes];
        let mut acc: u128 = 0;
        for b in bytes.iter() {
            acc = (acc << 8) | u128::from(*b);
        }
        let mask = u128::from(self.max()) << shift;
        acc = (acc & !mask) | (u128::from(value) << shift);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (acc >> (8 * (nbytes - 1 - i))) as u8;
        }
        Ok(())
    }

    /// `(first byte, bytes spanned, right shift of the field inside them)`.
    const fn span(&self) -> (usize, usize, usize) {
        let first = self.bit_off / 8;
        let last = (self.bit_off + self.width - 1) / 8;
        let nbytes = last - first + 1;
        let shift = nbytes * 8 - (self.bit_off % 8) - self.width;
        (first, nbytes, shift)
    }
}

/// Checks that `buf` holds at least `need` bytes for the layout `what`.
pub fn check_len(what: &'static str, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated {
            what,
            need,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Defines a typed view over a PRM layout: one getter and one checked setter per field, a
/// `FIELDS` table (for conformance tests and for dumping a context by name), and optional
/// sub-layouts (a `qpc` inside `create_qp_in`, an `ads` inside a `qpc`).
///
/// ```
/// bypass_hw::prm_layout! {
///     /// An example layout of 8 bytes.
///     pub struct Example("example", 8) {
///         /// 4 bits at the top of byte 0.
///         state, set_state: 0x0, 4;
///         /// A 32-bit field at byte 4.
///         word, set_word: 0x20, 32;
///     }
/// }
/// let mut buf = [0u8; 8];
/// let mut v = Example::new_checked(&mut buf[..]).unwrap();
/// v.set_state(0xa).unwrap().set_word(0x1234).unwrap();
/// assert_eq!(buf, [0xa0, 0, 0, 0, 0, 0, 0x12, 0x34]);
/// assert!(Example::new_checked(&[0u8; 7][..]).is_err());
/// ```
#[macro_export]
macro_rules! prm_layout {
    // The fields are split from the `sub { ... }` block one field at a time (arms are tried in
    // order, so `sub {` is recognised before it could be taken for a field name: one matcher
    // with both would be ambiguous to `macro_rules`).
    (
        $(#[$meta:meta])*
        pub struct $name:ident($ifc:literal, $len:expr) { $($body:tt)* }
    ) => {
        $crate::prm_layout!(@split [$(#[$meta])*] $name $ifc ($len) [] $($body)*);
    };
    (@split $m:tt $name:ident $ifc:literal $len:tt [$($f:tt)*] sub { $($s:tt)* }) => {
        $crate::prm_layout!(@emit $m $name $ifc $len [$($f)*] [$($s)*]);
    };
    (@split $m:tt $name:ident $ifc:literal $len:tt [$($f:tt)*]) => {
        $crate::prm_layout!(@emit $m $name $ifc $len [$($f)*] []);
    };
    (@split $m:tt $name:ident $ifc:literal $len:tt [$($f:tt)*]
        $(#[$fmeta:meta])* $get:ident, $set:ident : $off:expr, $width:tt; $($rest:tt)*) => {
        $crate::prm_layout!(@split $m $name $ifc $len
            [$($f)* $(#[$fmeta])* $get, $set : $off, $width;] $($rest)*);
    };
    (@emit [$(#[$meta:meta])*] $name:ident $ifc:literal ($len:expr)
        [$( $(#[$fmeta:meta])* $get:ident, $set:ident : $off:expr, $width:tt; )*]
        [$( $(#[$smeta:meta])* $sget:ident, $sget_mut:ident : $sty:ident @ $soff:expr; )*]
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T> {
            buf: T,
        }

                impl $name<()> {
            /// The layout's name in `mlx5_ifc.h` (without `mlx5_ifc_` and `_bits`).
            pub const IFC_NAME: &'static str = $ifc;
            /// The layout's size in bytes.
            pub const LEN: usize = $len;
            /// Every field of the layout, in order, with its PRM position.
            pub const FIELDS: &'static [$crate::prm::Field] = &[
                $( $crate::prm::Field::new(stringify!($get), $off, $width), )*
            ];
            /// Every sub-layout: `(name, byte offset, its fields)`.
            pub const SUBS: &'static [(&'static str, usize, &'static [$crate::prm::Field])] = &[
                $( (stringify!($sget), $soff, $sty::FIELDS), )*
            ];
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps `buf`, checking that it holds the whole layout.
            pub fn new_checked(buf: T) -> $crate::Result<Self> {
                $crate::prm::check_len($ifc, buf.as_ref(), $len)?;
                Ok(Self { buf })
            }

            /// Wraps `buf` without the length check. Not unsafe: getters read missing bytes as
            /// zero and setters fail with [`Error::Truncated`]. Used for sub-layouts, whose
            /// parent has already checked the length.
            #[doc(hidden)]
            pub const fn wrap_unchecked(buf: T) -> Self {
                Self { buf }
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buf
            }

            /// The layout's bytes (the first `LEN` bytes of the buffer).
            pub fn as_bytes(&self) -> &[u8] {
                let b = self.buf.as_ref();
                &b[..b.len().min($len)]
            }

            $(
                $(#[$fmeta])*
                pub fn $get(&self) -> $crate::prm_layout!(@ty $width) {
                    // The same tokens as the FIELDS entry, so the table checks the accessor.
                    const F: $crate::prm::Field = $crate::prm::Field::new(stringify!($get), $off, $width);
                    // The width is matched as a token (`@ty 64`): a forwarded `expr` never
                    // matches a literal, which made every 64-bit accessor a truncating u32 one.
                    const _: () = assert!(
                        core::mem::size_of::<$crate::prm_layout!(@ty $width)>() * 8 >= $width,
                        "prm_layout!: write a 64-bit width as the literal 64"
                    );
                    F.get(self.buf.as_ref()) as $crate::prm_layout!(@ty $width)
                }
            )*

            $(
                $(#[$smeta])*
                pub fn $sget(&self) -> $sty<&[u8]> {
                    let b = self.buf.as_ref();
                    $sty::wrap_unchecked(b.get($soff..).unwrap_or(&[]))
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The layout's bytes, writable.
            pub fn as_bytes_mut(&mut self) -> &mut [u8] {
                let b = self.buf.as_mut();
                let n = b.len().min($len);
                &mut b[..n]
            }

            $(
                #[doc = concat!("Sets `", stringify!($get), "` (", stringify!($width), " bits at bit ", stringify!($off), ").")]
                pub fn $set(&mut self, value: $crate::prm_layout!(@ty $width)) -> $crate::Result<&mut Self> {
                    const F: $crate::prm::Field = $crate::prm::Field::new(stringify!($get), $off, $width);
                    F.set(self.buf.as_mut(), u64::from(value))?;
                    Ok(self)
                }
            )*

            $(
                $(#[$smeta])*
                pub fn $sget_mut(&mut self) -> $sty<&mut [u8]> {
                    let b = self.buf.as_mut();
                    let n = b.len();
                    $sty::wrap_unchecked(b.get_mut($soff.min(n)..).unwrap_or_default())
                }
            )*
        }
    };
    (@ty 64) => { u64 };
    (@ty $w:expr) => { u32 };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_numbering_is_msb_first_big_endian() {
        let mut b = [0u8; 8];
        Field::new("a", 0, 4).set(&mut b, 0xf).unwrap();
        assert_eq!(b[0], 0xf0);
        Field::new("b", 0x14, 12).set(&mut b, 0xabc).unwrap();
        assert_eq!(&b[2..4], &[0x0a, 0xbc]);
        assert_eq!(Field::new("b", 0x14, 12).get(&b), 0xabc);
        Field::new("c", 0x0, 64)
            .set(&mut b, 0x0102_0304_0506_0708)
            .unwrap();
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn field_crossing_bytes_unaligned() {
        let mut b = [0u8; 4];
        let f = Field::new("x", 5, 6);
        f.set(&mut b, 0x3f).unwrap();
        assert_eq!(b, [0x07, 0xe0, 0, 0]);
        assert_eq!(f.get(&b), 0x3f);
    }

    #[test]
    fn set_rejects_overflow_and_short_buffers() {
        let mut b = [0u8; 2];
        assert!(matches!(
            Field::new("f", 0, 3).set(&mut b, 8),
            Err(Error::FieldOverflow { bits: 3, .. })
        ));
        assert!(matches!(
            Field::new("f", 16, 8).set(&mut b, 1),
            Err(Error::Truncated { .. })
        ));
        assert_eq!(Field::new("f", 16, 8).get(&b), 0);
        assert_eq!(b, [0, 0]);
    }
}
