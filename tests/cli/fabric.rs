//! Fabric and PCIe checks (issue 3) and the foundation scenarios, run on every recorded tree: exit code and the
//! complete list of non-pass verdicts (check id, subject, status), plus how many results of each check passed.
//! Trees come from `testdata/gen_hosts.py`.

use std::collections::BTreeMap;

use crate::util::{code, host, json_out, preflight, result_of, run_json, stdout, verdicts, Schema};

/// Static checks of this area plus the foundation's kernel-module checks. `rdma.memlock` judges this very
/// process, not the tree, so it is left out.
const ONLY: &str =
    "driver.nvidia,gdr.kernel_path,gds.kernel_path,rdma.devices,rdma.link,rdma.roce,rdma.counters,\
pcie.link,pcie.acs,pcie.iommu,topo.gpu_nic";

struct Case {
    scenario: &'static str,
    profile: &'static str,
    exit: u8,
    /// Every result that is not `pass`, in report order: (check id, subject or "", status).
    not_pass: &'static [(&'static str, &'static str, &'static str)],
    /// How many results of each check passed.
    passes: &'static [(&'static str, usize)],
}

const CASES: &[Case] = &[
    Case {
        scenario: "hgx-healthy",
        profile: "generic",
        exit: 0,
        not_pass: &[("rdma.roce", "", "skip")],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "hgx-healthy",
        profile: "hgx-h100-ib",
        exit: 0,
        not_pass: &[("rdma.roce", "", "skip")],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 9),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "ib-port-down",
        profile: "generic",
        exit: 1,
        not_pass: &[
            ("rdma.link", "mlx5_3/1", "fail"),
            ("rdma.roce", "", "skip"),
            ("rdma.counters", "mlx5_3/1", "warn"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 7),
            ("rdma.counters", 7),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "ib-port-down",
        profile: "hgx-h100-ib",
        exit: 1,
        not_pass: &[
            ("rdma.link", "", "fail"),
            ("rdma.link", "mlx5_3/1", "fail"),
            ("rdma.roce", "", "skip"),
            ("rdma.counters", "mlx5_3/1", "warn"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 7),
            ("rdma.counters", 7),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "link-degraded-x8",
        profile: "generic",
        exit: 1,
        not_pass: &[
            ("rdma.roce", "", "skip"),
            ("pcie.link", "GPU3 0000:4b:00.0", "fail"),
            ("pcie.link", "NIC5 0000:aa:00.0", "fail"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 18),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "acs-redirect",
        profile: "generic",
        exit: 1,
        not_pass: &[
            ("rdma.roce", "", "skip"),
            ("pcie.acs", "switch downstream port 0000:17:00.0", "fail"),
            ("pcie.acs", "switch downstream port 0000:39:01.0", "fail"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "roce-mtu-1500",
        profile: "generic",
        exit: 1,
        not_pass: &[
            ("rdma.roce", "mlx5_0/1", "warn"),
            ("rdma.roce", "mlx5_1/1", "warn"),
            ("rdma.roce", "mlx5_2/1", "warn"),
            ("rdma.roce", "mlx5_3/1", "warn"),
            ("rdma.roce", "mlx5_4/1", "warn"),
            ("rdma.roce", "mlx5_5/1", "warn"),
            ("rdma.roce", "mlx5_6/1", "warn"),
            ("rdma.roce", "mlx5_7/1", "fail"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "roce-mtu-1500",
        profile: "roce-400g",
        exit: 1,
        not_pass: &[
            ("rdma.roce", "mlx5_0/1", "fail"),
            ("rdma.roce", "mlx5_1/1", "fail"),
            ("rdma.roce", "mlx5_2/1", "fail"),
            ("rdma.roce", "mlx5_3/1", "fail"),
            ("rdma.roce", "mlx5_4/1", "fail"),
            ("rdma.roce", "mlx5_5/1", "fail"),
            ("rdma.roce", "mlx5_6/1", "fail"),
            ("rdma.roce", "mlx5_7/1", "fail"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "nic-cross-socket",
        profile: "generic",
        exit: 0,
        not_pass: &[
            ("rdma.roce", "", "skip"),
            ("topo.gpu_nic", "GPU0 0000:18:00.0", "warn"),
            ("topo.gpu_nic", "GPU1 0000:29:00.0", "warn"),
            ("topo.gpu_nic", "GPU2 0000:3a:00.0", "warn"),
            ("topo.gpu_nic", "GPU3 0000:4b:00.0", "warn"),
            ("topo.gpu_nic", "GPU4 0000:98:00.0", "warn"),
            ("topo.gpu_nic", "GPU5 0000:a9:00.0", "warn"),
            ("topo.gpu_nic", "GPU6 0000:ba:00.0", "warn"),
            ("topo.gpu_nic", "GPU7 0000:cb:00.0", "warn"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
        ],
    },
    Case {
        scenario: "nic-cross-socket",
        profile: "hgx-h100-ib",
        exit: 1,
        not_pass: &[
            ("rdma.roce", "", "skip"),
            ("topo.gpu_nic", "GPU0 0000:18:00.0", "fail"),
            ("topo.gpu_nic", "GPU1 0000:29:00.0", "fail"),
            ("topo.gpu_nic", "GPU2 0000:3a:00.0", "fail"),
            ("topo.gpu_nic", "GPU3 0000:4b:00.0", "fail"),
            ("topo.gpu_nic", "GPU4 0000:98:00.0", "fail"),
            ("topo.gpu_nic", "GPU5 0000:a9:00.0", "fail"),
            ("topo.gpu_nic", "GPU6 0000:ba:00.0", "fail"),
            ("topo.gpu_nic", "GPU7 0000:cb:00.0", "fail"),
        ],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 9),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
        ],
    },
    Case {
        scenario: "iommu-translated",
        profile: "generic",
        exit: 0,
        not_pass: &[("rdma.roce", "", "skip"), ("pcie.iommu", "", "warn")],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "iommu-translated",
        profile: "hgx-h100-ib",
        exit: 1,
        not_pass: &[("rdma.roce", "", "skip"), ("pcie.iommu", "", "fail")],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 9),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "peermem-missing-proprietary",
        profile: "generic",
        exit: 1,
        not_pass: &[("gdr.kernel_path", "", "fail"), ("rdma.roce", "", "skip")],
        passes: &[
            ("driver.nvidia", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "dmabuf-only",
        profile: "hgx-h100-ib",
        exit: 0,
        not_pass: &[("rdma.roce", "", "skip")],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("gds.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 9),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "nvidia-fs-missing",
        profile: "generic",
        exit: 0,
        not_pass: &[("gds.kernel_path", "", "warn"), ("rdma.roce", "", "skip")],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 8),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "nvidia-fs-missing",
        profile: "hgx-h100-ib",
        exit: 1,
        not_pass: &[("gds.kernel_path", "", "fail"), ("rdma.roce", "", "skip")],
        passes: &[
            ("driver.nvidia", 1),
            ("gdr.kernel_path", 1),
            ("rdma.devices", 9),
            ("rdma.link", 9),
            ("rdma.counters", 8),
            ("pcie.link", 20),
            ("pcie.acs", 1),
            ("pcie.iommu", 1),
            ("topo.gpu_nic", 8),
        ],
    },
    Case {
        scenario: "h200-vm-no-rdma",
        profile: "generic",
        exit: 0,
        not_pass: &[
            ("gdr.kernel_path", "", "skip"),
            ("gds.kernel_path", "", "warn"),
            ("rdma.devices", "", "skip"),
            ("rdma.link", "", "skip"),
            ("rdma.roce", "", "skip"),
            ("rdma.counters", "", "skip"),
            ("pcie.acs", "", "skip"),
            ("topo.gpu_nic", "", "skip"),
        ],
        passes: &[("driver.nvidia", 1), ("pcie.link", 1), ("pcie.iommu", 1)],
    },
    Case {
        scenario: "h200-vm-no-rdma",
        profile: "hgx-h200-ib",
        exit: 1,
        not_pass: &[
            ("driver.nvidia", "", "fail"),
            ("gdr.kernel_path", "", "fail"),
            ("gds.kernel_path", "", "fail"),
            ("rdma.devices", "", "fail"),
            ("rdma.link", "", "fail"),
            ("rdma.roce", "", "skip"),
            ("rdma.counters", "", "skip"),
            ("pcie.acs", "", "skip"),
            ("topo.gpu_nic", "", "skip"),
        ],
        passes: &[("pcie.link", 1), ("pcie.iommu", 1)],
    },
];

#[test]
fn every_scenario_gives_the_expected_verdicts() {
    for case in CASES {
        let (exit, report) = run_json(&host(case.scenario), case.profile, &["--only", ONLY]);
        let label = format!("{} --profile {}", case.scenario, case.profile);
        let all = verdicts(&report);
        let not_pass: Vec<(&str, &str, &str)> = all
            .iter()
            .filter(|(_, _, s)| s != "pass")
            .map(|(i, s, st)| (i.as_str(), s.as_str(), st.as_str()))
            .collect();
        assert_eq!(not_pass, case.not_pass, "{label}: non-pass verdicts");
        let mut passes: BTreeMap<&str, usize> = BTreeMap::new();
        for (id, _, status) in &all {
            if status == "pass" {
                *passes.entry(id.as_str()).or_default() += 1;
            }
        }
        let want: BTreeMap<&str, usize> = case.passes.iter().copied().collect();
        assert_eq!(passes, want, "{label}: pass counts");
        assert_eq!(exit, case.exit, "{label}: exit code");
    }
}

fn summary_of(report: &serde_json::Value, id: &str, subject: &str) -> String {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id && c["subject"].as_str().unwrap_or("") == subject)
        .unwrap_or_else(|| panic!("no {id} result for {subject:?}"))["summary"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn h200_vm_reports_no_rdma_gen5_x16_gpu_and_acs_not_applicable() {
    let (_, r) = run_json(&host("h200-vm-no-rdma"), "generic", &["--only", ONLY]);
    assert!(summary_of(&r, "rdma.devices", "").contains("no RDMA-capable NIC on this host"));
    assert!(summary_of(&r, "pcie.link", "GPU0 0000:00:06.0").contains("32.0 GT/s x16"));
    assert!(summary_of(&r, "pcie.acs", "").contains("VM"));
    let acs = result_of(&r, "pcie.acs");
    assert!(
        acs["evidence"][0].as_str().unwrap().contains("hypervisor"),
        "{acs}"
    );
    assert!(summary_of(&r, "pcie.iommu", "").contains("no IOMMU groups"));
}

#[test]
fn failures_name_the_port_the_link_and_the_fix() {
    let (_, r) = run_json(&host("acs-redirect"), "generic", &["--only", "pcie.acs"]);
    let s = summary_of(&r, "pcie.acs", "switch downstream port 0000:17:00.0");
    assert!(
        s.contains("ReqRedir+ CmpltRedir+") && s.contains("GPU0↔NIC0"),
        "{s}"
    );
    assert!(result_of(&r, "pcie.acs")["remediation"]
        .as_str()
        .unwrap()
        .contains("setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000"));

    let (_, r) = run_json(
        &host("link-degraded-x8"),
        "generic",
        &["--only", "pcie.link"],
    );
    let s = summary_of(&r, "pcie.link", "GPU3 0000:4b:00.0");
    assert!(s.contains("x8, both ends support 32.0 GT/s x16"), "{s}");

    let (_, r) = run_json(
        &host("roce-mtu-1500"),
        "roce-400g",
        &["--only", "rdma.roce"],
    );
    assert!(summary_of(&r, "rdma.roce", "mlx5_0/1").contains("RoCE MTU of 1024"));
    assert!(summary_of(&r, "rdma.roce", "mlx5_7/1").contains("no RoCE v2 GID"));

    let (_, r) = run_json(
        &host("nic-cross-socket"),
        "hgx-h100-ib",
        &["--only", "topo.gpu_nic"],
    );
    let s = summary_of(&r, "topo.gpu_nic", "GPU5 0000:a9:00.0");
    assert!(
        s.contains("mlx5_5") && s.contains("SYS") && s.contains("GPU NUMA 0, NIC NUMA 1"),
        "{s}"
    );

    let (_, r) = run_json(
        &host("ib-port-down"),
        "generic",
        &["--only", "rdma.counters,rdma.link"],
    );
    assert!(summary_of(&r, "rdma.link", "mlx5_3/1").contains("1: DOWN / 2: Polling"));
    assert!(summary_of(&r, "rdma.counters", "mlx5_3/1").contains("link_downed saturated at 255"));
}

fn topo_json(scenario: &str) -> serde_json::Value {
    let out = preflight()
        .args(["topo", "--format", "json", "--root"])
        .arg(host(scenario))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    json_out(Schema::Topo, &out)
}

#[test]
fn topo_labels_pairs_like_nvidia_smi() {
    let t = topo_json("hgx-healthy");
    assert_eq!(t["matrix"]["GPU0"]["NIC0"], "PIX");
    assert_eq!(t["matrix"]["GPU0"]["GPU1"], "NODE");
    assert_eq!(t["matrix"]["GPU0"]["NIC7"], "SYS");
    let t = topo_json("nic-cross-socket");
    assert_eq!(t["matrix"]["GPU0"]["NIC0"], "SYS");
    let t = topo_json("link-degraded-x8");
    let gpu3 = &t["devices"][3];
    assert_eq!(gpu3["name"], "GPU3");
    assert_eq!(gpu3["narrowest_link"]["width"], 8);
    assert_eq!(gpu3["narrowest_link"]["degraded"], true);
    let t = topo_json("h200-vm-no-rdma");
    assert_eq!(t["devices"].as_array().unwrap().len(), 1);
    assert_eq!(
        t["devices"][0]["narrowest_link"]["upper"],
        serde_json::Value::Null
    );
    assert_eq!(t["devices"][0]["narrowest_link"]["speed_gts"], 32.0);
}

#[test]
fn topo_table_and_bad_root() {
    let out = preflight()
        .env("COLUMNS", "250")
        .args(["topo", "--root"])
        .arg(host("hgx-healthy"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(
        text.contains("NARROWEST LINK")
            && text.contains("NIC0   0000:19:00.0 NIC (mlx5_0/1 compute)"),
        "{text}"
    );
    let out = preflight()
        .args(["topo", "--root", "/nonexistent/tree"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
}
