//! The device-list verbs, the sysfs answers libibverbs gives for its devices, fork support
//! and the enum-to-string verbs.
//!
//! Owns: `ibv_get_device_list` / `ibv_free_device_list` / `ibv_get_device_name` /
//! `_guid` / `_index`, `ibv_get_sysfs_path`, `ibv_read_sysfs_file` (answered for bypass's
//! devices without a sysfs: `ibv_devinfo` reads `board_id` and `fw_ver` through it),
//! `ibv_fork_init` / `ibv_is_fork_initialized`, and the `*_str` verbs.
//! Must not: open devices except to read a GUID (which brings the HCA up and down again).
//!
//! Sources: rdma-core `libibverbs/device.c`, `libibverbs/sysfs.c`, `libibverbs/enum_strs.c`,
//! `libibverbs/memory.c` (`ibv_fork_init`: with `MADV_DONTFORK` on every registration,
//! which bypass always sets, fork is safe; `ibv_is_fork_initialized` answers
//! `IBV_FORK_ENABLED`).

use std::ffi::{CStr, c_char, c_int};

use crate::abi::{self, ibv_device};
use crate::devices::{self, devices};
use crate::ffi::{guard, set_errno};
use crate::query;

/// `ibv_get_device_list`: a NULL-terminated array of the devices `BYPASS_DEVICE` names
/// (`malloc`ed: freed by `ibv_free_device_list`), their count in `num_devices`.
///
/// # Safety
/// `num_devices` is NULL or writable.
#[unsafe(export_name = "__bypass_ibv_get_device_list")]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(std::ptr::null_mut(), || {
        let list = devices();
        let bytes = (list.len() + 1) * std::mem::size_of::<*mut ibv_device>();
        // SAFETY: `malloc` of a non-zero size; checked for NULL below.
        let arr = unsafe { libc::malloc(bytes) }.cast::<*mut ibv_device>();
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return std::ptr::null_mut();
        }
        for (i, d) in list.iter().enumerate() {
            // SAFETY: `arr` holds `list.len() + 1` pointers.
            unsafe { arr.add(i).write(std::ptr::from_ref(&d.ibv).cast_mut()) };
        }
        // SAFETY: as above: the last slot.
        unsafe { arr.add(list.len()).write(std::ptr::null_mut()) };
        if !num_devices.is_null() {
            // SAFETY: writable (the caller's contract).
            unsafe { *num_devices = c_int::try_from(list.len()).unwrap_or(c_int::MAX) };
        }
        arr
    })
}

/// `ibv_free_device_list`: frees the array (the devices stay).
///
/// # Safety
/// `list` from `ibv_get_device_list`, not freed before.
#[unsafe(export_name = "__bypass_ibv_free_device_list")]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the array was `malloc`ed by `ibv_get_device_list` (the caller's contract).
    guard((), || unsafe { libc::free(list.cast()) });
}

/// `ibv_get_device_name`: `bypass0`, … (NULL for a pointer that is not a device).
///
/// # Safety
/// `device` from `ibv_get_device_list`.
#[unsafe(export_name = "__bypass_ibv_get_device_name")]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    guard(std::ptr::null(), || match devices::from_ptr(device) {
        Some(d) => d.name().as_ptr(),
        None => {
            set_errno(libc::ENODEV);
            std::ptr::null()
        }
    })
}

/// `ibv_get_device_index`: the device's position in the list, or -1.
///
/// # Safety
/// `device` from `ibv_get_device_list`.
#[unsafe(export_name = "__bypass_ibv_get_device_index")]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    guard(-1, || {
        devices::from_ptr(device).map_or(-1, |d| c_int::try_from(d.index).unwrap_or(-1))
    })
}

/// `ibv_get_device_guid`: the node GUID (big-endian), 0 if the device cannot be opened.
///
/// # Safety
/// `device` from `ibv_get_device_list`.
#[unsafe(export_name = "__bypass_ibv_get_device_guid")]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    guard(0, || {
        let Some(d) = devices::from_ptr(device) else {
            return 0;
        };
        match d.open() {
            Ok(o) => query::node_guid(&o.hca),
            Err(e) => {
                eprintln!("bypass libibverbs: opening {}: {e}", d.spec);
                0
            }
        }
    })
}

/// `ibv_get_sysfs_path`: bypass's devices have no sysfs; the path libibverbs would use.
#[unsafe(export_name = "__bypass_ibv_get_sysfs_path")]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// The answer to a sysfs read of one of bypass's devices (`dir` under
/// `/sys/class/infiniband/NAME`), if bypass knows it.
fn sysfs_answer(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/sys/class/infiniband/")?;
    let (name, file) = rest.split_once('/')?;
    let dev = devices().iter().find(|d| d.name().to_str() == Ok(name))?;
    match file {
        "board_id" => Some(format!("BYPASS{:04}", dev.index)),
        "node_type" => Some("1: CA".to_owned()),
        "fw_ver" | "hw_rev" | "hca_type" => {
            let o = dev.open().ok()?;
            let info = o.hca.device_info();
            Some(match file {
                "fw_ver" => info.fw_version,
                "hw_rev" => "0x0".to_owned(),
                _ => format!("MT{}", info.hw_id),
            })
        }
        _ => None,
    }
}

/// `ibv_read_sysfs_file`: for bypass's devices the answers it knows (`board_id`, `fw_ver`,
/// `hw_rev`, `hca_type`, `node_type`), otherwise the file's contents; the length read, or
/// -1.
///
/// # Safety
/// `dir` and `file` NUL-terminated; `buf` writable for `size` bytes.
#[unsafe(export_name = "__bypass_ibv_read_sysfs_file")]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return -1;
        }
        // SAFETY: NUL-terminated (the caller's contract).
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let text = match sysfs_answer(&path) {
            Some(t) => t,
            None => match std::fs::read_to_string(&path) {
                Ok(t) => t.trim_end_matches('\n').to_owned(),
                Err(_) => return -1,
            },
        };
        // SAFETY: `buf` is writable for `size` bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, size) };
        devices::set_cstr(out, &text);
        c_int::try_from(text.len().min(size - 1)).unwrap_or(-1)
    })
}

/// `ibv_fork_init`: 0 (every registration is `MADV_DONTFORK` already).
#[unsafe(export_name = "__bypass_ibv_fork_init")]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_ENABLED`.
#[unsafe(export_name = "__bypass_ibv_is_fork_initialized")]
pub extern "C" fn ibv_is_fork_initialized() -> u32 {
    abi::IBV_FORK_ENABLED
}

/// `ibv_wc_status_str`.
#[unsafe(export_name = "__bypass_ibv_wc_status_str")]
pub extern "C" fn ibv_wc_status_str(status: u32) -> *const c_char {
    abi::wc_status_str(status).as_ptr()
}

/// `ibv_event_type_str`.
#[unsafe(export_name = "__bypass_ibv_event_type_str")]
pub extern "C" fn ibv_event_type_str(event: u32) -> *const c_char {
    abi::event_type_str(event).as_ptr()
}

/// `ibv_node_type_str`.
#[unsafe(export_name = "__bypass_ibv_node_type_str")]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    abi::node_type_str(node_type).as_ptr()
}

/// `ibv_port_state_str`.
#[unsafe(export_name = "__bypass_ibv_port_state_str")]
pub extern "C" fn ibv_port_state_str(state: u32) -> *const c_char {
    abi::port_state_str(state).as_ptr()
}
