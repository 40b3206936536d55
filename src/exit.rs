//! Exit codes: the contract with CI gates and Kubernetes init containers. The README and `--help` repeat the
//! doc comment of each constant.

use crate::model::Status;
use crate::report::RunReport;

/// Uninhabited: a namespace for the codes.
pub enum Exit {}

impl Exit {
    /// Every check passed (warnings allowed unless `--strict`).
    pub const OK: u8 = 0;
    /// At least one check failed (with `--strict`, also: at least one warned).
    pub const CHECK_FAILED: u8 = 1;
    /// Usage or profile error: bad flags, unreadable or invalid profile, missing `--root`. Nothing was run.
    pub const USAGE: u8 = 2;
    /// A check could not run (error, crash, timeout, or cut short by SIGTERM/SIGINT) and none failed; or a
    /// report could not be written.
    pub const COULD_NOT_RUN: u8 = 3;
}

/// The one place a finished run becomes an exit code.
pub fn for_run(report: &RunReport, strict: bool) -> u8 {
    let has = |s: Status| report.checks.iter().any(|c| c.status == s);
    if has(Status::Fail) || (strict && has(Status::Warn)) {
        Exit::CHECK_FAILED
    } else if has(Status::Error) {
        Exit::COULD_NOT_RUN
    } else {
        Exit::OK
    }
}

/// The code of a command whose output (a report, the termination log) could not be written: like an error, a
/// lost result never reads as a pass, and a failure found stays the verdict.
pub fn output_lost(code: u8) -> u8 {
    if code == Exit::OK {
        Exit::COULD_NOT_RUN
    } else {
        code
    }
}

/// `--help` text for the codes.
pub const HELP: &str = "Exit codes:
  0  every check passed (warnings allowed unless --strict)
  1  at least one check failed (--strict: or warned)
  2  usage or profile error; nothing was run
  3  a check could not run (error, timeout, SIGTERM/SIGINT) and none failed,
     or a report could not be written";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CheckResult;

    fn report(statuses: &[Status]) -> RunReport {
        let mut r = RunReport::empty_for_tests();
        r.checks = statuses
            .iter()
            .map(|s| CheckResult::new("t.x", *s, ""))
            .collect();
        r
    }

    #[test]
    fn codes_follow_the_contract() {
        assert_eq!(
            for_run(&report(&[Status::Pass, Status::Skip]), false),
            Exit::OK
        );
        assert_eq!(
            for_run(&report(&[Status::Pass, Status::Warn]), false),
            Exit::OK
        );
        assert_eq!(for_run(&report(&[Status::Warn]), true), Exit::CHECK_FAILED);
        assert_eq!(
            for_run(&report(&[Status::Error, Status::Fail]), false),
            Exit::CHECK_FAILED
        );
        assert_eq!(
            for_run(&report(&[Status::Error, Status::Pass]), false),
            Exit::COULD_NOT_RUN
        );
    }
}
