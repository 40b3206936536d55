//! Starting the job's COMMAND and bounding it: its own process group (so `--timeout` and SIGTERM end the
//! launcher and whatever it started; Slurm ends the step when `srun` dies), its stdout and stderr merged into
//! one file, the NCCL environment on top of this process's.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::child::{exited, own_group_tied_to_parent, signal_group};
use crate::interrupt;

/// How long the group has after SIGTERM (mpirun and srun pass it on to their ranks) before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// What to start.
pub struct Launch<'a> {
    pub argv: &'a [OsString],
    /// Set on top of the inherited environment.
    pub env: &'a [(String, String)],
    /// Receives the command's stdout and stderr, interleaved as written.
    pub output: &'a Path,
    pub timeout: Duration,
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    /// Died of this signal on its own (a crash, or a kill from outside).
    Signaled(i32),
    /// Still running at `--timeout`: its group was ended.
    TimedOut,
    /// This process got SIGTERM/SIGINT: the group was ended.
    Interrupted(&'static str),
    /// It could not be started (not found, not executable).
    NotStarted(String),
}

#[derive(Debug, Clone)]
pub struct Ran {
    pub ending: Ending,
    pub elapsed: Duration,
    /// How this process ended the group (at the timeout or on SIGTERM/SIGINT); None when it ended by itself.
    pub stopped: Option<Stopped>,
    /// Processes the COMMAND started outside its group (`setsid`, a double fork) still running after it ended,
    /// as `pid 4711 (name)`: ended by this process, and never a clean run.
    pub survivors: Vec<String>,
}

/// When and how the COMMAND's process group was ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// Since the start, when SIGTERM was sent (the timeout, or when the signal arrived).
    pub at: Duration,
    /// Still running after the grace period: killed with SIGKILL.
    pub killed: bool,
}

impl Stopped {
    /// `SIGTERM ended its process group`, or that it ignored SIGTERM for the grace period and when it was killed.
    pub fn describe(&self, elapsed: Duration) -> String {
        if self.killed {
            format!(
                "it ignored SIGTERM for the {} s grace period and its process group was killed (SIGKILL) at {} s",
                GRACE.as_secs(),
                crate::child::fmt_secs(elapsed)
            )
        } else {
            "SIGTERM ended its process group".into()
        }
    }
}

/// Names the job's processes wherever they end up: a daemon that leaves the group keeps its environment.
const JOB_MARKER: &str = "FABRIC_PREFLIGHT_COLLECTIVE_JOB";
/// How long processes left behind get after SIGTERM before SIGKILL.
const SURVIVOR_GRACE: Duration = Duration::from_secs(1);

/// Runs the command to its end, its deadline, or a stopping signal.
pub fn run(launch: &Launch<'_>) -> Ran {
    let started = Instant::now();
    let not_started = |why: String| Ran {
        ending: Ending::NotStarted(why),
        elapsed: started.elapsed(),
        stopped: None,
        survivors: vec![],
    };
    let Some((program, args)) = launch.argv.split_first() else {
        return not_started("no COMMAND given".into());
    };
    let out = match fresh_append(launch.output) {
        Ok(f) => f,
        Err(e) => return not_started(format!("cannot create {}: {e}", launch.output.display())),
    };
    let err = match out.try_clone() {
        Ok(f) => f,
        Err(e) => return not_started(format!("cannot share {}: {e}", launch.output.display())),
    };
    // Orphans of the job (a daemon's double fork) become this process's children instead of init's, so that
    // they are found and reaped below.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    let marker = format!("{}.{}", std::process::id(), started.elapsed().as_nanos());
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .env(JOB_MARKER, &marker)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    own_group_tied_to_parent(&mut command);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return not_started(format!("cannot start {}: {e}", program.to_string_lossy())),
    };
    let pid = child.id() as libc::pid_t;
    let stopped = loop {
        match exited(pid) {
            Ok(true) => break None,
            Ok(false) => {}
            Err(_) => break Some(Ending::TimedOut),
        }
        if let Some(signal) = interrupt::requested() {
            break Some(Ending::Interrupted(signal));
        }
        if started.elapsed() >= launch.timeout {
            break Some(Ending::TimedOut);
        }
        std::thread::sleep(POLL);
    };
    let group_ended = stopped.as_ref().map(|_| Stopped {
        at: started.elapsed(),
        killed: end_group(pid),
    });
    // Whatever the leader left running in its group goes with it (it is not reaped yet: the id is still ours).
    signal_group(pid, libc::SIGKILL);
    let status = child.wait();
    let ending = match (stopped, status) {
        (Some(ending), _) => ending,
        (None, Ok(s)) => {
            use std::os::unix::process::ExitStatusExt;
            match (s.code(), s.signal()) {
                (Some(code), _) => Ending::Exited(code),
                (None, Some(signal)) => Ending::Signaled(signal),
                (None, None) => Ending::Exited(-1),
            }
        }
        (None, Err(e)) => Ending::NotStarted(format!(
            "cannot wait for {}: {e}",
            program.to_string_lossy()
        )),
    };
    let survivors = end_survivors(&marker);
    Ran {
        ending,
        elapsed: started.elapsed(),
        stopped: group_ended,
        survivors,
    }
}

/// Ends the processes the job left running outside its group, found by [`JOB_MARKER`] in their environment
/// or by having been handed to this process (the subreaper) when their parent died: SIGTERM, then SIGKILL
/// after [`SURVIVOR_GRACE`]; reaps those that are this process's children. Returns them as `pid N (name)`.
fn end_survivors(marker: &str) -> Vec<String> {
    let found = job_processes(marker);
    for (pid, _) in &found {
        // SAFETY: kill(2) with a pid just read from /proc.
        unsafe { libc::kill(*pid, libc::SIGTERM) };
    }
    let asked = Instant::now();
    while asked.elapsed() < SURVIVOR_GRACE && found.iter().any(|(pid, _)| running(*pid)) {
        std::thread::sleep(POLL);
    }
    for (pid, _) in &found {
        // SAFETY: as above; a process already gone makes this ESRCH.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
            libc::waitpid(*pid, std::ptr::null_mut(), 0);
        }
    }
    found
        .into_iter()
        .map(|(pid, name)| format!("pid {pid} ({name})"))
        .collect()
}

/// Whether `pid` still runs: a zombie waiting for its parent counts as ended.
fn running(pid: libc::pid_t) -> bool {
    // SAFETY: waitpid with WNOHANG on a pid that may or may not be our child (ECHILD then).
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    proc_stat(pid).is_some_and(|(_, state)| state != 'Z')
}

/// `/proc/<pid>/stat`'s name and state.
fn proc_stat(pid: libc::pid_t) -> Option<(String, char)> {
    let stat = crate::input::read_text(Path::new(&format!("/proc/{pid}/stat")), 4096).ok()?;
    let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((name.to_string(), state))
}

/// The live processes carrying `marker` in their environment, by pid. (Those handed to this process as their
/// subreaper are found the same way: other children of this process may be running, and are not the job's.)
fn job_processes(marker: &str) -> Vec<(libc::pid_t, String)> {
    /// Enough for any environment that holds the marker early; the marker is set last but NCCL's and the
    /// launcher's variables come before it.
    const MAX_ENVIRON_BYTES: u64 = 1 << 20;
    let me = std::process::id() as libc::pid_t;
    let needle = format!("{JOB_MARKER}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let mut found: Vec<(libc::pid_t, String)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let (name, state) = proc_stat(pid)?;
            // A zombie is left to its waiter: it may be another child of this process (a concurrent job's, a
            // thread's `Command`), whose exit status reaping here would steal.
            if state == 'Z' {
                return None;
            }
            let environ = std::fs::File::open(format!("/proc/{pid}/environ")).ok();
            let carries = environ.is_some_and(|f| {
                let mut bytes = Vec::new();
                let _ = std::io::Read::take(f, MAX_ENVIRON_BYTES).read_to_end(&mut bytes);
                bytes.split(|&b| b == 0).any(|v| v == needle.as_bytes())
            });
            carries.then_some((pid, name))
        })
        .collect();
    found.sort();
    found
}

/// A new, empty file opened for appending: every write lands at its end, also from a rank that reopens
/// `/dev/stdout` (its own file description) beside the ones sharing the launcher's.
fn fresh_append(path: &Path) -> std::io::Result<File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(path)
}

/// SIGTERM to the group, then SIGKILL when the leader is still there after the grace period. Whether SIGKILL
/// was needed.
fn end_group(pid: libc::pid_t) -> bool {
    signal_group(pid, libc::SIGTERM);
    let asked = Instant::now();
    while asked.elapsed() < GRACE {
        if exited(pid).unwrap_or(true) {
            return false;
        }
        std::thread::sleep(POLL);
    }
    signal_group(pid, libc::SIGKILL);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Duration, output: &Path) -> Ran {
        let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
        run(&Launch {
            argv: &argv,
            env: &[("FP_TEST_VALUE".into(), "set".into())],
            output,
            timeout,
        })
    }

    /// Looking for a job's survivors never reaps another child of this process: two jobs at once (isolate's
    /// groups, parallel tests) each get their own exit status. A zombie child of this process that is not the
    /// job's is left for its own `wait`.
    #[test]
    fn looking_for_survivors_leaves_other_children_to_their_waiters() {
        for code in [0, 7, 42] {
            let mut other = std::process::Command::new("sh")
                .args(["-c", &format!("exit {code}")])
                .spawn()
                .unwrap();
            let pid = other.id() as libc::pid_t;
            while proc_stat(pid).is_some_and(|(_, state)| state != 'Z') {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(job_processes("no-such-marker").is_empty());
            assert_eq!(other.wait().unwrap().code(), Some(code));
        }
    }

    #[test]
    fn output_env_and_exit_status_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.log");
        let ran = sh(
            "echo out $FP_TEST_VALUE; echo err >&2; exit 3",
            Duration::from_secs(60),
            &out,
        );
        assert_eq!(ran.ending, Ending::Exited(3));
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("out set") && text.contains("err"), "{text}");
    }

    /// The deadline ends the launcher and the ranks it started (a background `sleep` here), SIGTERM first.
    #[test]
    fn the_deadline_ends_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.log");
        let marker = dir.path().join("rank.pid");
        let script = format!("sleep 30 & echo $! > {}; wait", marker.display());
        // Long enough for `sh` to start the rank and note it on a loaded machine; well before `sleep 30` ends.
        let ran = sh(&script, Duration::from_secs(5), &out);
        assert_eq!(ran.ending, Ending::TimedOut);
        assert!(ran.elapsed < Duration::from_secs(20), "{:?}", ran.elapsed);
        let rank: libc::pid_t = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Gone, or a zombie its new parent has not reaped yet (not every container's init reaps); a killed
        // process may take a while to exit on a loaded machine.
        let gone = (0..6000).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            match std::fs::read_to_string(format!("/proc/{rank}/stat")) {
                Err(_) => true,
                Ok(stat) => stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z')),
            }
        });
        assert!(gone, "the rank {rank} outlived the deadline");
    }

    /// Reproduced: a rank that reopened /dev/stdout (`>>/dev/stdout`) overwrote the lines of ranks writing
    /// through the inherited descriptor, and the other way round.
    #[test]
    fn writers_through_reopened_stdout_do_not_overwrite_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.log");
        std::fs::write(&out, "an older run's output that must go\n").unwrap();
        let script = "for i in 1 2 3; do echo inherited$i; echo reopened$i >>/dev/stdout; done";
        assert_eq!(
            sh(script, Duration::from_secs(60), &out).ending,
            Ending::Exited(0)
        );
        let text = std::fs::read_to_string(&out).unwrap();
        for i in 1..=3 {
            assert!(
                text.contains(&format!("inherited{i}")) && text.contains(&format!("reopened{i}")),
                "{text}"
            );
        }
        assert!(!text.contains("older run"), "{text}");
    }

    #[test]
    fn a_missing_program_is_not_started() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<OsString> = vec!["/nonexistent/all_reduce_perf".into()];
        let ran = run(&Launch {
            argv: &argv,
            env: &[],
            output: &dir.path().join("o"),
            timeout: Duration::from_secs(1),
        });
        assert!(
            matches!(ran.ending, Ending::NotStarted(ref why) if why.contains("all_reduce_perf"))
        );
    }
}
