//! Exit codes: the contract with CI gates and Kubernetes init containers. The README and `--help` repeat the
//! doc comment of each constant.

use crate::model::{CheckResult, Status};

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

/// The one place results become an exit code (`run`, `pair`, and the `exit_code` of every report).
pub fn for_checks(checks: &[CheckResult], strict: bool) -> u8 {
    let has = |s: Status| checks.iter().any(|c| c.status == s);
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

/// Node Problem Detector's codes for the custom-plugin protocol (`--format npd` on stdout).
pub enum Npd {}

impl Npd {
    pub const OK: u8 = 0;
    pub const NON_OK: u8 = 1;
    pub const UNKNOWN: u8 = 2;
}

/// An exit code in NPD's terms: a failure is NonOK, a check that could not run leaves the condition Unknown
/// (as does a usage error, whose code 2 already is NPD's Unknown).
pub fn for_npd(code: u8) -> u8 {
    match code {
        Exit::OK => Npd::OK,
        Exit::CHECK_FAILED => Npd::NON_OK,
        _ => Npd::UNKNOWN,
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

    fn checks(statuses: &[Status]) -> Vec<CheckResult> {
        statuses
            .iter()
            .map(|s| CheckResult::new("t.x", *s, ""))
            .collect()
    }

    #[test]
    fn codes_follow_the_contract() {
        let code = |s: &[Status], strict| for_checks(&checks(s), strict);
        assert_eq!(code(&[Status::Pass, Status::Skip], false), Exit::OK);
        assert_eq!(code(&[Status::Pass, Status::Warn], false), Exit::OK);
        assert_eq!(code(&[Status::Warn], true), Exit::CHECK_FAILED);
        assert_eq!(
            code(&[Status::Error, Status::Fail], false),
            Exit::CHECK_FAILED
        );
        assert_eq!(
            code(&[Status::Error, Status::Pass], false),
            Exit::COULD_NOT_RUN
        );
        assert_eq!(code(&[], true), Exit::OK);
    }

    #[test]
    fn npd_codes_follow_the_plugin_protocol() {
        assert_eq!(for_npd(Exit::OK), 0);
        assert_eq!(for_npd(Exit::CHECK_FAILED), 1);
        assert_eq!(for_npd(Exit::COULD_NOT_RUN), 2);
        assert_eq!(for_npd(Exit::USAGE), 2);
    }
}
