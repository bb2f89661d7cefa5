//! No panic on any input: every bring-up view over random bytes of every length up to a bit
//! past its size, and every setter with random values.
//!
//! For each layout: `new_checked` / `view` returns `Truncated` exactly when the buffer is shorter
//! than the layout, every field reads back through its `Field` (the same constant the generated
//! getter uses), and setting a random value succeeds exactly when it fits the field's width
//! (else `FieldOverflow`, buffer unchanged) and then reads back.

use bypass_hw::cmd::entry::{self, CmdLayout, CmdMailbox, DeliveryStatus};
use bypass_hw::cmd::{caps, hca, pages, pd_uar, vport};
use bypass_hw::init_seg::{self, HealthSyndrome, InitSeg, NicInterface};
use bypass_hw::{Error, View};
use proptest::prelude::*;

/// Extra bytes past a layout's size that the length sweep covers.
const SLACK: usize = 24;

/// Random bytes long enough for the largest layout checked with it, plus random values whose
/// magnitudes spread over every width (a random u64 shifted right by a random amount).
fn inputs(max: usize) -> impl Strategy<Value = (Vec<u8>, Vec<u64>)> {
    (
        proptest::collection::vec(any::<u8>(), max + SLACK),
        proptest::collection::vec((any::<u64>(), 0u32..64).prop_map(|(v, s)| v >> s), 1..64),
    )
}

macro_rules! fuzz_layout {
    ($($ty:ident)::+, $bytes:expr, $values:expr) => {{
        type L = $($ty)::+<()>;
        let bytes: &[u8] = $bytes;
        let values: &[u64] = $values;
        for len in 0..=(L::LEN + SLACK).min(bytes.len()) {
            let buf = &bytes[..len];
            match $($ty)::+::new_checked(buf) {
                Ok(v) => {
                    assert!(len >= L::LEN, "{}: accepted {len} bytes", L::IFC_NAME);
                    for f in L::FIELDS {
                        let _ = f.get(v.as_bytes());
                    }
                    for (_, off, fields) in L::SUBS {
                        for f in *fields {
                            let _ = f.get(v.as_bytes().get(*off..).unwrap_or(&[]));
                        }
                    }
                }
                Err(Error::Truncated { need, got, .. }) => {
                    assert!(len < L::LEN, "{}: refused {len} bytes", L::IFC_NAME);
                    assert_eq!((need, got), (L::LEN, len));
                }
                Err(e) => panic!("{}: unexpected {e}", L::IFC_NAME),
            }
        }
        let mut buf = bytes[..L::LEN].to_vec();
        let mut v = $($ty)::+::new_checked(&mut buf[..]).expect("full length");
        for (i, f) in L::FIELDS.iter().enumerate() {
            let value = values[i % values.len()];
            let before = v.as_bytes().to_vec();
            match f.set(v.as_bytes_mut(), value) {
                Ok(()) => {
                    assert!(value <= f.max(), "{}.{}", L::IFC_NAME, f.name);
                    assert_eq!(f.get(v.as_bytes()), value, "{}.{}", L::IFC_NAME, f.name);
                }
                Err(Error::FieldOverflow { bits, .. }) => {
                    assert!(value > f.max(), "{}.{}", L::IFC_NAME, f.name);
                    assert_eq!(bits as usize, f.width);
                    assert_eq!(v.as_bytes(), &before[..]);
                }
                Err(e) => panic!("{}.{}: unexpected {e}", L::IFC_NAME, f.name),
            }
        }
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_bringup_layout_survives_random_bytes((bytes, values) in inputs(caps::QueryHcaCapOut::LEN)) {
        fuzz_layout!(hca::EnableHcaIn, &bytes, &values);
        fuzz_layout!(hca::EnableHcaOut, &bytes, &values);
        fuzz_layout!(hca::DisableHcaIn, &bytes, &values);
        fuzz_layout!(hca::DisableHcaOut, &bytes, &values);
        fuzz_layout!(hca::QueryIssiIn, &bytes, &values);
        fuzz_layout!(hca::QueryIssiOut, &bytes, &values);
        fuzz_layout!(hca::SetIssiIn, &bytes, &values);
        fuzz_layout!(hca::SetIssiOut, &bytes, &values);
        fuzz_layout!(hca::InitHcaIn, &bytes, &values);
        fuzz_layout!(hca::InitHcaOut, &bytes, &values);
        fuzz_layout!(hca::TeardownHcaIn, &bytes, &values);
        fuzz_layout!(hca::TeardownHcaOut, &bytes, &values);
        fuzz_layout!(hca::AccessRegisterIn, &bytes, &values);
        fuzz_layout!(hca::AccessRegisterOut, &bytes, &values);
        fuzz_layout!(hca::RegisterHostEndianness, &bytes, &values);
        fuzz_layout!(hca::PaosReg, &bytes, &values);
        fuzz_layout!(hca::SetDriverVersionIn, &bytes, &values);
        fuzz_layout!(hca::SetDriverVersionOut, &bytes, &values);
        fuzz_layout!(pages::QueryPagesIn, &bytes, &values);
        fuzz_layout!(pages::QueryPagesOut, &bytes, &values);
        fuzz_layout!(pages::ManagePagesIn, &bytes, &values);
        fuzz_layout!(pages::ManagePagesOut, &bytes, &values);
        fuzz_layout!(caps::QueryHcaCapIn, &bytes, &values);
        fuzz_layout!(caps::QueryHcaCapOut, &bytes, &values);
        fuzz_layout!(caps::SetHcaCapIn, &bytes, &values);
        fuzz_layout!(caps::SetHcaCapOut, &bytes, &values);
        fuzz_layout!(caps::CmdHcaCap, &bytes, &values);
        fuzz_layout!(caps::RoceCap, &bytes, &values);
        fuzz_layout!(vport::QueryHcaVportContextIn, &bytes, &values);
        fuzz_layout!(vport::QueryHcaVportContextOut, &bytes, &values);
        fuzz_layout!(vport::HcaVportContext, &bytes, &values);
        fuzz_layout!(vport::QueryHcaVportGidIn, &bytes, &values);
        fuzz_layout!(vport::QueryHcaVportGidOut, &bytes, &values);
        fuzz_layout!(vport::MacAddressLayout, &bytes, &values);
        fuzz_layout!(vport::NicVportContext, &bytes, &values);
        fuzz_layout!(vport::ModifyNicVportFieldSelect, &bytes, &values);
        fuzz_layout!(vport::ModifyNicVportContextIn, &bytes, &values);
        fuzz_layout!(vport::ModifyNicVportContextOut, &bytes, &values);
        fuzz_layout!(vport::QueryNicVportContextIn, &bytes, &values);
        fuzz_layout!(vport::QueryNicVportContextOut, &bytes, &values);
        fuzz_layout!(pd_uar::AllocPdIn, &bytes, &values);
        fuzz_layout!(pd_uar::AllocPdOut, &bytes, &values);
        fuzz_layout!(pd_uar::DeallocPdIn, &bytes, &values);
        fuzz_layout!(pd_uar::DeallocPdOut, &bytes, &values);
        fuzz_layout!(pd_uar::AllocUarIn, &bytes, &values);
        fuzz_layout!(pd_uar::AllocUarOut, &bytes, &values);
        fuzz_layout!(pd_uar::DeallocUarIn, &bytes, &values);
        fuzz_layout!(pd_uar::DeallocUarOut, &bytes, &values);
    }

    #[test]
    fn generated_setters_reject_too_wide_values(v in any::<u32>(), mut buf in proptest::collection::vec(any::<u8>(), 0x10)) {
        let mut pd = pd_uar::AllocPdOut::new_checked(&mut buf[..]).unwrap();
        match pd.set_pd(v) {
            Ok(_) => prop_assert!(v < 1 << 24),
            Err(Error::FieldOverflow { bits: 24, .. }) => prop_assert!(v >= 1 << 24),
            Err(e) => panic!("{e}"),
        }
        let mut t = hca::TeardownHcaOut::new_checked(&mut buf[..]).unwrap();
        prop_assert_eq!(t.set_state(v).is_ok(), v < 2);
        let mut p = hca::PaosReg::new_checked(&mut buf[..]).unwrap();
        prop_assert_eq!(p.set_admin_status(v).is_ok(), v < 16);
    }

    #[test]
    fn variable_tails_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..0x80), i in any::<usize>(), small in 0usize..12, addr in any::<u64>()) {
        let mut bytes = bytes;
        let len = bytes.len();
        for idx in [i, small] {
            if let Ok(mut m) = pages::ManagePagesIn::new_checked(&mut bytes[..]) {
                let n = m.pas_len();
                prop_assert_eq!(n, (len - pages::PAS_OFF) / 8);
                match m.set_pas(idx, addr) {
                    Ok(_) => prop_assert_eq!(m.pas(idx).unwrap(), addr),
                    Err(Error::IndexOutOfRange { index, len, .. }) => prop_assert!(index >= len && len == n),
                    Err(e) => panic!("{e}"),
                }
                prop_assert_eq!(m.pas(idx).is_ok(), idx < n);
            }
            if let Ok(mut m) = pages::ManagePagesOut::new_checked(&mut bytes[..]) {
                prop_assert_eq!(m.set_pas(idx, addr).is_ok(), idx < m.pas_len());
            }
            if let Ok(mut g) = vport::QueryHcaVportGidOut::new_checked(&mut bytes[..]) {
                let n = g.gid_capacity();
                prop_assert_eq!(g.set_gid(idx, &[7; 16]).is_ok(), idx < n);
                prop_assert_eq!(g.gid(idx).is_ok(), idx < n);
            }
            if let Ok(mut r) = hca::AccessRegisterIn::new_checked(&mut bytes[..]) {
                prop_assert_eq!(r.register_data_mut().len(), len - hca::ACCESS_REG_DATA_OFF);
            }
            if let Ok(r) = hca::AccessRegisterOut::new_checked(&bytes[..]) {
                prop_assert_eq!(r.register_data().len(), len - hca::ACCESS_REG_DATA_OFF);
            }
            if let Ok(s) = init_seg::InitSeg::new_checked(&bytes[..]) {
                let _ = s.health_assert_var(idx);
            }
        }
        prop_assert_eq!(pages::manage_pages_in_len(i) >= pages::PAS_OFF, true);
        let _ = vport::query_hca_vport_gid_out_len(i);
        let _ = entry::block_range(i, small);
        let _ = entry::mailbox_blocks(i);
    }

    #[test]
    fn sub_layout_accessors_never_panic(bytes in proptest::collection::vec(any::<u8>(), caps::QueryHcaCapOut::LEN + 8), v in any::<u32>()) {
        let mut bytes = bytes;
        for len in [caps::QueryHcaCapOut::LEN, caps::QueryHcaCapOut::LEN + 8] {
            let mut o = caps::QueryHcaCapOut::new_checked(&mut bytes[..len]).unwrap();
            let _ = o.capability().log_max_qp();
            let _ = o.roce_cap().roce_version();
            prop_assert_eq!(o.capability_mut().set_num_ports(v).is_ok(), v < 256);
            prop_assert_eq!(o.roce_cap_mut().set_r_roce_dest_udp_port(v).is_ok(), v < 65536);
            let mut s = caps::SetHcaCapIn::new_checked(&mut bytes[..len]).unwrap();
            prop_assert_eq!(s.capability_mut().set_cmdif_checksum(v).is_ok(), v < 4);
            let _ = s.roce_cap().sw_r_roce_src_udp_port();
        }
        let mut m = vport::ModifyNicVportContextIn::new_checked(&mut bytes[..0x200]).unwrap();
        prop_assert_eq!(m.field_select_mut().set_roce_en(v).is_ok(), v < 2);
        prop_assert_eq!(m.nic_vport_context_mut().set_mtu(v).is_ok(), v < 65536);
        let mac = m.nic_vport_context().permanent_address().mac();
        m.nic_vport_context_mut().permanent_address_mut().set_mac(mac).unwrap();
        let q = vport::QueryHcaVportContextOut::new_checked(&bytes[..0x210]).unwrap();
        let _ = (q.hca_vport_context().lid(), q.hca_vport_context().port_state());
        let q = vport::QueryNicVportContextOut::new_checked(&bytes[..0x110]).unwrap();
        let _ = q.nic_vport_context().roce_en();
        let mut d = hca::SetDriverVersionIn::new_checked(&mut bytes[..0x50]).unwrap();
        let n = (v as usize) % 80;
        prop_assert_eq!(d.set_driver_version(&[b'x'; 80][..n]).is_ok(), n <= 64);
        prop_assert_eq!(d.driver_version().len(), 64);
    }

    #[test]
    fn entry_and_mailbox_views_never_panic(bytes in proptest::collection::vec(any::<u8>(), entry::MAILBOX_SIZE + SLACK), s in any::<u8>()) {
        for len in 0..=bytes.len() {
            let buf = &bytes[..len];
            match CmdLayout::view(buf) {
                Ok(e) => {
                    prop_assert!(len >= entry::CMD_ENTRY_SIZE);
                    let _ = (e.cmd_type(), e.inlen(), e.in_ptr(), e.out_ptr(), e.outlen(), e.token(), e.hw_owned());
                    let _ = e.delivery_status().to_string();
                }
                Err(Error::Truncated { need, got, .. }) => {
                    prop_assert!(len < entry::CMD_ENTRY_SIZE);
                    prop_assert_eq!((need, got), (entry::CMD_ENTRY_SIZE, len));
                }
                Err(e) => panic!("{e}"),
            }
            match CmdMailbox::view(buf) {
                Ok(m) => {
                    prop_assert!(len >= entry::MAILBOX_SIZE);
                    let _ = (m.next(), m.block_num(), m.token());
                }
                Err(Error::Truncated { need, .. }) => {
                    prop_assert!(len < entry::MAILBOX_SIZE);
                    prop_assert_eq!(need, entry::MAILBOX_SIZE);
                }
                Err(e) => panic!("{e}"),
            }
        }
        let mut buf = bytes[..64].to_vec();
        let e = CmdLayout::view_mut(&mut buf).unwrap();
        prop_assert_eq!(e.complete(DeliveryStatus(s)).is_ok(), s < 0x80);
    }

    #[test]
    fn init_segment_never_panics(bytes in proptest::collection::vec(any::<u8>(), init_seg::INIT_SEG_LEN + SLACK), v in any::<u32>(), w in any::<u64>(), b in any::<u8>()) {
        for len in (0..=bytes.len()).filter(|l| *l < 64 || l.abs_diff(init_seg::INIT_SEG_LEN) <= SLACK) {
            match InitSeg::new_checked(&bytes[..len]) {
                Ok(s) => {
                    prop_assert!(len >= init_seg::INIT_SEG_LEN);
                    let _ = (s.fw_rev_major(), s.fw_rev_minor(), s.fw_rev_subminor(), s.cmdif_rev(), s.cmdq_addr());
                    let _ = (s.log_cmdq_size(), s.log_cmdq_stride(), s.nic_interface().name(), s.cmdq_geometry_ok());
                    let _ = (s.cmd_dbell(), s.initializing(), s.health_assert_exit_ptr(), s.health_assert_callra());
                    let _ = (s.health_time(), s.health_fw_ver(), s.health_hw_id(), s.health_rfr(), s.health_valid());
                    let _ = (s.health_severity(), s.health_irisc_index(), s.health_synd().to_string(), s.health_ext_synd());
                    let _ = (s.internal_timer(), s.health_counter(), s.real_time(), s.ieee1588_clk(), s.ieee1588_clk_type());
                    let _ = (s.fatal_sensor(), s.read_u32(usize::MAX), s.read_u32(len));
                    prop_assert!(s.health_counter() < 1 << 24);
                }
                Err(Error::Truncated { need, got, .. }) => {
                    prop_assert!(len < init_seg::INIT_SEG_LEN);
                    prop_assert_eq!((need, got), (init_seg::INIT_SEG_LEN, len));
                }
                Err(e) => panic!("{e}"),
            }
        }
        let mut buf = bytes[..init_seg::INIT_SEG_LEN].to_vec();
        let mut s = InitSeg::new_checked(&mut buf[..]).unwrap();
        s.set_fw_rev(v as u16, (v >> 16) as u16).set_cmdif_rev_fw_sub(v as u16, 7).set_cmdq_addr_h(v);
        s.set_cmd_dbell(v).set_initializing(v & 1 == 1).set_health_fw_ver(v).set_health_hw_id(v);
        s.set_health_rfr_severity(b).set_health_synd(HealthSyndrome(b)).set_health_ext_synd(v as u16);
        s.set_internal_timer(w).set_real_time(w).set_ieee1588_clk(w).write_u32(usize::MAX - 1, v);
        prop_assert_eq!(s.internal_timer(), w);
        prop_assert_eq!(s.set_cmdq_addr(w).is_ok(), w & 0xfff == 0);
        prop_assert_eq!(s.set_cmdq_geometry(b >> 2, b & 0x1f).is_ok(), b >> 2 < 16 && b & 0x1f < 16);
        prop_assert_eq!(s.set_nic_interface(NicInterface(b)).is_ok(), b < 8);
        prop_assert_eq!(s.set_health_counter(v).is_ok(), v < 1 << 24);
        if b < 8 {
            prop_assert_eq!(s.nic_interface(), NicInterface(b));
        }
    }
}
