//! Hostile and careless inputs and environments (issue 29): every one ends in bounded time and memory with a
//! clear answer, never a hang, a write through a link, or a pass on data that was not read. One module per area;
//! [`bounded`] runs the binary and measures what it took.

mod collective;
mod nccl;
mod output;
mod pair;
mod profile;
mod tree;

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The most memory any input may cost the tool.
pub const MAX_RSS_KIB: i64 = 64 << 10;

/// What a bounded run gave and cost.
pub struct Bounded {
    pub out: Output,
    /// CPU time (user + system) of the run and the children it waited for: the work an input cost. Tests bound
    /// this, not wall time: on a loaded machine wall time grows with other processes' load, CPU time does not.
    /// A hang costs no CPU; the wall-clock `limit` of [`bounded`] catches it.
    pub cpu: Duration,
}

/// The most CPU time a hostile input may cost a run (the debug build included): what used to take minutes
/// (a link to `/dev/zero` read to its end, 100k levels of YAML) is refused in milliseconds.
pub const QUICK_CPU: Duration = Duration::from_secs(1);

/// Wall-clock limit for runs that must not hang: generous, so that a loaded machine never reaches it.
pub const HANG_LIMIT: Duration = Duration::from_secs(60);

/// A launcher in C: runs `argv[2..]` as a forked child in its own process group and writes the child's peak
/// RSS (KiB) and CPU time (user and system, microseconds) to `argv[1]`. Measured this way because a child spawned straight from the test harness inherits
/// the harness's own high-water mark in `ru_maxrss` (the kernel keeps the largest image a process had before
/// `exec`); a child forked from this small launcher starts from the launcher's.
const PEAK_C: &str = r#"
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    setpgid(0, 0);
    pid_t pid = fork();
    if (pid == 0) { execvp(argv[2], argv + 2); _exit(127); }
    int status; struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return 126;
    FILE *f = fopen(argv[1], "w");
    fprintf(f, "%ld %ld %ld\n", ru.ru_maxrss,
            ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec, ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec);
    fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
"#;

fn peak_launcher() -> &'static Path {
    static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();
    LAUNCHER.get_or_init(|| {
        let dir = crate::faults::shims(&[]).keep();
        let src = dir.join("peak.c");
        std::fs::write(&src, PEAK_C).unwrap();
        let bin = dir.join("peak");
        let out = Command::new("cc")
            .args(["-O1", "-w", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("the hostile-input tests need a C compiler (`cc`)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
}

/// Runs `cmd` to its end, killing it (and failing the test) past `limit`; asserts its peak RSS stays under
/// [`MAX_RSS_KIB`]. Output goes to files, so a chatty child cannot block on a full pipe.
pub fn bounded(cmd: &mut Command, limit: Duration) -> Bounded {
    let measured = tempfile::NamedTempFile::new().unwrap();
    let mut launched = Command::new(peak_launcher());
    launched
        .arg(measured.path())
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env_clear()
        .envs(
            cmd.get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
        );
    if let Some(dir) = cmd.get_current_dir() {
        launched.current_dir(dir);
    }
    let out_file = tempfile::tempfile().unwrap();
    let err_file = tempfile::tempfile().unwrap();
    let mut child = launched
        .stdin(Stdio::null())
        .stdout(out_file.try_clone().unwrap())
        .stderr(err_file.try_clone().unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            // SAFETY: the launcher's own process group (it called setpgid before forking).
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |mut f: std::fs::File| {
        let mut buf = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut buf).unwrap();
        buf
    };
    let out = Output {
        status,
        stdout: read(out_file),
        stderr: read(err_file),
    };
    let measures: Vec<i64> = std::fs::read_to_string(measured.path())
        .unwrap()
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let [max_rss_kib, user_us, system_us] = measures[..] else {
        panic!(
            "{cmd:?}: no peak RSS and CPU time measured; {}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert!(
        max_rss_kib < MAX_RSS_KIB,
        "{cmd:?} peaked at {max_rss_kib} KiB RSS"
    );
    Bounded {
        out,
        cpu: Duration::from_micros((user_us + system_us) as u64),
    }
}

/// `mkfifo path`.
pub fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {path:?}"
    );
}
