//! Firmware pages: QUERY_PAGES, MANAGE_PAGES (GIVE, TAKE, ALLOC_FAIL) and the page-request
//! event a test can trigger with [`Device::request_pages`](crate::Device::request_pages).
//!
//! Owns: the pages the firmware holds and how many it wants (`Firmware::page_target`). Must
//! not: ever read or write those pages' contents (the firmware's private memory; the sim keeps
//! its state in Rust, so the pages are only probed at GIVE).
//!
//! Model (kernel `drivers/net/ethernet/mellanox/mlx5/core/pagealloc.c`, rdma-core
//! `mlx5_vfio.c` `mlx5_vfio_satisfy_startup_pages` / `mlx5_vfio_give_pages` /
//! `mlx5_vfio_reclaim_pages`): after ENABLE_HCA the firmware wants `boot_pages` (QUERY_PAGES
//! BOOT) and then `init_pages` more (QUERY_PAGES INIT); after INIT_HCA, QUERY_PAGES REGULAR
//! reports `target - held` (positive: give, negative: take back), which a PAGE_REQUEST event
//! announces; after TEARDOWN_HCA the target is 0, so every page is reported and reclaimable.
//! GIVE checks each address: 4 KiB aligned (BAD_PARAM `PAGE_UNALIGNED`), mapped for device
//! read and write (probed through the IOMMU; BAD_PARAM `PAGE_NOT_MAPPED`), not already held
//! (BAD_PARAM `PAGE_DUPLICATE`); a bad entry refuses the whole command. TAKE returns up to the
//! requested number of surplus pages, most recently given first.

use bypass_hw::cmd::pages::{
    ManagePagesIn, ManagePagesOpMod, ManagePagesOut, QueryPagesIn, QueryPagesOpMod, QueryPagesOut,
    manage_pages_out_len,
};
use bypass_hw::eqe::{EQE_DATA_LEN, EventType};

use super::syndromes as s;
use super::{CmdError, CmdResult, Firmware, Stage};
use crate::events::Completions;
use crate::io::Io;
use crate::memory::PAGE_SIZE;
use crate::profile::Profile;

/// True once the firmware holds its boot pages.
pub(crate) fn boot_pages_given(fw: &Firmware) -> bool {
    fw.pages.len() as u64 >= u64::from(fw.boot_pages)
}

/// Pages held beyond what the firmware wants (what TAKE may return).
fn surplus(fw: &Firmware) -> u64 {
    (fw.pages.len() as u64).saturating_sub(fw.page_target)
}

/// The MANAGE_PAGES output length: for TAKE, the header and the pages it will return.
pub(crate) fn take_output_len(fw: &Firmware, input: &[u8]) -> Option<usize> {
    let i = ManagePagesIn::wrap_unchecked(input);
    if ManagePagesOpMod(i.op_mod() as u16) != ManagePagesOpMod::TAKE {
        return None;
    }
    let n = u64::from(i.input_num_entries()).min(surplus(fw));
    Some(manage_pages_out_len(
        usize::try_from(n).unwrap_or(usize::MAX),
    ))
}

fn check_function(embedded: u32, function_id: u32) -> CmdResult {
    if embedded != 0 || function_id != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    Ok(())
}

/// QUERY_PAGES.
pub(crate) fn query_pages(
    fw: &Firmware,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let i = QueryPagesIn::wrap_unchecked(input);
    check_function(i.embedded_cpu_function(), i.function_id())?;
    let held = fw.pages.len() as i64;
    let boot = i64::from(profile.boot_pages);
    let init = i64::from(profile.init_pages);
    let n: i64 = match (QueryPagesOpMod(i.op_mod() as u16), fw.stage) {
        (QueryPagesOpMod::BOOT, Stage::Enabled) => (boot - held).max(0),
        (QueryPagesOpMod::INIT, Stage::Enabled) => (boot + init - held).clamp(0, init),
        (QueryPagesOpMod::BOOT | QueryPagesOpMod::INIT, _) => 0,
        (QueryPagesOpMod::REGULAR, Stage::Initialized | Stage::TornDown) => {
            i64::try_from(fw.page_target).unwrap_or(i64::MAX) - held
        }
        (QueryPagesOpMod::REGULAR, _) => 0,
        _ => return Err(CmdError::param(s::BAD_PAGES_OP_MOD)),
    };
    let n = n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    let mut o = QueryPagesOut::wrap_unchecked(out);
    let _ = o.set_num_pages_i32(n);
    let _ = o.set_function_id(0);
    Ok(())
}

/// MANAGE_PAGES.
pub(crate) fn manage_pages(
    fw: &mut Firmware,
    io: &mut Io<'_>,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let i = ManagePagesIn::wrap_unchecked(input);
    check_function(i.embedded_cpu_function(), i.function_id())?;
    let n = usize::try_from(i.input_num_entries()).unwrap_or(usize::MAX);
    match ManagePagesOpMod(i.op_mod() as u16) {
        ManagePagesOpMod::GIVE => give(fw, io, &i, n),
        ManagePagesOpMod::TAKE => {
            let k = usize::try_from(surplus(fw).min(n as u64)).unwrap_or(0);
            let mut o = ManagePagesOut::wrap_unchecked(out);
            let mut returned = 0usize;
            while returned < k {
                let Some(p) = fw.pages.pop() else { break };
                fw.page_set.remove(&p);
                let _ = o.set_pas(returned, p);
                returned += 1;
            }
            let _ = o.set_output_num_entries(returned as u32);
            Ok(())
        }
        ManagePagesOpMod::ALLOC_FAIL => {
            // The driver could not allocate what was asked: stop asking (kernel
            // `page_notify_fail`).
            fw.page_target = fw.pages.len() as u64;
            Ok(())
        }
        _ => Err(CmdError::param(s::BAD_OP_MOD)),
    }
}

fn give(fw: &mut Firmware, io: &mut Io<'_>, i: &ManagePagesIn<&[u8]>, n: usize) -> CmdResult {
    if i.pas_len() < n {
        return Err(CmdError::inlen(s::LIST_TRUNCATED));
    }
    let mut new = std::collections::BTreeSet::new();
    let mut probe = vec![0u8; PAGE_SIZE];
    for k in 0..n {
        let p = i.pas(k).map_err(|_| CmdError::inlen(s::LIST_TRUNCATED))?;
        if p % PAGE_SIZE as u64 != 0 {
            return Err(CmdError::param(s::PAGE_UNALIGNED));
        }
        if fw.page_set.contains(&p) || !new.insert(p) {
            return Err(CmdError::param(s::PAGE_DUPLICATE));
        }
        // The firmware will read and write the page: it must be mapped both ways. Reading it
        // and writing the same bytes back checks both without changing anything.
        let ok = io
            .dma
            .read(p, &mut probe)
            .and_then(|()| io.dma.write(p, &probe));
        if let Err(f) = ok {
            io.dma_fault(f);
            return Err(CmdError::param(s::PAGE_NOT_MAPPED));
        }
    }
    for k in 0..n {
        if let Ok(p) = i.pas(k) {
            fw.pages.push(p);
            fw.page_set.insert(p);
        }
    }
    Ok(())
}

/// The firmware asks for `n` more pages (positive) or offers `-n` back (negative), as
/// firmware does at run time: a PAGE_REQUEST event (function 0, signed count; kernel `struct
/// mlx5_eqe_page_req`) to the EQ that subscribed to it, and QUERY_PAGES REGULAR reports the
/// count until the driver gives or takes the pages. Ignored unless the HCA is initialized.
pub(crate) fn request_pages(fw: &mut Firmware, comp: &mut Completions, io: &mut Io<'_>, n: i32) {
    if fw.stage != Stage::Initialized {
        return;
    }
    let held = fw.pages.len() as i64;
    fw.page_target = u64::try_from(held.saturating_add(i64::from(n))).unwrap_or(0);
    let mut data = [0u8; EQE_DATA_LEN];
    // ec_function (2 bytes) = 0, func_id (2 bytes) = 0, num_pages (4 bytes, signed).
    data[4..8].copy_from_slice(&n.to_be_bytes());
    comp.post_event(io, EventType::PAGE_REQUEST, 0, &data);
}
