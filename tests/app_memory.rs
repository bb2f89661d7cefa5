//! Registering memory the application owns (`ibv_reg_mr` / `ibv_reg_mr_iova2`) through the
//! safe API on two stepped sim NICs: an RDMA WRITE from a `Vec<u8>` owned before
//! registration, from an unaligned sub-range, with IOVA ≠ VA; deregistration refused while a
//! WQE holds a lease; a WRITE past the end of a registered range refused by the sim (remote
//! access error, nothing written outside); the raw (`unsafe`) form; and pages shared by
//! overlapping registrations mapped once. The memlock-limit error has its own binary
//! (`app_memory_memlock.rs`: it changes process-wide limits).

#[path = "verbs_support.rs"]
mod support;

use std::ptr::NonNull;

use bypass_testbed::SimContext;
use bypass_verbs::driver::hw::syndrome::CqeSyndrome;
use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{Access, DeregisterError, MrOptions, VerbsError, WcStatus};
use support::*;

/// The peer MR's first `n` bytes.
fn peer_bytes(r: &Rig, off: usize, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    r.b.mr.read(off, &mut v).unwrap();
    v
}

#[test]
fn write_from_a_vec_the_application_owned_before_registration() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let v: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let host = v.as_ptr() as u64;
    let mr = r.a.pd.register_owned(v, Access::LOCAL_WRITE).unwrap();
    assert_eq!((mr.addr(), mr.host_addr(), mr.len()), (host, host, 3000));
    let lease = mr.lease(3000).unwrap();
    a.post_send(SendWr::new(1, SendOp::Write(r.b.mr.remote().slice(0, 3000).unwrap())).sge(lease))
        .unwrap();
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    let expect: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(peer_bytes(&r, 0, 3000), expect);
    let back = mr.deregister().expect("no lease alive");
    assert_eq!(back, expect, "the owner comes back as it was");
    assert_eq!(back.as_ptr() as u64, host, "the same allocation");
    assert!(
        r.a.ctx.caller_extents().is_empty(),
        "its pages are unmapped"
    );
}

#[test]
fn write_from_an_unaligned_sub_range_with_iova_not_va() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let mut b: Box<[u8]> = vec![0u8; 3 * 4096].into_boxed_slice();
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i % 251) as u8;
    }
    let host = b.as_ptr() as u64;
    // 5000 bytes from offset 4093: three pages touched, start and end unaligned.
    let (off, len) = (4093usize, 5000usize);
    let iova = 0x5a5a_0000_0000 | ((host + off as u64) & 0xfff);
    let mr =
        r.a.pd
            .register_owned_with(
                b,
                Access::LOCAL_WRITE,
                MrOptions {
                    range: Some(off..off + len),
                    iova: Some(iova),
                    chunk: None,
                },
            )
            .unwrap();
    assert_eq!((mr.addr(), mr.len()), (iova, len));
    assert_eq!(mr.host_addr(), host + off as u64);
    let drv = mr.driver().unwrap();
    let first = host + off as u64;
    let touched = ((first + len as u64 - 1) >> 12) - (first >> 12) + 1;
    assert!(touched >= 2);
    assert_eq!(
        drv.page_iovas().len() as u64,
        touched,
        "the MTT covers every touched page"
    );
    // The peer's MR holds 4096 bytes: WRITE the first 4000 registered bytes, which still
    // cross from the first page into the second.
    let n = 4000;
    let lease = mr.lease(n).unwrap();
    assert_eq!(lease.iova(), iova, "SGEs use the chosen IOVA");
    assert_eq!(lease.as_slice()[0], (off % 251) as u8);
    a.post_send(
        SendWr::new(
            2,
            SendOp::Write(r.b.mr.remote().slice(0, n as u64).unwrap()),
        )
        .sge(lease),
    )
    .unwrap_err_or_ok();
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    let expect: Vec<u8> = (off..off + n).map(|i| (i % 251) as u8).collect();
    assert_eq!(peer_bytes(&r, 0, n), expect);
    let back = mr.deregister().unwrap();
    assert_eq!(back.len(), 3 * 4096);
}

/// `post_send` returning `Result<(), _>`: unwrap with the error shown.
trait OkOrShow {
    fn unwrap_err_or_ok(self);
}
impl OkOrShow for Result<(), VerbsError> {
    fn unwrap_err_or_ok(self) {
        if let Err(e) = self {
            panic!("post refused: {e}");
        }
    }
}

#[test]
fn an_iova_with_another_page_offset_is_refused() {
    let r = rig();
    let v = vec![0u8; 100];
    let host = v.as_ptr() as u64;
    let e =
        r.a.pd
            .register_owned_with(
                v,
                Access::LOCAL_WRITE,
                MrOptions {
                    iova: Some(0x10_0000 | ((host + 1) & 0xfff)),
                    ..Default::default()
                },
            )
            .unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::Driver(bypass_verbs::driver::DriverError::IovaOffsetMismatch { .. })
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("offset in a 4 KiB page"), "{e}");
    let e =
        r.a.pd
            .register_owned_with(
                vec![0u8; 10],
                Access::LOCAL_WRITE,
                MrOptions {
                    range: Some(4..4),
                    ..Default::default()
                },
            )
            .unwrap_err();
    assert!(matches!(e, VerbsError::BadMrRange { .. }), "{e:?}");
}

#[test]
fn deregistration_is_refused_while_a_posted_wqe_holds_a_lease() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let mr =
        r.a.pd
            .register_owned(vec![9u8; 64], Access::LOCAL_WRITE)
            .unwrap();
    let lease = mr.lease(64).unwrap();
    a.post_send(SendWr::new(3, SendOp::Write(r.b.mr.remote().slice(0, 64).unwrap())).sge(lease))
        .unwrap();
    assert_eq!(mr.leased(), 1);
    let mr = match mr.deregister() {
        Err(DeregisterError::InUse { mr, leases }) => {
            assert_eq!(leases, 1);
            mr
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(
        DeregisterError::InUse { mr, leases: 1 }
            .into_error()
            .to_string()
            .contains("poll their completions")
    );
    // Dropping the region while the WQE holds its lease is safe too: the lease keeps the
    // registration (and the buffer) alive until the completion gives it back.
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    assert_eq!(peer_bytes(&r, 0, 64), vec![9u8; 64]);
}

#[test]
fn deregistration_succeeds_once_the_completion_gave_the_lease_back() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let mr =
        r.a.pd
            .register_owned(vec![5u8; 128], Access::LOCAL_WRITE)
            .unwrap();
    a.post_send(
        SendWr::new(4, SendOp::Write(r.b.mr.remote().slice(0, 128).unwrap()))
            .sge(mr.lease(128).unwrap()),
    )
    .unwrap();
    let Err(DeregisterError::InUse { mr, .. }) = mr.deregister() else {
        panic!("deregistered while posted");
    };
    let c = wait1(&mut r.a.cq, "write");
    let bufs = a.reclaim(c).unwrap();
    let Err(DeregisterError::InUse { mr, .. }) = mr.deregister() else {
        panic!("deregistered while the reclaimed lease is held");
    };
    drop(bufs);
    assert_eq!(mr.deregister().unwrap(), vec![5u8; 128]);
}

#[test]
fn a_write_past_the_registered_range_is_a_remote_access_error_and_writes_nothing_outside() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    // The peer registers bytes 100..200 of its buffer for remote write; the rest is guard.
    let mr =
        r.b.pd
            .register_owned_with(
                vec![0xeeu8; 4096],
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                MrOptions {
                    range: Some(100..200),
                    ..Default::default()
                },
            )
            .unwrap();
    assert!(mr.lease(1).is_err(), "a peer-writable region has no leases");
    let target = mr.remote();
    // In range: lands.
    a.post_send(
        SendWr::new(5, SendOp::Write(target.slice(0, 100).unwrap()))
            .sge(lease_with(&r.a.pool, &[1u8; 100])),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "write in range");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    // 8 bytes past the end: the responder refuses it.
    let past = bypass_verbs::RemoteBuffer {
        addr: target.addr + 96,
        rkey: target.rkey,
        len: 12,
    };
    a.post_send(SendWr::new(6, SendOp::Write(past)).sge(lease_with(&r.a.pool, &[2u8; 12])))
        .unwrap();
    let c = wait1(&mut r.a.cq, "write past the end");
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::REMOTE_ACCESS_ERR),
        "{c}"
    );
    let back = mr.deregister().unwrap();
    assert!(back[..100].iter().all(|&x| x == 0xee), "guard before");
    assert!(back[100..200].iter().all(|&x| x == 1), "the first write");
    assert!(
        back[200..].iter().all(|&x| x == 0xee),
        "nothing written past the end"
    );
}

#[test]
fn raw_registration_is_a_peer_writable_target() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let mut backing = vec![0u8; 8192];
    let addr = NonNull::new(backing.as_mut_ptr().wrapping_add(10)).unwrap();
    // SAFETY: `backing` outlives the registration (deregistered below before it is read or
    // dropped), and is not touched through references while registered.
    let raw = unsafe {
        r.b.pd
            .register_raw(addr, 5000, Access::LOCAL_WRITE | Access::REMOTE_WRITE, None)
            .unwrap()
    };
    assert_eq!((raw.addr(), raw.len()), (addr.as_ptr() as u64, 5000));
    a.post_send(
        SendWr::new(7, SendOp::Write(raw.remote().slice(4990, 10).unwrap()))
            .sge(lease_with(&r.a.pool, b"0123456789")),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    raw.deregister().unwrap();
    assert_eq!(&backing[5000..5010], b"0123456789");
    assert!(backing[5010..].iter().all(|&x| x == 0));
}

#[test]
fn overlapping_registrations_share_their_pages_until_the_last_goes() {
    let r = rig();
    let ctx = r.a.ctx.clone();
    let before = ctx.caller_extents().len();
    let mut backing = vec![0u8; 5 * 4096];
    // The first page boundary inside the buffer: offsets below are from it.
    let skip = backing.as_ptr().align_offset(4096);
    let base = backing.as_mut_ptr().wrapping_add(skip);
    let at = |off: usize| NonNull::new(base.wrapping_add(off)).unwrap();
    // SAFETY: `backing` outlives both registrations and is untouched while they live.
    let (one, two) = unsafe {
        (
            r.a.pd
                .register_raw(at(0), 2 * 4096, Access::LOCAL_WRITE, None)
                .unwrap(),
            r.a.pd
                .register_raw(at(4096 + 17), 2 * 4096, Access::LOCAL_WRITE, None)
                .unwrap(),
        )
    };
    let ext = ctx.caller_extents();
    let shared_page = (base as u64 + 4096) & !0xfff;
    let holding = ext
        .iter()
        .find(|e| e.0 <= shared_page && shared_page < e.0 + e.1)
        .expect("the shared page is mapped");
    assert_eq!(holding.3, 2, "one mapping, two users: {ext:x?}");
    assert_eq!(
        one.driver().page_iovas()[1..],
        two.driver().page_iovas()[..1],
        "both MTTs point at the same IOVA for the shared page"
    );
    drop(one);
    assert!(
        ctx.caller_extents()
            .iter()
            .any(|e| e.0 <= shared_page && shared_page < e.0 + e.1),
        "still mapped for the second registration"
    );
    drop(two);
    assert_eq!(ctx.caller_extents().len(), before);
    let sim = r.a.ctx.sim().unwrap();
    let faults = sim.with_device(|d| d.iommu().faults()).unwrap();
    assert_eq!(faults, 0);
    drop(backing);
}
