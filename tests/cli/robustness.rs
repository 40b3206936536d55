//! Ugly input and the read-only promise: a hostile `--root` tree produces evidence, never a panic or an
//! unbounded read, and a run changes nothing in the tree it reads.

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fabric_preflight::probe::Kind;

use super::util::*;

/// Every check that is not active: active checks move data or need a scratch dir, so they are about the
/// machine, not the tree.
fn tree_checks() -> Vec<&'static str> {
    fabric_preflight::probes::all()
        .iter()
        .filter(|p| p.kind() != Kind::Active)
        .map(|p| p.id())
        .collect()
}

fn skip_active() -> Vec<String> {
    let active: Vec<&str> = fabric_preflight::probes::all()
        .iter()
        .filter(|p| p.kind() == Kind::Active)
        .map(|p| p.id())
        .collect();
    if active.is_empty() {
        vec![]
    } else {
        vec!["--skip".into(), active.join(",")]
    }
}

/// This test process runs as root (so a file with mode 000 is readable to it).
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The binary as an unprivileged process: itself when the tests do not run as root, else a copy of it that
/// `nobody` can execute (the checkout may sit under a home directory `nobody` cannot enter), run as `nobody`
/// with every capability dropped (through `setpriv`). Keep the returned directory alive while the command
/// runs. None when root and `setpriv` is missing.
pub(crate) fn unprivileged() -> Option<(Command, Option<tempfile::TempDir>)> {
    if !is_root() {
        return Some((preflight(), None));
    }
    Command::new("setpriv").arg("--version").output().ok()?;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join("fabric-preflight");
    // Copied by `cp`, not in this process: a write descriptor open here while another test thread forks would
    // be inherited, and exec of the copy would then fail with ETXTBSY ("Text file busy").
    let copied = Command::new("cp").arg(bin()).arg(&copy).status();
    assert!(copied.is_ok_and(|s| s.success()), "copy the binary");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ])
    .arg(&copy)
    .current_dir(dir.path())
    .env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    Some((cmd, Some(dir)))
}

/// A copy of `testdata/hosts/<scenario>` (links kept) in a temp dir that `nobody` can enter.
/// One kind of damage, done to every regular file of a tree.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ugly {
    Empty,
    /// 10 MB (sparse) where a few bytes are expected.
    Huge,
    NotUtf8,
    /// A directory where the file was.
    Directory,
    /// A symlink to itself.
    SymlinkLoop,
    /// Mode 000: only meaningful to a process without CAP_DAC_OVERRIDE.
    PermissionDenied,
}

impl Ugly {
    const ALL: [Ugly; 6] = [
        Ugly::Empty,
        Ugly::Huge,
        Ugly::NotUtf8,
        Ugly::Directory,
        Ugly::SymlinkLoop,
        Ugly::PermissionDenied,
    ];

    /// What the evidence says about a file damaged this way (None: an empty file has no single marker; its
    /// parsers say "unrecognised", "not a hex number", "<empty>"…).
    fn marker(self) -> Option<&'static str> {
        match self {
            Ugly::Empty => None,
            Ugly::Huge => Some("<larger than"),
            Ugly::NotUtf8 => Some("<not UTF-8 text>"),
            Ugly::Directory => Some("<is a directory>"),
            Ugly::SymlinkLoop => Some("<symlink loop>"),
            Ugly::PermissionDenied => Some("<permission denied>"),
        }
    }

    fn apply(self, file: &Path) {
        match self {
            Ugly::Empty => std::fs::write(file, "").unwrap(),
            Ugly::Huge => std::fs::OpenOptions::new()
                .write(true)
                .open(file)
                .unwrap()
                .set_len(10 << 20)
                .unwrap(),
            Ugly::NotUtf8 => {
                let mut bytes = b"\xff\xfe".to_vec();
                bytes.extend(std::fs::read(file).unwrap());
                std::fs::write(file, bytes).unwrap();
            }
            Ugly::Directory => {
                std::fs::remove_file(file).unwrap();
                std::fs::create_dir(file).unwrap();
            }
            Ugly::SymlinkLoop => {
                std::fs::remove_file(file).unwrap();
                symlink(file.file_name().unwrap(), file).unwrap();
            }
            Ugly::PermissionDenied => {
                std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o000)).unwrap()
            }
        }
    }
}

/// `scenario` with every regular file damaged by `ugly` (the recorded vendor answers are ours, not the
/// kernel's, and stay intact).
fn uglified(scenario: &str, ugly: Ugly) -> tempfile::TempDir {
    let dir = copy_scenario(scenario);
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() && !path.ends_with("vendor-answers.json") {
                ugly.apply(&path);
            }
        }
    }
    dir
}

/// A profile giving every check 60 s instead of its own default (10 s): on a loaded machine a debug build reading
/// hundreds of 10 MB files can pass 10 s, and a check cut at its deadline says "timed out", not the damage it
/// met. The sweep is about what each check says, so the deadline must not decide it. Written beside the tree.
fn generous_deadlines(root: &Path) -> std::path::PathBuf {
    let checks: String = tree_checks()
        .iter()
        .map(|id| format!("  {id}: {{timeout: 60}}\n"))
        .collect();
    let path = root.join("generous-deadlines.yaml");
    std::fs::write(
        &path,
        format!("name: generous-deadlines\ndescription: the damage sweep's deadlines\nextends: generic\nchecks:\n{checks}"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

/// Checks whose verdict rests on the contents of files: on a damaged tree none of them may pass, and each names
/// the damage in its summary or evidence.
const READS_CONTENTS: &[&str] = &[
    "driver.nvidia",
    "gdr.kernel_path",
    "gds.kernel_path",
    "gds.config",
    "rdma.link",
    "rdma.roce",
    "rdma.counters",
    "pcie.link",
    "pcie.acs",
    "topo.gpu_nic",
];

#[test]
fn every_tree_check_meets_every_kind_of_damaged_file() {
    let checks = tree_checks().join(",");
    // hgx-healthy: GPUs, IB ports, PCIe switches; roce-mtu-1500: RoCE GIDs and netdevs; iommu-translated:
    // IOMMU groups.
    for scenario in ["hgx-healthy", "roce-mtu-1500", "iommu-translated"] {
        for ugly in Ugly::ALL {
            let dir = uglified(scenario, ugly);
            let cmd = if ugly == Ugly::PermissionDenied {
                unprivileged()
            } else {
                Some((preflight(), None))
            };
            let Some((mut cmd, _bin)) = cmd else {
                eprintln!("{scenario} {ugly:?}: skipped, needs setpriv to drop root");
                continue;
            };
            let profile = generous_deadlines(dir.path());
            let started = Instant::now();
            let out = cmd
                .args([
                    "run", "--format", "json", "--color", "never", "--only", &checks,
                ])
                .arg("--root")
                .arg(dir.path())
                .arg("--profile")
                .arg(&profile)
                .output()
                .unwrap();
            let took = started.elapsed();
            let what = format!("{scenario} with {ugly:?} files");
            // Bounded: no damaged file makes a check read or loop for long (each check has 60 s, see below).
            assert!(took < Duration::from_secs(60), "{what}: took {took:?}");
            assert!(
                matches!(code(&out), 1 | 3),
                "{what}: exit {}: {}",
                code(&out),
                stderr(&out)
            );
            eprintln!("{what}");
            let report = json_out(Schema::Run, &out);
            let results = report["checks"].as_array().unwrap();
            for id in tree_checks() {
                let mine: Vec<&serde_json::Value> =
                    results.iter().filter(|c| c["id"] == id).collect();
                assert!(!mine.is_empty(), "{what}: no result for {id}");
                for c in &mine {
                    let summary = c["summary"].as_str().unwrap();
                    assert!(!summary.contains("panicked"), "{what}: {id}: {summary}");
                }
                // A module directory in /sys/module is itself proof the module is loaded: with empty files
                // the kernel-path checks rightly pass on it.
                let legitimately_passes = ugly == Ugly::Empty && id.ends_with(".kernel_path");
                if !READS_CONTENTS.contains(&id) || legitimately_passes {
                    continue;
                }
                let shown: Vec<String> = mine
                    .iter()
                    .map(|c| format!("{} {}", c["status"], c["summary"]))
                    .collect();
                assert!(
                    mine.iter().all(|c| c["status"] != "pass"),
                    "{what}: {id} passed: {shown:?}"
                );
                if let Some(marker) = ugly.marker() {
                    assert!(
                        mine.iter().any(|c| c.to_string().contains(marker)),
                        "{what}: {id} does not say {marker}: {shown:?}"
                    );
                }
            }
            if scenario == "iommu-translated" {
                assert_ne!(status_of(&report, "pcie.iommu"), "pass", "{what}");
            }
        }
    }
}

#[test]
fn config_space_reads_stop_at_4096_bytes() {
    let dir = copy_scenario("hgx-healthy");
    let mut stack = vec![dir.path().join("sys/devices")];
    let mut grown = 0;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if path.ends_with("config") {
                Ugly::Huge.apply(&path);
                grown += 1;
            }
        }
    }
    assert!(grown > 0);
    let (_, report) = run_json(dir.path(), "generic", &["--only", "pcie.acs"]);
    let acs = result_of(&report, "pcie.acs");
    assert_eq!(acs["status"], "error", "{acs:#}");
    assert!(
        acs.to_string().contains("<larger than 4096 bytes>"),
        "{acs:#}"
    );
}

/// A FIFO where a file should be: a read that waits for a writer would hang the check until its deadline,
/// and the check would say "timed out" (what is asserted, rather than a wall-clock bound).
#[test]
fn fifo_in_the_tree_does_not_block() {
    let dir = copy_scenario("hgx-healthy");
    let modules = dir.path().join("proc/modules");
    std::fs::remove_file(&modules).unwrap();
    mkfifo(&modules);
    let (_, report) = run_json(
        dir.path(),
        "generic",
        &["--only", "driver.nvidia,gdr.kernel_path"],
    );
    for id in ["driver.nvidia", "gdr.kernel_path"] {
        assert!(!result_of(&report, id)["summary"]
            .as_str()
            .unwrap()
            .contains("timed out"));
    }
}

fn ugly_tree() -> tempfile::TempDir {
    let dir = tree(&[
        ("proc/sys/kernel/osrelease", ""),
        ("proc/sys/kernel/hostname", "ugly\n"),
        (
            "proc/cmdline",
            "BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt\n",
        ),
        ("sys/module/nvidia/version", "580.1\n"),
    ]);
    let r = dir.path();
    // 10 MB where a few hundred bytes are expected.
    std::fs::write(r.join("proc/modules"), vec![b'x'; 10 << 20]).unwrap();
    // Not UTF-8.
    std::fs::create_dir_all(r.join("proc/driver/nvidia/gpus/0000:17:00.0")).unwrap();
    std::fs::write(
        r.join("proc/driver/nvidia/version"),
        b"NVRM version: \xff\xfe\x00 Module  5\xc3\n",
    )
    .unwrap();
    // A directory where a file is expected.
    std::fs::create_dir_all(r.join("proc/driver/nvidia/gpus/0000:17:00.0/information")).unwrap();
    // Symlink loops where directories are expected.
    std::fs::create_dir_all(r.join("sys/class")).unwrap();
    symlink("infiniband-b", r.join("sys/class/infiniband")).unwrap();
    symlink("infiniband", r.join("sys/class/infiniband-b")).unwrap();
    std::fs::create_dir_all(r.join("sys/bus/pci")).unwrap();
    symlink("/sys/bus/pci/devices", r.join("sys/bus/pci/devices")).unwrap();
    // A file where a directory is expected.
    std::fs::create_dir_all(r.join("sys/kernel")).unwrap();
    std::fs::write(r.join("sys/kernel/iommu_groups"), "").unwrap();
    std::fs::create_dir_all(r.join("etc/cufile.json")).unwrap();
    // Unreadable (for non-root runs; root reads through it, which is fine too).
    std::fs::create_dir_all(r.join("sys/class/net/eth0")).unwrap();
    std::fs::write(r.join("sys/class/net/eth0/mtu"), "1500\n").unwrap();
    std::fs::set_permissions(
        r.join("sys/class/net/eth0/mtu"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    dir
}

#[test]
fn ugly_tree_gives_evidence_not_panics() {
    let dir = ugly_tree();
    let started = Instant::now();
    let args = skip_active();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for profile in ["generic", "hgx-h100-ib"] {
        let (code, report) = run_json(dir.path(), profile, &args);
        assert!(matches!(code, 1 | 3), "{profile}: exit {code}");
        for c in report["checks"].as_array().unwrap() {
            let summary = c["summary"].as_str().unwrap();
            assert!(!summary.contains("panicked"), "{}: {summary}", c["id"]);
        }
        assert_eq!(status_of(&report, "driver.nvidia"), "error", "{report:#}");
        assert!(result_of(&report, "driver.nvidia")["evidence"]
            .to_string()
            .contains("larger than"));
    }
    // Bounded (10 MB where a few hundred bytes belong): far below this, even on a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "bounded: {:?}",
        started.elapsed()
    );
}

/// Hash of every file, link and directory under `root` (content, link target, mode).
fn fingerprint(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let value = if meta.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                format!("dir {:o}", meta.permissions().mode())
            } else {
                let bytes = std::fs::read(&path).unwrap_or_default();
                format!(
                    "file {:o} {} {:x}",
                    meta.permissions().mode(),
                    bytes.len(),
                    fnv1a(&bytes)
                )
            };
            out.insert(rel, value);
        }
    }
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn a_run_leaves_every_recorded_tree_unchanged() {
    let hosts = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts");
    let Ok(entries) = std::fs::read_dir(&hosts) else {
        return;
    };
    let args = skip_active();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for entry in entries {
        let root = entry.unwrap().path();
        let before = fingerprint(&root);
        let _ = run_json(&root, "generic", &args);
        assert_eq!(before, fingerprint(&root), "run changed {}", root.display());
    }
}

/// The read-only promise end to end: a full run on a copy of a recorded tree (active checks included, their
/// scratch dirs under TMPDIR) and a live `snapshot` change nothing in the tree, leave nothing in TMPDIR or the
/// working directory, and write only into the snapshot directory.
#[test]
fn run_and_snapshot_write_only_the_snapshot_dir() {
    let work = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let fixture = copy_scenario("hgx-healthy");
    let before = fingerprint(fixture.path());
    let out = preflight()
        .current_dir(work.path())
        .env("TMPDIR", tmp.path())
        .args(["run", "--format", "json", "--color", "never", "--root"])
        .arg(fixture.path())
        .output()
        .unwrap();
    assert!(matches!(code(&out), 0 | 1 | 3), "{}", stderr(&out));
    let snap = work.path().join("snap");
    let out = preflight()
        .current_dir(work.path())
        .env("TMPDIR", tmp.path())
        .arg("snapshot")
        .arg(&snap)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        before,
        fingerprint(fixture.path()),
        "the run changed the tree it read"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    let in_work: Vec<String> = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(in_work, ["snap"]);
    assert!(!fingerprint(&snap).is_empty(), "snapshot recorded nothing");
}

/// A replay (a recorded tree with its library answers), active checks included, writes nothing anywhere: no
/// scratch directory in TMPDIR or under `--gds-dir`, nothing in the working or home directory, and none of the
/// directories the user named is created (here they do not exist).
#[test]
fn replay_writes_nothing_and_creates_no_named_directory() {
    let work = tempfile::tempdir().unwrap();
    let missing_gds = work.path().join("no-such-gds-dir");
    let missing_tmp = work.path().join("no-such-tmp");
    for scenario in ["gpu-8x-h100-answers", "h200-gds", "h200-gpu-snapshot"] {
        let fixture = copy_scenario(scenario);
        assert!(fixture.path().join("vendor-answers.json").is_file());
        let before = fingerprint(fixture.path());
        for gds_dir in [None, Some(work.path())] {
            let mut cmd = preflight();
            cmd.current_dir(work.path())
                .env("TMPDIR", &missing_tmp)
                .env("HOME", work.path())
                .args(["run", "--format", "json", "--color", "never", "--root"])
                .arg(fixture.path())
                .arg("--gds-dir")
                .arg(gds_dir.unwrap_or(&missing_gds));
            let out = cmd.output().unwrap();
            assert!(matches!(code(&out), 0 | 1 | 3), "{}", stderr(&out));
            let report = json_out(Schema::Run, &out);
            assert_eq!(report["library_answers"], "recorded");
            let left: Vec<_> = std::fs::read_dir(work.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            assert!(left.is_empty(), "{scenario}: the replay wrote {left:?}");
        }
        assert_eq!(before, fingerprint(fixture.path()), "{scenario} changed");
    }
}

/// Runs the binary live as an unprivileged user (`nobody` without capabilities when the tests run as root):
/// every check, active ones included, either works or says what it lacks; nothing panics.
#[test]
fn unprivileged_live_run_reports_instead_of_crashing() {
    let Some((mut cmd, _bin)) = unprivileged() else {
        eprintln!("skipped: running as root without setpriv, cannot drop privileges");
        return;
    };
    let out = cmd
        .args(["run", "--format", "json", "--color", "never"])
        .output()
        .unwrap();
    let report = json_out(Schema::Run, &out);
    assert!(
        matches!(code(&out), 0 | 1 | 3),
        "exit {}: {}",
        code(&out),
        stderr(&out)
    );
    let all: Vec<&str> = fabric_preflight::probes::all()
        .iter()
        .map(|p| p.id())
        .collect();
    for id in all {
        assert!(
            verdicts(&report).iter().any(|(i, _, _)| i == id),
            "no result for {id}"
        );
    }
    for c in report["checks"].as_array().unwrap() {
        assert!(!c["summary"].as_str().unwrap().contains("panicked"), "{c}");
    }
    assert_ne!(status_of(&report, "rdma.memlock"), "error");
}

/// What an unprivileged process gets on an RDMA/GPU node, from a recorded tree: the kernel hands readers without
/// CAP_SYS_ADMIN only the 64-byte config header (recorded here by cutting every `config` to 64 bytes; under
/// `--root` the files are readable by anyone, so the cut stands in for the kernel), and `nobody` has no
/// CAP_IPC_LOCK. The checks that need those privileges name them.
#[test]
fn unprivileged_run_names_the_privileges_it_lacks() {
    let Some((mut cmd, _bin)) = unprivileged() else {
        eprintln!("skipped: running as root without setpriv, cannot drop privileges");
        return;
    };
    let dir = copy_scenario("hgx-healthy");
    let mut stack = vec![dir.path().join("sys/devices")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if path.ends_with("config") {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..64.min(bytes.len())]).unwrap();
            }
        }
    }
    let out = cmd
        .args(["run", "--format", "json", "--color", "never", "--root"])
        .arg(dir.path())
        .args(skip_active())
        .output()
        .unwrap();
    let report = json_out(Schema::Run, &out);
    for c in report["checks"].as_array().unwrap() {
        assert!(!c["summary"].as_str().unwrap().contains("panicked"), "{c}");
    }

    let acs = result_of(&report, "pcie.acs");
    assert_eq!(acs["status"], "skip", "{acs:#}");
    let summary = acs["summary"].as_str().unwrap();
    assert!(
        summary.contains("needs root") && summary.contains("CAP_SYS_ADMIN"),
        "{summary}"
    );
    // The PCIe tree is still built (roles inferred from the sysfs layout): the other PCIe checks work.
    assert_eq!(status_of_all(&report, "pcie.link"), ["pass"]);
    assert_eq!(status_of_all(&report, "topo.gpu_nic"), ["pass"]);

    let memlock = result_of(&report, "rdma.memlock");
    assert!(
        memlock["evidence"]
            .to_string()
            .contains("CAP_IPC_LOCK = not set"),
        "{memlock:#}"
    );
    // Unlimited memlock needs no privilege; a limited one names the capability that lifts it.
    if memlock["status"] != "pass" {
        assert!(
            memlock["summary"]
                .as_str()
                .unwrap()
                .contains("CAP_IPC_LOCK"),
            "{memlock:#}"
        );
    }
}

/// The distinct statuses of every result of `id`.
fn status_of_all(report: &serde_json::Value, id: &str) -> Vec<String> {
    let mut s: Vec<String> = verdicts(report)
        .into_iter()
        .filter(|(i, _, _)| i == id)
        .map(|(_, _, s)| s)
        .collect();
    s.dedup();
    s
}

/// A short run that passes on `hgx-healthy`: `run --only driver.nvidia --root`, the tree next.
const SHORT_RUN: [&str; 6] = [
    "run",
    "--color",
    "never",
    "--only",
    "driver.nvidia",
    "--root",
];

/// [`SHORT_RUN`] on `hgx-healthy` with `extra`, killed (and the test failed) past 60 s.
fn run_bounded(extra: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut child = preflight()
        .args(SHORT_RUN)
        .arg(host("hgx-healthy"))
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("binary starts");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the run did not end within 60 s: {extra:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
}

/// Reproduced: `--output` naming a FIFO nobody reads blocked at start-up (the writability check opened it and
/// waited for a reader). Now the run goes on and the report it cannot hand over is lost output: exit 3, naming
/// the FIFO.
#[test]
fn fifo_output_without_a_reader_neither_hangs_nor_passes() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("report.fifo");
    mkfifo(&fifo);
    let spec = format!("json={}", fifo.display());
    let out = run_bounded(&["--output".as_ref(), spec.as_ref()]);
    assert_eq!(code(&out), Exit::COULD_NOT_RUN, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{}: no process has this FIFO open for reading",
            fifo.display()
        )),
        "{}",
        stderr(&out)
    );
}

/// Reproduced: a reader waiting on the FIFO got an empty report (the start-up check opened and closed it).
#[test]
fn fifo_output_with_a_reader_gets_the_whole_report() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("report.fifo");
    mkfifo(&fifo);
    let reading = fifo.clone();
    // Opening for reading waits for a writer; then it reads until the writer closes.
    let reader = std::thread::spawn(move || std::fs::read(reading).unwrap());
    // The reader is in open() before the run gets to its report (the open waits; the run takes far longer).
    std::thread::sleep(Duration::from_millis(100));
    let spec = format!("json={}", fifo.display());
    let out = run_bounded(&["--output".as_ref(), spec.as_ref()]);
    assert_ne!(code(&out), Exit::COULD_NOT_RUN, "{}", stderr(&out));
    let report = json(Schema::Run, &reader.join().unwrap());
    assert_eq!(status_of(&report, "driver.nvidia"), "pass");
}

/// Reproduced: the termination log was rewritten in place, so a reader holding it (the kubelet) could see it
/// half written. It is replaced whole, like the reports.
#[test]
fn termination_log_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("termination-log");
    std::fs::write(&log, "previous run\n").unwrap();
    let held = std::fs::File::open(&log).unwrap();
    let out = run_bounded(&["--termination-log".as_ref(), log.as_os_str()]);
    assert_eq!(code(&out), Exit::OK, "{}", stderr(&out));
    assert_eq!(std::io::read_to_string(held).unwrap(), "previous run\n");
    let written = std::fs::read_to_string(&log).unwrap();
    assert!(written.starts_with("fabric-preflight PASS"), "{written}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["termination-log"], "a temporary file was left");
}

/// Kubernetes bind-mounts the termination log into the container: a rename onto a mount point fails (EBUSY), so
/// there the log is written in place. Runs the binary in a private mount namespace (`unshare`), where the bind
/// mount is made; fails loudly where mount namespaces are not allowed.
#[test]
fn bind_mounted_termination_log_is_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("termination-log");
    let outside = dir.path().join("outside");
    std::fs::write(&log, "").unwrap();
    std::fs::write(&outside, "previous run\n").unwrap();
    let out = Command::new("unshare")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["--map-root-user", "--mount", "sh", "-c"])
        .arg(r#"mount --bind "$1" "$2" && shift 2 && exec "$@""#)
        .arg("sh")
        .args([&outside, &log])
        .arg(bin())
        .args(SHORT_RUN)
        .arg(host("hgx-healthy"))
        .arg("--termination-log")
        .arg(&log)
        .output()
        .expect("this test needs unshare (util-linux)");
    let err = stderr(&out);
    assert!(
        !err.starts_with("unshare:") && !err.starts_with("mount:"),
        "this test needs mount namespaces (`unshare --map-root-user --mount`): {err}"
    );
    assert_eq!(code(&out), Exit::OK, "{err}");
    let written = std::fs::read_to_string(&outside).unwrap();
    assert!(written.starts_with("fabric-preflight PASS"), "{written}");
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["outside", "termination-log"],
        "a temporary file was left"
    );
}
