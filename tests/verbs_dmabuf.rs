//! Memory regions over dma-bufs and memfds on two stepped sim NICs: a memfd MR written,
//! read and received into (bytes checked through another mapping of the memfd); a dma-buf
//! MR over a test `PeerMemory` (CUDA memory as the sim reaches it: copies only) as WRITE,
//! READ and SEND target and source, both directions; a failing peer copy reported as an
//! error completion; every `ibv_reg_dmabuf_mr` rule refused with its typed error and nothing
//! mapped; and (ignored on the host) a real udmabuf through the sim's mmap + DMA_BUF_IOCTL_SYNC
//! path, for a guest with /dev/udmabuf.

#[path = "verbs_support.rs"]
mod support;

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bypass_testbed::SimContext;
use bypass_verbs::driver::DriverError;
use bypass_verbs::driver::backend::BackendError;
use bypass_verbs::driver::hw::syndrome::CqeSyndrome;
use bypass_verbs::driver::memfd_mr::FdMapping;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{
    Access, DevicePool, DmaBufFile, DmaBufSource, Exporter, PeerError, PeerMemory, VerbsError,
    WcStatus,
};
use nix::sys::memfd::{MFdFlags, memfd_create};
use support::*;

const PAGE: usize = 4096;

fn memfd(len: usize) -> Arc<OwnedFd> {
    let fd = memfd_create(c"verbs-dmabuf", MFdFlags::MFD_ALLOW_SEALING).expect("memfd_create");
    nix::unistd::ftruncate(&fd, len as i64).expect("ftruncate");
    Arc::new(fd)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Device memory over a `Vec`, counting copies; `fail` makes every copy fail.
#[derive(Debug)]
struct VecPeer {
    bytes: Mutex<Vec<u8>>,
    copies: AtomicUsize,
    fail: bool,
}

impl VecPeer {
    fn new(len: usize, fail: bool) -> Arc<Self> {
        Arc::new(Self {
            bytes: Mutex::new(vec![0; len]),
            copies: AtomicUsize::new(0),
            fail,
        })
    }

    fn bytes(&self, off: usize, n: usize) -> Vec<u8> {
        self.bytes.lock().unwrap()[off..off + n].to_vec()
    }

    fn set(&self, off: usize, b: &[u8]) {
        self.bytes.lock().unwrap()[off..off + b.len()].copy_from_slice(b);
    }

    fn copies(&self) -> usize {
        self.copies.load(Ordering::Relaxed)
    }

    fn check(&self, op: &'static str, offset: usize, len: usize) -> Result<(), PeerError> {
        self.copies.fetch_add(1, Ordering::Relaxed);
        let total = self.bytes.lock().unwrap().len();
        if self.fail || offset.checked_add(len).is_none_or(|e| e > total) {
            return Err(PeerError {
                op,
                exporter: "nv_dmabuf".into(),
                offset,
                len,
                reason: "CUDA_ERROR_ILLEGAL_ADDRESS (the test's failing peer)".into(),
            });
        }
        Ok(())
    }
}

impl PeerMemory for VecPeer {
    fn len(&self) -> usize {
        self.bytes.lock().unwrap().len()
    }
    fn exporter(&self) -> &str {
        "nv_dmabuf"
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), PeerError> {
        self.check("read", offset, dst.len())?;
        dst.copy_from_slice(&self.bytes.lock().unwrap()[offset..offset + dst.len()]);
        Ok(())
    }
    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), PeerError> {
        self.check("write", offset, src.len())?;
        self.bytes.lock().unwrap()[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
}

/// A stand-in for a CUDA dma-buf of `len` bytes: a memfd's fd (never read: the sim reaches
/// the memory through the peer), NVIDIA's exporter, and the peer.
fn cuda_like(len: usize, fail: bool) -> (DmaBufSource, Arc<VecPeer>) {
    let fd = memfd_create(c"fake-cuda", MFdFlags::empty()).expect("memfd_create");
    let peer = VecPeer::new(len, fail);
    let src = DmaBufSource {
        file: DmaBufFile::from_parts(fd, len as u64, Exporter::Nvidia),
        backing: None,
        peer: Some(peer.clone()),
    };
    (src, peer)
}

const REMOTE: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

/// IOMMU mappings of side A's sim device, and free IOVA bytes of its mapper.
fn mapped(r: &Rig) -> (usize, u64) {
    let id = r.a.ctx.sim().unwrap().id();
    let maps = r.fabric.with_device(id, |d| d.iommu().mappings()).unwrap();
    (maps, r.a.ctx.free_iova_bytes())
}

#[test]
fn memfd_mr_takes_writes_reads_and_sends_seen_through_the_memfd() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    let fd = memfd(4 * PAGE);
    let view = FdMapping::new(fd.clone(), 0, 4 * PAGE).unwrap();
    // B: an unaligned range of the memfd a peer may write and read.
    let (off, len) = (PAGE as u64 + 100, 2 * PAGE);
    let mr =
        r.b.pd
            .register_memfd(fd.clone(), off, len, None, REMOTE)
            .unwrap();
    assert_eq!(mr.len(), len);
    assert_eq!(
        mr.addr() % PAGE as u64,
        100,
        "addressed from its mapping, same page offset"
    );

    // WRITE from A into the memfd MR.
    let data = pattern(3000, 1);
    let wr = SendWr::new(1, SendOp::Write(mr.remote().slice(10, 3000).unwrap()))
        .sge(lease_with(&r.a.pool, &data));
    a.post_send(wr).unwrap();
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    let mut seen = vec![0u8; 3000];
    view.read(off as usize + 10, &mut seen).unwrap();
    assert_eq!(seen, data, "the WRITE landed in the memfd's pages");

    // READ from the memfd MR: bytes put there through the other mapping.
    let put = pattern(500, 9);
    view.write(off as usize + 1000, &put).unwrap();
    let wr = SendWr::new(2, SendOp::Read(mr.remote().slice(1000, 500).unwrap()))
        .sge(r.a.pool.lease(500).unwrap());
    a.post_send(wr).unwrap();
    let c = wait1(&mut r.a.cq, "read");
    assert!(c.is_ok(), "{c}");
    let got = a.reclaim(c).unwrap().into_leases().next().unwrap();
    assert_eq!(got.as_slice(), &put[..]);
    let mut copy = vec![0u8; 500];
    mr.read(1000, &mut copy).unwrap();
    assert_eq!(copy, put, "DeviceMr::read copies the same bytes");
    mr.deregister().unwrap();

    // SEND into a DeviceLease of a local-only memfd MR.
    let pool_mr =
        r.b.pd
            .register_memfd(fd.clone(), 0, PAGE, None, Access::LOCAL_WRITE)
            .unwrap();
    let pool = DevicePool::new(pool_mr, 1024).unwrap();
    assert_eq!(pool.capacity(), 4);
    b.post_recv(RecvWr::new(3, pool.lease(1024).unwrap()))
        .unwrap();
    assert_eq!(pool.leased(), 1);
    let msg = pattern(700, 5);
    a.post_send(send_of(&r.a.pool, 4, &msg)).unwrap();
    let c = wait1(&mut r.b.cq, "receive");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.byte_len(), 700);
    let lease = b
        .reclaim(c)
        .unwrap()
        .into_device_leases()
        .next()
        .expect("the device lease");
    let mut got = vec![0u8; 700];
    lease.read(0, &mut got).unwrap();
    assert_eq!(got, msg);
    let mut seen = vec![0u8; 700];
    view.read(lease.chunk_index() * 1024, &mut seen).unwrap();
    assert_eq!(seen, msg, "the receive landed in the memfd");
    drop(lease);
    assert_eq!(pool.leased(), 0, "the lease came back");
    let mr = pool.into_mr().expect("no lease alive");
    mr.deregister().unwrap();
    assert!(r.b.ctx.caller_extents().is_empty(), "pages unmapped");
}

#[test]
fn memfd_mr_at_an_iova_of_the_callers_choice() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let fd = memfd(2 * PAGE);
    let e =
        r.b.pd
            .register_memfd(fd.clone(), 10, 100, Some(0x5_0000_0000), REMOTE)
            .unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::Driver(DriverError::IovaOffsetMismatch { .. })
        ),
        "{e}"
    );
    let mr =
        r.b.pd
            .register_memfd(fd.clone(), 10, 100, Some(0x5_0000_000a), REMOTE)
            .unwrap();
    assert_eq!(mr.addr(), 0x5_0000_000a);
    let wr =
        SendWr::new(1, SendOp::Write(mr.remote())).sge(lease_with(&r.a.pool, &pattern(100, 77)));
    a.post_send(wr).unwrap();
    let c = wait1(&mut r.a.cq, "write at a chosen iova");
    assert!(c.is_ok(), "{c}");
    let view = FdMapping::new(fd, 0, PAGE).unwrap();
    let mut seen = vec![0u8; 100];
    view.read(10, &mut seen).unwrap();
    assert_eq!(seen, pattern(100, 77));
}

#[test]
fn dmabuf_mr_over_peer_memory_is_a_write_read_and_send_target() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    let (src, peer) = cuda_like(4 * PAGE, false);
    // Byte 0x1010 of the dma-buf, addressed from an IOVA of the caller's choice.
    let mr =
        r.b.pd
            .register_dmabuf(&src, 0x1010, 2 * PAGE, 0x7_0000_0010, REMOTE)
            .unwrap();
    assert_eq!((mr.addr(), mr.len()), (0x7_0000_0010, 2 * PAGE));

    let data = pattern(4000, 3);
    let wr = SendWr::new(1, SendOp::Write(mr.remote().slice(4, 4000).unwrap()))
        .sge(lease_with(&r.a.pool, &data));
    a.post_send(wr).unwrap();
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    assert_eq!(
        peer.bytes(0x1014, 4000),
        data,
        "WRITE reached the peer at its offset"
    );
    assert!(peer.copies() > 0, "by copies");

    peer.set(0x2000, &pattern(300, 7));
    let wr = SendWr::new(
        2,
        SendOp::Read(mr.remote().slice(0x2000 - 0x1010, 300).unwrap()),
    )
    .sge(r.a.pool.lease(300).unwrap());
    a.post_send(wr).unwrap();
    let c = wait1(&mut r.a.cq, "read");
    assert!(c.is_ok(), "{c}");
    let got = a.reclaim(c).unwrap().into_leases().next().unwrap();
    assert_eq!(got.as_slice(), &pattern(300, 7)[..]);

    let mut via_cpu = vec![0u8; 8];
    mr.read(4, &mut via_cpu).unwrap();
    assert_eq!(via_cpu, data[..8], "DeviceMr::read goes through the peer");
    mr.write(0, b"cpu").unwrap();
    assert_eq!(peer.bytes(0x1010, 3), b"cpu");
    mr.deregister().unwrap();

    // SEND into a device lease.
    let (src, peer) = cuda_like(2 * PAGE, false);
    let pmr =
        r.b.pd
            .register_dmabuf(&src, 0, 2 * PAGE, 0x8_0000_0000, Access::LOCAL_WRITE)
            .unwrap();
    let pool = DevicePool::new(pmr, PAGE).unwrap();
    let lease = pool.lease(PAGE).unwrap();
    let chunk = lease.chunk_index();
    b.post_recv(RecvWr::new(3, lease)).unwrap();
    let msg = pattern(1500, 11);
    a.post_send(send_of(&r.a.pool, 4, &msg)).unwrap();
    let c = wait1(&mut r.b.cq, "receive");
    assert!(c.is_ok(), "{c}");
    let mut l = b.reclaim(c).unwrap().into_device_leases().next().unwrap();
    l.set_len(1500).unwrap();
    let mut got = vec![0u8; 1500];
    l.read(0, &mut got).unwrap();
    assert_eq!(got, msg);
    assert_eq!(peer.bytes(chunk * PAGE, 1500), msg);
    let c = wait1(&mut r.a.cq, "send");
    drop(a.reclaim(c).unwrap());
}

#[test]
fn device_leases_are_sources_and_read_and_atomic_targets() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    let (src, peer) = cuda_like(4 * PAGE, false);
    let dmr =
        r.a.pd
            .register_dmabuf(&src, 0, 4 * PAGE, 0x9_0000_0000, Access::LOCAL_WRITE)
            .unwrap();
    let pool = DevicePool::new(dmr, PAGE).unwrap();

    // WRITE from device memory into B's host MR.
    let data = pattern(2000, 21);
    let mut l = pool.lease(2000).unwrap();
    l.write(0, &data).unwrap();
    a.post_send(SendWr::new(1, SendOp::Write(r.b.mr.remote().slice(0, 2000).unwrap())).sge(l))
        .unwrap();
    let c = wait1(&mut r.a.cq, "write from device memory");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    let mut seen = vec![0u8; 2000];
    r.b.mr.read(0, &mut seen).unwrap();
    assert_eq!(seen, data);
    assert_eq!(
        pool.leased(),
        0,
        "the posted lease came back with its completion"
    );

    // READ from B's host MR into device memory.
    r.b.mr.write(100, &pattern(400, 22)).unwrap();
    let l = pool.lease(400).unwrap();
    let at = l.chunk_index() * PAGE;
    a.post_send(SendWr::new(2, SendOp::Read(r.b.mr.remote().slice(100, 400).unwrap())).sge(l))
        .unwrap();
    let c = wait1(&mut r.a.cq, "read into device memory");
    assert!(c.is_ok(), "{c}");
    let l = a.reclaim(c).unwrap().into_device_leases().next().unwrap();
    assert_eq!(peer.bytes(at, 400), pattern(400, 22));
    drop(l);

    // A fetch-and-add whose old value lands in device memory.
    r.b.mr.write_u64_be(512, 40).unwrap();
    let l = pool.lease(8).unwrap();
    let at = l.chunk_index() * PAGE;
    let op = SendOp::FetchAdd {
        remote: r.b.mr.remote().slice(512, 8).unwrap(),
        add: 2,
    };
    a.post_send(SendWr::new(5, op).sge(l)).unwrap();
    let c = wait1(&mut r.a.cq, "fetch-add into device memory");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    assert_eq!(
        peer.bytes(at, 8),
        40u64.to_be_bytes(),
        "the old value, big-endian"
    );
    assert_eq!(r.b.mr.read_u64_be(512).unwrap(), 42);

    // SEND from device memory into B's host pool.
    b.post_recv(RecvWr::new(3, r.b.pool.lease(4096).unwrap()))
        .unwrap();
    let mut l = pool.lease(900).unwrap();
    l.write(0, &pattern(900, 23)).unwrap();
    a.post_send(SendWr::new(4, SendOp::Send).sge(l)).unwrap();
    let c = wait1(&mut r.b.cq, "receive from device memory");
    assert!(c.is_ok(), "{c}");
    let len = c.byte_len() as usize;
    let mut got = b.reclaim_lease(c).unwrap().unwrap();
    got.set_len(len).unwrap();
    assert_eq!(got.as_slice(), &pattern(900, 23)[..]);
}

#[test]
fn a_failing_peer_copy_is_an_error_completion() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    // A WRITE into a peer that fails every copy: the responder's DMA faults and the
    // requester sees a remote error.
    let (src, peer) = cuda_like(PAGE, true);
    let mr =
        r.b.pd
            .register_dmabuf(&src, 0, PAGE, 0x6_0000_0000, REMOTE)
            .unwrap();
    let wr = SendWr::new(1, SendOp::Write(mr.remote().slice(0, 64).unwrap()))
        .sge(lease_with(&r.a.pool, &[1; 64]));
    a.post_send(wr).unwrap();
    let c = wait1(&mut r.a.cq, "write into a failing peer");
    assert!(
        !c.is_ok(),
        "a failed copy must not complete successfully: {c}"
    );
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::REMOTE_OP_ERR),
        "the responder's DMA fault is a remote operational error"
    );
    assert!(peer.copies() > 0, "the copy was tried");
    assert!(matches!(
        mr.read(0, &mut [0; 4]),
        Err(VerbsError::DeviceCopy(_))
    ));

    // A SEND from a device lease whose copies fail: a local error completion.
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let (src, _peer) = cuda_like(PAGE, true);
    let dmr =
        r.a.pd
            .register_dmabuf(&src, 0, PAGE, 0x6_0000_0000, Access::LOCAL_WRITE)
            .unwrap();
    let pool = DevicePool::new(dmr, PAGE).unwrap();
    a.post_send(
        SendWr::new(2, SendOp::Write(r.b.mr.remote().slice(0, 64).unwrap()))
            .sge(pool.lease(64).unwrap()),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "write from a failing peer");
    assert!(!c.is_ok(), "{c}");
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::LOCAL_PROT_ERR),
        "the gather's DMA fault is a local protection error"
    );
    drop(a.reclaim(c).unwrap());
    assert_eq!(pool.leased(), 0);
}

#[test]
fn every_dmabuf_rule_is_refused_with_its_error_and_nothing_mapped() {
    let r = rig();
    let (src, _peer) = cuda_like(4 * PAGE, false);
    let before = mapped(&r);
    let pd = &r.a.pd;
    let err = |e: Result<bypass_verbs::DeviceMr, VerbsError>| match e {
        Err(VerbsError::Driver(d)) => d,
        other => panic!("expected a driver error, got {other:?}"),
    };
    let e = err(pd.register_dmabuf(&src, 0x10, 64, 0x20, REMOTE));
    assert!(
        matches!(
            e,
            DriverError::DmaBufIovaOffset {
                offset: 0x10,
                iova: 0x20
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("same offset in a 4 KiB page"), "{e}");
    for bit in 4..32 {
        let bad = Access::from_bits_retain(1 << bit);
        let e = err(pd.register_dmabuf(&src, 0, 64, 0, Access::LOCAL_WRITE | bad));
        assert!(
            matches!(e, DriverError::DmaBufAccess { .. }),
            "bit {bit}: {e}"
        );
    }
    let e = err(pd.register_dmabuf(&src, 3 * PAGE as u64, PAGE + 1, 0, REMOTE));
    assert!(
        matches!(e, DriverError::DmaBufOutOfRange { size, .. } if size == 4 * PAGE as u64),
        "{e}"
    );
    let e = err(pd.register_dmabuf(&src, 8, 0, 8, REMOTE));
    assert!(matches!(e, DriverError::DmaBufEmpty { offset: 8 }), "{e}");
    let e = err(pd.register_dmabuf(&src, 0xff0, 0x20, u64::MAX - 0xf, REMOTE));
    assert!(matches!(e, DriverError::DmaBufIovaWraps { .. }), "{e}");
    // Not a dma-buf: a memfd given to from_fd.
    let fd = memfd_create(c"not-a-dmabuf", MFdFlags::empty()).unwrap();
    let raw = fd.as_raw_fd();
    match DmaBufSource::from_fd(fd) {
        Err(DriverError::NotADmaBuf { reason }) => {
            assert!(
                reason.contains(&format!("fd {raw} is not a dma-buf")),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    // CUDA memory without its peer: the sim cannot reach it, and says how to fix it.
    let bare = DmaBufSource::new(src.file.clone());
    let e = err(pd.register_dmabuf(&bare, 0, PAGE, 0, REMOTE));
    match &e {
        DriverError::Backend(BackendError::DmaBuf {
            exporter, reason, ..
        }) => {
            assert_eq!(exporter, "nv_dmabuf");
            assert!(
                reason.contains("CUDA memory is not CPU-mappable: pass its PeerMemory"),
                "{reason}"
            );
        }
        other => panic!("{other}"),
    }
    // memfd: past the end, zero length.
    let m = memfd(PAGE);
    let e = err(pd.register_memfd(m.clone(), 100, PAGE, None, REMOTE));
    assert!(
        matches!(e, DriverError::MemfdOutOfRange { size: 4096, .. }),
        "{e}"
    );
    let e = err(pd.register_memfd(m, 0, 0, None, REMOTE));
    assert!(matches!(e, DriverError::BadDmaLength { len: 0 }), "{e}");
    assert_eq!(mapped(&r), before, "no mapping and no IOVA left behind");
    // And a good registration maps exactly its pages, which deregistration gives back.
    let mr = pd
        .register_dmabuf(&src, 0x1ff0, 0x20, 0x5ff0, REMOTE)
        .unwrap();
    assert_eq!(mr.dmabuf().unwrap().mapped().map(|m| m.1), Some(2 * PAGE));
    assert_eq!(mapped(&r).0, before.0 + 1);
    mr.deregister().unwrap();
    assert_eq!(mapped(&r), before);
}

#[test]
fn a_cpu_mappable_dmabuf_without_a_peer_is_mmapped_and_every_copy_synced() {
    // A memfd standing in for a udmabuf: the sim mmaps it (it maps), then brackets each copy
    // with DMA_BUF_IOCTL_SYNC, which a memfd refuses: the WRITE faults at the responder
    // instead of touching memory unsynchronised, and nothing lands.
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let fd = memfd(2 * PAGE);
    let dup = fd.try_clone().unwrap();
    let src = DmaBufSource {
        file: DmaBufFile::from_parts(dup, 2 * PAGE as u64, Exporter::Udmabuf),
        backing: Some(bypass_verbs::MemfdRange {
            fd: fd.clone(),
            offset: 0,
        }),
        peer: None,
    };
    let mr =
        r.b.pd
            .register_dmabuf(&src, 0, 2 * PAGE, 0x4_0000_0000, REMOTE)
            .unwrap();
    let id = r.b.ctx.sim().unwrap().id();
    let peers = r
        .fabric
        .with_device(id, |d| d.iommu().peer_mappings())
        .unwrap();
    assert_eq!(peers, 1, "mapped as a copy-only (mmap + sync) mapping");
    let wr = SendWr::new(1, SendOp::Write(mr.remote().slice(0, 64).unwrap()))
        .sge(lease_with(&r.a.pool, &[7; 64]));
    a.post_send(wr).unwrap();
    let c = wait1(&mut r.a.cq, "write into an unsyncable dma-buf");
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::REMOTE_OP_ERR),
        "{c}"
    );
    let view = FdMapping::new(fd, 0, 2 * PAGE).unwrap();
    let mut seen = [1u8; 64];
    view.read(0, &mut seen).unwrap();
    assert_eq!(seen, [0; 64], "nothing written past a refused SYNC");
    // The CPU reaches it through the backing memfd.
    mr.write(100, b"through the memfd").unwrap();
    let mut got = [0u8; 17];
    view.read(100, &mut got).unwrap();
    assert_eq!(&got, b"through the memfd");
    mr.deregister().unwrap();
    let peers = r
        .fabric
        .with_device(id, |d| d.iommu().peer_mappings())
        .unwrap();
    assert_eq!(peers, 0, "unmapped (and munmapped) with the MR");
}

#[test]
fn a_device_region_a_peer_may_write_is_not_pooled() {
    let r = rig();
    let (src, _peer) = cuda_like(PAGE, false);
    let mr = r.a.pd.register_dmabuf(&src, 0, PAGE, 0, REMOTE).unwrap();
    assert!(matches!(
        DevicePool::new(mr, 64),
        Err(VerbsError::MrAccessMode { .. })
    ));
    let mr =
        r.a.pd
            .register_dmabuf(&src, 0, PAGE, 0, Access::LOCAL_WRITE)
            .unwrap();
    assert!(matches!(
        DevicePool::new(mr, 2 * PAGE),
        Err(VerbsError::PoolSize { .. })
    ));
}

/// A udmabuf over all `size` bytes of a new sealed memfd: (dma-buf fd, memfd), made through
/// the seam's uapi calls (a kernel with CONFIG_UDMABUF, as the QEMU guest has).
fn udmabuf_from_memfd(size: usize) -> (OwnedFd, Arc<OwnedFd>) {
    let mfd = bypass_seam::sealed_memfd(c"verbs-dmabuf", size as u64).expect("sealed memfd");
    let fd = bypass_seam::create_udmabuf(&mfd, 0, size as u64).unwrap_or_else(|e| panic!("{e}"));
    (fd, Arc::new(mfd))
}

#[test]
#[ignore = "needs /dev/udmabuf (run in the QEMU guest: --ignored udmabuf_on_the_sim)"]
fn udmabuf_on_the_sim_takes_writes_and_reads_through_mmap_and_sync() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let (dfd, mfd) = udmabuf_from_memfd(4 * PAGE);
    let src = DmaBufSource::from_fd(dfd).expect("a udmabuf is a dma-buf");
    assert_eq!(src.file.exporter(), &Exporter::Udmabuf);
    assert_eq!(src.file.size(), 4 * PAGE as u64);
    let view = FdMapping::new(mfd, 0, 4 * PAGE).unwrap();
    let mr =
        r.b.pd
            .register_dmabuf(&src, 0x1800, 2 * PAGE, 0x3_0000_1800, REMOTE)
            .unwrap();
    let data = pattern(3000, 41);
    a.post_send(
        SendWr::new(1, SendOp::Write(mr.remote().slice(0, 3000).unwrap()))
            .sge(lease_with(&r.a.pool, &data)),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "write into a udmabuf");
    assert!(c.is_ok(), "{c}");
    drop(a.reclaim(c).unwrap());
    let mut seen = vec![0u8; 3000];
    view.read(0x1800, &mut seen).unwrap();
    assert_eq!(
        seen, data,
        "the WRITE landed in the memfd behind the udmabuf"
    );
    view.write(0x1800 + 5000, &pattern(700, 42)).unwrap();
    a.post_send(
        SendWr::new(2, SendOp::Read(mr.remote().slice(5000, 700).unwrap()))
            .sge(r.a.pool.lease(700).unwrap()),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "read from a udmabuf");
    assert!(c.is_ok(), "{c}");
    let got = a.reclaim(c).unwrap().into_leases().next().unwrap();
    assert_eq!(got.as_slice(), &pattern(700, 42)[..]);
    mr.deregister().unwrap();
}
