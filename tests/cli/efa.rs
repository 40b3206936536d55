//! AWS EFA and the cloud GPU instance types (issue 21): the recorded trees of `testdata/gen_efa.py`, `--profile
//! auto` from DMI, and libfabric / libefa / libibverbs stand-ins compiled at test time (tests/standins/).

use std::path::Path;

use serde_json::Value;

use super::faults::shims;
use super::util::*;

/// The EFA checks and the RC checks that must leave EFA alone.
const EFA_CHECKS: &str = "efa.devices,efa.link,efa.counters,efa.libfabric,efa.gdr";

/// Checks whose verdict is this machine's, not the tree's, where the tree records no answers for them: the
/// process's own memlock limit, and the libraries (NVML, CUDA, cuFile, libibverbs) asked live.
const NOT_THE_TREE: &str =
    "--skip=rdma.memlock,gpu.inventory,gpu.bar1,gpu.p2p,gpu.pcie,gpu.copy_bandwidth,\
gds.read,rdma.loopback,gdr.loopback";

fn failures(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| format!("{} {}: {}", c["id"], c["subject"], c["summary"]))
        .collect()
}

fn one<'a>(report: &'a Value, id: &str, status: &str) -> &'a Value {
    results(report, id)
        .into_iter()
        .find(|c| c["status"] == status)
        .unwrap_or_else(|| panic!("no {status} result for {id}: {:#?}", results(report, id)))
}

/// Every healthy cloud tree gets its cloud profile from `--profile auto` and no check fails on it.
#[test]
fn healthy_cloud_trees_pick_their_profile_and_pass() {
    for (tree, profile) in [
        ("aws-p5en", "p5en.48xlarge"),
        ("aws-p5", "p5.48xlarge"),
        ("azure-nd-h100-v5", "Standard_ND96isr_H100_v5"),
        ("gcp-a3-ultra", "a3-ultragpu-8g"),
        ("gcp-a3-mega", "a3-megagpu-8g"),
    ] {
        let (_, report) = run_json(&host(tree), "auto", &[NOT_THE_TREE]);
        assert_eq!(
            report["profile"], profile,
            "{tree}: {:#?}",
            report["profile_selection"]
        );
        assert_eq!(failures(&report), Vec::<String>::new(), "{tree}");
    }
}

#[test]
fn the_efa_checks_pass_on_healthy_efa_trees() {
    for tree in ["aws-p5en", "aws-p5"] {
        let (code, report) = run_json(&host(tree), "auto", &["--only", EFA_CHECKS]);
        assert_eq!(code, 0, "{tree}: {:#?}", report["checks"]);
        for c in report["checks"].as_array().unwrap() {
            assert!(
                c["status"] == "pass" || (c["id"] == "efa.link" && c["status"] == "skip"),
                "{tree}: {c:#?}"
            );
        }
    }
    // P5: 31 EFA-only interfaces say there is no link signal; the one with an ENA netdev is judged by it.
    let (_, report) = run_json(&host("aws-p5"), "auto", &["--only", "efa.link"]);
    let skip = one(&report, "efa.link", "skip");
    assert!(
        skip["summary"]
            .as_str()
            .unwrap()
            .starts_with("31 EFA(s): no link signal"),
        "{skip:#?}"
    );
    let pass = one(&report, "efa.link", "pass");
    assert!(
        pass["summary"]
            .as_str()
            .unwrap()
            .contains("ENA netdev ens32 up"),
        "{pass:#?}"
    );
}

/// Each broken variant fails (or warns) in its own check, naming what is wrong; failed before this change as
/// no check knew EFA.
#[test]
fn broken_efa_variants_are_named() {
    for (tree, id, status, words) in [
        (
            "aws-p5en-efa-unbound",
            "efa.devices",
            "fail",
            "without the efa driver: 0000:65:00.0",
        ),
        (
            "aws-p5en-no-libfabric-provider",
            "efa.libfabric",
            "fail",
            "NCCL would fall back to TCP sockets",
        ),
        (
            "aws-p5en-ena-down",
            "efa.link",
            "fail",
            "ENA netdev ens35 of this interface is down",
        ),
        (
            "aws-p5en-read-errors",
            "efa.counters",
            "warn",
            "rdma_read_wr_err 14",
        ),
        (
            "aws-p5en-no-gdr",
            "efa.gdr",
            "fail",
            "no GPUDirect RDMA path on EFA",
        ),
        (
            "aws-p5en-late-efa",
            "efa.devices",
            "fail",
            "may still be initialising",
        ),
    ] {
        let (code, report) = run_json(&host(tree), "auto", &["--only", EFA_CHECKS]);
        assert_eq!(report["profile"], "p5en.48xlarge", "{tree}");
        let r = one(&report, id, status);
        assert!(
            r["summary"].as_str().unwrap().contains(words),
            "{tree}: {r:#?}"
        );
        assert_eq!(code, if status == "fail" { 1 } else { 0 }, "{tree}");
    }
    let (_, report) = run_json(
        &host("aws-p5en-late-efa"),
        "auto",
        &["--only", "efa.devices"],
    );
    let s = result_of(&report, "efa.devices")["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        s.contains("12 EFA device(s), the profile expects 16") && s.contains("3 min 7 s"),
        "{s}"
    );
}

fn with_dmi(scenario: &str, product: Option<&str>) -> tempfile::TempDir {
    let dir = copy_scenario(scenario);
    let dmi = dir.path().join("sys/class/dmi/id");
    match product {
        Some(p) => std::fs::write(dmi.join("product_name"), format!("{p}\n")).unwrap(),
        None => std::fs::remove_dir_all(&dmi).unwrap(),
    }
    dir
}

fn selection(root: &Path) -> (String, Vec<String>) {
    let (_, report) = run_json(root, "auto", &["--only", "efa.devices"]);
    let reasons = report["profile_selection"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    (report["profile"].as_str().unwrap().to_string(), reasons)
}

/// DMI alone names the EC2 instance type: a tree holding nothing else still gets that profile, and the reason
/// says what DMI showed.
#[test]
fn auto_picks_each_ec2_profile_from_dmi_alone() {
    for product in [
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p4d.24xlarge",
    ] {
        let dir = tree(&[
            ("sys/class/dmi/id/sys_vendor", "Amazon EC2\n"),
            ("sys/class/dmi/id/product_name", &format!("{product}\n")),
            ("sys/class/dmi/id/board_vendor", "Amazon EC2\n"),
        ]);
        let (picked, reasons) = selection(dir.path());
        assert_eq!(picked, product, "{reasons:#?}");
        assert!(
            reasons[0].contains(&format!("product_name \"{product}\"")),
            "{reasons:#?}"
        );
    }
}

/// DMI absent or naming no known type: the hardware match decides (here EFA count and GPU model among the AWS
/// profiles when DMI says EC2; nothing cloud-specific without DMI).
#[test]
fn auto_falls_back_to_the_hardware_match() {
    let unknown = with_dmi("aws-p5en", Some("p6-b300.48xlarge"));
    let (picked, reasons) = selection(unknown.path());
    assert_eq!(picked, "p5en.48xlarge", "{reasons:#?}");
    assert!(reasons[0].contains("16 EFA on the PCI bus"), "{reasons:#?}");
    assert!(
        reasons[1].contains("efa_device_count 16: yes"),
        "{reasons:#?}"
    );
    let absent = with_dmi("aws-p5en", None);
    let (picked, reasons) = selection(absent.path());
    assert_eq!(picked, "generic", "{reasons:#?}");
    assert!(reasons[0].contains("sys_vendor absent"), "{reasons:#?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("p5en.48xlarge does not fit")
                && r.contains("cloud AWS EC2 in DMI: no")),
        "{reasons:#?}"
    );
    // An Azure VM's hardware on bare metal (no DMI) is the HGX profile, not Azure's.
    let (picked, _) = selection(with_dmi("azure-nd-h100-v5", None).path());
    assert_eq!(picked, "hgx-h100-ib");
}

/// aws-p5en without its recorded answers, so libfabric and libefa are asked live (the stand-ins).
fn live_p5en() -> tempfile::TempDir {
    let dir = copy_scenario("aws-p5en");
    std::fs::remove_file(dir.path().join("vendor-answers.json")).unwrap();
    dir
}

fn efa_devices_of(root: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(root.join("sys/class/infiniband"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.join(",")
}

fn run_live(root: &Path, libs: &Path, only: &str, env: &[(&str, &str)]) -> Value {
    let mut cmd = preflight();
    cmd.args([
        "run",
        "--format",
        "json",
        "--profile",
        "p5en.48xlarge",
        "--only",
        only,
        "--root",
    ])
    .arg(root)
    .env("LD_LIBRARY_PATH", libs);
    for (k, v) in env {
        cmd.env(k, v);
    }
    json_out(Schema::Run, &cmd.output().expect("binary runs"))
}

/// fi_getinfo through the stand-in libfabric: provider efa with FI_EP_RDM and FI_HMEM on every EFA passes; no
/// provider, or none with FI_HMEM, fails; a library that cannot be loaded is an error.
#[test]
fn libfabric_is_asked_for_the_efa_provider() {
    let dir = live_p5en();
    let libs = shims(&[("libfabric.so.1", include_str!("../standins/libfabric.c"))]);
    let all = efa_devices_of(dir.path());
    let two = "rdmap68s0,rdmap69s0";
    for (mode, devices, status, words) in [
        (
            "efa",
            all.as_str(),
            "pass",
            "provider efa, fabric efa-direct, FI_EP_RDM with FI_HMEM on 16 EFA(s)",
        ),
        ("efa", two, "warn", "offers 2 of 16 EFA(s)"),
        (
            "none",
            all.as_str(),
            "fail",
            "no efa provider for FI_EP_RDM with FI_HMEM",
        ),
        (
            "nohmem",
            all.as_str(),
            "fail",
            "offers FI_EP_RDM but not FI_HMEM",
        ),
    ] {
        let report = run_live(
            dir.path(),
            libs.path(),
            "efa.libfabric",
            &[("STANDIN_FI", mode), ("STANDIN_FI_DEVICES", devices)],
        );
        let r = result_of(&report, "efa.libfabric");
        assert_eq!(r["status"], status, "{mode}: {r:#?}");
        assert!(
            r["summary"].as_str().unwrap().contains(words),
            "{mode}: {r:#?}"
        );
        assert_eq!(
            r["evidence"][0], "libfabric = 1.22",
            "the library's own version: {r:#?}"
        );
    }
    // A libfabric that cannot be loaded (an error naming it) is the unit tests' case: this machine's own
    // libraries would answer here.
}

/// libefa beside libibverbs: loaded live (the stand-in). Missing, it is an error naming it (unit-tested: this
/// machine's rdma-core may ship a real one).
#[test]
fn libefa_is_loaded_beside_libibverbs() {
    let dir = live_p5en();
    let libs = shims(&[("libefa.so.1", include_str!("../standins/libefa.c"))]);
    let report = run_live(dir.path(), libs.path(), "efa.devices", &[]);
    let r = result_of(&report, "efa.devices");
    assert_eq!(r["status"], "pass", "{r:#?}");
    assert!(
        r["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "dlopen(libefa.so.1) = loaded"),
        "{r:#?}"
    );
}

/// The RC checks never fail an EFA port for lacking RC: with a libibverbs that lists the EFAs and refuses RC (as
/// the efa driver does), they skip saying why, before asking it anything (failed before: no check knew EFA,
/// and `rdma.loopback` tried RC on every port).
#[test]
fn rc_checks_leave_efa_alone() {
    let dir = live_p5en();
    let libs = shims(&[(
        "libibverbs.so.1",
        include_str!("../standins/libibverbs-efa.c"),
    )]);
    let report = run_live(dir.path(), libs.path(), "rdma.loopback,gdr.loopback", &[]);
    for id in ["rdma.loopback", "gdr.loopback"] {
        let r = result_of(&report, id);
        assert_eq!(r["status"], "skip", "{id}: {r:#?}");
        assert!(
            r["summary"]
                .as_str()
                .unwrap()
                .starts_with("EFA has no RC queue pairs: the fabric is proven by"),
            "{id}: {r:#?}"
        );
    }
    // The same on the recorded tree, whose answers hold no RC run at all.
    let (_, report) = run_json(
        &host("aws-p5en"),
        "auto",
        &["--only", "rdma.loopback,gdr.loopback"],
    );
    for id in ["rdma.loopback", "gdr.loopback"] {
        assert_eq!(status_of(&report, id), "skip", "{id}");
    }
}
