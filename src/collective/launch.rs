//! Starting the job's COMMAND and bounding it: its own process group (so `--timeout` and SIGTERM end the
//! launcher and whatever it started; Slurm ends the step when `srun` dies), its stdout and stderr merged into
//! one file, the NCCL environment on top of this process's.

use std::ffi::OsString;
use std::fs::File;
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
}

/// Runs the command to its end, its deadline, or a stopping signal.
pub fn run(launch: &Launch<'_>) -> Ran {
    let started = Instant::now();
    let not_started = |why: String| Ran {
        ending: Ending::NotStarted(why),
        elapsed: started.elapsed(),
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
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
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
    if stopped.is_some() {
        end_group(pid);
    }
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
    Ran {
        ending,
        elapsed: started.elapsed(),
    }
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

/// SIGTERM to the group, then SIGKILL when the leader is still there after the grace period.
fn end_group(pid: libc::pid_t) {
    signal_group(pid, libc::SIGTERM);
    let asked = Instant::now();
    while asked.elapsed() < GRACE {
        if exited(pid).unwrap_or(true) {
            return;
        }
        std::thread::sleep(POLL);
    }
    signal_group(pid, libc::SIGKILL);
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

    #[test]
    fn output_env_and_exit_status_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.log");
        let ran = sh(
            "echo out $FP_TEST_VALUE; echo err >&2; exit 3",
            Duration::from_secs(10),
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
        let ran = sh(&script, Duration::from_millis(500), &out);
        assert_eq!(ran.ending, Ending::TimedOut);
        assert!(ran.elapsed < Duration::from_secs(10), "{:?}", ran.elapsed);
        let rank: libc::pid_t = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Gone, or a zombie its new parent has not reaped yet (not every container's init reaps).
        let gone = (0..100).any(|_| {
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
            sh(script, Duration::from_secs(10), &out).ending,
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
