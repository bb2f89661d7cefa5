//! The knee of a tuning curve: the smallest knob value (queue depth, QP count) that already
//! gives nearly all of the best result.
//!
//! Owns: that one rule, as a pure function over (x, y) points. Must not measure, print or
//! draw (`sweep` measures, `crate::chart` draws the marker).
//!
//! Follows the seed's §5.2 tuning method: raise the knob and "watch for the knee", the point
//! past which more depth or more QPs buys no more bandwidth. "Nearly all" is within
//! [`KNEE_TOLERANCE`] (5 %) of the best value on the curve, so that a noisy plateau still
//! has its knee at the plateau's start rather than at whichever point happened to peak.

/// How far below the best value a point may be and still count as on the plateau.
pub const KNEE_TOLERANCE: f64 = 0.05;

/// The index of the knee of a curve where larger y is better: among the points whose y is
/// within `tolerance` (a fraction, e.g. 0.05) of the best y, the one with the smallest x.
///
/// Points need not be sorted. Points whose x or y is not finite are ignored; `None` when no
/// point is left or the best y is not positive (a curve of zeros has no knee).
pub fn knee(points: &[(f64, f64)], tolerance: f64) -> Option<usize> {
    let finite = |&(_, (x, y)): &(usize, &(f64, f64))| x.is_finite() && y.is_finite();
    let best = points
        .iter()
        .enumerate()
        .filter(finite)
        .map(|(_, &(_, y))| y)
        .fold(f64::NEG_INFINITY, f64::max);
    if best.is_nan() || best <= 0.0 {
        return None;
    }
    let floor = best * (1.0 - tolerance.clamp(0.0, 1.0));
    points
        .iter()
        .enumerate()
        .filter(finite)
        .filter(|&(_, &(_, y))| y >= floor)
        .min_by(|(_, a), (_, b)| a.0.total_cmp(&b.0))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(xs: &[f64], ys: &[f64]) -> Vec<(f64, f64)> {
        xs.iter().copied().zip(ys.iter().copied()).collect()
    }

    const DEPTHS: [f64; 7] = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 2048.0];

    #[test]
    fn a_flat_curve_has_its_knee_at_the_first_point() {
        let c = curve(&DEPTHS, &[10.0; 7]);
        assert_eq!(knee(&c, KNEE_TOLERANCE), Some(0));
    }

    #[test]
    fn a_rising_curve_without_plateau_has_its_knee_at_the_last_point() {
        let c = curve(&DEPTHS, &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]);
        assert_eq!(knee(&c, KNEE_TOLERANCE), Some(6));
    }

    #[test]
    fn a_rising_curve_has_its_knee_where_it_reaches_the_plateau() {
        let c = curve(&DEPTHS, &[1.0, 3.0, 7.0, 9.8, 10.0, 10.0, 10.0]);
        assert_eq!(knee(&c, KNEE_TOLERANCE), Some(3));
    }

    #[test]
    fn a_noisy_plateau_has_its_knee_at_its_start_not_at_its_peak() {
        // The peak (10.4 at depth 1024) is noise: 9.9 at depth 64 is within 5 % of it.
        let c = curve(&DEPTHS, &[2.0, 6.0, 9.1, 9.9, 9.7, 10.4, 10.0]);
        assert_eq!(knee(&c, KNEE_TOLERANCE), Some(3));
    }

    #[test]
    fn a_point_just_outside_the_tolerance_is_not_the_knee() {
        // 9.4 is 6 % below the best 10.0; 9.6 is 4 % below it.
        let c = curve(&[1.0, 2.0, 4.0], &[9.4, 9.6, 10.0]);
        assert_eq!(knee(&c, KNEE_TOLERANCE), Some(1));
    }

    #[test]
    fn unsorted_points_give_the_index_of_the_smallest_x_on_the_plateau() {
        let c = curve(&[64.0, 1.0, 16.0, 4.0], &[10.0, 2.0, 9.8, 5.0]);
        assert_eq!(knee(&c, KNEE_TOLERANCE), Some(2));
    }

    #[test]
    fn empty_zero_and_non_finite_curves_have_no_knee() {
        assert_eq!(knee(&[], KNEE_TOLERANCE), None);
        assert_eq!(knee(&curve(&[1.0, 2.0], &[0.0, 0.0]), KNEE_TOLERANCE), None);
        assert_eq!(knee(&[(1.0, f64::NAN)], KNEE_TOLERANCE), None);
        let c = [(1.0, f64::NAN), (2.0, 5.0), (f64::INFINITY, 50.0)];
        assert_eq!(knee(&c, KNEE_TOLERANCE), Some(1));
    }
}
