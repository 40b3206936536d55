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
    assert_eq!(
        report["schema_version"],
        fabric_preflight::report::SCHEMA_VERSION
    );
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

/// A tiny tree on which the FOUNDATION checks pass (exit 0 when every report is delivered).
fn passing_tree() -> tempfile::TempDir {
    tree(&[("proc/modules", "")])
}

fn run_passing(root: &std::path::Path, extra: &[&str]) -> std::process::Output {
    preflight()
        .args(["run", "--color", "never", "--only", FOUNDATION, "--root"])
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn unwritable_output_or_termination_log_is_refused_before_any_check_runs() {
    let dir = passing_tree();
    for flag in ["--output", "--termination-log"] {
        for path in [
            "/nonexistent/dir/report.json".to_string(),
            // A directory where a file is expected: unwritable for root too.
            dir.path().join("proc").display().to_string(),
        ] {
            let out = run_passing(dir.path(), &[flag, &path]);
            assert_eq!(code(&out), Exit::USAGE, "{flag} {path}: {}", stderr(&out));
            assert!(stderr(&out).contains(&path), "{}", stderr(&out));
            assert!(out.stdout.is_empty(), "{flag} {path}: a check ran");
        }
    }
    assert!(
        !std::path::Path::new("/nonexistent/dir").exists(),
        "no directory is created"
    );
}

#[test]
fn a_refused_run_leaves_no_empty_report_file_behind() {
    let dir = passing_tree();
    let out_dir = tempfile::tempdir().unwrap();
    let report = out_dir.path().join("report.json");
    let out = run_passing(
        dir.path(),
        &[
            "--output",
            &format!("json={}", report.display()),
            "--termination-log",
            "/nonexistent/dir/termination-log",
        ],
    );
    assert_eq!(code(&out), Exit::USAGE, "{}", stderr(&out));
    assert!(
        !report.exists(),
        "an empty {} was left behind",
        report.display()
    );
}

#[test]
fn snapshot_into_an_unwritable_directory_is_refused_before_any_check_runs() {
    // /proc refuses new entries, to root too.
    let out = preflight()
        .args([
            "snapshot",
            "--only",
            "driver.nvidia",
            "/proc/fabric-preflight-snap",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE, "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing was run"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "a check ran");
}

#[test]
fn report_lost_at_the_end_is_exit_3_never_0() {
    let dir = passing_tree();
    assert_eq!(code(&run_passing(dir.path(), &[])), Exit::OK);
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let out = preflight()
        .args(["run", "--color", "never", "--only", FOUNDATION, "--root"])
        .arg(dir.path())
        .stdout(full())
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::COULD_NOT_RUN, "stdout on /dev/full");
    assert!(stderr(&out).contains("stdout"), "{}", stderr(&out));
    for spec in ["json=/dev/full", "/dev/full"] {
        let out = run_passing(dir.path(), &["--output", spec]);
        assert_eq!(code(&out), Exit::COULD_NOT_RUN, "--output {spec}");
        assert!(stderr(&out).contains("/dev/full"), "{}", stderr(&out));
    }
    let out = run_passing(dir.path(), &["--termination-log", "/dev/full"]);
    assert_eq!(
        code(&out),
        Exit::COULD_NOT_RUN,
        "--termination-log /dev/full"
    );
}

/// Every command, not only `run`: output lost on a full device is exit 3, never 0.
#[test]
fn every_command_whose_output_is_lost_exits_3() {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let log = testdata("nccl/v2.3-ring-receive-only-ib-gdrdma.log");
    let topo_root = host("hgx-healthy");
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["list".as_ref()],
        vec!["profiles".as_ref()],
        vec!["explain".as_ref(), "rdma.link".as_ref()],
        vec!["topo".as_ref(), "--root".as_ref(), topo_root.as_os_str()],
        vec!["nccl".as_ref(), log.as_os_str()],
    ];
    for args in commands {
        let ok = preflight().args(&args).output().unwrap();
        assert_eq!(code(&ok), Exit::OK, "{args:?}: {}", stderr(&ok));
        let out = preflight().args(&args).stdout(full()).output().unwrap();
        assert_eq!(code(&out), Exit::COULD_NOT_RUN, "{args:?} on /dev/full");
        assert!(
            stderr(&out).contains("writing to stdout"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn unknown_output_format_is_a_usage_error_and_dash_is_stdout() {
    let dir = passing_tree();
    let cwd = tempfile::tempdir().unwrap();
    let out = preflight()
        .current_dir(cwd.path())
        .args(["run", "--only", FOUNDATION, "--root"])
        .arg(dir.path())
        .args(["--output", "jsn=report.json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(
        stderr(&out).contains("unknown report format `jsn`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_dir(cwd.path()).unwrap().count(),
        0,
        "no file written"
    );

    // `json=-`: stdout carries the JSON report alone (the table would corrupt it).
    let out = run_passing(dir.path(), &["--output", "json=-"]);
    assert_eq!(code(&out), Exit::OK, "{}", stderr(&out));
    let report = json_out(Schema::Run, &out);
    assert_eq!(
        report["schema_version"],
        fabric_preflight::report::SCHEMA_VERSION
    );
    let out = run_passing(dir.path(), &["--format", "junit", "--output", "-"]);
    assert!(stdout(&out).starts_with("<?xml"), "{}", stdout(&out));
    let out = run_passing(dir.path(), &["--output", "json=-", "--output", "junit=-"]);
    assert_eq!(code(&out), Exit::USAGE, "two reports cannot share stdout");
}

#[test]
fn huge_zero_and_negative_timeouts_are_usage_errors_not_panics() {
    let dir = passing_tree();
    for t in ["1e20", "0", "-1", "inf", "NaN", "86401"] {
        let pair = pair_listening_with(&format!("--timeout={t}"));
        for out in [run_passing(dir.path(), &[&format!("--timeout={t}")]), pair] {
            assert_eq!(code(&out), Exit::USAGE, "--timeout {t}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("--timeout must be more than 0"),
                "{}",
                stderr(&out)
            );
            assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        }
    }
    for t in ["1e20", "0", "-5", ".inf"] {
        let profiles = tree(&[(
            "site.yaml",
            &format!("name: site\nextends: generic\nchecks:\n  rdma.link:\n    timeout: {t}\n"),
        )]);
        let out = preflight()
            .args(["run", "--root"])
            .arg(dir.path())
            .arg("--profile")
            .arg(profiles.path().join("site.yaml"))
            .output()
            .unwrap();
        assert_eq!(code(&out), Exit::USAGE, "timeout: {t}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("site.yaml:5") && err.contains("timeout must be"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "nothing was run");
    }
}

#[test]
fn empty_selection_is_a_usage_error() {
    let dir = passing_tree();
    let out = preflight()
        .args([
            "run",
            "--only",
            "rdma.link",
            "--skip",
            "rdma.link",
            "--root",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(
        stderr(&out).contains("no check left to run"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn invalid_profile_still_writes_the_termination_log() {
    let dir = tree(&[("site.yaml", "name: site\nexpect:\n  gpu_cuont: 8\n")]);
    let log = dir.path().join("termination-log");
    let out = preflight()
        .args(["run", "--profile"])
        .arg(dir.path().join("site.yaml"))
        .arg("--termination-log")
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    let text = std::fs::read_to_string(&log).expect("termination log written");
    assert!(
        text.starts_with("fabric-preflight usage error (exit 2)"),
        "{text}"
    );
    assert!(
        text.contains("site.yaml:3:3") && text.contains("gpu_cuont"),
        "{text}"
    );
}

/// `--strict` on a node whose only finding is a warning: exit 1, and both the JUnit report and the termination
/// log say it failed and why.
#[test]
fn strict_warning_fails_in_junit_and_the_termination_log_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (xml, log) = (dir.path().join("r.xml"), dir.path().join("term"));
    let out = preflight()
        .args(["run", "--strict", "--only", "gds.config", "--root"])
        .arg(host("hgx-healthy"))
        .arg("--output")
        .arg(format!("junit={}", xml.display()))
        .arg("--termination-log")
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED, "{}", stderr(&out));
    let xml = std::fs::read_to_string(xml).unwrap();
    assert!(xml.contains(r#"failures="1""#), "{xml}");
    assert!(
        // A coded warning's type is its code (GDS102: cufile.json missing), not the bare status.
        xml.contains(r#"<failure message="GDS102: "#) && xml.contains(r#"type="GDS102""#),
        "{xml}"
    );
    let log = std::fs::read_to_string(log).unwrap();
    assert!(
        log.starts_with("fabric-preflight WARN (exit 1: --strict fails warnings)"),
        "{log}"
    );
}

#[test]
fn snapshot_into_a_missing_parent_is_refused_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("typo/node07");
    let out = preflight()
        .arg("snapshot")
        .arg(&target)
        .args(["--only", "driver.nvidia"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not a directory"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn refused_flag_still_writes_the_termination_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("termination-log");
    for form in [
        vec!["--termination-log".to_string(), log.display().to_string()],
        vec![format!("--termination-log={}", log.display())],
    ] {
        let out = preflight()
            .args(["run", "--format", "yaml"])
            .args(&form)
            .output()
            .unwrap();
        assert_eq!(code(&out), Exit::USAGE);
        let text = std::fs::read_to_string(&log).expect("termination log written");
        assert!(
            text.starts_with("fabric-preflight usage error (exit 2)"),
            "{text}"
        );
        assert!(text.contains("'yaml'"), "{text}");
        std::fs::remove_file(&log).unwrap();
    }
    let out = preflight()
        .args(["run", "--help", "--termination-log"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::OK);
    assert!(!log.exists(), "--help is not an error");
}
