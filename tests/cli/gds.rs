//! GPUDirect data paths: gds.config, gds.read and gdr.loopback against trees recorded on the H200 (before and
//! after the udev fix, with the vendor answers of the device run), and live on a machine without libcufile or
//! libibverbs.

use serde_json::Value;

use super::util::*;

const GDS: &str = "gds.config,gds.read,gdr.loopback";

fn run(root: &str, profile: &str) -> (u8, Value) {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_string_lossy().into_owned();
    run_json(&host(root), profile, &["--only", GDS, "--gds-dir", &dir])
}

#[test]
fn h200_before_udev_fix_names_the_missing_record_everywhere() {
    let (_, report) = run("h200-gds", "generic");
    let config = results(&report, "gds.config");
    assert_eq!(config.len(), 2);
    assert_eq!(config[0]["status"], "warn");
    assert!(config[0]["summary"]
        .as_str()
        .unwrap()
        .contains("compat mode"));
    assert_eq!(config[1]["status"], "warn");
    assert!(config[1]["summary"]
        .as_str()
        .unwrap()
        .contains("/run/udev/data/b254:0 missing"));
    let read = result_of(&report, "gds.read");
    // Generic does not require GDS: a blocked cuFile warns (hgx-h200-ib fails it, see below).
    assert_eq!(read["status"], "warn");
    let summary = read["summary"].as_str().unwrap();
    assert!(
        summary.contains("(5027)") && summary.contains("/run/udev/data/b254:0"),
        "{summary}"
    );
    assert!(read["remediation"]
        .as_str()
        .unwrap()
        .contains("/run/udev:/run/udev:ro"));
    let gdr = result_of(&report, "gdr.loopback");
    assert_eq!(gdr["status"], "skip");
    assert!(gdr["summary"]
        .as_str()
        .unwrap()
        .starts_with("no RDMA-capable NIC on this host"));
}

#[test]
fn h200_after_udev_fix_replays_compat_throughput_as_replayed() {
    let (_, report) = run("h200-gds-udev-fixed", "generic");
    assert_eq!(results(&report, "gds.config")[1]["status"], "pass");
    let read = result_of(&report, "gds.read");
    assert_eq!(read["status"], "warn");
    assert!(read["summary"]
        .as_str()
        .unwrap()
        .contains("via compat mode"));
    let m = &read["measurements"][0];
    assert_eq!(m["name"], "gds_read_gbytes_per_sec");
    assert!((m["value"].as_f64().unwrap() - 1.7573).abs() < 0.01, "{m}");
    assert_eq!(m["replayed"], true);
}

#[test]
fn gds_profile_fails_compat_and_missing_rdma() {
    let (code, report) = run("h200-gds-udev-fixed", "hgx-h200-ib");
    assert_eq!(code, Exit::CHECK_FAILED);
    assert_eq!(result_of(&report, "gds.read")["status"], "fail");
    assert_eq!(result_of(&report, "gdr.loopback")["status"], "fail");
}

#[test]
fn live_without_vendor_libraries_skips_with_the_reason() {
    let scratch = tempfile::tempdir().unwrap();
    let out = preflight()
        .args([
            "run",
            "--format",
            "json",
            "--color",
            "never",
            "--only",
            "gds.read,gdr.loopback",
            "--gds-dir",
        ])
        .arg(scratch.path())
        .output()
        .unwrap();
    let report: Value = json_out(Schema::Run, &out);
    let read = result_of(&report, "gds.read");
    let gdr = result_of(&report, "gdr.loopback");
    // On a machine that has the libraries these probes measure instead; the contract here is the build host.
    if read["summary"]
        .as_str()
        .unwrap_or("")
        .starts_with("libcufile not found")
    {
        assert_eq!(read["status"], "skip");
        assert!(read["summary"]
            .as_str()
            .unwrap()
            .contains("libcufile.so.0, libcufile.so"));
    }
    if gdr["summary"]
        .as_str()
        .unwrap_or("")
        .contains("rdma-core is not installed")
    {
        assert_eq!(gdr["status"], "skip");
        assert!(gdr["evidence"].to_string().contains("errno 95"));
    }
    assert_eq!(
        std::fs::read_dir(scratch.path()).unwrap().count(),
        0,
        "scratch removed"
    );
}

/// Reproduced: a live run with `--gds-dir` naming a missing path went ahead (and made it, parents included).
#[test]
fn missing_gds_dir_is_a_usage_error_live_and_nothing_is_created() {
    let base = tempfile::tempdir().unwrap();
    let missing = base.path().join("not/there");
    let out = preflight()
        .args(["run", "--only", "gds.read", "--gds-dir"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE, "{}", stderr(&out));
    assert!(stderr(&out).contains("--gds-dir"), "{}", stderr(&out));
    assert!(!base.path().join("not").exists());
}
