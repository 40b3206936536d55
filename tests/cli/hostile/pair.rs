//! `pair` against hostile peers and inputs: idle sockets and wrong peers in the way of the real peer, reports
//! for `--summarize` that are devices, FIFOs, huge files or directories.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{bounded, mkfifo, Bounded, HANG_LIMIT, QUICK_CPU};
use crate::pair::{finish, free_port, pair};
use crate::util::*;

/// Idle sockets used to hold the listener 5 s each, one after the other, before any token check: two of them
/// made a real pair fail. Now they are greeted at once, beside the peer, and more than the listener greets at
/// once are closed unread while the connector retries. The bounds sit well below what one-after-the-other
/// costs (3 × 5 s, 40 × 5 s) and well above what a loaded machine adds.
#[test]
fn idle_sockets_do_not_keep_the_real_peer_out() {
    for (idle, within) in [(3, Duration::from_secs(10)), (40, Duration::from_secs(30))] {
        let port = free_port();
        let listener = pair(
            &["--listen", &port.to_string(), "--timeout", "60"],
            Some("t"),
        );
        let sockets: Vec<TcpStream> = (0..idle)
            .map(|_| loop {
                if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
                    break s;
                }
                std::thread::sleep(Duration::from_millis(20));
            })
            .collect();
        let t = Instant::now();
        let connector = pair(
            &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "60"],
            Some("t"),
        );
        let (c_code, c_report, _) = finish(connector);
        let took = t.elapsed();
        let (l_code, l_report, _) = finish(listener);
        assert_eq!(
            (c_code, l_code),
            (Exit::OK, Exit::OK),
            "{idle}: {c_report}\n{l_report}"
        );
        assert!(took < within, "{idle} idle sockets: the pair took {took:?}");
        drop(sockets);
    }
}

/// What answers first on the port is not the listener: it closes every connection, or answers garbage. The
/// connector used to give up after that one handshake; it retries until the real listener is up.
#[test]
fn a_connector_meeting_a_wrong_peer_first_retries_until_the_listener_is_up() {
    for answer in [&b""[..], b"HTTP/1.1 400 Bad Request\r\n\r\n"] {
        let port = free_port();
        let impostor = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let connector = pair(
            &["--connect", &format!("127.0.0.1:{port}"), "--timeout", "60"],
            Some("t"),
        );
        let until = Instant::now() + Duration::from_millis(1500);
        impostor.set_nonblocking(true).unwrap();
        while Instant::now() < until {
            if let Ok((mut s, _)) = impostor.accept() {
                use std::io::Write;
                let _ = s.write_all(answer);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(impostor);
        let listener = pair(
            &["--listen", &port.to_string(), "--timeout", "60"],
            Some("t"),
        );
        let (c_code, c_report, _) = finish(connector);
        let (l_code, _, _) = finish(listener);
        assert_eq!((c_code, l_code), (Exit::OK, Exit::OK), "{c_report}");
    }
}

/// A ring node's report with the fields `--summarize` reads: node `rank` of a, b, c, both its links passing.
fn ring_report(dir: &Path, rank: usize) -> PathBuf {
    let members = ["a", "b", "c"];
    let link =
        |x: usize, y: usize| json!({"a": members[x % 3], "b": members[y % 3], "status": "pass"});
    let report = json!({
        "schema_version": 2,
        "tool": {"name": "fabric-preflight", "version": "0", "commit": "x"},
        "host": {"hostname": members[rank], "node_name": members[rank], "kernel": "-", "root": "/"},
        "profile": "generic",
        "timestamp": "2026-01-01T00:00:00Z",
        "strict": false,
        "duration_ms": 1,
        "checks": [],
        "ring": {"members": members, "rank": rank, "source": "--peers", "links": [link(rank + 2, rank), link(rank, rank + 1)]},
    });
    let path = dir.join(format!("{rank}.json"));
    std::fs::write(&path, report.to_string()).unwrap();
    path
}

/// Puts a hostile report at a path; what its error must say.
type Plant = (fn(&Path), &'static str);

/// A usage error naming `why`, given before any work: in well under a second of CPU.
fn assert_refused_at_once(run: &Bounded, why: &str) {
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert_eq!(code(&run.out), Exit::USAGE, "{why}: {stderr}");
    assert!(stderr.contains(why), "{why}: {stderr}");
    assert!(run.cpu < QUICK_CPU, "{why}: {:?} of CPU", run.cpu);
}

/// What a careless or hostile user names as an input file, each with the words its refusal must use: a FIFO, a
/// link to a device, a 100 MiB sparse file (`too_large`: how the reader's limit is named) and a directory.
fn hostile_files(too_large: &'static str) -> [Plant; 4] {
    [
        (|p| mkfifo(p), "is a FIFO"),
        (
            |p| std::os::unix::fs::symlink("/dev/zero", p).unwrap(),
            "is a character device",
        ),
        (
            |p| {
                std::fs::File::create(p)
                    .unwrap()
                    .set_len(100 << 20)
                    .unwrap()
            },
            too_large,
        ),
        (|p| std::fs::create_dir(p).unwrap(), "is a directory"),
    ]
}

/// `--summarize` read a report to its end, whatever it was: a link to /dev/zero reached 16.8 GB. Each hostile
/// report is named unreadable, quickly and in bounded memory, and the good ones are still summarized.
#[test]
fn hostile_reports_are_named_unreadable_and_the_rest_summarized() {
    let dir = tempfile::tempdir().unwrap();
    let good = [ring_report(dir.path(), 0), ring_report(dir.path(), 2)];
    let bad = dir.path().join("1.json");
    let plant = hostile_files("larger than 16 MiB");
    for (make, why) in plant {
        make(&bad);
        let run = bounded(
            preflight()
                .args(["pair", "--format", "json", "--summarize"])
                .args([&good[0], &bad, &good[1]]),
            HANG_LIMIT,
        );
        let report: Value = json_out(Schema::Run, &run.out);
        assert_eq!(code(&run.out), Exit::COULD_NOT_RUN, "{why}: {report:#}");
        let checks = report["checks"].as_array().unwrap();
        assert_eq!(checks[0]["status"], "pass", "{why}: {report:#}");
        assert_eq!(checks[1]["status"], "error", "{why}: {report:#}");
        assert!(
            checks[1]["summary"].as_str().unwrap().contains(why),
            "{why}: {report:#}"
        );
        assert!(run.cpu < QUICK_CPU, "{why}: {:?} of CPU", run.cpu);
        let _ = std::fs::remove_file(&bad).or_else(|_| std::fs::remove_dir(&bad));
    }
}

/// Writes `content` at `path` with permission bits `mode`.
fn write_mode(path: &Path, content: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Removes whatever a [`Plant`] left at `path`.
fn unplant(path: &Path) {
    let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
}

/// Class 18: a job token read from a file is a secret only if no one else may read the file, and the file is
/// an input like any other (a FIFO or a link to /dev/zero is refused unread). Each is a usage error at once,
/// before any connection; a file only its owner may read pairs.
#[test]
fn token_files_others_may_read_or_that_are_not_small_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let plant: [Plant; 8] = [
        (
            |p| write_mode(p, b"t\n", 0o644),
            "readable by group or others (mode 0644)",
        ),
        (|p| write_mode(p, b"t\n", 0o640), "(mode 0640)"),
        (|p| write_mode(p, b"t\n", 0o604), "(mode 0604)"),
        (|p| mkfifo(p), "is a FIFO"),
        (
            |p| std::os::unix::fs::symlink("/dev/zero", p).unwrap(),
            "is a character device",
        ),
        (|p| std::fs::create_dir(p).unwrap(), "is a directory"),
        (|p| write_mode(p, &[b'x'; 5000], 0o600), "larger than 4 KiB"),
        (|p| write_mode(p, b" \n", 0o600), "the job token is empty"),
    ];
    for (make, why) in plant {
        make(&file);
        let run = bounded(
            preflight()
                .args(["pair", "--connect", "127.0.0.1:9", "--timeout", "30"])
                .arg("--token-file")
                .arg(&file),
            Duration::from_secs(10),
        );
        assert_refused_at_once(&run, why);
        unplant(&file);
    }

    write_mode(&file, b"t\n", 0o600);
    let port = free_port();
    let listener = pair(
        &["--listen", &port.to_string(), "--timeout", "20"],
        Some("t"),
    );
    let file_arg = file.to_str().unwrap();
    let connector = pair(
        &[
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--timeout",
            "20",
            "--token-file",
            file_arg,
        ],
        None,
    );
    let (c_code, c_report, _) = finish(connector);
    let (l_code, _, _) = finish(listener);
    assert_eq!((c_code, l_code), (Exit::OK, Exit::OK), "{c_report}");
}

/// Class 18: under Slurm without a token the job and step id are used, which anyone can read with squeue:
/// the run says so and names the flag for a secret, instead of calling it one.
#[test]
fn the_slurm_job_id_token_is_named_no_secret() {
    let run = bounded(
        preflight()
            .args(["pair", "--ring", "--timeout", "1", "--format", "json"])
            .envs([
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_NODELIST", "127.0.0.1,localhost"),
                ("SLURM_JOB_ID", "4242"),
                ("SLURM_STEP_ID", "1"),
            ]),
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert!(
        stderr.contains("job token slurm-4242.1 (the Slurm job and step id)")
            && stderr.contains("no secret")
            && stderr.contains("--token-file"),
        "{stderr}"
    );
}

/// Class 3, the ring's MPI hostfile: it was read whole with no type check, so a FIFO blocked `pair` for good
/// and a link to /dev/zero grew without bound. It is a bounded regular file now.
#[test]
fn hostile_hostfiles_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hosts");
    let plant = hostile_files("larger than 1 MiB");
    for (make, why) in plant {
        make(&file);
        let run = bounded(
            preflight()
                .args([
                    "pair",
                    "--ring",
                    "--token",
                    "t",
                    "--timeout",
                    "30",
                    "--hostfile",
                ])
                .arg(&file)
                .env("OMPI_COMM_WORLD_RANK", "0"),
            Duration::from_secs(10),
        );
        assert_refused_at_once(&run, why);
        unplant(&file);
    }
}
