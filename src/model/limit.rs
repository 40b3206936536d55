//! Warn/fail limits from profiles and the one place a number becomes a status (was `threshold.rs`).

use serde::{Deserialize, Serialize};

use super::status::Status;

/// A pair of limits. Which side is bad is the caller's knowledge (bandwidth: low is bad; errors: high is bad),
/// so judging names the direction instead of guessing it from the numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    pub warn: Option<f64>,
    pub fail: Option<f64>,
}

impl Limit {
    pub const fn new(warn: Option<f64>, fail: Option<f64>) -> Self {
        Limit { warn, fail }
    }

    pub fn is_empty(&self) -> bool {
        self.warn.is_none() && self.fail.is_none()
    }

    /// Higher is better: below `fail` fails, below `warn` warns.
    pub fn judge_min(&self, value: f64) -> Status {
        if self.fail.is_some_and(|f| value < f) {
            Status::Fail
        } else if self.warn.is_some_and(|w| value < w) {
            Status::Warn
        } else {
            Status::Pass
        }
    }

    /// [`Limit::judge_min`] of a value that may not have been obtained: with a limit set, no value is an error
    /// (never a pass on a reading that was not taken); with none, nothing is judged.
    pub fn judge_min_of(&self, value: Option<f64>) -> Status {
        match value {
            Some(v) => self.judge_min(v),
            None if self.is_empty() => Status::Pass,
            None => Status::Error,
        }
    }

    /// Lower is better: above `fail` fails, above `warn` warns.
    pub fn judge_max(&self, value: f64) -> Status {
        if self.fail.is_some_and(|f| value > f) {
            Status::Fail
        } else if self.warn.is_some_and(|w| value > w) {
            Status::Warn
        } else {
            Status::Pass
        }
    }

    /// The profile's limit where it sets one, else the probe's default.
    pub fn or(self, default: Limit) -> Limit {
        Limit {
            warn: self.warn.or(default.warn),
            fail: self.fail.or(default.fail),
        }
    }
}

/// Bandwidth through a port as a % of its rate, when the profile sets none: NVIDIA ngc_multinode_perf passes a
/// port at 90 % of its link rate.
pub const PORT_RATE_PCT: Limit = Limit::new(Some(90.0), Some(75.0));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_below_fail_fails() {
        let l = Limit::new(Some(52.0), Some(48.0));
        assert_eq!(l.judge_min(47.9), Status::Fail);
        assert_eq!(l.judge_min(50.0), Status::Warn);
        assert_eq!(l.judge_min(55.3), Status::Pass);
    }

    #[test]
    fn errors_above_fail_fail() {
        let l = Limit::new(Some(0.0), Some(10.0));
        assert_eq!(l.judge_max(0.0), Status::Pass);
        assert_eq!(l.judge_max(1.0), Status::Warn);
        assert_eq!(l.judge_max(11.0), Status::Fail);
    }

    #[test]
    fn a_limit_without_a_value_is_an_error() {
        assert_eq!(
            Limit::new(None, Some(75.0)).judge_min_of(None),
            Status::Error
        );
        assert_eq!(Limit::default().judge_min_of(None), Status::Pass);
        assert_eq!(
            Limit::new(None, Some(75.0)).judge_min_of(Some(12.0)),
            Status::Fail
        );
    }

    #[test]
    fn empty_limit_always_passes() {
        assert_eq!(Limit::default().judge_min(0.0), Status::Pass);
    }

    #[test]
    fn profile_limit_overrides_default() {
        let l = Limit::new(None, Some(40.0)).or(Limit::new(Some(52.0), Some(48.0)));
        assert_eq!(l, Limit::new(Some(52.0), Some(40.0)));
    }
}
