//! `fabric-preflight collective -- COMMAND`: the stand-in launcher and all_reduce_perf under tests/collective
//! (written from nccl-tests' and NCCL's output formats) drive every case a real job gives: a healthy 2x8
//! GDRDMA run, a Socket fallback whose bandwidth alone looks plausible, #wrong > 0, a hang after channel
//! setup, a crash mid-run, a rank that never prints, per-rank NCCL_DEBUG_FILEs, a rank off its rail, SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::util::*;

fn standins() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/collective")
}

/// `collective --format json --color never ARGS -- launch LAUNCH… all_reduce_perf` with the stand-ins on PATH.
fn collective(
    scenario: &str,
    args: &[&str],
    launch: &[&str],
    extra_env: &[(&str, &str)],
) -> Command {
    let mut cmd = preflight();
    let path = format!(
        "{}:{}",
        standins().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("PATH", path)
        .env("STANDIN_SCENARIO", scenario)
        .args(["collective", "--format", "json", "--color", "never"])
        .args(args)
        .arg("--")
        .arg("launch")
        .args(launch)
        .args([
            "all_reduce_perf",
            "-b",
            "8M",
            "-e",
            "4G",
            "-f",
            "2",
            "-g",
            "1",
        ]);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd
}

/// `--timeout` for the scenarios that end at it (a hang, a silent rank): the sixteen stand-in ranks print
/// their lines first, which took up to 3.8 s with both cores busy; ending at the timeout is the subject.
const HANG_TIMEOUT: &str = "15";

fn run(
    scenario: &str,
    args: &[&str],
    launch: &[&str],
    extra_env: &[(&str, &str)],
) -> (u8, Value, Output) {
    let out = collective(scenario, args, launch, extra_env)
        .output()
        .expect("binary runs");
    let report = json_out(Schema::Run, &out);
    assert_eq!(report["exit_code"], u64::from(code(&out)), "{report:#}");
    (code(&out), report, out)
}

fn summary<'a>(report: &'a Value, id: &str) -> &'a str {
    result_of(report, id)["summary"]
        .as_str()
        .unwrap_or_default()
}

fn evidence(report: &Value, id: &str) -> String {
    result_of(report, id)["evidence"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn judged_busbw(report: &Value) -> &Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["id"] == "collective.busbw"
                && c["subject"]
                    .as_str()
                    .is_some_and(|s| s.ends_with(">= 128 MiB"))
        })
        .expect("a judged busbw result")
}

#[test]
fn collective_healthy_two_by_eight_gdrdma_run_passes_with_per_rank_logs_attributed() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let (code, report, _) = run(
        "healthy",
        &[
            "--profile",
            "hgx-h100-ib",
            "--log-dir",
            logs.to_str().unwrap(),
        ],
        &["--label"],
        &[],
    );
    assert_eq!(code, Exit::OK, "{report:#}");
    for (id, subject, status) in verdicts(&report) {
        // Rails are for multi-rail hosts; busbw below the plateau is shown, not judged.
        let below_plateau = id == "collective.busbw" && !subject.ends_with(">= 128 MiB");
        let want = if id == "collective.rails" || below_plateau {
            "skip"
        } else {
            "pass"
        };
        assert_eq!(status, want, "{id}: {report:#}");
    }
    let busbw = judged_busbw(&report);
    assert_eq!(busbw["measurements"][0]["value"], 385.2);
    assert_eq!(busbw["measurements"][0]["fail"], 331.0);
    assert!(summary(&report, "collective.transport").contains("ib-gdrdma"));
    assert!(summary(&report, "collective.ranks").contains("16 rank(s) on 2 host(s)"));
    // Node 0's ranks wrote their own files; node 1's lines came through the launcher's output.
    let files: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nccl."))
        .collect();
    assert_eq!(files.len(), 8, "{files:?}");
    let ranks = evidence(&report, "collective.ranks");
    assert!(
        ranks.contains(
            "rank 7 on gpu-a01 (pid 4007) = stopped after `comm 0x55d0c0 rank 7 nranks 16"
        ),
        "{ranks}"
    );
    assert!(ranks.contains("nccl.gpu-a01.4007.log:"), "{ranks}");
    assert!(
        ranks.contains("rank 15 on gpu-a02 (pid 4015)") && ranks.contains("output.log:"),
        "{ranks}"
    );
}

#[test]
fn collective_socket_fallback_fails_the_transport_though_its_bandwidth_is_not_judged_low() {
    // The generic profile sets no busbw floor: 44.87 GB/s alone would pass a bandwidth-only gate.
    let (code, report, _) = run("socket", &[], &[], &[]);
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    // Measured, judged against no floor: said so, never a pass.
    let busbw = judged_busbw(&report);
    assert_eq!(busbw["status"], "warn");
    assert!(
        busbw["summary"]
            .as_str()
            .unwrap()
            .contains("not judged: profile generic sets no thresholds.nccl_busbw_gbytes_per_sec.all_reduce.multi_node"),
        "{busbw:#}"
    );
    let t = result_of(&report, "collective.transport");
    assert_eq!(t["status"], "fail", "{t:#}");
    let s = t["summary"].as_str().unwrap();
    assert!(s.contains("socket") && s.contains("44.87 GB/s"), "{s}");
    assert!(
        t["remediation"].as_str().unwrap().contains("ibv_devinfo"),
        "{t:#}"
    );
    // Under an HGX profile the bandwidth fails too, and the transport says why.
    let (code, report, _) = run("socket", &["--profile", "hgx-h100-ib"], &[], &[]);
    assert_eq!(code, Exit::CHECK_FAILED);
    assert_eq!(judged_busbw(&report)["status"], "fail");
    assert!(evidence(&report, "collective.transport")
        .contains("expected = ib-gdrdma (profile hgx-h100-ib)"));
}

/// By the recovered-vs-fatal rule of the NCCL analysis: a plugin probe's error chain that the same rank's
/// completed init followed is shown, and does not fail the run (it did before that rule).
#[test]
fn collective_errors_nccl_recovered_from_are_listed_and_pass() {
    let (code, report, _) = run("recovered", &["--profile", "hgx-h100-ib"], &[], &[]);
    assert_eq!(code, Exit::OK, "{report:#}");
    let r = result_of(&report, "collective.errors");
    assert_eq!(r["status"], "pass", "{r:#}");
    assert!(
        r["summary"].as_str().unwrap().contains("recovered from"),
        "{r:#}"
    );
    assert!(
        evidence(&report, "collective.errors").contains("net.cc:79"),
        "{r:#}"
    );
    assert_eq!(status_of(&report, "collective.transport"), "pass");
}

#[test]
fn collective_wrong_elements_fail_the_data_check() {
    let (code, report, _) = run("wrong", &[], &[], &[]);
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    assert_eq!(status_of(&report, "collective.data"), "fail");
    assert!(evidence(&report, "collective.data").contains("1 GiB out-of-place: 12 wrong"));
    // nccl-tests exits 1 when data is wrong: the COMMAND's status is an error of its own.
    assert_eq!(status_of(&report, "collective.command"), "error");
}

#[test]
fn collective_hang_after_channel_setup_names_the_rank_and_its_last_line_and_ends_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (code, report, _) = run(
        "hang",
        &[
            "--timeout",
            HANG_TIMEOUT,
            "--log-dir",
            dir.path().to_str().unwrap(),
        ],
        &["--label"],
        &[],
    );
    // The timeout, SIGTERM, and the report: not the ranks' `sleep 300`.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code, Exit::COULD_NOT_RUN, "{report:#}");
    let s = summary(&report, "collective.command");
    assert!(
        s.starts_with("hang:")
            && s.contains(
                "rank 5 on gpu-a01 stopped after `Channel 01/0 : 5[5] -> 6[6] via P2P/CUMEM/read`"
            ),
        "{s}"
    );
    let all = evidence(&report, "collective.command");
    assert!(
        all.contains(
            "rank 12 on gpu-a02 (pid 4012) = stopped after `comm 0x55d0c0 rank 12 nranks 16"
        ),
        "{all}"
    );
    // No result table was printed: never a pass.
    assert_eq!(status_of(&report, "collective.busbw"), "error");
    assert_no_standin_left(dir.path());
}

/// No live process of the run is left: every stand-in rank's environment names the run's log directory.
fn assert_no_standin_left(dir: &Path) {
    let marker = format!("NCCL_DEBUG_FILE={}", dir.display());
    let left = |marker: &str| {
        std::thread::sleep(Duration::from_millis(200));
        let mut left = Vec::new();
        for proc in std::fs::read_dir("/proc").unwrap().flatten() {
            let env = std::fs::read(proc.path().join("environ")).unwrap_or_default();
            if !String::from_utf8_lossy(&env).contains(marker) {
                continue;
            }
            let stat = std::fs::read_to_string(proc.path().join("stat")).unwrap_or_default();
            if !stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
            {
                left.push(stat);
            }
        }
        left
    };
    let left = left(&marker);
    assert!(left.is_empty(), "stand-in ranks outlived the run: {left:?}");
}

#[test]
fn collective_crash_mid_run_is_an_error_naming_the_rank_that_stopped_first() {
    let (code, report, out) = run("crash", &[], &["--label"], &[]);
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let s = summary(&report, "collective.command");
    assert!(
        s.starts_with("the COMMAND exited with status 1") && s.contains("rank 5 on gpu-a01"),
        "{s}"
    );
    assert_eq!(status_of(&report, "collective.errors"), "fail");
    assert!(evidence(&report, "collective.errors").contains("Connection closed by remote peer"));
    assert!(stderr(&out).contains("running `launch --label all_reduce_perf"));
}

#[test]
fn collective_a_rank_that_never_prints_is_named() {
    let (code, report, _) = run("silent", &["--timeout", HANG_TIMEOUT], &[], &[]);
    assert_eq!(code, Exit::COULD_NOT_RUN, "{report:#}");
    let s = summary(&report, "collective.ranks");
    assert!(
        s.starts_with("rank 5 on gpu-a01 (pid 4005) printed no NCCL line"),
        "{s}"
    );
    assert!(summary(&report, "collective.command")
        .contains("rank 5 on gpu-a01 (pid 4005) printed no NCCL line"));
}

#[test]
fn collective_keeps_the_users_nccl_settings_and_reads_their_debug_files() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("mine.%h.%p");
    let (code, report, _) = run(
        "healthy",
        &[],
        &[],
        &[
            ("NCCL_DEBUG_FILE", pattern.to_str().unwrap()),
            ("NCCL_DEBUG", "WARN"),
            ("NCCL_DEBUG_SUBSYS", "COLL"),
        ],
    );
    assert_eq!(code, Exit::OK, "{report:#}");
    let e = evidence(&report, "collective.command");
    assert!(e.contains("NCCL_DEBUG=WARN raised to INFO"), "{e}");
    assert!(e.contains("NCCL logs = 8 per-process file(s)"), "{e}");
    assert!(std::fs::metadata(dir.path().join("mine.gpu-a01.4003")).is_ok());
}

#[test]
fn collective_a_rank_off_its_rail_warns_naming_both_nics() {
    // This host is testdata/hosts/hgx-healthy (node 0): GPU0 sends through mlx5_3, which is NODE away, while
    // mlx5_0 sits on its switch.
    let root = host("hgx-healthy");
    let env = [
        ("STANDIN_HOSTS", "hgx-healthy,gpu-a02"),
        (
            "STANDIN_HCAS",
            "mlx5_3 mlx5_1 mlx5_2 mlx5_0 mlx5_4 mlx5_5 mlx5_6 mlx5_7",
        ),
    ];
    let (code, report, _) = run("healthy", &["--root", root.to_str().unwrap()], &[], &env);
    assert_eq!(code, Exit::OK, "a warning alone does not fail: {report:#}");
    let r = result_of(&report, "collective.rails");
    assert_eq!(r["status"], "warn", "{r:#}");
    let s = r["summary"].as_str().unwrap();
    assert!(
        s.contains(
            "rank 0 (GPU0 0000:18:00.0) sends through mlx5_3 (NODE) while mlx5_0 is nearest (PIX)"
        ),
        "{s}"
    );
    assert!(s.contains("29%"), "{s}");
    // Aligned rails pass, each rank mapped.
    let (_, report, _) = run(
        "healthy",
        &["--root", root.to_str().unwrap()],
        &[],
        &env[..1],
    );
    assert_eq!(status_of(&report, "collective.rails"), "pass");
    assert!(evidence(&report, "collective.rails")
        .contains("rank 7 GPU7 0000:cb:00.0 = uses mlx5_7 (PIX); nearest mlx5_7 (PIX)"));
    let (code, _, _) = run(
        "healthy",
        &["--root", root.to_str().unwrap(), "--strict"],
        &[],
        &env,
    );
    assert_eq!(code, Exit::CHECK_FAILED);
}

#[test]
fn collective_single_node_is_judged_against_the_single_node_floor_and_no_net_expectation() {
    let (code, report, _) = run("healthy", &["--profile", "hgx-h100-ib"], &["-N", "1"], &[]);
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let busbw = judged_busbw(&report);
    assert_eq!(busbw["measurements"][0]["fail"], 460.0, "{busbw:#}");
    assert_eq!(busbw["status"], "fail");
    let t = result_of(&report, "collective.transport");
    assert_eq!(t["status"], "skip", "{t:#}");
    assert!(
        t["summary"].as_str().unwrap().starts_with("single node"),
        "{t:#}"
    );
}

#[test]
fn collective_sigterm_ends_the_group_and_writes_the_partial_report() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = format!("json={}", json.display());
    let mut child = collective(
        "hang",
        &[
            "--timeout",
            "600",
            "--log-dir",
            dir.path().to_str().unwrap(),
            "--output",
            &output,
        ],
        &[],
        &[],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // The signal comes once the job runs (a rank wrote its NCCL log in the log directory), not after a guess.
    let waiting = Instant::now();
    while !std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("nccl"))
    {
        assert!(
            waiting.elapsed() < Duration::from_secs(60),
            "no rank logged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(status.code(), Some(i32::from(Exit::COULD_NOT_RUN)));
    let report = json_file(&json);
    assert_eq!(report["interrupted"], "SIGTERM");
    assert!(summary(&report, "collective.command").starts_with("interrupted by SIGTERM"));
    assert_no_standin_left(dir.path());
}

fn json_file(path: &Path) -> Value {
    json(Schema::Run, &std::fs::read(path).expect("report written"))
}

#[test]
fn collective_usage_errors_exit_2() {
    let out = preflight().args(["collective"]).output().unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(stderr(&out).contains("no COMMAND"), "{}", stderr(&out));
    let out = preflight()
        .args(["collective", "--workload-arg=--nproc=2", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    let out = preflight()
        .args(["collective", "--timeout", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
}

#[test]
fn collective_a_command_that_prints_no_table_is_never_a_pass() {
    let out = preflight()
        .args(["collective", "--format", "json", "--", "true"])
        .output()
        .unwrap();
    let report = json_out(Schema::Run, &out);
    assert_eq!(code(&out), Exit::COULD_NOT_RUN, "{report:#}");
    assert_eq!(status_of(&report, "collective.command"), "pass");
    assert_eq!(status_of(&report, "collective.busbw"), "error");
    let out = preflight()
        .args([
            "collective",
            "--format",
            "json",
            "--",
            "/nonexistent/all_reduce_perf",
        ])
        .output()
        .unwrap();
    let report = json_out(Schema::Run, &out);
    assert_eq!(code(&out), Exit::COULD_NOT_RUN);
    assert!(summary(&report, "collective.command").contains("did not start"));
}

/// The sbatch script end to end under a stand-in `srun` (options dropped, tasks started by the stand-in
/// launcher): the report lands in OUT and the exit code is the verdict's.
#[test]
fn collective_sbatch_runs_the_gate_and_leaves_its_reports() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let srun = bin_dir.join("srun");
    std::fs::write(
        &srun,
        "#!/bin/sh\n# stand-in srun: drops its options, then starts the tasks like srun --label\n\
         while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\nexec launch --label \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&srun, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/nccl-collective.sbatch");
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        standins().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run_sbatch = |scenario: &str| {
        let out = Command::new("bash")
            .arg(&script)
            .env_clear()
            .env("PATH", &path)
            .env("FABRIC_PREFLIGHT", bin())
            .env("SLURM_SUBMIT_DIR", dir.path())
            .env("SLURM_JOB_ID", scenario)
            .env("SLURM_JOB_NODELIST", "gpu-a[01-02]")
            .env("STANDIN_SCENARIO", scenario)
            .output()
            .unwrap();
        let report = json_file(
            &dir.path()
                .join(format!("collective-{scenario}/report.json")),
        );
        assert!(dir
            .path()
            .join(format!("collective-{scenario}/report.xml"))
            .exists());
        (code(&out), report)
    };
    let (code, report) = run_sbatch("healthy");
    assert_eq!(code, Exit::OK, "{report:#}");
    assert_eq!(report["profile"], "hgx-h100-ib");
    assert_eq!(status_of(&report, "collective.transport"), "pass");
    let (code, report) = run_sbatch("socket");
    assert_eq!(code, Exit::CHECK_FAILED);
    assert_eq!(status_of(&report, "collective.transport"), "fail");
}

/// The Indexed Job: its rendezvous address is pod 0 through the headless Service, torchrun's node count is
/// the Job's, and fabric-preflight accepts the container's command line.
#[test]
fn collective_kubernetes_job_rendezvous_matches_its_service_and_its_flags_parse() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/nccl-collective.yaml"),
    )
    .unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let service = docs.iter().find(|d| d["kind"] == "Service").unwrap();
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    let name = job["metadata"]["name"].as_str().unwrap();
    let svc = service["metadata"]["name"].as_str().unwrap();
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(service["spec"]["selector"]["job-name"], name);
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    assert_eq!(job["spec"]["template"]["spec"]["subdomain"], svc);
    let nodes = job["spec"]["completions"].as_u64().unwrap();
    assert_eq!(job["spec"]["parallelism"].as_u64(), Some(nodes));
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(args.contains(&format!("--nnodes={nodes}")), "{args:?}");
    assert!(
        args.contains(&format!("--master-addr={name}-0.{svc}")),
        "{args:?}"
    );
    assert!(c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "NODE_RANK"));
    // Our own flags (before `--`) are accepted: the COMMAND replaced by one that prints no table (exit 3, not 2).
    let dir = tempfile::tempdir().unwrap();
    let ours: Vec<String> = args
        .iter()
        .take_while(|a| *a != "--")
        .map(|a| {
            a.replace("/var/log/fabric-preflight", dir.path().to_str().unwrap())
                .replace(
                    "/dev/termination-log",
                    &dir.path().join("t").display().to_string(),
                )
        })
        .collect();
    let out = preflight()
        .args(&ours)
        .arg("--")
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(ours[0], "collective");
    assert_eq!(code(&out), Exit::COULD_NOT_RUN, "{}", stderr(&out));
}

/// Found on the H200: `--log-dir DIR --output json=DIR/report.json` with DIR not there yet was refused as a usage
/// error (the report's directory was checked before the log directory was made).
#[test]
fn collective_reports_may_go_into_a_log_dir_it_creates() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("new/logs");
    let json = format!("json={}", logs.join("report.json").display());
    let (code, report, _) = run(
        "healthy",
        &["--log-dir", logs.to_str().unwrap(), "--output", &json],
        &[],
        &[],
    );
    assert_eq!(code, Exit::OK, "{report:#}");
    assert_eq!(json_file(&logs.join("report.json"))["exit_code"], 0);
}

/// `collective --format json ARGS -- COMMAND…` with the stand-ins on PATH: the report and exit code.
fn run_command(args: &[&str], command: &[&str], env: &[(&str, &str)]) -> (u8, Value) {
    let mut cmd = preflight();
    let path = format!(
        "{}:{}",
        standins().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("PATH", path)
        .args(["collective", "--format", "json", "--color", "never"])
        .args(args)
        .arg("--")
        .args(command)
        .envs(env.iter().copied());
    let out = cmd.output().expect("binary runs");
    let report = json_out(Schema::Run, &out);
    assert_eq!(report["exit_code"], u64::from(code(&out)), "{report:#}");
    (code(&out), report)
}

/// The result of `id` whose subject is `subject` exactly.
fn result_for<'a>(report: &'a Value, id: &str, subject: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id && c["subject"] == subject)
        .unwrap_or_else(|| panic!("no {id} for {subject}: {report:#}"))
}

fn text_of(result: &Value) -> String {
    let evidence: Vec<&str> = result["evidence"]
        .as_array()
        .map(|e| e.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    format!("{}\n{}", result["summary"], evidence.join("\n"))
}

/// One node, 8 ranks, `--mode nic-loopback` under the HGX H100 profile (loopback floor 40 GB/s, NVLink floor
/// 460 GB/s): the NIC loopback then the NVLink-only run, each judged, side by side.
fn loopback(extra: &[&str], env: &[(&str, &str)]) -> (u8, Value) {
    let mut args = vec!["--mode", "nic-loopback", "--profile", "hgx-h100-ib"];
    args.extend_from_slice(extra);
    let command = [
        "launch",
        "-N",
        "1",
        "-n",
        "8",
        "all_reduce_perf",
        "-b",
        "8M",
        "-e",
        "4G",
        "-f",
        "2",
        "-g",
        "1",
    ];
    run_command(&args, &command, env)
}

#[test]
fn collective_nic_loopback_over_ib_gdrdma_on_every_nic_passes_with_nvlink_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let (code, report) = loopback(&["--log-dir", logs.to_str().unwrap()], &[]);
    assert_eq!(code, Exit::OK, "{report:#}");
    let busbw = result_for(
        &report,
        "collective.busbw",
        "nic-loopback: all_reduce >= 128 MiB",
    );
    assert_eq!(busbw["status"], "pass", "{busbw:#}");
    assert_eq!(busbw["measurements"][0]["value"], 47.02);
    assert_eq!(busbw["measurements"][0]["fail"], 40.0);
    let t = result_for(&report, "collective.transport", "nic-loopback");
    assert_eq!(t["status"], "pass", "{t:#}");
    assert!(
        t["summary"]
            .as_str()
            .unwrap()
            .contains("ib-gdrdma (busbw 47.02 GB/s at 4 GiB), meeting expected ib-gdrdma, through each of the 8 rail NIC(s)"),
        "{t:#}"
    );
    assert!(text_of(t).contains("nic mlx5_7 (NET/IB/7) = carried channels with GPUDirect RDMA"));
    // The settings reached the ranks (the stand-in takes its path from them) and are in the report.
    let command = text_of(result_for(&report, "collective.command", "nic-loopback"));
    for set in [
        "NCCL_P2P_DISABLE=1",
        "NCCL_SHM_DISABLE=1",
        "NCCL_NVLS_ENABLE=0",
        "NCCL_NET_GDR_LEVEL=SYS",
    ] {
        assert!(
            command.contains(&format!("set = {set}")),
            "{set}: {command}"
        );
    }
    let nvlink = result_for(
        &report,
        "collective.busbw",
        "nvlink-only: all_reduce >= 128 MiB",
    );
    assert_eq!(nvlink["measurements"][0]["fail"], 460.0, "{nvlink:#}");
    assert_eq!(
        result_for(&report, "collective.transport", "nvlink-only")["status"],
        "pass"
    );
    let side = result_of(&report, "collective.isolation");
    assert_eq!(side["status"], "pass", "{side:#}");
    // Each run kept its own logs.
    for run in ["nic-loopback", "nvlink-only"] {
        assert!(logs.join(run).join("output.log").exists(), "{run}");
    }
}

#[test]
fn collective_nic_loopback_on_socket_says_there_is_no_nic_to_loop_through() {
    let (code, report) = loopback(&["--expect", "gdrdma"], &[("STANDIN_SCENARIO", "socket")]);
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let t = result_for(&report, "collective.transport", "nic-loopback");
    assert_eq!(t["status"], "fail", "{t:#}");
    let s = t["summary"].as_str().unwrap();
    assert!(
        s.starts_with("no NIC to loop through: `NET/IB : No device found`, NCCL selected Socket, 16 channel(s) over NET/Socket (Socket only"),
        "{s}"
    );
    let side = result_of(&report, "collective.isolation");
    assert!(
        side["summary"].as_str().unwrap().starts_with("a NIC fault"),
        "{side:#}"
    );
}

#[test]
fn collective_nic_loopback_names_a_nic_missing_from_the_transport_lines() {
    // This host is testdata/hosts/hgx-healthy: eight rails, mlx5_0..mlx5_7, each its GPU's nearest. mlx5_5's
    // port is down: NCCL leaves it out of its list and rank 5 sends through mlx5_4.
    let root = host("hgx-healthy");
    let (code, report) = loopback(
        &["--root", root.to_str().unwrap()],
        &[("STANDIN_HOSTS", "hgx-healthy"), ("STANDIN_DEAD_NIC", "5")],
    );
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let t = result_for(&report, "collective.transport", "nic-loopback");
    assert_eq!(t["status"], "fail", "{t:#}");
    let s = t["summary"].as_str().unwrap();
    assert!(
        s.contains(
            "but not through every NIC: mlx5_5 (not in NCCL's list of NICs) carried no channel"
        ),
        "{s}"
    );
    // The verdict of the transport alone is met: only the NIC list shows the fault.
    assert!(s.starts_with("NCCL carried the data over ib-gdrdma"), "{s}");
    assert!(result_of(&report, "collective.isolation")["summary"]
        .as_str()
        .unwrap()
        .starts_with("a NIC fault"));
}

#[test]
fn collective_nic_loopback_below_its_floor_fails_as_a_nic_fault() {
    let (code, report) = loopback(
        &[],
        &[(
            "STANDIN_LOOPBACK_BUSBWS",
            "10.1 15.2 20.3 24.4 27.5 29.6 30.7 31.1 31.3 31.5",
        )],
    );
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let busbw = result_for(
        &report,
        "collective.busbw",
        "nic-loopback: all_reduce >= 128 MiB",
    );
    assert_eq!(busbw["status"], "fail", "{busbw:#}");
    assert!(
        busbw["summary"]
            .as_str()
            .unwrap()
            .contains("busbw 31.50 GB/s at 4 GiB is below fail 40 GB/s"),
        "{busbw:#}"
    );
    assert!(text_of(busbw).contains("thresholds.nccl_busbw_gbytes_per_sec.all_reduce.nic_loopback"));
    let side = result_of(&report, "collective.isolation");
    assert_eq!(side["status"], "fail");
    assert!(
        side["summary"]
            .as_str()
            .unwrap()
            .starts_with("a NIC fault: the NIC loopback fails while NVLink-only passes"),
        "{side:#}"
    );
}

#[test]
fn collective_nvlink_only_tells_an_nvlink_fault_from_a_nic_fault() {
    // GPU 3 has no NVLink: with P2P allowed only over NVLink, its hops fall back to the network (Socket).
    let (code, report) = loopback(&[], &[("STANDIN_NVLINK_DOWN", "3")]);
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let t = result_for(&report, "collective.transport", "nvlink-only");
    assert_eq!(t["status"], "fail", "{t:#}");
    assert!(
        t["summary"]
            .as_str()
            .unwrap()
            .starts_with("GPU pairs without NVLink: ranks 2-3 over NET/Socket x4"),
        "{t:#}"
    );
    assert_eq!(
        result_for(&report, "collective.transport", "nic-loopback")["status"],
        "pass"
    );
    let side = result_of(&report, "collective.isolation");
    assert!(
        side["summary"]
            .as_str()
            .unwrap()
            .starts_with("an NVLink fault: NVLink-only fails while the NIC loopback passes"),
        "{side:#}"
    );
}

/// Two nodes, one communicator per rail. rail 3 runs at 20 GB/s (floor: warn 46, fail 41.4).
fn per_rail(extra: &[&str], program: &[&str], env: &[(&str, &str)]) -> (u8, Value) {
    let mut args = vec![
        "--mode",
        "per-rail",
        "--rails",
        "8",
        "--profile",
        "hgx-h100-ib",
    ];
    args.extend_from_slice(extra);
    let mut command = vec!["launch", "-N", "2", "-n", "8", "all_reduce_perf"];
    command.extend_from_slice(program);
    let mut all_env = vec![("STANDIN_SLOW_RAIL", "3"), ("STANDIN_SLOW_BUSBW", "20")];
    all_env.extend_from_slice(env);
    run_command(&args, &command, &all_env)
}

#[test]
fn collective_per_rail_names_the_rail_below_its_floor() {
    // The built-in workload prints each rail's table (the stand-in prints its format when given --split-mod).
    let (code, report) = per_rail(&["--workload", "torch"], &[], &[]);
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let slow = result_for(&report, "collective.busbw", "per-rail: rail 3");
    assert_eq!(slow["status"], "fail", "{slow:#}");
    let s = slow["summary"].as_str().unwrap();
    assert!(
        s.starts_with("rail 3 (ranks 3,11 on gpu-a01,gpu-a02 through mlx5_3): busbw 20.00 GB/s at 4 GiB is below warn 46 / fail 41.4 GB/s"),
        "{s}"
    );
    for rail in [0, 1, 2, 4, 5, 6, 7] {
        let r = result_for(
            &report,
            "collective.busbw",
            &format!("per-rail: rail {rail}"),
        );
        assert_eq!(r["status"], "pass", "{r:#}");
    }
    assert!(
        text_of(result_for(&report, "collective.command", "per-rail"))
            .contains("set = NCCL_TESTS_SPLIT=MOD 8")
    );
}

#[test]
fn collective_per_rail_under_nccl_tests_judges_its_one_table_for_what_it_is() {
    // -a 3: the row is the slowest rail's; below the floor, and nccl-tests' table cannot say which rail.
    let (code, report) = per_rail(
        &[],
        &["-b", "8M", "-e", "4G", "-f", "2", "-g", "1", "-a", "3"],
        &[],
    );
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let r = result_for(&report, "collective.busbw", "per-rail: all rails");
    assert_eq!(r["status"], "fail", "{r:#}");
    let s = r["summary"].as_str().unwrap();
    assert!(
        s.starts_with("the slowest rail (nccl-tests -a 3): busbw 20.00 GB/s"),
        "{s}"
    );
    assert!(
        s.contains("at least one rail is below, and nccl-tests' one table does not say which"),
        "{s}"
    );
    assert!(
        text_of(r).contains("rail 3 = ranks 3,11 on gpu-a01,gpu-a02 through mlx5_3"),
        "{r:#}"
    );
    // The default mean of the rails' times passes the floor with the slow rail in it: never a pass.
    let (_, report) = per_rail(
        &[],
        &["-b", "8M", "-e", "4G", "-f", "2", "-g", "1"],
        &[("STANDIN_SLOW_BUSBW", "40")],
    );
    let r = result_for(&report, "collective.busbw", "per-rail: all rails");
    assert_eq!(r["status"], "warn", "{r:#}");
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("not every rail was judged"),
        "{r:#}"
    );
}

#[test]
fn collective_mode_flags_that_do_not_fit_are_usage_errors() {
    let out = preflight()
        .args(["collective", "--rails", "8", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Exit::USAGE);
    assert!(
        stderr(&out).contains("--rails needs --mode per-rail"),
        "{}",
        stderr(&out)
    );
}

/// Reproduced: with the user's own NCCL_DEBUG_FILE, every run writes where the pattern says, and the NIC
/// loopback's files, younger than the time slack, were read again as the NVLink-only run's: its NET channels
/// failed NVLink on a healthy node.
#[test]
fn collective_nic_loopback_runs_do_not_read_each_others_debug_files() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("mine.%h.%p");
    let (code, report) = loopback(&[], &[("NCCL_DEBUG_FILE", pattern.to_str().unwrap())]);
    assert_eq!(code, Exit::OK, "{report:#}");
    assert_eq!(
        result_for(&report, "collective.transport", "nvlink-only")["status"],
        "pass"
    );
}

/// Real NCCL output replayed as the job's (a COMMAND that prints a recorded log): the H200 machine's NCCL 2.28.9
/// (one rank, no RDMA device, Socket) has no NIC to loop through; an aws-ofi-nccl run over EFA meets
/// ofi-gdrdma, though its log names no NIC, so that every NIC carried channels is not claimed.
#[test]
fn collective_nic_loopback_judges_real_nccl_logs() {
    let log = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/nccl")
            .join(name)
            .display()
            .to_string()
    };
    let h200 = log("nccl-h200-single-gpu-socket.log");
    let (code, report) = run_command(
        &["--mode", "nic-loopback", "--expect", "gdrdma"],
        &["cat", &h200],
        &[],
    );
    assert_eq!(code, Exit::CHECK_FAILED, "{report:#}");
    let t = result_for(&report, "collective.transport", "nic-loopback");
    assert!(
        t["summary"].as_str().unwrap().starts_with(
            "no NIC to loop through: `NET/IB : No device found`, NCCL selected Socket (Socket only"
        ),
        "{t:#}"
    );
    let nvlink = result_for(&report, "collective.transport", "nvlink-only");
    assert_eq!(nvlink["status"], "skip", "{nvlink:#}");
    let efa = log("ofi-aws-libfabric-gdrdma.log");
    let (_, report) = run_command(
        &["--mode", "nic-loopback", "--expect", "ofi-gdrdma"],
        &["cat", &efa],
        &[],
    );
    let t = result_for(&report, "collective.transport", "nic-loopback");
    assert_eq!(t["status"], "warn", "{t:#}");
    assert!(
        t["summary"].as_str().unwrap().contains(
            "over ofi-gdrdma, meeting expected ofi-gdrdma, but NCCL's log lists no NICs by name"
        ),
        "{t:#}"
    );
}

#[test]
fn collective_nic_loopback_across_nodes_is_not_judged_as_one() {
    let (code, report) = run_command(
        &["--mode", "nic-loopback", "--profile", "hgx-h100-ib"],
        &["launch", "-N", "2", "-n", "8", "all_reduce_perf"],
        &[],
    );
    assert_eq!(code, Exit::COULD_NOT_RUN, "{report:#}");
    let t = result_for(&report, "collective.transport", "nic-loopback");
    assert!(
        t["summary"].as_str().unwrap().starts_with(
            "the NIC loopback is a one-node test, but the job ran on 2 hosts (gpu-a01, gpu-a02)"
        ),
        "{t:#}"
    );
}

#[test]
fn collective_per_rail_with_communicators_that_are_not_rails_judges_none() {
    // Eight GPUs per node split MOD 4: each communicator holds two ranks of each node.
    let (code, report) = run_command(
        &[
            "--mode",
            "per-rail",
            "--rails",
            "4",
            "--profile",
            "hgx-h100-ib",
        ],
        &["launch", "-N", "2", "-n", "8", "all_reduce_perf", "-a", "3"],
        &[],
    );
    assert_eq!(code, Exit::COULD_NOT_RUN, "{report:#}");
    let r = result_for(&report, "collective.busbw", "per-rail: rails");
    assert_eq!(
        r["summary"],
        "the communicators are not rails, so no rail was judged: communicator 0 holds 2 ranks on gpu-a01 (ranks 0,4)"
    );
}
