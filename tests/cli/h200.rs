//! The real H200 VM, recorded by `fabric-preflight snapshot` on the GPU machine
//! (`bench/record-machine.sh`; raw outputs in testdata/device/h200/full/), replayed: host files through
//! `--root`, NVML/CUDA/cuFile/verbs answers from its `vendor-answers.json`.

use super::util::*;

const SNAPSHOT: &str = "h200-vm-snapshot";
/// rdma.memlock judges this test process, not the recording, and nccl.transport needs a log.
const NOT_OF_THE_RECORDING: &str = "rdma.memlock,nccl.transport";

#[test]
fn h200_snapshot_replays_what_the_machine_reported() {
    let (code, report) = run_json(
        &host(SNAPSHOT),
        "generic",
        &["--skip", NOT_OF_THE_RECORDING],
    );
    let got: Vec<(String, String, String)> = verdicts(&report);
    let want = [
        ("driver.nvidia", "", "pass"),
        ("gpu.inventory", "", "pass"),
        ("gpu.inventory", "0000:00:06.0", "pass"),
        ("gpu.bar1", "0000:00:06.0", "pass"),
        ("gpu.p2p", "", "skip"),
        ("gpu.nvlink", "", "skip"),
        ("nvlink.imex", "", "skip"),
        ("nvlink.link_quality", "", "skip"),
        ("gdr.kernel_path", "", "skip"),
        ("gds.kernel_path", "", "warn"),
        ("gds.config", "/etc/cufile.json", "warn"),
        ("gds.config", "/tmp", "warn"),
        ("rdma.devices", "", "skip"),
        ("rdma.link", "", "skip"),
        ("rdma.roce", "", "skip"),
        ("rdma.counters", "", "skip"),
        ("efa.devices", "", "skip"),
        ("efa.link", "", "skip"),
        ("efa.counters", "", "skip"),
        ("efa.libfabric", "", "skip"),
        ("pcie.link", "GPU0 0000:00:06.0", "pass"),
        ("pcie.acs", "", "skip"),
        ("pcie.aer", "", "skip"),
        ("pcie.iommu", "", "pass"),
        ("topo.gpu_nic", "", "skip"),
        ("nccl.env", "", "pass"),
        ("gpu.pcie", "0000:00:06.0", "pass"),
        ("gpu.copy_bandwidth", "0000:00:06.0", "pass"),
        ("gds.read", "/tmp -> GPU 0", "warn"),
        ("rdma.loopback", "", "skip"),
        ("gdr.loopback", "", "skip"),
        ("efa.gdr", "", "skip"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want, "{report:#}");
    assert_eq!(code, Exit::OK, "warnings only");

    // What each result says (driver version, GPU model, link, BAR1, the cuFile error and udev path, pcie.acs
    // in a VM) is compared whole by the golden outputs: tests/golden/h200-vm-snapshot/.
    let copy = result_of(&report, "gpu.copy_bandwidth");
    for m in copy["measurements"].as_array().unwrap() {
        assert_eq!(m["replayed"], true, "{m}");
        if m["unit"] == "GB/s" {
            assert!(m["value"].as_f64().unwrap() > 50.0, "{m}");
        }
    }
}

#[test]
fn h200_snapshot_fails_an_hgx_node_profile_and_strict() {
    let (code, report) = run_json(
        &host(SNAPSHOT),
        "hgx-h200-ib",
        &["--skip", NOT_OF_THE_RECORDING],
    );
    assert_eq!(code, Exit::CHECK_FAILED);
    for id in [
        "driver.nvidia",
        "gdr.kernel_path",
        "gds.kernel_path",
        "rdma.devices",
        "rdma.link",
        "gdr.loopback",
    ] {
        assert!(
            verdicts(&report)
                .iter()
                .any(|(i, _, s)| i == id && s == "fail"),
            "{id} should fail"
        );
    }
    assert_eq!(
        status_of(&report, "gds.read"),
        "fail",
        "cuFile blocked fails where GDS is required"
    );
    let (code, _) = run_json(
        &host(SNAPSHOT),
        "generic",
        &["--skip", NOT_OF_THE_RECORDING, "--strict"],
    );
    assert_eq!(code, Exit::CHECK_FAILED, "--strict: warnings fail");
}
