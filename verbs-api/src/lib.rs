//! # bypass-verbs: the safe application API of bypass
//!
//! This crate will hold `Context`, `Pd`, `Mr`, `Cq` and `Qp` on top of `bypass-driver`, with
//! the soundness rules of the README (memory referenced by a posted work request cannot be
//! freed or mutated by safe code until its completion is polled).
//!
//! It has no code yet; it arrives with the driver's issue.

pub use bypass_driver as driver;
