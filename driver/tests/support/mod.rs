//! Test support shared by the driver's integration tests.
//!
//! Owns: [`edu`], a driver for QEMU's `edu` device (the VFIO backend's proof on a real kernel).

pub mod edu;
