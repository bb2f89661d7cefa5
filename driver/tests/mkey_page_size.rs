//! The MTT page size of memory keys on a sim device: a contiguous 8 MiB buffer takes pages as
//! large as the device allows, and no larger than the bound it advertises on its GENERAL_2
//! capability page (`max_mkey_log_entity_size_mtt`), read back with QUERY_MKEY.
//!
//! Owns: these checks only. Sources: PRM `mkc.log_page_size`, kernel `mlx5_ib.h`
//! `get_max_log_entity_size_cap`.

use std::sync::Arc;

use bypass_driver::Hca;
use bypass_driver::cmdq::input;
use bypass_driver::mr::{MkeyAccess, Mr};
use bypass_driver::pd::Pd;
use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::mkey::{QueryMkeyIn, QueryMkeyOut, mkey_index};
use bypass_sim::Profile;
use bypass_sim::fabric::SimFabric;

/// The `log_page_size` of an 8 MiB key on a device whose bound is `max_shift`.
fn shift_of_8m_key(max_shift: u8) -> (u32, u32) {
    let fabric = SimFabric::stepped(3);
    let mut p = Profile::with_id(1);
    p.caps.max_mkey_page_shift = max_shift;
    let backend = fabric.add_device(p).unwrap();
    let hca = Arc::new(Hca::open(backend).unwrap());
    let pd = Pd::alloc(&hca).unwrap();
    let buf = hca.dma().alloc_for_key(8 << 20).unwrap();
    let mr = Mr::register(&pd, buf, MkeyAccess::LOCAL_WRITE).unwrap();
    let mut i = input(Opcode::QUERY_MKEY, 0, QueryMkeyIn::LEN);
    QueryMkeyIn::new_checked(&mut i[..])
        .unwrap()
        .set_mkey_index(mkey_index(mr.lkey()))
        .unwrap();
    // SAFETY: QUERY_MKEY only reads the key's context.
    let o = unsafe { hca.cmd() }.exec(&i, QueryMkeyOut::LEN).unwrap();
    let q = QueryMkeyOut::new_checked(&o[..]).unwrap();
    let m = q.memory_key_mkey_entry();
    (m.log_page_size(), m.translations_octword_size())
}

#[test]
fn a_contiguous_buffer_takes_large_pages_within_the_advertised_bound() {
    let (free, _) = shift_of_8m_key(31);
    assert!(
        free >= 23,
        "8 MiB contiguous at a congruent IOVA: shift {free}"
    );
    let (bounded, octwords) = shift_of_8m_key(21);
    assert_eq!(bounded, 21, "the device's bound");
    // 8 MiB in 2 MiB pages: 4 entries, or 5 when the buffer does not start on 2 MiB.
    assert!((2..=3).contains(&octwords), "{octwords} octwords");
}
