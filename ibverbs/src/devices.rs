//! The device list: what `BYPASS_DEVICE` names, as `struct ibv_device`s, and the HCA behind
//! each, brought up on first open and shared by every context open on it.
//!
//! Owns: parsing `BYPASS_DEVICE` (a comma-separated list of `sim`, `udp:ADDR[:PORT]`,
//! `vfio:BDF`; `sim` when unset), the process-wide table of [`Device`]s named `bypass0`,
//! `bypass1`, … (made once, never freed: libibverbs' devices live as long as the process),
//! and [`Device::open`], which brings the HCA up or returns the one already up (a `sim`
//! device's stays up for the process, as a NIC does). A UDP
//! device records its packets to `BYPASS_PCAP` when that is set (`.N` appended for device N).
//! Must not: hold a context's objects (they live in `context.rs` and its children).
//!
//! Sources: rdma-core `libibverbs/device.c` (`ibv_get_device_list` returns a NULL-terminated
//! array the caller frees with `ibv_free_device_list`; devices outlive the list),
//! `libibverbs/verbs.h` (`struct ibv_device`). Every `sim` device of the list sits on one
//! stepped fabric, so two of them (or two contexts on one) can talk to each other, as
//! rdma-core's python tests do on one NIC.

use std::ffi::{CStr, c_char};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use bypass_driver::async_events::{AsyncEventRecord, AsyncEvents};
use bypass_driver::backend::Backend;
use bypass_driver::backend::vfio::VfioBackend;
use bypass_driver::{DriverError, Hca};
use bypass_sim::Profile;
use bypass_sim::fabric::SimFabric;
use bypass_sim::link::udp::UdpLink;
use bypass_testbed::DeviceSpec;

use crate::abi;
use crate::registry::Registry;

/// One device of the list. `ibv` comes first, so a `*mut ibv_device` the program holds is a
/// `*mut Device`.
#[repr(C)]
pub(crate) struct Device {
    pub(crate) ibv: abi::ibv_device,
    /// Its position in the list (`ibv_get_device_index`).
    pub(crate) index: u32,
    /// What `BYPASS_DEVICE` named.
    pub(crate) spec: DeviceSpec,
    /// The HCA while some context has it open.
    open: Mutex<Weak<Opened>>,
    /// A `sim` device's HCA, kept up from its first open to the end of the process: its
    /// device stays in the shared world (the world never removes one), so bringing up a new
    /// one on every reopen would leave a dead twin with the same GID behind.
    kept: OnceLock<Arc<Opened>>,
}

/// A brought-up HCA and what every context on it shares.
pub(crate) struct Opened {
    /// The HCA. Declared first: the event channel and objects go before it.
    pub(crate) hca: Arc<Hca>,
    /// Its asynchronous events (`ibv_context.async_fd`), one channel per HCA.
    pub(crate) events: AsyncEvents,
    /// The objects an event may name (QPs, CQs, SRQs by number).
    pub(crate) registry: Registry,
    /// Events handed to the program and not yet acknowledged (`ibv_ack_async_event` gives
    /// one back to the driver's count).
    pub(crate) taken: Mutex<Vec<AsyncEventRecord>>,
}

/// Why the list could not be made (printed once; the list is then empty).
#[derive(Debug, thiserror::Error)]
#[error("BYPASS_DEVICE={value:?}: {why}")]
pub(crate) struct ListError {
    value: String,
    why: String,
}

/// The process's devices, made on the first `ibv_get_device_list`.
pub(crate) fn devices() -> &'static [Device] {
    static LIST: OnceLock<Vec<Device>> = OnceLock::new();
    LIST.get_or_init(|| match make_list() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("bypass libibverbs: {e}; no devices");
            Vec::new()
        }
    })
}

fn make_list() -> Result<Vec<Device>, ListError> {
    let value = std::env::var("BYPASS_DEVICE").unwrap_or_else(|_| "sim".to_owned());
    let mut out = Vec::new();
    for (i, part) in value.split(',').map(str::trim).enumerate() {
        let spec: DeviceSpec = part.parse().map_err(|why| ListError {
            value: value.clone(),
            why,
        })?;
        let index = u32::try_from(i).map_err(|_| ListError {
            value: value.clone(),
            why: "too many devices".to_owned(),
        })?;
        out.push(Device::new(index, spec));
    }
    Ok(out)
}

/// Copies `s` into a C string field, truncated to fit with its NUL.
pub(crate) fn set_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

impl Device {
    fn new(index: u32, spec: DeviceSpec) -> Self {
        // SAFETY: `ibv_device` is plain C data (integers, arrays, nullable fn pointers):
        // all-zero is a valid value of it.
        let mut ibv: abi::ibv_device = unsafe { std::mem::zeroed() };
        ibv.node_type = abi::IBV_NODE_CA;
        ibv.transport_type = abi::IBV_TRANSPORT_IB;
        let name = format!("bypass{index}");
        set_cstr(&mut ibv.name, &name);
        set_cstr(&mut ibv.dev_name, &format!("uverbs{index}"));
        set_cstr(
            &mut ibv.dev_path,
            &format!("/sys/class/infiniband_verbs/uverbs{index}"),
        );
        set_cstr(
            &mut ibv.ibdev_path,
            &format!("/sys/class/infiniband/{name}"),
        );
        Self {
            ibv,
            index,
            spec,
            open: Mutex::new(Weak::new()),
            kept: OnceLock::new(),
        }
    }

    /// The device's name (`bypass0`).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `set_cstr` always leaves a NUL inside the array, which is never written
        // again.
        unsafe { CStr::from_ptr(self.ibv.name.as_ptr()) }
    }

    /// The HCA, brought up now unless a context has it open already.
    pub(crate) fn open(&self) -> Result<Arc<Opened>, DriverError> {
        let mut slot = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(o) = slot.upgrade() {
            return Ok(o);
        }
        let hca = Arc::new(Hca::open(self.backend()?)?);
        let events = AsyncEvents::new(&hca)?;
        let o = Arc::new(Opened {
            hca,
            events,
            registry: Registry::default(),
            taken: Mutex::new(Vec::new()),
        });
        *slot = Arc::downgrade(&o);
        if self.spec == DeviceSpec::Sim {
            let _ = self.kept.set(o.clone());
        }
        Ok(o)
    }

    /// The HCA if a context has it open.
    pub(crate) fn opened(&self) -> Option<Arc<Opened>> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .upgrade()
    }

    fn backend(&self) -> Result<Arc<dyn Backend>, DriverError> {
        let unsupported = |what| DriverError::Unsupported {
            what,
            fix: "check BYPASS_DEVICE (sim, udp:ADDR[:PORT], vfio:BDF)",
        };
        match &self.spec {
            DeviceSpec::Vfio(addr) => VfioBackend::open(addr)
                .map(|b| b as Arc<dyn Backend>)
                .map_err(|e| {
                    eprintln!("bypass libibverbs: {}: {e}", self.spec);
                    unsupported("opening the VFIO device")
                }),
            DeviceSpec::Sim => {
                let fabric = sim_fabric();
                let profile = Profile::with_id(u8::try_from(self.index + 1).unwrap_or(u8::MAX));
                Ok(fabric.add_device(profile)? as Arc<dyn Backend>)
            }
            DeviceSpec::Udp(addr) => {
                let mut link = UdpLink::bind(*addr).map_err(|e| {
                    eprintln!("bypass libibverbs: {}: {e}", self.spec);
                    unsupported("binding the UDP link")
                })?;
                if let Some(path) = pcap_path(self.index) {
                    link.record_pcap(&path).map_err(|e| {
                        eprintln!("bypass libibverbs: BYPASS_PCAP {}: {e}", path.display());
                        unsupported("recording the pcap BYPASS_PCAP names")
                    })?;
                }
                let profile = link.profile();
                let fabric = SimFabric::udp(u64::from(self.index) + 1, link).map_err(|e| {
                    eprintln!("bypass libibverbs: {}: {e}", self.spec);
                    unsupported("starting the UDP link")
                })?;
                Ok(fabric.add_device(profile)? as Arc<dyn Backend>)
            }
        }
    }
}

/// Where device `index`'s packets are recorded: `BYPASS_PCAP` for the first device, with
/// `.N` appended for device N > 0 (UDP devices only: an in-process fabric has no wire).
fn pcap_path(index: u32) -> Option<std::path::PathBuf> {
    let base = std::env::var_os("BYPASS_PCAP")?;
    let mut p = std::path::PathBuf::from(base);
    if index > 0 {
        p.as_mut_os_string().push(format!(".{index}"));
    }
    Some(p)
}

/// The stepped fabric every `sim` device of the list is on (one seed, so a run replays). Kept
/// for the process: its devices come and go with their contexts.
fn sim_fabric() -> &'static SimFabric {
    static FABRIC: OnceLock<SimFabric> = OnceLock::new();
    FABRIC.get_or_init(|| {
        let seed = std::env::var("BYPASS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        SimFabric::stepped(seed)
    })
}

/// The device a program's `*mut ibv_device` points at, if it is one of ours.
pub(crate) fn from_ptr(dev: *mut abi::ibv_device) -> Option<&'static Device> {
    devices()
        .iter()
        .find(|d| std::ptr::eq(&d.ibv, dev.cast_const()))
}
