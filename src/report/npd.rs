//! `--format npd`: Node Problem Detector's custom-plugin protocol. NPD takes the condition from the exit code
//! (0 OK, 1 NonOK, 2 Unknown: [`crate::exit::for_npd`]) and its message from stdout, cut at the plugin's
//! `max_output_length`, so the one line starts with the verdict and the first check that caused it. Slurm's
//! health check reuses the same line as a drain reason.

use super::termination::{one_line, problem_line, problems, truncate};
use super::{label, RunReport};

/// Longest message written: NPD shows it in a node condition, Slurm in a drain reason.
pub const MAX_BYTES: usize = 200;

/// One line: `PASS: 71 checks (profile generic)`, or the worst result first,
/// `FAIL rdma.link mlx5_0/1 (+2 more): port down`.
pub fn render(report: &RunReport) -> String {
    let problems = problems(report);
    let line = match problems.first() {
        None => format!(
            "{}: {} checks (profile {})",
            label(report.status()),
            report.checks.len(),
            one_line(&report.profile)
        ),
        // The count goes before the summary so a cut at NPD's length limit keeps it.
        Some(first) => match problems.len() - 1 {
            0 => problem_line(first, ""),
            n => problem_line(first, &format!(" (+{n} more)")),
        },
    };
    let mut text = truncate(&line, MAX_BYTES).to_string();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CheckResult;

    #[test]
    fn npd_sample_names_the_first_failure_and_counts_the_rest() {
        assert_eq!(
            render(&RunReport::sample_for_tests()),
            "FAIL rdma.link mlx5_0/1 (+2 more): port down\n"
        );
    }

    #[test]
    fn npd_all_pass_says_how_many_checks_ran() {
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![
            CheckResult::pass("a.b", "fine"),
            CheckResult::skip("a.c", ""),
        ];
        assert_eq!(render(&report), "PASS: 2 checks (profile generic)\n");
    }

    #[test]
    fn npd_error_without_failure_leads_with_the_error() {
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![
            CheckResult::warn("w.x", "slow"),
            CheckResult::error("e.x", "nvmlInit hung\nafter 10 s"),
        ];
        assert_eq!(
            render(&report),
            "ERROR e.x (+1 more): nvmlInit hung after 10 s\n"
        );
    }

    #[test]
    fn npd_message_is_one_bounded_line() {
        let mut report = RunReport::empty_for_tests();
        report.checks = vec![CheckResult::fail("a.b", "ダウン ".repeat(200))];
        let text = render(&report);
        assert!(text.len() <= MAX_BYTES + 1, "{} bytes", text.len());
        assert_eq!(text.lines().count(), 1);
    }
}
