//! Firmware page commands: QUERY_PAGES (how many 4 KiB pages the firmware wants) and
//! MANAGE_PAGES (give pages to it, or take them back), with the list of page addresses (`pas`,
//! big-endian 64-bit DMA addresses) that follows the MANAGE_PAGES header.
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h` `mlx5_ifc_query_pages_{in,out}_bits`,
//! `mlx5_ifc_manage_pages_{in,out}_bits` and their `op_mod` enums; use: kernel
//! `drivers/net/ethernet/mellanox/mlx5/core/pagealloc.c`, rdma-core `mlx5_vfio.c`
//! (`mlx5_vfio_satisfy_startup_pages`, `mlx5_vfio_give_pages`).
//!
//! Owns: formats. Must not: allocate or track pages (the driver's `pages`).

use crate::error::Result;

crate::prm_layout! {
    /// QUERY_PAGES input (`mlx5_ifc_query_pages_in_bits`).
    pub struct QueryPagesIn("query_pages_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_PAGES` (0x107).
        opcode, set_opcode: 0x0, 16;
        /// Which pages ([`QueryPagesOpMod`]).
        op_mod, set_op_mod: 0x30, 16;
        /// Address the embedded CPU's function; 0.
        embedded_cpu_function, set_embedded_cpu_function: 0x40, 1;
        /// Function asked about; 0 = this function.
        function_id, set_function_id: 0x50, 16;
    }
}

crate::prm_layout! {
    /// QUERY_PAGES output (`mlx5_ifc_query_pages_out_bits`).
    pub struct QueryPagesOut("query_pages_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// Echo of the embedded-CPU flag.
        embedded_cpu_function, set_embedded_cpu_function: 0x40, 1;
        /// The function the pages are for (give it back in MANAGE_PAGES).
        function_id, set_function_id: 0x50, 16;
        /// Pages wanted, as raw bits: the value is a signed 32-bit count, see
        /// [`QueryPagesOut::num_pages_i32`].
        num_pages, set_num_pages: 0x60, 32;
    }
}

impl<T: AsRef<[u8]>> QueryPagesOut<T> {
    /// `num_pages` as the signed count it is: positive = give that many pages, negative =
    /// the firmware has that many to return (kernel `mlx5_cmd_query_pages`: `*npages =
    /// MLX5_GET(query_pages_out, out, num_pages)` into an `s32`).
    pub fn num_pages_i32(&self) -> i32 {
        self.num_pages() as i32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryPagesOut<T> {
    /// Sets `num_pages` from a signed count (two's complement, as the device writes it).
    pub fn set_num_pages_i32(&mut self, n: i32) -> Result<&mut Self> {
        self.set_num_pages(n as u32)
    }
}

/// QUERY_PAGES `op_mod` (kernel `MLX5_QUERY_PAGES_IN_OP_MOD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryPagesOpMod(pub u16);

impl QueryPagesOpMod {
    /// Pages needed before INIT_HCA's capabilities are set (`BOOT_PAGES`).
    pub const BOOT: Self = Self(0x1);
    /// Pages needed by INIT_HCA (`INIT_PAGES`).
    pub const INIT: Self = Self(0x2);
    /// Pages for normal operation (`REGULAR_PAGES`).
    pub const REGULAR: Self = Self(0x3);
}

crate::prm_layout! {
    /// MANAGE_PAGES input header (`mlx5_ifc_manage_pages_in_bits`, 16 bytes); the `pas` list
    /// of `input_num_entries` BE64 page addresses follows at byte 0x10.
    pub struct ManagePagesIn("manage_pages_in", 0x10) {
        /// `MLX5_CMD_OP_MANAGE_PAGES` (0x108).
        opcode, set_opcode: 0x0, 16;
        /// Give, take, or report failure ([`ManagePagesOpMod`]).
        op_mod, set_op_mod: 0x30, 16;
        /// Address the embedded CPU's function; 0.
        embedded_cpu_function, set_embedded_cpu_function: 0x40, 1;
        /// The function from QUERY_PAGES / the page request event.
        function_id, set_function_id: 0x50, 16;
        /// Number of `pas` entries given (GIVE) or asked for (TAKE).
        input_num_entries, set_input_num_entries: 0x60, 32;
    }
}

crate::prm_layout! {
    /// MANAGE_PAGES output header (`mlx5_ifc_manage_pages_out_bits`, 16 bytes); for TAKE, the
    /// returned page addresses follow at byte 0x10.
    pub struct ManagePagesOut("manage_pages_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// Number of `pas` entries returned (TAKE).
        output_num_entries, set_output_num_entries: 0x40, 32;
    }
}

/// MANAGE_PAGES `op_mod` (kernel `MLX5_MANAGE_PAGES_IN_OP_MOD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ManagePagesOpMod(pub u16);

impl ManagePagesOpMod {
    /// The driver could not allocate the requested pages (`ALLOCATION_FAIL`).
    pub const ALLOC_FAIL: Self = Self(0x0);
    /// Give pages to the firmware (`ALLOCATION_SUCCESS`).
    pub const GIVE: Self = Self(0x1);
    /// Take pages back from the firmware (`HCA_RETURN_PAGES`).
    pub const TAKE: Self = Self(0x2);
}

/// Byte offset of the `pas` list in MANAGE_PAGES input and output.
pub const PAS_OFF: usize = 0x10;
/// Bytes per `pas` entry.
pub const PAS_ENTRY_LEN: usize = 8;

/// MANAGE_PAGES input length for `n` page addresses (header + `n` × 8), saturating.
pub const fn manage_pages_in_len(n: usize) -> usize {
    PAS_OFF.saturating_add(n.saturating_mul(PAS_ENTRY_LEN))
}

/// MANAGE_PAGES output length for `n` returned page addresses.
pub const fn manage_pages_out_len(n: usize) -> usize {
    manage_pages_in_len(n)
}

crate::cmd::list::be64_list!(
    ManagePagesIn,
    "manage_pages_in.pas",
    PAS_OFF,
    pas,
    set_pas,
    pas_len
);
crate::cmd::list::be64_list!(
    ManagePagesOut,
    "manage_pages_out.pas",
    PAS_OFF,
    pas,
    set_pas,
    pas_len
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn pas_list_is_big_endian_after_the_header() {
        let mut buf = [0u8; 0x20];
        let mut m = ManagePagesIn::new_checked(&mut buf[..]).unwrap();
        assert_eq!(m.pas_len(), 2);
        m.set_pas(1, 0x0102_0304_0506_0708).unwrap();
        assert!(matches!(
            m.set_pas(2, 0),
            Err(Error::IndexOutOfRange {
                index: 2,
                len: 2,
                ..
            })
        ));
        assert!(matches!(
            m.pas(usize::MAX),
            Err(Error::IndexOutOfRange { .. })
        ));
        assert_eq!(m.pas(1).unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(&buf[0x18..0x20], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(manage_pages_in_len(2), 0x20);
        assert_eq!(manage_pages_in_len(usize::MAX), usize::MAX);
    }

    #[test]
    fn num_pages_is_signed() {
        let mut buf = [0u8; 0x10];
        let mut o = QueryPagesOut::new_checked(&mut buf[..]).unwrap();
        o.set_num_pages_i32(-3).unwrap();
        assert_eq!(o.num_pages_i32(), -3);
        assert_eq!(&buf[0xc..0x10], &[0xff, 0xff, 0xff, 0xfd]);
    }
}
