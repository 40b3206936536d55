//! `collective` after a job that left hostile things in its log directory or output: FIFOs, links to devices,
//! directories named like logs, lines of hundreds of MB without a newline. Each run ends quickly, in bounded
//! memory, naming what it did not read.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::bounded;
use crate::util::*;

/// `collective --format json -- sh -c SCRIPT`: the script sees NCCL_DEBUG_FILE in the run's log directory.
fn collective(script: &str) -> Command {
    let mut cmd = preflight();
    cmd.args([
        "collective",
        "--format",
        "json",
        "--timeout",
        "20",
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
        let run = bounded(&mut collective(&script), Duration::from_secs(15));
        let report = json_out(Schema::Run, &run.out);
        let evidence = evidence(&report);
        assert!(evidence.contains("not read = "), "{plant}: {evidence}");
        assert!(evidence.contains(why), "{plant}: {evidence}");
        assert_ne!(code(&run.out), Exit::OK, "{plant}");
        assert!(
            run.elapsed < Duration::from_secs(5),
            "{plant}: {:?}",
            run.elapsed
        );
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
        let run = bounded(&mut collective(&script), Duration::from_secs(30));
        let report = json_out(Schema::Run, &run.out);
        assert_ne!(code(&run.out), Exit::OK, "{script}: {report:#}");
    }
}
