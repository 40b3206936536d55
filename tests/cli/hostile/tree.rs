//! Recorded trees (`--root`) that a careless copy or a hostile user made: device nodes, FIFOs and sockets where
//! files belong, a recording that links out of the tree, thousands of PCI links naming one function. Nothing
//! is opened that is not a regular file, nothing outside the root is read, nothing is counted twice.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::{bounded, mkfifo, HANG_LIMIT};
use crate::util::*;

const GPU: &str = "../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0";

fn run(root: &Path) -> Command {
    let mut cmd = preflight();
    cmd.args(["run", "--format", "json", "--color", "never", "--root"])
        .arg(root);
    cmd
}

fn mknod_char(path: &Path, major: u32, minor: u32) -> bool {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path. Fails (false) without CAP_MKNOD.
    unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o644,
            libc::makedev(major, minor),
        ) == 0
    }
}

#[test]
fn files_that_are_not_regular_are_refused_unopened() {
    // /dev/kmsg, /dev/zero and /dev/random as the host name, a FIFO and a socket.
    type Plant = fn(&Path) -> bool;
    let plants: [(&str, Plant); 5] = [
        ("kmsg", |p| mknod_char(p, 1, 11)),
        ("zero", |p| mknod_char(p, 1, 5)),
        ("random", |p| mknod_char(p, 1, 8)),
        ("fifo", |p| {
            mkfifo(p);
            true
        }),
        ("socket", |p| {
            std::mem::forget(std::os::unix::net::UnixListener::bind(p).unwrap());
            true
        }),
    ];
    for (what, plant) in plants {
        let tree = copy_scenario("hgx-healthy");
        let hostname = tree.path().join("proc/sys/kernel/hostname");
        std::fs::remove_file(&hostname).unwrap();
        if !plant(&hostname) {
            eprintln!("{what}: no device node without CAP_MKNOD: not tried");
            continue;
        }
        let ran = bounded(&mut run(tree.path()), HANG_LIMIT);
        let report = json_out(Schema::Run, &ran.out);
        assert_eq!(
            report["host"]["hostname"], "unknown",
            "{what}: {}",
            report["host"]
        );
    }
}

#[test]
fn the_recording_is_read_inside_the_root_and_only_as_a_regular_file() {
    let outside = tempfile::tempdir().unwrap();
    let answers = outside.path().join("answers.json");
    std::fs::write(&answers, r#"{"nvml": "planted outside the root"}"#).unwrap();
    let tree = copy_scenario("hgx-healthy");
    let recording = tree.path().join("vendor-answers.json");
    let _ = std::fs::remove_file(&recording);
    std::os::unix::fs::symlink(&answers, &recording).unwrap();
    let ran = bounded(&mut run(tree.path()), HANG_LIMIT);
    assert!(
        !stderr(&ran.out).contains("parsing recorded answers"),
        "the link out of the root was followed: {}",
        stderr(&ran.out)
    );
    std::fs::remove_file(&recording).unwrap();
    mkfifo(&recording);
    let ran = bounded(&mut run(tree.path()), HANG_LIMIT);
    assert!(
        stderr(&ran.out).contains("<a FIFO, not a regular file>"),
        "{}",
        stderr(&ran.out)
    );
}

fn alias_links(root: &Path, count: usize) {
    let devices = root.join("sys/bus/pci/devices");
    for i in 0..count {
        let name = format!(
            "{:04x}:{:02x}:{:02x}.{}",
            0x100 + i / 8192,
            (i / 32) % 256,
            i % 32,
            0
        );
        std::os::unix::fs::symlink(GPU, devices.join(name)).unwrap();
    }
}

/// One `pcie.link` result per GPU and NIC.
fn devices_judged(report: &Value) -> usize {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "pcie.link")
        .count()
}

#[test]
fn one_function_reached_by_many_links_is_one_function() {
    let clean = copy_scenario("hgx-healthy");
    let before = devices_judged(&json_out(
        Schema::Run,
        &bounded(&mut run(clean.path()), HANG_LIMIT).out,
    ));
    assert!(before > 0);
    for count in [1, 50, 5000] {
        let tree = copy_scenario("hgx-healthy");
        alias_links(tree.path(), count);
        let ran = bounded(&mut run(tree.path()), HANG_LIMIT);
        let report = json_out(Schema::Run, &ran.out);
        // One more: the error naming the links.
        assert_eq!(devices_judged(&report), before + 1, "{count} links");
        assert!(
            stdout(&ran.out).contains(&format!("{count} link(s) named for a function other than")),
            "{count}"
        );
        assert_ne!(
            code(&ran.out),
            Exit::OK,
            "a tampered tree never passes whole"
        );
    }
}

#[test]
fn more_entries_than_a_node_can_have_is_an_error_not_a_cost() {
    let tree = copy_scenario("hgx-healthy");
    alias_links(tree.path(), 70_000);
    let ran = bounded(&mut run(tree.path()), HANG_LIMIT);
    assert!(
        stdout(&ran.out).contains("<more than 65536 entries>"),
        "{}",
        &stdout(&ran.out)[..2000.min(ran.out.stdout.len())]
    );
    assert_ne!(code(&ran.out), Exit::OK);
}
