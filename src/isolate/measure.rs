//! The pluggable measure: one COMMAND template per group, its placeholders filled in, started through
//! `collective`'s launcher (a process group of its own tied to this process, ended with SIGTERM, then SIGKILL 5 s
//! later, at `--test-timeout` or on SIGTERM/SIGINT; what it leaves running outside its group found by its marker,
//! ended and named), all groups of a round at once; judged by its exit code and the fabric-preflight JSON report
//! it wrote (`collective`, `pair`).
//!
//! Placeholders, replaced inside any argument: `{nodes}` (comma-separated), `{count}`, `{hostfile}` (a file with
//! one node per line, for `mpirun --hostfile`), `{report}` (where the job must write its JSON report) and
//! `{test}` (`r2t0`: round 2, test 0).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::collective::launch::{self, Ending, Launch};
use crate::input;

/// At most this much of a group's JSON report is read.
const MAX_REPORT: u64 = 16 << 20;

/// How one group's test ended, as the isolation report shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    pub passed: bool,
    /// The collective's busbw (GB/s), where its report has one.
    pub busbw: Option<f64>,
    /// The floor it was judged against: `--floor`, else the report's own fail limit.
    pub floor: Option<f64>,
    /// The first rail result that did not pass (`collective.rails` and per-rail results), where one did not.
    pub rail: Option<String>,
    /// The report's `collective.transport` summary.
    pub transport: Option<String>,
    /// How the COMMAND ended: `exit 0`, `exit 1`, `timed out after 900 s`, `signal 9`, `not started: …`.
    pub ending: String,
    /// Why it passed or failed, in one line.
    pub detail: String,
    pub duration_ms: u64,
}

/// The placeholders a template must hold: a job that is not told its nodes tests the same thing every time, and
/// one that writes no report cannot be judged beyond its exit code.
pub fn check_template(template: &[String]) -> Result<(), String> {
    let has = |p: &str| template.iter().any(|a| a.contains(p));
    if template.is_empty() {
        return Err("no COMMAND template after `--`".into());
    }
    if !has("{nodes}") && !has("{hostfile}") {
        return Err("the COMMAND template names no nodes: put {nodes} or {hostfile} in it".into());
    }
    if !has("{report}") {
        return Err("the COMMAND template has no {report}: the job must write its JSON report there (e.g. `fabric-preflight collective --output json={report} -- …`)".into());
    }
    Ok(())
}

/// One group's files under the work directory.
pub struct Files {
    pub report: PathBuf,
    pub log: PathBuf,
    pub hostfile: PathBuf,
}

impl Files {
    pub fn new(work_dir: &Path, test: &str) -> Files {
        Files {
            report: work_dir.join(format!("{test}.json")),
            log: work_dir.join(format!("{test}.log")),
            hostfile: work_dir.join(format!("{test}.hosts")),
        }
    }
}

/// The template with one group's values in it.
pub fn expand(template: &[String], nodes: &[&str], test: &str, files: &Files) -> Vec<OsString> {
    template
        .iter()
        .map(|arg| {
            arg.replace("{nodes}", &nodes.join(","))
                .replace("{count}", &nodes.len().to_string())
                .replace("{hostfile}", &files.hostfile.to_string_lossy())
                .replace("{report}", &files.report.to_string_lossy())
                .replace("{test}", test)
                .into()
        })
        .collect()
}

/// Runs one group's job to its end (or its timeout) and judges it.
pub fn run_one(
    template: &[String],
    nodes: &[&str],
    test: &str,
    work_dir: &Path,
    timeout: Duration,
    floor: Option<f64>,
) -> Measured {
    let files = Files::new(work_dir, test);
    // A report left by an earlier run in the same directory must not speak for this one.
    let _ = std::fs::remove_file(&files.report);
    if let Err(e) = std::fs::write(&files.hostfile, nodes.join("\n") + "\n") {
        return Measured {
            ending: "not started".into(),
            detail: format!("writing {}: {e}", files.hostfile.display()),
            ..Measured::default()
        };
    }
    let argv = expand(template, nodes, test, &files);
    let started = std::time::Instant::now();
    // collective's launcher: the job in a group of its own, ended at the timeout or on SIGTERM/SIGINT, and what
    // it left running outside its group found by its marker and ended (safe for groups run side by side).
    let ran = launch::run(&Launch {
        argv: &argv,
        env: &[],
        output: &files.log,
        timeout,
    });
    let mut ending = match &ran.ending {
        Ending::Exited(code) => format!("exit {code}"),
        Ending::Signaled(signal) => format!("killed by signal {signal}"),
        Ending::TimedOut => format!("timed out after {} s", timeout.as_secs()),
        Ending::Interrupted(signal) => format!("interrupted ({signal})"),
        Ending::NotStarted(why) => format!("not started: {why}"),
    };
    if !ran.survivors.is_empty() {
        ending.push_str(&format!(", left running: {}", ran.survivors.join(", ")));
    }
    let exited_0 = ran.ending == Ending::Exited(0) && ran.survivors.is_empty();
    let report = input::read_text(&files.report, MAX_REPORT)
        .map_err(|e| format!("no report at {} ({e})", files.report.display()))
        .and_then(|text| {
            serde_json::from_str::<Value>(&text)
                .map_err(|e| format!("report {} is not JSON ({e})", files.report.display()))
        });
    let mut measured = judge(exited_0, &ending, report, floor);
    measured.duration_ms = started.elapsed().as_millis() as u64;
    measured
}

/// The verdict on one group: it passes only when the job exited 0, its report was read and passes, and its
/// busbw (where it has one, and always under `--floor`) meets the floor.
pub fn judge(
    exited_0: bool,
    ending: &str,
    report: Result<Value, String>,
    floor_flag: Option<f64>,
) -> Measured {
    let mut m = Measured {
        ending: ending.to_string(),
        floor: floor_flag,
        ..Measured::default()
    };
    let report = match report {
        Ok(r) => r,
        Err(why) => {
            m.detail = format!("{ending}; {why}: not judged healthy on a report not read");
            return m;
        }
    };
    let checks = report["checks"].as_array().cloned().unwrap_or_default();
    let status_of = |c: &Value| c["status"].as_str().unwrap_or("error").to_string();
    let busbw: Vec<&Value> = checks
        .iter()
        .filter(|c| c["id"] == "collective.busbw")
        .flat_map(|c| c["measurements"].as_array().into_iter().flatten())
        .filter(|x| x["name"] == "busbw")
        .collect();
    // The judged size (the one with a floor), else the best shown.
    let judged = busbw.iter().find(|x| x["fail"].is_f64()).or(busbw.first());
    m.busbw = judged.and_then(|x| x["value"].as_f64());
    m.floor = floor_flag.or_else(|| judged.and_then(|x| x["fail"].as_f64()));
    m.transport = checks
        .iter()
        .find(|c| c["id"] == "collective.transport")
        .and_then(|c| c["summary"].as_str())
        .map(str::to_string);
    m.rail = checks
        .iter()
        .filter(|c| c["id"].as_str().is_some_and(|id| id.contains("rail")))
        .find(|c| status_of(c) != "pass" && status_of(c) != "skip")
        .map(|c| {
            let what = c["subject"].as_str().unwrap_or("");
            format!("{what} {}", c["summary"].as_str().unwrap_or(""))
                .trim()
                .to_string()
        });
    let status = report["status"].as_str().unwrap_or("error");
    let first_problem = checks
        .iter()
        .find(|c| matches!(status_of(c).as_str(), "fail" | "error"))
        .map(|c| {
            format!(
                "{} {}",
                c["id"].as_str().unwrap_or("?"),
                c["summary"].as_str().unwrap_or("")
            )
        });
    let below = match (m.busbw, m.floor) {
        (Some(bw), Some(floor)) if bw < floor => {
            Some(format!("busbw {bw:.2} GB/s below the floor {floor} GB/s"))
        }
        (None, Some(_)) if floor_flag.is_some() => {
            Some("no busbw in the report to judge against --floor".to_string())
        }
        _ => None,
    };
    let verdict = if !exited_0 {
        Err(first_problem.unwrap_or_else(|| format!("report status {status}")))
    } else if !matches!(status, "pass" | "warn") {
        Err(first_problem.unwrap_or_else(|| format!("report status {status}")))
    } else if let Some(below) = below {
        Err(below)
    } else {
        Ok(match (m.busbw, m.floor) {
            (Some(bw), Some(floor)) => format!("busbw {bw:.2} GB/s meets the floor {floor} GB/s"),
            _ => format!("report status {status}"),
        })
    };
    m.passed = verdict.is_ok();
    m.detail = match verdict {
        Ok(why) => format!("{ending}; {why}"),
        Err(why) => format!("{ending}; {why}"),
    };
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(status: &str, busbw: f64, fail: Option<f64>) -> Result<Value, String> {
        Ok(json!({
            "status": status,
            "checks": [
                {"id": "collective.busbw", "status": status, "summary": "…",
                 "measurements": [{"name": "busbw", "value": busbw, "unit": "GB/s", "warn": null, "fail": fail}]},
                {"id": "collective.transport", "status": "pass", "summary": "NET/IB/GDRDMA on every NET channel"},
                {"id": "collective.rails", "subject": "rank 3", "status": "warn", "summary": "uses mlx5_5, nearest mlx5_3"}
            ]
        }))
    }

    #[test]
    fn a_group_passes_on_exit_0_a_passing_report_and_its_floor() {
        let m = judge(true, "exit 0", report("pass", 385.0, Some(331.0)), None);
        assert!(m.passed, "{m:?}");
        assert_eq!((m.busbw, m.floor), (Some(385.0), Some(331.0)));
        assert_eq!(
            m.transport.as_deref(),
            Some("NET/IB/GDRDMA on every NET channel")
        );
        assert_eq!(
            m.rail.as_deref(),
            Some("rank 3 uses mlx5_5, nearest mlx5_3")
        );
    }

    #[test]
    fn completed_below_the_floor_is_a_failure() {
        let m = judge(true, "exit 0", report("pass", 200.0, None), Some(331.0));
        assert!(!m.passed);
        assert!(
            m.detail.contains("busbw 200.00 GB/s below the floor 331"),
            "{}",
            m.detail
        );
    }

    #[test]
    fn no_report_or_a_failing_one_is_never_a_pass() {
        let m = judge(
            true,
            "exit 0",
            Err("no report at x.json (No such file)".into()),
            None,
        );
        assert!(!m.passed && m.detail.contains("not judged healthy"));
        assert!(!judge(false, "exit 1", report("pass", 385.0, None), None).passed);
        assert!(!judge(true, "exit 0", report("fail", 385.0, None), None).passed);
        let m = judge(
            true,
            "exit 0",
            Ok(json!({"status": "pass", "checks": []})),
            Some(10.0),
        );
        assert!(!m.passed && m.detail.contains("no busbw"), "{}", m.detail);
    }

    #[test]
    fn templates_need_nodes_and_a_report() {
        let t = |s: &[&str]| check_template(&s.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert!(t(&["srun", "-w", "{nodes}", "job", "{report}"]).is_ok());
        assert!(t(&[
            "mpirun",
            "--hostfile",
            "{hostfile}",
            "--output=json={report}"
        ])
        .is_ok());
        assert!(t(&["job", "{report}"]).unwrap_err().contains("{nodes}"));
        assert!(t(&["job", "{nodes}"]).unwrap_err().contains("{report}"));
        assert!(t(&[]).is_err());
    }
}
