//! `nccl` given the same file under several names, devices, and FIFOs: each file is read once, a device is
//! refused before reading, a FIFO the user names is still read.

use serde_json::Value;

use super::{bounded, mkfifo, HANG_LIMIT, QUICK_CPU};
use crate::util::*;

const LOG: &str = "nccl/partial-gdrdma-one-node-no-peermem.log";

fn channels(out: &std::process::Output) -> (Value, Value) {
    let report = json_out(Schema::Nccl, out);
    (
        report["net_channels"]["total"].clone(),
        report["input"].clone(),
    )
}

#[test]
fn a_file_named_twice_or_under_another_name_is_read_once() {
    let log = testdata(LOG);
    let once = preflight()
        .args(["nccl", "--format", "json"])
        .arg(&log)
        .output()
        .unwrap();
    let (total, _) = channels(&once);
    assert!(total.as_u64().unwrap() > 0, "{}", stdout(&once));
    let dir = tempfile::tempdir().unwrap();
    let hard = dir.path().join("hard.log");
    std::fs::hard_link(&log, &hard).unwrap();
    let soft = dir.path().join("soft.log");
    std::os::unix::fs::symlink(&log, &soft).unwrap();
    let dotted = log
        .parent()
        .unwrap()
        .join(".")
        .join(log.file_name().unwrap());
    for other in [log.clone(), dotted, hard, soft] {
        let out = preflight()
            .args(["nccl", "--format", "json"])
            .arg(&log)
            .arg(&other)
            .output()
            .unwrap();
        assert_eq!(code(&out), code(&once), "{other:?}");
        let (twice, input) = channels(&out);
        assert_eq!(twice, total, "{other:?} counted twice");
        assert_eq!(input["repeated"][0], other.display().to_string());
        assert!(stdout(&out).contains("read once"), "{}", stdout(&out));
    }
}

#[test]
fn devices_and_directories_are_refused_before_reading() {
    for path in ["/dev/zero", "/dev/null", "/dev/urandom", "/"] {
        let run = bounded(preflight().args(["nccl", path]), HANG_LIMIT);
        assert_eq!(code(&run.out), Exit::USAGE, "{path}: {}", stderr(&run.out));
        assert!(stderr(&run.out).contains("is a "), "{}", stderr(&run.out));
        assert!(run.cpu < QUICK_CPU, "{path}: {:?} of CPU", run.cpu);
    }
}

#[test]
fn a_fifo_the_user_names_is_read_and_one_without_a_writer_ends() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.fifo");
    mkfifo(&fifo);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let text = std::fs::read(testdata(LOG)).unwrap();
            std::fs::write(fifo, text).unwrap();
        })
    };
    let run = bounded(
        preflight().args(["nccl", "--format", "json"]).arg(&fifo),
        HANG_LIMIT,
    );
    writer.join().unwrap();
    let (total, _) = channels(&run.out);
    assert!(total.as_u64().unwrap() > 0, "{}", stdout(&run.out));
}
