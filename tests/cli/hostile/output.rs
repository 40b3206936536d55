//! Where reports go: never written through a link, never two reports into one file under two spellings, never
//! into a kernel pseudo-file, a lost snapshot is exit 3, and no control character from the host, a profile or
//! the command line reaches a terminal raw.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use super::{bounded, mkfifo, Bounded, HANG_LIMIT, QUICK_CPU};
use crate::util::*;

/// `run` of one quick check on an empty tree, with `extra`.
fn run_short(cmd: &mut Command, root: &Path, extra: &[&std::ffi::OsStr]) -> Output {
    run_measured(cmd, root, extra).out
}

/// [`run_short`], measured: runs that refuse before any check must do so at once (within [`QUICK_CPU`]).
fn run_measured(cmd: &mut Command, root: &Path, extra: &[&std::ffi::OsStr]) -> Bounded {
    cmd.args([
        "run",
        "--color",
        "never",
        "--only",
        "driver.nvidia",
        "--root",
    ])
    .arg(root)
    .args(extra);
    bounded(cmd, HANG_LIMIT)
}

fn empty_tree() -> tempfile::TempDir {
    tree(&[("proc/modules", "")])
}

/// Class 8: where a report cannot be renamed into place (a directory this user may not write), it is written in
/// place, but never through a symlink, and a hard link (one file under two names) is written as the file it is.
#[test]
fn in_place_writes_never_follow_a_link() {
    let root = empty_tree();
    for flag in ["--output", "--termination-log"] {
        let (mut cmd, _bin) = crate::robustness::unprivileged()
            .expect("root without setpriv (util-linux): cannot test as an unprivileged user");
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o666)).unwrap();
        let link = dir.path().join("report");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let hard = dir.path().join("hard");
        std::fs::write(&hard, "old").unwrap();
        std::fs::set_permissions(&hard, std::fs::Permissions::from_mode(0o666)).unwrap();
        let hard_other = dir.path().join("hard-other-name");
        std::fs::hard_link(&hard, &hard_other).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
        let out = run_short(&mut cmd, root.path(), &[flag.as_ref(), link.as_os_str()]);
        let hard_out = {
            let (mut cmd, _bin) = crate::robustness::unprivileged().unwrap();
            run_short(&mut cmd, root.path(), &[flag.as_ref(), hard.as_os_str()])
        };
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "keep",
            "{flag}: written through the link"
        );
        assert_eq!(code(&out), Exit::COULD_NOT_RUN, "{flag}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("symbolic link"),
            "{flag}: {}",
            stderr(&out)
        );
        assert!(
            matches!(code(&hard_out), 0 | 1),
            "{flag}: {}",
            stderr(&hard_out)
        );
        assert_ne!(
            std::fs::read_to_string(&hard_other).unwrap(),
            "old",
            "{flag}"
        );
    }
}

/// Class 9: two outputs, or an output and the termination log, that name one file however spelled.
#[test]
fn one_file_under_two_spellings_is_a_usage_error() {
    let root = empty_tree();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("exists.json"), "").unwrap();
    std::os::unix::fs::symlink("exists.json", dir.path().join("link.json")).unwrap();
    std::fs::hard_link(dir.path().join("exists.json"), dir.path().join("hard.json")).unwrap();
    let absolute = dir.path().join("b.json").display().to_string();
    let pairs: [[&str; 4]; 6] = [
        ["--output", "json=b.json", "--output", "junit=./b.json"],
        ["--output", "json=b.json", "--output", "junit=sub/../b.json"],
        [
            "--output",
            "json=b.json",
            "--output",
            &format!("junit={absolute}"),
        ],
        [
            "--output",
            "json=exists.json",
            "--output",
            "junit=link.json",
        ],
        [
            "--output",
            "json=exists.json",
            "--output",
            "junit=hard.json",
        ],
        ["--output", "json=b.json", "--termination-log", "./b.json"],
    ];
    for args in pairs {
        let mut cmd = preflight();
        cmd.current_dir(dir.path());
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let run = run_measured(&mut cmd, root.path(), &args);
        let out = &run.out;
        assert_eq!(code(out), Exit::USAGE, "{args:?}: {}", stderr(out));
        assert!(
            stderr(out).contains("name one file"),
            "{args:?}: {}",
            stderr(out)
        );
        assert!(out.stdout.is_empty(), "{args:?}: a check ran");
        assert!(run.cpu < QUICK_CPU, "{args:?}: {:?} of CPU", run.cpu);
        // Only the termination log gets the usage error.
        let written = std::fs::read_to_string(dir.path().join("b.json")).unwrap_or_default();
        assert!(!written.contains('{'), "{args:?}: a report was written");
    }
}

/// Class 10: kernel pseudo-files, new files in kernel directories, block devices and sockets are refused before
/// any check runs; FIFOs and character devices (`/dev/null`, a pipe behind `/dev/stdout`) stay streams.
#[test]
fn kernel_files_and_non_streams_are_refused_before_any_check_runs() {
    let root = empty_tree();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let socket = socket.display().to_string();
    // A block device node of our own (the loop device's numbers), where this container may make one.
    let block = dir.path().join("block");
    let c_block = std::ffi::CString::new(block.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; mknod only creates the node.
    let made = unsafe { libc::mknod(c_block.as_ptr(), libc::S_IFBLK | 0o600, libc::makedev(7, 0)) };
    let block = if made == 0 {
        block.display().to_string()
    } else {
        socket.clone()
    };
    for flag in ["--output", "--termination-log"] {
        for path in [
            "/proc/version",
            "/proc/self/status",
            "/proc/sys/kernel/new-report.json",
            // Refused before it is opened: were it not, the test itself would write into the kernel.
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "/sys/kernel/new-report.json",
            &block,
            &socket,
        ] {
            if !Path::new(path).parent().unwrap().exists() {
                continue;
            }
            let run = run_measured(
                &mut preflight(),
                root.path(),
                &[flag.as_ref(), path.as_ref()],
            );
            let out = &run.out;
            assert_eq!(code(out), Exit::USAGE, "{flag} {path}: {}", stderr(out));
            assert!(stderr(out).contains(path), "{}", stderr(out));
            assert!(out.stdout.is_empty(), "{flag} {path}: a check ran");
            assert!(run.cpu < QUICK_CPU, "{flag} {path}: {:?} of CPU", run.cpu);
        }
    }
    // Streams still work: /dev/null, and /dev/stdout when stdout is a pipe with nothing else on it.
    let out = run_short(
        &mut preflight(),
        root.path(),
        &["--output".as_ref(), "json=/dev/null".as_ref()],
    );
    assert!(matches!(code(&out), 0 | 1), "{}", stderr(&out));
    let out = run_short(
        &mut preflight(),
        root.path(),
        &[
            "--format".as_ref(),
            "json".as_ref(),
            "--output".as_ref(),
            "/dev/stdout".as_ref(),
        ],
    );
    assert!(matches!(code(&out), 0 | 1), "{}", stderr(&out));
    json(Schema::Run, &out.stdout);
    assert!(
        std::fs::symlink_metadata("/dev/stdout")
            .unwrap()
            .is_symlink(),
        "/dev/stdout was replaced"
    );
    // Another descriptor's name (stderr, a file here) is written to, not renamed over.
    let out = run_short(
        &mut preflight(),
        root.path(),
        &["--termination-log".as_ref(), "/dev/stderr".as_ref()],
    );
    assert!(
        stderr(&out).starts_with("fabric-preflight PASS"),
        "{}",
        stderr(&out)
    );
    assert!(
        std::fs::symlink_metadata("/dev/stderr")
            .unwrap()
            .is_symlink(),
        "/dev/stderr was replaced"
    );
    let fifo = dir.path().join("f");
    mkfifo(&fifo);
    // A FIFO nobody reads: the run happens, the report is lost (exit 3), nothing waits.
    let out = run_short(
        &mut preflight(),
        root.path(),
        &["--output".as_ref(), fifo.as_os_str()],
    );
    assert_eq!(code(&out), Exit::COULD_NOT_RUN, "{}", stderr(&out));
}

/// `snapshot DIR` with files larger than `max_bytes` failing to write (EFBIG, as a full disk fails).
fn snapshot_with_file_size_limit(dir: &Path, max_bytes: u64) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = preflight();
    cmd.args(["snapshot", "--only", "driver.nvidia,rdma.memlock,pcie.link"])
        .arg(dir);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: max_bytes,
                rlim_max: max_bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

/// Class 11: a snapshot that could not be written is "could not run" (exit 3), never "usage" (exit 2), and
/// keeps nothing, whether the first file, a later one, or the vendor answers file failed.
#[test]
fn a_snapshot_that_cannot_be_written_is_exit_3_and_keeps_nothing() {
    let whole = tempfile::tempdir().unwrap();
    let snap = whole.path().join("snap");
    let out = snapshot_with_file_size_limit(&snap, u64::MAX);
    assert!(matches!(code(&out), 0 | 1 | 3), "{}", stderr(&out));
    let mut sizes: Vec<u64> = walk(&snap);
    sizes.sort();
    assert!(!sizes.is_empty());
    // Every file too large; all but the largest fit; only the answers file (the last written) too large.
    let largest = *sizes.last().unwrap();
    let mut limits = vec![1, largest.saturating_sub(1).max(1)];
    limits.dedup();
    for limit in limits {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let out = snapshot_with_file_size_limit(&snap, limit);
        assert_eq!(
            code(&out),
            Exit::COULD_NOT_RUN,
            "limit {limit}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("nothing kept"), "{}", stderr(&out));
        assert!(!snap.exists(), "limit {limit}: a partial snapshot was kept");
    }
}

fn walk(dir: &Path) -> Vec<u64> {
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let meta = std::fs::symlink_metadata(entry.as_ref().unwrap().path()).unwrap();
        if meta.is_dir() {
            sizes.extend(walk(&entry.unwrap().path()));
        } else if meta.is_file() && meta.len() > 0 {
            sizes.push(meta.len());
        }
    }
    sizes
}

/// Control characters (C0, DEL, C1) that move the cursor, erase lines, ring or rewrite.
const HOSTILE: [&str; 6] = [
    "\x1b[1A\x1b[2K",
    "\u{9b}2K",
    "\u{85}",
    "\x07",
    "\x08\x08",
    "\rPASS",
];

/// Class 15: no human rendering passes a control character through from a profile name or `--node-name`.
#[test]
fn human_renderings_show_control_characters_as_escapes() {
    let root = empty_tree();
    for hostile in HOSTILE {
        let name = format!("evil{hostile}name");
        // YAML takes control characters only as escapes.
        let yaml_name: String = name
            .chars()
            .map(|c| {
                if c.is_control() {
                    format!("\\u{:04x}", u32::from(c))
                } else {
                    c.to_string()
                }
            })
            .collect();
        let yaml_name = format!("\"{yaml_name}\"");
        let profile = tree(&[("p.yaml", &format!("name: {yaml_name}\nextends: generic\n"))]);
        let profile = profile.path().join("p.yaml");
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("termination-log");
        for format in ["table", "npd"] {
            let out = run_short(
                &mut preflight(),
                root.path(),
                &[
                    "--format".as_ref(),
                    format.as_ref(),
                    "--node-name".as_ref(),
                    name.as_ref(),
                    "--profile".as_ref(),
                    profile.as_os_str(),
                    "--termination-log".as_ref(),
                    log.as_os_str(),
                ],
            );
            let shown = stdout(&out);
            let written = std::fs::read_to_string(&log).unwrap();
            for text in [&shown, &written] {
                assert!(
                    text.contains("evil\\"),
                    "{format} {hostile:?}: {text:?}\n{}",
                    stderr(&out)
                );
                assert!(
                    !text.chars().any(|c| c.is_control() && c != '\n'),
                    "{format} {hostile:?}: {text:?}"
                );
            }
        }
    }
}

/// Class 15, the views: host names from an NCCL log reach `nccl`'s table as escapes.
#[test]
fn nccl_view_shows_control_characters_in_a_log_as_escapes() {
    let log = std::fs::read_to_string(testdata("nccl/mixed-socket-one-bad-node.log")).unwrap();
    for hostile in HOSTILE {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nccl.log");
        std::fs::write(&path, log.replace("gpu-a02", &format!("gpu{hostile}a02"))).unwrap();
        let mut cmd = preflight();
        cmd.env("COLUMNS", "200").arg("nccl").arg(&path);
        let shown = stdout(&bounded(&mut cmd, HANG_LIMIT).out);
        assert!(shown.contains("a02"), "{hostile:?}: {shown}");
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\n'),
            "{hostile:?}: {shown:?}"
        );
    }
}
