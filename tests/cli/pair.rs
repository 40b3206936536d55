//! `pair` for real on loopback: two (or three) processes of the built binary on 127.0.0.1, the handshake and its
//! faults over real sockets. The verbs transfers need an RDMA device; where there is none (this machine, CI) the
//! port pairs are skipped with the reason, which these tests accept and check is said.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::faults::{alive, shims, HUNG_S, UNHURRIED_S};
use crate::util::*;
use fabric_preflight::pair::wire::{self, Message, MAGIC, VERSION};

/// A port free now and never handed out before in this test process: the kernel may give a just-released port
/// again, and two ends (or two tests running at once) on one port would talk to the wrong peer.
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub(crate) fn pair(args: &[&str], token: Option<&str>) -> Child {
    pair_env(args, token, &[])
}

fn pair_env(args: &[&str], token: Option<&str>, env: &[(&str, &str)]) -> Child {
    let mut cmd = preflight();
    cmd.args(["pair", "--format", "json", "--color", "never"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.env("FABRIC_PREFLIGHT_TOKEN", t);
    }
    cmd.spawn().expect("binary runs")
}

/// tests/vm/cuda-standin.c built as libcuda.so.1 in a directory of its own, for LD_LIBRARY_PATH.
fn cuda_standin() -> tempfile::TempDir {
    crate::faults::shims(&[("libcuda.so.1", include_str!("../vm/cuda-standin.c"))])
}

/// A listener with `listener_env` and a connector with `--memory host`, both on loopback.
fn memory_pair(memory: &str, listener_env: &[(&str, &str)]) -> [(u8, Value); 2] {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let listener = pair_env(
        &["--listen", &listen, "--memory", memory, "--timeout", "60"],
        Some("m"),
        listener_env,
    );
    std::thread::sleep(Duration::from_millis(300));
    let connector = pair(
        &["--connect", &listen, "--memory", "host", "--timeout", "60"],
        Some("m"),
    );
    let (l_code, l_report, _) = finish(listener);
    let (c_code, c_report, _) = finish(connector);
    nothing_listens_on(port);
    [(l_code, l_report), (c_code, c_report)]
}

fn evidence_has(result: &Value, line: &str) -> bool {
    result["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e.as_str().unwrap().contains(line))
}

pub(crate) fn finish(child: Child) -> (u8, Value, Output) {
    let out = child.wait_with_output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            stdout(&out),
            stderr(&out)
        )
    });
    assert_coded(&report);
    (code(&out), report, out)
}

fn files_report(path: &Path) -> Value {
    let report = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_coded(&report);
    report
}

/// The port pairs either ran or were skipped for want of an RDMA device, saying so.
fn rdma_ran_or_was_skipped_with_reason(report: &Value) {
    let pairs = results(report, "pair.rdma");
    assert!(!pairs.is_empty(), "{report}");
    for p in pairs {
        if p["status"] == "skip" {
            assert!(p["summary"].as_str().unwrap().contains("RDMA"), "{p}");
        }
    }
}

fn nothing_listens_on(port: u16) {
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "something still listens on {port}"
    );
}

/// The deadline of a ring of three whose runs end at it: three processes start and greet each other before it.
const RING_HUNG_S: u64 = 2 * HUNG_S;

fn secs(s: u64) -> String {
    s.to_string()
}

/// Whether something listens on 127.0.0.1:`port`, from /proc/net/tcp (state 0A), without connecting to it.
fn listening(port: u16) -> bool {
    let wanted = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&wanted.as_str()) && f.get(3) == Some(&"0A")
        })
}

/// Waits (60 s at most) until `ready()`; a child's start on a loaded machine is not what these tests measure.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ready() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{what}: not within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_processes_handshake_and_report() {
    let port = free_port();
    let listener = pair(
        &["--listen", &format!("127.0.0.1:{port}"), "--timeout", "60"],
        Some("job-1"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let connector = pair(
        &[
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--token",
            "job-1",
            "--timeout",
            "60",
        ],
        None,
    );
    let (c_code, c_report, _) = finish(connector);
    let (l_code, l_report, _) = finish(listener);
    for (code, report) in [(c_code, &c_report), (l_code, &l_report)] {
        let hs = results(report, "pair.handshake");
        assert_eq!(hs.len(), 1);
        assert_eq!(hs[0]["status"], "pass", "{report}");
        rdma_ran_or_was_skipped_with_reason(report);
        assert_eq!(code, Exit::OK, "{report}");
    }
    // The token never appears in a report.
    assert!(!c_report.to_string().contains("job-1"));
    nothing_listens_on(port);
}

/// `pair --node-name` (or `NODE_NAME`, Kubernetes' downward API) names the host in the report and to the peer,
/// as `run --node-name` does: in a pod the kernel's host name is the pod's.
#[test]
fn node_name_names_the_host_in_the_report_and_to_the_peer() {
    let port = free_port();
    let listener = pair_env(
        &["--listen", &format!("127.0.0.1:{port}"), "--timeout", "60"],
        Some("job-n"),
        &[("NODE_NAME", "gpu-node-a")],
    );
    std::thread::sleep(Duration::from_millis(300));
    let connector = pair(
        &[
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--node-name",
            "gpu-node-b",
            "--timeout",
            "60",
        ],
        Some("job-n"),
    );
    let (_, c_report, _) = finish(connector);
    let (_, l_report, _) = finish(listener);
    for (report, me, peer) in [
        (&c_report, "gpu-node-b", "gpu-node-a"),
        (&l_report, "gpu-node-a", "gpu-node-b"),
    ] {
        assert_eq!(report["host"]["hostname"], me, "{report}");
        assert_eq!(report["host"]["node_name"], me, "{report}");
        let hs = results(report, "pair.handshake");
        assert_eq!(hs[0]["subject"], format!("{me} <-> {peer}"), "{report}");
    }
}

#[test]
fn connector_retries_until_the_listener_is_up() {
    let port = free_port();
    let connector = pair(
        &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "60"],
        Some("t"),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", "60"],
        Some("t"),
    );
    let (c_code, c_report, _) = finish(connector);
    let (l_code, _, _) = finish(listener);
    assert_eq!((c_code, l_code), (Exit::OK, Exit::OK), "{c_report}");
}

#[test]
fn nobody_listening_is_an_error_at_the_deadline() {
    let port = free_port();
    let t = Instant::now();
    let (code, report, _) = finish(pair(
        &[
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--timeout",
            &secs(HUNG_S),
        ],
        Some("t"),
    ));
    assert!(
        t.elapsed() < Duration::from_secs(2 * HUNG_S),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(code, Exit::COULD_NOT_RUN);
    let s = results(&report, "pair.handshake")[0]["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        s.contains("could not reach") && s.contains("before the deadline"),
        "{s}"
    );
}

/// `pair --format npd` speaks NPD's exit codes like `run --format npd`: a pair that could not run is Unknown (2),
/// not the could-not-run code 3 that NPD would not understand.
#[test]
fn npd_format_gives_npds_exit_codes() {
    let port = free_port();
    let out = preflight()
        .args(["pair", "--format", "npd", "--timeout", "1", "--token", "t"])
        .args(["--connect", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{line}");
    assert!(line.starts_with("ERROR pair.handshake"), "{line}");
}

#[test]
fn wrong_token_is_refused_on_both_sides() {
    let port = free_port();
    // The listener waits out its deadline for a peer with the token; the connector stops at the refusal.
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", &secs(HUNG_S)],
        Some("right"),
    );
    let t = Instant::now();
    let (c_code, c_report, _) = finish(pair(
        &[
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--timeout",
            &secs(UNHURRIED_S),
        ],
        Some("wrong"),
    ));
    let (l_code, l_report, l_out) = finish(listener);
    assert!(t.elapsed() < Duration::from_secs(2 * HUNG_S));
    assert_eq!((c_code, l_code), (Exit::COULD_NOT_RUN, Exit::COULD_NOT_RUN));
    let c = c_report.to_string();
    assert!(
        c.contains("refused the handshake: job token does not match"),
        "{c}"
    );
    let l = l_report.to_string();
    assert!(
        l.contains("no peer with the job token") && l.contains("job token does not match"),
        "{l}"
    );
    assert!(stderr(&l_out).contains("refused 127.0.0.1:"));
    nothing_listens_on(port);
}

/// Sends `bytes` as a client, returns what the listener answered before closing and how long that took.
fn raw_client(port: u16, bytes: &[u8], then_wait: bool) -> (Vec<u8>, Duration) {
    let mut s = loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let t = Instant::now();
    s.write_all(bytes).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(if then_wait { 10 } else { 5 })))
        .unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    (reply, t.elapsed())
}

/// A refusal decided from the header comes before the 5 s a handshake may take (what reading on would cost).
const FROM_THE_HEADER: Duration = Duration::from_secs(4);

fn refusal(reply: &[u8]) -> String {
    match wire::decode(reply) {
        Ok((Message::Refused { reason }, _)) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn garbage_then_a_real_peer_gets_through() {
    let port = free_port();
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", "60"],
        Some("t"),
    );
    let (reply, took) = raw_client(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert!(took < FROM_THE_HEADER, "{took:?}");
    assert!(refusal(&reply).contains("not a fabric-preflight pair handshake"));
    // The listener still waits for the one real peer.
    let (c_code, _, _) = finish(pair(
        &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "60"],
        Some("t"),
    ));
    let (l_code, l_report, l_out) = finish(listener);
    assert_eq!((c_code, l_code), (Exit::OK, Exit::OK), "{l_report}");
    assert!(stderr(&l_out).contains("not a fabric-preflight pair handshake"));
}

#[test]
fn oversized_and_other_versions_are_refused_from_the_header() {
    let port = free_port();
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", &secs(HUNG_S)],
        Some("t"),
    );
    let mut big = MAGIC.to_vec();
    big.push(VERSION);
    big.extend_from_slice(&(1u32 << 30).to_be_bytes());
    let (reply, took) = raw_client(port, &big, false);
    assert!(took < FROM_THE_HEADER, "{took:?}");
    assert!(refusal(&reply).contains("exceeds the 16384-byte limit"));
    let mut v9 = MAGIC.to_vec();
    v9.extend_from_slice(&[9, 0, 0, 0, 2]);
    let (reply, _) = raw_client(port, &v9, false);
    assert!(refusal(&reply).contains("version 9"));
    let (code, report, _) = finish(listener);
    assert_eq!(code, Exit::COULD_NOT_RUN);
    assert!(report.to_string().contains("exceeds the 16384-byte limit"));
}

#[test]
fn slow_and_half_open_clients_are_dropped_within_the_deadline() {
    let port = free_port();
    let t = Instant::now();
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", &secs(HUNG_S)],
        Some("t"),
    );
    // Half a header, then silence: the listener must not wait past its deadline.
    let (_, took) = raw_client(port, &MAGIC[..3], true);
    let (code, report, _) = finish(listener);
    assert!(took < Duration::from_secs(2 * HUNG_S), "{took:?}");
    assert!(
        t.elapsed() < Duration::from_secs(2 * HUNG_S),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(code, Exit::COULD_NOT_RUN);
    assert!(report.to_string().contains("slow or half-open"), "{report}");
    nothing_listens_on(port);
}

#[test]
fn ring_of_three_on_loopback_and_the_common_node_of_failures() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let ring = |rank: usize, timeout: &str| {
        pair(
            &[
                "--ring",
                "--peers",
                &peers,
                "--rank",
                &rank.to_string(),
                "--timeout",
                timeout,
            ],
            Some("ring-token"),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let summarize = |files: &[std::path::PathBuf]| {
        let out = preflight()
            .args(["pair", "--format", "json", "--summarize"])
            .args(files)
            .output()
            .unwrap();
        let report: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        assert_coded(&report);
        (code(&out), report)
    };
    let nodes: Vec<Child> = (0..3).map(|r| ring(r, "60")).collect();
    let mut passing = Vec::new();
    for (rank, node) in nodes.into_iter().enumerate() {
        let (code, report, _) = finish(node);
        assert_eq!(code, Exit::OK, "{report}");
        assert_eq!(results(&report, "pair.handshake").len(), 2);
        // A ring whose links moved no data (no RDMA device here) is a skip, not a pass.
        let moved = results(&report, "pair.rdma")
            .iter()
            .all(|p| p["status"] == "pass");
        assert_eq!(
            results(&report, "pair.ring")[0]["status"],
            if moved { "pass" } else { "skip" },
            "{report}"
        );
        rdma_ran_or_was_skipped_with_reason(&report);
        // The ring the report carries, for --summarize: members, rank, and each link with its status.
        assert_eq!(
            report["ring"]["members"].as_array().unwrap().len(),
            3,
            "{report}"
        );
        assert_eq!(report["ring"]["rank"], rank, "{report}");
        let me = format!("127.0.0.1:{}", ports[rank]);
        let links = report["ring"]["links"].as_array().unwrap();
        assert_eq!(links.len(), 2, "{report}");
        assert_eq!(
            (&links[0]["b"], &links[1]["a"]),
            (&Value::from(me.as_str()), &Value::from(me.as_str()))
        );
        let f = dir.join(format!("pass-{rank}.json"));
        std::fs::write(&f, report.to_string()).unwrap();
        passing.push(f);
    }

    // Rank 1's report is missing (killed before writing it) and another is garbage: the summary of what is
    // there, an error naming each unreadable report and what is unknown, exit 3.
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "{\"truncated\": ").unwrap();
    let files = [
        passing[0].clone(),
        dir.join("missing.json"),
        passing[2].clone(),
        garbage.clone(),
    ];
    let (exit, report) = summarize(&files);
    assert_eq!(exit, Exit::COULD_NOT_RUN, "{report}");
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 3, "{report}");
    assert_eq!(
        checks[0]["status"],
        results(&files_report(&passing[0]), "pair.ring")[0]["status"],
        "{report}"
    );
    for (check, path) in checks[1..].iter().zip([dir.join("missing.json"), garbage]) {
        assert_eq!(check["status"], "error", "{report}");
        assert_eq!(check["subject"], path.display().to_string(), "{report}");
        let line = format!(
            "ring nodes without a readable report = 127.0.0.1:{}",
            ports[1]
        );
        assert!(evidence_has(check, &line), "{report}");
        assert!(
            evidence_has(check, "links no readable report saw (unknown) = none"),
            "{report}"
        );
    }
    // No report readable at all: a usage error.
    let out = preflight()
        .args(["pair", "--summarize"])
        .arg(dir.join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no report could be read"),
        "{}",
        stderr(&out)
    );

    // Rank 1 never starts: its neighbours each see one failing link, and together they name it.
    let (r0, r2) = (ring(0, &secs(RING_HUNG_S)), ring(2, &secs(RING_HUNG_S)));
    let mut files = Vec::new();
    for (rank, child) in [(0, r0), (2, r2)] {
        let (code, report, _) = finish(child);
        assert_eq!(code, Exit::CHECK_FAILED, "{report}");
        let ring_result = results(&report, "pair.ring")[0].to_string();
        assert!(
            ring_result.contains("without a single common node"),
            "{ring_result}"
        );
        let f = dir.join(format!("{rank}.json"));
        std::fs::write(&f, report.to_string()).unwrap();
        files.push(f);
    }
    let (exit, report) = summarize(&files);
    assert_eq!(exit, Exit::CHECK_FAILED, "{report}");
    let summary = report["checks"][0]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("127.0.0.1:{} is common", ports[1])),
        "{summary}"
    );
    // A missing report beside a failure found: still exit 1.
    files.push(dir.join("missing.json"));
    let (exit, report) = summarize(&files);
    assert_eq!(exit, Exit::CHECK_FAILED, "{report}");
    assert_eq!(report["checks"][1]["status"], "error", "{report}");
}

#[test]
fn a_ring_listener_refuses_a_node_that_is_not_its_predecessor() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    // Rank 1 listens for rank 0 only: a connector with the token that names itself rank 2 is refused.
    let rank1 = pair(
        &[
            "--ring",
            "--peers",
            &peers,
            "--rank",
            "1",
            "--timeout",
            &secs(HUNG_S),
        ],
        Some("t"),
    );
    let stray = format!("127.0.0.1:{}", ports[1]);
    let mut s = loop {
        if let Ok(s) = TcpStream::connect(&stray) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let hello = wire::encode(&Message::Hello {
        token: "t".into(),
        node: format!("127.0.0.1:{}", ports[2]),
        ports: vec![],
        no_ports: Some(wire::NoPorts {
            status: fabric_preflight::probe::Status::Skip,
            why: "none".into(),
        }),
    });
    s.write_all(&hello).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert!(
        refusal(&reply).contains("expects its predecessor"),
        "{reply:?}"
    );
    let (_, report, _) = finish(rank1);
    assert!(
        report.to_string().contains("expects its predecessor"),
        "{report}"
    );
}

#[test]
fn usage_errors() {
    let out = preflight()
        .args(["pair", "--listen", "19999"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(stderr(&out).contains("no job token"));
    let out = preflight()
        .args(["pair", "--ring", "--token", "t"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(stderr(&out).contains("no ring"));
    let out = preflight().args(["pair", "--token", "t"]).output().unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    let out = preflight()
        .args(["pair", "--connect", "nocolon", "--token", "t"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
}

/// --ack-timeout is the verbs exponent: 0 would mean "wait forever" and 31 is the largest the 5-bit field holds.
#[test]
fn ack_timeout_outside_the_verbs_range_is_a_usage_error() {
    for exp in ["0", "32", "255", "-1", "14.5", "x"] {
        let out = pair_listening_with(&format!("--ack-timeout={exp}"));
        assert_eq!(code(&out), Exit::USAGE, "--ack-timeout {exp}");
        assert!(
            stderr(&out).contains("--ack-timeout"),
            "--ack-timeout {exp}"
        );
    }
}

/// A stand-in libibverbs that lists mlx5_0 and mlx5_1 (two of `hgx-healthy`'s ports) and does `open` in
/// `ibv_open_device`, the measurement's first call on a device.
fn verbs_opening(open: &str) -> tempfile::TempDir {
    let source = format!(
        r#"#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int dev[2];
void **ibv_get_device_list(int *n) {{
    void **l = calloc(3, sizeof(void *));
    l[0] = &dev[0]; l[1] = &dev[1]; *n = 2;
    return l;
}}
void ibv_free_device_list(void **l) {{ free(l); }}
const char *ibv_get_device_name(void *d) {{ return d == &dev[0] ? "mlx5_0" : "mlx5_1"; }}
void *ibv_open_device(void *d) {{ {open} }}
"#
    );
    shims(&[("libibverbs.so.1", &source)])
}

/// `ibv_open_device` hangs after forking a helper that leaves the child's process group (`setsid`) and holds
/// its output open for 20 s.
const ESCAPING_HELPER: &str =
    "if (fork() == 0) { setsid(); sleep(20); _exit(0); } for (;;) pause(); return 0;";

/// Both ends of a pair on `hgx-healthy`'s ports with the stand-in libibverbs in `libs`; `extra` flags on the
/// connector.
fn pair_on_hgx(libs: &Path, timeout: &str, extra: &[&str]) -> (Child, Child) {
    let port = free_port();
    let side = |mode: &[&str], extra: &[&str]| {
        let mut cmd = preflight();
        cmd.env("LD_LIBRARY_PATH", libs)
            .args(["pair", "--format", "json", "--token", "t", "--root"])
            .arg(host("hgx-healthy"))
            .args(["--timeout", timeout])
            .args(mode)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("binary runs")
    };
    let listener = side(&["--listen", &format!("127.0.0.1:{port}")], &[]);
    let connector = side(&["--connect", &format!("127.0.0.1:{port}")], extra);
    (listener, connector)
}

/// A ring of three on loopback, each node on `hgx-healthy`'s ports with the stand-in libibverbs in `libs`: the
/// nodes' ports and processes, by rank.
fn ring_on_hgx(libs: &Path, timeout: &str) -> (Vec<u16>, Vec<Child>) {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let nodes = (0..3)
        .map(|rank| {
            preflight()
                .env("LD_LIBRARY_PATH", libs)
                .args(["pair", "--format", "json", "--token", "t", "--root"])
                .arg(host("hgx-healthy"))
                .args(["--ring", "--peers", &peers, "--rank", &rank.to_string()])
                .args(["--timeout", timeout])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    (ports, nodes)
}

/// Both ends exit 3, each report's first port pair an error saying every one of `words` and naming the peer,
/// the second not run; the reports.
fn both_ends_stopped(ends: (Child, Child), words: &[&str]) -> Vec<Value> {
    let (listener, connector) = ends;
    let mut reports = Vec::new();
    for side in [connector, listener] {
        let (code, report, _) = finish(side);
        assert_eq!(code, Exit::COULD_NOT_RUN, "{report}");
        let pairs = results(&report, "pair.rdma");
        assert_eq!(pairs.len(), 2, "{report}");
        let first = pairs[0]["summary"].as_str().unwrap();
        assert_eq!(pairs[0]["status"], "error", "{report}");
        assert!(
            first.contains("measurement with hgx-healthy (127.0.0.1:")
                && words.iter().all(|w| first.contains(w)),
            "{first}"
        );
        assert_eq!(pairs[1]["status"], "error", "{report}");
        let second = pairs[1]["summary"].as_str().unwrap();
        assert!(
            second.starts_with("not run: the measurement of port pair 0 stopped"),
            "{report}"
        );
        reports.push(report);
    }
    reports
}

/// A pair with a [`HUNG_S`] deadline whose verbs call hangs at both ends: each end's measurement is killed a
/// moment after the deadline and named, long before the watchdog (deadline + 5 s).
fn killed_at_the_deadline_and_named(libs: &Path) {
    let t = Instant::now();
    both_ends_stopped(
        pair_on_hgx(libs, &secs(HUNG_S), &[]),
        &["timed out after", "in ibv_open_device"],
    );
    assert!(
        t.elapsed() < Duration::from_secs(2 * HUNG_S),
        "{:?}",
        t.elapsed()
    );
}

/// A verbs call of the measurement that never returns is killed a moment after the deadline: the report names
/// the call and the peer, the port pairs after it are not run, and the pair ends long before the watchdog.
#[test]
fn a_verbs_call_that_hangs_in_the_measurement_is_killed_and_named() {
    let libs = verbs_opening("for (;;) pause(); return 0;");
    killed_at_the_deadline_and_named(libs.path());
}

#[test]
fn a_verbs_call_that_crashes_is_named_with_its_signal() {
    let libs = verbs_opening("*(volatile int *)0 = 1; return 0;");
    let t = Instant::now();
    both_ends_stopped(
        pair_on_hgx(libs.path(), &secs(UNHURRIED_S), &[]),
        &["crashed with signal 11 (SIGSEGV) in ibv_open_device"],
    );
    // At once, not at the deadline.
    assert!(
        t.elapsed() < Duration::from_secs(UNHURRIED_S / 2),
        "{:?}",
        t.elapsed()
    );
}

/// The presence survey's device list is a library call too: a libibverbs that hangs in it costs half the
/// deadline at most, and the peer still hears why this node has no port.
#[test]
fn listing_the_ports_is_bounded() {
    let hang = r#"#include <unistd.h>
void **ibv_get_device_list(int *n) { for (;;) pause(); return 0; }
void ibv_free_device_list(void **l) {}
"#;
    let libs = shims(&[("libibverbs.so.1", hang)]);
    let t = Instant::now();
    let deadline = 2 * HUNG_S;
    let (listener, connector) = pair_on_hgx(libs.path(), &secs(deadline), &[]);
    for side in [connector, listener] {
        let (code, report, _) = finish(side);
        assert_eq!(code, Exit::COULD_NOT_RUN, "{report}");
        assert_eq!(results(&report, "pair.handshake")[0]["status"], "pass");
        let rdma = results(&report, "pair.rdma")[0]["summary"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            rdma.contains(&format!(
                "listing this node's RDMA ports and GPUs: timed out after {} s in ibv_get_device_list",
                deadline / 2
            )),
            "{rdma}"
        );
    }
    // Half the deadline, not all of it.
    assert!(
        t.elapsed() < Duration::from_secs(deadline),
        "{:?}",
        t.elapsed()
    );
}

/// A peer whose RDMA hardware is there but unusable (NICs bound to mlx5, libibverbs lists none: its own report
/// fails) leaves this node's links untested: an error here, not the skip that means "no fabric to test".
#[test]
fn a_peer_with_unusable_rdma_hardware_is_an_error_here_not_a_skip() {
    let healthy = verbs_opening("return 0;");
    let empty = shims(&[(
        "libibverbs.so.1",
        "#include <stdlib.h>\nvoid **ibv_get_device_list(int *n) { *n = 0; return calloc(1, sizeof(void *)); }\nvoid ibv_free_device_list(void **l) { free(l); }\n",
    )]);
    let port = free_port();
    let side = |libs: &Path, mode: &str| {
        preflight()
            .env("LD_LIBRARY_PATH", libs)
            .args(["pair", "--format", "json", "--token", "t", "--root"])
            .arg(host("hgx-healthy"))
            .args(["--timeout", "60", "--memory", "host", mode])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let listener = side(empty.path(), "--listen");
    let connector = side(healthy.path(), "--connect");
    let (code, report, _) = finish(connector);
    let rdma = &results(&report, "pair.rdma")[0];
    assert_eq!(rdma["status"], "error", "{report}");
    assert!(
        rdma["summary"]
            .as_str()
            .unwrap()
            .contains("cannot test its side (fail: libibverbs.so.1 lists no device"),
        "{rdma}"
    );
    assert_eq!(code, Exit::COULD_NOT_RUN);
    let (code, report, _) = finish(listener);
    assert_eq!(
        results(&report, "pair.rdma")[0]["status"],
        "fail",
        "{report}"
    );
    assert_eq!(code, Exit::CHECK_FAILED);
}

/// In a ring both links of a node measure in their own children at once: a hang is killed in each, and the
/// ring summary still comes.
#[test]
fn a_ring_node_kills_both_links_hung_children_and_still_summarizes() {
    let libs = verbs_opening("for (;;) pause(); return 0;");
    let t = Instant::now();
    let (_, nodes) = ring_on_hgx(libs.path(), &secs(RING_HUNG_S));
    for node in nodes {
        let (code, report, _) = finish(node);
        // The ring summary fails the links that errored.
        assert_eq!(code, Exit::CHECK_FAILED, "{report}");
        let hung: Vec<_> = results(&report, "pair.rdma")
            .into_iter()
            .filter(|r| {
                r["summary"]
                    .as_str()
                    .unwrap()
                    .contains("in ibv_open_device")
            })
            .collect();
        assert_eq!(hung.len(), 2, "one per link: {report}");
        assert_eq!(results(&report, "pair.ring").len(), 1, "{report}");
    }
    assert!(
        t.elapsed() < Duration::from_secs(2 * RING_HUNG_S),
        "{:?}",
        t.elapsed()
    );
}

/// SIGTERM (pod deletion, slurmd) stops the measuring children at once, and the report is still written.
#[test]
fn sigterm_kills_the_measuring_children_and_the_report_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let entered = dir.path().join("entered");
    // Each end notes that its measurement reached the hung call: the signal comes after both did.
    let libs = verbs_opening(&format!(
        r#"FILE *f = fopen("{}", "a"); fputs("in\n", f); fclose(f); for (;;) pause(); return 0;"#,
        entered.display()
    ));
    let (listener, connector) = pair_on_hgx(libs.path(), &secs(UNHURRIED_S), &[]);
    wait_until("both ends in ibv_open_device", || {
        std::fs::read_to_string(&entered).is_ok_and(|s| s.lines().count() == 2)
    });
    let t = Instant::now();
    for side in [&connector, &listener] {
        // SAFETY: kill(2) on a child process this test started and has not reaped.
        unsafe { libc::kill(side.id() as i32, libc::SIGTERM) };
    }
    let words = ["interrupted by SIGTERM in ibv_open_device"];
    for report in both_ends_stopped((listener, connector), &words) {
        assert_eq!(report["interrupted"], "SIGTERM", "{report}");
    }
    // At once, not at the deadline; room for a loaded machine.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// SIGTERM while a listener waits for its peer: it stops waiting, reports why, and nothing is left listening.
#[test]
fn sigterm_stops_a_listener_waiting_for_its_peer() {
    let port = free_port();
    let listener = pair(
        &["--listen", &format!("127.0.0.1:{port}"), "--timeout", "60"],
        Some("t"),
    );
    // Listening means started: its SIGTERM handler is in place.
    wait_until("the listener listens", || listening(port));
    let t = Instant::now();
    // SAFETY: kill(2) on a child process this test started and has not reaped.
    unsafe { libc::kill(listener.id() as i32, libc::SIGTERM) };
    let (code, report, _) = finish(listener);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(code, Exit::COULD_NOT_RUN, "{report}");
    let hs = results(&report, "pair.handshake")[0]["summary"].to_string();
    assert!(
        hs.contains("interrupted by SIGTERM while waiting for a peer"),
        "{hs}"
    );
    nothing_listens_on(port);
}

/// A helper process a hung library forked (libcuda starts some) stays in the measuring child's process group:
/// the kill at the deadline ends it too, so the parent does not wait on the output it holds, and nothing of
/// the run outlives it.
#[test]
fn the_deadline_kills_the_helper_a_hung_library_forked() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("helpers");
    let libs = verbs_opening(&format!(
        r#"if (fork() == 0) {{ FILE *f = fopen("{}", "a"); fprintf(f, "%d\n", getpid()); fclose(f); sleep(20); _exit(0); }} for (;;) pause(); return 0;"#,
        pids.display()
    ));
    killed_at_the_deadline_and_named(libs.path());
    let helpers = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(helpers.lines().count(), 2, "one per end: {helpers}");
    for pid in helpers.lines() {
        assert!(
            !alive(pid.parse().unwrap()),
            "helper {pid} outlived the run"
        );
    }
}

/// A call the parent itself waits on past the deadline and the grace (here: the killed child's output, held
/// open by a helper process the library started in a session of its own, out of reach of the kill of the
/// child's group) is the watchdog's: it writes the report with what finished and an error for what was in
/// flight, then ends the process.
#[test]
fn the_watchdog_writes_the_report_with_what_was_in_flight() {
    let libs = verbs_opening(ESCAPING_HELPER);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.json");
    let t = Instant::now();
    let output = format!("json={}", file.display());
    let (listener, connector) = pair_on_hgx(libs.path(), &secs(HUNG_S), &["--output", &output]);
    let (code, report, out) = finish(connector);
    assert_eq!(code, Exit::COULD_NOT_RUN, "{report}");
    // The deadline and the 5 s of grace, then at once: well before the helper's 20 s, which the parent would
    // wait out without the watchdog.
    assert!(
        t.elapsed() < Duration::from_secs(HUNG_S + 5 + 6),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        results(&report, "pair.handshake")[0]["status"],
        "pass",
        "{report}"
    );
    let stuck = results(&report, "pair.rdma")[0]["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        stuck.starts_with("measurement with hgx-healthy (127.0.0.1:")
            && stuck.contains("did not return within the deadline and 5 s of grace"),
        "{stuck}"
    );
    assert!(
        stderr(&out).contains("the deadline passed"),
        "{}",
        stderr(&out)
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["checks"], report["checks"]);
    let (code, _, _) = finish(listener);
    assert_eq!(code, Exit::COULD_NOT_RUN);
}

/// An --output that cannot be written is refused before the pair starts: exit 2 at once, nothing listening.
#[test]
fn unwritable_output_is_refused_before_the_handshake() {
    let port = free_port();
    for flag in ["--output", "--termination-log"] {
        let mut listener = preflight()
            .args(["pair", "--token", "t", "--timeout", "60", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args([flag, "/nonexistent/dir/report.json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It ends by itself, without ever listening (a listener would wait out its 60 s).
        wait_until("the refusal", || {
            assert!(!listening(port), "{flag}: it listens");
            listener.try_wait().unwrap().is_some()
        });
        nothing_listens_on(port);
        let out = listener.wait_with_output().unwrap();
        assert_eq!(code(&out), Exit::USAGE, "{flag}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("/nonexistent/dir/report.json"),
            "{}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty());
    }
}

/// A usage error of `pair`, whether clap's or its own, goes to the termination log like `run`'s.
#[test]
fn usage_errors_are_written_to_the_termination_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("termination-log");
    for (args, words) in [
        (
            &["--listen", "1", "--token", "t", "--message-size", "0"][..],
            "--message-size",
        ),
        (
            &["--listen", "1", "--token", "t", "--timeout", "0"][..],
            "--timeout must be more than 0",
        ),
        (&["--listen", "1", "--format", "yaml"][..], "'yaml'"),
    ] {
        let out = preflight()
            .arg("pair")
            .args(args)
            .arg("--termination-log")
            .arg(&log)
            .output()
            .unwrap();
        assert_eq!(code(&out), Exit::USAGE, "{args:?}");
        let text = std::fs::read_to_string(&log).expect("termination log written");
        assert!(
            text.starts_with("fabric-preflight usage error (exit 2)") && text.contains(words),
            "{args:?}: {text}"
        );
        std::fs::remove_file(&log).unwrap();
    }
}

/// `--memory gpu` through the CUDA stand-in: the end announces the stand-in's GPU, and says which GPU its port
/// pairs use. Without an RDMA device (this machine, CI) the port pairs skip for that reason; with one, the GPU
/// leg runs beside the host leg.
#[test]
fn memory_gpu_through_the_cuda_standin_names_the_gpu() {
    let standin = cuda_standin();
    let lib = standin.path().to_str().unwrap();
    let [(l_code, listener), (c_code, connector)] = memory_pair("gpu", &[("LD_LIBRARY_PATH", lib)]);
    assert_eq!(
        (l_code, c_code),
        (Exit::OK, Exit::OK),
        "{listener}\n{connector}"
    );
    let hs = results(&listener, "pair.handshake");
    assert!(
        evidence_has(hs[0], "GPU memory here = 0000:5e:00.0 (CUDA order)"),
        "{listener}"
    );
    let hs = results(&connector, "pair.handshake");
    assert!(
        evidence_has(
            hs[0],
            "GPU memory here = none: host memory only (--memory host)"
        ),
        "{connector}"
    );
    for p in results(&listener, "pair.rdma") {
        if p["status"] == "skip" {
            assert!(evidence_has(p, "GPU memory here = 0000:5e:00.0"), "{p}");
        } else {
            assert!(
                p["summary"]
                    .as_str()
                    .unwrap()
                    .contains("GPU leg (GPU memory (0000:5e:00.0) here"),
                "{p}"
            );
        }
    }
    rdma_ran_or_was_skipped_with_reason(&connector);
}

/// `--memory gpu` where CUDA lists no device fails that end, whatever the RDMA side; the peer is unaffected.
#[test]
fn memory_gpu_without_a_cuda_device_fails() {
    let standin = cuda_standin();
    let lib = standin.path().to_str().unwrap();
    let [(l_code, listener), (c_code, connector)] = memory_pair(
        "gpu",
        &[("LD_LIBRARY_PATH", lib), ("CUDA_STANDIN_DEVICES", "0")],
    );
    assert_eq!(l_code, Exit::CHECK_FAILED, "{listener}");
    let p = results(&listener, "pair.rdma");
    assert_eq!(p[0]["status"], "fail", "{listener}");
    assert!(
        p[0]["summary"]
            .as_str()
            .unwrap()
            .contains("--memory gpu: CUDA lists no device"),
        "{listener}"
    );
    assert_eq!(c_code, Exit::OK, "{connector}");
}

/// `--memory auto` (the default) on a node without NVIDIA GPUs moves host memory and says why; on a GPU node
/// (the H200) it names the GPU instead.
#[test]
fn memory_auto_says_what_it_chose() {
    let [(l_code, listener), _] = memory_pair("auto", &[]);
    let hs = results(&listener, "pair.handshake");
    if std::path::Path::new("/proc/driver/nvidia/gpus").exists() {
        assert!(evidence_has(hs[0], "GPU memory here = "), "{listener}");
    } else {
        assert_eq!(l_code, Exit::OK, "{listener}");
        assert!(
            evidence_has(hs[0], "GPU memory here = none: no NVIDIA GPU"),
            "{listener}"
        );
    }
}

/// A child whose start is slow (the loader, a library's constructor) already dies with its parent: the parent
/// death signal is set before exec, not once the child reaches its own code.
#[test]
fn a_child_dies_with_its_parent_killed_before_the_child_started() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("children");
    // Preloaded into every process of the run; only the `__pair` children note their pid and start slowly.
    let source = format!(
        r#"#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void slow_start(void) {{
    char cmd[4096] = {{0}};
    int fd = open("/proc/self/cmdline", O_RDONLY);
    read(fd, cmd, sizeof cmd - 1);
    close(fd);
    if (strcmp(cmd + strlen(cmd) + 1, "__pair") != 0) return;
    FILE *f = fopen("{}", "a"); fprintf(f, "%d\n", getpid()); fclose(f);
    sleep(20);
}}
"#,
        pids.display()
    );
    let libs = shims(&[("slowstart.so", &source)]);
    let mut run = preflight()
        .env("LD_PRELOAD", libs.path().join("slowstart.so"))
        .args(["pair", "--format", "json", "--token", "t", "--root"])
        .arg(host("hgx-healthy"))
        .args(["--timeout", "60", "--listen"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let child: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pids)
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.parse().ok()))
        {
            break pid;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no child started");
        std::thread::sleep(Duration::from_millis(10));
    };
    run.kill().unwrap();
    run.wait().unwrap();
    let killed = Instant::now();
    // Well before its 20 s constructor would end: the parent death signal, not its own exit.
    while alive(child) {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the child outlived its killed parent"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The watchdog's report on a ring node still ends with the node's `pair.ring` result: the links not finished
/// are errors there, so `--summarize` learns from this node too.
#[test]
fn the_watchdogs_ring_report_carries_the_ring_summary() {
    let libs = verbs_opening(ESCAPING_HELPER);
    let (ports, nodes) = ring_on_hgx(libs.path(), &secs(RING_HUNG_S));
    for (rank, node) in nodes.into_iter().enumerate() {
        let (code, report, out) = finish(node);
        assert!(
            stderr(&out).contains("the deadline passed"),
            "{}",
            stderr(&out)
        );
        assert_eq!(code, Exit::CHECK_FAILED, "{report}");
        let ring = results(&report, "pair.ring");
        assert_eq!(ring.len(), 1, "{report}");
        let me = &ports[rank];
        for link in [
            format!(
                "127.0.0.1:{} <-> 127.0.0.1:{me} = error",
                ports[(rank + 2) % 3]
            ),
            format!(
                "127.0.0.1:{me} <-> 127.0.0.1:{} = error",
                ports[(rank + 1) % 3]
            ),
        ] {
            assert!(evidence_has(ring[0], &link), "{link}: {}", ring[0]);
        }
    }
}
