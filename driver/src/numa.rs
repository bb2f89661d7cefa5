//! NUMA memory policy for DMA memory: `mbind(2)` and `get_mempolicy(2)` over a mapping.
//!
//! Owns: [`prefer_node`] (give a range of not-yet-touched anonymous memory the
//! `MPOL_PREFERRED` policy for one node, so its pages are allocated there when first
//! touched), [`policy_of`] and [`node_of`] (read back the policy of a mapping and the node a
//! page is on, for tests and diagnostics) and [`NumaError`]. Must not: allocate or pin memory
//! (`dma.rs` does, and calls [`prefer_node`] between `mmap` and `mlock`), or decide which node
//! a device wants (the backend says: `Backend::numa_node`).
//!
//! Neither `nix` nor the `libc` crate wraps these calls (glibc has no wrappers either:
//! libnuma does), so they are raw `syscall(SYS_mbind, …)`. Sources: the man pages mbind(2)
//! and get_mempolicy(2); the kernel's `mm/mempolicy.c` (`kernel_mbind`, `get_nodes`,
//! `kernel_get_mempolicy`, `copy_nodes_to_user`: `maxnode` counts one bit more than the
//! mask holds); numactl's `libnuma.c` (`numa_tonode_memory`, which passes a mask of
//! `size + 1` bits) for how callers size the mask.

use std::ffi::{c_int, c_long, c_ulong, c_void};
use std::ptr::NonNull;

use nix::errno::Errno;
use nix::libc;

/// Linux's largest `MAX_NUMNODES` (`CONFIG_NODES_SHIFT` 10); a node number at or above it is
/// not one any kernel has.
pub const MAX_NODES: u32 = 1024;
/// Bits per mask word (`unsigned long`).
const WORD_BITS: u32 = c_ulong::BITS;
/// `get_mempolicy` flag: return the policy of the mapping at `addr` (linux/mempolicy.h).
const MPOL_F_ADDR: c_ulong = 1 << 1;
/// `get_mempolicy` flag: return a node number instead of a policy (with `MPOL_F_ADDR`: the
/// node the page at `addr` is on, faulting it in).
const MPOL_F_NODE: c_ulong = 1 << 0;

/// The memory policy modes bypass reads back (`MPOL_*` of linux/mempolicy.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyMode {
    /// `MPOL_DEFAULT`: the task's policy (normally: allocate on the touching CPU's node).
    Default,
    /// `MPOL_PREFERRED`: the given node first, any other when it has no free memory.
    Preferred,
    /// `MPOL_BIND`: only the given nodes.
    Bind,
    /// Another mode (interleave, local, preferred-many, weighted interleave), by number.
    Other(i32),
}

impl PolicyMode {
    fn from_raw(mode: c_int) -> Self {
        match mode {
            libc::MPOL_DEFAULT => Self::Default,
            libc::MPOL_PREFERRED => Self::Preferred,
            libc::MPOL_BIND => Self::Bind,
            m => Self::Other(m),
        }
    }
}

/// Why a NUMA policy call failed.
#[derive(Debug, thiserror::Error)]
pub enum NumaError {
    /// The node number is past any kernel's node count.
    #[error(
        "preferring NUMA node {node} for DMA memory: no kernel has a node {node} (at most {MAX_NODES}); the backend reported a bad node"
    )]
    BadNode {
        /// The node asked for.
        node: u32,
    },
    /// `mbind` failed.
    #[error(
        "mbind(MPOL_PREFERRED, node {node}) over {len} bytes failed: {errno}; {}",
        hint(*errno)
    )]
    Mbind {
        /// The node asked for.
        node: u32,
        /// The range's length.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// `get_mempolicy` failed.
    #[error("get_mempolicy({what}) failed: {errno}; {}", hint(*errno))]
    GetMempolicy {
        /// Which question was asked.
        what: &'static str,
        /// What the kernel said.
        errno: Errno,
    },
}

/// The fix for an errno of the NUMA calls.
fn hint(errno: Errno) -> &'static str {
    match errno {
        Errno::ENOSYS => {
            "the kernel was built without CONFIG_NUMA: memory placement is not available"
        }
        Errno::EPERM => {
            "a seccomp filter refuses the NUMA calls (Docker's default profile allows them only with CAP_SYS_NICE: run with --cap-add SYS_NICE)"
        }
        Errno::EINVAL => {
            "the node is not online or not in this process's cpuset (see /sys/devices/system/node/online and Mems_allowed_list in /proc/self/status)"
        }
        _ => "see mbind(2)",
    }
}

/// A node mask holding `node`, and the `maxnode` argument that describes it (one more bit
/// than the mask holds: the kernel's `get_nodes` counts from one past the last bit).
fn mask_with(node: u32) -> (Vec<c_ulong>, c_ulong) {
    let words = (MAX_NODES / WORD_BITS) as usize;
    let mut mask = vec![0 as c_ulong; words];
    if let Some(w) = mask.get_mut((node / WORD_BITS) as usize) {
        *w |= 1 << (node % WORD_BITS);
    }
    let maxnode = (words as c_ulong) * c_ulong::from(WORD_BITS) + 1;
    (mask, maxnode)
}

/// Gives `ptr..ptr+len` the `MPOL_PREFERRED` policy for `node`: pages allocated there from
/// now on come from `node` while it has free memory, from another node when it has none.
/// Pages already present do not move (no `MPOL_MF_MOVE`), so call it before the first touch.
///
/// `ptr` must start a page and `ptr..ptr+len` must lie in one mapping this process owns;
/// anything else is refused by the kernel with `EINVAL`/`EFAULT`, never undefined behaviour
/// (the call only changes the policy of the process's own address range).
///
/// Errors: [`NumaError::BadNode`], [`NumaError::Mbind`] (with the kernel's errno and its fix).
pub fn prefer_node(ptr: NonNull<u8>, len: usize, node: u32) -> Result<(), NumaError> {
    if node >= MAX_NODES {
        return Err(NumaError::BadNode { node });
    }
    let (mask, maxnode) = mask_with(node);
    // SAFETY: mbind only reads `mask` (`maxnode - 1` bits, which `mask_with` sized it to
    // hold) and changes the memory policy of the address range given; it writes no user
    // memory. A range that is not a mapping of this process is an error return, not a fault.
    let r: c_long = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            ptr.as_ptr().cast::<c_void>(),
            len as c_ulong,
            libc::MPOL_PREFERRED as c_ulong,
            mask.as_ptr(),
            maxnode,
            0 as c_ulong,
        )
    };
    if r != 0 {
        return Err(NumaError::Mbind {
            node,
            len,
            errno: Errno::last(),
        });
    }
    Ok(())
}

/// The policy of the mapping holding `ptr` (`get_mempolicy(MPOL_F_ADDR)`): its mode and the
/// nodes of its mask, in order.
///
/// Errors: [`NumaError::GetMempolicy`].
pub fn policy_of(ptr: NonNull<u8>) -> Result<(PolicyMode, Vec<u32>), NumaError> {
    let (mut mask, maxnode) = mask_with(MAX_NODES);
    let mut mode: c_int = 0;
    // SAFETY: the kernel writes one int to `mode` and at most `maxnode - 1` bits to `mask`,
    // which holds exactly that many; `ptr` is only looked up, never dereferenced.
    let r: c_long = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut c_int,
            mask.as_mut_ptr(),
            maxnode,
            ptr.as_ptr().cast::<c_void>(),
            MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(NumaError::GetMempolicy {
            what: "MPOL_F_ADDR",
            errno: Errno::last(),
        });
    }
    let nodes = (0..MAX_NODES)
        .filter(|&n| {
            mask.get((n / WORD_BITS) as usize)
                .is_some_and(|w| w & (1 << (n % WORD_BITS)) != 0)
        })
        .collect();
    Ok((PolicyMode::from_raw(mode), nodes))
}

/// The node the page at `ptr` is on (`get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`); the kernel
/// faults the page in if it is not present yet, under the mapping's policy.
///
/// Errors: [`NumaError::GetMempolicy`].
pub fn node_of(ptr: NonNull<u8>) -> Result<u32, NumaError> {
    let mut node: c_int = -1;
    // SAFETY: the kernel writes one int to `node`; no mask is passed; `ptr` is only looked up.
    let r: c_long = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut c_int,
            std::ptr::null_mut::<c_ulong>(),
            0 as c_ulong,
            ptr.as_ptr().cast::<c_void>(),
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(NumaError::GetMempolicy {
            what: "MPOL_F_NODE | MPOL_F_ADDR",
            errno: Errno::last(),
        });
    }
    u32::try_from(node).map_err(|_| NumaError::GetMempolicy {
        what: "MPOL_F_NODE | MPOL_F_ADDR",
        errno: Errno::EINVAL,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_holds_the_node_and_maxnode_counts_one_more_bit() {
        let (mask, maxnode) = mask_with(0);
        assert_eq!(mask.len() as u32 * WORD_BITS, MAX_NODES);
        assert_eq!(mask[0], 1);
        assert!(mask[1..].iter().all(|&w| w == 0));
        assert_eq!(maxnode, c_ulong::from(MAX_NODES) + 1);
        let (mask, _) = mask_with(WORD_BITS + 3);
        assert_eq!(mask[1], 1 << 3);
        assert_eq!(mask[0], 0);
        // A node past the mask sets nothing (callers refuse it first).
        let (mask, _) = mask_with(MAX_NODES);
        assert!(mask.iter().all(|&w| w == 0));
    }

    #[test]
    fn a_node_past_any_kernel_is_refused_before_the_call() {
        let p = NonNull::<u8>::dangling();
        let e = prefer_node(p, 4096, MAX_NODES).unwrap_err();
        assert!(matches!(e, NumaError::BadNode { node: MAX_NODES }), "{e}");
        assert!(e.to_string().contains("no kernel has a node 1024"), "{e}");
    }

    #[test]
    fn errnos_name_their_fix() {
        let e = NumaError::Mbind {
            node: 3,
            len: 8192,
            errno: Errno::EPERM,
        };
        let msg = e.to_string();
        assert!(msg.contains("node 3") && msg.contains("8192"), "{msg}");
        assert!(msg.contains("CAP_SYS_NICE"), "{msg}");
        assert!(hint(Errno::ENOSYS).contains("CONFIG_NUMA"));
        assert!(hint(Errno::EINVAL).contains("Mems_allowed_list"));
    }
}
