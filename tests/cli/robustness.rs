//! Ugly input and the read-only promise: a hostile `--root` tree produces evidence, never a panic or an
//! unbounded read, and a run changes nothing in the tree it reads.

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use super::util::*;

/// Checks that move data or need a scratch dir are left out: they are about the machine, not the tree.
const ACTIVE: &str = "gpu.copy_bandwidth,gds.read,gdr.loopback";

fn skip_active() -> Vec<String> {
    let known = stdout(&preflight().arg("list").output().unwrap());
    let present: Vec<&str> = ACTIVE.split(',').filter(|id| known.contains(id)).collect();
    if present.is_empty() {
        vec![]
    } else {
        vec!["--skip".into(), present.join(",")]
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
    assert!(
        started.elapsed() < Duration::from_secs(20),
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

/// Runs the binary as `nobody` (when the tests run as root and `setpriv` exists): every check either works or
/// says which privilege it lacks; nothing panics.
#[test]
fn unprivileged_run_reports_instead_of_crashing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0
        || std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!("skipped: needs root and setpriv to drop to nobody");
        return;
    }
    let args = skip_active();
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(bin())
        .args(["run", "--format", "json", "--color", "never"])
        .args(&args)
        .env_clear()
        .output()
        .unwrap();
    let text = stdout(&out);
    let report: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text}\n{}", stderr(&out)));
    assert!(
        matches!(code(&out), 0 | 1 | 3),
        "exit {}: {}",
        code(&out),
        stderr(&out)
    );
    for c in report["checks"].as_array().unwrap() {
        assert!(!c["summary"].as_str().unwrap().contains("panicked"), "{c}");
    }
    assert_ne!(status_of(&report, "rdma.memlock"), "error");
}
