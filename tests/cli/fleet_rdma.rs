//! Issue 19's RDMA classes on real node shapes (`testdata/gen_fleet_rdma.py`): NIC roles (compute rails beside
//! storage/frontend ports), ConnectX-8 multi-plane devices, iWARP RNICs, and counters that were never read.
//! Each test failed on the code before the fix it covers.

use std::path::Path;

use serde_json::Value;

use crate::util::{code, copy_scenario, host, json_out, preflight, results, Schema};

const RDMA: &str = "rdma.devices,rdma.link,rdma.roce,rdma.counters";

/// `run --only <only>` on `root` with `profile` and `env` set → (exit code, report).
fn run(root: &Path, profile: &str, only: &str, env: &[(&str, &str)]) -> (u8, Value) {
    let out = preflight()
        .envs(env.iter().copied())
        .args([
            "run", "--format", "json", "--color", "never", "--only", only,
        ])
        .args(["--profile", profile, "--root"])
        .arg(root)
        .output()
        .expect("binary runs");
    (code(&out), json_out(Schema::Run, &out))
}

/// The result of `id` for `subject`.
fn of<'a>(report: &'a Value, id: &str, subject: &str) -> &'a Value {
    results(report, id)
        .into_iter()
        .find(|c| c["subject"] == subject)
        .unwrap_or_else(|| panic!("no {id} result for {subject}: {report:#}"))
}

/// `id subject: status summary` of every result that is a FAIL or an ERROR.
fn bad(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["status"] == "fail" || c["status"] == "error")
        .map(|c| {
            format!(
                "{} {}: {} {}",
                c["id"], c["subject"], c["status"], c["summary"]
            )
        })
        .collect()
}

fn summary(r: &Value) -> &str {
    r["summary"].as_str().unwrap_or_default()
}

fn has_evidence(r: &Value, text: &str) -> bool {
    r["evidence"].as_array().is_some_and(|e| {
        e.iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains(text)))
    })
}

/// The canonical file behind `class_path` (e.g. `sys/class/infiniband/mlx5_3/ports/1/state`) in a copied tree.
fn real(root: &Path, class_path: &str) -> std::path::PathBuf {
    let (dev_link, rest) = class_path
        .match_indices('/')
        .nth(3)
        .map(|(i, _)| class_path.split_at(i))
        .expect("sys/class/<class>/<name>/...");
    std::fs::canonicalize(root.join(dev_link))
        .expect("class link resolves")
        .join(rest.trim_start_matches('/'))
}

fn write(root: &Path, class_path: &str, text: &str) {
    std::fs::write(real(root, class_path), format!("{text}\n")).expect("write");
}

fn port_down(root: &Path, dev: &str) {
    write(
        root,
        &format!("sys/class/infiniband/{dev}/ports/1/state"),
        "1: DOWN",
    );
    write(
        root,
        &format!("sys/class/infiniband/{dev}/ports/1/phys_state"),
        "2: Polling",
    );
}

const RAILS: [&str; 8] = [
    "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
];

// ---------------------------------------------------------------------------------------------------------
// NIC roles

/// Reproduced: the bond failed `rdma.link` under hgx-h100-ib ("link layer Ethernet, the profile expects
/// InfiniBand; rate 200 Gb/s below the profile minimum 400 Gb/s") on a healthy node.
#[test]
fn storage_ports_beside_the_rails_are_judged_as_storage() {
    for (tree, storage) in [
        ("h100-ib-bond0-storage", &["mlx5_bond_0/1"][..]),
        ("dgx-ib-storage-eth", &["mlx5_8/1", "mlx5_9/1"][..]),
    ] {
        let (exit, report) = run(&host(tree), "hgx-h100-ib", RDMA, &[]);
        assert_eq!(bad(&report), Vec::<String>::new(), "{tree}");
        assert_eq!(exit, 0, "{tree}");
        for subject in storage {
            let r = of(&report, "rdma.link", subject);
            assert_eq!(r["status"], "pass", "{tree} {subject}: {r:#}");
            assert_eq!(r["role"], "storage", "{tree} {subject}: {r:#}");
            assert!(has_evidence(r, "role = storage"), "{r:#}");
        }
        for rail in RAILS {
            let r = of(&report, "rdma.link", &format!("{rail}/1"));
            assert_eq!(r["role"], "compute", "{tree} {rail}: {r:#}");
            assert!(has_evidence(r, "role = compute"), "{r:#}");
        }
        let count = &results(&report, "rdma.link")[0];
        assert!(
            summary(count).starts_with("8 of 8 compute port(s) ACTIVE"),
            "{tree}: {}",
            summary(count)
        );
        // The device count: the storage devices are not extra rails (it warned "a bond or VFs?").
        let devices = &results(&report, "rdma.devices")[0];
        assert_eq!(devices["status"], "pass", "{tree}: {devices:#}");
        let names: Vec<&str> = storage.iter().map(|s| s.trim_end_matches("/1")).collect();
        assert!(
            summary(devices).ends_with(&format!(
                "{} storage/frontend ({})",
                names.len(),
                names.join(", ")
            )),
            "{tree}: {devices:#}"
        );
    }
}

/// NCCL_IB_HCA decides the compute ports when set, in NCCL's own syntax (prefix by default, `=` exact, `^`
/// exclude, `:port`).
#[test]
fn nccl_ib_hca_names_the_compute_ports() {
    let root = host("h100-ib-bond0-storage");
    let exact = format!("={}", RAILS.join(","));
    let ports: Vec<String> = RAILS.iter().map(|r| format!("{r}:1")).collect();
    let ports = ports.join(",");
    for hca in [exact.as_str(), "^mlx5_bond", ports.as_str()] {
        let (exit, report) = run(&root, "hgx-h100-ib", "rdma.link", &[("NCCL_IB_HCA", hca)]);
        assert_eq!(bad(&report), Vec::<String>::new(), "NCCL_IB_HCA={hca}");
        assert_eq!(exit, 0);
        let bond = of(&report, "rdma.link", "mlx5_bond_0/1");
        assert_eq!(bond["role"], "storage", "NCCL_IB_HCA={hca}");
        assert!(has_evidence(bond, "NCCL_IB_HCA"), "{bond:#}");
    }
    // A prefix names the bond too: NCCL would use it, so it is judged as a rail and fails as one.
    let (exit, report) = run(
        &root,
        "hgx-h100-ib",
        "rdma.link",
        &[("NCCL_IB_HCA", "mlx5")],
    );
    assert_eq!(exit, 1);
    let bond = of(&report, "rdma.link", "mlx5_bond_0/1");
    assert_eq!(bond["role"], "compute", "{bond:#}");
    assert_eq!(bond["status"], "fail");
    assert!(summary(bond).contains("link layer Ethernet"), "{bond:#}");
}

/// Reproduced: with a storage port beside them, 7 ACTIVE rails of 8 passed the count ("8 of 9 RDMA port(s)
/// ACTIVE, the profile expects 8").
#[test]
fn fewer_compute_rails_than_the_profile_wants_fail() {
    // A rail that NCCL_IB_HCA names is down.
    let dir = copy_scenario("h100-ib-bond0-storage");
    port_down(dir.path(), "mlx5_3");
    let hca = format!("={}", RAILS.join(","));
    let (exit, report) = run(
        dir.path(),
        "hgx-h100-ib",
        "rdma.link",
        &[("NCCL_IB_HCA", &hca)],
    );
    assert_eq!(exit, 1);
    let count = &results(&report, "rdma.link")[0];
    assert_eq!(count["status"], "fail");
    assert!(
        summary(count).starts_with("7 of 8 compute port(s) ACTIVE, the profile expects 8"),
        "{}",
        summary(count)
    );
    let down = of(&report, "rdma.link", "mlx5_3/1");
    assert_eq!(
        (&down["status"], &down["role"]),
        (&"fail".into(), &"compute".into())
    );

    // A rail missing altogether: the bond is no GPU's nearest port and does not stand in for it.
    let dir = copy_scenario("h100-ib-bond0-storage");
    std::fs::remove_file(dir.path().join("sys/class/infiniband/mlx5_7")).unwrap();
    let (exit, report) = run(dir.path(), "hgx-h100-ib", "rdma.link", &[]);
    assert_eq!(exit, 1);
    let count = &results(&report, "rdma.link")[0];
    assert!(
        summary(count).starts_with("7 of 7 compute port(s) ACTIVE, the profile expects 8"),
        "{}",
        summary(count)
    );
    assert_eq!(of(&report, "rdma.link", "mlx5_bond_0/1")["role"], "storage");
}

/// A storage port down warns by default (collectives do not run over it) and fails where the profile counts
/// storage ports. Reproduced: it failed as a rail would.
#[test]
fn a_storage_port_down_warns_unless_the_profile_counts_storage_ports() {
    let dir = copy_scenario("dgx-ib-storage-eth");
    port_down(dir.path(), "mlx5_9");
    let (exit, report) = run(dir.path(), "hgx-h100-ib", "rdma.link", &[]);
    let r = of(&report, "rdma.link", "mlx5_9/1");
    assert_eq!(r["status"], "warn", "{r:#}");
    assert_eq!(r["role"], "storage");
    assert!(
        summary(r).contains("storage port is 1: DOWN / 2: Polling"),
        "{r:#}"
    );
    assert_eq!(exit, 0, "{:?}", bad(&report));

    let profile = dir.path().join("storage.yaml");
    std::fs::write(
        &profile,
        "name: hgx-with-storage\nextends: hgx-h100-ib\nexpect:\n  storage_port_count: 2\n",
    )
    .unwrap();
    let (exit, report) = run(dir.path(), profile.to_str().unwrap(), "rdma.link", &[]);
    assert_eq!(exit, 1);
    assert!(
        bad(&report)
            .iter()
            .any(|b| b.contains("1 of 2 storage port(s) ACTIVE")),
        "{:?}",
        bad(&report)
    );
}

#[test]
fn topo_shows_each_rdma_port_role() {
    let out = preflight()
        .args(["topo", "--format", "json", "--root"])
        .arg(host("h100-ib-bond0-storage"))
        .output()
        .unwrap();
    let topo = json_out(Schema::Topo, &out);
    let roles: Vec<(String, String)> = topo["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["rdma_ports"].as_array().cloned().unwrap_or_default())
        .map(|p| {
            (
                p["port"].as_str().unwrap_or_default().to_string(),
                p["role"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(roles.len(), 9, "{roles:?}");
    assert!(
        roles.contains(&("mlx5_bond_0/1".into(), "storage".into())),
        "{roles:?}"
    );
    assert!(
        roles.contains(&("mlx5_0/1".into(), "compute".into())),
        "{roles:?}"
    );
    let out = preflight()
        .args(["topo", "--root"])
        .arg(host("h100-ib-bond0-storage"))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("mlx5_bond_0/1 storage"), "{table}");
    assert!(table.contains("mlx5_0/1 compute"), "{table}");
}

// ---------------------------------------------------------------------------------------------------------
// ConnectX-8 multi-plane

/// Reproduced: the 64 ports the platform disables failed `rdma.link` ("port is 1: DOWN / 3: Disabled") and
/// `rdma.roce` ("no RoCE v2 GID").
#[test]
fn connectx8_planes_disabled_by_design_do_not_fail() {
    let root = host("cx8-multiplane-roce");
    let (exit, report) = run(&root, "generic", RDMA, &[]);
    assert_eq!(bad(&report), Vec::<String>::new());
    assert_eq!(exit, 0);
    let link = results(&report, "rdma.link");
    let passed = link.iter().filter(|r| r["status"] == "pass").count();
    assert_eq!(passed, 33, "32 data ports and the mezzanine");
    let r = of(&report, "rdma.link", "roce_r0");
    assert_eq!(r["status"], "skip");
    assert!(
        summary(r).contains("8 port(s) Disabled beside ACTIVE ports 3, 6, 9, 12"),
        "{r:#}"
    );
    assert_eq!(results(&report, "rdma.roce").len(), 32);

    // A data plane that goes down still fails; so does a device whose every port is disabled.
    let dir = copy_scenario("cx8-multiplane-roce");
    write(
        dir.path(),
        "sys/class/infiniband/roce_r2/ports/6/state",
        "1: DOWN",
    );
    write(
        dir.path(),
        "sys/class/infiniband/roce_r2/ports/6/phys_state",
        "2: Polling",
    );
    for p in [3, 9, 12] {
        write(
            dir.path(),
            &format!("sys/class/infiniband/roce_r5/ports/{p}/state"),
            "1: DOWN",
        );
        write(
            dir.path(),
            &format!("sys/class/infiniband/roce_r5/ports/{p}/phys_state"),
            "3: Disabled",
        );
    }
    write(
        dir.path(),
        "sys/class/infiniband/roce_r5/ports/6/state",
        "1: DOWN",
    );
    write(
        dir.path(),
        "sys/class/infiniband/roce_r5/ports/6/phys_state",
        "3: Disabled",
    );
    let (exit, report) = run(dir.path(), "generic", "rdma.link", &[]);
    assert_eq!(exit, 1);
    let failed: Vec<&str> = results(&report, "rdma.link")
        .into_iter()
        .filter(|r| r["status"] == "fail")
        .map(|r| r["subject"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(failed.len(), 13, "{failed:?}");
    assert!(failed.contains(&"roce_r2/6"), "{failed:?}");
    assert!(failed.contains(&"roce_r5/1"), "{failed:?}");
}

// ---------------------------------------------------------------------------------------------------------
// iWARP is not RoCE

/// Reproduced: every iWARP RNIC failed `rdma.roce` with "no RoCE v2 GID".
#[test]
fn iwarp_rnics_are_not_judged_as_roce() {
    let (exit, report) = run(&host("iwarp-i40iw"), "generic", "rdma.roce", &[]);
    assert_eq!(exit, 0, "{:?}", bad(&report));
    let r = &results(&report, "rdma.roce")[0];
    assert_eq!(r["status"], "skip", "{r:#}");
    assert_eq!(r["subject"], "i40iw0/1");
    assert!(summary(r).starts_with("iWARP (node_type 4: RNIC)"), "{r:#}");

    let (exit, report) = run(&host("irdma-iwarp-roce"), "generic", "rdma.roce", &[]);
    assert_eq!(exit, 0, "{:?}", bad(&report));
    assert_eq!(of(&report, "rdma.roce", "iwp24s0f0/1")["status"], "skip");
    let roce = of(&report, "rdma.roce", "rocep24s0f1/1");
    assert_eq!(roce["status"], "pass", "{roce:#}");
    assert!(summary(roce).contains("NCCL_IB_GID_INDEX=3"), "{roce:#}");
}

/// The same driver in RoCE mode (node_type 1: CA) and software RoCE (rxe) are still judged as RoCE.
#[test]
fn roce_mode_and_software_roce_are_still_judged() {
    let dir = copy_scenario("irdma-iwarp-roce");
    let gids = real(
        dir.path(),
        "sys/class/infiniband/rocep24s0f1/ports/1/gid_attrs/types",
    );
    for slot in [1, 3] {
        std::fs::write(gids.join(slot.to_string()), "IB/RoCE v1\n").unwrap();
    }
    let (_, report) = run(dir.path(), "generic", "rdma.roce", &[]);
    let roce = of(&report, "rdma.roce", "rocep24s0f1/1");
    assert_eq!(roce["status"], "fail");
    assert!(summary(roce).starts_with("no RoCE v2 GID"), "{roce:#}");
    let (_, report) = run(&host("rxe-vm"), "generic", "rdma.roce", &[]);
    assert_eq!(results(&report, "rdma.roce")[0]["subject"], "rxe0/1");
}

/// An unreadable node_type leaves the transport unknown: an error, never a guess. Reproduced: judged as RoCE.
#[test]
fn an_unreadable_node_type_is_an_error() {
    let dir = copy_scenario("iwarp-i40iw");
    let node_type = real(dir.path(), "sys/class/infiniband/i40iw0/node_type");
    std::fs::remove_file(&node_type).unwrap();
    std::os::unix::fs::symlink("node_type", &node_type).unwrap();
    let (_, report) = run(dir.path(), "generic", "rdma.roce", &[]);
    let r = &results(&report, "rdma.roce")[0];
    assert_eq!(r["status"], "error", "{r:#}");
    assert!(summary(r).contains("node_type"), "{r:#}");
}

// ---------------------------------------------------------------------------------------------------------
// Counters that were never read

/// Reproduced: "no error counts (0 counters read, 8 judged)", a PASS on nothing read.
#[test]
fn counters_that_read_na_are_not_judged() {
    let (exit, report) = run(&host("iwarp-i40iw"), "generic", "rdma.counters", &[]);
    assert_eq!(exit, 0);
    let r = &results(&report, "rdma.counters")[0];
    assert_eq!(r["status"], "skip", "{r:#}");
    assert!(summary(r).starts_with("no counter value read"), "{r:#}");
    assert!(summary(r).contains("N/A (no PMA)"), "{r:#}");

    // Where the profile requires the check, nothing read fails.
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("counters.yaml");
    std::fs::write(
        &profile,
        "name: counters-required\nextends: generic\nchecks:\n  rdma.counters: {required: true}\n",
    )
    .unwrap();
    let (exit, report) = run(
        &host("iwarp-i40iw"),
        profile.to_str().unwrap(),
        "rdma.counters",
        &[],
    );
    assert_eq!(exit, 1);
    assert_eq!(results(&report, "rdma.counters")[0]["status"], "fail");
}

/// Some counters N/A: the rest are judged, and the summary says which were not. Reproduced: "15 judged".
#[test]
fn counters_partly_na_say_what_was_not_judged() {
    let dir = copy_scenario("hgx-healthy");
    for c in ["symbol_error", "link_downed"] {
        write(
            dir.path(),
            &format!("sys/class/infiniband/mlx5_0/ports/1/counters/{c}"),
            "N/A (no PMA)",
        );
    }
    let (_, report) = run(dir.path(), "generic", "rdma.counters", &[]);
    let r = of(&report, "rdma.counters", "mlx5_0/1");
    assert_eq!(r["status"], "pass", "{r:#}");
    assert!(summary(r).contains("13 judged"), "{r:#}");
    assert!(
        summary(r).contains("2 not read (N/A): link_downed, symbol_error"),
        "{r:#}"
    );
    // Garbage is reported, never a panic.
    write(
        dir.path(),
        "sys/class/infiniband/mlx5_1/ports/1/counters/port_rcv_errors",
        "12abc",
    );
    let (_, report) = run(dir.path(), "generic", "rdma.counters", &[]);
    let r = of(&report, "rdma.counters", "mlx5_1/1");
    assert_eq!(r["status"], "error", "{r:#}");
    assert!(
        has_evidence(r, "port_rcv_errors = <not a count: \"12abc\">"),
        "{r:#}"
    );
}
