//! Reading a fuzz input: bytes, big-endian integers and length-prefixed records, each
//! yielding what is there (short or zero at the end) rather than failing.
//!
//! Owns: [`Input`]. Must not: panic on any input.

/// The unread rest of a fuzz input.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a>(pub &'a [u8]);

impl<'a> Input<'a> {
    /// True when nothing is left.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Up to `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }

    /// One byte (0 at the end).
    pub fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    /// A big-endian u16 (missing bytes read as 0).
    pub fn u16(&mut self) -> u16 {
        let b = self.take(2);
        u16::from(b.first().copied().unwrap_or(0)) << 8 | u16::from(b.get(1).copied().unwrap_or(0))
    }

    /// A record: a big-endian u16 length (taken modulo `max + 1`) and that many bytes.
    pub fn record(&mut self, max: usize) -> &'a [u8] {
        let n = usize::from(self.u16()) % (max + 1);
        self.take(n)
    }
}
