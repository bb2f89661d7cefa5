//! Interrupts as the driver waits for them: one eventfd per MSI-X vector.
//!
//! Owns: the [`Interrupts`] trait. Must not: know what an interrupt means (the driver's event
//! queues do). An eventfd per vector is what `VFIO_DEVICE_SET_IRQS` takes
//! (`include/uapi/linux/vfio.h`), readable for `poll`/`epoll`; a sim backend signals its own.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::BackendError;

/// The interrupt vectors of one device.
pub trait Interrupts: Send + Sync {
    /// Number of MSI-X vectors (each has an eventfd). A VFIO device without MSI-X offers its
    /// MSI vectors here instead.
    fn irq_vectors(&self) -> u16;

    /// The eventfd that MSI-X `vector` signals, for `poll`/`epoll`; `None` if there is no
    /// such vector. Reading it (8 bytes) clears it; [`Interrupts::wait_irq`] does that.
    fn irq_fd(&self, vector: u16) -> Option<BorrowedFd<'_>>;

    /// Waits up to `timeout` for an interrupt on `vector` and consumes it (clears the
    /// eventfd). Returns `Ok(true)` if one arrived, `Ok(false)` on timeout, or at once when
    /// the device is a stepped sim that can no longer raise one (`Progress::Idle`).
    ///
    /// Errors: [`BackendError::NoVector`], [`BackendError::Irq`].
    fn wait_irq(&self, vector: u16, timeout: Duration) -> Result<bool, BackendError>;
}
