//! The finished run and its renderings. Reporters turn a [`RunReport`] into text and never decide anything:
//! colour and width come in through [`Style`].

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::auto_profile::Selection;
use crate::host::Host;
use crate::model::{AnswerSource, CheckResult, EvidenceValue, Finding, Measurement, Status};
use crate::rules::environment::{self, Detected};
use crate::sysfs::kernel::{read_release, HOSTNAME};

pub mod file;
pub(crate) mod json;
pub(crate) mod junit;
pub(crate) mod npd;
pub(crate) mod output;
pub(crate) mod prometheus;
pub(crate) mod table;
pub mod termination;

/// Text from the host, a profile, a log or the command line as a terminal is to show it: every control
/// character but the line break (C0 and DEL: ESC sequences that move the cursor or erase lines, BEL,
/// backspace, carriage return; C1, such as the one-byte CSI U+009B) written as a visible escape, `\x1b` or
/// `\u{9b}`. Applied where such text enters a human rendering; JSON, JUnit and Prometheus escape in their own
/// syntax, and the renderers' own colour codes are added after it.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    let is_hostile = |c: char| c.is_control() && c != '\n';
    if !text.chars().any(is_hostile) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match u32::from(c) {
            _ if !is_hostile(c) => shown.push(c),
            code @ 0..=0x7f => {
                let _ = write!(shown, "\\x{code:02x}");
            }
            code => {
                let _ = write!(shown, "\\u{{{code:x}}}");
            }
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// 2: `ring` (a `pair --ring` node's place in the ring and its links' verdicts).
/// 3: each result's `findings` (stable codes, remediation steps) and `evidence_values`.
/// 4: `host.environment` (bare metal or a VM, in a container or not, and the evidence).
pub const SCHEMA_VERSION: u32 = 4;

/// A finished run. Its verdict is not stored: [`RunReport::status`] and [`RunReport::exit_code`] are computed
/// from the results each time (the JSON report carries both; reading one back ignores them).
#[derive(Debug, Clone, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub tool: ToolInfo,
    pub host: HostInfo,
    pub profile: String,
    /// How `--profile auto` chose `profile`; None when a profile was named.
    pub profile_selection: Option<Selection>,
    /// When the run started, RFC 3339 in UTC to the second.
    pub timestamp: String,
    /// `--strict`: warnings fail the run (JUnit counts them as failures, the termination log says so).
    pub strict: bool,
    pub duration_ms: u64,
    pub checks: Vec<CheckResult>,
    /// Where library answers come from on this run: `live` (the libraries are called, also under a `--root`
    /// without `vendor-answers.json`) or `recorded`. Each result built on them carries its own mark too.
    #[serde(default)]
    pub library_answers: Option<AnswerSource>,
    /// The signal (`SIGTERM`, `SIGINT`) that stopped the run early; the checks it cut short are errors.
    #[serde(default)]
    pub interrupted: Option<String>,
    /// `pair --ring`: this node's place in the ring and how each of its links ended (`pair --summarize` reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<Ring>,
}

/// A ring node's place and links, as its report carries them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ring {
    /// Every node of the ring, in rank order.
    pub members: Vec<String>,
    /// This node's rank: its place in `members`.
    pub rank: usize,
    /// Where rank and members came from (`--peers`, Slurm's variables, a hostfile, a DNS name).
    pub source: String,
    /// This node's links: with its predecessor, then with its successor.
    pub links: Vec<RingLink>,
}

/// One ring link from one end: its two nodes and the worst result of its port pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingLink {
    pub a: String,
    pub b: String,
    pub status: Status,
}

/// The JSON form of a [`RunReport`], field order as the README documents it.
#[derive(Serialize)]
struct Wire<'a> {
    schema_version: u32,
    tool: &'a ToolInfo,
    host: &'a HostInfo,
    profile: &'a str,
    profile_selection: &'a Option<Selection>,
    timestamp: &'a str,
    /// `pass`, `warn`, `fail` or `error` (skips count as pass).
    status: Status,
    strict: bool,
    /// The exit code this verdict gives (see [`crate::exit`]).
    exit_code: u8,
    duration_ms: u64,
    checks: Vec<CheckWire<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    library_answers: Option<AnswerSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupted: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ring: &'a Option<Ring>,
}

/// A result as JSON carries it: its fields, then its `key = value` evidence as data.
#[derive(Serialize)]
struct CheckWire<'a> {
    #[serde(flatten)]
    result: &'a CheckResult,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    evidence_values: Vec<EvidenceValue<'a>>,
}

impl Serialize for RunReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Destructured without `..`: a field added to RunReport does not compile until it is written here too.
        let RunReport {
            schema_version,
            tool,
            host,
            profile,
            profile_selection,
            timestamp,
            strict,
            duration_ms,
            checks,
            library_answers,
            interrupted,
            ring,
        } = self;
        Wire {
            schema_version: *schema_version,
            tool,
            host,
            profile,
            profile_selection,
            timestamp,
            status: self.status(),
            strict: *strict,
            exit_code: self.exit_code(),
            duration_ms: *duration_ms,
            checks: checks
                .iter()
                .map(|result| CheckWire {
                    result,
                    evidence_values: result.evidence_values(),
                })
                .collect(),
            library_answers: *library_answers,
            interrupted: interrupted.as_deref(),
            ring,
        }
        .serialize(s)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
    /// Git commit the binary was built from (`unknown` outside a git checkout).
    pub commit: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    /// The name reports are filed under: `--node-name`/`NODE_NAME` (Kubernetes' downward API, which then
    /// replaces `hostname` too: a pod's own hostname names the pod), else `hostname`.
    pub node_name: String,
    pub kernel: String,
    /// `/` live, or the recorded tree given with `--root`.
    pub root: String,
    /// Bare metal or a VM, in a container or not, with the files that showed it (absent from reports older
    /// than schema_version 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Detected>,
}

impl HostInfo {
    /// The host as every report names it: its host name (`unknown` when unreadable or empty: reports still need
    /// a name to be filed under), kernel release and root. `node_name` (`--node-name`/`NODE_NAME`), when given,
    /// names it instead: in a pod the kernel's host name is the pod's.
    pub fn read(host: &Host, node_name: Option<&str>) -> HostInfo {
        let hostname = node_name
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .or_else(|| host.read(HOSTNAME).ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "unknown".into());
        HostInfo {
            node_name: hostname.clone(),
            hostname,
            // Through the shared reader: the checks read the release too.
            kernel: read_release(host).unwrap_or_else(|_| "unknown".into()),
            root: host.root().display().to_string(),
            environment: Some(environment::detect(host)),
        }
    }
}

impl RunReport {
    pub fn new(
        host: HostInfo,
        profile: String,
        duration_ms: u64,
        checks: Vec<CheckResult>,
    ) -> Self {
        RunReport {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo {
                name: env!("CARGO_PKG_NAME").into(),
                version: env!("CARGO_PKG_VERSION").into(),
                commit: crate::build_info::COMMIT.into(),
            },
            host,
            profile,
            profile_selection: None,
            timestamp: rfc3339(SystemTime::now()),
            strict: false,
            duration_ms,
            checks,
            library_answers: None,
            interrupted: None,
            ring: None,
        }
    }

    /// Judges warnings as failures (`--strict`).
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// `pass`, `warn`, `fail` or `error` (skips count as pass).
    pub fn status(&self) -> Status {
        overall(&self.checks)
    }

    /// The exit code these results give (see [`crate::exit::for_checks`]).
    pub fn exit_code(&self) -> u8 {
        crate::exit::for_checks(&self.checks, self.strict)
    }

    /// The results that make the run fail: failures and errors, and warnings under `--strict`.
    pub fn is_problem(&self, c: &CheckResult) -> bool {
        matches!(c.status, Status::Fail | Status::Error)
            || (self.strict && c.status == Status::Warn)
    }

    /// How many results have this status.
    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    #[cfg(test)]
    pub fn empty_for_tests() -> Self {
        RunReport::new(
            HostInfo {
                hostname: "node1".into(),
                node_name: "node1".into(),
                kernel: "6.8.0".into(),
                root: "/".into(),
                environment: None,
            },
            "generic".into(),
            0,
            vec![],
        )
    }

    /// One result of every status, with subjects, evidence, measurements (one replayed) and fixes.
    #[cfg(test)]
    pub fn sample_for_tests() -> Self {
        let limit = crate::model::Limit::new(Some(200.0), Some(100.0));
        RunReport::new(
            HostInfo {
                hostname: "gpu-node-07".into(),
                node_name: "gpu-node-07".into(),
                kernel: "6.8.0-45-generic".into(),
                root: "testdata/hosts/h200-ib".into(),
                environment: None,
            },
            "hgx-h200-ib".into(),
            1234,
            vec![
                CheckResult::pass("driver.nvidia", "driver 580.65.06 loaded")
                    .evidence("/proc/driver/nvidia/version", "NVRM version: 580.65.06"),
                CheckResult::fail("rdma.link", "port down")
                    .subject("mlx5_0/1")
                    .evidence("/sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN")
                    .evidence("/sys/class/infiniband/mlx5_0/ports/1/phys_state", "3: Disabled")
                    .measure(
                        Measurement::new("link_rate", 100.0, "Gb/s")
                            .judged_by(&limit)
                            .replayed(true),
                    )
                    .fix("check the cable, then `ibportstate -D 0 1 enable`"),
                CheckResult::warn("pcie.link", "GPU link downtrained to x8")
                    .subject("0000:17:00.0")
                    .evidence(
                        "/sys/bus/pci/devices/0000:17:00.0/current_link_width",
                        "8 (the device reports a maximum of 16 lanes; a downtrained link halves host-device bandwidth)",
                    )
                    .measure(Measurement::new("link_width", 8.0, "lanes"))
                    .fix("reseat the GPU or check the riser; see `lspci -vvv -s 17:00.0`"),
                CheckResult::error("gds.kernel_path", "cannot read /proc/driver/nvidia-fs/stats")
                    .evidence("/proc/driver/nvidia-fs/stats", "Permission denied (os error 13)"),
                CheckResult::skip("nccl.transport", "no --nccl-log given"),
                CheckResult::pass("rdma.memlock", "memlock unlimited")
                    .measure(Measurement::new("memlock_soft", 65536.0, "KiB"))
                    .measure(Measurement::new("h2d_bandwidth", 52.5, "GB/s")),
            ],
        )
    }
}

/// `2026-12-01T14:31:42Z`.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

pub use crate::model::overall;

/// The upper-case status word the human-facing formats (table, termination log) show.
pub fn label(status: Status) -> &'static str {
    match status {
        Status::Pass => "PASS",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
        Status::Skip => "SKIP",
        Status::Error => "ERROR",
    }
}

/// The results with the given statuses, grouped in that order, report order within a group.
pub fn in_order<'a>(
    checks: &'a [CheckResult],
    order: &'a [Status],
) -> impl Iterator<Item = &'a CheckResult> {
    order
        .iter()
        .flat_map(move |s| checks.iter().filter(move |c| c.status == *s))
}

/// `name = value unit (warn X, fail Y) (replayed)`: one measurement as people read it.
/// `finding GDS003 (fail, step reconfigure): message`: one coded finding on one line.
pub fn describe_finding(f: &Finding) -> String {
    let step = f.step.map(|s| format!(", step {s}")).unwrap_or_default();
    format!("finding {} ({}{step}): {}", f.code, f.status, f.message)
}

pub fn describe_measurement(m: &Measurement) -> String {
    let mut text = format!("{} = {}", m.name, m.value);
    if !m.unit.is_empty() {
        text.push(' ');
        text.push_str(&m.unit);
    }
    let limits: Vec<String> = [("warn", m.warn), ("fail", m.fail)]
        .iter()
        .filter_map(|(word, limit)| limit.map(|l| format!("{word} {l}")))
        .collect();
    if !limits.is_empty() {
        text.push_str(&format!(" ({})", limits.join(", ")));
    }
    if m.replayed {
        text.push_str(" (replayed)");
    }
    text
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Junit,
    Prometheus,
    /// Node Problem Detector custom plugin: one line; exit 0 OK, 1 NonOK, 2 Unknown.
    Npd,
}

/// Presentation choices made once, from flags and the terminal.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
    /// Terminal width for the table (80 when unknown).
    pub width: u16,
    /// `--quiet`: the table shows only what fails the run.
    pub quiet: bool,
    /// `--verbose`: the table details skipped checks too (by default only fail, error and warn).
    pub verbose: bool,
}

impl Style {
    pub const PLAIN: Style = Style {
        color: false,
        width: 80,
        quiet: false,
        verbose: false,
    };
}

/// The widest label of a `label   value` line that [`fit`] keeps beside its value.
const MAX_LABEL: usize = 24;

/// Text re-wrapped so that no line is wider than `width` characters: a long line continues at its own
/// indentation (a list item `- …` two columns further in, under its text; a `label   value` line under its
/// value). Lines that fit are left alone (tables that were laid out for the width already).
pub fn fit(text: &str, width: u16) -> String {
    let width = usize::from(width.max(table::MIN_WIDTH));
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.chars().count() <= width {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let body = line.trim_start();
        let indent = line.len() - body.len();
        // `label   value`: the label and its padding stay, the value wraps in its own column.
        let (head, text) = match body.find("  ") {
            Some(gap) if gap <= MAX_LABEL => {
                let value_at = gap + body[gap..].len() - body[gap..].trim_start().len();
                body.split_at(value_at)
            }
            _ => ("", body),
        };
        let lead = indent + head.chars().count();
        let item = head.is_empty() && text.starts_with("- ");
        let hang = (lead + if item { 2 } else { 0 }).min(width / 2);
        let first = width.saturating_sub(lead).max(width / 2);
        for (i, part) in table::wrap(text, first, width - hang).iter().enumerate() {
            if i == 0 {
                out.push_str(&line[..indent]);
                out.push_str(head);
            } else {
                out.push_str(&" ".repeat(hang));
            }
            out.push_str(part);
            out.push('\n');
        }
    }
    out
}

pub fn render(format: Format, report: &RunReport, style: Style) -> String {
    match format {
        Format::Table => table::render(report, style),
        Format::Json => json::render(report),
        Format::Junit => junit::render(report),
        Format::Prometheus => prometheus::render(report),
        Format::Npd => npd::render(report),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fit_keeps_labels_and_hangs_under_the_value_or_the_item() {
        let long = "word ".repeat(30);
        let fitted = super::fit(
            &format!(
                "expected       {long}\n  - {long}\nshort  line\nnet devices    {long}\n{long}"
            ),
            60,
        );
        let lines: Vec<&str> = fitted.lines().collect();
        assert!(lines[0].starts_with("expected       word"), "{fitted}");
        assert!(lines[1].starts_with("               word"), "{fitted}");
        let item = lines.iter().position(|l| l.starts_with("  - ")).unwrap();
        assert!(lines[item + 1].starts_with("    word"), "{fitted}");
        assert!(lines.contains(&"short  line"), "{fitted}");
        let net = lines
            .iter()
            .position(|l| l.starts_with("net devices    word"))
            .unwrap();
        assert!(
            lines[net + 1].starts_with("               word"),
            "{fitted}"
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 60), "{fitted}");
        assert!(lines.last().unwrap().starts_with("word"), "{fitted}");
    }

    use super::*;

    #[test]
    fn control_characters_but_the_line_break_are_shown_as_escapes() {
        assert_eq!(
            escape_controls("fw \x1b[1A\x1b[2K\x07\x08\r\t\x7f\u{85}\u{9b}2K é\n"),
            "fw \\x1b[1A\\x1b[2K\\x07\\x08\\x0d\\x09\\x7f\\u{85}\\u{9b}2K é\n"
        );
        assert!(matches!(
            escape_controls("plain\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn measurement_with_limits_and_replay_reads_as_one_line() {
        let m = Measurement {
            warn: Some(200.0),
            fail: Some(100.0),
            ..Measurement::new("rate", 100.0, "Gb/s")
        }
        .replayed(true);
        assert_eq!(
            describe_measurement(&m),
            "rate = 100 Gb/s (warn 200, fail 100) (replayed)"
        );
    }

    #[test]
    fn measurement_without_unit_or_limits_is_name_and_value() {
        assert_eq!(
            describe_measurement(&Measurement::new("lanes_down", 2.0, "")),
            "lanes_down = 2"
        );
    }

    #[test]
    fn in_order_groups_by_status_keeping_report_order() {
        let checks = vec![
            CheckResult::warn("a.w", ""),
            CheckResult::fail("a.f1", ""),
            CheckResult::pass("a.p", ""),
            CheckResult::fail("a.f2", ""),
        ];
        let ids: Vec<&str> = in_order(&checks, &[Status::Fail, Status::Warn])
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, ["a.f1", "a.f2", "a.w"]);
    }
}
