//! What the sim's fuzz targets share: the raw driver of the sim's integration tests
//! (`sim/tests/common`, brought in whole as [`common`]), input readers ([`input`]), RoCEv2
//! packet fix-ups that let fuzzed packets reach deep ([`packet`]), and the persistent worlds
//! the targets start every input from ([`persist`]).
//!
//! Owns: nothing of the sim; everything here drives it through `Device`'s public API (and
//! `UdpLink`'s). Must not: keep state from one input to the next other than through a
//! snapshot and reset (a finding must replay from its input file alone).

#[path = "../../tests/common/mod.rs"]
pub mod common;
pub mod input;
pub mod packet;
pub mod persist;
