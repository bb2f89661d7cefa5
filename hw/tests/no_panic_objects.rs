//! No input panics the mkey / CQ / EQ / QP views: random bytes of every length, random field
//! values, random list indexes. Short buffers are `Truncated` exactly when shorter than the
//! layout; values wider than a field are `FieldOverflow`; list indexes past the buffer are
//! `IndexOutOfRange`.

use bypass_hw::Error;
use bypass_hw::cmd::cq::{
    Cqc, CreateCqIn, CreateCqOut, DestroyCqIn, DestroyCqOut, ModifyCqIn, ModifyCqOut, QueryCqIn,
    QueryCqOut,
};
use bypass_hw::cmd::eq::{
    CreateEqIn, CreateEqOut, DestroyEqIn, DestroyEqOut, Eqc, QueryEqIn, QueryEqOut,
};
use bypass_hw::cmd::mkey::{
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, DestroyMkeyOut, Mkc, QueryMkeyIn, QueryMkeyOut,
};
use bypass_hw::cmd::qp::*;
use bypass_hw::prm::Field;
use proptest::prelude::*;

/// The checks every layout gets, on one random buffer and one random value.
fn exercise(
    name: &str,
    len: usize,
    fields: &[Field],
    ok: Result<(), Error>,
    bytes: &mut [u8],
    value: u64,
) {
    if bytes.len() >= len {
        assert_eq!(ok, Ok(()), "{name}: {} bytes refused", bytes.len());
    } else {
        assert!(
            matches!(ok, Err(Error::Truncated { need, got, .. }) if need == len && got == bytes.len()),
            "{name}: {} bytes gave {ok:?}",
            bytes.len()
        );
    }
    for f in fields {
        let before = f.get(bytes);
        assert!(before <= f.max(), "{name}.{}", f.name);
        let r = f.set(bytes, value);
        if value > f.max() {
            assert!(
                matches!(r, Err(Error::FieldOverflow { .. })),
                "{name}.{}: {r:?}",
                f.name
            );
        } else if bytes.len() >= f.end_byte() {
            assert_eq!(r, Ok(()));
            assert_eq!(f.get(bytes), value, "{name}.{}", f.name);
        } else {
            assert!(
                matches!(r, Err(Error::Truncated { .. })),
                "{name}.{}: {r:?}",
                f.name
            );
        }
    }
}

/// For each view type: length check, typed view over the random bytes (sub-layouts and
/// `as_bytes` included), every field read and written.
macro_rules! no_panic {
    ($($test:ident: $ty:ident;)*) => {$(
        proptest! {
            #[test]
            fn $test(mut bytes in prop::collection::vec(any::<u8>(), 0..=$ty::LEN + 16), value in any::<u64>(), small in 0u64..0x1_0000_0000) {
                let ok = $ty::new_checked(&bytes[..]).map(|v| {
                    assert_eq!(v.as_bytes().len(), $ty::LEN);
                });
                exercise($ty::IFC_NAME, $ty::LEN, $ty::FIELDS, ok, &mut bytes, value);
                exercise($ty::IFC_NAME, $ty::LEN, $ty::FIELDS, ok, &mut bytes, small);
                // The same through the unchecked wrapper, which must not panic either.
                let v = $ty::wrap_unchecked(&bytes[..]);
                let _ = v.as_bytes();
            }
        }
    )*};
}

no_panic! {
    mkc: Mkc;
    create_mkey_in: CreateMkeyIn;
    create_mkey_out: CreateMkeyOut;
    query_mkey_in: QueryMkeyIn;
    query_mkey_out: QueryMkeyOut;
    destroy_mkey_in: DestroyMkeyIn;
    destroy_mkey_out: DestroyMkeyOut;
    cqc: Cqc;
    create_cq_in: CreateCqIn;
    create_cq_out: CreateCqOut;
    query_cq_in: QueryCqIn;
    query_cq_out: QueryCqOut;
    modify_cq_in: ModifyCqIn;
    modify_cq_out: ModifyCqOut;
    destroy_cq_in: DestroyCqIn;
    destroy_cq_out: DestroyCqOut;
    eqc: Eqc;
    create_eq_in: CreateEqIn;
    create_eq_out: CreateEqOut;
    query_eq_in: QueryEqIn;
    query_eq_out: QueryEqOut;
    destroy_eq_in: DestroyEqIn;
    destroy_eq_out: DestroyEqOut;
    ads: Ads;
    qpc: Qpc;
    create_qp_in: CreateQpIn;
    create_qp_out: CreateQpOut;
    query_qp_in: QueryQpIn;
    query_qp_out: QueryQpOut;
    destroy_qp_in: DestroyQpIn;
    destroy_qp_out: DestroyQpOut;
    rst2init_qp_in: Rst2InitQpIn;
    rst2init_qp_out: Rst2InitQpOut;
    init2init_qp_in: Init2InitQpIn;
    init2init_qp_out: Init2InitQpOut;
    init2rtr_qp_in: Init2RtrQpIn;
    init2rtr_qp_out: Init2RtrQpOut;
    rtr2rts_qp_in: Rtr2RtsQpIn;
    rtr2rts_qp_out: Rtr2RtsQpOut;
    rts2rts_qp_in: Rts2RtsQpIn;
    rts2rts_qp_out: Rts2RtsQpOut;
    sqerr2rts_qp_in: Sqerr2RtsQpIn;
    sqerr2rts_qp_out: Sqerr2RtsQpOut;
    sqd2rts_qp_in: Sqd2RtsQpIn;
    sqd2rts_qp_out: Sqd2RtsQpOut;
    qp_2err_in: Qp2ErrIn;
    qp_2err_out: Qp2ErrOut;
    qp_2rst_in: Qp2RstIn;
    qp_2rst_out: Qp2RstOut;
}

/// Checks one list accessor pair: in range iff `index < (len - LEN) / 8`, the value reads back,
/// and out of range is `IndexOutOfRange` with the real capacity.
/// `results` is `(get before, set, get after)`.
type ListResults = (Result<u64, Error>, Result<(), Error>, Result<u64, Error>);

fn list_case(
    cap: usize,
    (base, len): (usize, usize),
    index: usize,
    results: ListResults,
    value: u64,
) {
    let (get, set, back) = results;
    assert_eq!(cap, len.saturating_sub(base) / 8);
    if index < cap {
        assert_eq!(set, Ok(()));
        assert!(get.is_ok());
        assert_eq!(back, Ok(value));
    } else {
        assert!(
            matches!(set, Err(Error::IndexOutOfRange { index: i, len: l, .. }) if i == index && l == cap),
            "{set:?}"
        );
        assert!(matches!(get, Err(Error::IndexOutOfRange { .. })));
    }
}

macro_rules! list_no_panic {
    ($($test:ident: $ty:ident, $get:ident, $set:ident, $cap:ident;)*) => {$(
        proptest! {
            #[test]
            fn $test(extra in 0usize..64, short in 0usize..0x110, index in prop_oneof![0usize..10, any::<usize>()], value in any::<u64>()) {
                // A whole buffer with `extra` bytes of list (not always a whole number of entries).
                let mut bytes = vec![0u8; $ty::LEN + extra];
                let mut v = $ty::new_checked(&mut bytes[..]).unwrap();
                let get = v.$get(index);
                let cap = v.$cap();
                let set = v.$set(index, value).map(|_| ());
                let back = v.$get(index);
                list_case(cap, ($ty::LEN, $ty::LEN + extra), index, (get, set, back), value);
                // A short buffer through the unchecked wrapper: never a panic.
                let mut short_bytes = vec![0u8; short];
                let mut w = $ty::wrap_unchecked(&mut short_bytes[..]);
                prop_assert_eq!(w.$cap(), 0);
                prop_assert!(w.$get(index).is_err());
                prop_assert!(w.$set(index, value).is_err());
            }
        }
    )*};
}

list_no_panic! {
    create_mkey_in_mtt: CreateMkeyIn, klm_pas_mtt, set_klm_pas_mtt, klm_pas_mtt_capacity;
    create_cq_in_pas: CreateCqIn, pas, set_pas, pas_capacity;
    query_cq_out_pas: QueryCqOut, pas, set_pas, pas_capacity;
    modify_cq_in_pas: ModifyCqIn, pas, set_pas, pas_capacity;
    create_eq_in_pas: CreateEqIn, pas, set_pas, pas_capacity;
    query_eq_out_pas: QueryEqOut, pas, set_pas, pas_capacity;
    create_qp_in_pas: CreateQpIn, pas, set_pas, pas_capacity;
    query_qp_out_pas: QueryQpOut, pas, set_pas, pas_capacity;
}

proptest! {
    #[test]
    fn hand_written_accessors_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..0x140), word in any::<usize>(), ev in any::<u16>(), gid in any::<[u8; 16]>(), mac in any::<[u8; 6]>(), state in any::<u8>(), mode in any::<u8>()) {
        // ads: rgid_rip / rmac over any length.
        {
            let mut a = Ads::wrap_unchecked(&mut bytes[..]);
            let _ = a.rgid_rip();
            let _ = a.rmac();
            let r = a.set_rgid_rip(&gid);
            prop_assert_eq!(r.is_ok(), bytes.len() >= 0x20);
            let mut a = Ads::wrap_unchecked(&mut bytes[..]);
            if a.set_rmac(mac).is_ok() { prop_assert_eq!(a.rmac(), mac); }
        }
        // eq: event bitmask words and event types.
        {
            let mut e = CreateEqIn::wrap_unchecked(&mut bytes[..]);
            let _ = e.event_bitmask(word);
            let _ = e.set_event_bitmask(word, 1);
            let r = e.enable_event(ev);
            if ev >= 256 { prop_assert!(r.is_err()); }
            if r.is_ok() { prop_assert!(e.has_event(ev)); }
            if word >= 4 { prop_assert!(e.event_bitmask(word).is_err()); }
        }
        // mkey: QUERY_MKEY byte fields and the 5-bit access mode.
        {
            let mut q = QueryMkeyOut::wrap_unchecked(&mut bytes[..]);
            let _ = q.bsf0_klm0_pas_mtt0_1();
            let _ = q.bsf1_klm1_pas_mtt2_3();
            let _ = q.set_bsf1_klm1_pas_mtt2_3(&gid);
            let mut m = Mkc::wrap_unchecked(&mut bytes[..]);
            let r = m.set_access_mode(mode);
            if mode > 31 { prop_assert!(r.is_err()); }
            if r.is_ok() { prop_assert_eq!(m.access_mode(), mode); }
            let _ = m.access();
        }
        // qp: state decoding from any byte.
        {
            let r = QpState::try_from(state);
            prop_assert_eq!(r.is_ok(), state <= 7 || state == 9);
            if let Ok(s) = r { prop_assert_eq!(s as u8, state); }
            let q = Qpc::wrap_unchecked(&bytes[..]);
            let _ = q.qp_state();
            let _ = PathMtu::try_from(state);
        }
    }

    #[test]
    fn size_helpers_never_panic(a in any::<u8>(), b in any::<u8>(), c in any::<u8>(), n in any::<usize>()) {
        let _ = rq_buf_bytes(a, b);
        let _ = sq_buf_bytes(c);
        let _ = wq_buf_layout(a, b, Some(c));
        let _ = rq_stride_bytes(b);
        let _ = bypass_hw::cmd::cq::cq_buf_bytes(a, b);
        let _ = bypass_hw::cmd::eq::eq_buf_bytes(a);
        prop_assert!(bypass_hw::cmd::mkey::create_mkey_in_len(n) >= CreateMkeyIn::LEN);
        prop_assert!(create_qp_in_len(n) >= CreateQpIn::LEN);
        prop_assert!(bypass_hw::cmd::cq::create_cq_in_len(n) >= CreateCqIn::LEN);
        prop_assert!(bypass_hw::cmd::eq::create_eq_in_len(n) >= CreateEqIn::LEN);
        let _ = bypass_hw::cmd::mkey::octo_len(n);
    }
}
