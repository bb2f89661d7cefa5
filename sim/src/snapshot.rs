//! Snapshots of a device: a copy of everything a driver, a packet or a doorbell can change,
//! and the reset that puts it all back.
//!
//! Owns: [`DeviceSnapshot`], [`Device::snapshot`] and [`Device::reset_to`]. A snapshot holds a
//! copy of every part of the device (BAR0 and its latched doorbells, firmware stage and
//! pages, object tables, transport state, CQs, EQs and interrupt counts, congestion state,
//! time, counters, trace) and the bytes of every host-memory mapping in its IOMMU (rings,
//! doorbell records, mailboxes, registered buffers), so that a reset device behaves, input
//! for input, exactly as it did when the snapshot was taken. Persistent fuzz targets bring
//! devices up once, snapshot them, and reset between inputs, which makes a finding replay
//! from its input alone. Must not: restore peer memory (a `PeerMemory` mapping is reached by
//! copies only; it is shared, not copied) or the interrupt handler (it belongs to the
//! device's owner, who installed it; a reset keeps the live one).
//!
//! Sources: none beyond the device's own parts; this is a testing facility, not hardware.

use std::sync::Arc;

use crate::memory::HostMemory;

use crate::device::Device;

/// A device's state and the contents of its host memory at one moment ([`Device::snapshot`]).
pub struct DeviceSnapshot {
    dev: Device,
    /// Each host mapping's buffer, the offset of the mapping in it and the bytes it held.
    memory: Vec<(Arc<dyn HostMemory>, usize, Vec<u8>)>,
}

impl std::fmt::Debug for DeviceSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSnapshot")
            .field("dev", &self.dev)
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

impl DeviceSnapshot {
    /// Bytes of host memory the snapshot holds (what each reset copies back).
    pub fn memory_bytes(&self) -> usize {
        self.memory.iter().map(|(_, _, b)| b.len()).sum()
    }
}

impl Device {
    /// A copy of the device's state and of the host memory its IOMMU maps (see the module
    /// comment for what it covers). Costs a copy of every mapped byte: map only what the
    /// device needs when snapshots are frequent.
    pub fn snapshot(&self) -> DeviceSnapshot {
        let memory = self
            .iommu
            .host_mappings()
            .map(|(mem, off, len)| {
                let mut bytes = vec![0; len];
                // A mapping lies inside its buffer (`Iommu::map` checks), so this read
                // cannot fail; an empty copy would only make the reset restore less.
                let _ = mem.read_at(off, &mut bytes);
                (mem.clone(), off, bytes)
            })
            .collect();
        DeviceSnapshot {
            dev: self.copy_parts(),
            memory,
        }
    }

    /// Puts the device and its host memory back as they were at `snap`; the interrupt
    /// handler stays the one installed now. A snapshot of another device resets this one
    /// into that device's state and memory.
    pub fn reset_to(&mut self, snap: &DeviceSnapshot) {
        let handler = self.comp.take_handler();
        *self = snap.dev.copy_parts();
        self.comp.put_handler(handler);
        for (mem, off, bytes) in &snap.memory {
            let _ = mem.write_at(*off, bytes);
        }
    }

    /// A field-by-field copy (host memory shared, no interrupt handler).
    fn copy_parts(&self) -> Device {
        Device {
            profile: self.profile.clone(),
            iommu: self.iommu.clone(),
            bar: self.bar.clone(),
            fw: self.fw.clone(),
            objs: self.objs.clone(),
            tp: self.tp.clone(),
            comp: self.comp.clone(),
            cong: self.cong.clone(),
            now: self.now,
            counters: self.counters.clone(),
            trace: self.trace.clone(),
        }
    }
}
