//! Findings as data (issue 30 §4): every result other than a pass on every recorded tree carries a code of its
//! check from the registry, with the status that decided it; `explain CODE` documents each code, and JUnit
//! and the table carry them.

use fabric_preflight::commands::findings::registry;

use super::util::*;

/// The coverage proof: the full `run` of every recorded tree (generic and auto profiles) codes every result
/// other than a pass with a registered code of its own check, one of them with the result's status.
#[test]
fn every_result_other_than_pass_on_every_tree_carries_a_code_of_its_check() {
    let mut problems = Vec::new();
    let mut coded = 0;
    for tree in trees() {
        for profile in ["generic", "auto"] {
            let (_, report) = run_json(&tree, profile, &[]);
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
