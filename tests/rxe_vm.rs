//! Assertions on what fabric-preflight reported inside the soft-RoCE VMs (Debian's kernel, a real `rdma_rxe`
//! device; `tests/vm/rxe-vm.sh` boots them and brings the JSON reports back).
//!
//! Ignored by a plain `cargo test`: `.ci/stages/50-rxe-vm.sh` boots the VMs, then runs
//! `RXE_VM_RESULTS=target/rxe-vm/out cargo test --test rxe_vm -- --ignored`. Run without the results, every test
//! fails: none passes on data it did not read.

use std::path::PathBuf;

use serde_json::Value;

// The schema validator and the finding-code rule the CLI tests use; the rest of those helpers is not needed here.
#[path = "cli/util.rs"]
#[allow(unused_imports)]
mod util;

fn results() -> PathBuf {
    let dir = std::env::var_os("RXE_VM_RESULTS").expect(
        "RXE_VM_RESULTS is not set: run tests/vm/rxe-vm.sh first (see .ci/stages/50-rxe-vm.sh)",
    );
    PathBuf::from(dir)
}

fn text(rel: &str) -> String {
    let path = results().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The JSON report a run inside VM `vm` wrote as `name.json`.
fn report(vm: &str, name: &str) -> Value {
    let report = serde_json::from_str(&text(&format!("{vm}/{name}.json")))
        .unwrap_or_else(|e| panic!("{vm}/{name}.json: {e}"));
    util::assert_coded(&report);
    report
}

/// The exit status of that run.
fn exit(vm: &str, name: &str) -> i32 {
    text(&format!("{vm}/{name}.exit")).trim().parse().unwrap()
}

/// Every result of check `id`.
fn results_of<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    let found: Vec<&Value> = report["checks"]
        .as_array()
        .expect("checks array")
        .iter()
        .filter(|c| c["id"] == id)
        .collect();
    assert!(!found.is_empty(), "no result for {id} in {report:#}");
    found
}

/// The one result of `id` for `subject` (`None` = the node-wide one).
fn result<'a>(report: &'a Value, id: &str, subject: Option<&str>) -> &'a Value {
    results_of(report, id)
        .into_iter()
        .find(|c| c["subject"].as_str() == subject)
        .unwrap_or_else(|| panic!("no {id} result for {subject:?} in {report:#}"))
}

fn status(check: &Value) -> &str {
    check["status"].as_str().unwrap()
}

fn summary(check: &Value) -> &str {
    check["summary"].as_str().unwrap()
}

fn assert_verdict(check: &Value, expected: &str, summary_has: &str) {
    assert_eq!(status(check), expected, "{check:#}");
    assert!(summary(check).contains(summary_has), "{check:#}");
}

fn measurement(check: &Value, name: &str) -> f64 {
    check["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["value"].as_f64())
        .unwrap_or_else(|| panic!("no {name} in {check:#}"))
}

/// rdma.loopback passed on rxe0/1 having moved data both ways and timed round trips, every transfer checked,
/// and did not judge bandwidth against rxe's placeholder rate.
fn assert_loopback_moved_checked_data(report: &Value) {
    let lb = result(report, "rdma.loopback", Some("rxe0/1"));
    assert_verdict(lb, "pass", "every one checked");
    for name in [
        "write_gbits_per_sec",
        "read_gbits_per_sec",
        "send_latency_p50_us",
        "send_latency_p99_us",
    ] {
        assert!(measurement(lb, name) > 0.0, "{name}: {lb:#}");
    }
    let text = lb.to_string();
    assert!(text.contains("fixed placeholder"), "{lb:#}");
    assert!(!text.contains("pct_of_link"), "{lb:#}");
    assert!(
        text.contains(" 0 mismatched, slots equal after: yes"),
        "{lb:#}"
    );
}

#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn real_rdma_traffic_crossed_the_vm_link() {
    assert_eq!(
        text("b/pingpong.exit").trim(),
        "0",
        "{}",
        text("b/pingpong.txt")
    );
    assert!(
        text("a/pingpong.txt").contains("iters in"),
        "{}",
        text("a/pingpong.txt")
    );
}

#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn healthy_rxe_node_under_the_generic_profile() {
    for (vm, name) in [("a", "generic"), ("b", "peer-generic")] {
        let r = report(vm, name);
        assert_eq!(exit(vm, name), 0, "{r:#}");
        assert_verdict(
            result(&r, "rdma.devices", Some("rxe0")),
            "pass",
            "empty fw_ver",
        );
        assert_verdict(
            result(&r, "rdma.link", Some("rxe0/1")),
            "pass",
            "ACTIVE, LinkUp",
        );
        assert_verdict(
            result(&r, "rdma.roce", Some("rxe0/1")),
            "pass",
            "RoCE MTU 4096",
        );
        // rxe has only hw_counters/ with its own names: they are judged (TCG's timers make retries common, so a
        // warning naming one is as right as a pass).
        let counters = result(&r, "rdma.counters", Some("rxe0/1"));
        assert!(["pass", "warn"].contains(&status(counters)), "{counters:#}");
        assert!(!summary(counters).contains(" 0 judged"), "{counters:#}");
        assert_verdict(
            result(&r, "rdma.memlock", None),
            "pass",
            "CAP_IPC_LOCK is set",
        );
        assert_verdict(result(&r, "gdr.loopback", None), "skip", "no NVIDIA GPU");
        let pcie = result(&r, "pcie.link", None);
        assert_verdict(pcie, "skip", "no GPU, RDMA NIC or NVMe drive");
        assert!(
            pcie.to_string()
                .contains("network function 1af4:1000 not judged"),
            "{pcie:#}"
        );
    }
}

#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn roce_400g_profile_names_what_is_missing() {
    let r = report("a", "roce-400g");
    assert_eq!(exit("a", "roce-400g"), 1);
    let gdr = result(&r, "gdr.kernel_path", None);
    assert_verdict(gdr, "fail", "no NVIDIA kernel driver loaded");
    assert!(!summary(gdr).contains("proprietary"), "{gdr:#}");
    assert_verdict(
        result(&r, "rdma.link", Some("rxe0/1")),
        "fail",
        "below the profile minimum 400 Gb/s",
    );
}

#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn fault_netdev_mtu_1500_warns_on_roce_mtu() {
    let r = report("a", "fault-mtu-1500");
    assert_verdict(result(&r, "rdma.roce", Some("rxe0/1")), "warn", "1024");
    assert_verdict(result(&r, "rdma.link", Some("rxe0/1")), "pass", "ACTIVE");
    // Data still moves, at a 1024-byte path MTU.
    assert_loopback_moved_checked_data(&r);
    assert!(result(&r, "rdma.loopback", Some("rxe0/1"))
        .to_string()
        .contains("path MTU 1024"));
}

#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn fault_memlock_too_low_fails() {
    let r = report("a", "fault-memlock");
    assert_eq!(exit("a", "fault-memlock"), 1, "{r:#}");
    assert_verdict(
        result(&r, "rdma.memlock", None),
        "fail",
        "65536 bytes (64 KiB) without CAP_IPC_LOCK",
    );
}

#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn fault_netdev_down_fails_link_and_roce() {
    let r = report("a", "fault-netdev-down");
    assert_eq!(exit("a", "fault-netdev-down"), 1, "{r:#}");
    assert_eq!(
        status(result(&r, "rdma.link", Some("rxe0/1"))),
        "fail",
        "{r:#}"
    );
    assert_eq!(
        status(result(&r, "rdma.roce", Some("rxe0/1"))),
        "fail",
        "{r:#}"
    );
}

/// eth0 taken down once the loopback is moving data (rxe0 sent 500 more packets): the queue pairs lose their path
/// mid-transfer. rxe then fails a completion (status 2, local QP operation error); on a slow TCG host the
/// loopback may already be between phases, where connecting fails (`ibv_modify_qp(RTR)`: network unreachable).
/// Either way it fails at a named verbs stage; it never passes.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn fault_netdev_down_during_a_run_fails() {
    let r = report("a", "fault-netdev-down-during-run");
    assert_eq!(exit("a", "fault-netdev-down-during-run"), 1, "{r:#}");
    let lb = result(&r, "rdma.loopback", Some("rxe0/1"));
    assert_verdict(lb, "fail", "failed at ");
}

/// `rdma link delete rxe0` during rdma.loopback: rxe cannot disassociate an open verbs context, so the kernel
/// makes the deletion wait until the loopback closes the device. The run in progress moves and checks its data
/// (a pass is true: the device worked until closed); the next run finds no device (and no RDMA NIC: skip).
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn rxe_link_deleted_during_a_run() {
    assert_eq!(text("a/fault-link-deleted.delete-exit").trim(), "0");
    let times: Vec<f64> = text("a/fault-link-deleted.times")
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    let (delete_start, delete_end, run_end) = (times[0], times[1], times[2]);
    assert!(
        delete_start < run_end,
        "the deletion began during the run: {times:?}"
    );
    let during = report("a", "fault-link-deleted");
    let lb = result(&during, "rdma.loopback", Some("rxe0/1"));
    if status(lb) == "pass" {
        // Only honest if the device really stayed until the loopback closed it.
        assert!(
            delete_end > delete_start + 0.2,
            "the deletion did not wait: {times:?} {lb:#}"
        );
        assert_loopback_moved_checked_data(&during);
    } else {
        assert_eq!(status(lb), "fail", "{lb:#}");
    }
    // The presence rule's words: no RDMA device registered and no RDMA-capable NIC on the bus.
    let after = report("a", "after-link-deleted");
    for id in ["rdma.devices", "rdma.loopback"] {
        assert_verdict(
            result(&after, id, None),
            "skip",
            "no RDMA-capable NIC on this host",
        );
    }
}

/// `pair` between the two VMs over rxe0, host memory: both ends pass the handshake and report the same measured
/// port pair, data checked, not judged against rxe's placeholder rate; nothing listens afterwards.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn pair_between_the_two_vms() {
    for (vm, name) in [("a", "pair-connect"), ("b", "pair-listen")] {
        let r = report(vm, name);
        assert_eq!(exit(vm, name), 0, "{r:#}");
        assert_verdict(&result_only(&r, "pair.handshake"), "pass", "handshake with");
        let p = result_only(&r, "pair.rdma");
        assert_verdict(&p, "pass", "WRITE");
        assert!(p["subject"].as_str().unwrap().ends_with(":rxe0/1"), "{p:#}");
        for name in [
            "write_gbits_per_sec",
            "read_gbits_per_sec",
            "latency_p50_us",
            "latency_p99_us",
        ] {
            assert!(measurement(&p, name) > 0.0, "{name}: {p:#}");
        }
        let text = p.to_string();
        assert!(
            text.contains("data verified: WRITE true, READ true"),
            "{p:#}"
        );
        assert!(text.contains("no meaningful link rate"), "{p:#}");
    }
    assert_eq!(text("b/pair-listen.listening-after").trim(), "0");
}

/// The listener in VM b is killed with SIGKILL while VM a moves data: a's report is an error naming b's
/// address, well before a's deadline.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn pair_peer_killed_mid_transfer_is_an_error_naming_it() {
    let r = report("a", "pair-peer-killed");
    assert_eq!(exit("a", "pair-peer-killed"), 3, "{r:#}");
    let p = result_only(&r, "pair.rdma");
    assert_eq!(status(&p), "error", "{p:#}");
    assert!(summary(&p).contains("10.99.0.2"), "{p:#}");
    // Well before the 120 s deadline (rxe raises no retry error for a dead peer; the control connection tells).
    assert!(r["duration_ms"].as_u64().unwrap() < 30_000, "{r:#}");
}

/// The one result of `id`.
fn result_only(report: &Value, id: &str) -> Value {
    let found = results_of(report, id);
    assert_eq!(found.len(), 1, "{report:#}");
    found[0].clone()
}

/// The `pair.rdma` result of node `me`'s link with node `neighbour` in `report`.
fn link_with(report: &Value, me: &str, neighbour: &str) -> Value {
    let subject = format!("{me}:rxe0/1 <-> {neighbour}:rxe0/1");
    results_of(report, "pair.rdma")
        .into_iter()
        .find(|c| c["subject"] == subject.as_str())
        .unwrap_or_else(|| panic!("no pair.rdma {subject} in {report:#}"))
        .clone()
}

/// A `pair.rdma` pass that moved and compared data both ways and timed round trips.
fn assert_pair_moved_checked_data(p: &Value) {
    assert_verdict(p, "pass", "WRITE");
    for name in [
        "write_gbits_per_sec",
        "read_gbits_per_sec",
        "latency_p99_us",
    ] {
        assert!(measurement(p, name) > 0.0, "{name}: {p:#}");
    }
    assert!(
        p.to_string()
            .contains("data verified: WRITE true, READ true"),
        "{p:#}"
    );
}

/// Each VM with its ring predecessor and successor, in rank order.
const RING: [(&str, &str, &str); 3] = [("a", "c", "b"), ("b", "a", "c"), ("c", "b", "a")];

/// The ring run `name` in the three VMs, whose nodes `node` names ("a" -> "vm-a"): every node tested both
/// neighbours (listening for its predecessor, connecting to its successor), all six ends passed with data
/// checked, and each node's `pair.ring` passes and says the ring came from `source`.
fn assert_healthy_ring(name: &str, node: fn(&str) -> String, source: &str) {
    let nodes = RING.map(|(vm, _, _)| node(vm)).join(",");
    for (rank, (vm, prev, next)) in RING.into_iter().enumerate() {
        let r = report(vm, name);
        assert_eq!(exit(vm, name), 0, "{r:#}");
        assert_eq!(results_of(&r, "pair.handshake").len(), 2, "{r:#}");
        for h in results_of(&r, "pair.handshake") {
            assert_verdict(h, "pass", "handshake with");
        }
        assert_eq!(results_of(&r, "pair.rdma").len(), 2, "{r:#}");
        for neighbour in [prev, next] {
            assert_pair_moved_checked_data(&link_with(&r, &node(vm), &node(neighbour)));
        }
        let ring = result_only(&r, "pair.ring");
        assert_verdict(
            &ring,
            "pass",
            &format!("every ring link of {} passes", node(vm)),
        );
        let from = format!("ring = {nodes} (rank {rank} of 3, from {source})");
        assert!(ring.to_string().contains(&from), "{from}: {ring:#}");
    }
}

/// `pair --ring --peers vm-a,vm-b,vm-c --rank N` in each of the three VMs.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn ring_of_three_vms_by_hand() {
    assert_healthy_ring("ring-hand", |vm| format!("vm-{vm}"), "--peers/--rank");
}

/// The same ring from Slurm's variables alone (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST=vm[1-3], and
/// SLURM_JOB_ID/SLURM_STEP_ID as the token: no --token, no --peers). The guests answer to vm1..vm3 as well:
/// Slurm's host lists range over numbers only.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn ring_of_three_vms_from_slurm_variables() {
    assert_healthy_ring(
        "ring-slurm",
        |vm| format!("vm{}", vm.as_bytes()[0] - b'a' + 1),
        "Slurm (SLURM_PROCID, SLURM_JOB_NODELIST=vm[1-3])",
    );
}

/// vm-c drops the RoCE traffic that reaches it (TCP still passes): its two links fail on both ends with the
/// transport's own error (retry exceeded), well before the 120 s deadline, while vm-a <-> vm-b passes; vm-c's
/// own `pair.ring` and `pair --summarize` over the three reports name vm-c.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn ring_fault_on_vm_c_is_named_by_summarize() {
    let (a, b, c) = (
        report("a", "ring-fault"),
        report("b", "ring-fault"),
        report("c", "ring-fault"),
    );
    for (vm, r) in [("a", &a), ("b", &b), ("c", &c)] {
        assert_eq!(exit(vm, "ring-fault"), 1, "{r:#}");
        // rxe retried forever with a retry count of 7: the runs then lasted their whole deadline.
        assert!(r["duration_ms"].as_u64().unwrap() < 60_000, "{r:#}");
        for h in results_of(r, "pair.handshake") {
            assert_verdict(h, "pass", "handshake with");
        }
    }
    assert_pair_moved_checked_data(&link_with(&a, "vm-a", "vm-b"));
    assert_pair_moved_checked_data(&link_with(&b, "vm-b", "vm-a"));
    for (me, r, other) in [
        ("vm-a", &a, "vm-c"),
        ("vm-b", &b, "vm-c"),
        ("vm-c", &c, "vm-a"),
        ("vm-c", &c, "vm-b"),
    ] {
        let p = link_with(r, me, other);
        assert_verdict(&p, "fail", "work completion status 12");
    }
    assert_verdict(
        &result_only(&c, "pair.ring"),
        "fail",
        "vm-c is common to every failing pair",
    );

    let summary = report(".", "ring-summary");
    assert_eq!(exit(".", "ring-summary"), 1, "{summary:#}");
    let ring = result_only(&summary, "pair.ring");
    assert_verdict(&ring, "fail", "vm-c is common to every failing pair");
    let text = ring.to_string();
    for line in [
        "reports from vm-a, vm-b, vm-c",
        "vm-a <-> vm-b = pass",
        "vm-a <-> vm-c = fail",
        "vm-b <-> vm-c = fail",
    ] {
        assert!(text.contains(line), "{line}: {ring:#}");
    }
}

/// The `isolate` report vm-a wrote as `name.json`, checked against `schemas/isolate.schema.json`.
fn isolate_report(name: &str) -> Value {
    let path = results().join(format!("a/{name}.json"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    util::json(util::Schema::Isolate, &bytes)
}

/// Every test of an isolate report as (id, purpose, nodes, passed), in round order.
fn isolate_tests(report: &Value) -> Vec<(String, String, Vec<String>, bool)> {
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    report["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|round| round["tests"].as_array().unwrap())
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_string(),
                t["purpose"].as_str().unwrap().to_string(),
                names(&t["nodes"]),
                t["passed"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The verdict `isolate` gave `node`.
fn isolate_verdict<'a>(report: &'a Value, node: &str) -> &'a Value {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .unwrap_or_else(|| panic!("no node {node} in {report:#}"))
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// `isolate` in vm-a over the three VMs with `pair` as its measure (tests/vm/pair-group.sh: each group's ring
/// started on its nodes, `pair --summarize` as the group's report), nothing wrong: three nodes are one screening
/// group, its ring passes, and every node is healthy after one round.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn isolate_with_pair_on_a_healthy_fabric_names_nobody() {
    let r = isolate_report("isolate-healthy");
    assert_eq!(exit("a", "isolate-healthy"), 0, "{r:#}");
    assert_eq!(r["status"], "pass", "{r:#}");
    for key in ["culprit_nodes", "culprit_links", "unconfirmed", "untested"] {
        assert_eq!(r["summary"][key], serde_json::json!([]), "{key}: {r:#}");
    }
    assert_eq!(
        isolate_tests(&r),
        vec![(
            "r1t0".into(),
            "screen".into(),
            owned(&["vm-a", "vm-b", "vm-c"]),
            true
        )]
    );
    for node in ["vm-a", "vm-b", "vm-c"] {
        assert_eq!(isolate_verdict(&r, node)["verdict"], "healthy", "{r:#}");
    }
    // The group's report is the summary of the ring's three node reports, every link passing.
    let group = report("a/isolate-healthy-work", "r1t0");
    assert_verdict(
        &result_only(&group, "pair.ring"),
        "pass",
        "every ring link of 3 reports passes",
    );
}

/// The same with vm-c dropping the RoCE that reaches it (tests/vm/roce-drop.sh, inside vm-c): vm-c is named
/// the culprit node, exactly, and vm-a and vm-b healthy. Three nodes leave no known-good node outside the
/// failing screening group, so the planner confirms vm-c with each of the group's own known-good nodes in turn
/// (failing with both is the node, not a link): screen, split, two confirmations.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn isolate_with_pair_names_vm_c_dropping_roce() {
    let r = isolate_report("isolate-fault");
    assert_eq!(exit("a", "isolate-fault"), 1, "{r:#}");
    assert_eq!(r["status"], "fail", "{r:#}");
    assert_eq!(
        r["summary"]["culprit_nodes"],
        serde_json::json!(["vm-c"]),
        "{r:#}"
    );
    for key in ["culprit_links", "unconfirmed", "untested"] {
        assert_eq!(r["summary"][key], serde_json::json!([]), "{key}: {r:#}");
    }
    let test = |id: &str, purpose: &str, nodes: &[&str], passed| {
        (id.to_string(), purpose.to_string(), owned(nodes), passed)
    };
    assert_eq!(
        isolate_tests(&r),
        vec![
            test("r1t0", "screen", &["vm-a", "vm-b", "vm-c"], false),
            test("r2t0", "split", &["vm-a", "vm-b"], true),
            test("r3t0", "confirm", &["vm-c", "vm-a"], false),
            test("r4t0", "confirm", &["vm-c", "vm-b"], false),
        ],
        "{r:#}"
    );
    for node in ["vm-a", "vm-b"] {
        assert_eq!(isolate_verdict(&r, node)["verdict"], "healthy", "{r:#}");
    }
    let c = isolate_verdict(&r, "vm-c");
    assert_eq!(c["verdict"], "culprit_node", "{c:#}");
    let reason = c["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("failed in r1t0")
            && reason.contains("failed with two of the group's own: in r3t0")
            && reason.contains("and in r4t0"),
        "{reason}"
    );
    // Each failing group failed on its ring: the summary's exit and verdict, vm-c's links failing.
    for t in r["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|round| round["tests"].as_array().unwrap())
        .filter(|t| t["passed"] == false)
    {
        let detail = t["detail"].as_str().unwrap();
        assert!(
            t["ending"] == "exit 1" && detail.contains("pair.ring"),
            "{t:#}"
        );
        let group = report("a/isolate-fault-work", t["id"].as_str().unwrap());
        assert_eq!(
            status(&result_only(&group, "pair.ring")),
            "fail",
            "{group:#}"
        );
    }
    let screen = report("a/isolate-fault-work", "r1t0");
    assert_verdict(
        &result_only(&screen, "pair.ring"),
        "fail",
        "vm-c is common to every failing pair",
    );
}

/// The evidence line of `check` that starts with `prefix`.
fn evidence_line<'a>(check: &'a Value, prefix: &str) -> &'a str {
    check["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|e| e.starts_with(prefix))
        .unwrap_or_else(|| panic!("no evidence {prefix:?} in {check:#}"))
}

/// `pair --memory gpu` between vm-b and vm-c with the CUDA stand-in (tests/vm/cuda-standin.c, "device memory"
/// that is host memory) as libcuda: beside the host-memory control, the GPU leg moved data both ways, compared
/// it, timed round trips, and names its registration path on both ends. With the stand-in's DMA-BUF export
/// refused (as the proprietary driver refuses it) that is ibv_reg_mr on the device pointer (peermem). With
/// CUDA_STANDIN_DMABUF=udmabuf the export needs /dev/udmabuf: where the guest kernel has none (Debian 12's 6.1
/// is built without CONFIG_UDMABUF) the export is refused the same way; where it has one, rxe either accepts
/// ibv_reg_dmabuf_mr or refuses it and ibv_reg_mr is used, and the evidence says which.
#[test]
#[ignore = "needs the rxe VMs: .ci/stages/50-rxe-vm.sh"]
fn gpu_memory_leg_through_the_cuda_standin() {
    let no_udmabuf = text("c/udmabuf.dev").contains("No such file");
    for name in ["gpu-peermem", "gpu-udmabuf"] {
        for (vm, peer) in [("b", "vm-c"), ("c", "vm-b")] {
            let r = report(vm, name);
            assert_eq!(exit(vm, name), 0, "{r:#}");
            let p = result_only(&r, "pair.rdma");
            let leg = format!(
                "GPU leg (GPU memory (0000:5e:00.0) here, GPU memory (0000:5e:00.0) on {peer})"
            );
            assert_verdict(&p, "pass", &leg);
            for m in [
                "gpu_write_gbits_per_sec",
                "gpu_read_gbits_per_sec",
                "gpu_latency_p99_us",
                "write_gbits_per_sec",
            ] {
                assert!(measurement(&p, m) > 0.0, "{m}: {p:#}");
            }
            for prefix in ["host memory", leg.as_str()] {
                assert_eq!(
                    evidence_line(&p, &format!("{prefix}: data verified")),
                    format!("{prefix}: data verified: WRITE true, READ true"),
                );
            }
            let refused_export = "ibv_reg_mr (refused first: DMA-BUF export = cuMemGetHandleForAddressRange: CUDA_ERROR_NOT_SUPPORTED)";
            for who in ["here", "on the peer"] {
                let line = evidence_line(&p, &format!("{leg}: memory registration {who} = "));
                let path = line.split_once(&format!("{who} = ")).unwrap().1;
                if name == "gpu-peermem" || no_udmabuf {
                    assert_eq!(path, refused_export, "{p:#}");
                } else {
                    assert!(
                        path == "ibv_reg_dmabuf_mr"
                            || path.starts_with("ibv_reg_mr (refused first: ibv_reg_dmabuf_mr = "),
                        "{p:#}"
                    );
                }
            }
        }
    }
}
