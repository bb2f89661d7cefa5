//! `VFIO_IOMMU_GET_INFO`: the IOMMU's page sizes and the IOVA apertures it accepts, read from
//! the type1 info's capability chain.
//!
//! Owns: the ioctl (two calls: the first learns the size the chain needs) and the pure parser
//! of the returned bytes ([`parse_iommu_info`]), which the tests drive with hand-built
//! buffers. Must not: allocate IOVAs (that is `dma::IovaAllocator`) or map anything.
//!
//! Layout (`include/uapi/linux/vfio.h`): `struct vfio_iommu_type1_info { u32 argsz; u32
//! flags; u64 iova_pgsizes; u32 cap_offset; u32 pad; }`, then capabilities, each starting
//! with `struct vfio_info_cap_header { u16 id; u16 version; u32 next; }` where `next` is an
//! offset from the start of the info struct (0 ends the chain). Capability 1 is
//! `vfio_iommu_type1_info_cap_iova_range { header; u32 nr_iovas; u32 reserved; struct {
//! u64 start; u64 end; } iova_ranges[]; }` (`end` inclusive); capability 3 is
//! `vfio_iommu_type1_info_dma_avail { header; u32 avail; }`. The kernel fills them in
//! `drivers/vfio/vfio_iommu_type1.c` `vfio_iommu_type1_get_info`.

use std::os::fd::AsRawFd;

use vfio_bindings::bindings::vfio::{
    VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
};

use super::error::VfioError;
use crate::backend::IovaRange;

/// `VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL` (`include/uapi/linux/vfio.h`; not in vfio-bindings).
const CAP_DMA_AVAIL: u16 = 3;
/// Size of `struct vfio_iommu_type1_info`.
const INFO_LEN: usize = 24;
/// Upper bound on the chain length followed (a loop in `next` must not hang the parser).
const MAX_CAPS: usize = 64;

/// What the IOMMU reported.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IommuInfo {
    /// Bitmap of the IOMMU page sizes (bit n set: 2^n bytes), `None` if not reported.
    pub page_sizes: Option<u64>,
    /// IOVA apertures; empty if the kernel reported no IOVA-range capability.
    pub ranges: Vec<IovaRange>,
    /// How many more DMA mappings the container accepts (`dma_entry_limit`), if reported.
    pub dma_avail: Option<u32>,
}

impl IommuInfo {
    /// The page sizes as a readable list (`4K 2M 1G`).
    pub fn page_sizes_text(&self) -> String {
        let Some(bits) = self.page_sizes else {
            return "unknown".to_owned();
        };
        (0..64)
            .filter(|b| bits & (1u64 << b) != 0)
            .map(|b| match b {
                30.. => format!("{}G", 1u64 << (b - 30)),
                20.. => format!("{}M", 1u64 << (b - 20)),
                10.. => format!("{}K", 1u64 << (b - 10)),
                _ => format!("{}B", 1u64 << b),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// Parses a filled `vfio_iommu_type1_info` buffer with its capability chain.
pub fn parse_iommu_info(buf: &[u8]) -> Result<IommuInfo, VfioError> {
    let bad = |what: String| VfioError::BadCapChain(what);
    let short = || {
        bad(format!(
            "the buffer is {} bytes, shorter than the info struct",
            buf.len()
        ))
    };
    let flags = u32_at(buf, 4).ok_or_else(short)?;
    let pgsizes = u64_at(buf, 8).ok_or_else(short)?;
    let cap_offset = u32_at(buf, 16).ok_or_else(short)?;
    let mut info = IommuInfo {
        page_sizes: (flags & VFIO_IOMMU_INFO_PGSIZES != 0).then_some(pgsizes),
        ..IommuInfo::default()
    };
    if flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return Ok(info);
    }
    let mut next = cap_offset as usize;
    let mut seen = 0;
    while next != 0 {
        seen += 1;
        if seen > MAX_CAPS || next < INFO_LEN {
            return Err(bad(format!(
                "capability offset {next:#x} points into the header or the chain does not end"
            )));
        }
        let at = next;
        let (id, nxt) = match (u16_at(buf, at), u32_at(buf, at + 4)) {
            (Some(id), Some(n)) => (id, n),
            _ => {
                return Err(bad(format!(
                    "capability header at {at:#x} runs past the {}-byte buffer",
                    buf.len()
                )));
            }
        };
        if u32::from(id) == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            let n = u32_at(buf, at + 8)
                .ok_or_else(|| bad(format!("IOVA-range capability at {at:#x} is truncated")))?;
            for i in 0..n as usize {
                let r = at + 16 + i * 16;
                let (Some(start), Some(end)) = (u64_at(buf, r), u64_at(buf, r + 8)) else {
                    return Err(bad(format!(
                        "IOVA range {i} of {n} runs past the {}-byte buffer",
                        buf.len()
                    )));
                };
                if end < start {
                    return Err(bad(format!(
                        "IOVA range {i} ends ({end:#x}) before it starts ({start:#x})"
                    )));
                }
                info.ranges.push(IovaRange { start, last: end });
            }
        } else if id == CAP_DMA_AVAIL {
            info.dma_avail = u32_at(buf, at + 8);
        }
        next = nxt as usize;
    }
    Ok(info)
}

/// `_IO(VFIO_TYPE, VFIO_BASE + nr)` (`include/uapi/linux/vfio.h`).
pub(crate) const fn vfio_io(nr: u64) -> u64 {
    ((b';' as u64) << 8) | (100 + nr)
}

/// Queries the container's IOMMU (`VFIO_IOMMU_GET_INFO`, after `VFIO_SET_IOMMU`).
pub fn query(container: &impl AsRawFd, bdf: &str) -> Result<IommuInfo, VfioError> {
    let ioctl_err = |source| VfioError::Ioctl {
        op: "VFIO_IOMMU_GET_INFO",
        bdf: bdf.to_owned(),
        source,
    };
    // u64 words keep the buffer 8-byte aligned, as the kernel struct is.
    let mut words = vec![0u64; INFO_LEN / 8];
    for _ in 0..2 {
        let argsz = (words.len() * 8) as u32;
        if let Some(w) = words.first_mut() {
            // argsz is the first u32 of the struct in memory; flags (the second) stays 0.
            let mut first = [0u8; 8];
            first[..4].copy_from_slice(&argsz.to_ne_bytes());
            *w = u64::from_ne_bytes(first);
        }
        // SAFETY: VFIO_IOMMU_GET_INFO reads argsz and writes at most argsz bytes into the
        // buffer, which is `words.len() * 8` bytes long and lives across the call.
        let rc = unsafe {
            nix::libc::ioctl(container.as_raw_fd(), vfio_io(12) as _, words.as_mut_ptr())
        };
        if rc < 0 {
            return Err(ioctl_err(std::io::Error::last_os_error()));
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let needed = u32_at(&bytes, 0).unwrap_or(0) as usize;
        if needed <= words.len() * 8 {
            return parse_iommu_info(&bytes);
        }
        words = vec![0u64; needed.div_ceil(8)];
    }
    Err(ioctl_err(std::io::Error::other(
        "the capability chain kept growing between two calls",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds an info buffer: header, then the given capabilities chained in order.
    fn info(flags: u32, pgsizes: u64, caps: &[Vec<u8>]) -> Vec<u8> {
        let mut b = vec![0u8; INFO_LEN];
        b[4..8].copy_from_slice(&flags.to_ne_bytes());
        b[8..16].copy_from_slice(&pgsizes.to_ne_bytes());
        let mut offsets = Vec::new();
        let mut at = INFO_LEN;
        for c in caps {
            offsets.push(at);
            at += c.len();
        }
        if let Some(&first) = offsets.first() {
            b[16..20].copy_from_slice(&(first as u32).to_ne_bytes());
        }
        for (i, c) in caps.iter().enumerate() {
            let mut c = c.clone();
            let next = offsets.get(i + 1).copied().unwrap_or(0) as u32;
            c[4..8].copy_from_slice(&next.to_ne_bytes());
            b.extend_from_slice(&c);
        }
        let len = b.len() as u32;
        b[0..4].copy_from_slice(&len.to_ne_bytes());
        b
    }

    fn iova_cap(ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut c = vec![0u8; 16];
        c[0..2].copy_from_slice(&1u16.to_ne_bytes());
        c[2..4].copy_from_slice(&1u16.to_ne_bytes());
        c[8..12].copy_from_slice(&(ranges.len() as u32).to_ne_bytes());
        for &(s, e) in ranges {
            c.extend_from_slice(&s.to_ne_bytes());
            c.extend_from_slice(&e.to_ne_bytes());
        }
        c
    }

    fn avail_cap(n: u32) -> Vec<u8> {
        let mut c = vec![0u8; 16];
        c[0..2].copy_from_slice(&3u16.to_ne_bytes());
        c[8..12].copy_from_slice(&n.to_ne_bytes());
        c
    }

    fn migration_cap() -> Vec<u8> {
        let mut c = vec![0u8; 32];
        c[0..2].copy_from_slice(&2u16.to_ne_bytes());
        c
    }

    #[test]
    fn ranges_page_sizes_and_dma_avail_come_out_of_the_chain() {
        // What the guest's intel-iommu reports: two apertures around the MSI window.
        let b = info(
            VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS,
            0x4020_1000,
            &[
                migration_cap(),
                iova_cap(&[(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)]),
                avail_cap(65535),
            ],
        );
        let i = parse_iommu_info(&b).unwrap();
        assert_eq!(i.page_sizes, Some(0x4020_1000));
        assert_eq!(i.page_sizes_text(), "4K 2M 1G");
        assert_eq!(
            i.ranges,
            vec![
                IovaRange {
                    start: 0,
                    last: 0xfedf_ffff
                },
                IovaRange {
                    start: 0xfef0_0000,
                    last: (1 << 39) - 1
                }
            ]
        );
        assert_eq!(i.dma_avail, Some(65535));
    }

    #[test]
    fn no_caps_flag_means_no_ranges() {
        let b = info(VFIO_IOMMU_INFO_PGSIZES, 0x1000, &[]);
        let i = parse_iommu_info(&b).unwrap();
        assert!(i.ranges.is_empty());
        assert_eq!(i.page_sizes_text(), "4K");
        let i = parse_iommu_info(&info(0, 0x1000, &[])).unwrap();
        assert_eq!(i.page_sizes, None);
    }

    #[test]
    fn truncated_or_looping_chains_are_errors_not_panics() {
        let good = info(
            VFIO_IOMMU_INFO_CAPS,
            0,
            &[iova_cap(&[(0x1000, 0x1fff), (0x3000, 0x3fff)])],
        );
        for cut in [0, 10, 23, 30, 40, good.len() - 1] {
            assert!(parse_iommu_info(&good[..cut]).is_err(), "cut at {cut}");
        }
        // A capability whose next points at itself.
        let mut looped = info(VFIO_IOMMU_INFO_CAPS, 0, &[avail_cap(1)]);
        looped[INFO_LEN + 4..INFO_LEN + 8].copy_from_slice(&(INFO_LEN as u32).to_ne_bytes());
        let e = parse_iommu_info(&looped).unwrap_err();
        assert!(e.to_string().contains("does not end"), "{e}");
        // next pointing into the header.
        let mut into_header = info(VFIO_IOMMU_INFO_CAPS, 0, &[avail_cap(1)]);
        into_header[16..20].copy_from_slice(&8u32.to_ne_bytes());
        assert!(parse_iommu_info(&into_header).is_err());
        // A range that ends before it starts.
        let backwards = info(VFIO_IOMMU_INFO_CAPS, 0, &[iova_cap(&[(0x2000, 0x1000)])]);
        assert!(parse_iommu_info(&backwards).is_err());
    }

    #[test]
    fn reported_ranges_feed_the_allocator_with_aligned_results() {
        let b = info(
            VFIO_IOMMU_INFO_CAPS,
            0,
            &[iova_cap(&[(0x1000, 0x1f_ffff), (0x40_0000, 0xfedf_ffff)])],
        );
        let i = parse_iommu_info(&b).unwrap();
        let mut a = crate::dma::IovaAllocator::new(&i.ranges);
        let small = a.alloc(0x1000, 0x1000).unwrap();
        assert_eq!(small, 0x1000);
        // A 2 MiB buffer gets a 2 MiB-aligned IOVA (so the IOMMU can use one large page):
        // it does not fit the first range at that alignment, so it lands in the second.
        let big_align = crate::dma::IovaAllocator::natural_align(2 << 20);
        let big = a.alloc(2 << 20, big_align).unwrap();
        assert_eq!(big, 0x40_0000);
        assert_eq!(big % (2 << 20), 0);
        for r in [small, big] {
            assert!(i.ranges.iter().any(|x| x.start <= r && r <= x.last));
        }
    }
}
