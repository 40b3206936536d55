//! Real-fleet shapes and faults of issue 19 on the PCIe, GPU and GDS side, each class on several variants:
//! idle GPU links, GDS through PCI P2PDMA, one unreadable function or attribute, a GPU fallen off the bus,
//! PCIe AER counters, and the functions the presence survey must see (flash-recovery ConnectX, Omni-Path).

use std::path::Path;

use serde_json::Value;

use super::util::*;

const IDLE: &str = "fleet-hgx-h100-idle-gpu-links";
const P2PDMA: &str = "fleet-hgx-h100-p2pdma-gds";

/// Writes host path `path` of the tree at `root` (through the tree's own symlinks).
fn put(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Sets PCI attribute `attr` of `bdf`.
fn set_pci(root: &Path, bdf: &str, attr: &str, text: &str) {
    put(root, &format!("/sys/bus/pci/devices/{bdf}/{attr}"), text);
}

/// Replaces a PCI attribute by a directory: reading it fails (EISDIR), as an unreadable file does.
fn break_pci(root: &Path, bdf: &str, attr: &str) {
    let p = std::fs::canonicalize(root.join(format!("sys/bus/pci/devices/{bdf}")))
        .unwrap()
        .join(attr);
    std::fs::remove_file(&p).unwrap();
    std::fs::create_dir(&p).unwrap();
}

/// The result of `id` whose subject starts with `subject`.
fn of<'a>(report: &'a Value, id: &str, subject: &str) -> &'a Value {
    results(report, id)
        .into_iter()
        .find(|c| {
            c["subject"]
                .as_str()
                .unwrap_or_default()
                .starts_with(subject)
        })
        .unwrap_or_else(|| panic!("no {id} result for {subject}: {report:#}"))
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

fn evidence(v: &Value) -> String {
    v["evidence"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------------------
// Idle GPU links: a GPU's own link at full width whose speed alone is lower is idle-downshifted, not a static
// failure; gpu.pcie judges the speed under load. A width drop, or a drop on a NIC, NVMe or switch link, fails.

fn pcie_link(root: &Path, profile: &str) -> Value {
    run_json(root, profile, &["--only", "pcie.link"]).1
}

#[test]
fn idle_gpus_at_gen1_are_idle_downshifted_not_failed() {
    let report = pcie_link(&host(IDLE), "hgx-h100-ib");
    let gpus: Vec<_> = results(&report, "pcie.link")
        .into_iter()
        .filter(|c| text(c, "subject").starts_with("GPU"))
        .collect();
    assert_eq!(gpus.len(), 8);
    for gpu in gpus {
        assert_eq!(gpu["status"], "pass", "{gpu:#}");
        let summary = text(gpu, "summary");
        assert!(summary.contains("idle-downshifted"), "{summary}");
        assert!(summary.contains("gpu.pcie"), "{summary}");
    }
    for c in results(&report, "pcie.link") {
        assert_ne!(c["status"], "fail", "{c:#}");
    }
}

#[test]
fn gpu_at_16_gts_on_a_gen5_profile_is_idle_downshifted() {
    let dir = copy_scenario(IDLE);
    for bdf in ["0000:17:00.0", "0000:18:00.0"] {
        set_pci(dir.path(), bdf, "current_link_speed", "16.0 GT/s PCIe");
    }
    let report = pcie_link(dir.path(), "hgx-h100-ib");
    let gpu = of(&report, "pcie.link", "GPU0 ");
    assert_eq!(gpu["status"], "pass", "{gpu:#}");
    assert!(text(gpu, "summary").contains("idle-downshifted"), "{gpu:#}");
}

#[test]
fn idle_gpu_at_x8_still_fails_on_its_width() {
    let dir = copy_scenario(IDLE);
    for bdf in ["0000:4a:00.0", "0000:4b:00.0"] {
        set_pci(dir.path(), bdf, "current_link_width", "8");
    }
    let report = pcie_link(dir.path(), "hgx-h100-ib");
    let gpu = of(&report, "pcie.link", "GPU3 ");
    assert_eq!(gpu["status"], "fail", "{gpu:#}");
    assert!(text(gpu, "summary").contains("x8"), "{gpu:#}");
    assert!(
        !text(gpu, "summary").contains("idle-downshifted"),
        "{gpu:#}"
    );
}

#[test]
fn nic_at_16_gts_still_fails() {
    let dir = copy_scenario(IDLE);
    for bdf in ["0000:17:01.0", "0000:19:00.0"] {
        set_pci(dir.path(), bdf, "current_link_speed", "16.0 GT/s PCIe");
    }
    let report = pcie_link(dir.path(), "hgx-h100-ib");
    let nic = of(&report, "pcie.link", "NIC0 ");
    assert_eq!(nic["status"], "fail", "{nic:#}");
    assert!(
        text(nic, "summary").contains("runs at 16.0 GT/s x16"),
        "{nic:#}"
    );
}

#[test]
fn nvme_below_its_speed_still_fails() {
    let dir = copy_scenario(IDLE);
    for bdf in ["0000:17:02.0", "0000:1a:00.0"] {
        set_pci(dir.path(), bdf, "current_link_speed", "8.0 GT/s PCIe");
    }
    let report = pcie_link(dir.path(), "hgx-h100-ib");
    assert_eq!(of(&report, "pcie.link", "NVMe0 ")["status"], "fail");
}

#[test]
fn downshifted_switch_uplink_fails_the_gpu_behind_it() {
    let dir = copy_scenario(IDLE);
    for bdf in ["0000:15:01.0", "0000:16:00.0"] {
        set_pci(dir.path(), bdf, "current_link_speed", "16.0 GT/s PCIe");
    }
    let report = pcie_link(dir.path(), "hgx-h100-ib");
    for device in ["GPU0 ", "NIC0 "] {
        let r = of(&report, "pcie.link", device);
        assert_eq!(r["status"], "fail", "{r:#}");
        assert!(
            text(r, "summary").contains("0000:15:01.0 → 0000:16:00.0 runs at 16.0 GT/s"),
            "{r:#}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// GDS through PCI P2PDMA: gds.config and gds.kernel_path agree on whether the direct path is there.

const GDS_CHECKS: &str = "gds.config,gds.kernel_path";

fn gds(root: &Path) -> (Value, Value) {
    let scratch = tempfile::tempdir().unwrap();
    let (_, report) = run_json(
        root,
        "hgx-h100-ib",
        &[
            "--only",
            GDS_CHECKS,
            "--gds-dir",
            &scratch.path().to_string_lossy(),
        ],
    );
    let config = (*results(&report, "gds.config").first().expect("gds.config")).clone();
    (config, result_of(&report, "gds.kernel_path").clone())
}

#[test]
fn p2pdma_path_needs_no_nvidia_fs_and_both_checks_say_so() {
    let (config, kernel) = gds(&host(P2PDMA));
    assert_eq!(config["status"], "pass", "{config:#}");
    assert!(
        text(&config, "summary").contains("PCI P2PDMA"),
        "{config:#}"
    );
    assert_eq!(kernel["status"], "pass", "{kernel:#}");
    assert!(
        text(&kernel, "summary").contains("PCI P2PDMA"),
        "{kernel:#}"
    );
    assert!(evidence(&kernel).contains("use_pci_p2pdma"), "{kernel:#}");
}

/// Each variant breaks one prerequisite by one edit of one file (`from` → `to` in host path `path`): both checks
/// fail, and name it.
fn p2pdma_variant(path: &str, from: &str, to: &str, names: &str) {
    let dir = copy_scenario(P2PDMA);
    let file = dir.path().join(path);
    let before = std::fs::read_to_string(&file).unwrap();
    assert!(before.contains(from), "{path} lacks {from:?}");
    std::fs::write(&file, before.replace(from, to)).unwrap();
    let (config, kernel) = gds(dir.path());
    assert_eq!(config["status"], "fail", "{config:#}");
    assert_eq!(kernel["status"], "fail", "{kernel:#}");
    // nvidia-fs is spelled both ways (the module is nvidia_fs).
    let plain = |t: &str| t.replace('_', "-");
    for r in [&config, &kernel] {
        assert!(
            plain(&text(r, "summary")).contains(&plain(names)),
            "{names}: {r:#}"
        );
    }
}

#[test]
fn p2pdma_off_in_cufile_json_fails_both() {
    let (on, off) = ("\"use_pci_p2pdma\": true", "\"use_pci_p2pdma\": false");
    p2pdma_variant("etc/cufile.json", on, off, "nvidia_fs");
}

#[test]
fn p2pdma_on_a_module_older_than_565_fails_both() {
    p2pdma_variant(
        "proc/driver/nvidia/version",
        "570.124.06",
        "560.35.03",
        "565",
    );
}

#[test]
fn p2pdma_on_a_kernel_without_config_pci_p2pdma_fails_both() {
    let (set, unset) = ("CONFIG_PCI_P2PDMA=y", "# CONFIG_PCI_P2PDMA is not set");
    p2pdma_variant(
        "boot/config-6.8.0-52-generic",
        set,
        unset,
        "CONFIG_PCI_P2PDMA",
    );
}

#[test]
fn p2pdma_on_the_proprietary_module_fails_both() {
    let (open, proprietary) = ("Open Kernel Module for x86_64", "x86_64 Kernel Module");
    p2pdma_variant("proc/driver/nvidia/version", open, proprietary, "open");
}

// ---------------------------------------------------------------------------------------------------------
// One unreadable function or attribute: only what could be affected errors. The class decides whether a
// function can be a GPU.

const TREE_CHECKS: &str =
    "driver.nvidia,gdr.kernel_path,gds.kernel_path,pcie.acs,topo.gpu_nic,pcie.link";

fn tree_checks(root: &Path) -> Value {
    run_json(root, "generic", &["--only", TREE_CHECKS]).1
}

/// The results of `ids` that are errors.
fn errors<'a>(report: &'a Value, ids: &[&str]) -> Vec<&'a Value> {
    ids.iter()
        .flat_map(|id| results(report, id))
        .filter(|c| c["status"] == "error")
        .collect()
}

/// hgx-healthy without its GPUs: a storage/CPU node with the same bridges, NICs and drives.
fn gpu_less() -> tempfile::TempDir {
    let dir = copy_scenario("hgx-healthy");
    let devices = dir.path().join("sys/bus/pci/devices");
    for entry in std::fs::read_dir(&devices).unwrap() {
        let link = entry.unwrap().path();
        let real = std::fs::canonicalize(&link).unwrap();
        let class = std::fs::read_to_string(real.join("class")).unwrap();
        if class.starts_with("0x03") {
            std::fs::remove_dir_all(&real).unwrap();
            std::fs::remove_file(&link).unwrap();
        }
    }
    std::fs::remove_dir_all(dir.path().join("proc/driver/nvidia/gpus")).unwrap();
    dir
}

#[test]
fn unreadable_bridge_config_on_a_gpu_less_node_errors_no_gpu_check() {
    let dir = gpu_less();
    break_pci(dir.path(), "0000:05:01.0", "config");
    let report = tree_checks(dir.path());
    assert_eq!(
        errors(
            &report,
            &[
                "driver.nvidia",
                "gdr.kernel_path",
                "gds.kernel_path",
                "topo.gpu_nic",
                "pcie.acs"
            ]
        ),
        Vec::<&Value>::new()
    );
    let driver = status_of(&report, "driver.nvidia");
    assert!(driver == "skip" || driver == "pass", "{driver}");
}

#[test]
fn unreadable_bridge_config_on_the_nvswitch_path_errors_nothing_unrelated() {
    let dir = copy_scenario("hgx-healthy");
    break_pci(dir.path(), "0000:05:01.0", "config");
    let report = tree_checks(dir.path());
    assert_eq!(
        errors(
            &report,
            &[
                "driver.nvidia",
                "gdr.kernel_path",
                "gds.kernel_path",
                "topo.gpu_nic",
                "pcie.link"
            ]
        ),
        Vec::<&Value>::new()
    );
}

#[test]
fn unreadable_nic_numa_node_errors_no_gpu_check() {
    let dir = copy_scenario("hgx-healthy");
    set_pci(dir.path(), "0000:19:00.0", "numa_node", "zero");
    let report = tree_checks(dir.path());
    assert_eq!(
        errors(&report, &["driver.nvidia", "gds.kernel_path"]),
        Vec::<&Value>::new()
    );
    assert_eq!(status_of(&report, "driver.nvidia"), "pass");
}

#[test]
fn unreadable_nvme_link_errors_only_that_drive() {
    let dir = copy_scenario("hgx-healthy");
    break_pci(dir.path(), "0000:1a:00.0", "current_link_speed");
    let report = tree_checks(dir.path());
    assert_eq!(
        errors(
            &report,
            &[
                "driver.nvidia",
                "gdr.kernel_path",
                "gds.kernel_path",
                "topo.gpu_nic"
            ]
        ),
        Vec::<&Value>::new()
    );
    let link_errors = errors(&report, &["pcie.link"]);
    assert_eq!(link_errors.len(), 1, "{link_errors:#?}");
    assert!(text(link_errors[0], "subject").starts_with("NVMe0 "));
}

#[test]
fn unreadable_gpu_attribute_errors_the_gpu_checks_naming_it() {
    let dir = copy_scenario("hgx-healthy");
    set_pci(dir.path(), "0000:18:00.0", "numa_node", "zero");
    let report = tree_checks(dir.path());
    let errors = errors(&report, &["driver.nvidia"]);
    assert_eq!(errors.len(), 1, "{report:#}");
    let r = errors[0];
    assert!(
        format!("{} {}", text(r, "summary"), evidence(r)).contains("0000:18:00.0/numa_node"),
        "{r:#}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// A GPU fallen off the bus (Xid 79), and NVML's per-GPU health.

const GPU_LOST: &str = "device fell off the bus or has otherwise become inacessible";

/// The idle tree with GPU `index`'s recorded NVML answers changed by `change`.
fn nvml_variant(
    index: usize,
    change: impl Fn(&mut serde_json::Map<String, Value>),
) -> tempfile::TempDir {
    let dir = copy_scenario(IDLE);
    let path = dir.path().join("vendor-answers.json");
    let mut answers: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let gpu = answers["nvml"]["gpus"][index].as_object_mut().unwrap();
    change(gpu);
    std::fs::write(&path, serde_json::to_string(&answers).unwrap()).unwrap();
    dir
}

fn inventory(root: &Path) -> Value {
    run_json(root, "hgx-h100-ib", &["--only", "gpu.inventory"]).1
}

/// The gpu.inventory result of GPU `index` (subject: its bus id, or `GPU <index>` where NVML gave none).
fn inventory_of(report: &Value, index: usize, bdf: &str) -> Value {
    results(report, "gpu.inventory")
        .into_iter()
        .find(|c| {
            let s = text(c, "subject");
            s.contains(bdf) || s == format!("GPU {index}")
        })
        .unwrap_or_else(|| panic!("no result for GPU {index}: {report:#}"))
        .clone()
}

fn assert_lost(r: &Value, index: usize) {
    assert_eq!(r["status"], "fail", "{r:#}");
    let summary = text(r, "summary");
    assert!(
        summary.contains(&format!("GPU {index}")) || text(r, "subject").contains("GPU"),
        "{r:#}"
    );
    assert!(summary.contains("fell off the bus"), "{summary}");
    assert!(!summary.contains('?'), "{summary}");
    let fix = text(r, "remediation");
    assert!(
        fix.contains("reset") && fix.contains("reboot") && fix.contains("RMA"),
        "{fix}"
    );
}

#[test]
fn gpu_whose_handle_is_lost_fails_naming_it() {
    let dir = nvml_variant(3, |g| {
        for (key, value) in g.iter_mut() {
            if key != "index" {
                *value = serde_json::json!({"Err": "not read"});
            }
        }
        g["name"] =
            serde_json::json!({"Err": format!("nvmlDeviceGetHandleByIndex_v2: {GPU_LOST}")});
    });
    let report = inventory(dir.path());
    assert_lost(&inventory_of(&report, 3, "0000:4b:00.0"), 3);
}

#[test]
fn gpu_whose_every_call_is_lost_fails_naming_it() {
    let dir = nvml_variant(3, |g| {
        for (key, value) in g.iter_mut() {
            if key != "index" && key != "pci_bus_id" {
                *value = serde_json::json!({"Err": format!("nvmlDevice{key}: {GPU_LOST}")});
            }
        }
    });
    // Config space of a GPU that fell off the bus reads all ones.
    std::fs::write(
        std::fs::canonicalize(dir.path().join("sys/bus/pci/devices/0000:4b:00.0"))
            .unwrap()
            .join("config"),
        vec![0xffu8; 4096],
    )
    .unwrap();
    let report = inventory(dir.path());
    let r = inventory_of(&report, 3, "0000:4b:00.0");
    assert_lost(&r, 3);
    assert!(text(&r, "subject").contains("0000:4b:00.0"), "{r:#}");
}

#[test]
fn any_per_gpu_nvml_error_fails_naming_the_call() {
    let dir = nvml_variant(5, |g| {
        g["ecc_enabled"] =
            serde_json::json!({"Err": "nvmlDeviceGetEccMode: an internal driver error occurred"});
    });
    let report = inventory(dir.path());
    let r = inventory_of(&report, 5, "0000:a9:00.0");
    assert_eq!(r["status"], "fail", "{r:#}");
    let summary = text(&r, "summary");
    assert!(summary.contains("nvmlDeviceGetEccMode"), "{summary}");
    assert!(!summary.contains('?'), "{summary}");
}

#[test]
fn not_supported_answers_are_no_error() {
    // The H100 recording answers page retirement with "not available on the target device": not a fault.
    let report = inventory(&host(IDLE));
    for r in results(&report, "gpu.inventory") {
        assert_eq!(r["status"], "pass", "{r:#}");
    }
}

#[test]
fn row_remapping_failure_and_pending_fail() {
    for (pending, failure, words) in [(false, true, "RMA"), (true, false, "reset")] {
        let dir = nvml_variant(1, |g| {
            g["remapped_rows"] = serde_json::json!({"Ok": {
                "correctable": 0, "uncorrectable": 2, "pending": pending, "failure": failure}});
        });
        let report = inventory(dir.path());
        let r = inventory_of(&report, 1, "0000:29:00.0");
        assert_eq!(r["status"], "fail", "{r:#}");
        assert!(text(&r, "remediation").contains(words), "{r:#}");
    }
}

#[test]
fn unreadable_remapped_rows_are_not_judged_healthy() {
    let dir = nvml_variant(2, |g| {
        g["remapped_rows"] = serde_json::json!({"Err": "nvmlDeviceGetRemappedRows: an internal driver error occurred"});
    });
    let report = inventory(dir.path());
    let r = inventory_of(&report, 2, "0000:3a:00.0");
    assert_eq!(r["status"], "fail", "{r:#}");
    assert!(
        text(&r, "summary").contains("nvmlDeviceGetRemappedRows"),
        "{r:#}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// PCIe AER counters of the devices on the GPU, NIC and NVMe paths.

const AER_COR: &[&str] = &[
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
];
const AER_UNCOR: &[&str] = &[
    "Undefined",
    "DLP",
    "SDES",
    "TLP",
    "FCP",
    "CmpltTO",
    "CmpltAbrt",
    "UnxCmplt",
    "RxOF",
    "MalfTLP",
    "ECRC",
    "UnsupReq",
    "ACSViol",
    "UncorrIntErr",
    "BlockedTLP",
    "AtomicOpBlocked",
    "TLPBlockedErr",
    "PoisonTLPBlocked",
];

/// The kernel's `aer_dev_*` text with `counts` (name → count) and the rest 0.
fn aer_text(names: &[&str], total: &str, counts: &[(&str, u64)]) -> String {
    let mut sum = 0;
    let mut out = String::new();
    for name in names {
        let n = counts
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v);
        sum += n;
        out.push_str(&format!("{name} {n}\n"));
    }
    out.push_str(&format!("{total} {sum}\n"));
    out
}

/// hgx-healthy with clean AER files on every function that has a link (AER capability), and an uptime.
fn with_aer() -> tempfile::TempDir {
    let dir = copy_scenario("hgx-healthy");
    let devices = dir.path().join("sys/bus/pci/devices");
    for entry in std::fs::read_dir(&devices).unwrap() {
        let real = std::fs::canonicalize(entry.unwrap().path()).unwrap();
        if !real.join("current_link_speed").exists() {
            continue;
        }
        std::fs::write(
            real.join("aer_dev_correctable"),
            aer_text(AER_COR, "TOTAL_ERR_COR", &[]),
        )
        .unwrap();
        std::fs::write(
            real.join("aer_dev_nonfatal"),
            aer_text(AER_UNCOR, "TOTAL_ERR_NONFATAL", &[]),
        )
        .unwrap();
        std::fs::write(
            real.join("aer_dev_fatal"),
            aer_text(AER_UNCOR, "TOTAL_ERR_FATAL", &[]),
        )
        .unwrap();
        let class = std::fs::read_to_string(real.join("class")).unwrap();
        let name = real.file_name().unwrap().to_string_lossy().into_owned();
        let parent_is_host_bridge = real
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("pci");
        if class.starts_with("0x0604") && parent_is_host_bridge {
            for kind in ["cor", "fatal", "nonfatal"] {
                std::fs::write(real.join(format!("aer_rootport_total_err_{kind}")), "0\n").unwrap();
            }
        }
        let _ = name;
    }
    put(dir.path(), "/proc/uptime", "864000.52 6893210.11");
    dir
}

fn aer(root: &Path) -> Value {
    run_json(root, "hgx-h100-ib", &["--only", "pcie.aer"]).1
}

#[test]
fn clean_aer_counters_pass() {
    let dir = with_aer();
    let report = aer(dir.path());
    let all = results(&report, "pcie.aer");
    assert!(!all.is_empty());
    for r in all {
        assert_eq!(r["status"], "pass", "{r:#}");
    }
}

#[test]
fn fatal_aer_error_on_a_gpu_fails_naming_device_and_counter() {
    let dir = with_aer();
    set_pci(
        dir.path(),
        "0000:4b:00.0",
        "aer_dev_fatal",
        &aer_text(AER_UNCOR, "TOTAL_ERR_FATAL", &[("MalfTLP", 1)]),
    );
    let report = aer(dir.path());
    let r = of(&report, "pcie.aer", "GPU3 0000:4b:00.0");
    assert_eq!(r["status"], "fail", "{r:#}");
    let summary = text(r, "summary");
    assert!(
        summary.contains("MalfTLP") && summary.contains("fatal"),
        "{summary}"
    );
}

#[test]
fn nonfatal_aer_error_on_the_switch_port_above_a_nic_fails() {
    let dir = with_aer();
    set_pci(
        dir.path(),
        "0000:a8:01.0",
        "aer_dev_nonfatal",
        &aer_text(AER_UNCOR, "TOTAL_ERR_NONFATAL", &[("CmpltTO", 3)]),
    );
    let report = aer(dir.path());
    let r = of(&report, "pcie.aer", "switch downstream port 0000:a8:01.0");
    assert_eq!(r["status"], "fail", "{r:#}");
    assert!(text(r, "summary").contains("CmpltTO 3"), "{r:#}");
}

#[test]
fn correctable_errors_warn_above_the_rate_and_pass_below() {
    // 10 days up: 5 corrected errors is background, 5000 is a link going bad.
    for (count, status) in [(5, "pass"), (5000, "warn")] {
        let dir = with_aer();
        set_pci(
            dir.path(),
            "0000:19:00.0",
            "aer_dev_correctable",
            &aer_text(AER_COR, "TOTAL_ERR_COR", &[("BadTLP", count)]),
        );
        let report = aer(dir.path());
        let r = of(&report, "pcie.aer", "NIC0 0000:19:00.0");
        assert_eq!(r["status"], status, "{count}: {r:#}");
        if status == "warn" {
            assert!(text(r, "summary").contains("BadTLP"), "{r:#}");
        }
    }
}

#[test]
fn root_port_fatal_total_fails() {
    let dir = with_aer();
    set_pci(
        dir.path(),
        "0000:95:01.0",
        "aer_rootport_total_err_fatal",
        "2\n",
    );
    let report = aer(dir.path());
    let r = of(&report, "pcie.aer", "root port 0000:95:01.0");
    assert_eq!(r["status"], "fail", "{r:#}");
    assert!(
        text(r, "summary").contains("aer_rootport_total_err_fatal"),
        "{r:#}"
    );
}

#[test]
fn garbage_aer_values_are_reported_not_judged() {
    let dir = with_aer();
    set_pci(
        dir.path(),
        "0000:18:00.0",
        "aer_dev_fatal",
        "TOTAL_ERR_FATAL lots\n",
    );
    let report = aer(dir.path());
    let r = of(&report, "pcie.aer", "GPU0 0000:18:00.0");
    assert_eq!(r["status"], "error", "{r:#}");
    assert!(text(r, "summary").contains("aer_dev_fatal"), "{r:#}");
}

#[test]
fn no_aer_files_say_so_and_do_not_pass() {
    let report = aer(&host("hgx-healthy"));
    let all = results(&report, "pcie.aer");
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0]["status"], "skip", "{:#}", all[0]);
    assert!(
        text(all[0], "summary").contains("CONFIG_PCIEAER"),
        "{:#}",
        all[0]
    );
}

// ---------------------------------------------------------------------------------------------------------
// Functions the presence survey must see: a ConnectX in flash recovery, an Omni-Path HFI.

/// hgx-healthy with NIC `bdf` turned into a ConnectX-7 in flash-recovery mode: device id 0x0218
/// (mstflint's livefish list), class memory controller as lspci shows it, no driver, no RDMA device.
fn recovery_nic(bdf: &str, rdma_index: usize) -> tempfile::TempDir {
    let dir = copy_scenario("hgx-healthy");
    let real =
        std::fs::canonicalize(dir.path().join(format!("sys/bus/pci/devices/{bdf}"))).unwrap();
    std::fs::write(real.join("device"), "0x0218\n").unwrap();
    std::fs::write(real.join("class"), "0x058000\n").unwrap();
    std::fs::remove_dir_all(real.join("infiniband")).unwrap();
    std::fs::remove_dir_all(real.join("infiniband_verbs")).unwrap();
    std::fs::remove_file(
        dir.path()
            .join(format!("sys/class/infiniband/mlx5_{rdma_index}")),
    )
    .unwrap();
    std::fs::remove_file(
        dir.path()
            .join(format!("sys/class/infiniband_verbs/uverbs{rdma_index}")),
    )
    .unwrap();
    dir
}

#[test]
fn connectx_in_flash_recovery_is_named_with_its_fix() {
    let dir = recovery_nic("0000:4c:00.0", 3);
    let (_, report) = run_json(
        dir.path(),
        "hgx-h100-ib",
        &["--only", "rdma.devices,pcie.link"],
    );
    let failing: Vec<_> = results(&report, "rdma.devices")
        .into_iter()
        .filter(|c| c["status"] == "fail")
        .collect();
    assert!(!failing.is_empty(), "{report:#}");
    let all = failing
        .iter()
        .map(|c| format!("{} {}", text(c, "summary"), text(c, "remediation")))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(all.contains("0000:4c:00.0"), "{all}");
    assert!(
        all.contains("flash recovery") || all.contains("flash-recovery"),
        "{all}"
    );
    assert!(all.contains("mstflint"), "{all}");
}

#[test]
fn connectx_in_flash_recovery_on_a_bluefield_id_is_named_too() {
    let dir = recovery_nic("0000:aa:00.0", 5);
    put(
        dir.path(),
        "/sys/bus/pci/devices/0000:aa:00.0/device",
        "0x021c\n",
    );
    let (_, report) = run_json(dir.path(), "generic", &["--only", "rdma.devices"]);
    let all = results(&report, "rdma.devices")
        .iter()
        .map(|c| {
            format!(
                "{} {} {}",
                c["status"],
                text(c, "summary"),
                text(c, "remediation")
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        all.contains("0000:aa:00.0") && all.contains("mstflint"),
        "{all}"
    );
}

/// hgx-healthy with NIC0 replaced by an Omni-Path HFI: Intel 8086:24f0, class 0x020800, hfi1_0 on it.
fn omnipath() -> tempfile::TempDir {
    let dir = copy_scenario("hgx-healthy");
    let real = std::fs::canonicalize(dir.path().join("sys/bus/pci/devices/0000:19:00.0")).unwrap();
    std::fs::write(real.join("vendor"), "0x8086\n").unwrap();
    std::fs::write(real.join("device"), "0x24f0\n").unwrap();
    std::fs::write(real.join("class"), "0x020800\n").unwrap();
    dir
}

#[test]
fn omnipath_hfi_is_an_rdma_nic_for_pcie_link_and_topo() {
    let dir = omnipath();
    let (_, report) = run_json(dir.path(), "generic", &["--only", "pcie.link,topo.gpu_nic"]);
    let link = of(&report, "pcie.link", "NIC0 0000:19:00.0");
    assert_eq!(link["status"], "pass", "{link:#}");
    let out = preflight()
        .args(["topo", "--root"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(stdout(&out).contains("mlx5_0"), "{}", stdout(&out));
}
