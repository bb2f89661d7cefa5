//! The syndromes the sim's firmware core reports in `mbox_out.syndrome`, one per distinct check.
//!
//! Owns: the numbers and their one-line meanings ([`ALL`], [`name`], [`describe`]). Must not:
//! decide when a check fails (the handlers do).
//!
//! Real firmware syndromes are opaque 32-bit values that only NVIDIA's tools decode. The sim's
//! are its own, stable and documented, so a test (or a user reading a log) can tell which check
//! refused a command. Families: `0x0100_xxxx` dispatch and command queue, `0x0101_xxxx`
//! bring-up order, `0x0102_xxxx` pages, `0x0103_xxxx` capabilities, `0x0104_xxxx` vport and
//! registers, `0x0105_xxxx` PD/UAR, `0x0106_xxxx` mkeys, `0x0107_xxxx` CQs, `0x0108_xxxx` EQs,
//! `0x0109_xxxx` SRQs (RMPs), `0x010a_xxxx` congestion control.
//! (The QP commands, in `firmware::qp`, use `0x0500_xxxx`.)

macro_rules! syndromes {
    ($( #[doc = $doc:literal] $name:ident = $val:expr; )*) => {
        $( #[doc = $doc] pub const $name: u32 = $val; )*

        /// Every syndrome of the firmware core: name, value, meaning.
        pub const ALL: &[(&str, u32, &str)] = &[$( (stringify!($name), $val, $doc.trim_ascii()) ),*];
    };
}

syndromes! {
    /// The opcode is not one the device implements.
    UNKNOWN_OPCODE = 0x0100_0001;
    /// `inlen` is shorter than the opcode's input layout.
    INLEN_TOO_SHORT = 0x0100_0002;
    /// `outlen` is shorter than the opcode's output (layout plus any list it returns).
    OUTLEN_TOO_SHORT = 0x0100_0003;
    /// The input is shorter than the list (pas, MTT, register data) its fields announce.
    LIST_TRUNCATED = 0x0100_0004;
    /// `op_mod` is not one this opcode defines.
    BAD_OP_MOD = 0x0100_0005;
    /// The command names another function, vport or the embedded CPU: the sim has one function.
    OTHER_FUNCTION = 0x0100_0006;
    /// A `uid` other than 0 (no DEVX user contexts in the sim).
    BAD_UID = 0x0100_0007;

    /// Only ENABLE_HCA is accepted before the function is enabled.
    NEED_ENABLE_HCA = 0x0101_0001;
    /// ENABLE_HCA on a function that is already enabled.
    ALREADY_ENABLED = 0x0101_0002;
    /// The command needs INIT_HCA first.
    NEED_INIT_HCA = 0x0101_0003;
    /// INIT_HCA without a SET_ISSI first.
    NEED_SET_ISSI = 0x0101_0004;
    /// The command needs the boot pages (QUERY_PAGES BOOT / MANAGE_PAGES GIVE) first.
    NEED_BOOT_PAGES = 0x0101_0005;
    /// INIT_HCA before the init pages were given.
    NEED_INIT_PAGES = 0x0101_0006;
    /// INIT_HCA on an HCA that is already initialized (or torn down without DISABLE_HCA).
    ALREADY_INITIALIZED = 0x0101_0007;
    /// SET_ISSI or SET_HCA_CAP after INIT_HCA: the interface is fixed by then.
    TOO_LATE_AFTER_INIT = 0x0101_0008;
    /// DISABLE_HCA while the HCA is initialized: TEARDOWN_HCA first.
    NEED_TEARDOWN = 0x0101_0009;
    /// SET_ISSI with an ISSI the device does not support (it supports 0 and 1).
    UNSUPPORTED_ISSI = 0x0101_000a;
    /// TEARDOWN_HCA with a profile the device does not know or support.
    BAD_TEARDOWN_PROFILE = 0x0101_000b;

    /// A MANAGE_PAGES page address is not 4 KiB aligned.
    PAGE_UNALIGNED = 0x0102_0001;
    /// A MANAGE_PAGES page is not mapped for device read and write in the IOMMU.
    PAGE_NOT_MAPPED = 0x0102_0002;
    /// A MANAGE_PAGES page is already held by the firmware (given twice).
    PAGE_DUPLICATE = 0x0102_0003;
    /// QUERY_PAGES with an op_mod that is not BOOT, INIT or REGULAR.
    BAD_PAGES_OP_MOD = 0x0102_0004;

    /// QUERY_HCA_CAP / SET_HCA_CAP for a capability type the device does not have.
    UNSUPPORTED_CAP_TYPE = 0x0103_0001;
    /// SET_HCA_CAP sets a field above its maximum (the MAX capability page).
    CAP_ABOVE_MAX = 0x0103_0002;
    /// SET_HCA_CAP enables command signatures (`cmdif_checksum` = 3), which the sim does not check.
    CAP_CHECKSUM_UNSUPPORTED = 0x0103_0003;

    /// Port number 0 or above the number of ports.
    BAD_PORT = 0x0104_0001;
    /// QUERY_HCA_VPORT_GID index beyond the GID table.
    GID_INDEX = 0x0104_0002;
    /// MODIFY_NIC_VPORT_CONTEXT changes a field only the e-switch manager may change.
    VPORT_FIELD_NOT_SETTABLE = 0x0104_0003;
    /// MODIFY_NIC_VPORT_CONTEXT with an MTU outside 68..=the port's maximum.
    VPORT_BAD_MTU = 0x0104_0004;
    /// ACCESS_REG of a register the device does not implement.
    UNKNOWN_REGISTER = 0x0104_0005;
    /// PAOS write with an admin status that is not UP (1) or DOWN (2).
    BAD_ADMIN_STATUS = 0x0104_0006;

    /// The PD does not exist.
    PD_UNKNOWN = 0x0105_0001;
    /// DEALLOC_PD while mkeys or QPs still use the PD.
    PD_IN_USE = 0x0105_0002;
    /// Every PD (`log_max_pd`) is allocated.
    PD_EXHAUSTED = 0x0105_0003;
    /// The UAR does not exist.
    UAR_UNKNOWN = 0x0105_0004;
    /// DEALLOC_UAR while CQs, EQs or QPs still ring doorbells through it.
    UAR_IN_USE = 0x0105_0005;
    /// Every UAR page of BAR0 is allocated.
    UAR_EXHAUSTED = 0x0105_0006;

    /// The mkey index does not exist.
    MKEY_UNKNOWN = 0x0106_0001;
    /// Every mkey (`log_max_mkey`) is in use.
    MKEY_EXHAUSTED = 0x0106_0002;
    /// An access mode other than MTT (PA, KLM, KSM are not modelled).
    MKEY_ACCESS_MODE = 0x0106_0003;
    /// `mkc.free` = 1 (a key to be filled by UMR): UMR is not modelled.
    MKEY_FREE = 0x0106_0004;
    /// `log_page_size` below 12 or above the advertised `max_mkey_log_entity_size_mtt`.
    MKEY_PAGE_SIZE = 0x0106_0005;
    /// `translations_octword_size` does not cover the pages of `[start_addr, start_addr + len)`.
    MKEY_OCTWORDS = 0x0106_0006;
    /// An MTT entry is not aligned to the mkey's page size.
    MKEY_MTT_UNALIGNED = 0x0106_0007;
    /// `length64` (a key over the whole address space) with an MTT.
    MKEY_LENGTH64 = 0x0106_0008;
    /// `start_addr + len` wraps around the address space.
    MKEY_RANGE_WRAPS = 0x0106_0009;
    /// UMEM-backed mkey (`mkey_umem_valid`): UMEM is not modelled.
    MKEY_UMEM = 0x0106_000a;

    /// The CQ does not exist.
    CQ_UNKNOWN = 0x0107_0001;
    /// DESTROY_CQ while QPs still use the CQ.
    CQ_IN_USE = 0x0107_0002;
    /// Every CQ (`log_max_cq`) is in use.
    CQ_EXHAUSTED = 0x0107_0003;
    /// `log_cq_size` above `log_max_cq_sz`.
    CQ_TOO_LARGE = 0x0107_0004;
    /// `cqe_sz` is not 64 or 128 bytes.
    CQ_BAD_CQE_SIZE = 0x0107_0005;
    /// `c_eqn` names no EQ.
    CQ_EQ_UNKNOWN = 0x0107_0006;
    /// `uar_page` names no allocated UAR.
    CQ_UAR_UNKNOWN = 0x0107_0007;
    /// A CQ page address is not aligned to the page size.
    CQ_PAS_UNALIGNED = 0x0107_0008;
    /// `log_page_size` gives pages above 2 GiB.
    CQ_PAGE_SIZE = 0x0107_0009;
    /// A feature the sim does not model: UMEM buffers, CQE compression, collapsed CQs.
    CQ_UNSUPPORTED = 0x0107_000a;
    /// MODIFY_CQ resize (`cq_resize` is 0 in the capabilities).
    CQ_RESIZE_UNSUPPORTED = 0x0107_000b;

    /// The EQ does not exist.
    EQ_UNKNOWN = 0x0108_0001;
    /// DESTROY_EQ while CQs still report to it.
    EQ_IN_USE = 0x0108_0002;
    /// Every EQ (`log_max_eq`) is in use.
    EQ_EXHAUSTED = 0x0108_0003;
    /// `log_eq_size` above `log_max_eq_sz`.
    EQ_TOO_LARGE = 0x0108_0004;
    /// `intr` is not an MSI-X vector of the device.
    EQ_BAD_VECTOR = 0x0108_0005;
    /// `uar_page` names no allocated UAR.
    EQ_UAR_UNKNOWN = 0x0108_0006;
    /// An EQ page address is not aligned to the page size.
    EQ_PAS_UNALIGNED = 0x0108_0007;
    /// `log_page_size` gives pages above 2 GiB.
    EQ_PAGE_SIZE = 0x0108_0008;

    /// The SRQ (RMP) does not exist.
    SRQ_UNKNOWN = 0x0109_0001;
    /// DESTROY_RMP while QPs still take receives from the SRQ.
    SRQ_IN_USE = 0x0109_0002;
    /// Every SRQ (`log_max_srq`) is in use.
    SRQ_EXHAUSTED = 0x0109_0003;
    /// `wq.log_wq_sz` above `log_max_srq_sz`.
    SRQ_TOO_LARGE = 0x0109_0004;
    /// `wq.log_wq_stride` below 32 bytes (next segment and one scatter entry) or above `max_wqe_sz_rq`.
    SRQ_BAD_STRIDE = 0x0109_0005;
    /// `wq.pd` names no PD.
    SRQ_PD_UNKNOWN = 0x0109_0006;
    /// `wq.wq_type` is not a linked list, or a feature the sim does not model (UMEM, signatures).
    SRQ_UNSUPPORTED = 0x0109_0007;
    /// `rmpc.state` (CREATE) or `rmp_state` (MODIFY) is not RDY.
    SRQ_BAD_STATE = 0x0109_0008;
    /// `wq.lwm` is not below the number of WQEs.
    SRQ_BAD_LIMIT = 0x0109_0009;
    /// An SRQ page address is not aligned to the page size.
    SRQ_PAS_UNALIGNED = 0x0109_000a;
    /// `log_wq_pg_sz` gives pages above 2 GiB.
    SRQ_PAGE_SIZE = 0x0109_000b;

    /// A congestion command without its capability (`cc_query_allowed` / `cc_modify_allowed`).
    CONG_NOT_ALLOWED = 0x010a_0001;
    /// `cong_protocol` is not the RoCE ECN reaction point (1) or notification point (2).
    CONG_BAD_NODE = 0x010a_0002;
    /// `priority` above 7.
    CONG_BAD_PRIORITY = 0x010a_0003;
    /// `tag_enable` set: tagging is 802.1Qau (QCN), which the sim does not model.
    CONG_TAG_UNSUPPORTED = 0x010a_0004;
    /// MODIFY_CONG_PARAMS selects a field the node does not have.
    CONG_BAD_FIELD_SELECT = 0x010a_0005;
    /// MODIFY_CONG_PARAMS sets a parameter out of its range (e.g. `rpg_min_dec_fac` above 100).
    CONG_PARAM_RANGE = 0x010a_0006;
}

/// The name of syndrome `s`, if the firmware core defines it.
pub fn name(s: u32) -> Option<&'static str> {
    ALL.iter().find(|(_, v, _)| *v == s).map(|(n, _, _)| *n)
}

/// The one-line meaning of syndrome `s`, if the firmware core defines it.
pub fn describe(s: u32) -> Option<&'static str> {
    ALL.iter().find(|(_, v, _)| *v == s).map(|(_, _, d)| *d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_are_unique_and_named() {
        let mut seen = std::collections::BTreeSet::new();
        for (n, v, d) in ALL {
            assert!(seen.insert(*v), "{n} reuses {v:#x}");
            assert!(!d.is_empty());
            assert_eq!(name(*v), Some(*n));
        }
        assert_eq!(name(0), None);
    }
}
