//! The page size of an MTT memory key: the largest one for which a shorter MTT translates
//! every byte of the key exactly as the per-4-KiB page list does.
//!
//! Owns: [`best_mtt`] (a pure function of the key's start address, its length, the device
//! address of each 4 KiB page it touches and the device's largest page shift) and
//! [`MttPages`] / [`MttError`]. Must not: build commands (`mr.rs` does), map memory or pick
//! IOVAs (`dma.rs`, `user_dma.rs`, `dmabuf_mr.rs` choose IOVAs that make big pages possible).
//!
//! The rule follows the kernel's `ib_umem_find_best_pgsz` (`drivers/infiniband/core/umem.c`)
//! as `mlx5_umem_mkc_find_best_pgsz` (`drivers/infiniband/hw/mlx5/mlx5_ib.h`) calls it: a
//! page size fits when the key's address and every device address agree on the bits below
//! it (PRM `mkc`: the device adds the address's offset in the page to the MTT entry, and each
//! entry must be page-aligned) and every place the device addresses jump falls on a page
//! boundary; the largest size considered is the smallest one that holds the whole range in
//! one page (larger ones cannot shorten the list). The bound comes from the device
//! (`cmd_hca_cap_2.max_mkey_log_entity_size_mtt`, 31 where absent, as the kernel's
//! `get_max_log_entity_size_cap` reads it).

/// The smallest MTT page shift (4 KiB, `MLX5_ADAPTER_PAGE_SHIFT`).
pub const MIN_PAGE_SHIFT: u32 = 12;
/// The largest page shift `mkc.log_page_size` (5 bits) can carry.
pub const MAX_PAGE_SHIFT: u32 = 31;

const PAGE: u64 = 1 << MIN_PAGE_SHIFT;

/// An MTT at one page size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MttPages {
    /// The page shift (`mkc.log_page_size`), `MIN_PAGE_SHIFT..=max`.
    pub shift: u32,
    /// Entry `j`: the device address of the page holding `start + j << shift` (rounded down
    /// to the page), aligned to `1 << shift`.
    pub entries: Vec<u64>,
}

/// Why no MTT could be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MttError {
    /// The page list does not have one entry per 4 KiB page of the range.
    #[error(
        "building the MTT of a {len}-byte key at {start:#x}: {got} page addresses given for {expected} pages; pass the device address of every 4 KiB page the range touches"
    )]
    PageCount {
        /// The key's start address.
        start: u64,
        /// The key's length.
        len: u64,
        /// Pages the range touches.
        expected: u64,
        /// Addresses given.
        got: usize,
    },
    /// The range wraps the address space.
    #[error(
        "building the MTT of a {len}-byte key at {start:#x}: the range wraps the 64-bit address space; register a range that ends below 2^64"
    )]
    Wraps {
        /// The key's start address.
        start: u64,
        /// The key's length.
        len: u64,
    },
}

/// The number of 4 KiB pages `len` bytes at `start` touch (0 for `len == 0`), or `None` when
/// the range wraps.
pub fn pages_4k(start: u64, len: u64) -> Option<u64> {
    if len == 0 {
        return Some(0);
    }
    let last = start.checked_add(len - 1)?;
    Some((last >> MIN_PAGE_SHIFT) - (start >> MIN_PAGE_SHIFT) + 1)
}

/// The MTT with the largest page shift in `MIN_PAGE_SHIFT..=max_shift` that translates the
/// `len` bytes at `start` exactly as `pages` does, where `pages[k]` is the device address of
/// the 4 KiB page holding `(start & !0xfff) + k * 4096` (low 12 bits ignored).
///
/// Errors: [`MttError::PageCount`] when `pages` does not have one address per page;
/// [`MttError::Wraps`] for a range past 2^64.
pub fn best_mtt(start: u64, len: u64, pages: &[u64], max_shift: u32) -> Result<MttPages, MttError> {
    let expected = pages_4k(start, len).ok_or(MttError::Wraps { start, len })?;
    if expected != pages.len() as u64 {
        return Err(MttError::PageCount {
            start,
            len,
            expected,
            got: pages.len(),
        });
    }
    let shift = best_shift(start, len, pages, max_shift);
    let mask = (1u64 << shift) - 1;
    let vbase = start & !(PAGE - 1);
    let mut entries = Vec::with_capacity(pages.len().div_ceil(1 << (shift - MIN_PAGE_SHIFT)));
    let mut block = None;
    for (k, &p) in pages.iter().enumerate() {
        let v = vbase + ((k as u64) << MIN_PAGE_SHIFT);
        if block != Some(v >> shift) {
            block = Some(v >> shift);
            // best_shift made the page's address agree with `v` below `shift`.
            entries.push((p & !(PAGE - 1)) - (v & mask));
        }
    }
    Ok(MttPages { shift, entries })
}

/// The largest page shift that keeps the translation exact (see the module comment); the
/// caller checked that `pages` has one address per page of a range that does not wrap.
fn best_shift(start: u64, len: u64, pages: &[u64], max_shift: u32) -> u32 {
    let bound = max_shift.clamp(MIN_PAGE_SHIFT, MAX_PAGE_SHIFT);
    if len == 0 {
        return MIN_PAGE_SHIFT;
    }
    // The smallest shift at which the whole range lies in one page.
    let last = start + (len - 1);
    let one_page = (u64::BITS - (start ^ last).leading_zeros()).max(MIN_PAGE_SHIFT);
    let mut shift = bound.min(one_page);
    let vbase = start & !(PAGE - 1);
    let mut prev: Option<u64> = None;
    for (k, &p) in pages.iter().enumerate() {
        if shift == MIN_PAGE_SHIFT {
            break;
        }
        let v = vbase + ((k as u64) << MIN_PAGE_SHIFT);
        let d = p & !(PAGE - 1);
        // Both are 4 KiB aligned, so a difference has at least 12 trailing zeros.
        shift = shift.min((v ^ d).trailing_zeros());
        if prev.is_some_and(|q| q.wrapping_add(PAGE) != d) {
            // A jump in device addresses must start a page.
            shift = shift.min(v.trailing_zeros());
        }
        prev = Some(d);
    }
    shift
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The device address of byte `va` through an MTT at `shift` (as the device translates).
    fn through(start: u64, shift: u32, entries: &[u64], va: u64) -> u64 {
        let j = ((va >> shift) - (start >> shift)) as usize;
        entries[j] + (va & ((1u64 << shift) - 1))
    }

    /// The reference: every byte of the range, through the 4 KiB list and through `m`.
    fn assert_exact(start: u64, len: u64, pages: &[u64], m: &MttPages) {
        let mask = (1u64 << m.shift) - 1;
        for e in &m.entries {
            assert_eq!(e & mask, 0, "entry {e:#x} not aligned to shift {}", m.shift);
        }
        let want = ((start + len - 1) >> m.shift) - (start >> m.shift) + 1;
        assert_eq!(m.entries.len() as u64, want);
        for va in start..start + len {
            let four_k = through(start, MIN_PAGE_SHIFT, pages, va);
            assert_eq!(
                through(start, m.shift, &m.entries, va),
                four_k,
                "byte {va:#x}"
            );
        }
    }

    /// True when an MTT at `shift` translates every byte as `pages` does (brute force).
    fn exact_at(start: u64, len: u64, pages: &[u64], shift: u32) -> bool {
        let mask = (1u64 << shift) - 1;
        let mut entries: std::collections::BTreeMap<u64, u64> = Default::default();
        (start..start + len).all(|va| {
            let d = through(start, MIN_PAGE_SHIFT, pages, va);
            let e = d.wrapping_sub(va & mask);
            e & mask == 0 && *entries.entry(va >> shift).or_insert(e) == e
        })
    }

    #[test]
    fn a_contiguous_aligned_gigabyte_takes_one_entry_per_gigabyte() {
        let start = 0x7f12_4000_0000u64 + 0x10;
        let len = 1u64 << 30;
        let n = pages_4k(start, len).unwrap();
        let pages: Vec<u64> = (0..n).map(|k| 0x40_0000_0000 + (k << 12)).collect();
        let m = best_mtt(start, len, &pages, 31).unwrap();
        assert_eq!(m.shift, 30);
        assert_eq!(m.entries, vec![0x40_0000_0000, 0x40_4000_0000]);
    }

    #[test]
    fn the_device_bound_caps_the_shift() {
        let pages: Vec<u64> = (0..512).map(|k| 0x20_0000_0000 + (k << 12)).collect();
        let m = best_mtt(0x10_0000_0000, 512 << 12, &pages, 16).unwrap();
        assert_eq!((m.shift, m.entries.len()), (16, 32));
        assert_eq!(m.entries[1], 0x20_0001_0000);
    }

    #[test]
    fn low_bits_that_disagree_keep_4k_pages() {
        let pages: Vec<u64> = (0..4).map(|k| 0x10_1000 + (k << 12)).collect();
        let m = best_mtt(0x7000_0000, 4 << 12, &pages, 31).unwrap();
        assert_eq!((m.shift, m.entries), (12, pages));
    }

    #[test]
    fn a_jump_off_a_page_boundary_limits_the_shift() {
        // Two 8 KiB runs, the second elsewhere: 8 KiB pages fit, 16 KiB do not.
        let pages = [0x10_0000, 0x10_1000, 0x50_2000, 0x50_3000];
        let m = best_mtt(0x2_0000, 4 << 12, &pages, 31).unwrap();
        assert_eq!(m.shift, 13);
        assert_eq!(m.entries, vec![0x10_0000, 0x50_2000]);
    }

    #[test]
    fn a_small_range_stops_at_the_page_that_holds_it() {
        let m = best_mtt(0x4_0ff0, 0x20, &[0x9_0000, 0x9_1000], 31).unwrap();
        // 0x40ff0..0x41010 straddles a 4 KiB boundary but lies in one 8 KiB page: larger
        // pages would still take one entry, so 8 KiB is chosen.
        assert_eq!(m.shift, 13);
        assert_eq!(m.entries, vec![0x9_0000]);
        assert_exact(0x4_0ff0, 0x20, &[0x9_0000, 0x9_1000], &m);
    }

    #[test]
    fn a_wrong_page_count_or_a_wrap_is_refused() {
        assert!(matches!(
            best_mtt(0x1000, 0x2000, &[0x1000], 31),
            Err(MttError::PageCount {
                expected: 2,
                got: 1,
                ..
            })
        ));
        assert!(matches!(
            best_mtt(u64::MAX - 10, 100, &[0], 31),
            Err(MttError::Wraps { .. })
        ));
        assert_eq!(
            best_mtt(0x1000, 0, &[], 31).unwrap(),
            MttPages {
                shift: 12,
                entries: vec![]
            }
        );
    }

    /// Page lists made of runs: each run contiguous from an address that shares some low
    /// bits with the key's address, so that bigger pages are sometimes possible.
    fn case() -> impl Strategy<Value = (u64, u64, Vec<u64>, u32)> {
        (0u64..64, 0u64..4096, 1u64..48 * 1024, 12u32..=20).prop_flat_map(
            |(vpage, off, len, max)| {
                let start = (vpage << 12) + off;
                let n = pages_4k(start, len).unwrap_or(0) as usize;
                let runs = proptest::collection::vec((1usize..8, 0u64..256, any::<bool>()), n);
                (Just(start), Just(len), runs, Just(max)).prop_map(|(start, len, runs, max)| {
                    let n = pages_4k(start, len).unwrap_or(0) as usize;
                    let vbase = start & !0xfff;
                    let mut pages = Vec::with_capacity(n);
                    for (run, base, congruent) in runs {
                        let v = vbase + ((pages.len() as u64) << 12);
                        // Congruent runs keep the address's low 16 bits.
                        let mut d = (base << 16) + if congruent { v & 0xffff } else { base << 12 };
                        for _ in 0..run.min(n - pages.len()) {
                            pages.push(d);
                            d += 0x1000;
                        }
                    }
                    (start, len, pages, max)
                })
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn best_mtt_is_exact_and_no_larger_exact_shift_is_missed(
            (start, len, pages, max) in case()
        ) {
            prop_assume!(pages.len() as u64 == pages_4k(start, len).unwrap());
            let m = best_mtt(start, len, &pages, max).unwrap();
            prop_assert!((MIN_PAGE_SHIFT..=max).contains(&m.shift));
            assert_exact(start, len, &pages, &m);
            // The largest exact shift that still shortens the list is the one chosen.
            let one_page = (64 - (start ^ (start + len - 1)).leading_zeros()).max(12);
            let best = (MIN_PAGE_SHIFT..=max.min(one_page))
                .rev()
                .find(|&s| exact_at(start, len, &pages, s))
                .unwrap();
            prop_assert_eq!(m.shift, best);
        }
    }
}
