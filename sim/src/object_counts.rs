//! How many objects of each kind a device holds: the view a soak or a limit test compares
//! before and after, to prove nothing leaked.
//!
//! Owns: [`ObjectCounts`] and [`Device::object_counts`]. Must not: change any table; the
//! counts are read from the tables the firmware allocates from (`objects.rs`, `events.rs`),
//! the pages it holds (`firmware/pages.rs`) and the IOMMU's mappings, so a count is what the
//! device really has, not what a driver believes it created.
//!
//! A fresh, brought-up device holds the objects of bring-up (one UAR, the async EQ, the
//! completion EQs, the boot and init pages, the command queue's mappings); a test records the
//! counts after bring-up and compares later counts with them.

use std::fmt;

use crate::device::Device;

/// Live objects of one device, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ObjectCounts {
    /// Queue pairs (CREATE_QP, not yet DESTROY_QP).
    pub qps: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Event queues.
    pub eqs: usize,
    /// Memory keys (MRs).
    pub mkeys: usize,
    /// Protection domains.
    pub pds: usize,
    /// UAR pages.
    pub uars: usize,
    /// Shared receive queues (RMPs).
    pub srqs: usize,
    /// Pages the firmware holds (MANAGE_PAGES GIVE less TAKE).
    pub firmware_pages: usize,
    /// Regions mapped in the device's IOMMU (the host's DMA memory, pinned).
    pub iommu_mappings: usize,
}

impl ObjectCounts {
    /// The kinds whose counts differ between `self` and `other`: (name, self, other).
    pub fn differences(&self, other: &Self) -> Vec<(&'static str, usize, usize)> {
        self.named()
            .into_iter()
            .zip(other.named())
            .filter(|((_, a), (_, b))| a != b)
            .map(|((n, a), (_, b))| (n, a, b))
            .collect()
    }

    /// Every count with its name, in a fixed order.
    pub fn named(&self) -> [(&'static str, usize); 9] {
        [
            ("qps", self.qps),
            ("cqs", self.cqs),
            ("eqs", self.eqs),
            ("mkeys", self.mkeys),
            ("pds", self.pds),
            ("uars", self.uars),
            ("srqs", self.srqs),
            ("firmware_pages", self.firmware_pages),
            ("iommu_mappings", self.iommu_mappings),
        ]
    }
}

impl fmt::Display for ObjectCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, v)) in self.named().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{n}={v}")?;
        }
        Ok(())
    }
}

impl Device {
    /// The live objects of each kind, from the device's own tables.
    pub fn object_counts(&self) -> ObjectCounts {
        ObjectCounts {
            qps: self.objs.qps.len(),
            cqs: self.comp.cqs.len(),
            eqs: self.comp.eqs.len(),
            mkeys: self.objs.mkeys.len(),
            pds: self.objs.pds.len(),
            uars: self.objs.uars.len(),
            srqs: self.objs.srqs.len(),
            firmware_pages: self.fw.pages.len(),
            iommu_mappings: self.iommu.mappings(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_kinds_that_changed() {
        let a = ObjectCounts::default();
        let b = ObjectCounts {
            qps: 2,
            firmware_pages: 48,
            ..a
        };
        assert_eq!(
            a.differences(&b),
            vec![("qps", 0, 2), ("firmware_pages", 0, 48)]
        );
        assert!(b.differences(&b).is_empty());
        assert_eq!(
            b.to_string(),
            "qps=2 cqs=0 eqs=0 mkeys=0 pds=0 uars=0 srqs=0 firmware_pages=48 iommu_mappings=0"
        );
    }

    #[test]
    fn a_fresh_device_holds_nothing() {
        let d = Device::new(crate::Profile::default());
        assert_eq!(d.object_counts(), ObjectCounts::default());
    }
}
