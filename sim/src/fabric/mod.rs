//! The sim's fabrics: simulated devices behind the seam's [`Backend`] traits, as a driver opens
//! them.
//!
//! Owns: [`SimFabric`] (a [`World`] behind `Arc<Mutex<..>>`) and [`SimBackend`] (one device of
//! it). Must not: reach into the device's internals (only `World`/`Device` methods), or know
//! mlx5 formats.
//!
//! - Stepped ([`SimFabric::stepped`]): deterministic; the world moves only inside
//!   [`Backend::progress`] and `Interrupts::wait_irq`, to idle, then to the next event.
//! - Threaded ([`SimFabric::threaded`]): an engine thread runs the world with real elapsed
//!   time; MMIO writes wake it. With inline doorbells ([`FabricOptions::inline_doorbells`]) an
//!   MMIO write that latches a doorbell runs the world to idle in the writer's thread.
//! - UDP ([`SimFabric::udp`], `fabric/udp.rs`): a real UDP socket as the wire.
//!
//! MMIO goes to `Device::mmio_read`/`mmio_write` as the bytes on the bus (`v.to_ne_bytes()` of
//! what a `write_volatile` stores); a refused access is traced and counted, never a panic. DMA
//! regions are mapped into the device's IOMMU, dma-bufs as peer mappings (copies through the
//! caller's `PeerMemory`, or through an `mmap` of a CPU-mappable one, `dmabuf_mmap.rs`); each
//! MSI-X vector has a non-blocking eventfd.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bypass_seam::{
    Backend, BackendError, DmaBufSlice, DmaMap, Exporter, HostMemory, Interrupts, IovaRange, Mmio,
    PeerMemory, Progress,
};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::Profile;
use crate::device::Device;
use crate::dmabuf_mmap::MappedDmaBuf;
use crate::iommu::Perm;
use crate::world::{LinkConfig, Livelock, World};

mod lock;
mod udp;

use lock::{lock, try_lock};
use udp::pump::{Pumper, UdpWire};

/// How long the engine thread sleeps when the world is idle (it is woken by MMIO writes).
const ENGINE_IDLE: Duration = Duration::from_micros(200);

/// The IOVA apertures a sim device offers: the legacy x86 ones, as VFIO reports without caps.
const SIM_IOVA_RANGES: [IovaRange; 2] = IovaRange::LEGACY;

struct Engine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How a threaded fabric runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricOptions {
    /// The link between the devices.
    pub link: LinkConfig,
    /// Run the world in the caller's thread when an MMIO write latches a doorbell.
    pub inline_doorbells: bool,
}

impl Default for FabricOptions {
    /// The default link (1 µs), doorbells handed to the engine thread.
    fn default() -> Self {
        Self {
            link: LinkConfig::default(),
            inline_doorbells: false,
        }
    }
}

impl FabricOptions {
    /// The fastest in-process setting: a zero-latency link and inline doorbells.
    pub fn low_latency() -> Self {
        Self {
            link: LinkConfig {
                latency_ns: 0,
                jitter_ns: 0,
            },
            inline_doorbells: true,
        }
    }
}

struct FabricInner {
    world: Arc<Mutex<World>>,
    /// Virtual time zero of a threaded fabric (virtual time follows the wall clock from it).
    start: Instant,
    /// Run the world in the MMIO writer's thread when a doorbell latches.
    inline_doorbells: bool,
    engine: Mutex<Option<Engine>>,
    /// World errors (livelock) seen by progress() or the engine.
    errors: AtomicU64,
    /// The UDP fabric's wire (`fabric/udp.rs`), pumped by doorbells and `progress()`.
    wire: Option<Arc<UdpWire>>,
}

impl Drop for FabricInner {
    fn drop(&mut self) {
        let engine = self
            .engine
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut e) = engine {
            e.stop.store(true, Ordering::Release);
            if let Some(t) = e.thread.take() {
                t.thread().unpark();
                if t.join().is_err() {
                    tracing::error!("the sim engine thread panicked");
                }
            }
        }
    }
}

/// Simulated devices on one network, shared by their [`SimBackend`]s.
#[derive(Clone)]
pub struct SimFabric {
    inner: Arc<FabricInner>,
    threaded: bool,
}

impl std::fmt::Debug for SimFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimFabric")
            .field("threaded", &self.threaded)
            .finish_non_exhaustive()
    }
}

impl SimFabric {
    /// A deterministic fabric: the world moves only when the driver waits.
    pub fn stepped(seed: u64) -> Self {
        Self {
            inner: Arc::new(FabricInner {
                world: Arc::new(Mutex::new(World::new(seed))),
                start: Instant::now(),
                inline_doorbells: false,
                engine: Mutex::new(None),
                errors: AtomicU64::new(0),
                wire: None,
            }),
            threaded: false,
        }
    }

    /// A fabric run by an engine thread in real time (virtual time follows the wall clock).
    pub fn threaded(seed: u64) -> Self {
        Self::threaded_with(seed, FabricOptions::default())
    }

    /// A threaded fabric with `opts` (link model, inline doorbells).
    pub fn threaded_with(seed: u64, opts: FabricOptions) -> Self {
        let inline = opts.inline_doorbells;
        Self::with_engine(seed, opts, None, move |world, stop, start| {
            engine_loop(world, stop, start, inline);
        })
    }

    /// A threaded fabric whose engine thread runs `engine(world, stop, start)` until `stop`
    /// is set (`start`: the instant virtual time 0 stands for).
    fn with_engine(
        seed: u64,
        opts: FabricOptions,
        wire: Option<Arc<UdpWire>>,
        engine: impl FnOnce(&Mutex<World>, &AtomicBool, Instant) + Send + 'static,
    ) -> Self {
        let mut w = World::new(seed);
        w.set_link(opts.link);
        let world = Arc::new(Mutex::new(w));
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let thread = {
            let world = world.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("bypass-sim-engine".into())
                .spawn(move || engine(&world, &stop, start))
        };
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::error!(error = %e, "could not start the sim engine thread");
                None
            }
        };
        Self {
            inner: Arc::new(FabricInner {
                world,
                start,
                inline_doorbells: opts.inline_doorbells,
                engine: Mutex::new(Some(Engine { stop, thread })),
                errors: AtomicU64::new(0),
                wire,
            }),
            threaded: true,
        }
    }

    /// True for a threaded fabric.
    pub fn is_threaded(&self) -> bool {
        self.threaded
    }

    /// Adds a device with `profile` and returns its backend (with one eventfd per MSI-X
    /// vector wired to the device's interrupt handler).
    ///
    /// Errors: [`BackendError::Irq`] when an eventfd cannot be created.
    pub fn add_device(&self, profile: Profile) -> Result<Arc<SimBackend>, BackendError> {
        let vectors = profile.msix_vectors;
        let mut fds = Vec::with_capacity(usize::from(vectors));
        for v in 0..vectors {
            let fd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(|source| BackendError::Irq { vector: v, source })?;
            fds.push(fd);
        }
        let fds = Arc::new(fds);
        let mut world = lock(&self.inner.world);
        let id = world.add_device(profile);
        let bar0_len = world.device(id).bar0_len();
        let handler_fds = fds.clone();
        world.device(id).set_interrupt_handler(move |vector| {
            if let Some(fd) = handler_fds.get(usize::from(vector)) {
                // EAGAIN only if the counter would overflow: the vector is signalled anyway.
                let _ = fd.write(1);
            }
        });
        drop(world);
        Ok(Arc::new(SimBackend {
            fabric: self.clone(),
            id,
            bar0_len,
            irq_fds: fds,
            mmio_errors: AtomicU64::new(0),
        }))
    }

    /// Runs `f` on device `id` with the world locked (for tests: counters, trace,
    /// `firmware_pages()`, `request_pages(n)`, the IOMMU's mappings).
    ///
    /// Errors: [`NoDevice`] when the fabric has no device `id`.
    pub fn with_device<R>(
        &self,
        id: usize,
        f: impl FnOnce(&mut Device) -> R,
    ) -> Result<R, NoDevice> {
        let mut world = lock(&self.inner.world);
        if id >= world.len() {
            return Err(NoDevice {
                id,
                devices: world.len(),
            });
        }
        Ok(f(world.device(id)))
    }

    /// Runs `f` on the whole world with its lock held.
    pub fn with_world<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        f(&mut lock(&self.inner.world))
    }

    /// Runs the world until idle (stepped fabrics; harmless on threaded ones).
    ///
    /// Errors: [`Livelock`] when the world keeps busy without reaching idle.
    pub fn run_until_idle(&self) -> Result<(), Livelock> {
        lock(&self.inner.world).run_until_idle().map(|_| ())
    }

    /// World errors (livelocks) seen so far.
    pub fn world_errors(&self) -> u64 {
        self.inner.errors.load(Ordering::Relaxed)
    }

    fn wake_engine(&self) {
        if !self.threaded {
            return;
        }
        let engine = lock(&self.inner.engine);
        if let Some(t) = engine.as_ref().and_then(|e| e.thread.as_ref()) {
            t.thread().unpark();
        }
    }

    /// Stepped: runs to idle, then advances to the next event and runs to idle again.
    fn step(&self) -> Progress {
        if self.threaded {
            self.pump(Pumper::App);
            return Progress::Running;
        }
        let mut world = lock(&self.inner.world);
        let r = world.run_until_idle().and_then(|rounds| {
            let Some(next) = world.next_event() else {
                return Ok(rounds > 0);
            };
            let dt = next.saturating_sub(world.now());
            world.advance(dt).map(|()| true)
        });
        match r {
            Ok(true) => Progress::Running,
            Ok(false) => Progress::Idle,
            Err(e) => {
                self.inner.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "the simulated world livelocked");
                Progress::Idle
            }
        }
    }
}

/// Advances `w` to the wall-clock time since `start` (a threaded fabric's virtual time),
/// running everything due on the way.
fn catch_up(w: &mut World, start: Instant) -> Result<(), Livelock> {
    let real = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let dt = real.saturating_sub(w.now());
    w.advance(dt)
}

/// What an inline doorbell runs: the world until idle at its current virtual time, and the
/// catch-up with the wall clock only if an event (timer, arrival) has become due meanwhile
/// (the engine thread moves idle time forward; doing it here too would cost every post).
/// Returns true if the engine thread must be woken: a packet is in flight, or time was
/// caught up and an event is still pending. A timer that is not due yet needs no wake (the
/// engine checks the world every `ENGINE_IDLE` anyway).
fn run_inline(w: &mut World, start: Instant) -> Result<bool, Livelock> {
    w.run_until_idle()?;
    let Some(t) = w.next_event() else {
        return Ok(w.in_flight() > 0);
    };
    let real = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    if t <= real {
        catch_up(w, start)?;
        return Ok(w.in_flight() > 0 || w.next_event().is_some());
    }
    // Only a future event is pending (a retransmit timer of WRITEs in flight, say). The
    // engine looks at the world at least every ENGINE_IDLE whatever happens, and a woken
    // engine would find nothing due and park for that long again: waking it changes nothing
    // but costs this thread a futex wake and, on a loaded machine, the engine thread's
    // competition for the core. Packets in flight (a link with latency) do need it now.
    Ok(w.in_flight() > 0)
}

/// The engine thread. With inline doorbells it never waits for the world: the thread that
/// holds it is running it already, and a blocked engine would make that thread's unlock a
/// futex wake (a system call on the posting path); it tries again after its idle sleep.
fn engine_loop(world: &Mutex<World>, stop: &AtomicBool, start: Instant, inline: bool) {
    while !stop.load(Ordering::Acquire) {
        let guard = if inline {
            try_lock(world)
        } else {
            Some(lock(world))
        };
        let busy = guard.is_some_and(|mut w| {
            if let Err(e) = catch_up(&mut w, start) {
                tracing::error!(error = %e, "the simulated world livelocked");
            }
            w.in_flight() > 0
        });
        if !busy {
            std::thread::park_timeout(ENGINE_IDLE);
        }
    }
}

/// One simulated device as a [`Backend`].
pub struct SimBackend {
    fabric: SimFabric,
    id: usize,
    bar0_len: u64,
    irq_fds: Arc<Vec<EventFd>>,
    mmio_errors: AtomicU64,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend")
            .field("id", &self.id)
            .field("threaded", &self.fabric.threaded)
            .finish_non_exhaustive()
    }
}

impl SimBackend {
    /// The device's id in its fabric.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The fabric the device is on.
    pub fn fabric(&self) -> &SimFabric {
        &self.fabric
    }

    /// Runs `f` on this device with the world locked.
    pub fn with_device<R>(&self, f: impl FnOnce(&mut Device) -> R) -> Result<R, NoDevice> {
        self.fabric.with_device(self.id, f)
    }

    fn mmio_write(&self, off: u64, bytes: &[u8]) {
        let inner = &self.fabric.inner;
        // UDP: the device acts on a doorbell in this thread (see `fabric/udp.rs`).
        let udp = self.fabric.ring(|world| {
            let dev = world.device(self.id);
            let r = dev.mmio_write(off, bytes);
            let rang = dev.pending_doorbells() > 0;
            (r, rang)
        });
        let (r, handed_off) = if let Some(r) = udp {
            (r, false)
        } else {
            let mut world = lock(&inner.world);
            let r = world.device(self.id).mmio_write(off, bytes);
            if inner.inline_doorbells && world.device(self.id).pending_doorbells() > 0 {
                // Inline doorbells: the device acts on it now, in this thread, and so does
                // everything it sets off on a zero-latency link.
                match run_inline(&mut world, inner.start) {
                    Ok(pending) => (r, pending),
                    Err(e) => {
                        inner.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(error = %e, "the simulated world livelocked");
                        (r, true)
                    }
                }
            } else {
                (r, true)
            }
        };
        if let Err(e) = r {
            self.mmio_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(device = self.id, offset = off, error = %e, "MMIO write refused");
        }
        if handed_off {
            self.fabric.wake_engine();
        }
    }
}

impl Mmio for SimBackend {
    fn bar0_len(&self) -> u64 {
        self.bar0_len
    }

    fn read32(&self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        let r = {
            let mut world = lock(&self.fabric.inner.world);
            world.device(self.id).mmio_read(off, &mut b)
        };
        match r {
            Ok(()) => u32::from_ne_bytes(b),
            Err(e) => {
                self.mmio_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(device = self.id, offset = off, error = %e, "MMIO read refused");
                u32::MAX
            }
        }
    }

    unsafe fn write32(&self, off: u64, v: u32) {
        self.mmio_write(off, &v.to_ne_bytes());
    }

    unsafe fn write64(&self, off: u64, v: u64) {
        self.mmio_write(off, &v.to_ne_bytes());
    }

    unsafe fn write_bf(&self, off: u64, chunk: &[u64; 8]) {
        let mut bytes = [0u8; 64];
        for (dst, v) in bytes.chunks_exact_mut(8).zip(chunk) {
            dst.copy_from_slice(&v.to_ne_bytes());
        }
        // One 64-byte burst: what eight ordered 8-byte stores to write-combining memory reach
        // the device as (the sim's BlueFlame registers take 64-byte bursts).
        self.mmio_write(off, &bytes);
    }

    fn mmio_errors(&self) -> u64 {
        self.mmio_errors.load(Ordering::Relaxed)
    }
}

impl DmaMap for SimBackend {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        SIM_IOVA_RANGES.to_vec()
    }

    unsafe fn map_dma(&self, iova: u64, region: Arc<dyn HostMemory>) -> Result<(), BackendError> {
        let len = region.len();
        let mut world = lock(&self.fabric.inner.world);
        world
            .device(self.id)
            .iommu()
            .map(iova, region, 0, len, Perm::RW)
            .map_err(|e| BackendError::DmaMap {
                op: "map",
                iova,
                len,
                reason: e.to_string(),
            })
    }

    /// With `slice.peer`: a mapping whose accesses are copies through it. Without one, a
    /// CPU-mappable exporter's pages `mmap`ed ([`MappedDmaBuf`]: copies bracketed with
    /// `DMA_BUF_IOCTL_SYNC`). Anything else is refused, naming the exporter.
    unsafe fn map_dmabuf(&self, iova: u64, slice: &DmaBufSlice) -> Result<(), BackendError> {
        let exporter = slice.file.exporter();
        let refuse = |reason: String| BackendError::DmaBuf {
            iova,
            len: slice.len,
            exporter: exporter.name().to_owned(),
            reason,
        };
        let offset = usize::try_from(slice.offset)
            .map_err(|_| refuse(format!("offset {:#x} does not fit", slice.offset)))?;
        let (peer, at): (Arc<dyn PeerMemory>, usize) = match &slice.peer {
            Some(p) => (p.clone(), offset),
            None if exporter.cpu_mappable() => {
                let m = MappedDmaBuf::new(
                    slice.file.fd().clone(),
                    slice.offset,
                    slice.len,
                    exporter.name(),
                )
                .map_err(|e| refuse(e.to_string()))?;
                (Arc::new(m), 0)
            }
            None => return Err(refuse(no_cpu_path(exporter))),
        };
        let mut world = lock(&self.fabric.inner.world);
        world
            .device(self.id)
            .iommu()
            .map_peer(iova, peer, at, slice.len, Perm::RW)
            .map_err(|e| refuse(e.to_string()))
    }

    unsafe fn unmap_dma(&self, iova: u64, len: usize) -> Result<(), BackendError> {
        let mut world = lock(&self.fabric.inner.world);
        world
            .device(self.id)
            .iommu()
            .unmap(iova, len)
            .map(|_| ())
            .map_err(|e| BackendError::DmaMap {
                op: "unmap",
                iova,
                len,
                reason: e.to_string(),
            })
    }
}

/// Why the sim cannot reach a dma-buf from `exporter` without a [`PeerMemory`], and the fix.
fn no_cpu_path(exporter: &Exporter) -> String {
    match exporter {
        Exporter::Nvidia => {
            "CUDA memory is not CPU-mappable: pass its PeerMemory (bypass-gpu does)".to_owned()
        }
        other => format!(
            "{other} buffers are not CPU-mappable and no PeerMemory was given: the simulated device reaches device memory only by copies, so pass a PeerMemory for it"
        ),
    }
}

impl Interrupts for SimBackend {
    fn irq_vectors(&self) -> u16 {
        u16::try_from(self.irq_fds.len()).unwrap_or(u16::MAX)
    }

    fn irq_fd(&self, vector: u16) -> Option<BorrowedFd<'_>> {
        self.irq_fds.get(usize::from(vector)).map(AsFd::as_fd)
    }

    fn wait_irq(&self, vector: u16, timeout: Duration) -> Result<bool, BackendError> {
        let fd = self
            .irq_fds
            .get(usize::from(vector))
            .ok_or(BackendError::NoVector {
                vector,
                available: self.irq_vectors(),
            })?;
        let consume = || match fd.read() {
            Ok(n) => Ok(n > 0),
            Err(nix::errno::Errno::EAGAIN) => Ok(false),
            Err(source) => Err(BackendError::Irq { vector, source }),
        };
        if !self.fabric.threaded {
            // Deterministic: run the world event by event until the vector fires or nothing
            // is left to happen (the wall-clock timeout only bounds a livelocking world).
            let start = Instant::now();
            loop {
                if consume()? {
                    return Ok(true);
                }
                if self.fabric.step() == Progress::Idle {
                    return consume();
                }
                if start.elapsed() >= timeout {
                    return Ok(false);
                }
            }
        }
        if consume()? {
            return Ok(true);
        }
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => Ok(false),
            Ok(_) => consume(),
            Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(source) => Err(BackendError::Irq { vector, source }),
        }
    }
}

impl Backend for SimBackend {
    fn name(&self) -> String {
        format!("sim{}", self.id)
    }

    fn progress(&self) -> Progress {
        self.fabric.step()
    }

    fn is_stepped(&self) -> bool {
        !self.fabric.threaded
    }

    fn syndrome_name(&self, syndrome: u32) -> Option<&'static str> {
        crate::syndromes::name(syndrome)
    }
}

/// A device id the fabric does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no device {id} on this fabric (it has {devices}): use an id a SimFabric::add_device returned"
)]
pub struct NoDevice {
    /// The id asked for.
    pub id: usize,
    /// Devices on the fabric.
    pub devices: usize,
}
