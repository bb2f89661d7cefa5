//! Inline payload of a send WQE, as the engine keeps it: short payloads by value, longer ones
//! shared.
//!
//! Owns: [`InlineData`]. Must not: know WQE layouts (the engine's `wqe` parses them) or where
//! the payload goes (the requester and `frame` read it as a byte slice).
//!
//! Why two forms: a WQE's inline payload is handed on to the burst that carries it (and kept
//! by the WQE for a retransmission). Sharing it through an `Arc` costs an allocation and a
//! free per WQE; a latency-bound exchange sends a few bytes (perftest's `ib_write_lat`
//! default is 2, `bypass perf compare` uses 8), which are cheaper to copy by value than to
//! count. Longer payloads (up to the device's inline limit) stay shared, copied once.

use std::sync::Arc;

/// Payloads up to this many bytes are kept by value.
pub(crate) const SMALL_INLINE: usize = 32;

/// Inline payload bytes: by value when short, else shared (cloning never copies more than
/// [`SMALL_INLINE`] bytes).
#[derive(Clone)]
pub(crate) enum InlineData {
    /// At most [`SMALL_INLINE`] bytes, by value: the first `len` of `bytes`.
    Small {
        /// Bytes used.
        len: u8,
        /// The payload, zero-padded.
        bytes: [u8; SMALL_INLINE],
    },
    /// A longer payload, shared with the bursts that carry it.
    Shared(Arc<[u8]>),
}

impl InlineData {
    /// The payload as bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Self::Small { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            Self::Shared(b) => b,
        }
    }
}

impl Default for InlineData {
    /// No bytes.
    fn default() -> Self {
        Self::Small {
            len: 0,
            bytes: [0; SMALL_INLINE],
        }
    }
}

impl From<&[u8]> for InlineData {
    /// A copy of `data`: by value if it is short, else in one shared allocation.
    fn from(data: &[u8]) -> Self {
        match u8::try_from(data.len()) {
            Ok(len) if data.len() <= SMALL_INLINE => {
                let mut bytes = [0u8; SMALL_INLINE];
                if let Some(dst) = bytes.get_mut(..data.len()) {
                    dst.copy_from_slice(data);
                }
                Self::Small { len, bytes }
            }
            _ => Self::Shared(Arc::from(data)),
        }
    }
}

impl std::ops::Deref for InlineData {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for InlineData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InlineData").field(&self.as_slice()).finish()
    }
}

impl PartialEq for InlineData {
    /// Equal payload bytes, whichever form holds them.
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for InlineData {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_payloads_are_kept_by_value_and_long_ones_shared_with_the_same_bytes() {
        for n in [0usize, 1, 8, SMALL_INLINE, SMALL_INLINE + 1, 256] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
            let d = InlineData::from(&data[..]);
            assert_eq!(&*d, &data[..], "{n} bytes");
            assert_eq!(
                matches!(d, InlineData::Small { .. }),
                n <= SMALL_INLINE,
                "{n} bytes"
            );
            let c = d.clone();
            assert_eq!(c, d);
            assert_eq!(c.len(), n);
        }
    }

    #[test]
    fn payloads_of_different_forms_compare_by_their_bytes() {
        let a = InlineData::from(&b"abc"[..]);
        let b = InlineData::Shared(Arc::from(&b"abc"[..]));
        assert_eq!(a, b);
        assert_ne!(a, InlineData::from(&b"abd"[..]));
    }
}
