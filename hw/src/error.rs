//! The one error type of `bypass-hw`: what went wrong when a buffer was viewed or a field set.
//!
//! Owns: [`Error`]. Must not: allocate, or carry anything but `'static` names and numbers
//! (the crate is `no_std`).

/// Why a view over a buffer could not be made, or a field could not be written.
///
/// Every variant names the layout or field it concerns, so the message alone tells a reader
/// which format was being decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the layout.
    #[error("{what}: the buffer holds {got} bytes but the layout needs {need}")]
    Truncated {
        /// The layout being viewed (its PRM / rdma-core / IBTA name).
        what: &'static str,
        /// Bytes the layout needs.
        need: usize,
        /// Bytes the buffer has.
        got: usize,
    },
    /// A value wider than the field it was written to (it would have been silently truncated).
    #[error("{what}: value {value:#x} does not fit in its {bits}-bit field")]
    FieldOverflow {
        /// The field (`layout.field`).
        what: &'static str,
        /// The value the caller tried to store.
        value: u64,
        /// The field's width in bits.
        bits: u32,
    },
    /// An index into a repeated entry (a PAS list, a GID table, ...) past the end of the buffer.
    #[error("{what}: entry {index} is outside the {len} entries the buffer holds")]
    IndexOutOfRange {
        /// The array being indexed.
        what: &'static str,
        /// The index asked for.
        index: usize,
        /// How many entries fit.
        len: usize,
    },
    /// The bytes are long enough but do not form a valid instance of the format.
    #[error("{what}: {reason}")]
    Malformed {
        /// The format being decoded.
        what: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;
