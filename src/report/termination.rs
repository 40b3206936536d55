//! `--termination-log PATH`: what `kubectl describe pod` shows for an init container (at most 4096 bytes).

use super::RunReport;

pub fn render(_report: &RunReport) -> String {
    String::new()
}
