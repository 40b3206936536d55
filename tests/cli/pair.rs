//! `pair` for real on loopback: two (or three) processes of the built binary on 127.0.0.1, the handshake and its
//! faults over real sockets. The verbs transfers need an RDMA device; where there is none (this machine, CI) the
//! port pairs are skipped with the reason, which these tests accept and check is said.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;
use fabric_preflight::pair::wire::{self, Message, MAGIC, VERSION};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn pair(args: &[&str], token: Option<&str>) -> Child {
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

/// tests/vm/cuda-standin.c built as the VM stage builds it, in a directory of its own for LD_LIBRARY_PATH.
fn cuda_standin() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/cuda-standin.c");
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(dir.path().join("libcuda.so.1"))
        .arg(&source)
        .output()
        .unwrap_or_else(|e| {
            panic!("the CUDA stand-in needs a C compiler: `cc` could not run ({e})")
        });
    assert!(out.status.success(), "cc: {}", stderr(&out));
    dir
}

/// A listener with `listener_env` and a connector with `--memory host`, both on loopback.
fn memory_pair(memory: &str, listener_env: &[(&str, &str)]) -> [(u8, Value); 2] {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let listener = pair_env(
        &["--listen", &listen, "--memory", memory, "--timeout", "20"],
        Some("m"),
        listener_env,
    );
    std::thread::sleep(Duration::from_millis(300));
    let connector = pair(
        &["--connect", &listen, "--memory", "host", "--timeout", "20"],
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

fn finish(child: Child) -> (u8, Value, Output) {
    let out = child.wait_with_output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            stdout(&out),
            stderr(&out)
        )
    });
    (code(&out), report, out)
}

fn results<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id)
        .collect()
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

#[test]
fn two_processes_handshake_and_report() {
    let port = free_port();
    let listener = pair(
        &["--listen", &format!("127.0.0.1:{port}"), "--timeout", "20"],
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
            "20",
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

#[test]
fn connector_retries_until_the_listener_is_up() {
    let port = free_port();
    let connector = pair(
        &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "20"],
        Some("t"),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", "20"],
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
        &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "2"],
        Some("t"),
    ));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
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

#[test]
fn wrong_token_is_refused_on_both_sides() {
    let port = free_port();
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", "3"],
        Some("right"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let (c_code, c_report, _) = finish(pair(
        &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "3"],
        Some("wrong"),
    ));
    let (l_code, l_report, l_out) = finish(listener);
    assert!(t.elapsed() < Duration::from_secs(6));
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
        &["--listen", &port.to_string(), "--timeout", "15"],
        Some("t"),
    );
    let (reply, took) = raw_client(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(refusal(&reply).contains("not a fabric-preflight pair handshake"));
    // The listener still waits for the one real peer.
    let (c_code, _, _) = finish(pair(
        &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "15"],
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
        &["--listen", &port.to_string(), "--timeout", "4"],
        Some("t"),
    );
    let mut big = MAGIC.to_vec();
    big.push(VERSION);
    big.extend_from_slice(&(1u32 << 30).to_be_bytes());
    let (reply, took) = raw_client(port, &big, false);
    assert!(took < Duration::from_secs(2));
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
        &["--listen", &port.to_string(), "--timeout", "3"],
        Some("t"),
    );
    // Half a header, then silence: the listener must not wait past its deadline.
    let (_, took) = raw_client(port, &MAGIC[..3], true);
    let (code, report, _) = finish(listener);
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
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
    let nodes: Vec<Child> = (0..3).map(|r| ring(r, "20")).collect();
    for node in nodes {
        let (code, report, _) = finish(node);
        assert_eq!(code, Exit::OK, "{report}");
        assert_eq!(results(&report, "pair.handshake").len(), 2);
        assert_eq!(
            results(&report, "pair.ring")[0]["status"],
            "pass",
            "{report}"
        );
        rdma_ran_or_was_skipped_with_reason(&report);
    }

    // Rank 1 never starts: its neighbours each see one failing link, and together they name it.
    let dir = std::env::temp_dir().join(format!("fp-ring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (r0, r2) = (ring(0, "3"), ring(2, "3"));
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
    let out = preflight()
        .args(["pair", "--format", "json", "--summarize"])
        .args(&files)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED, "{report}");
    let summary = report["checks"][0]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("127.0.0.1:{} is common", ports[1])),
        "{summary}"
    );
    std::fs::remove_dir_all(&dir).ok();
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
        &["--ring", "--peers", &peers, "--rank", "1", "--timeout", "3"],
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
        no_ports: Some("none".into()),
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
