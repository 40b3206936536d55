//! `--format junit`: one testsuite per run, one testcase per result.

use super::RunReport;

pub fn render(_report: &RunReport) -> String {
    String::new()
}
