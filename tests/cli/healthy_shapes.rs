//! Healthy real-fleet shapes (`testdata/healthy-shapes.tsv`, one line per recorded tree): each runs with
//! `run --root <tree> --profile <p>` and must report no FAIL and no ERROR. A preflight that fails healthy nodes
//! gets switched off, and then it catches nothing.
//!
//! A check that calls a vendor library needs that library's recorded answers to judge a tree: where the
//! tree's `vendor-answers.json` lacks them, the library would be called live on the test machine, which has
//! none, so the check is left out of that tree's run and named in the test's output.

use std::collections::BTreeSet;
use std::path::Path;

use super::util::*;

const SHAPES: &str = "healthy-shapes.tsv";
const HEADER: &str = "tree\tprofile\tshape; public source studied";

/// Library checks and the recorded answers (`vendor-answers.json` keys) each judges from.
const LIBRARY_ANSWERS: &[(&str, &[&str])] = &[
    ("gpu.inventory", &["nvml"]),
    ("gpu.bar1", &["nvml"]),
    ("gpu.p2p", &["nvml"]),
    ("gpu.nvlink", &["nvml"]),
    ("nvlink.imex", &["nvml"]),
    ("nvlink.link_quality", &["nvml"]),
    ("gpu.pcie", &["nvml", "nvml.pcie_under_load"]),
    ("gpu.copy_bandwidth", &["cuda.copy"]),
    ("gds.read", &["cufile.gds_read"]),
    (
        "rdma.loopback",
        &["verbs.device_list", "verbs.rdma_loopback"],
    ),
    ("gdr.loopback", &["verbs.device_list", "verbs.gdr_loopback"]),
];

struct Shape {
    line: usize,
    tree: String,
    profile: String,
    what: String,
}

fn shapes() -> Vec<Shape> {
    let text = std::fs::read_to_string(testdata(SHAPES)).expect("testdata/healthy-shapes.tsv");
    let mut lines = text.lines().enumerate();
    assert_eq!(
        lines.next().map(|(_, l)| l),
        Some(HEADER),
        "{SHAPES} starts with its header"
    );
    lines
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            let fields: Vec<&str> = l.split('\t').collect();
            assert_eq!(
                fields.len(),
                3,
                "{SHAPES}:{}: want tree<TAB>profile<TAB>shape, got {l:?}",
                n + 1
            );
            Shape {
                line: n + 1,
                tree: fields[0].to_string(),
                profile: fields[1].to_string(),
                what: fields[2].to_string(),
            }
        })
        .collect()
}

/// The `vendor-answers.json` keys a tree records (none without the file).
fn recorded_keys(root: &Path) -> BTreeSet<String> {
    let Ok(text) = std::fs::read_to_string(root.join("vendor-answers.json")) else {
        return BTreeSet::new();
    };
    let value: serde_json::Value = serde_json::from_str(&text).expect("vendor-answers.json parses");
    value
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The library checks a tree cannot be judged on: some answer they need is not recorded.
fn unrecorded_checks(recorded: &BTreeSet<String>) -> Vec<&'static str> {
    LIBRARY_ANSWERS
        .iter()
        .filter(|(_, keys)| keys.iter().any(|k| !recorded.contains(*k)))
        .map(|(id, _)| *id)
        .collect()
}

#[test]
fn every_healthy_shape_runs_without_fail_or_error() {
    let shapes = shapes();
    assert!(!shapes.is_empty(), "{SHAPES} lists no shape");
    let mut wrong = Vec::new();
    for shape in &shapes {
        let root = host(&shape.tree);
        assert!(
            root.is_dir(),
            "{SHAPES}:{}: no tree testdata/hosts/{}",
            shape.line,
            shape.tree
        );
        let left_out = unrecorded_checks(&recorded_keys(&root));
        let skip = left_out.join(",");
        let mut extra = vec![];
        if !left_out.is_empty() {
            extra = vec!["--skip", skip.as_str()];
            println!("{}: left out (answers not recorded): {skip}", shape.tree);
        }
        let (code, report) = run_json(&root, &shape.profile, &extra);
        let verdicts = verdicts(&report);
        assert!(
            verdicts.iter().any(|(_, _, s)| s == "pass"),
            "{}: nothing passed: {verdicts:?}",
            shape.tree
        );
        for check in report["checks"].as_array().expect("checks") {
            let status = check["status"].as_str().unwrap_or_default();
            if status == "fail" || status == "error" {
                wrong.push(format!(
                    "{} ({}, {}): {status} {} {}: {}",
                    shape.tree,
                    shape.profile,
                    shape.what,
                    check["id"].as_str().unwrap_or_default(),
                    check["subject"].as_str().unwrap_or_default(),
                    check["summary"].as_str().unwrap_or_default()
                ));
            }
        }
        if code != Exit::OK && wrong.is_empty() {
            wrong.push(format!("{}: exit {code} with no failing check", shape.tree));
        }
    }
    assert!(
        wrong.is_empty(),
        "healthy shapes judged unhealthy:\n{}",
        wrong.join("\n")
    );
}

/// The list is of trees that exist and profiles the binary knows; a typo would silently test nothing.
#[test]
fn every_shape_line_names_a_tree_and_a_known_profile() {
    let out = preflight().arg("profiles").output().expect("binary runs");
    let known = stdout(&out);
    for shape in shapes() {
        assert!(host(&shape.tree).is_dir(), "{}", shape.tree);
        assert!(
            shape.profile == "auto" || known.contains(&shape.profile),
            "{SHAPES}:{}: unknown profile {}",
            shape.line,
            shape.profile
        );
    }
}
