//! `BYPASS_SHUT_UP_BF` turns BlueFlame off: a QP created with it set rings bfreg 0 with 8-byte
//! doorbells only. Its own test binary, because it changes the process environment.

mod datapath_util;

use bypass_driver::post::{RemoteAddr, SendFlags, SendOp, SendWr};
use bypass_driver::qp_attr::QpType;
use datapath_util::*;

#[test]
fn shut_up_bf_keeps_8_byte_doorbells() {
    // SAFETY: this test binary has one test and sets the variable before any other thread
    // exists, so nothing reads the environment concurrently.
    unsafe { std::env::set_var("BYPASS_SHUT_UP_BF", "1") };
    let (f, mut a, b) = pair(5, QpType::Rc, true);
    assert_eq!(a.qp.bfreg().buf_size(), 0);
    a.trace(true);
    let s = [a.mr.sge(0, 64)];
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(1, SendOp::Write { remote }, &s))
    }
    .unwrap();
    // The specialised post rings the same 8-byte doorbell: its first 8 WQE bytes.
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_write(2, s[0], remote, SendFlags::SIGNALED) }.unwrap();
    let w = a.uar_writes();
    assert_eq!(w.len(), 2);
    assert!(w.iter().all(|(_, d)| d.len() == 8));
    assert_eq!(w[1].1, a.qp.wqe_bytes(1)[..8].to_vec());
    assert_eq!(w[0].0, w[1].0, "bfreg 0 has no second half");
    settle(&f);
    let wcs = a.drain(2);
    assert_eq!((wcs[0].wr_id(), wcs[1].wr_id()), (1, 2));
}
