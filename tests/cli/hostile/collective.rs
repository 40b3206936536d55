//! `collective` after a job that left hostile things in its log directory or output: FIFOs, links to devices,
//! directories named like logs, lines of hundreds of MB without a newline. Each run ends quickly, in bounded
//! memory, naming what it did not read.

use std::process::Command;

use regex::Regex;
use serde_json::Value;

use super::{bounded, HANG_LIMIT, QUICK_CPU};
use crate::util::*;

/// `collective --format json -- sh -c SCRIPT`: the script sees NCCL_DEBUG_FILE in the run's log directory.
fn collective(script: &str) -> Command {
    let mut cmd = preflight();
    cmd.args([
        "collective",
        "--format",
        "json",
        "--timeout",
        "60",
        "--",
        "sh",
        "-c",
    ])
    .arg(script);
    cmd
}

fn evidence(report: &Value) -> String {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["evidence"].as_array().unwrap())
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn things_that_are_not_logs_in_the_log_directory_are_named_not_read() {
    let planted = [
        ("mkfifo \"$d/nccl.x.1.log\"", "is a FIFO"),
        (
            "ln -s /dev/zero \"$d/nccl.x.2.log\"",
            "is a character device",
        ),
        ("mkdir \"$d/nccl.x.3.log\"", "is a directory"),
        (
            "ln -s /dev/urandom \"$d/nccl.x.4.log\"",
            "is a character device",
        ),
    ];
    for (plant, why) in planted {
        let script = format!("d=$(dirname \"$NCCL_DEBUG_FILE\"); {plant}; echo done");
        let run = bounded(&mut collective(&script), HANG_LIMIT);
        let report = json_out(Schema::Run, &run.out);
        let evidence = evidence(&report);
        assert!(evidence.contains("not read = "), "{plant}: {evidence}");
        assert!(evidence.contains(why), "{plant}: {evidence}");
        assert_ne!(code(&run.out), Exit::OK, "{plant}");
        assert!(run.cpu < QUICK_CPU, "{plant}: {:?} of CPU", run.cpu);
    }
}

#[test]
fn lines_of_hundreds_of_megabytes_cost_bounded_memory() {
    let long = "head -c 300000000 /dev/zero | tr '\\0' '\\r'";
    for script in [
        // A `\r`-only progress bar in the merged output.
        long.to_string(),
        // The same as the last line of a per-process NCCL file, and a line of NUL bytes.
        format!("d=$(dirname \"$NCCL_DEBUG_FILE\"); {long} > \"$d/nccl.x.1.log\""),
        "d=$(dirname \"$NCCL_DEBUG_FILE\"); head -c 300000000 /dev/zero > \"$d/nccl.x.9.log\""
            .into(),
    ] {
        let run = bounded(&mut collective(&script), HANG_LIMIT);
        let report = json_out(Schema::Run, &run.out);
        assert_ne!(code(&run.out), Exit::OK, "{script}: {report:#}");
    }
}

fn command_result(report: &Value) -> Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "collective.command")
        .unwrap()
        .clone()
}

/// Whether a process with `arg` on its command line still runs (zombies aside).
fn still_running(arg: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let dir = e.path();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'));
        !zombie && cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes())
    })
}

#[test]
fn daemons_that_leave_the_group_are_ended_and_named() {
    for (i, daemonize) in [
        "setsid sleep {ARG} >/dev/null 2>&1 &",
        "( setsid sleep {ARG} >/dev/null 2>&1 & ) ; sleep 0.2",
        "setsid -f sleep {ARG} >/dev/null 2>&1",
        "setsid sh -c 'sleep {ARG}' >/dev/null 2>&1 < /dev/null &",
        "nohup setsid sleep {ARG} >/dev/null 2>&1 &",
    ]
    .iter()
    .enumerate()
    {
        let arg = format!("{}.{i}{}", 300 + i, std::process::id());
        let script = format!("{}\nsleep 0.3\necho done", daemonize.replace("{ARG}", &arg));
        let run = bounded(&mut collective(&script), HANG_LIMIT);
        let report = json_out(Schema::Run, &run.out);
        let command = command_result(&report);
        assert_eq!(command["status"], "error", "{script}: {command:#}");
        assert!(
            command["summary"]
                .as_str()
                .unwrap()
                .contains("left 1 process(es) running outside its process group")
                || command["summary"]
                    .as_str()
                    .unwrap()
                    .contains("left 2 process(es)"),
            "{script}: {command:#}"
        );
        assert!(
            !still_running(&arg),
            "{script}: the daemon outlived collective"
        );
    }
}

#[test]
fn the_timeout_and_the_grace_period_are_told_apart() {
    let ignores = bounded(
        preflight()
            .args([
                "collective",
                "--format",
                "json",
                "--timeout",
                "1",
                "--",
                "sh",
                "-c",
            ])
            .arg("trap '' TERM; while :; do sleep 0.1; done"),
        HANG_LIMIT,
    );
    let summary = command_result(&json_out(Schema::Run, &ignores.out))["summary"]
        .as_str()
        .unwrap()
        .to_string();
    // When it was killed is measured: 1 s + 5 s, plus what a loaded machine adds (it said 6.1 s under load).
    let killed_at = Regex::new(r"still running at --timeout \(1 s\); it ignored SIGTERM for the 5 s grace period and its process group was killed \(SIGKILL\) at ([0-9.]+) s")
        .unwrap()
        .captures(&summary)
        .and_then(|c| c[1].parse::<f64>().ok());
    assert!(killed_at.is_some_and(|s| s >= 6.0), "{summary}");
    let obeys = bounded(
        preflight()
            .args([
                "collective",
                "--format",
                "json",
                "--timeout",
                "1",
                "--",
                "sh",
                "-c",
            ])
            .arg("sleep 30"),
        HANG_LIMIT,
    );
    let summary = command_result(&json_out(Schema::Run, &obeys.out))["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        summary.contains("still running at --timeout (1 s); SIGTERM ended its process group"),
        "{summary}"
    );
}

/// nccl-tests' result rows without its header: nothing names the collective.
const UNNAMED_TABLE: &str = "for s in 8388608 134217728 1073741824; do \
    echo \"$s $((s / 4)) float sum -1 100.0 300.0 480.0 0 100.0 300.0 480.0 0\"; done";

fn busbw_judged(report: &Value) -> Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|c| c["id"] == "collective.busbw")
        .unwrap()
        .clone()
}

#[test]
fn busbw_judged_against_nothing_is_never_a_pass() {
    let cases: [(&[&str], &str, &str, &str); 4] = [
        (&[], UNNAMED_TABLE, "error", "the collective could not be named"),
        (
            &["--collective", "all_reduce"],
            UNNAMED_TABLE,
            "warn",
            "not judged: profile generic sets no thresholds.nccl_busbw_gbytes_per_sec.all_reduce.single_node",
        ),
        (
            &["--collective", "all_reduce", "--profile", "hgx-h100-ib"],
            UNNAMED_TABLE,
            "pass",
            "meets",
        ),
        (
            &[],
            "echo '# Collective test starting: broadcast_perf'; for s in 134217728; do echo \"$s $((s / 4)) float none 0 100.0 300.0 350.0 0 100.0 300.0 350.0 0\"; done",
            "warn",
            "profiles set floors for all_reduce, all_gather, reduce_scatter, alltoall, sendrecv only, not broadcast",
        ),
    ];
    for (flags, script, status, says) in cases {
        let mut cmd = preflight();
        cmd.args(["collective", "--format", "json", "--timeout", "60"])
            .args(flags)
            .args(["--", "sh", "-c", script]);
        let run = bounded(&mut cmd, HANG_LIMIT);
        let busbw = busbw_judged(&json_out(Schema::Run, &run.out));
        assert_eq!(busbw["status"], status, "{flags:?}: {busbw:#}");
        assert!(
            busbw["summary"].as_str().unwrap().contains(says),
            "{flags:?}: {busbw:#}"
        );
        if status != "pass" {
            assert!(
                !busbw["summary"].as_str().unwrap().contains(".collective."),
                "names a key that does not exist: {busbw:#}"
            );
        }
    }
}
