//! The driver's DMA memory follows the backend's NUMA node: a `DmaMapper` over a backend that
//! reports node 0 gives every buffer it allocates the `MPOL_PREFERRED` policy for node 0 (read
//! back with `get_mempolicy`), and one over a backend that reports no node leaves the default
//! policy. The backend is a stub with only DMA mapping (no MMIO, no interrupts): DMA memory
//! is all the mapper needs, and the sim cannot report a node (it has no place in the machine).

use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bypass_driver::backend::{
    Backend, BackendError, DmaMap, HostMemory, Interrupts, IovaRange, Mmio, Progress,
};
use bypass_driver::dma::DmaMapper;
use bypass_driver::numa::{PolicyMode, policy_of};

/// A device with DMA mapping only, on `node`.
#[derive(Debug, Default)]
struct OnNode {
    node: Option<u32>,
    mapped: Mutex<Vec<u64>>,
}

impl Mmio for OnNode {
    fn bar0_len(&self) -> u64 {
        0
    }
    fn read32(&self, _off: u64) -> u32 {
        !0
    }
    unsafe fn write32(&self, _off: u64, _v: u32) {}
    unsafe fn write64(&self, _off: u64, _v: u64) {}
    unsafe fn write_bf(&self, _off: u64, _chunk: &[u64; 8]) {}
}

impl DmaMap for OnNode {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        Vec::new()
    }
    unsafe fn map_dma(&self, iova: u64, _mem: Arc<dyn HostMemory>) -> Result<(), BackendError> {
        self.mapped.lock().unwrap().push(iova);
        Ok(())
    }
    unsafe fn unmap_dma(&self, iova: u64, _len: usize) -> Result<(), BackendError> {
        self.mapped.lock().unwrap().retain(|&i| i != iova);
        Ok(())
    }
}

impl Interrupts for OnNode {
    fn irq_vectors(&self) -> u16 {
        0
    }
    fn irq_fd(&self, _vector: u16) -> Option<BorrowedFd<'_>> {
        None
    }
    fn wait_irq(&self, _vector: u16, _timeout: Duration) -> Result<bool, BackendError> {
        Ok(false)
    }
}

impl Backend for OnNode {
    fn name(&self) -> String {
        "on-node".into()
    }
    fn progress(&self) -> Progress {
        Progress::Running
    }
    fn numa_node(&self) -> Option<u32> {
        self.node
    }
}

#[test]
fn buffers_of_a_device_on_node_0_prefer_node_0() {
    let dev = Arc::new(OnNode {
        node: Some(0),
        ..OnNode::default()
    });
    let dma = DmaMapper::new(dev.clone());
    assert_eq!(dma.numa_node(), Some(0));
    let buf = dma.alloc(3 * 4096).unwrap();
    assert_eq!(buf.region().numa_node(), Some(0));
    let (mode, nodes) = policy_of(buf.as_ptr()).unwrap();
    assert_eq!((mode, nodes), (PolicyMode::Preferred, vec![0]));
    assert_eq!(dev.mapped.lock().unwrap().as_slice(), [buf.iova()]);
    drop(buf);
    assert!(dev.mapped.lock().unwrap().is_empty());
}

#[test]
fn buffers_of_a_device_with_no_node_keep_the_default_policy() {
    let dma = DmaMapper::new(Arc::new(OnNode::default()));
    assert_eq!(dma.numa_node(), None);
    let buf = dma.alloc(4096).unwrap();
    assert_eq!(buf.region().numa_node(), None);
    assert_eq!(policy_of(buf.as_ptr()).unwrap().0, PolicyMode::Default);
}
