//! `--format table`: one row per result, then evidence and remediation for what needs attention (fail, error,
//! warn; skips too under `--verbose`), then a summary line. Each result is said once: a skip's reason is its
//! row. Colour and width come in through [`Style`]; without colour the output is plain text that
//! fits `style.width` columns.

use comfy_table::{presets, Cell, Color, ContentArrangement, Table};
use owo_colors::OwoColorize;

use super::{describe_measurement, escape_controls, in_order, label, RunReport, Style};
use crate::model::{CheckResult, Status};

/// Below this the layout stops making sense; narrower terminals get lines this long.
pub const MIN_WIDTH: u16 = 40;
/// Detail lines: `  evidence  value`, the value column starts here.
const DETAIL_INDENT: usize = 12;
/// A wrapped detail value continues a little further in, so it does not read as the next item.
const CONTINUATION_INDENT: usize = 14;
/// `ERROR ` is the widest status label plus its space.
const LABEL_WIDTH: usize = 6;

pub fn render(report: &RunReport, style: Style) -> String {
    let width = usize::from(style.width.max(MIN_WIDTH));
    // `--quiet`: only what fails the run, and nothing at all when the run passes.
    let shown: Vec<&CheckResult> = report
        .checks
        .iter()
        .filter(|c| !style.quiet || report.is_problem(c))
        .collect();
    if style.quiet && shown.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    if shown.is_empty() {
        out.push_str("no checks ran\n");
    } else {
        out.push_str(&results_table(&shown, style).to_string());
        out.push('\n');
    }
    let detailed: &[Status] = if style.verbose {
        &[Status::Fail, Status::Error, Status::Warn, Status::Skip]
    } else {
        &[Status::Fail, Status::Error, Status::Warn]
    };
    for c in in_order(&report.checks, detailed).filter(|c| !style.quiet || report.is_problem(c)) {
        out.push('\n');
        details(&mut out, c, style, width);
    }
    out.push('\n');
    if let (Some(selection), false) = (&report.profile_selection, style.quiet) {
        let mut why = format!(
            "profile auto → {}: {}",
            report.profile,
            // What the host showed and why the pick fits; every candidate is in the JSON report.
            selection.reasons[..selection.reasons.len().min(2)].join("; ")
        );
        if let Some(note) = &selection.note {
            why = format!("{why}. {note}");
        }
        for (i, line) in wrap(&why, width, width - 2).iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    labelled(&mut out, report.status(), &summary(report), style, width);
    out
}

fn results_table(shown: &[&CheckResult], style: Style) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(style.width.max(MIN_WIDTH))
        // The caller decided about the terminal; comfy-table must not look at stdout itself.
        .force_no_tty()
        .set_header(["STATUS", "CHECK", "SUBJECT", "SUMMARY"]);
    if style.color {
        table.enforce_styling();
    }
    for c in shown {
        // The deciding code under the status (it fits the column): what `explain CODE` documents.
        let mut status = Cell::new(match c.deciding_code() {
            Some(code) => format!("{}\n{code}", label(c.status)),
            None => label(c.status).to_string(),
        });
        if style.color {
            status = status.fg(cell_color(c.status));
        }
        table.add_row(vec![
            status,
            Cell::new(&c.id),
            Cell::new(escape_controls(&match (&c.subject, &c.role) {
                (Some(subject), Some(role)) => format!("{subject} ({role})"),
                (subject, _) => subject.as_deref().unwrap_or("-").to_string(),
            })),
            Cell::new(escape_controls(&match c.library_answers {
                Some(source) => format!("{} [{}]", c.summary, source.as_str()),
                None => c.summary.clone(),
            })),
        ]);
    }
    table
}

fn cell_color(status: Status) -> Color {
    match status {
        Status::Pass => Color::Green,
        Status::Warn => Color::Yellow,
        Status::Fail => Color::Red,
        Status::Skip => Color::DarkGrey,
        Status::Error => Color::Magenta,
    }
}

/// The status label padded to [`LABEL_WIDTH`], coloured outside the table when colour is on.
fn painted_label(status: Status, color: bool) -> String {
    let text = format!("{:<5}", label(status));
    if !color {
        return text;
    }
    match status {
        Status::Pass => text.green().to_string(),
        Status::Warn => text.yellow().to_string(),
        Status::Fail => text.red().bold().to_string(),
        Status::Skip => text.dimmed().to_string(),
        Status::Error => text.magenta().bold().to_string(),
    }
}

/// `FAIL  text…` with the text wrapped under itself.
fn labelled(out: &mut String, status: Status, text: &str, style: Style, width: usize) {
    let avail = width - LABEL_WIDTH;
    for (i, line) in wrap(text, avail, avail).iter().enumerate() {
        if i == 0 {
            out.push_str(&painted_label(status, style.color));
            out.push(' ');
        } else {
            out.push_str(&" ".repeat(LABEL_WIDTH));
        }
        out.push_str(line);
        out.push('\n');
    }
}

/// A heading for one result, its measurements, evidence and fix under it.
fn details(out: &mut String, c: &CheckResult, style: Style, width: usize) {
    let heading = match &c.subject {
        Some(subject) => format!("{} {}: {}", c.id, subject, c.summary),
        None => format!("{}: {}", c.id, c.summary),
    };
    labelled(out, c.status, &heading, style, width);
    let measured: Vec<String> = c.measurements.iter().map(describe_measurement).collect();
    let codes: Vec<String> = c
        .findings
        .iter()
        .map(|f| match f.step {
            Some(step) => format!("{} ({}, step {step})", f.code, f.status),
            None => format!("{} ({})", f.code, f.status),
        })
        .collect();
    let sections = [
        ("measured", measured.as_slice()),
        ("evidence", c.evidence.as_slice()),
        ("fix", c.remediation.as_slice()),
        ("code", codes.as_slice()),
    ];
    for (name, items) in sections {
        for (i, item) in items.iter().enumerate() {
            let first = if i == 0 {
                format!("  {name:<width$}", width = DETAIL_INDENT - 2)
            } else {
                " ".repeat(DETAIL_INDENT)
            };
            let lines = wrap(item, width - DETAIL_INDENT, width - CONTINUATION_INDENT);
            for (j, line) in lines.iter().enumerate() {
                if j == 0 {
                    out.push_str(&first);
                } else {
                    out.push_str(&" ".repeat(CONTINUATION_INDENT));
                }
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}

/// `8 pass, 1 warn, …; fail in 1.2 s; profile P; host H, root R`.
fn summary(report: &RunReport) -> String {
    let counts: Vec<String> = Status::ALL
        .iter()
        .map(|s| format!("{} {}", report.count(*s), s.as_str()))
        .collect();
    let answers = report
        .library_answers
        .map(|source| format!("; library answers {}", source.as_str()))
        .unwrap_or_default();
    let interrupted = report
        .interrupted
        .as_ref()
        .map(|signal| format!("; interrupted by {signal}"))
        .unwrap_or_default();
    let environment = report
        .host
        .environment
        .as_ref()
        .map(|e| format!(" ({})", e.describe()))
        .unwrap_or_default();
    format!(
        "{} checks ({}) in {}; profile {}; host {}{environment}, root {}{answers}{interrupted}",
        report.checks.len(),
        counts.join(", "),
        duration(report.duration_ms),
        report.profile,
        report.host.hostname,
        report.host.root,
    )
}

fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// Greedy word wrap by characters: the first line holds `first` characters, the others `rest`. Words longer
/// than a line (paths) are cut; line breaks in the text are kept, other control characters shown as escapes
/// (every free text of the table passes through here).
pub fn wrap(text: &str, first: usize, rest: usize) -> Vec<String> {
    let text = escape_controls(text);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    let cap = |lines: &Vec<String>| if lines.is_empty() { first } else { rest }.max(1);
    for (n, source) in text.split('\n').enumerate() {
        if n > 0 {
            lines.push(std::mem::take(&mut line));
            len = 0;
        }
        for word in source.split_whitespace() {
            let mut word: Vec<char> = word.chars().collect();
            if len > 0 && len + 1 + word.len() > cap(&lines) {
                lines.push(std::mem::take(&mut line));
                len = 0;
            }
            if len > 0 {
                line.push(' ');
                len += 1;
            }
            while len + word.len() > cap(&lines) {
                let take = cap(&lines) - len;
                line.extend(word.drain(..take));
                lines.push(std::mem::take(&mut line));
                len = 0;
            }
            len += word.len();
            line.extend(word);
        }
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip_ansi(text: &str) -> String {
        let re = regex::Regex::new("\x1b\\[[0-9;]*m").unwrap();
        re.replace_all(text, "").into_owned()
    }

    fn assert_fits(text: &str, width: usize) {
        for line in text.lines() {
            let visible = strip_ansi(line);
            assert!(
                visible.chars().count() <= width,
                "line wider than {width}: {visible:?}\n{text}"
            );
        }
    }

    #[test]
    fn table_plain_at_80_columns_fits_and_has_no_escape_codes() {
        let text = render(&RunReport::sample_for_tests(), Style::PLAIN);
        assert!(!text.contains('\x1b'), "{text}");
        assert_fits(&text, 80);
    }

    #[test]
    fn table_colored_fits_the_width_once_escape_codes_are_removed() {
        let style = Style {
            color: true,
            ..Style::PLAIN
        };
        let text = render(&RunReport::sample_for_tests(), style);
        assert!(text.contains('\x1b'), "{text}");
        assert_fits(&text, 80);
        // The same words with and without colour.
        assert_eq!(
            strip_ansi(&text).split_whitespace().collect::<Vec<_>>(),
            render(&RunReport::sample_for_tests(), Style::PLAIN)
                .split_whitespace()
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn table_wide_terminal_keeps_one_row_per_result() {
        let style = Style {
            width: 200,
            ..Style::PLAIN
        };
        let text = render(&RunReport::sample_for_tests(), style);
        let row = text
            .lines()
            .find(|l| l.contains("rdma.link") && l.contains("│"))
            .unwrap();
        assert!(row.contains("FAIL") && row.contains("mlx5_0/1") && row.contains("port down"));
        assert_fits(&text, 200);
    }

    #[test]
    fn table_every_result_has_a_row_with_its_label() {
        let report = RunReport::sample_for_tests();
        let text = render(&report, Style::PLAIN);
        for c in &report.checks {
            assert!(
                text.lines().any(|l| l.starts_with('│')
                    && l.contains(&c.id)
                    && l.contains(label(c.status))),
                "no row for {}:\n{text}",
                c.id
            );
        }
    }

    #[test]
    fn table_failure_details_show_evidence_measurement_and_fix() {
        let text = render(&RunReport::sample_for_tests(), Style::PLAIN);
        let details = text.split_once("\n\n").unwrap().1;
        assert!(details.starts_with("FAIL  rdma.link mlx5_0/1: port down\n"));
        assert!(
            details.contains("  measured  link_rate = 100 Gb/s (warn 200, fail 100) (replayed)\n")
        );
        assert!(
            details.contains("  evidence  /sys/class/infiniband/mlx5_0/ports/1/state = 1: DOWN\n")
        );
        assert!(details.contains(
            "            /sys/class/infiniband/mlx5_0/ports/1/phys_state = 3: Disabled\n"
        ));
        assert!(details.contains("  fix       check the cable"));
    }

    /// The headings of the detail list (between the table and the summary line).
    fn detail_headings(text: &str) -> Vec<String> {
        let details = text.split_once("\n\n").unwrap().1;
        details
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with(' '))
            .map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("")
                    .trim_end_matches(':')
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn table_details_order_fail_error_warn_and_omit_pass_and_skip() {
        let text = render(&RunReport::sample_for_tests(), Style::PLAIN);
        // The last heading is the summary line: `FAIL  6 checks …`.
        assert_eq!(
            detail_headings(&text),
            ["rdma.link", "gds.kernel_path", "pcie.link", "6"]
        );
        let verbose = Style {
            verbose: true,
            ..Style::PLAIN
        };
        assert_eq!(
            detail_headings(&render(&RunReport::sample_for_tests(), verbose)),
            [
                "rdma.link",
                "gds.kernel_path",
                "pcie.link",
                "nccl.transport",
                "6"
            ]
        );
    }

    /// Every skip was printed twice, in the table and again below it (20 lines twice on a host without GPUs).
    #[test]
    fn table_says_each_skip_once_and_details_it_only_under_verbose() {
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![
            CheckResult::skip("a.one", "no GPU on the PCI bus")
                .evidence("/sys/bus/pci/devices", "no NVIDIA function"),
            CheckResult::fail("a.two", "broken"),
            CheckResult::skip("a.three", "no HCA present").fix("pass --nccl-log"),
        ];
        let text = render(&report, Style::PLAIN);
        for reason in ["no GPU on the PCI bus", "no HCA present"] {
            assert_eq!(text.matches(reason).count(), 1, "{text}");
        }
        assert!(!text.contains("evidence"), "{text}");
        let verbose = render(
            &report,
            Style {
                verbose: true,
                ..Style::PLAIN
            },
        );
        assert!(
            verbose.contains(
                "\n\nSKIP  a.one: no GPU on the PCI bus\n  evidence  /sys/bus/pci/devices = no NVIDIA function\n\nSKIP  a.three: no HCA present\n  fix       pass --nccl-log\n"
            ),
            "{verbose}"
        );
    }

    #[test]
    fn table_quiet_wins_over_verbose() {
        let style = Style {
            quiet: true,
            verbose: true,
            ..Style::PLAIN
        };
        let text = render(&RunReport::sample_for_tests(), style);
        assert!(!text.contains("nccl.transport"), "{text}");
    }

    #[test]
    fn table_long_evidence_wraps_indented_under_its_column() {
        let text = render(&RunReport::sample_for_tests(), Style::PLAIN);
        let lines: Vec<&str> = text.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.starts_with("  evidence  /sys/bus/pci/devices/0000:17:00.0"))
            .unwrap();
        assert!(lines[start + 1].starts_with(&" ".repeat(CONTINUATION_INDENT)));
        assert!(!lines[start + 1].starts_with(&" ".repeat(CONTINUATION_INDENT + 1)));
        assert_fits(&text, 80);
    }

    #[test]
    fn table_summary_line_counts_statuses_and_names_the_run() {
        let text = render(&RunReport::sample_for_tests(), Style::PLAIN);
        let summary = text.rsplit_once("\n\n").unwrap().1.replace("\n      ", " ");
        assert_eq!(
            summary,
            "FAIL  6 checks (2 pass, 1 warn, 1 fail, 1 skip, 1 error) in 1.2 s; profile hgx-h200-ib; \
             host gpu-node-07, root testdata/hosts/h200-ib\n"
        );
    }

    #[test]
    fn table_empty_run_says_so() {
        let text = render(&RunReport::empty_for_tests(), Style::PLAIN);
        assert!(
            text.starts_with("no checks ran\n\nPASS  0 checks"),
            "{text}"
        );
    }

    #[test]
    fn table_narrow_width_is_raised_to_the_minimum() {
        let style = Style {
            width: 10,
            ..Style::PLAIN
        };
        assert_fits(
            &render(&RunReport::sample_for_tests(), style),
            usize::from(MIN_WIDTH),
        );
    }

    #[test]
    fn wrap_cuts_words_longer_than_a_line() {
        assert_eq!(wrap("abcdefgh ij", 3, 3), ["abc", "def", "gh", "ij"]);
        assert_eq!(wrap("one two three", 7, 5), ["one two", "three"]);
        assert_eq!(wrap("a\nb", 10, 10), ["a", "b"]);
        assert_eq!(wrap("", 10, 10), [""]);
    }
}
