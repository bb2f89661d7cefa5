//! DCQCN's reaction-point algorithm for one QP, as a pure state machine: CNPs cut the rate,
//! a timer and a byte counter raise it again.
//!
//! Owns: [`Dcqcn`] (current rate RC, target rate RT, alpha, the increase counters) and its
//! transitions [`Dcqcn::on_cnp`], [`Dcqcn::on_sent`], [`Dcqcn::advance`]. Must not: know
//! packets, QPs or the clock (every call is given `now` in ns and the parameters), or pace
//! (`cong::rp` does, from [`Dcqcn::rate_mbps`]). Integer fixed point only: alpha in 1/1024,
//! rates in Mb/s, times in ns.
//!
//! Sources: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015,
//! §4 (the RP algorithm: cut `RC ×= 1 − α/2`, `RT = RC`, `α = (1 − g)α + g` on a CNP; α
//! decays by `(1 − g)` every period without one; increase events from a timer and a byte
//! counter: fast recovery `RC = (RT + RC)/2` for F events, then additive `RT += R_AI`, then
//! hyper `RT += R_HAI` once both counters pass F). NVIDIA DOCA "DCQCN CC parameters" for the
//! mlx5 names. Where mlx5 differs from the paper, and what this model takes:
//! - alpha is updated every `dce_tcp_rtt` µs as `α·G/1024 + (1024 − G)` with a CNP in the
//!   period and `α·G/1024` without (G = `dce_tcp_g`; Mellanox "DCQCN Parameters", the
//!   DcQcnDceAlphaG entry): G is the old alpha's weight, the paper's `1 − g`;
//! - the cut is `RC × alpha / 2^rpg_gd` (alpha 1/1024, `rpg_gd` 11: the paper's α/2), bounded
//!   below by `rpg_min_dec_fac` % of RC and by `rpg_min_rate`;
//! - at most one cut per `rate_reduce_monitor_period` µs: a CNP inside it updates alpha and
//!   restarts the increase counters but leaves the rate;
//! - RT takes RC on a CNP only with `clamp_tgt_rate`, or with `clamp_tgt_rate_after_time_inc`
//!   when the timer raised the rate since the last CNP (else RT keeps its higher value);
//! - a QP's first CNP sets alpha to `initial_alpha_value` (no g-update) and RC to
//!   `rate_to_set_on_first_cnp` when that is not 0;
//! - `rpg_threshold` is F: the first F events after a CNP are fast recovery; the hyper step
//!   is a constant `rpg_hai_rate` (the paper multiplies it by the events past F);
//! - RC never exceeds the maximum (`rpg_max_rate`, 0: the line rate); once it reaches it the
//!   limiter is released and the QP sends unpaced.

use super::RpParams;

/// Alpha's fixed-point one (alpha is kept in 1/1024).
pub const ALPHA_ONE: u32 = 1024;

/// The most lazy catch-up steps one call applies (timer events, alpha decays): beyond these
/// the state has reached its limit anyway (alpha 0, the rate at the maximum) for any
/// parameters the PRM allows, and the cap keeps a call's cost bounded.
const MAX_STEPS: u64 = 1 << 16;

/// One QP's DCQCN reaction-point state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dcqcn {
    /// Whether the limiter is on (a CNP came and the rate has not recovered to the maximum).
    limited: bool,
    /// Current rate RC, Mb/s.
    rc: u64,
    /// Target rate RT, Mb/s.
    rt: u64,
    /// Alpha, 1/1024.
    alpha: u32,
    /// When alpha was last updated (ns).
    alpha_at: u64,
    /// When the rate was last cut (ns).
    cut_at: Option<u64>,
    /// Timer increase events since the last CNP (T).
    t: u32,
    /// Byte-counter increase events since the last CNP (BC).
    bc: u32,
    /// Bytes sent since the last byte-counter event.
    bytes: u64,
    /// When the next timer event comes (ns).
    next_timer: u64,
    /// The timer raised the rate since the last CNP.
    timer_inc: bool,
    /// CNPs this QP has reacted to.
    cnps: u64,
}

/// A snapshot of a QP's DCQCN state, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateInfo {
    /// Whether the limiter is on.
    pub limited: bool,
    /// Current rate, Mb/s (the maximum when not limited).
    pub current_mbps: u64,
    /// Target rate, Mb/s (the maximum when not limited).
    pub target_mbps: u64,
    /// Alpha, in 1/1024.
    pub alpha: u32,
    /// CNPs the QP reacted to.
    pub cnps_handled: u64,
}

/// The highest rate: `rpg_max_rate`, or the line rate when that is 0 (or higher).
pub fn max_rate(p: &RpParams, line_mbps: u64) -> u64 {
    match u64::from(p.rpg_max_rate) {
        0 => line_mbps,
        m => m.min(line_mbps),
    }
    .max(1)
}

fn us(v: u32) -> u64 {
    u64::from(v) * 1000
}

impl Dcqcn {
    /// True while the limiter is on.
    pub fn limited(&self) -> bool {
        self.limited
    }

    /// The current rate while limited, Mb/s; `None` when the QP sends unpaced.
    pub fn rate_mbps(&self) -> Option<u64> {
        self.limited.then_some(self.rc)
    }

    /// A snapshot for reports, `max` the highest rate ([`max_rate`]).
    pub fn info(&self, max: u64) -> RateInfo {
        RateInfo {
            limited: self.limited,
            current_mbps: if self.limited { self.rc } else { max },
            target_mbps: if self.limited { self.rt } else { max },
            alpha: self.alpha,
            cnps_handled: self.cnps,
        }
    }

    /// When the next timer-driven increase is due (ns), while limited.
    pub fn next_event(&self) -> Option<u64> {
        self.limited.then_some(self.next_timer)
    }

    /// Decays alpha for every whole `dce_tcp_rtt` period since its last update (periods
    /// without a CNP: `α = α · dce_tcp_g/1024`).
    fn decay_alpha(&mut self, p: &RpParams, now: u64) {
        let period = us(p.dce_tcp_rtt).max(1);
        let n = now.saturating_sub(self.alpha_at) / period;
        let g = u64::from(p.dce_tcp_g.min(ALPHA_ONE));
        let mut a = u64::from(self.alpha);
        for _ in 0..n.min(MAX_STEPS) {
            if a == 0 {
                break;
            }
            a = a * g / u64::from(ALPHA_ONE);
        }
        self.alpha = a as u32;
        self.alpha_at += n * period;
    }

    /// A CNP for this QP arrived at `now`; `max` the highest rate ([`max_rate`]).
    pub fn on_cnp(&mut self, p: &RpParams, max: u64, now: u64) {
        self.cnps += 1;
        let first = !self.limited;
        if first {
            self.rc = max;
            self.rt = max;
            self.alpha = p.initial_alpha_value.min(ALPHA_ONE);
            self.alpha_at = now;
        } else {
            self.decay_alpha(p, now);
            let g_old = u64::from(p.dce_tcp_g.min(ALPHA_ONE));
            let one = u64::from(ALPHA_ONE);
            let a = (u64::from(self.alpha) * g_old + (one - g_old) * one) / one;
            self.alpha = a.min(one) as u32;
            self.alpha_at = now;
        }
        let may_cut = self
            .cut_at
            .is_none_or(|at| now.saturating_sub(at) >= us(p.rate_reduce_monitor_period));
        if may_cut {
            if first || p.clamp_tgt_rate || (p.clamp_tgt_rate_after_time_inc && self.timer_inc) {
                self.rt = self.rc;
            }
            self.rc = if first && p.rate_to_set_on_first_cnp != 0 {
                u64::from(p.rate_to_set_on_first_cnp).min(max)
            } else {
                self.cut(p)
            };
            self.cut_at = Some(now);
        }
        self.limited = true;
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        self.timer_inc = false;
        self.next_timer = now + us(p.rpg_time_reset).max(1);
    }

    /// RC after one cut: `RC · (1 − α/2^rpg_gd)`, no lower than `rpg_min_dec_fac` % of RC and
    /// than `rpg_min_rate`.
    fn cut(&self, p: &RpParams) -> u64 {
        let gd = p.rpg_gd.min(31);
        let dec = ((u128::from(self.rc) * u128::from(self.alpha)) >> gd) as u64;
        let floor_fac = self.rc * u64::from(p.rpg_min_dec_fac.min(100)) / 100;
        self.rc
            .saturating_sub(dec)
            .max(floor_fac)
            .max(u64::from(p.rpg_min_rate).max(1))
    }

    /// One increase event (timer or byte counter): fast recovery, additive or hyper.
    fn increase(&mut self, p: &RpParams, max: u64) {
        let f = p.rpg_threshold;
        if self.t.max(self.bc) <= f {
            // Fast recovery: toward the target, RT unchanged.
        } else if self.t.min(self.bc) > f {
            self.rt = (self.rt + u64::from(p.rpg_hai_rate)).min(max);
        } else {
            self.rt = (self.rt + u64::from(p.rpg_ai_rate)).min(max);
        }
        // Rounded up, so that RC reaches RT rather than stopping one below it.
        self.rc = (self.rc + self.rt).div_ceil(2).min(max);
        if self.rc >= max {
            self.limited = false;
            self.rc = max;
            self.rt = max;
        }
    }

    /// Brings the timer events and alpha up to `now`: every `rpg_time_reset` µs since the
    /// last CNP or timer event is one increase event.
    pub fn advance(&mut self, p: &RpParams, max: u64, now: u64) {
        if !self.limited {
            return;
        }
        let period = us(p.rpg_time_reset).max(1);
        let mut steps = 0;
        while self.limited && self.next_timer <= now && steps < MAX_STEPS {
            self.t = self.t.saturating_add(1);
            self.timer_inc = true;
            self.increase(p, max);
            self.next_timer += period;
            steps += 1;
        }
        self.decay_alpha(p, now);
    }

    /// The QP sent `bytes` at `now`: timer events first, then every `rpg_byte_reset` bytes is
    /// one increase event.
    pub fn on_sent(&mut self, p: &RpParams, max: u64, bytes: u64, now: u64) {
        self.advance(p, max, now);
        if !self.limited {
            return;
        }
        let reset = u64::from(p.rpg_byte_reset).max(1);
        self.bytes += bytes;
        while self.limited && self.bytes >= reset {
            self.bytes -= reset;
            self.bc = self.bc.saturating_add(1);
            self.increase(p, max);
        }
        if !self.limited {
            self.bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: u64 = 100_000;

    fn p() -> RpParams {
        RpParams::default()
    }

    #[test]
    fn the_first_cnp_halves_the_line_rate_with_alpha_near_one() {
        let mut d = Dcqcn::default();
        assert_eq!(d.rate_mbps(), None);
        d.on_cnp(&p(), LINE, 1_000);
        // alpha 1023/1024, gd 11: cut = 100000 * 1023 / 2048 = 49951.
        assert_eq!(d.rate_mbps(), Some(100_000 - 49_951));
        let i = d.info(LINE);
        assert_eq!((i.target_mbps, i.alpha, i.cnps_handled), (LINE, 1023, 1));
    }

    #[test]
    fn rate_to_set_on_first_cnp_replaces_the_first_cut() {
        let mut d = Dcqcn::default();
        let p = RpParams {
            rate_to_set_on_first_cnp: 10_000,
            ..p()
        };
        d.on_cnp(&p, LINE, 0);
        assert_eq!(d.rate_mbps(), Some(10_000));
    }

    #[test]
    fn cnps_inside_the_monitor_period_cut_once() {
        let mut d = Dcqcn::default();
        d.on_cnp(&p(), LINE, 0);
        let after_one = d.rate_mbps().unwrap();
        d.on_cnp(&p(), LINE, 3_999); // 4 µs period: inside
        assert_eq!(d.rate_mbps(), Some(after_one));
        assert_eq!(d.info(LINE).cnps_handled, 2);
    }

    #[test]
    fn k_spaced_cnps_cut_k_times_down_to_the_floor() {
        let mut d = Dcqcn::default();
        let mut rates = vec![];
        for k in 0..30u64 {
            d.on_cnp(&p(), LINE, k * 10_000); // every 10 µs: past the monitor period
            rates.push(d.rate_mbps().unwrap());
        }
        assert!(rates.windows(2).all(|w| w[1] < w[0]), "{rates:?}");
        // alpha after the second CNP: decayed 10 periods from 1023, then g-updated.
        let mut a: u64 = 1023;
        for _ in 0..10 {
            a = a * 1019 / 1024;
        }
        let a2 = (a * 1019 + 5 * 1024) / 1024;
        let r1 = 100_000 - 100_000 * 1023 / 2048;
        assert_eq!(rates[1], r1 - r1 * a2 / 2048);
        d.on_cnp(&p(), LINE, 1_000_000);
        for k in 0..40u64 {
            d.on_cnp(&p(), LINE, 1_000_000 + k * 10_000);
        }
        assert!(d.rate_mbps().unwrap() >= 1);
        let min = RpParams {
            rpg_min_rate: 5_000,
            ..p()
        };
        let mut m = Dcqcn::default();
        for k in 0..40u64 {
            m.on_cnp(&min, LINE, k * 10_000);
        }
        assert_eq!(m.rate_mbps(), Some(5_000));
    }

    #[test]
    fn the_rate_recovers_on_the_timer_and_the_limiter_is_released() {
        let mut d = Dcqcn::default();
        d.on_cnp(&p(), LINE, 0);
        let r0 = d.rate_mbps().unwrap();
        // First timer event (300 µs): fast recovery halfway to RT = line rate.
        d.advance(&p(), LINE, 300_000);
        assert_eq!(d.rate_mbps(), Some((r0 + LINE).div_ceil(2)));
        d.advance(&p(), LINE, 299_999 + 300_000);
        assert_eq!(d.rate_mbps(), Some((r0 + LINE).div_ceil(2)));
        // RT is at the line rate, so additive steps are capped and RC halves the gap each
        // event: released within ~20 events.
        d.advance(&p(), LINE, 300_000 * 25);
        assert_eq!(d.rate_mbps(), None);
        assert_eq!(d.info(LINE).current_mbps, LINE);
    }

    #[test]
    fn additive_and_hyper_increase_raise_the_target() {
        let clamp = RpParams {
            clamp_tgt_rate: true,
            ..p()
        };
        let mut d = Dcqcn::default();
        d.on_cnp(&clamp, LINE, 0);
        d.on_cnp(&clamp, LINE, 10_000); // RT clamps to the first cut's RC
        let rt0 = d.info(LINE).target_mbps;
        assert!(rt0 < LINE);
        d.advance(&clamp, LINE, 10_000 + 300_000); // T = 1: fast recovery
        assert_eq!(d.info(LINE).target_mbps, rt0);
        d.advance(&clamp, LINE, 10_000 + 600_000); // T = 2, BC = 0: additive
        assert_eq!(d.info(LINE).target_mbps, rt0 + 5);
        // Two byte-counter events (BC = 2 > 1) with T = 2: hyper.
        d.on_sent(&clamp, LINE, 32_767, 10_000 + 600_001);
        assert_eq!(d.info(LINE).target_mbps, rt0 + 10); // BC = 1: additive
        d.on_sent(&clamp, LINE, 32_767, 10_000 + 600_002);
        assert_eq!(d.info(LINE).target_mbps, rt0 + 60); // BC = 2: hyper
    }

    #[test]
    fn alpha_decays_without_cnps() {
        let mut d = Dcqcn::default();
        d.on_cnp(&p(), LINE, 0);
        d.advance(&p(), LINE, 100_000); // 100 periods of 1 µs
        let mut a: u64 = 1023;
        for _ in 0..100 {
            a = a * 1019 / 1024;
        }
        assert_eq!(u64::from(d.info(LINE).alpha), a);
        assert!(a < 1023 && a > 0);
        d.advance(&p(), LINE, 10_000_000);
        assert_eq!(d.info(LINE).alpha, 0);
    }

    #[test]
    fn max_rate_takes_rpg_max_rate_under_the_line_rate() {
        assert_eq!(max_rate(&p(), LINE), LINE);
        let m = RpParams {
            rpg_max_rate: 40_000,
            ..p()
        };
        assert_eq!(max_rate(&m, LINE), 40_000);
        assert_eq!(max_rate(&m, 25_000), 25_000);
    }
}
