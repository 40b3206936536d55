//! The finished run and its renderings. Reporters turn a [`RunReport`] into text and never decide anything:
//! colour and width come in through [`Style`].

use serde::{Deserialize, Serialize};

use crate::probe::{CheckResult, Status};
use crate::threshold::worst;

pub mod json;
pub mod junit;
pub mod prometheus;
pub mod table;
pub mod termination;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub tool: ToolInfo,
    pub host: HostInfo,
    pub profile: String,
    /// `pass`, `warn`, `fail` or `error` (skips count as pass).
    pub status: Status,
    pub duration_ms: u64,
    pub checks: Vec<CheckResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub kernel: String,
    /// `/` live, or the recorded tree given with `--root`.
    pub root: String,
}

impl RunReport {
    pub fn new(
        host: HostInfo,
        profile: String,
        duration_ms: u64,
        checks: Vec<CheckResult>,
    ) -> Self {
        let status = overall(&checks);
        RunReport {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo {
                name: env!("CARGO_PKG_NAME").into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            host,
            profile,
            status,
            duration_ms,
            checks,
        }
    }

    #[cfg(test)]
    pub fn empty_for_tests() -> Self {
        RunReport::new(
            HostInfo {
                hostname: "node1".into(),
                kernel: "6.8.0".into(),
                root: "/".into(),
            },
            "generic".into(),
            0,
            vec![],
        )
    }
}

/// fail > error > warn > pass; a skip is not a problem on its own.
pub fn overall(checks: &[CheckResult]) -> Status {
    let s = worst(checks.iter().map(|c| {
        if c.status == Status::Skip {
            Status::Pass
        } else {
            c.status
        }
    }));
    match s {
        Status::Skip => Status::Pass,
        other => other,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Junit,
    Prometheus,
}

/// Presentation choices made once, from flags and the terminal.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
    /// Terminal width for the table (80 when unknown).
    pub width: u16,
}

impl Style {
    pub const PLAIN: Style = Style {
        color: false,
        width: 80,
    };
}

pub fn render(format: Format, report: &RunReport, style: Style) -> String {
    match format {
        Format::Table => table::render(report, style),
        Format::Json => json::render(report),
        Format::Junit => junit::render(report),
        Format::Prometheus => prometheus::render(report),
    }
}
