//! Memory keys with large MTT pages on two stepped sim NICs: a 1 GiB application buffer
//! registers in one CREATE_MKEY (its IOVA agrees with the host address on the low bits, so
//! the key takes 1 GiB or 2 MiB pages, not 262,144 4 KiB ones, whose command would exceed the
//! command queue's 1 MiB) and a peer WRITEs and READs its first, middle and last bytes; a
//! registration whose pages lie in separately mapped extents (overlapping registrations
//! share extents) falls back to small pages and still translates every page right.
//!
//! The 1 GiB test pins 1 GiB: it needs `RLIMIT_MEMLOCK` of at least that (CI runs as root)
//! and fails, with the driver's message naming the fix, where the limit is lower.

#[path = "verbs_support.rs"]
mod support;

use std::ptr::NonNull;

use bypass_verbs::Access;
use bypass_verbs::wr::{SendOp, SendWr};
use support::*;

const GIB: usize = 1 << 30;

#[test]
fn a_gigabyte_registers_and_its_first_middle_and_last_bytes_are_reachable() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let mut backing = vec![0u8; GIB];
    let addr = NonNull::new(backing.as_mut_ptr()).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    // SAFETY: `backing` outlives the registration (deregistered below before it is read or
    // dropped) and is not touched through references while registered.
    let big = unsafe { r.b.pd.register_raw(addr, GIB, access, None) }
        .unwrap_or_else(|e| panic!("registering 1 GiB (run as root in CI): {e}"));
    assert_eq!(big.len(), GIB);
    for (n, off) in [0, GIB / 2 - 3, GIB - 10].into_iter().enumerate() {
        let msg: Vec<u8> = (0..10).map(|i| (n * 10 + i + 1) as u8).collect();
        a.post_send(
            SendWr::new(
                n as u64,
                SendOp::Write(big.remote().slice(off as u64, 10).unwrap()),
            )
            .sge(lease_with(&r.a.pool, &msg)),
        )
        .unwrap();
        let c = wait1(&mut r.a.cq, "write");
        assert!(c.is_ok(), "write at {off}: {c}");
        drop(a.reclaim(c).unwrap());
        let back = r.a.pool.lease(10).unwrap();
        a.post_send(
            SendWr::new(
                100 + n as u64,
                SendOp::Read(big.remote().slice(off as u64, 10).unwrap()),
            )
            .sge(back),
        )
        .unwrap();
        let c = wait1(&mut r.a.cq, "read");
        assert!(c.is_ok(), "read at {off}: {c}");
        let got = a.reclaim_lease(c).unwrap().unwrap();
        assert_eq!(got.as_slice()[..10], msg[..], "read back at {off}");
    }
    big.deregister().unwrap();
    assert_eq!(backing[..10], (1..=10).collect::<Vec<u8>>()[..]);
    assert_eq!(
        backing[GIB / 2 - 3..GIB / 2 + 7],
        (11..=20).collect::<Vec<u8>>()[..]
    );
    assert_eq!(backing[GIB - 10..], (21..=30).collect::<Vec<u8>>()[..]);
    assert!(backing[10..GIB / 2 - 3].iter().all(|&x| x == 0));
}

#[test]
fn a_registration_over_separately_mapped_extents_reaches_every_page() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let mut backing = vec![0u8; 9 * 4096];
    let skip = backing.as_ptr().align_offset(4096);
    let base = backing.as_mut_ptr().wrapping_add(skip);
    let at = |off: usize| NonNull::new(base.wrapping_add(off)).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // SAFETY: `backing` outlives both registrations and is untouched while they live.
    let (middle, all) = unsafe {
        (
            r.b.pd
                .register_raw(at(3 * 4096), 4096, access, None)
                .unwrap(),
            r.b.pd.register_raw(at(0), 8 * 4096, access, None).unwrap(),
        )
    };
    let pages = all.driver().page_iovas().to_vec();
    assert_eq!(pages.len(), 8);
    assert!(
        pages.windows(2).any(|w| w[1] != w[0] + 4096),
        "the shared page lies in its own extent: {pages:x?}"
    );
    for p in 0..8u64 {
        let msg = [p as u8 + 1; 64];
        a.post_send(
            SendWr::new(
                p,
                SendOp::Write(all.remote().slice(p * 4096 + 100, 64).unwrap()),
            )
            .sge(lease_with(&r.a.pool, &msg)),
        )
        .unwrap();
        let c = wait1(&mut r.a.cq, "write");
        assert!(c.is_ok(), "write to page {p}: {c}");
        drop(a.reclaim(c).unwrap());
    }
    drop(all);
    drop(middle);
    for p in 0..8usize {
        let page = &backing[skip + p * 4096..skip + (p + 1) * 4096];
        assert!(page[100..164].iter().all(|&x| x == p as u8 + 1), "page {p}");
        assert!(
            page[..100].iter().chain(&page[164..]).all(|&x| x == 0),
            "page {p}"
        );
    }
}
