//! Every device resource limit, reached through the safe API on a sim whose profile sets
//! small caps: the create that passes the limit is refused with
//! `DriverError::ResourceLimit` naming the capability and the knob, the objects made so far
//! keep working, freeing one lets the next create succeed, and freeing everything brings the
//! sim's object counts back to where they were after bring-up (nothing leaked on the failed
//! creates).
//!
//! Owns: the limit tests for QP, CQ, MR, PD, SRQ, UAR, EQ and firmware pages. Must not: test
//! the caps' sizing limits (a CQ or QP too large: `verbs_limits.rs`).
//!
//! Sources: the kernel's `cmd_status_to_err` (LIM_ERR: ENOMEM), the sim's exhaustion
//! syndromes (`sim/src/firmware/syndromes.rs`: `*_EXHAUSTED`), rdma-core `mlx5_vfio.c` and
//! kernel `pagealloc.c` `page_notify_fail` (a page request the driver cannot meet).

use std::sync::Arc;

use bypass_sim::ObjectCounts;
use bypass_testbed::{Profile, SimContext, SimFabric};
use bypass_verbs::driver::limits::Resource;
use bypass_verbs::driver::{DriverError, Hca, HcaConfig};
use bypass_verbs::{Access, Context, Cq, QpBuilder, Srq, SrqOptions, VerbsError};

/// One sim NIC with `tweak` applied to its profile, opened through the driver.
fn open(tweak: impl FnOnce(&mut Profile)) -> (SimFabric, Arc<Context>) {
    let fabric = SimFabric::stepped(11);
    let mut p = Profile::with_id(1);
    tweak(&mut p);
    let dev = fabric.add_device(p).expect("sim device");
    let ctx = Context::new(dev).expect("bring-up");
    (fabric, ctx)
}

fn counts(ctx: &Context) -> ObjectCounts {
    ctx.sim()
        .expect("a sim context")
        .with_device(|d| d.object_counts())
        .expect("device")
}

/// Checks `err` is the limit of `resource` with its cap (and the limit `max`) and knob named.
fn assert_limit(err: &VerbsError, resource: Resource, max: u64) {
    match err {
        VerbsError::Driver(DriverError::ResourceLimit {
            resource: r, limit, ..
        }) => {
            assert_eq!(*r, resource, "{err}");
            assert_eq!(*limit, Some(max), "{err}");
        }
        _ => panic!("expected the {resource} limit, got: {err}"),
    }
    let text = err.to_string();
    assert!(text.contains(resource.cap()), "{text}");
    assert!(text.contains(&max.to_string()), "{text}");
    assert!(text.contains(resource.knob()), "{text}");
}

/// Creates with `make` until it is refused (at most `bound` times), checks the refusal is
/// `resource`'s limit of `max` and that the sim holds `max` objects of the kind (`count`);
/// then frees one, creates again (the limit is reusable) and returns what was made.
fn exhaust<T>(
    ctx: &Context,
    resource: Resource,
    max: u64,
    count: fn(&ObjectCounts) -> usize,
    mut make: impl FnMut() -> Result<T, VerbsError>,
) -> Vec<T> {
    let mut made = Vec::new();
    let err = loop {
        assert!(
            (made.len() as u64) <= max,
            "more {resource}s than the limit {max} were created"
        );
        match make() {
            Ok(o) => made.push(o),
            Err(e) => break e,
        }
    };
    assert_limit(&err, resource, max);
    assert_eq!(count(&counts(ctx)) as u64, max, "{resource}s on the device");
    // Refused again while full; then room for exactly one after freeing one.
    assert_limit(&make().err().expect("still full"), resource, max);
    made.pop();
    made.push(make().expect("a freed slot is reusable"));
    made
}

#[test]
fn pds_run_out_at_log_max_pd_and_come_back() {
    let (_f, ctx) = open(|p| p.caps.log_max_pd = 3);
    let start = counts(&ctx);
    let pds = exhaust(&ctx, Resource::Pd, 8, |c| c.pds, || ctx.alloc_pd());
    drop(pds);
    assert_eq!(counts(&ctx), start);
}

#[test]
fn cqs_run_out_at_log_max_cq_and_come_back() {
    let (_f, ctx) = open(|p| p.caps.log_max_cq = 3);
    let start = counts(&ctx);
    let cqs = exhaust(&ctx, Resource::Cq, 8, |c| c.cqs, || Cq::new(&ctx, 16));
    drop(cqs);
    assert_eq!(counts(&ctx), start);
}

#[test]
fn mrs_run_out_at_log_max_mkey_and_come_back() {
    let (_f, ctx) = open(|p| p.caps.log_max_mkey = 3);
    let start = counts(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let mrs = exhaust(
        &ctx,
        Resource::Mr,
        8,
        |c| c.mkeys,
        || pd.register(8192, Access::LOCAL_WRITE | Access::REMOTE_READ),
    );
    // The MRs made before the limit still work: their keys are live on the device.
    assert_eq!(mrs.len(), 8);
    drop(mrs);
    drop(pd);
    assert_eq!(counts(&ctx), start);
}

#[test]
fn qps_run_out_at_log_max_qp_and_the_rest_still_connect() {
    let (_f, ctx) = open(|p| p.caps.log_max_qp = 3);
    let start = counts(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = Cq::new(&ctx, 64).unwrap();
    let mut qps = exhaust(
        &ctx,
        Resource::Qp,
        8,
        |c| c.qps,
        || QpBuilder::rc(&pd, &cq, &cq).build(),
    );
    // The QPs made before and after the refusal are whole: two of them connect to each other.
    let (mut a, mut b) = (qps.pop().unwrap(), qps.pop().unwrap());
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).expect("connect a");
    b.connect(&ea).expect("connect b");
    drop((a, b, qps));
    // Every UAR page the QPs' doorbells took went with its last QP.
    assert_eq!(ctx.hca().bfregs().pages(), (0, 0, 0));
    drop((cq, pd));
    assert_eq!(counts(&ctx), start);
}

#[test]
fn srqs_run_out_at_log_max_srq_and_come_back() {
    let (_f, ctx) = open(|p| p.caps.log_max_srq = 2);
    let start = counts(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = Cq::new(&ctx, 64).unwrap();
    let srqs = exhaust(
        &ctx,
        Resource::Srq,
        4,
        |c| c.srqs,
        || Srq::new(&pd, &cq, &SrqOptions::default()),
    );
    drop((srqs, cq, pd));
    assert_eq!(counts(&ctx), start);
}

#[test]
fn no_uar_page_for_bring_up_is_refused_naming_the_knob() {
    let fabric = SimFabric::stepped(3);
    let mut p = Profile::with_id(1);
    p.uar_pages = 0;
    let dev = fabric.add_device(p).unwrap();
    let err = Hca::open(dev).unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::ResourceLimit {
                resource: Resource::Uar,
                limit: None,
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("Profile::uar_pages"), "{text}");
    // The failed bring-up undid itself: the device holds nothing.
    let left = fabric.with_device(0, |d| d.object_counts()).unwrap();
    assert_eq!(left, ObjectCounts::default(), "{left}");
}

#[test]
fn qps_past_the_uar_pages_fall_back_to_shared_doorbells() {
    // One UAR page: bring-up takes it, so no QP gets a page of its own; QPs are still made
    // (on the driver's page) and work.
    let (_f, ctx) = open(|p| p.uar_pages = 1);
    let start = counts(&ctx);
    assert_eq!(start.uars, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = Cq::new(&ctx, 64).unwrap();
    let mut a = QpBuilder::rc(&pd, &cq, &cq).build().expect("QP a");
    let mut b = QpBuilder::rc(&pd, &cq, &cq).build().expect("QP b");
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).unwrap();
    b.connect(&ea).unwrap();
    assert_eq!(counts(&ctx).uars, 1);
    drop((a, b, cq, pd));
    assert_eq!(counts(&ctx), start);
}

#[test]
fn completion_eqs_stop_at_log_max_eq() {
    // Two EQs: the async EQ and one completion EQ, whatever max_comp_vectors asks.
    let (_f, ctx) = open(|p| p.caps.log_max_eq = 1);
    assert_eq!(counts(&ctx).eqs, 2);
    assert_eq!(ctx.num_comp_vectors(), 1);
    let cq = Cq::new(&ctx, 16).expect("a CQ on the one completion vector");
    drop(cq);
}

#[test]
fn firmware_pages_past_the_budget_are_refused_and_the_rest_lent() {
    let fabric = SimFabric::stepped(5);
    let dev = fabric.add_device(Profile::with_id(1)).unwrap();
    let boot_and_init = {
        let p = Profile::with_id(1);
        (p.boot_pages + p.init_pages) as usize
    };
    let config = HcaConfig {
        max_firmware_pages: boot_and_init + 16,
        ..HcaConfig::default()
    };
    let hca = Hca::open_with(dev, config).expect("bring-up fits the budget");
    let pages = || fabric.with_device(0, |d| d.firmware_pages()).unwrap();
    assert_eq!(pages(), boot_and_init);
    // 17 more would pass the budget by one: refused whole, nothing given.
    fabric.with_device(0, |d| d.request_pages(17)).unwrap();
    let err = hca.process_events().unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::FirmwarePagesLimit {
                asked: 17,
                limit,
                ..
            } if limit == (boot_and_init + 16) as u64
        ),
        "{err}"
    );
    assert!(err.to_string().contains("max_firmware_pages"), "{err}");
    assert_eq!(pages(), boot_and_init);
    // The firmware was told (ALLOC_FAIL) and stopped asking; a request that fits is met.
    fabric.with_device(0, |d| d.request_pages(16)).unwrap();
    hca.process_events().expect("16 pages fit");
    assert_eq!(pages(), boot_and_init + 16);
    drop(hca);
    assert_eq!(pages(), 0);
}

#[test]
fn a_budget_below_the_boot_pages_fails_bring_up_cleanly() {
    let fabric = SimFabric::stepped(6);
    let dev = fabric.add_device(Profile::with_id(1)).unwrap();
    let config = HcaConfig {
        max_firmware_pages: 4,
        ..HcaConfig::default()
    };
    let err = Hca::open_with(dev, config).unwrap_err();
    assert!(
        matches!(err, DriverError::FirmwarePagesLimit { limit: 4, .. }),
        "{err}"
    );
    let left = fabric.with_device(0, |d| d.object_counts()).unwrap();
    assert_eq!(left, ObjectCounts::default(), "{left}");
}
