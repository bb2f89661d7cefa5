//! The VFIO backend: a real PCI function bound to `vfio-pci`, behind the [`Backend`] trait.
//!
//! Owns: [`VfioBackend`] — opening a device by PCI address (sysfs checks, container with the
//! type1v2 IOMMU, group, device fd, through `vfio-ioctls`), its regions (BAR0 mmapped for
//! exact-width volatile MMIO, config space through the fd), Bus Master Enable, the IOMMU's
//! IOVA apertures, DMA map/unmap of the driver's pinned memory and of dma-bufs ([`dmabuf`]:
//! a udmabuf through its backing memfd; refusals typed as [`DmaBufRefusal`]), MSI-X (or MSI)
//! vectors as eventfds, device reset, and orderly teardown. Must not: know any device's registers (mlx5
//! is the rest of the driver; QEMU's `edu` test device is the driver's test support), or
//! allocate IOVAs (`dma::DmaMapper` does).
//!
//! The kernel interface is `include/uapi/linux/vfio.h`; the order of operations follows
//! rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_open_device`, `mlx5_vfio_get_iommu_info`,
//! `mlx5_vfio_init_bar0`) and the kernel's `Documentation/driver-api/vfio.rst`.

pub mod dmabuf;
pub mod error;
pub mod iommu_info;
pub mod iommufd;
pub mod region;
pub mod sysfs;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_RESET, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_REQ_IRQ_INDEX,
};
use vfio_ioctls::{VfioContainer, VfioDevice};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

use super::{Backend, BackendError, DmaMap, HostMemory, Interrupts, IovaRange, Mmio, Progress};
use crate::dma::{MemlockState, PAGE_SIZE};
use bypass_seam::DmaBufSlice;
pub use error::{DmaBufRefusal, GroupMember, VfioError};
pub use iommu_info::IommuInfo;
pub use iommufd::IommufdProbe;
pub use region::{Bar, RegionInfo};
pub use sysfs::{Sysfs, parse_bdf};

/// The DMA mappings a device holds: IOVA → (length, the memory, kept alive while mapped).
/// A dma-buf's mapping is one entry too (`dmabuf::FdMapping`, holding its fds).
type Mappings = BTreeMap<u64, (usize, Arc<dyn HostMemory>)>;

/// The most interrupt vectors enabled at open (each is one eventfd).
pub const MAX_VECTORS: u32 = 64;

/// Which interrupt mechanism the vectors use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqKind {
    /// MSI-X (`VFIO_PCI_MSIX_IRQ_INDEX`).
    MsiX,
    /// MSI (`VFIO_PCI_MSI_IRQ_INDEX`), for a device without MSI-X.
    Msi,
    /// No message-signalled interrupts.
    None,
}

/// One interrupt index the device offers (`VFIO_DEVICE_GET_IRQ_INFO`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqInfo {
    /// `INTx`, `MSI`, `MSI-X`, `ERR`, `REQ`.
    pub name: &'static str,
    /// Vectors in it.
    pub count: u32,
    /// `VFIO_IRQ_INFO_*`.
    pub flags: u32,
}

/// A PCI function driven from user space through VFIO.
///
/// Teardown on drop, in order: interrupts disabled, every DMA mapping unmapped, BAR0
/// unmapped, the device fd closed, the group detached from the container, the container
/// closed.
pub struct VfioBackend {
    bdf: String,
    vendor: u32,
    device_id: u32,
    group: u32,
    bar0: Option<Bar>,
    /// A dup of the device fd for config-space pread/pwrite and the BAR mmap.
    file: Option<File>,
    regions: Vec<RegionInfo>,
    irq_infos: Vec<IrqInfo>,
    irq_kind: IrqKind,
    eventfds: Vec<EventFd>,
    iommu: IommuInfo,
    reset_supported: bool,
    mappings: Mutex<Mappings>,
    mmio_errors: AtomicU64,
    device: Option<VfioDevice>,
    container: Arc<VfioContainer>,
}

impl std::fmt::Debug for VfioBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioBackend")
            .field("bdf", &self.bdf)
            .field("group", &self.group)
            .field("irq_kind", &self.irq_kind)
            .field("vectors", &self.eventfds.len())
            .finish_non_exhaustive()
    }
}

fn ioctls(op: &'static str, bdf: &str) -> impl FnOnce(vfio_ioctls::VfioError) -> VfioError {
    let bdf = bdf.to_owned();
    move |source| VfioError::Ioctls { op, bdf, source }
}

impl VfioBackend {
    /// Opens the device at PCI address `addr` (`0000:3b:00.0` or `3b:00.0`) with the real
    /// `/sys`.
    pub fn open(addr: &str) -> Result<Arc<Self>, VfioError> {
        Self::open_in(&Sysfs::default(), addr)
    }

    /// Opens the device, with the sysfs checks made against `sysfs`.
    ///
    /// Steps: sysfs checks (bound to vfio-pci, IOMMU group, viability), container
    /// (`/dev/vfio/vfio`, type1v2), group and device fd, IOMMU info, regions, Bus Master
    /// Enable through config space, BAR0 mmap, MSI-X (else MSI) vectors on eventfds.
    pub fn open_in(sysfs: &Sysfs, addr: &str) -> Result<Arc<Self>, VfioError> {
        let check = sysfs.check(addr)?;
        let bdf = check.bdf.clone();
        let vendor = sysfs.hex_attr(&bdf, "vendor").unwrap_or(0);
        let device_id = sysfs.hex_attr(&bdf, "device").unwrap_or(0);
        let container =
            Arc::new(VfioContainer::new(None).map_err(ioctls("opening the VFIO container", &bdf))?);
        let device = VfioDevice::new(&sysfs.device_dir(&bdf), container.clone(), false).map_err(
            |e| match e {
                // The kernel's view of viability can differ from sysfs's (a driver bound in
                // between): name the members as sysfs shows them now.
                vfio_ioctls::VfioError::GroupViable => VfioError::GroupNotViable {
                    bdf: bdf.clone(),
                    group: check.group,
                    members: sysfs
                        .group_members(check.group)
                        .unwrap_or(check.members.clone()),
                },
                e => ioctls("opening the VFIO group and device", &bdf)(e),
            },
        )?;
        let iommu = iommu_info::query(container.as_ref(), &bdf)?;
        let regions = RegionInfo::all(&device);
        // SAFETY: the device fd is open for as long as `device` lives, which outlives this
        // borrow (used only to duplicate the fd).
        let borrowed = unsafe { BorrowedFd::borrow_raw(device.as_raw_fd()) };
        let file =
            File::from(
                borrowed
                    .try_clone_to_owned()
                    .map_err(|source| VfioError::Ioctl {
                        op: "dup of the device fd",
                        bdf: bdf.clone(),
                        source,
                    })?,
            );
        let irq_infos = [
            (VFIO_PCI_INTX_IRQ_INDEX, "INTx"),
            (VFIO_PCI_MSI_IRQ_INDEX, "MSI"),
            (VFIO_PCI_MSIX_IRQ_INDEX, "MSI-X"),
            (VFIO_PCI_ERR_IRQ_INDEX, "ERR"),
            (VFIO_PCI_REQ_IRQ_INDEX, "REQ"),
        ]
        .iter()
        .filter_map(|&(i, name)| {
            device.get_irq_info(i).map(|irq| IrqInfo {
                name,
                count: irq.count,
                flags: irq.flags,
            })
        })
        .collect();
        let reset_supported = device_flags(&device) & VFIO_DEVICE_FLAGS_RESET != 0;
        let mut this = Self {
            bdf,
            vendor,
            device_id,
            group: check.group,
            bar0: None,
            file: Some(file),
            regions,
            irq_infos,
            irq_kind: IrqKind::None,
            eventfds: Vec::new(),
            iommu,
            reset_supported,
            mappings: Mutex::new(BTreeMap::new()),
            mmio_errors: AtomicU64::new(0),
            device: Some(device),
            container,
        };
        this.enable_bus_master()?;
        let bar0 = this
            .region(0)
            .cloned()
            .ok_or_else(|| this.region_err("the device reports no BAR0 region".to_owned()))?;
        let file = this.file()?;
        this.bar0 = Some(Bar::map(file, &bar0, &this.bdf)?);
        this.enable_irqs()?;
        tracing::info!(bdf = %this.bdf, group = this.group, irq = ?this.irq_kind,
            vectors = this.eventfds.len(), "VFIO device open");
        Ok(Arc::new(this))
    }

    fn region_err(&self, what: String) -> VfioError {
        VfioError::Region {
            bdf: self.bdf.clone(),
            what,
        }
    }

    fn file(&self) -> Result<&File, VfioError> {
        self.file
            .as_ref()
            .ok_or_else(|| self.region_err("the device fd is closed".to_owned()))
    }

    fn device(&self) -> Result<&VfioDevice, VfioError> {
        self.device
            .as_ref()
            .ok_or_else(|| self.region_err("the device is closed".to_owned()))
    }

    fn config_region(&self) -> Result<&RegionInfo, VfioError> {
        self.region(VFIO_PCI_CONFIG_REGION_INDEX)
            .filter(|r| r.size > 0)
            .ok_or_else(|| self.region_err("the device has no config-space region".to_owned()))
    }

    /// The PCI address (`0000:00:03.0`).
    pub fn bdf(&self) -> &str {
        &self.bdf
    }

    /// PCI vendor and device ID from sysfs (0 if unreadable).
    pub fn ids(&self) -> (u32, u32) {
        (self.vendor, self.device_id)
    }

    /// IOMMU group number.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// Every region (BAR0..BAR5, ROM, CONFIG).
    pub fn regions(&self) -> &[RegionInfo] {
        &self.regions
    }

    /// Region `index`.
    pub fn region(&self, index: u32) -> Option<&RegionInfo> {
        self.regions.iter().find(|r| r.index == index)
    }

    /// The interrupt indices the device offers.
    pub fn irq_infos(&self) -> &[IrqInfo] {
        &self.irq_infos
    }

    /// Which mechanism the enabled vectors use.
    pub fn irq_kind(&self) -> IrqKind {
        self.irq_kind
    }

    /// What `VFIO_IOMMU_GET_INFO` reported.
    pub fn iommu_info(&self) -> &IommuInfo {
        &self.iommu
    }

    /// The mapped BAR0.
    pub fn bar0(&self) -> Option<&Bar> {
        self.bar0.as_ref()
    }

    /// Bytes of config space at `off` (one pread of that width).
    pub fn config_read<const N: usize>(&self, off: u64) -> Result<[u8; N], VfioError> {
        region::config_read(self.file()?, self.config_region()?, off, &self.bdf)
    }

    /// `PCI_COMMAND` now.
    pub fn pci_command(&self) -> Result<u16, VfioError> {
        Ok(u16::from_le_bytes(
            self.config_read::<2>(region::PCI_COMMAND)?,
        ))
    }

    /// Sets Memory Space and Bus Master Enable in `PCI_COMMAND` (vfio-pci leaves Bus Master
    /// off; without it the device's DMA and MSI writes go nowhere). Done at open, before any
    /// DMA, and again after a reset.
    pub fn enable_bus_master(&self) -> Result<(), VfioError> {
        let cmd = self.pci_command()?;
        let want = cmd | region::PCI_COMMAND_MEMORY | region::PCI_COMMAND_MASTER;
        if want != cmd {
            region::config_write(
                self.file()?,
                self.config_region()?,
                region::PCI_COMMAND,
                &want.to_le_bytes(),
                &self.bdf,
            )?;
        }
        let now = self.pci_command()?;
        if now & region::PCI_COMMAND_MASTER == 0 {
            return Err(self.region_err(format!(
                "PCI_COMMAND reads {now:#06x} after setting Bus Master Enable: the device ignores the write, so it cannot DMA"
            )));
        }
        Ok(())
    }

    fn enable_irqs(&mut self) -> Result<(), VfioError> {
        let count = |i| {
            self.irq_infos
                .iter()
                .find(|x| x.name == i)
                .map_or(0, |x| x.count)
        };
        let (kind, n) = match (count("MSI-X"), count("MSI")) {
            (x, _) if x > 0 => (IrqKind::MsiX, x),
            (_, m) if m > 0 => (IrqKind::Msi, m),
            _ => return Ok(()),
        };
        let n = n.min(MAX_VECTORS);
        let irq_err = |reason: String| VfioError::Irq {
            bdf: self.bdf.clone(),
            what: format!("{n} {kind:?} vectors"),
            reason,
        };
        let fds = (0..n)
            .map(|_| EventFd::new(EFD_NONBLOCK))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| irq_err(format!("eventfd: {e}")))?;
        let refs: Vec<&EventFd> = fds.iter().collect();
        let device = self.device()?;
        let r = match kind {
            IrqKind::MsiX => device.enable_msix(refs),
            _ => device.enable_msi(refs),
        };
        r.map_err(|e| {
            irq_err(format!(
                "VFIO_DEVICE_SET_IRQS: {e} (is the vector count above what the device supports, or interrupt remapping missing? see dmesg)"
            ))
        })?;
        self.irq_kind = kind;
        self.eventfds = fds;
        Ok(())
    }

    fn disable_irqs(&self) {
        let Some(device) = self.device.as_ref() else {
            return;
        };
        let r = match self.irq_kind {
            IrqKind::MsiX => device.disable_msix(),
            IrqKind::Msi => device.disable_msi(),
            IrqKind::None => Ok(()),
        };
        if let Err(e) = r {
            tracing::warn!(bdf = %self.bdf, error = %e, "disabling interrupts failed");
        }
    }

    /// Whether `VFIO_DEVICE_RESET` is available (`VFIO_DEVICE_FLAGS_RESET`: FLR, PM or bus
    /// reset).
    pub fn reset_supported(&self) -> bool {
        self.reset_supported
    }

    /// Resets the function (`VFIO_DEVICE_RESET`), then sets Bus Master Enable again.
    pub fn reset(&self) -> Result<(), VfioError> {
        if !self.reset_supported {
            return Err(VfioError::Reset {
                bdf: self.bdf.clone(),
                reason: "is not offered for this device (no FLR, PM or bus reset the kernel can use: VFIO_DEVICE_FLAGS_RESET is clear)".to_owned(),
            });
        }
        let fd = self.device()?.as_raw_fd();
        // SAFETY: VFIO_DEVICE_RESET takes no argument; fd is the open device fd.
        let rc = unsafe { nix::libc::ioctl(fd, iommu_info::vfio_io(11) as _) };
        if rc < 0 {
            return Err(VfioError::Reset {
                bdf: self.bdf.clone(),
                reason: format!("failed: {}", std::io::Error::last_os_error()),
            });
        }
        self.enable_bus_master()
    }

    /// The DMA mappings now held: `(iova, len)`.
    pub fn mappings(&self) -> Vec<(u64, usize)> {
        self.mappings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(&iova, &(len, _))| (iova, len))
            .collect()
    }

    fn count_mmio_error(&self, what: &str, off: u64) {
        self.mmio_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(bdf = %self.bdf, off, what, "MMIO access outside BAR0 or misaligned; refused");
    }

    /// Checks that `iova..iova+len` is page-aligned and inside one of the IOMMU's apertures
    /// (any IOVA when the kernel reported none); `Err` says which and the fix.
    fn check_iova(&self, iova: u64, len: usize) -> Result<(), String> {
        if !iova.is_multiple_of(PAGE_SIZE as u64) {
            return Err(format!("the IOVA {iova:#x} is not page-aligned"));
        }
        if len == 0 {
            return Err("the length is zero: map at least one page".to_owned());
        }
        let end = (len as u64)
            .checked_sub(1)
            .and_then(|l| iova.checked_add(l));
        let inside = end.is_some_and(|end| {
            self.iommu.ranges.is_empty()
                || self
                    .iommu
                    .ranges
                    .iter()
                    .any(|r| r.start <= iova && end <= r.last)
        });
        if !inside {
            return Err(format!(
                "the range is outside the IOMMU's apertures {:x?}: allocate IOVAs from Backend::iova_ranges",
                self.iommu.ranges
            ));
        }
        Ok(())
    }

    fn map_err(&self, op: &'static str, iova: u64, len: usize, reason: String) -> BackendError {
        BackendError::DmaMap {
            op,
            iova,
            len,
            reason: format!("{} ({}): {reason}", self.bdf, "VFIO"),
        }
    }
}

/// The lowest IOVA handed out: the kernel's apertures usually start at 0, but a zero device
/// address would make an unset address field point at live memory. Starting at 64 KiB, as
/// the legacy x86 apertures do ([`IovaRange::LEGACY`]), keeps that a fault.
pub const MIN_IOVA: u64 = 0x1_0000;

/// The kernel's apertures with everything below [`MIN_IOVA`] cut off.
pub fn usable_ranges(ranges: &[IovaRange]) -> Vec<IovaRange> {
    ranges
        .iter()
        .filter(|r| r.last >= MIN_IOVA)
        .map(|r| IovaRange {
            start: r.start.max(MIN_IOVA),
            last: r.last,
        })
        .collect()
}

fn device_flags(device: &VfioDevice) -> u32 {
    // VFIO_DEVICE_GET_INFO: struct vfio_device_info { argsz, flags, num_regions, num_irqs,
    // cap_offset, pad } (include/uapi/linux/vfio.h).
    let mut info = [0u32; 6];
    info[0] = std::mem::size_of_val(&info) as u32;
    // SAFETY: the kernel reads argsz and writes at most argsz (24) bytes into `info`.
    let rc = unsafe {
        nix::libc::ioctl(
            device.as_raw_fd(),
            iommu_info::vfio_io(7) as _,
            info.as_mut_ptr(),
        )
    };
    if rc < 0 { 0 } else { info[1] }
}

impl Mmio for VfioBackend {
    fn bar0_len(&self) -> u64 {
        self.bar0.as_ref().map_or(0, Bar::len)
    }

    fn read32(&self, off: u64) -> u32 {
        match self.bar0.as_ref().and_then(|b| b.read32(off)) {
            Some(v) => v,
            None => {
                self.count_mmio_error("read32", off);
                u32::MAX
            }
        }
    }

    unsafe fn write32(&self, off: u64, v: u32) {
        if self.bar0.as_ref().and_then(|b| b.write32(off, v)).is_none() {
            self.count_mmio_error("write32", off);
        }
    }

    unsafe fn write64(&self, off: u64, v: u64) {
        if self.bar0.as_ref().and_then(|b| b.write64(off, v)).is_none() {
            self.count_mmio_error("write64", off);
        }
    }

    unsafe fn write_bf(&self, off: u64, chunk: &[u64; 8]) {
        if self
            .bar0
            .as_ref()
            .and_then(|b| b.write_bf(off, chunk))
            .is_none()
        {
            self.count_mmio_error("write_bf", off);
        }
    }

    fn mmio_errors(&self) -> u64 {
        self.mmio_errors.load(Ordering::Relaxed)
    }
}

impl DmaMap for VfioBackend {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        usable_ranges(&self.iommu.ranges)
    }

    unsafe fn map_dma(&self, iova: u64, region: Arc<dyn HostMemory>) -> Result<(), BackendError> {
        let len = region.len();
        self.check_iova(iova, len)
            .map_err(|reason| self.map_err("map", iova, len, reason))?;
        // type1 pins the pages and charges them to RLIMIT_MEMLOCK (vfio_iommu_type1.c
        // vfio_pin_pages_remote -> vfio_lock_acct); the driver does not mlock regions it maps
        // here (pins_on_map), so this is the only charge. Check first so the error states
        // the numbers instead of a bare ENOMEM.
        MemlockState::current().check(len as u64)?;
        let container = self.container.as_ref();
        // SAFETY: region.base()..+len is live memory that `region` keeps allocated and in place
        // (the `HostMemory` contract); the Arc is kept in `mappings` until the IOVA is
        // unmapped, so the memory outlives the device's access. The contract also rules out
        // Rust references into it, which the device's writes would alias.
        let r = unsafe { container.vfio_dma_map(iova, len, region.base().as_ptr()) };
        if let Err(e) = r {
            let hint = match &e {
                vfio_ioctls::VfioError::IommuDmaMap(errno) => match errno.errno() {
                    nix::libc::ENOMEM => " — the kernel refused to pin the pages: raise RLIMIT_MEMLOCK (`ulimit -l`), or the container's mapping limit (vfio_iommu_type1 dma_entry_limit) is reached".to_owned(),
                    nix::libc::EEXIST => " — the IOVA range overlaps an existing mapping".to_owned(),
                    nix::libc::EINVAL => " — the IOVA is outside the IOMMU's apertures or not aligned to its page size".to_owned(),
                    _ => String::new(),
                },
                _ => String::new(),
            };
            return Err(self.map_err("map", iova, len, format!("VFIO_IOMMU_MAP_DMA: {e}{hint}")));
        }
        self.mappings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(iova, (len, region));
        Ok(())
    }

    fn pins_on_map(&self) -> bool {
        true
    }

    unsafe fn map_dmabuf(&self, iova: u64, slice: &DmaBufSlice) -> Result<(), BackendError> {
        self.map_dmabuf_checked(iova, slice).map_err(|refusal| {
            refusal.into_backend(&self.bdf, iova, slice.len, slice.file.exporter().name())
        })
    }

    unsafe fn unmap_dma(&self, iova: u64, len: usize) -> Result<(), BackendError> {
        let mut maps = self.mappings.lock().unwrap_or_else(PoisonError::into_inner);
        match maps.get(&iova) {
            Some(&(mapped, _)) if mapped == len => {}
            Some(&(mapped, _)) => {
                return Err(self.map_err(
                    "unmap",
                    iova,
                    len,
                    format!("the mapping at this IOVA is {mapped:#x} bytes: unmap it whole"),
                ));
            }
            None => {
                return Err(self.map_err(
                    "unmap",
                    iova,
                    len,
                    "nothing is mapped at this IOVA".into(),
                ));
            }
        }
        self.container
            .vfio_dma_unmap(iova, len)
            .map_err(|e| self.map_err("unmap", iova, len, format!("VFIO_IOMMU_UNMAP_DMA: {e}")))?;
        // The region's memory may be freed only now that the device cannot reach it.
        maps.remove(&iova);
        Ok(())
    }
}

impl Interrupts for VfioBackend {
    fn irq_vectors(&self) -> u16 {
        u16::try_from(self.eventfds.len()).unwrap_or(u16::MAX)
    }

    fn irq_fd(&self, vector: u16) -> Option<BorrowedFd<'_>> {
        let fd = self.eventfds.get(usize::from(vector))?;
        // SAFETY: the eventfd is owned by `self.eventfds`, which is never changed after open
        // and lives as long as `&self`, the lifetime of the borrow.
        Some(unsafe { BorrowedFd::borrow_raw(fd.as_raw_fd()) })
    }

    fn wait_irq(&self, vector: u16, timeout: Duration) -> Result<bool, BackendError> {
        let Some(efd) = self.eventfds.get(usize::from(vector)) else {
            return Err(BackendError::NoVector {
                vector,
                available: self.irq_vectors(),
            });
        };
        let Some(fd) = self.irq_fd(vector) else {
            return Ok(false);
        };
        // poll(2) takes at most u16::MAX ms here: wait in slices until the deadline.
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(0) if left.is_zero() || ms < u16::MAX => return Ok(false),
                Ok(0) => continue,
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(source) => return Err(BackendError::Irq { vector, source }),
            }
        }
        match efd.read() {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(BackendError::Irq {
                vector,
                source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)),
            }),
        }
    }
}

impl Backend for VfioBackend {
    fn name(&self) -> String {
        self.bdf.clone()
    }

    fn progress(&self) -> Progress {
        Progress::Running
    }

    fn numa_node(&self) -> Option<u32> {
        Sysfs::default().numa_node_or_unknown(&self.bdf)
    }
}

impl Drop for VfioBackend {
    fn drop(&mut self) {
        self.disable_irqs();
        let maps = std::mem::take(
            self.mappings
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (iova, (len, region)) in maps {
            match self.container.vfio_dma_unmap(iova, len) {
                Ok(()) => drop(region),
                Err(e) => {
                    // The device might still reach the memory: leak it rather than free it.
                    tracing::error!(bdf = %self.bdf, iova, len, error = %e,
                        "unmapping DMA at close failed; the memory is leaked, not freed");
                    std::mem::forget(region);
                }
            }
        }
        // BAR0 and the dup'ed fd go before the device fd: the group can only leave the
        // container once no fd or mapping of the device is left.
        drop(self.bar0.take());
        drop(self.file.take());
        drop(self.device.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iova_zero_is_never_handed_out() {
        let r = usable_ranges(&[
            IovaRange {
                start: 0,
                last: 0xfff,
            },
            IovaRange {
                start: 0,
                last: 0xfedf_ffff,
            },
            IovaRange {
                start: 0xfef0_0000,
                last: (1 << 48) - 1,
            },
        ]);
        assert_eq!(
            r,
            vec![
                IovaRange {
                    start: MIN_IOVA,
                    last: 0xfedf_ffff
                },
                IovaRange {
                    start: 0xfef0_0000,
                    last: (1 << 48) - 1
                }
            ]
        );
        let mut a = crate::dma::IovaAllocator::new(&r);
        assert_eq!(a.alloc(4096, 4096).unwrap(), MIN_IOVA);
    }
}
