//! `--format prometheus`: text exposition for node_exporter's textfile collector.

use super::RunReport;

pub fn render(_report: &RunReport) -> String {
    String::new()
}
