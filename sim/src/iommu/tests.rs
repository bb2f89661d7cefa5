//! Tests of the IOMMU: VFIO type1's map rules, faults, the remembered mappings, and peer
//! (copy-only) mappings.

use super::*;
use crate::memory::SimMemory;

fn mem(pages: usize) -> Arc<SimMemory> {
    Arc::new(SimMemory::new(pages * PAGE_SIZE).unwrap())
}

#[test]
fn read_and_write_through_a_mapping() {
    let m = mem(2);
    let mut io = Iommu::new();
    io.map(0x10000, m.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
        .unwrap();
    io.write(0x10ffe, &[1, 2, 3, 4]).unwrap();
    assert_eq!(m.to_vec(0xffe, 4).unwrap(), vec![1, 2, 3, 4]);
    let mut b = [0; 4];
    io.read(0x10ffe, &mut b).unwrap();
    assert_eq!(b, [1, 2, 3, 4]);
}

#[test]
fn access_spanning_two_adjacent_mappings_of_different_buffers() {
    let (a, b) = (mem(1), mem(1));
    let mut io = Iommu::new();
    io.map(0x20000, a.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
    io.map(0x21000, b.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
    io.write(0x20ffe, &[9, 8, 7, 6]).unwrap();
    assert_eq!(a.to_vec(0xffe, 2).unwrap(), vec![9, 8]);
    assert_eq!(b.to_vec(0, 2).unwrap(), vec![7, 6]);
}

#[test]
fn unmapped_or_partially_mapped_access_faults_and_touches_nothing() {
    let m = mem(1);
    let mut io = Iommu::new();
    io.map(0x10000, m.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
    let e = io.write(0x10ffe, &[1, 2, 3, 4]).unwrap_err();
    assert_eq!(
        e,
        DmaFault {
            iova: 0x10ffe,
            len: 4,
            dir: Dir::Write
        }
    );
    assert_eq!(
        m.to_vec(0xffe, 2).unwrap(),
        vec![0, 0],
        "an all-or-nothing DMA wrote part of itself"
    );
    assert!(io.read(0x5000, &mut [0; 1]).is_err());
    assert!(io.read(u64::MAX, &mut [0; 2]).is_err());
    assert_eq!(io.faults(), 3);
}

#[test]
fn write_within_one_writes_only_inside_one_writable_mapping_and_counts_nothing() {
    let (a, b) = (mem(1), mem(1));
    let mut io = Iommu::new();
    io.map(0x20000, a.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
    io.map(0x21000, b.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
    io.map(0x30000, mem(1), 0, PAGE_SIZE, Perm::RO).unwrap();
    // Inside one mapping: written, on a miss and on the remembered hit alike.
    assert!(io.write_within_one(0x20ff8, &[1, 2, 3, 4, 5, 6, 7, 8]));
    assert!(io.write_within_one(0x21000, &[9; 4]));
    assert!(io.write_within_one(0x20ff0, &[7; 8]));
    assert_eq!(
        a.to_vec(0xff0, 16).unwrap(),
        [[7; 8], [1, 2, 3, 4, 5, 6, 7, 8]].concat()
    );
    assert_eq!(b.to_vec(0, 4).unwrap(), vec![9; 4]);
    // Across two mappings, unmapped, read-only: refused, nothing written, nothing counted
    // (the caller's fallback reports it).
    assert!(!io.write_within_one(0x20ffe, &[0xee; 4]));
    assert!(!io.write_within_one(0x5000, &[0xee; 4]));
    assert!(!io.write_within_one(0x30000, &[0xee; 4]));
    assert_eq!(a.to_vec(0xffe, 2).unwrap(), vec![7, 8]);
    assert_eq!(b.to_vec(0, 2).unwrap(), vec![9, 9]);
    assert_eq!(io.faults(), 0);
}

#[test]
fn read_only_mapping_refuses_device_writes() {
    let mut io = Iommu::new();
    io.map(0x10000, mem(1), 0, PAGE_SIZE, Perm::RO).unwrap();
    assert!(io.read(0x10000, &mut [0; 8]).is_ok());
    assert!(io.write(0x10000, &[0; 8]).is_err());
}

#[test]
fn map_rules_follow_vfio_type1() {
    let m = mem(4);
    let mut io = Iommu::new();
    assert!(matches!(
        io.map(0x10001, m.clone(), 0, PAGE_SIZE, Perm::RW),
        Err(MapError::Unaligned { .. })
    ));
    assert!(matches!(
        io.map(0x10000, m.clone(), 0, 5 * PAGE_SIZE, Perm::RW),
        Err(MapError::OutsideBuffer { .. })
    ));
    assert!(matches!(
        io.map(0x10000, m.clone(), 0, 0, Perm::RW),
        Err(MapError::BadRange { .. })
    ));
    io.map(0x10000, m.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
        .unwrap();
    assert!(matches!(
        io.map(0x11000, m.clone(), 0, PAGE_SIZE, Perm::RW),
        Err(MapError::Overlap {
            existing: 0x10000,
            ..
        })
    ));
    assert!(matches!(
        io.map(0xf000, m.clone(), 0, 2 * PAGE_SIZE, Perm::RW),
        Err(MapError::Overlap { .. })
    ));
    io.map(0x12000, m.clone(), 2 * PAGE_SIZE, PAGE_SIZE, Perm::RW)
        .unwrap();
    assert!(matches!(
        io.unmap(0x11000, PAGE_SIZE),
        Err(MapError::WouldSplit { .. })
    ));
    assert_eq!(io.unmap(0x10000, 3 * PAGE_SIZE).unwrap(), 3 * PAGE_SIZE);
    assert_eq!(io.mappings(), 0);
    assert_eq!(io.unmap(0x10000, PAGE_SIZE).unwrap(), 0);
}

#[test]
fn unmap_then_dma_faults() {
    let m = mem(1);
    let mut io = Iommu::new();
    io.map(0x10000, m, 0, PAGE_SIZE, Perm::RW).unwrap();
    io.unmap(0x10000, PAGE_SIZE).unwrap();
    assert!(io.write(0x10000, &[1]).is_err());
}

#[test]
fn an_access_after_a_remap_reaches_the_new_buffer_not_a_remembered_one() {
    let (old, new) = (mem(2), mem(1));
    let mut io = Iommu::new();
    io.map(0x10000, old.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
        .unwrap();
    // Used: remembered as a recent mapping.
    io.write(0x10010, &[1]).unwrap();
    io.write(0x11010, &[2]).unwrap();
    io.unmap(0x10000, 2 * PAGE_SIZE).unwrap();
    assert!(io.read(0x11010, &mut [0]).is_err(), "unmapped: faults");
    io.map(0x10000, new.clone(), 0, PAGE_SIZE, Perm::RO)
        .unwrap();
    io.read(0x10010, &mut [0]).unwrap();
    assert!(
        io.write(0x10010, &[3]).is_err(),
        "the new mapping is read-only"
    );
    assert!(
        io.read(0x11010, &mut [0]).is_err(),
        "beyond the new mapping"
    );
    assert_eq!(old.to_vec(0x10, 1).unwrap(), vec![1]);
    assert_eq!(new.to_vec(0x10, 1).unwrap(), vec![0]);
    assert_eq!(io.faults(), 3);
}

#[test]
fn more_mappings_in_use_than_remembered_each_reach_their_own_buffer() {
    let bufs: Vec<_> = (0..(RECENT + 3)).map(|_| mem(1)).collect();
    let mut io = Iommu::new();
    for (i, b) in bufs.iter().enumerate() {
        io.map(0x10000 * (i as u64 + 1), b.clone(), 0, PAGE_SIZE, Perm::RW)
            .unwrap();
    }
    for round in 0..3u8 {
        for (i, b) in bufs.iter().enumerate() {
            io.write(0x10000 * (i as u64 + 1) + 8, &[round + i as u8])
                .unwrap();
            assert_eq!(b.to_vec(8, 1).unwrap(), vec![round + i as u8]);
        }
    }
}

/// Peer memory over a `Vec`, counting copies; `fail` makes every copy fail.
#[derive(Debug)]
struct VecPeer {
    bytes: std::sync::Mutex<Vec<u8>>,
    copies: std::sync::atomic::AtomicUsize,
    fail: bool,
}

impl VecPeer {
    fn new(len: usize, fail: bool) -> Arc<Self> {
        Arc::new(Self {
            bytes: std::sync::Mutex::new((0..len).map(|i| i as u8).collect()),
            copies: Default::default(),
            fail,
        })
    }

    fn copies(&self) -> usize {
        self.copies.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn check(
        &self,
        op: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<(), bypass_seam::PeerError> {
        self.copies
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let total = self.bytes.lock().unwrap().len();
        if self.fail || offset + len > total {
            return Err(bypass_seam::PeerError {
                op,
                exporter: "test".into(),
                offset,
                len,
                reason: "refused by the test".into(),
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
        "test"
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), bypass_seam::PeerError> {
        self.check("read", offset, dst.len())?;
        dst.copy_from_slice(&self.bytes.lock().unwrap()[offset..offset + dst.len()]);
        Ok(())
    }
    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), bypass_seam::PeerError> {
        self.check("write", offset, src.len())?;
        self.bytes.lock().unwrap()[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
}

#[test]
fn a_peer_mapping_is_reached_by_its_copies_from_its_offset() {
    let p = VecPeer::new(4 * PAGE_SIZE, false);
    let mut io = Iommu::new();
    io.map_peer(0x40000, p.clone(), PAGE_SIZE, 2 * PAGE_SIZE, Perm::RW)
        .unwrap();
    assert_eq!((io.mappings(), io.peer_mappings()), (1, 1));
    io.write(0x40ffe, &[0xaa, 0xbb, 0xcc, 0xdd]).unwrap();
    assert_eq!(
        p.bytes.lock().unwrap()[PAGE_SIZE + 0xffe..PAGE_SIZE + 0x1002],
        [0xaa, 0xbb, 0xcc, 0xdd]
    );
    let mut b = [0u8; 2];
    io.read(0x40010, &mut b).unwrap();
    assert_eq!(
        b,
        [0x10, 0x11],
        "byte 0x1010 of the peer (the pattern is i as u8)"
    );
    assert_eq!(p.copies(), 2, "one copy per access, never a pointer");
    // Beyond the mapping (which starts a page into the peer): faults.
    assert!(io.read(0x42000, &mut b).is_err());
    assert_eq!(io.faults(), 1);
}

#[test]
fn fast_paths_skip_a_peer_mapping_and_the_copy_path_serves_it() {
    let p = VecPeer::new(PAGE_SIZE, false);
    let h = mem(1);
    let mut io = Iommu::new();
    io.map_peer(0x40000, p.clone(), 0, PAGE_SIZE, Perm::RW)
        .unwrap();
    io.map(0x41000, h.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
    assert!(
        !io.write_within_one(0x40000, &[1; 4]),
        "no pointer into peer memory"
    );
    let mut runs = Vec::new();
    assert!(io.resolve(0x40000, 8, Dir::Read, &mut runs).is_none());
    assert!(
        io.resolve(0x40ffc, 8, Dir::Read, &mut runs).is_none(),
        "a range crossing into host memory is not resolved either"
    );
    assert_eq!(io.faults(), 0, "refusing a fast path counts nothing");
    // The same accesses by copies, one spanning peer and host memory.
    io.write(0x40ffc, &[9, 8, 7, 6, 5, 4, 3, 2]).unwrap();
    assert_eq!(p.bytes.lock().unwrap()[0xffc..], [9, 8, 7, 6]);
    assert_eq!(h.to_vec(0, 4).unwrap(), vec![5, 4, 3, 2]);
    // Repeated accesses keep going through the peer (nothing remembered).
    let mut b = [0u8; 4];
    for _ in 0..3 {
        io.read(0x40ffc, &mut b).unwrap();
    }
    assert_eq!(b, [9, 8, 7, 6]);
    assert_eq!(p.copies(), 4);
}

#[test]
fn a_failed_peer_copy_is_a_fault() {
    let p = VecPeer::new(PAGE_SIZE, true);
    let mut io = Iommu::new();
    io.map_peer(0x40000, p, 0, PAGE_SIZE, Perm::RW).unwrap();
    assert_eq!(
        io.write(0x40000, &[1]).unwrap_err(),
        DmaFault {
            iova: 0x40000,
            len: 1,
            dir: Dir::Write
        }
    );
    assert!(io.read(0x40000, &mut [0; 8]).is_err());
    assert_eq!(io.faults(), 2);
}

#[test]
fn a_peer_mapping_follows_the_map_rules_and_unmaps() {
    let p = VecPeer::new(2 * PAGE_SIZE, false);
    let mut io = Iommu::new();
    assert!(matches!(
        io.map_peer(0x40000, p.clone(), PAGE_SIZE, 2 * PAGE_SIZE, Perm::RW),
        Err(MapError::OutsideBuffer { .. })
    ));
    assert!(matches!(
        io.map_peer(0x40000, p.clone(), 1, PAGE_SIZE, Perm::RW),
        Err(MapError::Unaligned { .. })
    ));
    io.map_peer(0x40000, p.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
        .unwrap();
    assert_eq!(Arc::strong_count(&p), 2, "the mapping holds the peer");
    assert_eq!(io.unmap(0x40000, 2 * PAGE_SIZE).unwrap(), 2 * PAGE_SIZE);
    assert_eq!(Arc::strong_count(&p), 1, "unmapping drops it");
    assert!(io.read(0x40000, &mut [0]).is_err());
}
