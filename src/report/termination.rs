//! `--termination-log PATH`: what `kubectl describe pod` shows for an init container. Kubernetes keeps at
//! most 4096 bytes of it, so the text is built to fit: a verdict line, then one line per failure, error and
//! warning (in that order), and a `… (N more)` line for what did not fit.

use super::{in_order, label, RunReport};
use crate::model::{CheckResult, Status};

/// Kubernetes truncates the termination message beyond this many bytes.
pub const MAX_BYTES: usize = 4096;
/// One result line may take at most this much, so one huge summary cannot crowd out the others.
const MAX_LINE_BYTES: usize = 512;
/// Room kept for the `… (N more)` line while more lines follow.
const MORE_LINE_BYTES: usize = 32;

pub fn render(report: &RunReport) -> String {
    let warnings = report.count(Status::Warn);
    // Under --strict a run with warnings exits 1 while its worst status may be WARN: say why.
    let note = if let Some(signal) = &report.interrupted {
        format!(" (interrupted by {signal})")
    } else if report.strict && warnings > 0 && report.status() != Status::Fail {
        " (exit 1: --strict fails warnings)".to_string()
    } else {
        String::new()
    };
    let header = format!(
        "fabric-preflight {}{note}: {} checks, {} failed, {} errors, {} warnings (profile {})",
        label(report.status()),
        report.checks.len(),
        report.count(Status::Fail),
        report.count(Status::Error),
        warnings,
        one_line(&report.profile),
    );
    let mut out = String::new();
    push_line(&mut out, &header, MAX_BYTES - MORE_LINE_BYTES);

    let listed = problems(report);
    for (i, c) in listed.iter().enumerate() {
        let line = problem_line(c, "");
        let line = truncate(&line, MAX_LINE_BYTES);
        let left_after = listed.len() - i - 1;
        let reserve = if left_after > 0 { MORE_LINE_BYTES } else { 0 };
        if out.len() + line.len() + 1 + reserve > MAX_BYTES {
            out.push_str(&format!("… ({} more)\n", listed.len() - i));
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The failures, errors and warnings, in that order: what the one-line reports (this and NPD's) list.
pub(super) fn problems(report: &RunReport) -> Vec<&CheckResult> {
    in_order(&report.checks, &[Status::Fail, Status::Error, Status::Warn]).collect()
}

/// `FAIL rdma.link mlx5_0/1{note}: port down`, on one line.
pub(super) fn problem_line(c: &CheckResult, note: &str) -> String {
    let subject = c
        .subject
        .as_deref()
        .map(|s| format!(" {}", one_line(s)))
        .unwrap_or_default();
    format!(
        "{} {}{subject}{note}: {}",
        label(c.status),
        c.id,
        one_line(&c.summary)
    )
}

/// The termination log of a run refused before any check ran (exit 2): the reason, cut to fit.
pub fn render_usage_error(message: &str) -> String {
    let mut out = String::new();
    push_line(
        &mut out,
        &format!(
            "fabric-preflight usage error (exit 2), nothing was run: {}",
            one_line(message)
        ),
        MAX_BYTES,
    );
    out
}

/// Appends `text` cut to `max` bytes, and a newline.
fn push_line(out: &mut String, text: &str, max: usize) {
    out.push_str(truncate(text, max.saturating_sub(1)));
    out.push('\n');
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(super) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Line breaks inside a summary would break the one-line-per-result layout; other control characters are
/// shown as escapes (`kubectl describe` and NPD put these lines on a terminal).
pub(super) fn one_line(text: &str) -> String {
    super::escape_controls(&text.replace('\n', " ")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CheckResult;

    #[test]
    fn termination_sample_lists_fail_error_warn_after_the_verdict() {
        let text = render(&RunReport::sample_for_tests());
        assert_eq!(
            text,
            "fabric-preflight FAIL: 6 checks, 1 failed, 1 errors, 1 warnings (profile hgx-h200-ib)\n\
             FAIL rdma.link mlx5_0/1: port down\n\
             ERROR gds.kernel_path: cannot read /proc/driver/nvidia-fs/stats\n\
             WARN pcie.link 0000:17:00.0: GPU link downtrained to x8\n"
        );
    }

    #[test]
    fn termination_all_pass_is_one_line() {
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![
            CheckResult::pass("a.b", "fine"),
            CheckResult::skip("a.c", "n/a"),
        ];
        assert_eq!(
            render(&report),
            "fabric-preflight PASS: 2 checks, 0 failed, 0 errors, 0 warnings (profile generic)\n"
        );
    }

    #[test]
    fn termination_500_long_failures_fit_in_4096_bytes() {
        let checks: Vec<CheckResult> = (0..500)
            .map(|i| {
                CheckResult::fail("rdma.link", "ポートがダウン — link down ".repeat(40))
                    .subject(format!("mlx5_{i}/1"))
            })
            .collect();
        let report = RunReport::new(
            RunReport::empty_for_tests().host,
            "generic".into(),
            1,
            checks,
        );
        let text = render(&report);
        assert!(text.len() <= MAX_BYTES, "{} bytes", text.len());
        // It is valid UTF-8 by construction (a String); check no line was cut mid-character by re-encoding.
        assert!(std::str::from_utf8(text.as_bytes()).is_ok());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("fabric-preflight FAIL: 500 checks, 500 failed"));
        let shown = lines.len() - 2;
        assert!(shown > 0);
        assert!(lines[1..=shown]
            .iter()
            .all(|l| l.starts_with("FAIL rdma.link mlx5_")));
        assert!(lines[1..=shown].iter().all(|l| l.len() <= MAX_LINE_BYTES));
        assert_eq!(*lines.last().unwrap(), format!("… ({} more)", 500 - shown));
    }

    #[test]
    fn termination_fits_exactly_without_a_more_line_when_everything_fits() {
        // Lines sized so that the total lands close to the limit: no "more" line when nothing is left out.
        let checks: Vec<CheckResult> = (0..8)
            .map(|i| CheckResult::fail("a.b", "x".repeat(480)).subject(format!("s{i}")))
            .collect();
        let report = RunReport::new(RunReport::empty_for_tests().host, "p".into(), 1, checks);
        let text = render(&report);
        assert!(text.len() <= MAX_BYTES);
        assert!(!text.contains("more)"), "{text}");
        assert!(text.len() > MAX_BYTES - 100, "{} bytes", text.len());
        assert_eq!(text.lines().count(), 9);
    }

    #[test]
    fn termination_multiline_summary_stays_on_one_line() {
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![CheckResult::error("a.b", "first\nsecond")];
        assert_eq!(
            render(&report).lines().nth(1),
            Some("ERROR a.b: first second")
        );
    }

    #[test]
    fn termination_strict_with_warnings_says_why_the_exit_is_1() {
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![CheckResult::warn("pcie.link", "x8")];
        report.strict = true;
        assert!(render(&report).starts_with(
            "fabric-preflight WARN (exit 1: --strict fails warnings): 1 checks, 0 failed, 0 errors, 1 warnings"
        ));
        report.strict = false;
        assert!(render(&report).starts_with("fabric-preflight WARN: 1 checks"));
    }

    #[test]
    fn usage_error_is_one_bounded_line() {
        let text = render_usage_error(&"profile site.yaml:4:3: unknown field\n".repeat(500));
        assert!(text.len() <= MAX_BYTES);
        assert!(text.starts_with(
            "fabric-preflight usage error (exit 2), nothing was run: profile site.yaml:4:3"
        ));
        assert_eq!(text.lines().count(), 1);
    }

    #[test]
    fn truncate_backs_off_to_a_character_boundary() {
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("aé", 3), "aé");
        assert_eq!(truncate("…", 2), "");
    }
}
