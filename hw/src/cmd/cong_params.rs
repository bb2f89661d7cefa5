//! The congestion nodes' plain data, shared by the driver and the sim: which node a command
//! names ([`CongNode`]), the status per priority ([`CongStatus`]), the parameters
//! ([`RpParams`], [`NpParams`]), a change to them ([`RpChanges`], [`NpChanges`], which map to
//! MODIFY_CONG_PARAMS's field select) and the counters ([`CongStats`]), with their encoding to
//! and from the layouts of [`super::cong`].
//!
//! Units follow NVIDIA DOCA "DCQCN CC parameters": times in µs, rates in Mb/s, `rpg_byte_reset`
//! in bytes, `rpg_min_dec_fac` in percent, `dce_tcp_g` and `initial_alpha_value` in 1/1024.
//! The RP defaults are DOCA's firmware defaults; the NP's were not published, so they are this
//! model's configuration (the DCQCN paper's 50 µs between CNPs; CNPs at DSCP 48, priority 6).
//!
//! Sources: kernel `drivers/infiniband/hw/mlx5/cong.c` (`mlx5_ib_set_cc_param_mask_val`: which
//! field-select bit each parameter sets; `mlx5_get_cc_param_val`), `mlx5_ifc.h` (the layouts).
//!
//! Owns: the types and their wire encoding. Must not: judge values (the firmware does) or
//! interpret them (the sim's RP and NP do).

use super::cong::{CongControlRRoceEcnNp, CongControlRRoceEcnRp, np_field, rp_field};
use crate::error::Result;

/// Number of priorities (802.1p).
pub const PRIOS: usize = 8;

/// The congestion node a command names (`cong_protocol`, the kernel's `MLX5_IB_RROCE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CongNode {
    /// The reaction point: the sender's rate limiter (1).
    Rp,
    /// The notification point: the receiver's CNP generator (2).
    Np,
    /// General parameters (3).
    General,
}

impl CongNode {
    /// The node for the PRM's code, or `None` for an unknown one.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Rp),
            2 => Some(Self::Np),
            3 => Some(Self::General),
            _ => None,
        }
    }

    /// The PRM's code.
    pub fn code(self) -> u8 {
        match self {
            Self::Rp => 1,
            Self::Np => 2,
            Self::General => 3,
        }
    }

    /// The node's name as mlx5 tools print it (`roce_rp`, `roce_np`, `general`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Rp => "roce_rp",
            Self::Np => "roce_np",
            Self::General => "general",
        }
    }
}

/// Whether each node is on, per priority (MODIFY_CONG_STATUS's `enable`, per `priority`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CongStatus {
    /// The reaction point (the sender's rate limiter) per priority.
    pub rp: [bool; PRIOS],
    /// The notification point (the receiver's CNP generator) per priority.
    pub np: [bool; PRIOS],
}

/// The reaction point's parameters (`cong_control_r_roce_ecn_rp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpParams {
    /// Clamp the target rate to the current rate on every CNP.
    pub clamp_tgt_rate: bool,
    /// Clamp the target rate after a timer-driven increase.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// µs between timer-driven rate increases without a CNP.
    pub rpg_time_reset: u32,
    /// Bytes sent between byte-counter-driven rate increases without a CNP.
    pub rpg_byte_reset: u32,
    /// Fast-recovery steps before additive increase.
    pub rpg_threshold: u32,
    /// The highest rate, Mb/s (0: the port's line rate).
    pub rpg_max_rate: u32,
    /// Additive increase step, Mb/s.
    pub rpg_ai_rate: u32,
    /// Hyper increase step, Mb/s.
    pub rpg_hai_rate: u32,
    /// The decrease divisor's log2: a CNP cuts the rate by `alpha / 2^rpg_gd` (alpha in 1/1024).
    pub rpg_gd: u32,
    /// The largest single decrease, as the percentage of the rate that remains.
    pub rpg_min_dec_fac: u32,
    /// The lowest rate, Mb/s.
    pub rpg_min_rate: u32,
    /// The rate a QP's first CNP sets, Mb/s (0: cut from the line rate as any other CNP).
    pub rate_to_set_on_first_cnp: u32,
    /// The alpha update's weight of the old alpha, in 1/1024 (`g = 1 - dce_tcp_g/1024`).
    pub dce_tcp_g: u32,
    /// µs between alpha updates.
    pub dce_tcp_rtt: u32,
    /// µs: at most one rate decrease per period.
    pub rate_reduce_monitor_period: u32,
    /// Alpha of a QP's first CNP, in 1/1024.
    pub initial_alpha_value: u32,
}

impl Default for RpParams {
    /// NVIDIA DOCA's firmware defaults (the project's reference `congestion.md`).
    fn default() -> Self {
        Self {
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            rpg_time_reset: 300,
            rpg_byte_reset: 32_767,
            rpg_threshold: 1,
            rpg_max_rate: 0,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
        }
    }
}

/// The notification point's parameters (`cong_control_r_roce_ecn_np`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpParams {
    /// µs: at most one CNP per QP per this interval.
    pub min_time_between_cnps: u32,
    /// The DSCP CNPs are sent with.
    pub cnp_dscp: u8,
    /// 0: CNPs take `cnp_802p_prio`; 1: the priority of the marked packet. (The kernel's
    /// `cong.c` writes 0 here whenever it sets `cnp_802p_prio`: 0 is the fixed-priority mode.)
    pub cnp_prio_mode: u8,
    /// The 802.1p priority of CNPs when `cnp_prio_mode` is 0.
    pub cnp_802p_prio: u8,
}

impl Default for NpParams {
    /// This model's configuration (DOCA publishes no NP defaults): the DCQCN paper's 50 µs,
    /// CNPs at DSCP 48 and priority 6, as NVIDIA's RoCE configuration guides set them.
    fn default() -> Self {
        Self {
            min_time_between_cnps: 50,
            cnp_dscp: 48,
            cnp_prio_mode: 0,
            cnp_802p_prio: 6,
        }
    }
}

/// What the NP and RP did, under the names `QUERY_CONG_STATISTICS` gives them (and the
/// kernel's `cong.c` shows as `rp_cnp_handled` etc.).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CongStats {
    /// CNPs received for a QP whose RP is off (or for no QP).
    pub rp_cnp_ignored: u64,
    /// CNPs received and acted on by an RP.
    pub rp_cnp_handled: u64,
    /// ECN-marked (CE) RoCEv2 packets received by the NP.
    pub np_ecn_marked_roce_packets: u64,
    /// CNPs the NP sent.
    pub np_cnp_sent: u64,
}

impl CongStats {
    /// Every counter, with its mlx5 name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("rp_cnp_ignored", self.rp_cnp_ignored),
            ("rp_cnp_handled", self.rp_cnp_handled),
            (
                "np_ecn_marked_roce_packets",
                self.np_ecn_marked_roce_packets,
            ),
            ("np_cnp_sent", self.np_cnp_sent),
        ]
        .into_iter()
    }
}

/// Declares a "changes" struct of `Option`s, one per parameter, with its field-select bit, and
/// the code that writes it to, reads it from and applies it to the parameters.
macro_rules! changes {
    (
        $(#[$m:meta])* $name:ident for $params:ident, $view:ident {
            $( $(#[$fm:meta])* $f:ident: $ty:ty, $get:ident, $set:ident, $bit:expr; )*
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fm])* pub $f: Option<$ty>, )*
        }

        impl $name {
            /// Every field, changed to `p`'s value.
            pub fn all(p: &$params) -> Self {
                Self { $( $f: Some(p.$f), )* }
            }

            /// The field-select mask: bit `n` for each field that is `Some`.
            pub fn field_select(&self) -> u32 {
                let mut m = 0u32;
                $( if self.$f.is_some() { m |= 1 << $bit; } )*
                m
            }

            /// True when nothing changes.
            pub fn is_empty(&self) -> bool {
                self.field_select() == 0
            }

            /// Writes the changed fields into the parameter layout (others stay as they are).
            ///
            /// Errors: a value wider than its field ([`crate::Error::FieldOverflow`]).
            pub fn encode<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut $view<T>) -> Result<()> {
                $( if let Some(x) = self.$f { v.$set(wire(x))?; } )*
                Ok(())
            }

            /// The fields `field_select` selects, read from the layout.
            pub fn decode<T: AsRef<[u8]>>(field_select: u32, v: &$view<T>) -> Self {
                Self {
                    $( $f: (field_select & (1 << $bit) != 0).then(|| unwire(v.$get())), )*
                }
            }

            /// `p` with the changed fields replaced.
            pub fn apply(&self, p: &$params) -> $params {
                let mut q = *p;
                $( if let Some(x) = self.$f { q.$f = x; } )*
                q
            }

            /// Sets the field named `name` (its `mlx5_ifc.h` name) to `value` as the layout
            /// carries it (booleans: non-zero is true); false for an unknown name.
            pub fn set_by_name(&mut self, name: &str, value: u32) -> bool {
                match name {
                    $( stringify!($f) => { self.$f = Some(unwire(value)); true } )*
                    _ => false,
                }
            }

            /// Every field's name, in layout order.
            pub const NAMES: &'static [&'static str] = &[$( stringify!($f) ),*];
        }

        impl $params {
            /// Every parameter with its `mlx5_ifc.h` name, as the layout carries it.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u32)> {
                [$( (stringify!($f), wire(self.$f)) ),*].into_iter()
            }
        }

        impl $params {
            /// Writes every parameter into the layout (QUERY_CONG_PARAMS's answer).
            ///
            /// Errors: a value wider than its field ([`crate::Error::FieldOverflow`]).
            pub fn encode<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut $view<T>) -> Result<()> {
                $name::all(self).encode(v)
            }

            /// Reads every parameter from the layout.
            pub fn decode<T: AsRef<[u8]>>(v: &$view<T>) -> Self {
                $name::all(&Self::default()).apply_wire(v)
            }
        }

        impl $name {
            fn apply_wire<T: AsRef<[u8]>>(&self, v: &$view<T>) -> $params {
                $params { $( $f: unwire(v.$get()), )* }
            }
        }
    };
}

/// A parameter's value as its layout field takes it.
trait Wire: Copy {
    fn to_wire(self) -> u32;
    fn from_wire(v: u32) -> Self;
}
impl Wire for bool {
    fn to_wire(self) -> u32 {
        u32::from(self)
    }
    fn from_wire(v: u32) -> Self {
        v != 0
    }
}
impl Wire for u32 {
    fn to_wire(self) -> u32 {
        self
    }
    fn from_wire(v: u32) -> Self {
        v
    }
}
impl Wire for u8 {
    fn to_wire(self) -> u32 {
        u32::from(self)
    }
    fn from_wire(v: u32) -> Self {
        // The NP's byte fields are at most 6 bits wide on the wire.
        u8::try_from(v).unwrap_or(u8::MAX)
    }
}
fn wire<W: Wire>(x: W) -> u32 {
    x.to_wire()
}
fn unwire<W: Wire>(v: u32) -> W {
    W::from_wire(v)
}

changes! {
    /// A change to the RP's parameters: `Some` fields change (MODIFY_CONG_PARAMS with their
    /// `field_select_r_roce_rp` bits set), `None` ones stay.
    RpChanges for RpParams, CongControlRRoceEcnRp {
        /// `clamp_tgt_rate`.
        clamp_tgt_rate: bool, clamp_tgt_rate, set_clamp_tgt_rate, rp_field::CLAMP_TGT_RATE;
        /// `clamp_tgt_rate_after_time_inc`.
        clamp_tgt_rate_after_time_inc: bool, clamp_tgt_rate_after_time_inc,
            set_clamp_tgt_rate_after_time_inc, rp_field::CLAMP_TGT_RATE_ATI;
        /// `rpg_time_reset`.
        rpg_time_reset: u32, rpg_time_reset, set_rpg_time_reset, rp_field::TIME_RESET;
        /// `rpg_byte_reset`.
        rpg_byte_reset: u32, rpg_byte_reset, set_rpg_byte_reset, rp_field::BYTE_RESET;
        /// `rpg_threshold`.
        rpg_threshold: u32, rpg_threshold, set_rpg_threshold, rp_field::THRESHOLD;
        /// `rpg_max_rate`.
        rpg_max_rate: u32, rpg_max_rate, set_rpg_max_rate, rp_field::MAX_RATE;
        /// `rpg_ai_rate`.
        rpg_ai_rate: u32, rpg_ai_rate, set_rpg_ai_rate, rp_field::AI_RATE;
        /// `rpg_hai_rate`.
        rpg_hai_rate: u32, rpg_hai_rate, set_rpg_hai_rate, rp_field::HAI_RATE;
        /// `rpg_gd`.
        rpg_gd: u32, rpg_gd, set_rpg_gd, rp_field::GD;
        /// `rpg_min_dec_fac`.
        rpg_min_dec_fac: u32, rpg_min_dec_fac, set_rpg_min_dec_fac, rp_field::MIN_DEC_FAC;
        /// `rpg_min_rate`.
        rpg_min_rate: u32, rpg_min_rate, set_rpg_min_rate, rp_field::MIN_RATE;
        /// `rate_to_set_on_first_cnp`.
        rate_to_set_on_first_cnp: u32, rate_to_set_on_first_cnp, set_rate_to_set_on_first_cnp,
            rp_field::RATE_TO_SET_ON_FIRST_CNP;
        /// `dce_tcp_g`.
        dce_tcp_g: u32, dce_tcp_g, set_dce_tcp_g, rp_field::DCE_TCP_G;
        /// `dce_tcp_rtt`.
        dce_tcp_rtt: u32, dce_tcp_rtt, set_dce_tcp_rtt, rp_field::DCE_TCP_RTT;
        /// `rate_reduce_monitor_period`.
        rate_reduce_monitor_period: u32, rate_reduce_monitor_period,
            set_rate_reduce_monitor_period, rp_field::RATE_REDUCE_MONITOR_PERIOD;
        /// `initial_alpha_value`.
        initial_alpha_value: u32, initial_alpha_value, set_initial_alpha_value,
            rp_field::INITIAL_ALPHA_VALUE;
    }
}

changes! {
    /// A change to the NP's parameters: `Some` fields change, `None` ones stay. `cnp_prio_mode`
    /// and `cnp_802p_prio` share one field-select bit (as the kernel's `cong.c` sets them), so
    /// setting either sends both: the other goes with its value in the layout.
    NpChanges for NpParams, CongControlRRoceEcnNp {
        /// `min_time_between_cnps`.
        min_time_between_cnps: u32, min_time_between_cnps, set_min_time_between_cnps,
            np_field::MIN_TIME_BETWEEN_CNPS;
        /// `cnp_dscp`.
        cnp_dscp: u8, cnp_dscp, set_cnp_dscp, np_field::CNP_DSCP;
        /// `cnp_prio_mode`.
        cnp_prio_mode: u8, cnp_prio_mode, set_cnp_prio_mode, np_field::CNP_PRIO_MODE;
        /// `cnp_802p_prio`.
        cnp_802p_prio: u8, cnp_802p_prio, set_cnp_802p_prio, np_field::CNP_PRIO_MODE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rp_changes_select_the_kernels_bits() {
        let c = RpChanges {
            rpg_ai_rate: Some(10),
            rpg_gd: Some(7),
            ..Default::default()
        };
        assert_eq!(c.field_select(), (1 << 7) | (1 << 16));
        let mut buf = [0u8; 0x100];
        let mut v = CongControlRRoceEcnRp::new_checked(&mut buf[..]).unwrap();
        RpParams::default().encode(&mut v).unwrap();
        c.encode(&mut v).unwrap();
        let back = RpChanges::decode(c.field_select(), &v);
        assert_eq!(back, c);
        let p = back.apply(&RpParams::default());
        assert_eq!((p.rpg_ai_rate, p.rpg_gd), (10, 7));
        assert_eq!(p.rpg_hai_rate, 50);
        assert_eq!(RpParams::decode(&v), p);
        assert_eq!(RpChanges::all(&p).field_select().count_ones(), 16);
        let mut n = RpChanges::default();
        assert!(n.set_by_name("rpg_gd", 7) && n.set_by_name("clamp_tgt_rate", 1));
        assert!(!n.set_by_name("rpg_nonsense", 1));
        assert_eq!((n.rpg_gd, n.clamp_tgt_rate), (Some(7), Some(true)));
        assert_eq!(RpChanges::NAMES.len(), 16);
        assert_eq!(
            p.iter().find(|(k, _)| *k == "rpg_ai_rate"),
            Some(("rpg_ai_rate", 10))
        );
    }

    #[test]
    fn np_round_trip_and_overflow() {
        let mut buf = [0u8; 0x100];
        let mut v = CongControlRRoceEcnNp::new_checked(&mut buf[..]).unwrap();
        NpParams::default().encode(&mut v).unwrap();
        assert_eq!(NpParams::decode(&v), NpParams::default());
        let c = NpChanges {
            cnp_dscp: Some(64),
            ..Default::default()
        };
        assert_eq!(c.field_select(), 1 << 3);
        assert!(c.encode(&mut v).is_err(), "64 does not fit 6 bits");
        let c = NpChanges {
            cnp_802p_prio: Some(3),
            ..Default::default()
        };
        assert_eq!(c.field_select(), 1 << 4);
        // Decoding a bit shared by two fields gives both.
        let d = NpChanges::decode(c.field_select(), &v);
        assert_eq!((d.cnp_prio_mode, d.cnp_802p_prio), (Some(0), Some(6)));
    }
}
