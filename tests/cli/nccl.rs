//! `fabric-preflight nccl` on every log in testdata/nccl (verdict and exit code from expected.tsv), the JSON
//! details that name the culprits, stdin, usage errors; `run --nccl-log` (nccl.transport) and nccl.env.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;

use serde_json::Value;

use super::util::*;

fn nccl_json(file: &str, expect: &str) -> (u8, Value) {
    let out = preflight()
        .args(["nccl", "--format", "json", "--expect", expect])
        .arg(testdata(&format!("nccl/{file}")))
        .output()
        .expect("binary runs");
    let json = json_out(Schema::Nccl, &out);
    (code(&out), json)
}

struct Row {
    file: String,
    expect: String,
    verdict: String,
    exit: u8,
}

fn expected_rows() -> Vec<Row> {
    let text = std::fs::read_to_string(testdata("nccl/expected.tsv")).expect("expected.tsv");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 4, "expected.tsv row: {l:?}");
            Row {
                file: cols[0].into(),
                expect: cols[1].into(),
                verdict: cols[2].into(),
                exit: cols[3].parse().expect("exit code"),
            }
        })
        .collect()
}

#[test]
fn nccl_every_test_log_gives_its_expected_verdict_and_exit_code() {
    let rows = expected_rows();
    let mut wrong = Vec::new();
    for row in &rows {
        let (code, json) = nccl_json(&row.file, &row.expect);
        let verdict = json["verdict"].as_str().unwrap_or("<none>");
        if verdict != row.verdict || code != row.exit {
            wrong.push(format!(
                "{} --expect {}: got {verdict} exit {code}, want {} exit {}",
                row.file, row.expect, row.verdict, row.exit
            ));
        }
        assert_eq!(json["exit_code"], u64::from(code), "{}", row.file);
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn nccl_every_log_in_testdata_has_an_expected_row() {
    let rows = expected_rows();
    let dir = testdata("nccl");
    for entry in std::fs::read_dir(&dir).expect("testdata/nccl") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".log") {
            assert!(
                rows.iter().any(|r| r.file == name),
                "{name} has no row in testdata/nccl/expected.tsv"
            );
        }
    }
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

#[test]
fn nccl_mixed_socket_names_the_bad_node_and_its_ranks() {
    let (_, json) = nccl_json("mixed-socket-one-bad-node.log", "gdrdma");
    assert_eq!(
        numbers(&json["ranks_on_socket"]),
        (8..16).collect::<Vec<_>>()
    );
    assert_eq!(json["hosts_on_socket"], serde_json::json!(["gpu-a02"]));
    let out = preflight()
        .args(["nccl"])
        .arg(testdata("nccl/mixed-socket-one-bad-node.log"))
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("on Socket: ranks 8-15 on gpu-a02"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn nccl_partial_gdrdma_names_ranks_hosts_and_devices_without_gdr() {
    let (_, json) = nccl_json("partial-gdrdma-one-node-no-peermem.log", "gdrdma");
    assert_eq!(
        numbers(&json["ranks_without_gdrdma"]),
        (8..16).collect::<Vec<_>>()
    );
    assert_eq!(json["hosts_without_gdrdma"], serde_json::json!(["gpu-a02"]));
    assert_eq!(
        numbers(&json["devices_without_gdrdma"]),
        (0..8).collect::<Vec<_>>()
    );
    assert_eq!(json["rings_without_gdr"], 1);
    assert_eq!(json["gdr_disabled"][0]["count"], 1);
}

#[test]
fn nccl_pxn_proxy_rank_is_not_taken_as_a_device() {
    let (_, json) = nccl_json("trap-pxn-proxy-rank-is-not-device.log", "gdrdma");
    assert_eq!(numbers(&json["transports"][0]["devices"]), vec![1, 2]);
}

#[test]
fn nccl_warnings_keep_line_numbers_and_locations() {
    let (_, json) = nccl_json("v2.26-gdrdma-pci-timestamped-warn.log", "gdrdma");
    let w = &json["warnings"][0];
    assert_eq!(w["line"], 10);
    assert_eq!(w["host"], "gpu-a02");
    assert_eq!(w["location"], "transport/net_ib/connect.cc:1021");
    let (_, json) = nccl_json("ofi-provider-refused-fallback-socket.log", "gdrdma");
    assert_eq!(
        json["warnings"][0]["location"],
        "int ofi_init(ncclDebugLogger_t):1324"
    );
    assert!(!json["ofi_refused"].as_array().unwrap().is_empty());
}

#[test]
fn nccl_errors_are_listed_and_make_the_expectation_not_met() {
    let (exit, json) = nccl_json("errors-return-code-chain-ib-gdrdma.log", "gdrdma");
    assert_eq!(exit, Exit::CHECK_FAILED);
    assert_eq!(json["verdict"], "ib-gdrdma");
    assert_eq!(json["errors_total"], 1, "one chain, one error");
    let e = &json["errors"][0];
    assert_eq!(e["kind"], "return-code");
    assert_eq!(e["line"], 6);
    assert_eq!(e["location"], "transport/net_ib.cc:911");
    assert!(e["message"].as_str().unwrap().contains("ncclSystemError"));
    let reason = json["judgement"]["reason"].as_str().unwrap();
    assert!(reason.contains("NCCL used ib-gdrdma"), "{reason}");

    let (_, json) = nccl_json("errors-completion-status-v2.28-ib-gdrdma.log", "gdrdma");
    assert_eq!(json["errors"][0]["kind"], "completion-error");
    assert_eq!(json["errors"][1]["kind"], "return-code");
    let (_, json) = nccl_json("errors-remote-error-after-ib-gdrdma.log", "gdrdma");
    assert_eq!(json["errors"][0]["kind"], "nccl-error");
    assert_eq!(json["errors"][0]["line"], 8);

    let out = preflight()
        .args(["nccl"])
        .arg(testdata(
            "nccl/errors-completion-status-v2.28-ib-gdrdma.log",
        ))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED);
    let text = stdout(&out);
    assert!(text.contains("errors, fatal (2):"), "{text}");
    assert!(text.contains("completion-error gpu-a03"), "{text}");
}

/// The recovered-vs-fatal rule: a chain the same rank's Init COMPLETE followed is listed as recovered (its
/// line and why) and does not fail; the other rank's chain that ended its init is fatal. Both lists and the
/// per-rank outcome are in the JSON and the table.
#[test]
fn nccl_recovered_errors_are_listed_apart_from_fatal_ones() {
    let (exit, json) = nccl_json(
        "recovered-ibext-disabled-plugin-probe-ib-gdrdma.log",
        "gdrdma",
    );
    assert_eq!(exit, Exit::OK);
    assert_eq!(json["errors_total"], 0);
    assert_eq!(json["recovered_errors_total"], 2);
    let r = &json["recovered_errors"][0];
    assert_eq!((r["line"].as_u64(), r["rank"].as_u64()), (Some(4), Some(0)));
    assert_eq!(r["location"], "net.cc:79");
    assert_eq!(r["outcome"], "recovered");
    assert!(r["why"].as_str().unwrap().contains(":12"), "{r}");
    let states: Vec<&str> = json["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["recovered", "recovered"]);

    let (exit, json) = nccl_json("recovered-one-rank-fatal-other-srun-label.log", "gdrdma");
    assert_eq!(exit, Exit::CHECK_FAILED);
    assert_eq!(json["recovered_errors"][0]["host"], "gpu-k01");
    assert_eq!(json["errors"][0]["host"], "gpu-k02");
    assert_eq!(json["errors"][0]["outcome"], "fatal");
    let ranks = json["ranks"].as_array().unwrap();
    assert_eq!(ranks[0]["outcome"], "recovered");
    assert_eq!(ranks[1]["outcome"], "fatal");
    assert_eq!(ranks[1]["ranks"], serde_json::json!([1]));
    let reason = json["judgement"]["reason"].as_str().unwrap();
    assert!(reason.contains("no Init COMPLETE"), "{reason}");

    let out = preflight()
        .args(["nccl", "--expect", "gdrdma"])
        .arg(testdata(
            "nccl/recovered-one-rank-fatal-other-srun-label.log",
        ))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("errors, fatal (3):"), "{text}");
    assert!(text.contains("errors NCCL recovered from (1):"), "{text}");
    assert!(text.contains("1 recovered, 1 fatal"), "{text}");

    // NCCL 2.3 prints no Init COMPLETE: the outcome is unknown, never a pass and never a fail.
    let (exit, json) = nccl_json("unknown-v2.3-no-init-complete-lines.log", "gdrdma");
    assert_eq!(exit, Exit::COULD_NOT_RUN);
    assert_eq!(json["unknown_errors_total"], 1);
    assert_eq!(json["judgement"]["outcome"], "undetermined");
}

#[test]
fn run_nccl_log_with_errors_fails_nccl_transport_with_or_without_expectation() {
    let log = "nccl/errors-completion-status-v2.28-ib-gdrdma.log";
    for profile in ["hgx-h200-ib", "generic"] {
        let (code, report) = run_transport(profile, log);
        assert_eq!(status_of(&report, "nccl.transport"), "fail", "{profile}");
        assert_eq!(code, Exit::CHECK_FAILED, "{profile}");
        let summary = result_of(&report, "nccl.transport")["summary"].to_string();
        assert!(summary.contains("ib-gdrdma"), "{summary}");
    }
}

#[test]
fn nccl_two_builds_and_selection_details_are_reported() {
    let (_, json) = nccl_json("trap-two-nccl-builds-one-job.log", "gdrdma");
    assert_eq!(json["nccl_versions"].as_array().unwrap().len(), 2);
    let (_, json) = nccl_json("nccl-h200-single-gpu-socket.log", "gdrdma");
    assert_eq!(json["nccl_version"], "2.28.9+cuda13.0");
    assert_eq!(json["network_selected"], serde_json::json!(["Socket"]));
    assert_eq!(json["no_device"], serde_json::json!(["IB"]));
    assert_eq!(json["net_plugins_failed"], serde_json::json!(["IB"]));
    assert_eq!(json["judgement"]["outcome"], "not-met");
}

#[test]
fn nccl_ray_repeats_count_and_are_flagged() {
    let (_, json) = nccl_json("wrap-ray-worker-repeated-ansi.log", "gdrdma");
    let net = json["transports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["transport"] == "NET/IB/GDRDMA")
        .unwrap();
    assert_eq!(net["channels"], 8);
    assert!(json["notes"].to_string().contains("Ray folded"));
}

#[test]
fn nccl_reads_stdin_and_several_files_as_one_job() {
    let mut child = preflight()
        .args(["nccl", "--format", "json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let log = std::fs::read(testdata("nccl/trap-socket-over-ib0-is-still-socket.log")).unwrap();
    child.stdin.take().unwrap().write_all(&log).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED);
    let json: Value = json_out(Schema::Nccl, &out);
    assert_eq!(json["verdict"], "socket");
    assert_eq!(json["input"]["files"], serde_json::json!(["<stdin>"]));

    // One node's log healthy, the other's on sockets: together a mixed job.
    let out = preflight()
        .args(["nccl", "--format", "json"])
        .arg(testdata("nccl/trap-gdr-lines-absent-default-mask.log"))
        .arg(testdata("nccl/trap-socket-over-ib0-is-still-socket.log"))
        .output()
        .unwrap();
    let json: Value = json_out(Schema::Nccl, &out);
    assert_eq!(json["verdict"], "mixed-socket");
}

#[test]
fn nccl_reads_fifos_and_process_substitution() {
    let log = testdata("nccl/trap-socket-over-ib0-is-still-socket.log");
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("nccl.fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let writer = {
        let (fifo, log) = (fifo.clone(), log.clone());
        std::thread::spawn(move || {
            let bytes = std::fs::read(log).unwrap();
            let mut w = std::fs::OpenOptions::new().write(true).open(fifo)?;
            w.write_all(&bytes)
        })
    };
    let out = preflight()
        .args(["nccl", "--format", "json"])
        .arg(&fifo)
        .output()
        .unwrap();
    // A tool that never opened the FIFO leaves the writer blocked in open(): a reader releases it.
    let _release = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo);
    let _ = writer.join();
    assert_eq!(code(&out), Exit::CHECK_FAILED, "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verdict"], "socket");

    // `<(cat log)` hands the tool /dev/fd/63, a pipe.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{}' nccl --format json <(cat '{}')",
            bin(),
            log.display()
        ))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED, "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verdict"], "socket");
}

#[test]
fn nccl_directory_is_refused_as_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["nccl"],
        vec!["run", "--only", "nccl.transport", "--nccl-log"],
    ] {
        let out = preflight().args(&args).arg(dir.path()).output().unwrap();
        assert_eq!(code(&out), Exit::USAGE, "{args:?}");
        assert!(stderr(&out).contains("is a directory"), "{}", stderr(&out));
    }
}

/// A pseudo-terminal whose other side wrote a log and closed gives the bytes, then EIO: a real read error
/// midway, which is "could not run" (3), not a usage error (2).
#[test]
fn nccl_read_error_midway_is_exit_3() {
    use std::os::fd::FromRawFd;
    let log = std::fs::read(testdata("nccl/trap-socket-over-ib0-is-still-socket.log")).unwrap();
    let master = unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0);
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(slave >= 0);
        let mut slave = std::fs::File::from_raw_fd(slave);
        slave.write_all(&log).unwrap();
        drop(slave);
        std::os::fd::OwnedFd::from_raw_fd(master)
    };
    let out = preflight()
        .args(["nccl", "-"])
        .stdin(Stdio::from(master))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::COULD_NOT_RUN, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("read failed after line"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn nccl_missing_file_or_bad_expect_is_a_usage_error() {
    let out = preflight()
        .args(["nccl", "/nonexistent/nccl.log"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(
        stderr(&out).contains("/nonexistent/nccl.log"),
        "{}",
        stderr(&out)
    );
    let out = preflight()
        .args(["nccl", "--expect", "rdma"])
        .arg(testdata("nccl/empty.log"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
}

fn empty_root() -> tempfile::TempDir {
    tree(&[("proc/sys/kernel/hostname", "node1\n")])
}

/// `run --only nccl.transport --nccl-log testdata/<log>` on a tree with nothing else: the exit code and report.
fn run_transport(profile: &str, log: &str) -> (u8, Value) {
    let root = empty_root();
    let log = testdata(log);
    let args = [
        "--only",
        "nccl.transport",
        "--nccl-log",
        log.to_str().unwrap(),
    ];
    run_json(root.path(), profile, &args)
}

#[test]
fn run_nccl_log_fails_socket_against_gdr_profile_and_passes_gdr() {
    let (code, report) = run_transport("hgx-h200-ib", "nccl/mixed-socket-one-bad-node.log");
    assert_eq!(status_of(&report, "nccl.transport"), "fail");
    assert_eq!(code, Exit::CHECK_FAILED);
    assert!(result_of(&report, "nccl.transport")["remediation"].is_string());

    let good = "nccl/v2.18-nvml-index-cumem-ib-gdrdma.log";
    let (code, report) = run_transport("hgx-h200-ib", good);
    assert_eq!(status_of(&report, "nccl.transport"), "pass");
    assert_eq!(code, Exit::OK);
}

#[test]
fn run_nccl_log_without_expectation_warns_on_socket() {
    let log = "nccl/trap-socket-over-ib0-is-still-socket.log";
    let (code, report) = run_transport("generic", log);
    assert_eq!(status_of(&report, "nccl.transport"), "warn");
    assert_eq!(code, Exit::OK);
}

#[test]
fn run_without_nccl_log_skips_nccl_transport() {
    let root = empty_root();
    let (_, report) = run_json(root.path(), "generic", &["--only", "nccl.transport"]);
    assert_eq!(status_of(&report, "nccl.transport"), "skip");
    assert!(result_of(&report, "nccl.transport")["summary"]
        .as_str()
        .unwrap()
        .contains("no --nccl-log given"));
}

#[test]
fn run_nccl_env_reports_ib_disable_and_missing_hca() {
    let root = tree(&[
        (
            "sys/class/infiniband/mlx5_0/ports/1/link_layer",
            "InfiniBand\n",
        ),
        ("sys/class/net/eth0/mtu", "1500\n"),
    ]);
    let out = preflight()
        .env("NCCL_IB_DISABLE", "1")
        .env("NCCL_IB_HCA", "=mlx5_4")
        .args([
            "run",
            "--format",
            "json",
            "--profile",
            "hgx-h200-ib",
            "--only",
            "nccl.env",
            "--root",
        ])
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::CHECK_FAILED);
    let report: Value = json_out(Schema::Run, &out);
    let got = verdicts(&report);
    assert!(
        got.contains(&("nccl.env".into(), "NCCL_IB_DISABLE".into(), "fail".into())),
        "{got:?}"
    );
    assert!(
        got.contains(&("nccl.env".into(), "NCCL_IB_HCA".into(), "fail".into())),
        "{got:?}"
    );

    let (code, report) = run_json(root.path(), "hgx-h200-ib", &["--only", "nccl.env"]);
    assert_eq!(status_of(&report, "nccl.env"), "pass");
    assert_eq!(code, Exit::OK);
}

/// NCCL applies /etc/nccl.conf (under the root) like the environment, which wins over it (issue 19 §2: the
/// file's NCCL_IB_DISABLE=1 passed with exit 0 before).
#[test]
fn run_nccl_env_judges_etc_nccl_conf_and_lets_the_environment_win() {
    let root = tree(&[
        (
            "sys/class/infiniband/mlx5_0/ports/1/link_layer",
            "InfiniBand\n",
        ),
        ("etc/nccl.conf", "# fleet image\nNCCL_IB_DISABLE=1\n"),
    ]);
    let run = |env: Option<&str>| {
        let mut cmd = preflight();
        cmd.env_remove("NCCL_IB_DISABLE")
            .env_remove("NCCL_CONF_FILE");
        if let Some(v) = env {
            cmd.env("NCCL_IB_DISABLE", v);
        }
        let out = cmd
            .args([
                "run",
                "--format",
                "json",
                "--profile",
                "hgx-h200-ib",
                "--only",
                "nccl.env",
                "--root",
            ])
            .arg(root.path())
            .output()
            .unwrap();
        (code(&out), json_out(Schema::Run, &out))
    };
    let (exit, report) = run(None);
    assert_eq!(exit, Exit::CHECK_FAILED);
    let r = result_of(&report, "nccl.env");
    assert!(
        r["summary"].as_str().unwrap().contains("/etc/nccl.conf:2"),
        "{r}"
    );
    let (exit, report) = run(Some("0"));
    assert_eq!(exit, Exit::OK);
    assert!(
        result_of(&report, "nccl.env")["evidence"]
            .to_string()
            .contains("overridden by env"),
        "{report}"
    );
}

/// The NET path ends at the first space (RCCL's ` comm 0x… nRanks 02`, a terminal's padding between glued
/// records); lines whose transport was rejected never make a verdict (they made intra-node-only before).
#[test]
fn nccl_net_path_cut_at_the_first_space_and_rejected_lines_prove_nothing() {
    let channels = |json: &Value| {
        json["transports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["transport"].as_str().unwrap().to_string(),
                    t["channels"].as_u64().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    let (_, json) = nccl_json("rccl-net-path-then-comm-nranks-ib-gdrdma.log", "gdrdma");
    assert_eq!(channels(&json), [("NET/IB/GDRDMA".to_string(), 6)]);
    assert_eq!(json["ranks_without_gdrdma"], serde_json::json!([]));
    let (_, json) = nccl_json("wrap-terminal-padded-glued-records-ib-gdrdma.log", "gdrdma");
    assert_eq!(channels(&json), [("NET/IB/GDRDMA".to_string(), 7)]);
    let (exit, json) = nccl_json(
        "torn-every-channel-line-rejected-undetermined.log",
        "gdrdma",
    );
    assert_eq!(
        (exit, json["verdict"].as_str()),
        (Exit::COULD_NOT_RUN, Some("undetermined"))
    );
    assert_eq!(channels(&json), [("other".to_string(), 3)]);
}

/// aws-ofi-nccl's own lines (issue 21): the instance type it names, DMA-BUF support, and GDR turned off,
/// which disproves GDR even with no channel line (undetermined, exit 3, before).
#[test]
fn nccl_ofi_platform_dmabuf_and_gdr_off_are_read() {
    let (exit, json) = nccl_json("ofi-p5-platform-dmabuf-true-ofi-gdrdma.log", "ofi-gdrdma");
    assert_eq!(exit, Exit::OK);
    assert_eq!(json["ofi_platforms"], serde_json::json!(["p5.48xlarge"]));
    assert_eq!(json["ofi_dmabuf"], serde_json::json!([true]));
    let (exit, json) = nccl_json("ofi-hmem-cuda-api-gdr-off-no-channels.log", "ofi-gdrdma");
    assert_eq!(exit, Exit::CHECK_FAILED);
    assert_eq!(json["ofi_platforms"], serde_json::json!(["p4d.24xlarge"]));
    assert_eq!(json["ofi_dmabuf"], serde_json::json!([false]));
    let reason = json["judgement"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("Could not disable CUDA API usage for HMEM"),
        "{reason}"
    );
    let (_, json) = nccl_json("ofi-gdr-disabled-on-gdr-instance-fatal.log", "ofi-gdrdma");
    assert_eq!(json["ofi_platforms"], serde_json::json!(["p5en.48xlarge"]));
    assert_eq!(
        json["ofi_gdr_disabled"][0]["first_seen"]
            .as_str()
            .map(|s| s.ends_with(":8")),
        Some(true)
    );
    let (_, json) = nccl_json("ofi-getinfo-failed-fallback-socket.log", "ofi");
    assert!(json["ofi_getinfo_failed"][0]["text"]
        .as_str()
        .unwrap()
        .contains("No data available"));
    // NCCL fell back to Socket and completed its init: the WARN was recovered from; the transport fails.
    assert_eq!(json["recovered_errors_total"], 2);
    assert_eq!(json["verdict"], "socket");

    let out = preflight()
        .args(["nccl", "--expect", "ofi-gdrdma"])
        .arg(testdata("nccl/ofi-gdr-disabled-on-gdr-instance-fatal.log"))
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("instance type  p5en.48xlarge"),
        "{}",
        stdout(&out)
    );
}
