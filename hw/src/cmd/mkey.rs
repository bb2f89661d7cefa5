//! Memory key commands: the mkey context (`mkc`) and CREATE_MKEY / QUERY_MKEY / DESTROY_MKEY,
//! the MTT list that follows CREATE_MKEY, access modes and flags, and key arithmetic.
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_mkc_bits`,
//! `mlx5_ifc_create_mkey_in_bits`, `MLX5_MKC_ACCESS_MODE_*`), `include/linux/mlx5/device.h`
//! (`MLX5_MTT_READ`/`WRITE`) and rdma-core `providers/mlx5/mlx5_vfio.c` (`vfio_reg_mr`: `lr = 1`,
//! lw/rw/rr/a from the `IBV_ACCESS_*` flags, `mkey = mkey_index << 8 | mkey_7_0`, `get_octo_len`,
//! MTT entries `iova | MLX5_MTT_READ | MLX5_MTT_WRITE`).
//!
//! Owns: the mkey command layouts and helpers. Must not: allocate keys or keep state.

use crate::cmd::list::{be64_list, bytes_get, with_be64_list};
use crate::error::Result;

/// `mkc.access_mode` values (kernel mlx5_ifc.h `MLX5_MKC_ACCESS_MODE_*`), split across
/// `access_mode_4_2` and `access_mode_1_0` ([`Mkc::access_mode`]).
pub mod access_mode {
    /// `MLX5_MKC_ACCESS_MODE_PA`: physical addresses, no translation.
    pub const PA: u8 = 0x0;
    /// `MLX5_MKC_ACCESS_MODE_MTT`: translated through the MTT list (the usual MR).
    pub const MTT: u8 = 0x1;
    /// `MLX5_MKC_ACCESS_MODE_KLMS`: indirect, through key-length-address entries.
    pub const KLMS: u8 = 0x2;
    /// `MLX5_MKC_ACCESS_MODE_KSM`: indirect, fixed-size KLM entries.
    pub const KSM: u8 = 0x3;
}

/// MTT entry flag: the page may be read (kernel device.h / rdma-core `MLX5_MTT_READ`).
pub const MLX5_MTT_READ: u64 = 1 << 0;
/// MTT entry flag: the page may be written (kernel device.h / rdma-core `MLX5_MTT_WRITE`).
pub const MLX5_MTT_WRITE: u64 = 1 << 1;

/// The MTT entry for a page at `iova` with `flags` ([`MLX5_MTT_READ`] | [`MLX5_MTT_WRITE`]).
/// The page address's low bits must be zero; they are overwritten by the flags.
pub const fn mtt_entry(iova: u64, flags: u64) -> u64 {
    (iova & !0x3) | (flags & 0x3)
}

/// The 32-bit key (lkey/rkey) of mkey `index` with variant byte `variant`:
/// `(index << 8) | variant`. Only the low 24 bits of `index` exist in the hardware.
pub const fn mkey_from(index: u32, variant: u8) -> u32 {
    ((index & 0x00ff_ffff) << 8) | variant as u32
}

/// The mkey index of a key (`key >> 8`), as CREATE_MKEY returns and DESTROY_MKEY takes it.
pub const fn mkey_index(key: u32) -> u32 {
    key >> 8
}

/// The variant byte of a key (`mkc.mkey_7_0`).
pub const fn mkey_variant(key: u32) -> u8 {
    key as u8
}

/// The number of 16-byte octowords `n_mtt` MTT entries take: `ceil(n / 2)` (rdma-core
/// `get_octo_len`), the value of `translations_octword_size` and
/// `translations_octword_actual_size`.
pub const fn octo_len(n_mtt: usize) -> usize {
    n_mtt.div_ceil(2)
}

bitflags::bitflags! {
    /// Access rights of a memory key, as `ibv_access_flags` numbers them (rdma-core
    /// `libibverbs/verbs.h`); [`Mkc::set_access`] maps them to `lw`/`rw`/`rr`/`a` (local read is
    /// always on, as in rdma-core's `vfio_reg_mr`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct MkeyAccess: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE` → `mkc.lw`.
        const LOCAL_WRITE = 1 << 0;
        /// `IBV_ACCESS_REMOTE_WRITE` → `mkc.rw`.
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ` → `mkc.rr`.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC` → `mkc.a`.
        const REMOTE_ATOMIC = 1 << 3;
    }
}

crate::prm_layout! {
    /// The memory key context (`mlx5_ifc_mkc_bits`, 64 bytes).
    pub struct Mkc("mkc", 0x40) {
        /// The mkey is free (QUERY_MKEY) / to be created free.
        free, set_free: 0x1, 1;
        /// Access mode bits 4..2 ([`access_mode`]).
        access_mode_4_2, set_access_mode_4_2: 0x3, 3;
        /// Relaxed ordering for writes through this key.
        relaxed_ordering_write, set_relaxed_ordering_write: 0xd, 1;
        /// Small fence on RDMA read responses.
        small_fence_on_rdma_read_response, set_small_fence_on_rdma_read_response: 0xf, 1;
        /// UMR may modify this key.
        umr_en, set_umr_en: 0x10, 1;
        /// Remote atomic access.
        a, set_a: 0x11, 1;
        /// Remote write access.
        rw, set_rw: 0x12, 1;
        /// Remote read access.
        rr, set_rr: 0x13, 1;
        /// Local write access.
        lw, set_lw: 0x14, 1;
        /// Local read access.
        lr, set_lr: 0x15, 1;
        /// Access mode bits 1..0 ([`access_mode`]).
        access_mode_1_0, set_access_mode_1_0: 0x16, 2;
        /// Memory-attached translation mode.
        ma_translation_mode, set_ma_translation_mode: 0x1a, 2;
        /// QP the key is bound to; `0xffffff` = any.
        qpn, set_qpn: 0x20, 24;
        /// The key's variant byte (its low 8 bits).
        mkey_7_0, set_mkey_7_0: 0x38, 8;
        /// The key spans the whole 2^64 address space (`len` ignored).
        length64, set_length64: 0x60, 1;
        /// A BSF (signature) is attached.
        bsf_en, set_bsf_en: 0x61, 1;
        /// Synchronous UMR.
        sync_umr, set_sync_umr: 0x62, 1;
        /// Expected signature error count.
        expected_sigerr_count, set_expected_sigerr_count: 0x65, 1;
        /// Remote invalidate enabled.
        en_rinval, set_en_rinval: 0x67, 1;
        /// Protection domain.
        pd, set_pd: 0x68, 24;
        /// First virtual address the key covers (the address the wire and WQEs use).
        start_addr, set_start_addr: 0x80, 64;
        /// Length in bytes (the kernel's name; not a collection length).
        #[allow(clippy::len_without_is_empty)]
        len, set_len: 0xc0, 64;
        /// BSF size in octowords.
        bsf_octword_size, set_bsf_octword_size: 0x100, 32;
        /// Translation entries in octowords ([`octo_len`]).
        translations_octword_size, set_translations_octword_size: 0x1a0, 32;
        /// Relaxed ordering for reads through this key.
        relaxed_ordering_read, set_relaxed_ordering_read: 0x1d9, 1;
        /// log2 of the translation page size (absolute; rdma-core mlx5_vfio uses 12 for 4 KiB).
        log_page_size, set_log_page_size: 0x1db, 5;
    }
}

impl<T: AsRef<[u8]>> Mkc<T> {
    /// The 5-bit access mode, `access_mode_4_2 << 2 | access_mode_1_0`.
    pub fn access_mode(&self) -> u8 {
        ((self.access_mode_4_2() << 2) | self.access_mode_1_0()) as u8
    }

    /// The remote/local-write rights as [`MkeyAccess`] (local read is not represented).
    pub fn access(&self) -> MkeyAccess {
        let mut f = MkeyAccess::empty();
        f.set(MkeyAccess::LOCAL_WRITE, self.lw() != 0);
        f.set(MkeyAccess::REMOTE_WRITE, self.rw() != 0);
        f.set(MkeyAccess::REMOTE_READ, self.rr() != 0);
        f.set(MkeyAccess::REMOTE_ATOMIC, self.a() != 0);
        f
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mkc<T> {
    /// Sets the 5-bit access mode across `access_mode_4_2` and `access_mode_1_0`.
    ///
    /// Errors: [`Error::FieldOverflow`](crate::Error::FieldOverflow) for a mode above 31.
    pub fn set_access_mode(&mut self, mode: u8) -> Result<&mut Self> {
        if mode > 0x1f {
            return Err(crate::Error::FieldOverflow {
                what: "access_mode",
                value: u64::from(mode),
                bits: 5,
            });
        }
        self.set_access_mode_4_2(u32::from(mode >> 2))?
            .set_access_mode_1_0(u32::from(mode & 3))
    }

    /// Sets `lr = 1` and `lw`/`rw`/`rr`/`a` from `access` (rdma-core `vfio_reg_mr`).
    pub fn set_access(&mut self, access: MkeyAccess) -> Result<&mut Self> {
        let b = |f: MkeyAccess| u32::from(access.contains(f));
        self.set_lr(1)?
            .set_lw(b(MkeyAccess::LOCAL_WRITE))?
            .set_rw(b(MkeyAccess::REMOTE_WRITE))?
            .set_rr(b(MkeyAccess::REMOTE_READ))?
            .set_a(b(MkeyAccess::REMOTE_ATOMIC))
    }
}

/// Byte offset of `klm_pas_mtt[]` in CREATE_MKEY (bit 0x880).
pub const MKEY_MTT_OFFSET: usize = 0x110;

crate::prm_layout! {
    /// CREATE_MKEY input (`mlx5_ifc_create_mkey_in_bits`): 0x110 bytes, then `klm_pas_mtt[]`
    /// (BE64 MTT entries, [`CreateMkeyIn::klm_pas_mtt`]).
    pub struct CreateMkeyIn("create_mkey_in", 0x110) {
        /// [`crate::cmd::Opcode::CREATE_MKEY`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The MTT list in this mailbox is valid (set when passing `klm_pas_mtt[]`).
        pg_access, set_pg_access: 0x60, 1;
        /// The translation is a DEVX umem instead of the inline MTT list.
        mkey_umem_valid, set_mkey_umem_valid: 0x61, 1;
        /// Number of octowords actually passed in `klm_pas_mtt[]` ([`octo_len`]).
        translations_octword_actual_size, set_translations_octword_actual_size: 0x300, 32;
        sub {
            /// The mkey context.
            memory_key_mkey_entry, memory_key_mkey_entry_mut: Mkc @ 0x10;
        }
    }
}

be64_list!(
    CreateMkeyIn,
    "create_mkey_in.klm_pas_mtt",
    MKEY_MTT_OFFSET,
    klm_pas_mtt,
    set_klm_pas_mtt,
    klm_pas_mtt_capacity
);

impl<T: AsRef<[u8]>> CreateMkeyIn<T> {
    /// Alias of [`CreateMkeyIn::memory_key_mkey_entry`] (the `mkc`).
    pub fn mkc(&self) -> Mkc<&[u8]> {
        self.memory_key_mkey_entry()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CreateMkeyIn<T> {
    /// Alias of [`CreateMkeyIn::memory_key_mkey_entry_mut`] (the `mkc`).
    pub fn mkc_mut(&mut self) -> Mkc<&mut [u8]> {
        self.memory_key_mkey_entry_mut()
    }
}

/// Bytes of a CREATE_MKEY input carrying `n_mtt` MTT entries, padded to whole octowords (an
/// odd count gets one zero entry, as the kernel's `mlx5_ib` `ALIGN(npages, 2)` does).
pub const fn create_mkey_in_len(n_mtt: usize) -> usize {
    with_be64_list(CreateMkeyIn::LEN, octo_len(n_mtt).saturating_mul(2))
}

crate::prm_layout! {
    /// CREATE_MKEY output (`mlx5_ifc_create_mkey_out_bits`).
    pub struct CreateMkeyOut("create_mkey_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The new mkey's index (the key is [`mkey_from`]`(index, mkc.mkey_7_0)`).
        mkey_index, set_mkey_index: 0x48, 24;
    }
}

crate::prm_layout! {
    /// QUERY_MKEY input (`mlx5_ifc_query_mkey_in_bits`).
    pub struct QueryMkeyIn("query_mkey_in", 0x10) {
        /// [`crate::cmd::Opcode::QUERY_MKEY`].
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The mkey to query.
        mkey_index, set_mkey_index: 0x48, 24;
        /// Return the translation entries too.
        pg_access, set_pg_access: 0x60, 1;
    }
}

/// Byte offset of `query_mkey_out.bsf0_klm0_pas_mtt0_1` (bit 0x880, 16 bytes).
pub const QUERY_MKEY_BSF0_OFFSET: usize = 0x110;
/// Byte offset of `query_mkey_out.bsf1_klm1_pas_mtt2_3` (bit 0x900, 16 bytes).
pub const QUERY_MKEY_BSF1_OFFSET: usize = 0x120;

crate::prm_layout! {
    /// QUERY_MKEY output (`mlx5_ifc_query_mkey_out_bits`, 0x130 bytes). The two 128-bit
    /// translation fields have byte accessors ([`QueryMkeyOut::bsf0_klm0_pas_mtt0_1`]).
    pub struct QueryMkeyOut("query_mkey_out", 0x130) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        sub {
            /// The mkey context.
            memory_key_mkey_entry, memory_key_mkey_entry_mut: Mkc @ 0x10;
        }
    }
}

impl<T: AsRef<[u8]>> QueryMkeyOut<T> {
    /// `bsf0_klm0_pas_mtt0_1[16][0x8]`: the first two MTT entries (or BSF/KLM), as bytes.
    pub fn bsf0_klm0_pas_mtt0_1(&self) -> [u8; 16] {
        bytes_get(self.buf.as_ref(), QUERY_MKEY_BSF0_OFFSET)
    }

    /// `bsf1_klm1_pas_mtt2_3[16][0x8]`: MTT entries 2 and 3 (or BSF/KLM), as bytes.
    pub fn bsf1_klm1_pas_mtt2_3(&self) -> [u8; 16] {
        bytes_get(self.buf.as_ref(), QUERY_MKEY_BSF1_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryMkeyOut<T> {
    /// Sets `bsf0_klm0_pas_mtt0_1` (used by the sim to answer QUERY_MKEY).
    pub fn set_bsf0_klm0_pas_mtt0_1(&mut self, v: &[u8; 16]) -> Result<&mut Self> {
        crate::cmd::list::bytes_set(
            "query_mkey_out.bsf0_klm0_pas_mtt0_1",
            self.buf.as_mut(),
            QUERY_MKEY_BSF0_OFFSET,
            v,
        )?;
        Ok(self)
    }

    /// Sets `bsf1_klm1_pas_mtt2_3`.
    pub fn set_bsf1_klm1_pas_mtt2_3(&mut self, v: &[u8; 16]) -> Result<&mut Self> {
        crate::cmd::list::bytes_set(
            "query_mkey_out.bsf1_klm1_pas_mtt2_3",
            self.buf.as_mut(),
            QUERY_MKEY_BSF1_OFFSET,
            v,
        )?;
        Ok(self)
    }
}

crate::prm_layout! {
    /// DESTROY_MKEY input (`mlx5_ifc_destroy_mkey_in_bits`).
    pub struct DestroyMkeyIn("destroy_mkey_in", 0x10) {
        /// [`crate::cmd::Opcode::DESTROY_MKEY`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The mkey to destroy ([`mkey_index`] of its key).
        mkey_index, set_mkey_index: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DESTROY_MKEY output (`mlx5_ifc_destroy_mkey_out_bits`).
    pub struct DestroyMkeyOut("destroy_mkey_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_arithmetic() {
        assert_eq!(mkey_from(0x12_3456, 0x78), 0x1234_5678);
        assert_eq!(mkey_index(0x1234_5678), 0x12_3456);
        assert_eq!(mkey_variant(0x1234_5678), 0x78);
        assert_eq!(mkey_from(0xff12_3456, 0), 0x1234_5600);
        assert_eq!(
            (octo_len(0), octo_len(1), octo_len(2), octo_len(3)),
            (0, 1, 1, 2)
        );
        assert_eq!(create_mkey_in_len(3), 0x110 + 32);
        assert_eq!(mtt_entry(0x1000, MLX5_MTT_READ | MLX5_MTT_WRITE), 0x1003);
    }

    #[test]
    fn access_mode_and_flags_round_trip() {
        let mut b = [0u8; 0x40];
        let mut m = Mkc::new_checked(&mut b[..]).unwrap();
        m.set_access_mode(access_mode::MTT).unwrap();
        m.set_access(MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_READ)
            .unwrap();
        assert_eq!(m.access_mode(), 1);
        assert_eq!(
            m.access(),
            MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_READ
        );
        assert!(m.set_access_mode(0x20).is_err());
        // Byte 2 holds bits 0x10..0x17: rr (0x13) = 0x10, lw (0x14) = 0x08, lr (0x15) = 0x04,
        // access_mode_1_0 (0x16..0x17) = 1.
        assert_eq!(b[2], 0b0001_1101);
    }
}
