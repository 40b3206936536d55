//! GPU probes: a CPU-only host reports the missing driver cleanly; recorded answers replay an 8-GPU HGX node and
//! the real H200 machine; `snapshot` records a tree that replays the live run.

use std::path::Path;

use serde_json::Value;

use crate::util::{self, host, preflight, result_of, results, run_json, verdicts};

const GPU_CHECKS: &str = "gpu.inventory,gpu.pcie,gpu.bar1,gpu.p2p,gpu.copy_bandwidth";

fn measurement(check: &Value, name: &str) -> Option<(f64, bool)> {
    check["measurements"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
        .map(|m| {
            (
                m["value"].as_f64().unwrap_or(f64::NAN),
                m["replayed"] == true,
            )
        })
}

#[test]
fn cpu_only_host_gpu_checks_skip_naming_the_missing_library() {
    if Path::new("/proc/driver/nvidia").exists() {
        return; // a GPU machine: covered by the recorded H200 answers instead
    }
    let out = preflight()
        .args(["run", "--format", "json", "--only", GPU_CHECKS])
        .output()
        .expect("binary starts without libnvidia-ml and libcuda");
    assert_eq!(util::code(&out), 0, "{}", util::stderr(&out));
    let report: Value = util::json_out(util::Schema::Run, &out);
    let v = verdicts(&report);
    assert_eq!(v.len(), 5, "{v:?}");
    // No GPU on the bus decides (presence.rs); the library's own message stays in the evidence.
    for c in report["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "skip", "{c}");
        let summary = c["summary"].as_str().unwrap();
        assert!(summary.contains("no NVIDIA GPU on this host"), "{summary}");
        assert!(
            c["evidence"]
                .to_string()
                .contains("cannot open shared object file"),
            "{c}"
        );
    }
}

#[test]
fn cpu_only_host_gpu_profile_fails_without_driver() {
    if Path::new("/proc/driver/nvidia").exists() {
        return;
    }
    let out = preflight()
        .args([
            "run",
            "--format",
            "json",
            "--profile",
            "hgx-h100-ib",
            "--only",
            GPU_CHECKS,
        ])
        .output()
        .expect("runs");
    let report: Value = util::json_out(util::Schema::Run, &out);
    assert_eq!(util::code(&out), util::Exit::CHECK_FAILED);
    for c in report["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "fail", "{c}");
    }
}

#[test]
fn eight_gpu_recording_replays_p2p_matrix_links_and_copies() {
    let (code, report) = run_json(
        &host("gpu-8x-h100-answers"),
        "hgx-h100-ib",
        &["--only", GPU_CHECKS],
    );
    // GPU 6 of the recording trained at x8: the one failure.
    assert_eq!(code, util::Exit::CHECK_FAILED);

    let inventory = results(&report, "gpu.inventory");
    assert_eq!(inventory.len(), 9, "node + 8 GPUs");
    assert!(
        inventory.iter().all(|c| c["status"] == "pass"),
        "{inventory:?}"
    );
    assert_eq!(measurement(inventory[0], "gpu_count"), Some((8.0, true)));

    let p2p = results(&report, "gpu.p2p");
    assert_eq!(p2p.len(), 28, "every unordered pair of 8 GPUs");
    assert!(p2p.iter().all(|c| c["status"] == "pass"));
    assert_eq!(p2p[0]["subject"], "GPU0 0000:18:00.0 <-> GPU1 0000:2a:00.0");
    assert!(p2p[0]["summary"]
        .as_str()
        .unwrap()
        .contains("NVLink yes, topology NODE"));
    assert!(p2p[27]["summary"]
        .as_str()
        .unwrap()
        .contains("topology NODE"));
    assert!(p2p[3]["summary"].as_str().unwrap().contains("topology SYS"));

    let pcie = results(&report, "gpu.pcie");
    assert_eq!(pcie.len(), 8);
    let failed: Vec<&str> = pcie
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["subject"].as_str().unwrap())
        .collect();
    assert_eq!(failed, vec!["0000:ba:00.0"]);
    assert!(pcie[0]["summary"]
        .as_str()
        .unwrap()
        .starts_with("Gen5 x16 under load (max Gen5 x16, idle Gen1 x16)"));

    let copies = results(&report, "gpu.copy_bandwidth");
    assert_eq!(copies.len(), 8 + 56, "8 GPUs and every ordered pair");
    assert!(copies.iter().all(|c| c["status"] == "pass"), "{copies:?}");
    let (h2d, replayed) = measurement(copies[0], "h2d_bandwidth").unwrap();
    assert!((h2d - 53.5).abs() < 0.5 && replayed, "{h2d}");
    let (d2d, replayed) = measurement(copies[8], "d2d_bandwidth").unwrap();
    assert!((d2d - 370.0).abs() < 1.0 && replayed, "{d2d}");
    for c in report["checks"].as_array().unwrap() {
        let evidence = c["evidence"].to_string();
        assert!(evidence.contains("replayed from recording"), "{c}");
    }
}

#[test]
fn nvlink_profile_fails_a_pair_without_nvlink() {
    let dir = tempfile::tempdir().unwrap();
    let mut answers: Value = serde_json::from_str(
        &std::fs::read_to_string(host("gpu-8x-h100-answers").join("vendor-answers.json")).unwrap(),
    )
    .unwrap();
    answers["nvml"]["pairs"][0]["nvlink"] = serde_json::json!({"Ok": "not supported"});
    std::fs::write(dir.path().join("vendor-answers.json"), answers.to_string()).unwrap();
    let (_, report) = run_json(dir.path(), "hgx-h100-ib", &["--only", "gpu.p2p"]);
    let p2p = results(&report, "gpu.p2p");
    assert_eq!(p2p[0]["status"], "fail");
    assert!(p2p[0]["summary"]
        .as_str()
        .unwrap()
        .contains("no NVLink P2P (not supported)"));
    assert!(p2p[1..].iter().all(|c| c["status"] == "pass"));
}

#[test]
fn snapshot_of_this_host_replays_the_same_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let only = format!("driver.nvidia,{GPU_CHECKS}");
    let out = preflight()
        .args(["snapshot", "--only", &only])
        .arg(&snap)
        .output()
        .expect("runs");
    assert_eq!(util::code(&out), 0, "{}", util::stderr(&out));
    assert!(snap.join("vendor-answers.json").is_file());
    let live = preflight()
        .args(["run", "--format", "json", "--only", &only])
        .output()
        .expect("runs");
    let live: Value = util::json_out(util::Schema::Run, &live);
    let (_, replayed) = run_json(&snap, "generic", &["--only", &only]);
    assert_eq!(verdicts(&replayed), verdicts(&live));
    if !Path::new("/proc/driver/nvidia").exists() {
        let r = result_of(&replayed, "gpu.inventory");
        assert!(r["evidence"]
            .to_string()
            .contains("replayed from recording"));
    }
}

#[test]
fn snapshot_refuses_a_non_empty_directory() {
    let dir = util::tree(&[("/etc/keep", "x")]);
    let out = preflight()
        .args(["snapshot", "--only", "gpu.bar1"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(util::code(&out), util::Exit::USAGE);
    assert!(util::stderr(&out).contains("not empty"));
}

#[test]
fn h200_snapshot_replays_the_real_machine() {
    let (code, report) = run_json(
        &host("h200-gpu-snapshot"),
        "gpu-only",
        &["--only", &format!("driver.nvidia,{GPU_CHECKS}")],
    );
    assert_eq!(code, 0, "{report}");
    let inventory = results(&report, "gpu.inventory");
    assert_eq!(
        inventory[0]["summary"],
        "1 GPU(s), driver 580.159.04, CUDA 13.0"
    );
    assert_eq!(inventory[1]["subject"], "0000:00:06.0");
    assert!(inventory[1]["summary"]
        .as_str()
        .unwrap()
        .starts_with("NVIDIA H200, persistence on, MIG off, ECC on"));
    let bar1 = result_of(&report, "gpu.bar1");
    assert_eq!(measurement(bar1, "bar1_total"), Some((262144.0, true)));
    let pcie = result_of(&report, "gpu.pcie");
    assert_eq!(pcie["status"], "pass");
    assert!(pcie["summary"]
        .as_str()
        .unwrap()
        .starts_with("Gen5 x16 under load (max Gen5 x16"));
    assert!(pcie["evidence"]
        .to_string()
        .contains("/sys/bus/pci/devices/0000:00:06.0/current_link_speed = 32.0 GT/s PCIe (idle)"));
    let p2p = result_of(&report, "gpu.p2p");
    assert_eq!(p2p["status"], "skip");
    assert_eq!(p2p["summary"], "1 GPU(s): no pairs to check");
    let copy = result_of(&report, "gpu.copy_bandwidth");
    assert_eq!(copy["status"], "pass");
    for dir in ["h2d_bandwidth", "d2h_bandwidth"] {
        let (gbs, replayed) = measurement(copy, dir).unwrap();
        assert!((50.0..60.0).contains(&gbs) && replayed, "{dir} {gbs}");
    }
    assert!(copy["summary"]
        .as_str()
        .unwrap()
        .contains("host memory first-touched on CPUs 0-15, data verified both ways"));
}
