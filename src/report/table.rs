//! `--format table`: one row per result, then evidence and remediation for everything that did not pass.

use super::{RunReport, Style};

pub fn render(report: &RunReport, _style: Style) -> String {
    let mut out = String::new();
    for c in &report.checks {
        out.push_str(&format!(
            "{:5} {} {} {}\n",
            c.status.as_str(),
            c.id,
            c.subject.as_deref().unwrap_or(""),
            c.summary
        ));
    }
    out
}
