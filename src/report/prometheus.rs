//! `--format prometheus`: text exposition format for node_exporter's textfile collector.
//!
//! Families, all gauges, named so that `promtool check metrics` is clean (base units, no abbreviations, no
//! `_total`/`_count` on a gauge):
//! - `fabric_preflight_info{version,commit,profile,host}` 1: what ran where, to join on.
//! - `fabric_preflight_run_timestamp_seconds`: when the run started (Unix time), to alert on a stale file.
//! - `fabric_preflight_run_status{status}`: one series per run status (pass, warn, fail, error), 1 for the
//!   status of this run and 0 for the others, so an alert on `{status="fail"} == 1` never sees a gap.
//! - `fabric_preflight_run_duration_seconds`.
//! - `fabric_preflight_check_status{check,subject,status}`: one series per result, with the status it got,
//!   value 1. Statuses a result did not get are not written (five series per result would multiply the
//!   series count for no gain). Results that share check, subject and status (a node-level check that
//!   reports twice) share the series, and the value counts them.
//! - `fabric_preflight_<measurement>_<base unit>{check,subject[,replayed="true"]}` for every measurement,
//!   converted to base units (GB/s and Gb/s → `bytes_per_second`, µs → `seconds`, MiB → `bytes`, % →
//!   `ratio`, GT/s → `transfers_per_second`). Unit words in the measurement's own name (`_gbytes_per_sec`,
//!   `_pct`, `_count`) give way to that suffix.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::RunReport;
use crate::model::{Measurement, Status};

const PREFIX: &str = "fabric_preflight_";
const INFO: &str = "fabric_preflight_info";
const RUN_TIMESTAMP: &str = "fabric_preflight_run_timestamp_seconds";
const RUN_STATUS: &str = "fabric_preflight_run_status";
const RUN_DURATION: &str = "fabric_preflight_run_duration_seconds";
const CHECK_STATUS: &str = "fabric_preflight_check_status";

/// Units as probes write them → (base-unit words for the metric name, factor numerator, denominator).
/// Factors below one are divisions so that `µs → s` stays exact where it can. Bits become bytes: the
/// linter's base unit for data, as in node_exporter's `node_network_speed_bytes`.
const UNITS: &[(&str, &str, f64, f64)] = &[
    ("B/s", "bytes_per_second", 1.0, 1.0),
    ("kB/s", "bytes_per_second", 1e3, 1.0),
    ("KB/s", "bytes_per_second", 1e3, 1.0),
    ("MB/s", "bytes_per_second", 1e6, 1.0),
    ("GB/s", "bytes_per_second", 1e9, 1.0),
    ("TB/s", "bytes_per_second", 1e12, 1.0),
    ("KiB/s", "bytes_per_second", 1024.0, 1.0),
    ("MiB/s", "bytes_per_second", 1048576.0, 1.0),
    ("GiB/s", "bytes_per_second", 1073741824.0, 1.0),
    ("b/s", "bytes_per_second", 1.0, 8.0),
    ("kb/s", "bytes_per_second", 1e3, 8.0),
    ("Kb/s", "bytes_per_second", 1e3, 8.0),
    ("Mb/s", "bytes_per_second", 1e6, 8.0),
    ("Gb/s", "bytes_per_second", 1e9, 8.0),
    ("Tb/s", "bytes_per_second", 1e12, 8.0),
    ("Gbps", "bytes_per_second", 1e9, 8.0),
    ("GT/s", "transfers_per_second", 1e9, 1.0),
    ("s", "seconds", 1.0, 1.0),
    ("ms", "seconds", 1.0, 1e3),
    ("us", "seconds", 1.0, 1e6),
    ("µs", "seconds", 1.0, 1e6), // U+00B5 micro sign
    ("μs", "seconds", 1.0, 1e6), // U+03BC Greek mu
    ("ns", "seconds", 1.0, 1e9),
    ("B", "bytes", 1.0, 1.0),
    ("byte", "bytes", 1.0, 1.0),
    ("bytes", "bytes", 1.0, 1.0),
    ("kB", "bytes", 1e3, 1.0),
    ("KB", "bytes", 1e3, 1.0),
    ("MB", "bytes", 1e6, 1.0),
    ("GB", "bytes", 1e9, 1.0),
    ("TB", "bytes", 1e12, 1.0),
    ("KiB", "bytes", 1024.0, 1.0),
    ("MiB", "bytes", 1048576.0, 1.0),
    ("GiB", "bytes", 1073741824.0, 1.0),
    ("TiB", "bytes", 1099511627776.0, 1.0),
    ("%", "ratio", 1.0, 100.0),
    ("Hz", "hertz", 1.0, 1.0),
    ("MHz", "hertz", 1e6, 1.0),
    ("GHz", "hertz", 1e9, 1.0),
    ("W", "watts", 1.0, 1.0),
    ("°C", "celsius", 1.0, 1.0),
    // Plain counts get no suffix: `_count` is reserved for histograms and summaries.
    ("count", "", 1.0, 1.0),
    ("counts", "", 1.0, 1.0),
];

/// Words the linter refuses in a name (abbreviated units) or that restate a unit the suffix now gives in
/// base units (`gbytes`, `gbits`, `pct`, `mib`, `milliseconds`).
fn is_unit_word(word: &str) -> bool {
    const ABBREVIATED: &[&str] = &[
        "s", "ms", "us", "ns", "sec", "secs", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d",
    ];
    const SPELLED: &[&str] = &[
        "bytes", "byte", "bits", "bit", "bps", "seconds", "second", "minutes", "hours", "days",
        "weeks", "pct", "percent",
    ];
    const PREFIXES: &[&str] = &[
        "", "k", "m", "g", "t", "p", "ki", "mi", "gi", "ti", "pico", "nano", "micro", "milli",
        "centi", "deci", "deca", "hecto", "kilo", "kibi", "mega", "mibi", "mebi", "giga", "gibi",
        "tera", "tebi", "peta", "pebi",
    ];
    ABBREVIATED.contains(&word)
        || ["kib", "mib", "gib", "tib"].contains(&word)
        || PREFIXES.iter().any(|p| {
            word.strip_prefix(p)
                .is_some_and(|rest| SPELLED.contains(&rest))
        })
}

/// Suffixes reserved for counters, histograms and summaries, and metric type names, which a gauge's name
/// must not carry.
fn is_reserved_word(word: &str) -> bool {
    [
        "total",
        "count",
        "sum",
        "bucket",
        "gauge",
        "counter",
        "histogram",
        "summary",
    ]
    .contains(&word)
}

/// One metric family: its samples stay together, after one `# HELP` and one `# TYPE`.
struct Family {
    name: String,
    help: String,
    /// `name{labels}` and the value.
    samples: Vec<(String, f64)>,
}

#[derive(Default)]
struct Exposition {
    families: Vec<Family>,
    index: HashMap<String, usize>,
    /// Series already written (name + labels): a repeated one would make the whole file invalid.
    written: HashSet<String>,
}

impl Exposition {
    /// Adds `name{labels} value` to its family; a series already written keeps its first value.
    fn sample(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        let series = format!("{name}{}", label_set(labels));
        if !self.written.insert(series.clone()) {
            return;
        }
        let i = *self.index.entry(name.to_string()).or_insert_with(|| {
            self.families.push(Family {
                name: name.to_string(),
                help: help.to_string(),
                samples: Vec::new(),
            });
            self.families.len() - 1
        });
        self.families[i].samples.push((series, value));
    }

    fn finish(self) -> String {
        let mut out = String::new();
        for f in self.families {
            // Writing into a String cannot fail.
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} gauge", f.name);
            for (series, value) in f.samples {
                let _ = writeln!(out, "{series} {}", number(value));
            }
        }
        out
    }
}

pub fn render(report: &RunReport) -> String {
    let mut x = Exposition::default();
    x.sample(
        INFO,
        "fabric-preflight build, profile and node of the last run; always 1.",
        &[
            ("version", report.tool.version.as_str()),
            ("commit", report.tool.commit.as_str()),
            ("profile", report.profile.as_str()),
            ("host", report.host.node_name.as_str()),
        ],
        1.0,
    );
    if let Some(started) = humantime::parse_rfc3339(&report.timestamp)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    {
        x.sample(
            RUN_TIMESTAMP,
            "Start of the last fabric-preflight run, in seconds since the Unix epoch.",
            &[],
            started.as_secs() as f64,
        );
    }
    for status in [Status::Pass, Status::Warn, Status::Fail, Status::Error] {
        x.sample(
            RUN_STATUS,
            "Overall result of the last fabric-preflight run: 1 for its status, 0 for the others.",
            &[("status", status.as_str())],
            if report.status() == status { 1.0 } else { 0.0 },
        );
    }
    x.sample(
        RUN_DURATION,
        "Wall-clock time of the last fabric-preflight run.",
        &[],
        report.duration_ms as f64 / 1000.0,
    );
    // Results that share check, subject and status share one series; count them first.
    let mut results: Vec<((&str, &str, Status), usize)> = Vec::new();
    for c in &report.checks {
        let key = (c.id.as_str(), c.subject.as_deref().unwrap_or(""), c.status);
        match results.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => results.push((key, 1)),
        }
    }
    for ((check, subject, status), n) in results {
        x.sample(
            CHECK_STATUS,
            "Result of one check for one subject: the series with the status it got is 1.",
            &[
                ("check", check),
                ("subject", subject),
                ("status", status.as_str()),
            ],
            n as f64,
        );
    }
    for c in &report.checks {
        let subject = c.subject.as_deref().unwrap_or("");
        for m in &c.measurements {
            let (name, value) = metric(m);
            let help = if m.unit.is_empty() {
                format!("Measurement {} from fabric-preflight checks.", m.name)
            } else {
                format!(
                    "Measurement {} from fabric-preflight checks (probe unit: {}).",
                    m.name, m.unit
                )
            };
            let mut labels = vec![("check", c.id.as_str()), ("subject", subject)];
            if m.replayed {
                labels.push(("replayed", "true"));
            }
            x.sample(&name, &help, &labels, value);
        }
    }
    x.finish()
}

/// `fabric_preflight_<name>_<base unit>` and the value in that unit.
fn metric(m: &Measurement) -> (String, f64) {
    let (unit, value) = match UNITS.iter().find(|(u, ..)| *u == m.unit) {
        Some((_, words, num, den)) => (words.to_string(), m.value * num / den),
        // Another unit is kept when it is one plain word (`lanes`, `channels`); anything else
        // (`rank (0=PIX..4=SYS)`) would only garble the name, and the help text carries it.
        None => {
            let word = sanitize(&m.unit);
            let plain = word.chars().all(|c| c.is_ascii_lowercase())
                && !is_unit_word(&word)
                && !is_reserved_word(&word);
            (if plain { word } else { String::new() }, m.value)
        }
    };
    let sanitized = sanitize(&m.name);
    let all: Vec<&str> = sanitized.split('_').filter(|w| !w.is_empty()).collect();
    // Unit words give way to the suffix; `per` goes with the unit word after it (`gbytes_per_sec`).
    let mut words: Vec<&str> = Vec::new();
    for (i, w) in all.iter().enumerate() {
        let per_unit = *w == "per" && all.get(i + 1).is_some_and(|next| is_unit_word(next));
        if !is_unit_word(w)
            && !per_unit
            && !(["gauge", "counter", "histogram", "summary"].contains(w))
        {
            words.push(w);
        }
    }
    while words.last().is_some_and(|w| is_reserved_word(w)) {
        words.pop();
    }
    // `gpu_count` in GPUs: `gpus`, not `gpu_gpus`.
    if words
        .last()
        .is_some_and(|w| unit == *w || unit == format!("{w}s"))
    {
        words.pop();
    }
    if words.is_empty() && unit.is_empty() {
        words.push("value");
    }
    let mut name = format!("{PREFIX}{}", words.join("_"));
    if !unit.is_empty() && !name.ends_with(&format!("_{unit}")) {
        if !words.is_empty() {
            name.push('_');
        }
        name.push_str(&unit);
    }
    if [INFO, RUN_TIMESTAMP, RUN_STATUS, RUN_DURATION, CHECK_STATUS].contains(&name.as_str()) {
        // A measurement must not join a family with other labels.
        name.push_str("_measurement");
    }
    (name, value)
}

/// Lower-case `[a-z0-9_]`, runs of anything else folded into one `_`. Colons are valid in metric names but
/// reserved for recording rules, so they are folded too.
fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

fn label_set(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', r#"\""#)
        .replace('\n', r"\n")
}

fn escape_help(text: &str) -> String {
    text.replace('\\', r"\\").replace('\n', r"\n")
}

/// Go's `ParseFloat` reads Rust's shortest round-trip form; non-finite values have their own spellings.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use super::*;
    use crate::model::CheckResult;
    use crate::report::HostInfo;

    /// Checks text against the exposition format (version 0.0.4) line by line: comment and sample syntax,
    /// one HELP and TYPE per family before its samples, families contiguous, no repeated series, a final
    /// newline. Returns the samples as (name, labels, value).
    fn validate(text: &str) -> Vec<(String, String, String)> {
        let name = r"[a-zA-Z_:][a-zA-Z0-9_:]*";
        let label = r#"[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*""#;
        let value = r"(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NaN|\+Inf|-Inf)";
        let comment = Regex::new(&format!(r"^# (HELP|TYPE) ({name}) (.*)$")).unwrap();
        let sample = Regex::new(&format!(
            r"^({name})(\{{(?:{label}(?:,{label})*)?\}})? ({value})(?: -?[0-9]+)?$"
        ))
        .unwrap();
        assert!(text.ends_with('\n'), "no final newline");
        let mut closed: HashSet<String> = HashSet::new();
        let mut current: Option<String> = None;
        let mut typed: HashSet<String> = HashSet::new();
        let mut helped: HashSet<String> = HashSet::new();
        let mut series: HashSet<String> = HashSet::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            let family = if let Some(c) = comment.captures(line) {
                let family = c[2].to_string();
                let seen = if &c[1] == "TYPE" {
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&&c[3]),
                        "bad type: {line}"
                    );
                    &mut typed
                } else {
                    &mut helped
                };
                assert!(seen.insert(family.clone()), "repeated {}: {line}", &c[1]);
                family
            } else if let Some(c) = sample.captures(line) {
                let family = c[1].to_string();
                assert!(
                    typed.contains(&family) && helped.contains(&family),
                    "sample before HELP and TYPE: {line}"
                );
                let labels = c.get(2).map_or("", |m| m.as_str()).to_string();
                assert!(
                    series.insert(format!("{family}{labels}")),
                    "repeated series: {line}"
                );
                samples.push((family.clone(), labels, c[3].to_string()));
                family
            } else {
                panic!("not exposition format: {line:?}");
            };
            if current.as_deref() != Some(&family) {
                assert!(!closed.contains(&family), "family split up: {line}");
                if let Some(previous) = current.replace(family) {
                    closed.insert(previous);
                }
            }
        }
        samples
    }

    fn value_of<'a>(samples: &'a [(String, String, String)], name: &str, labels: &str) -> &'a str {
        samples
            .iter()
            .find(|(n, l, _)| n == name && l == labels)
            .map(|(.., v)| v.as_str())
            .unwrap_or_else(|| panic!("no sample {name}{labels}"))
    }

    #[test]
    fn prometheus_sample_report_is_valid_exposition() {
        let text = render(&RunReport::sample_for_tests());
        let samples = validate(&text);
        assert_eq!(value_of(&samples, RUN_STATUS, r#"{status="fail"}"#), "1");
        assert_eq!(value_of(&samples, RUN_STATUS, r#"{status="pass"}"#), "0");
        assert_eq!(value_of(&samples, RUN_DURATION, ""), "1.234");
        assert_eq!(
            value_of(
                &samples,
                CHECK_STATUS,
                r#"{check="rdma.link",subject="mlx5_0/1",status="fail"}"#
            ),
            "1"
        );
        assert_eq!(
            value_of(
                &samples,
                CHECK_STATUS,
                r#"{check="nccl.transport",subject="",status="skip"}"#
            ),
            "1"
        );
        let per_result = samples.iter().filter(|(n, ..)| n == CHECK_STATUS).count();
        assert_eq!(per_result, 6);
    }

    #[test]
    fn prometheus_info_and_timestamp_identify_the_run() {
        let mut report = RunReport::sample_for_tests();
        report.timestamp = "2026-12-01T14:31:42Z".into();
        let samples = validate(&render(&report));
        let info = format!(
            r#"{{version="{}",commit="{}",profile="hgx-h200-ib",host="gpu-node-07"}}"#,
            env!("CARGO_PKG_VERSION"),
            crate::build_info::COMMIT
        );
        assert_eq!(value_of(&samples, INFO, &info), "1");
        assert_eq!(value_of(&samples, RUN_TIMESTAMP, ""), "1796135502");
    }

    #[test]
    fn prometheus_measurements_are_in_base_units_with_labels() {
        let samples = validate(&render(&RunReport::sample_for_tests()));
        assert_eq!(
            value_of(
                &samples,
                "fabric_preflight_link_rate_bytes_per_second",
                r#"{check="rdma.link",subject="mlx5_0/1",replayed="true"}"#
            ),
            "12500000000"
        );
        assert_eq!(
            value_of(
                &samples,
                "fabric_preflight_h2d_bandwidth_bytes_per_second",
                r#"{check="rdma.memlock",subject=""}"#
            ),
            "52500000000"
        );
        assert_eq!(
            value_of(
                &samples,
                "fabric_preflight_memlock_soft_bytes",
                r#"{check="rdma.memlock",subject=""}"#
            ),
            "67108864"
        );
        assert_eq!(
            value_of(
                &samples,
                "fabric_preflight_link_width_lanes",
                r#"{check="pcie.link",subject="0000:17:00.0"}"#
            ),
            "8"
        );
    }

    #[test]
    fn prometheus_unit_names_follow_base_units() {
        let cases = [
            (
                "latency",
                2.5,
                "us",
                "fabric_preflight_latency_seconds",
                2.5e-6,
            ),
            (
                "latency",
                3.0,
                "µs",
                "fabric_preflight_latency_seconds",
                3e-6,
            ),
            ("rtt", 1500.0, "ms", "fabric_preflight_rtt_seconds", 1.5),
            ("bar1", 2.0, "MiB", "fabric_preflight_bar1_bytes", 2097152.0),
            ("used", 50.0, "%", "fabric_preflight_used_ratio", 0.5),
            (
                "speed",
                32.0,
                "GT/s",
                "fabric_preflight_speed_transfers_per_second",
                32e9,
            ),
            // What the probes wrote before the names were linted: unit words and reserved suffixes in the
            // measurement's own name, bits, a unit sentence.
            (
                "gds_read_gbytes_per_sec",
                3.0,
                "GB/s",
                "fabric_preflight_gds_read_bytes_per_second",
                3e9,
            ),
            (
                "gdr_write_gbits_per_sec",
                400.0,
                "Gb/s",
                "fabric_preflight_gdr_write_bytes_per_second",
                5e10,
            ),
            (
                "gdr_write_pct_of_link",
                97.0,
                "%",
                "fabric_preflight_gdr_write_of_link_ratio",
                0.97,
            ),
            (
                "error_counts_total",
                3.0,
                "count",
                "fabric_preflight_error_counts",
                3.0,
            ),
            (
                "pcie_replay_count",
                2.0,
                "count",
                "fabric_preflight_pcie_replay",
                2.0,
            ),
            (
                "nearest_nic_distance",
                1.0,
                "rank (0=PIX..4=SYS)",
                "fabric_preflight_nearest_nic_distance",
                1.0,
            ),
            (
                "latency_ms",
                2.0,
                "ms",
                "fabric_preflight_latency_seconds",
                2e-3,
            ),
            ("count", 2.0, "", "fabric_preflight_value", 2.0),
            ("per_gpu", 2.0, "", "fabric_preflight_per_gpu", 2.0),
            ("gpu_count", 8.0, "GPUs", "fabric_preflight_gpus", 8.0),
            ("lanes", 8.0, "lanes", "fabric_preflight_lanes", 8.0),
            ("errors", 3.0, "count", "fabric_preflight_errors", 3.0),
            ("lanes_down", 1.0, "", "fabric_preflight_lanes_down", 1.0),
            (
                "size_bytes",
                4.0,
                "bytes",
                "fabric_preflight_size_bytes",
                4.0,
            ),
            (
                "Weird.Name-x",
                1.0,
                "widgets",
                "fabric_preflight_weird_name_x_widgets",
                1.0,
            ),
        ];
        for (name, value, unit, want_name, want_value) in cases {
            let (got_name, got_value) = metric(&Measurement::new(name, value, unit));
            assert_eq!(got_name, want_name, "{name} {unit}");
            assert!(
                (got_value - want_value).abs() <= want_value.abs() * 1e-12,
                "{name} {unit}: {got_value} != {want_value}"
            );
        }
    }

    #[test]
    fn prometheus_nasty_labels_and_non_finite_values_stay_valid() {
        let report = RunReport::new(
            HostInfo {
                hostname: "n".into(),
                node_name: "n".into(),
                kernel: "k".into(),
                root: "/".into(),
                environment: None,
            },
            "generic".into(),
            0,
            vec![
                CheckResult::fail("x.quote", "s")
                    .subject("a\"b\\c\nd")
                    .measure(Measurement::new("nan_value", f64::NAN, "GB/s"))
                    .measure(Measurement::new("big", f64::INFINITY, "s"))
                    .measure(Measurement::new("small", f64::NEG_INFINITY, "")),
                // Same check, no subject, twice: one series counting both.
                CheckResult::warn("x.twice", "a"),
                CheckResult::warn("x.twice", "b"),
                CheckResult::pass("x.collide", "a")
                    .measure(Measurement::new("check", 1.0, "status"))
                    .measure(Measurement::new("check", 2.0, "status")),
            ],
        );
        let samples = validate(&render(&report));
        let quoted = r#"{check="x.quote",subject="a\"b\\c\nd"}"#;
        assert_eq!(
            value_of(
                &samples,
                "fabric_preflight_nan_value_bytes_per_second",
                quoted
            ),
            "NaN"
        );
        assert_eq!(
            value_of(&samples, "fabric_preflight_big_seconds", quoted),
            "+Inf"
        );
        assert_eq!(value_of(&samples, "fabric_preflight_small", quoted), "-Inf");
        assert_eq!(
            value_of(
                &samples,
                CHECK_STATUS,
                r#"{check="x.twice",subject="",status="warn"}"#
            ),
            "2"
        );
        assert_eq!(
            value_of(
                &samples,
                "fabric_preflight_check_status_measurement",
                r#"{check="x.collide",subject=""}"#
            ),
            "1"
        );
    }

    #[test]
    fn prometheus_families_stay_contiguous_across_results() {
        // The same measurement from two checks, with another family in between in report order.
        let report = RunReport::new(
            RunReport::empty_for_tests().host,
            "generic".into(),
            0,
            vec![
                CheckResult::pass("a.one", "")
                    .subject("gpu0")
                    .measure(Measurement::new("h2d", 50.0, "GB/s"))
                    .measure(Measurement::new("d2h", 50.0, "GB/s")),
                CheckResult::pass("a.one", "")
                    .subject("gpu1")
                    .measure(Measurement::new("h2d", 51.0, "GB/s"))
                    .measure(Measurement::new("d2h", 51.0, "GB/s").replayed(true)),
            ],
        );
        let samples = validate(&render(&report));
        assert_eq!(
            samples
                .iter()
                .filter(|(n, ..)| n == "fabric_preflight_h2d_bytes_per_second")
                .count(),
            2
        );
    }

    #[test]
    fn prometheus_validator_rejects_split_families() {
        let split =
            "# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\na{x=\"1\"} 2\n";
        assert!(std::panic::catch_unwind(|| validate(split)).is_err());
        let good = "# HELP a x\n# TYPE a gauge\na{x=\"\\\"\"} 1.5e-3\n";
        assert_eq!(validate(good).len(), 1);
        let bad_label = "# HELP a x\n# TYPE a gauge\na{x=\"\"\"} 1\n";
        assert!(std::panic::catch_unwind(|| validate(bad_label)).is_err());
    }
}
