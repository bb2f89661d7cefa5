//! A QP reset or destroyed while a WRITE of it is still on its way reads its memory: the
//! command completes only after the NIC has read what it sends, so the application may reuse
//! its buffers as soon as the command returns (a NIC quiesces a QP's DMA before it completes
//! 2RST_QP / DESTROY_QP; the kernel's `mlx5_core_qp_modify` to RESET and `mlx5_core_destroy_qp`
//! are followed by the buffers' release). On the sim the WRITE goes out as a burst that reads
//! the sender's memory when it is applied (`bypass_sim::frame`), here on a 10 us link.
//! Eight WRITEs leave 1 us apart: the stepped fabric's wait for the command advances time to
//! the next events (the first ones' arrivals), so the last ones are still on the link when
//! the command would have completed.

mod datapath_util;

use bypass_driver::post::{RemoteAddr, SendFlags};
use bypass_driver::qp_attr::QpType;
use bypass_sim::LinkConfig;
use datapath_util::*;

const LEN: usize = 3000;
/// WRITEs on the link, sent 1 us apart.
const N: usize = 8;

/// A pair on a 10 us link with the fast path on, and `N` WRITEs of a's of `LEN` bytes of 0x11
/// (from offsets `k * LEN` to the same offsets of b's) on the link, sent 1 us apart.
fn writes_in_flight(seed: u64) -> (bypass_sim::fabric::SimFabric, Side, Side) {
    let (f, mut a, b) = pair(seed, QpType::Rc, true);
    f.with_world(|w| {
        w.set_link(LinkConfig {
            latency_ns: 10_000,
            jitter_ns: 0,
        });
        w.set_fast_path(true);
    });
    a.write(0, &[0x11; N * LEN]);
    for k in 0..N as u64 {
        let remote = RemoteAddr {
            addr: b.mr.addr() + k * LEN as u64,
            rkey: b.mr.rkey(),
        };
        let sge = a.mr.sge(k * LEN as u64, LEN as u32);
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe { a.qp.post_write(k, sge, remote, SendFlags::SIGNALED) }.unwrap();
        f.run_until_idle().unwrap();
        if k + 1 < N as u64 {
            f.with_world(|w| w.advance(1_000)).unwrap();
        }
    }
    // Three packets each (at the pair's MTU, 1024).
    assert_eq!(
        f.with_world(|w| w.in_flight()),
        3 * N,
        "every WRITE is on the link"
    );
    assert!(
        b.read(0, N * LEN).iter().all(|&x| x == 0),
        "and none is applied"
    );
    (f, a, b)
}

/// How many of the `N * LEN` bytes b received are not the 0x11 posted.
fn changed(b: &Side) -> usize {
    b.read(0, N * LEN).iter().filter(|&&x| x != 0x11).count()
}

#[test]
fn a_reset_completes_only_after_the_qps_write_in_flight_has_read_its_memory() {
    let (f, mut a, b) = writes_in_flight(31);
    a.qp.reset().unwrap();
    // The buffer is the application's again: it writes it at once.
    a.write(0, &[0x22; N * LEN]);
    settle(&f);
    assert_eq!(
        changed(&b),
        0,
        "bytes of b's that are not the ones posted (0x11)"
    );
}

#[test]
fn a_destroy_completes_only_after_the_qps_write_in_flight_has_read_its_memory() {
    let (f, a, b) = writes_in_flight(32);
    let Side { qp, mr, .. } = a;
    drop(qp);
    mr.buf().write(0, &[0x22; N * LEN]).unwrap();
    settle(&f);
    assert_eq!(
        changed(&b),
        0,
        "bytes of b's that are not the ones posted (0x11)"
    );
}
