//! Findings as data (issue 30 §4): every result other than a pass on every recorded tree carries a code of its
//! check from the registry, with the status that decided it; `explain CODE` documents each code, and JUnit
//! and the table carry them.

use std::collections::HashMap;

use fabric_preflight::commands::findings::registry;
use serde_json::Value;

use super::util::*;

/// Where each check declares itself meaningful (`bare_metal`, `cloud_vm`, `container`), by check id.
fn meaningful() -> HashMap<&'static str, Vec<&'static str>> {
    fabric_preflight::probes::all()
        .iter()
        .map(|p| {
            let meta = p.meta();
            (p.id(), meta.meaningful.iter().map(|e| e.as_str()).collect())
        })
        .collect()
}

/// A failure or warning of a check that is not declared meaningful where the report says the node runs: a
/// false alarm the declaration already names (the check should have skipped).
fn out_of_place(report: &Value, declared: &HashMap<&str, Vec<&str>>) -> Vec<String> {
    let env = &report["host"]["environment"];
    let here: Vec<&str> = env["machine"]
        .as_str()
        .into_iter()
        .chain(env["container"].as_bool().unwrap().then_some("container"))
        .collect();
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail" || c["status"] == "warn")
        .filter_map(|c| {
            let id = c["id"].as_str().unwrap();
            let places = declared.get(id)?;
            let missing: Vec<&&str> = here.iter().filter(|e| !places.contains(e)).collect();
            (!missing.is_empty()).then(|| {
                format!(
                    "{id} {} on a node in {missing:?}: {}",
                    c["status"], c["summary"]
                )
            })
        })
        .collect()
}

/// The coverage proof: the full `run` of every recorded tree (generic and auto profiles) codes every result
/// other than a pass with a registered code of its own check, one of them with the result's status; and no
/// check fails or warns where the report says the node runs unless it is declared meaningful there.
#[test]
fn every_result_other_than_pass_on_every_tree_carries_a_code_of_its_check() {
    let declared = meaningful();
    let mut problems = Vec::new();
    let mut coded = 0;
    for tree in trees() {
        for profile in ["generic", "auto"] {
            let (_, report) = run_json(&tree, profile, &[]);
            let name = tree.file_name().unwrap().to_string_lossy().to_string();
            problems.extend(
                out_of_place(&report, &declared)
                    .into_iter()
                    .map(|p| format!("{name} ({profile}) {p}")),
            );
            for c in report["checks"].as_array().unwrap() {
                match coding_problem(c) {
                    Some(p) => problems.push(format!(
                        "{} ({profile}) {} {}: {} — {p}",
                        tree.file_name().unwrap().to_string_lossy(),
                        c["id"],
                        c["status"],
                        c["summary"]
                    )),
                    None if c["status"] != "pass" => coded += 1,
                    None => {}
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        coded > 500,
        "only {coded} coded results: the trees lost their faults?"
    );
}

#[test]
fn explain_a_code_documents_it_and_an_unknown_code_is_a_usage_error() {
    for wanted in ["GDR002", "gdr002", "RUN001", "HWP003"] {
        let out = preflight().args(["explain", wanted]).output().unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = stdout(&out);
        assert!(text.contains(&wanted.to_ascii_uppercase()), "{text}");
        assert!(text.contains("Remediation step:"), "{text}");
    }
    let text = stdout(&preflight().args(["explain", "GDR002"]).output().unwrap());
    assert!(
        text.contains("load_module") && text.contains("gdr.kernel_path"),
        "{text}"
    );
    let out = preflight().args(["explain", "ZZZ999"]).output().unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("unknown finding code `ZZZ999`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn explain_alone_lists_every_code_and_explain_check_lists_its_own() {
    let out = preflight().arg("explain").output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let all = registry();
    assert_eq!(text.lines().count(), all.len(), "{text}");
    for r in &all {
        assert!(text.contains(r.code.code), "{} missing", r.code.code);
    }
    let text = stdout(&preflight().args(["explain", "pcie.acs"]).output().unwrap());
    assert!(
        text.contains("PCI201") && text.contains("Meaningful on:"),
        "{text}"
    );
}

/// JUnit's `type` is the deciding code and its message starts with it; the table shows it under the status.
#[test]
fn junit_and_table_carry_the_deciding_code() {
    let tree = host("peermem-missing-proprietary");
    let out = preflight()
        .args(["run", "--format", "junit", "--root"])
        .arg(&tree)
        .output()
        .unwrap();
    let xml = stdout(&out);
    assert!(
        xml.contains(r#"type="GDR002""#) && xml.contains(r#"message="GDR002: "#),
        "{xml}"
    );
    let out = preflight()
        .args(["run", "--color", "never", "--root"])
        .arg(&tree)
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let table = stdout(&out);
    assert!(table.contains("GDR002"), "{table}");
    assert!(
        table.contains("code      GDR002 (fail, step load_module)"),
        "{table}"
    );
}

/// The report records where the node runs, read under the root: a cloud instance is a VM, an HGX host bare
/// metal, a tree without `/proc/cpuinfo` unknown (never guessed bare metal), and a container's marker file or
/// cgroup makes it a container; the table and JUnit say it too.
#[test]
fn the_report_records_where_the_node_runs() {
    let environment = |root: &std::path::Path| {
        let (_, report) = run_json(root, "generic", &[]);
        report["host"]["environment"].clone()
    };
    for (tree, machine) in [
        ("aws-p5en", Value::from("cloud_vm")),
        ("azure-nd-h100-v5", Value::from("cloud_vm")),
        ("h200-vm-snapshot", Value::from("cloud_vm")),
        ("hgx-healthy", Value::from("bare_metal")),
        ("gb200-tray-ib", Value::from("bare_metal")),
        ("gb200-tray", Value::Null),
    ] {
        let env = environment(&host(tree));
        assert_eq!(env["machine"], machine, "{tree}: {env:#}");
        assert_eq!(env["container"], false, "{tree}: {env:#}");
        assert!(!env["evidence"].as_array().unwrap().is_empty(), "{tree}");
    }
    for (marker, text) in [
        ("/.dockerenv", ""),
        ("/run/.containerenv", "engine=\"podman\"\n"),
        (
            "/proc/1/cgroup",
            "0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-1.scope\n",
        ),
    ] {
        let dir = copy_scenario("hgx-healthy");
        let at = dir.path().join(marker.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, text).unwrap();
        let env = environment(dir.path());
        assert_eq!(env["machine"], "bare_metal", "{marker}: {env:#}");
        assert_eq!(env["container"], true, "{marker}: {env:#}");
        let out = preflight()
            .args(["run", "--root"])
            .arg(dir.path())
            .args(["--format", "junit", "--color", "never"])
            .output()
            .unwrap();
        assert!(
            stdout(&out)
                .contains(r#"<property name="environment" value="bare metal, in a container"/>"#),
            "{marker}: {}",
            stdout(&out)
        );
    }
}
