//! `gpu.nvlink` on recorded trees (testdata/gen_nvml_nvlink.py): healthy HGX boards pass, a GPU without NVLink
//! skips, and each fault class (a link down or missing, the fabric manager not started, registration in
//! progress, a degraded fabric, an NVML error) fails naming the GPU. Each faulty tree is otherwise the healthy
//! HGX H100 shape, so before `gpu.nvlink` a full run on it exited 0.

use serde_json::Value;

use super::util::*;

const PROFILE: &str = "hgx-h100-ib";

fn nvlink_results(tree: &str, profile: &str) -> (u8, Vec<Value>) {
    let (code, report) = run_json(&host(tree), profile, &["--only", "gpu.nvlink"]);
    let results = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["id"] == "gpu.nvlink")
        .cloned()
        .collect();
    (code, results)
}

/// `(subject, status, summary)` of the results that are not `pass`.
fn not_passing(results: &[Value]) -> Vec<(String, String, String)> {
    results
        .iter()
        .filter(|c| c["status"] != "pass")
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("subject"), s("status"), s("summary"))
        })
        .collect()
}

#[test]
fn healthy_hgx_boards_pass_every_gpu() {
    for tree in ["nvlink-hgx-h100", "nvlink-hgx-h100-r535-fabric-v1"] {
        let (code, results) = nvlink_results(tree, PROFILE);
        assert_eq!(code, Exit::OK, "{tree}: {results:?}");
        assert_eq!(results.len(), 8, "{tree}: one result per GPU");
        assert!(not_passing(&results).is_empty(), "{tree}: {results:?}");
        // Judged from what was read, and says so.
        let evidence = results[0]["evidence"].to_string();
        assert!(evidence.contains("active 0-17"), "{tree}: {evidence}");
        assert!(
            evidence.contains("replayed from recording"),
            "{tree}: {evidence}"
        );
    }
    let (_, v1) = nvlink_results("nvlink-hgx-h100-r535-fabric-v1", PROFILE);
    assert!(v1[0]["evidence"]
        .to_string()
        .contains("nvmlDeviceGetGpuFabricInfo = state 3"));
}

/// The H200 of session 5 (one GPU in a VM): every link NOT_SUPPORTED, fabric SUCCESS with state 0.
#[test]
fn gpu_without_nvlink_skips_not_passes() {
    let (code, results) = nvlink_results("nvlink-h200-vm-no-nvlink", "auto");
    assert_eq!(code, Exit::OK);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["status"], "skip", "{:?}", results[0]);
    assert!(results[0]["summary"]
        .as_str()
        .unwrap()
        .contains("no NVLink"));
    // Under a profile that expects NVLinks the same GPU fails.
    let (code, results) = nvlink_results("nvlink-h200-vm-no-nvlink", "hgx-h200-ib");
    assert_eq!(code, Exit::CHECK_FAILED);
    assert_eq!(results[0]["status"], "fail");
}

#[test]
fn each_fault_class_fails_naming_the_gpu() {
    for (tree, want) in [
        (
            "nvlink-hgx-h100-link-down",
            &[
                ("0000:4b:00.0", "NVLink 5, 11 inactive"),
                (
                    "0000:ba:00.0",
                    "the profile expects 18 active (link 17 not supported)",
                ),
            ][..],
        ),
        (
            "nvlink-hgx-h100-fabric-degraded",
            &[
                (
                    "0000:3a:00.0",
                    "completed with NVML_ERROR_INSUFFICIENT_RESOURCES",
                ),
                ("0000:ba:00.0", "bandwidth degraded"),
            ][..],
        ),
        (
            "nvlink-hgx-h100-nvml-error",
            &[
                (
                    "0000:29:00.0",
                    "GPU 1: nvmlDeviceGetGpuFabricInfoV: NVML_ERROR_UNKNOWN",
                ),
                (
                    "0000:98:00.0",
                    "GPU 4: nvmlDeviceGetNvLinkState(link 7): NVML_ERROR_UNKNOWN",
                ),
            ][..],
        ),
    ] {
        let (code, results) = nvlink_results(tree, PROFILE);
        assert_eq!(code, Exit::CHECK_FAILED, "{tree}");
        let wrong = not_passing(&results);
        assert_eq!(wrong.len(), want.len(), "{tree}: {wrong:?}");
        for ((subject, status, summary), (want_subject, words)) in wrong.iter().zip(want) {
            assert_eq!(
                (subject.as_str(), status.as_str()),
                (*want_subject, "fail"),
                "{tree}"
            );
            assert!(summary.contains(words), "{tree}: {summary}");
        }
    }
    for (tree, words, fix) in [
        (
            "nvlink-hgx-h100-fm-not-started",
            "registration not started",
            "nvidia-fabricmanager",
        ),
        (
            "nvlink-hgx-h100-fabric-in-progress",
            "registration in progress",
            "re-run",
        ),
    ] {
        let (code, results) = nvlink_results(tree, PROFILE);
        assert_eq!(code, Exit::CHECK_FAILED, "{tree}");
        assert_eq!(results.len(), 8);
        for r in &results {
            assert_eq!(r["status"], "fail", "{tree}: {r}");
            assert!(
                r["summary"].as_str().unwrap().contains(words),
                "{tree}: {r}"
            );
            assert!(
                r["remediation"].as_str().unwrap().contains(fix),
                "{tree}: {r}"
            );
        }
    }
}

/// Recordings made before NVLink answers were kept are not judged: a skip saying so, never a pass.
#[test]
fn older_recordings_are_not_judged() {
    let (code, results) = nvlink_results("gpu-8x-h100-answers", PROFILE);
    assert_eq!(code, Exit::OK);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["status"], "skip");
    assert!(results[0]["summary"].as_str().unwrap().contains("predate"));
}

/// The VM tree says what the H200 itself answered in session 5 (nvml-raw.json, written by bench/nvml-nvlink.sh):
/// rc 3 (NOT_SUPPORTED) on every link, fabric SUCCESS with state, status and clique 0.
#[test]
fn vm_tree_re_enacts_the_h200_capture() {
    let raw: Value = serde_json::from_str(
        &std::fs::read_to_string(testdata(
            "device/h200/session-2026-12-02-s5/nvlink/nvml-raw.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let tree: Value = serde_json::from_str(
        &std::fs::read_to_string(host("nvlink-h200-vm-no-nvlink").join("vendor-answers.json"))
            .unwrap(),
    )
    .unwrap();
    let (captured, recorded) = (&raw["gpus"][0], &tree["nvml"]["gpus"][0]["nvlink"]);
    let links = recorded["links"].as_array().unwrap();
    assert_eq!(links.len(), captured["links"].as_array().unwrap().len());
    for (link, answer) in captured["links"].as_array().unwrap().iter().zip(links) {
        assert_eq!(link["state"]["rc"], 3, "{link}");
        assert!(
            answer["Err"]
                .as_str()
                .unwrap()
                .contains("NVML_ERROR_NOT_SUPPORTED"),
            "{answer}"
        );
    }
    let fabric = &recorded["fabric"]["Ok"];
    assert_eq!(captured["fabric_v2"]["call"]["rc"], 0);
    assert_eq!(fabric["state"], captured["fabric_v2"]["state"]);
    assert_eq!(fabric["health_mask"], captured["fabric_v2"]["health_mask"]);
    assert_eq!(fabric["clique_id"], captured["fabric_v2"]["clique"]);
    assert_eq!(fabric["status"], "NVML_SUCCESS");
    assert_eq!(captured["fabric_v2"]["status"], 0);
}
