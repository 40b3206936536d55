//! Bad input and the exit-code contract: usage errors exit 2 and run nothing; nothing panics.

use super::util::*;

const FOUNDATION: &str = "driver.nvidia,gdr.kernel_path,gds.kernel_path,rdma.memlock";

#[test]
fn profile_with_typo_key_names_file_line_and_key() {
    let dir = tree(&[(
        "site.yaml",
        "name: site\nextends: generic\nexpect:\n  gpu_cuont: 8\n",
    )]);
    let out = preflight()
        .args(["run", "--profile"])
        .arg(dir.path().join("site.yaml"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    let err = stderr(&out);
    assert!(err.contains("site.yaml:4:3"), "{err}");
    assert!(err.contains("gpu_cuont"), "{err}");
    assert!(out.stdout.is_empty(), "nothing was run");
}

#[test]
fn profile_with_wrong_type_is_a_usage_error() {
    let dir = tree(&[(
        "site.yaml",
        "name: site\nthresholds:\n  h2d_gbytes_per_sec: {fail: fast}\n",
    )]);
    let out = preflight()
        .args(["run", "--profile"])
        .arg(dir.path().join("site.yaml"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(stderr(&out).contains("site.yaml:3"), "{}", stderr(&out));
}

#[test]
fn missing_profile_file_is_a_usage_error() {
    let out = preflight()
        .args(["run", "--profile", "/nonexistent/site.yaml"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(
        stderr(&out).contains("/nonexistent/site.yaml"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn missing_root_is_a_usage_error() {
    let out = preflight()
        .args(["run", "--root", "/nonexistent/tree"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(
        stderr(&out).contains("/nonexistent/tree"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unknown_check_id_is_a_usage_error() {
    let out = preflight()
        .args(["run", "--only", "rdma.lnik"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    let out = preflight().args(["explain", "rdma.lnik"]).output().unwrap();
    assert_eq!(code(&out), Exit::USAGE);
}

#[test]
fn bad_flag_is_a_usage_error() {
    let out = preflight()
        .args(["run", "--format", "yaml"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
}

#[test]
fn list_explain_and_profiles_work() {
    let out = preflight().arg("list").output().unwrap();
    assert_eq!(code(&out), Exit::OK);
    for id in FOUNDATION.split(',') {
        assert!(stdout(&out).contains(id), "list lacks {id}");
        let ex = preflight().args(["explain", id]).output().unwrap();
        assert_eq!(code(&ex), Exit::OK);
        assert!(stdout(&ex).contains("Why it matters"));
    }
    let out = preflight().arg("profiles").output().unwrap();
    assert_eq!(code(&out), Exit::OK);
    for name in [
        "generic",
        "gpu-only",
        "hgx-h100-ib",
        "hgx-h200-ib",
        "dgx-a100-hdr",
        "roce-400g",
    ] {
        assert!(stdout(&out).contains(name), "profiles lacks {name}");
    }
}

#[test]
fn help_documents_exit_codes() {
    let out = preflight().args(["run", "--help"]).output().unwrap();
    assert!(stdout(&out).contains("Exit codes"));
}

/// An unreadable file is evidence in an `error` result, the other checks still report, and the run exits 3.
#[test]
fn unreadable_sysfs_file_is_an_error_not_a_panic() {
    let dir = tree(&[
        ("proc/sys/kernel/osrelease", "6.8.0\n"),
        ("sys/class/infiniband/.keep", ""),
    ]);
    // /proc/modules is a directory where a file is expected: reading it fails on every user, root included.
    std::fs::create_dir_all(dir.path().join("proc/modules")).unwrap();
    let (code, report) = run_json(dir.path(), "generic", &["--only", FOUNDATION]);
    assert_eq!(code, Exit::COULD_NOT_RUN);
    assert_eq!(status_of(&report, "driver.nvidia"), "error");
    let ev = result_of(&report, "driver.nvidia")["evidence"].to_string();
    assert!(ev.contains("/proc/modules"), "{ev}");
    assert_eq!(report["status"], "error");
    assert!(!status_of(&report, "rdma.memlock").is_empty());
}

/// A CPU-only host with nothing NVIDIA: every foundation check reports, none fails under `generic`.
#[test]
fn empty_host_skips_under_generic_and_fails_required_checks_under_hgx() {
    let dir = tree(&[
        ("proc/modules", ""),
        ("proc/sys/kernel/osrelease", "6.8.0\n"),
    ]);
    let (code, report) = run_json(dir.path(), "generic", &["--only", FOUNDATION]);
    assert_eq!(code, Exit::OK, "{report:#}");
    assert_eq!(status_of(&report, "driver.nvidia"), "skip");
    assert_eq!(status_of(&report, "gdr.kernel_path"), "skip");
    let (code, report) = run_json(dir.path(), "hgx-h100-ib", &["--only", FOUNDATION]);
    assert_eq!(code, Exit::CHECK_FAILED);
    assert_eq!(status_of(&report, "driver.nvidia"), "fail");
    assert_eq!(status_of(&report, "gdr.kernel_path"), "fail");
    assert_eq!(status_of(&report, "gds.kernel_path"), "fail");
}

#[test]
fn output_flag_writes_json_beside_the_table() {
    let dir = tree(&[("proc/modules", "")]);
    let json = dir.path().join("report.json");
    let out = preflight()
        .args(["run", "--color", "never", "--only", FOUNDATION, "--root"])
        .arg(dir.path())
        .arg("--output")
        .arg(format!("json={}", json.display()))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::OK);
    assert!(stdout(&out).contains("driver.nvidia"));
    let report = super::util::json(Schema::Run, &std::fs::read(&json).unwrap());
    assert_eq!(report["schema_version"], 1);
}

#[test]
fn termination_log_is_written_and_bounded() {
    let dir = tree(&[("proc/modules", "")]);
    let log = dir.path().join("termination-log");
    let out = preflight()
        .args([
            "run",
            "--profile",
            "hgx-h100-ib",
            "--only",
            FOUNDATION,
            "--root",
        ])
        .arg(dir.path())
        .arg("--termination-log")
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.len() <= 4096);
    assert!(text.contains("gdr.kernel_path"), "{text}");
}
