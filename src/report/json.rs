//! `--format json`: the fleet contract (`schema_version` 3). Field names and meanings are documented in the
//! README; add fields, never rename or remove them.

use super::RunReport;

pub fn render(report: &RunReport) -> String {
    // Serialising plain data with string keys cannot fail.
    let mut text = serde_json::to_string_pretty(report).unwrap_or_default();
    text.push('\n');
    text
}
