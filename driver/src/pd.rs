//! Protection domains (ALLOC_PD / DEALLOC_PD) and the unpredictable key variants of the MRs
//! registered in them.
//!
//! Follows rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_alloc_pd`: ALLOC_PD, the `pd`
//! field of the output; `mlx5_vfio_dealloc_pd`) and `mlx5_vfio_reg_mr` for the key variant
//! (`mkey_7_0`), which here comes from a generator seeded once from the OS, so keys are
//! neither 0 nor guessable from their index.
//!
//! Owns: [`Pd`]. Must not: register memory (that is `mr.rs`) or create queues.

use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::pd_uar::{AllocPdIn, AllocPdOut, DeallocPdIn};

use crate::cmdq::input;
use crate::error::{DriverError, Result};
use crate::hca::Hca;

/// A protection domain. Memory regions and QPs in it hold an `Arc` of it; DEALLOC_PD runs
/// when the last one is gone. `Debug` never shows the key generator's state (it predicts
/// every later key).
pub struct Pd {
    hca: Arc<Hca>,
    pdn: u32,
    /// xorshift64* state for mkey variants, seeded from `/dev/urandom` at allocation.
    rng: Mutex<u64>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd")
            .field("pdn", &self.pdn)
            .field("hca", &self.hca)
            .finish_non_exhaustive()
    }
}

fn os_seed() -> Result<u64> {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| DriverError::Unsupported {
            what: "reading /dev/urandom to seed memory key variants",
            fix: if e.kind() == std::io::ErrorKind::NotFound {
                "mount /dev (the driver needs /dev/urandom once per PD)"
            } else {
                "check the permissions of /dev/urandom"
            },
        })?;
    // xorshift needs a non-zero state.
    Ok(u64::from_ne_bytes(b) | 1)
}

impl Pd {
    /// ALLOC_PD.
    pub fn alloc(hca: &Arc<Hca>) -> Result<Arc<Self>> {
        let seed = os_seed()?;
        let i = input(Opcode::ALLOC_PD, 0, AllocPdIn::LEN);
        let o = hca.exec_create(&i, AllocPdOut::LEN, crate::limits::Resource::Pd)?;
        let pdn = AllocPdOut::new_checked(&o[..])
            .map_err(|source| DriverError::BadOutput {
                op: Opcode::ALLOC_PD,
                source,
            })?
            .pd();
        tracing::debug!(pdn, "ALLOC_PD");
        Ok(Arc::new(Self {
            hca: hca.clone(),
            pdn,
            rng: Mutex::new(seed),
        }))
    }

    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// The device.
    pub fn hca(&self) -> &Arc<Hca> {
        &self.hca
    }

    /// A fresh non-zero key variant (`mkey_7_0`) for a new MR (control path).
    pub fn next_key_variant(&self) -> u8 {
        let mut s = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            // xorshift64* (Vigna): good enough to make keys unpredictable to a peer that
            // only sees the keys it was given.
            *s ^= *s >> 12;
            *s ^= *s << 25;
            *s ^= *s >> 27;
            let v = (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
            if v != 0 {
                return v;
            }
        }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        let mut i = input(Opcode::DEALLOC_PD, 0, DeallocPdIn::LEN);
        if let Ok(mut d) = DeallocPdIn::new_checked(&mut i[..]) {
            let _ = d.set_pd(self.pdn);
        }
        if let Err(e) = self.hca.cmdq().exec(&i, 16) {
            tracing::error!(pdn = self.pdn, error = %e, "DEALLOC_PD failed; the PD leaks");
        }
    }
}
