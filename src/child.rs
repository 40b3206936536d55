//! Running a job in a child process of this binary, so that a vendor library that hangs or crashes is killed
//! at the deadline instead of taking the caller down, and so that libraries which print on stdout (libcufile
//! does) cannot corrupt a reply. Nothing here knows a probe or a port: a [`Job`] names the hidden subcommand that
//! serves it and the reply it gets.
//!
//! Protocol: the parent writes the job as JSON on the child's stdin; the child moves its own stdout onto stderr,
//! does the work, and writes the reply on the original stdout. Before each library call the work leaves a
//! [`breadcrumb`] on stderr, so a timeout can name the call that never returned. The child runs in a process
//! group of its own (killed whole at the deadline) and dies with its parent.

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::interrupt;
use crate::model::{common, FindingCode};

/// A job for a child process: the hidden subcommand of this binary that serves it, and what it answers.
pub trait Job: Serialize + DeserializeOwned {
    /// `__probe`, `__pair`: the subcommand `main.rs` dispatches to the job's server.
    const SUBCOMMAND: &'static str;
    type Reply: Serialize + DeserializeOwned;
}

const BREADCRUMB_PREFIX: &str = "fabric-preflight:calling:";
/// How much of the child's stderr is kept for evidence.
const STDERR_TAIL_BYTES: usize = 4096;

static IN_CHILD: AtomicBool = AtomicBool::new(false);

/// Marks the vendor call about to be made. A no-op outside a child process.
pub fn breadcrumb(call: &str) {
    if IN_CHILD.load(Ordering::Relaxed) {
        eprintln!("{BREADCRUMB_PREFIX}{call}");
    }
}

/// Why a child produced no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildFailure {
    pub summary: String,
    pub evidence: Vec<String>,
    /// Killed at the deadline (rather than crashed or failed to start).
    pub timed_out: bool,
    /// The last library call the child announced with [`breadcrumb`].
    pub last_call: Option<String>,
    /// Stopped by SIGTERM/SIGINT ([`interrupt`]), not by anything the job or its library did.
    pub interrupted: bool,
}

impl ChildFailure {
    /// The finding code of a child that gave no reply: interrupted, or hung or crashed in its library call.
    pub fn code(&self) -> &'static FindingCode {
        if self.interrupted {
            &common::INTERRUPTED
        } else {
            &common::LIBRARY_HUNG
        }
    }
}

/// Runs `job` in this binary's hidden subcommand for it and waits at most `timeout` (or until SIGTERM/SIGINT) for
/// its reply; killed then. `prepare` adds to the command before it starts (a descriptor the child inherits).
pub fn run<J: Job>(
    job: &J,
    timeout: Duration,
    prepare: impl FnOnce(&mut Command),
) -> Result<J::Reply, ChildFailure> {
    let subcommand = J::SUBCOMMAND;
    let not_started = |summary: String| ChildFailure {
        summary,
        evidence: vec![],
        timed_out: false,
        last_call: None,
        interrupted: false,
    };
    let exe = std::env::current_exe().map_err(|e| {
        not_started(format!(
            "cannot find this binary to run {subcommand} in a child process: {e}"
        ))
    })?;
    let mut command = Command::new(exe);
    command
        .arg(subcommand)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    own_group_tied_to_parent(&mut command);
    prepare(&mut command);
    let mut child = command
        .spawn()
        .map_err(|e| not_started(format!("cannot start the {subcommand} child process: {e}")))?;

    let job_json = serde_json::to_vec(job).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        // A child that dies at once closes the pipe; its exit status tells the story below.
        let _ = stdin.write_all(&job_json);
    }
    let stdout_reader = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            buf
        })
    });
    let stderr_reader = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut tail: Vec<u8> = Vec::new();
            let mut last_call = None;
            let mut chunk = [0u8; 8192];
            let mut pending_line = Vec::new();
            while let Ok(n) = err.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                for &b in &chunk[..n] {
                    if b == b'\n' {
                        let line = String::from_utf8_lossy(&pending_line);
                        match line.strip_prefix(BREADCRUMB_PREFIX) {
                            Some(call) => last_call = Some(call.to_string()),
                            None => {
                                tail.extend_from_slice(&pending_line);
                                tail.push(b'\n');
                            }
                        }
                        pending_line.clear();
                    } else if pending_line.len() < STDERR_TAIL_BYTES {
                        pending_line.push(b);
                    }
                }
                if tail.len() > STDERR_TAIL_BYTES * 2 {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
            tail.extend_from_slice(&pending_line);
            let start = tail.len().saturating_sub(STDERR_TAIL_BYTES);
            (
                String::from_utf8_lossy(&tail[start..]).into_owned(),
                last_call,
            )
        })
    });

    let started = Instant::now();
    let pid = child.id() as libc::pid_t;
    let status = loop {
        match exited(pid) {
            // Its group goes with it: a helper left behind would hold the pipes read below.
            Ok(true) => {
                kill_group(pid);
                break child.wait().ok();
            }
            // Killed at the deadline, or at once when the run is being stopped by a signal.
            Ok(false) if started.elapsed() >= timeout || interrupt::requested().is_some() => {
                kill_group(pid);
                let _ = child.wait();
                break None;
            }
            Ok(false) => std::thread::sleep(Duration::from_millis(5)),
            // Its status cannot be asked: end it rather than leave it running unwatched.
            Err(_) => {
                kill_group(pid);
                let _ = child.wait();
                break None;
            }
        }
    };
    let stdout = stdout_reader
        .and_then(|h| h.join().ok())
        .unwrap_or_default();
    let (stderr_tail, last_call) = stderr_reader
        .and_then(|h| h.join().ok())
        .unwrap_or_default();
    let in_call = last_call
        .as_deref()
        .map(|c| format!(" in {c}"))
        .unwrap_or_default();
    let mut evidence = Vec::new();
    if let Some(call) = &last_call {
        evidence.push(format!("last library call = {call}"));
    }
    let stderr_tail = stderr_tail.trim();
    if !stderr_tail.is_empty() {
        evidence.push(format!(
            "child stderr (tail) = {}",
            stderr_tail.replace('\n', " | ")
        ));
    }

    let failure = |summary: String, evidence: Vec<String>, timed_out: bool| ChildFailure {
        summary,
        evidence,
        timed_out,
        last_call: last_call.clone(),
        interrupted: false,
    };
    // The child, in a group of its own, dies of a stopping signal only when one is sent to it alone.
    let stopped_by = interrupt::requested().or_else(|| {
        status
            .and_then(|s| s.signal())
            .and_then(interrupt::stopping_signal)
    });
    if let Some(signal) = stopped_by {
        if !status.is_some_and(|s| s.success()) {
            return Err(ChildFailure {
                interrupted: true,
                ..failure(format!("interrupted by {signal}{in_call}"), evidence, false)
            });
        }
    }
    let Some(status) = status else {
        return Err(failure(
            format!("timed out after {} s{in_call}", fmt_secs(timeout)),
            evidence,
            true,
        ));
    };
    if let Some(signal) = status.signal() {
        return Err(failure(
            format!(
                "crashed with signal {signal} ({}){in_call}",
                signal_name(signal)
            ),
            evidence,
            false,
        ));
    }
    if !status.success() {
        return Err(failure(
            format!(
                "the child process exited with status {}{in_call}",
                status.code().unwrap_or(-1)
            ),
            evidence,
            false,
        ));
    }
    serde_json::from_slice(&stdout).map_err(|e| {
        failure(
            format!("the child process sent an unreadable reply: {e}"),
            evidence,
            false,
        )
    })
}

/// Starts `command` in a process group of its own that dies with this process: the kill at a deadline then
/// also ends whatever it started (a helper a library forked, a launcher's ranks), and nothing outlives this
/// process even when it is killed outright (SIGKILL after slurmd's KillWait). Shared with `collective`.
pub(crate) fn own_group_tied_to_parent(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only setpgid, prctl and getppid, which are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // Set before exec (it survives exec of a non-setuid binary), so there is no window without it.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // A parent that died before the line above sends no signal: the child is an orphan already.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    };
}

/// The child's side of [`run`]: reads the job on stdin, runs `work`, answers on stdout. Returns the exit code.
pub fn serve<J: Job>(work: impl FnOnce(J) -> J::Reply) -> i32 {
    IN_CHILD.store(true, Ordering::Relaxed);
    // Keep the real stdout for the reply and send everything else the process prints to stderr.
    // SAFETY: plain descriptor duplication on descriptors this process owns.
    let reply_fd = unsafe { libc::dup(1) };
    if reply_fd < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        eprintln!("fabric-preflight: cannot set up the child's output");
        return 70;
    }
    // SAFETY: reply_fd is a fresh descriptor from dup() that nothing else owns.
    let mut reply_out = unsafe { std::fs::File::from_raw_fd(reply_fd) };

    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("fabric-preflight: reading the child's job: {e}");
        return 70;
    }
    let job: J = match serde_json::from_slice(&input) {
        Ok(job) => job,
        Err(e) => {
            eprintln!("fabric-preflight: malformed child job: {e}");
            return 70;
        }
    };
    let reply = work(job);
    match serde_json::to_vec(&reply) {
        Ok(bytes) if reply_out.write_all(&bytes).is_ok() => 0,
        _ => 70,
    }
}

/// Whether the child `pid` has ended, without reaping it: until it is reaped its id cannot be reused, so the
/// kill of its group cannot reach another process's.
pub(crate) fn exited(pid: libc::pid_t) -> std::io::Result<bool> {
    // SAFETY: waitid on a child of this process, into a zeroed siginfo_t (si_pid stays 0 while it runs).
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) == -1 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(info.si_pid() != 0)
    }
}

/// SIGKILL to the child's process group (the child and whatever it started that stayed in the group).
fn kill_group(pid: libc::pid_t) {
    signal_group(pid, libc::SIGKILL);
}

/// `signal` to the process group the unreaped child `pid` leads.
pub(crate) fn signal_group(pid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill(2) on the group the unreaped child `pid` leads: its id cannot have been reused.
    unsafe { libc::kill(-pid, signal) };
}

/// Seconds with at most one decimal: `2`, `0.5`, and `3` for a deadline of 2.9996 s left when it was set.
pub fn fmt_secs(d: Duration) -> String {
    let s = (d.as_secs_f64() * 10.0).round() / 10.0;
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// A deadline in a job for a child process: sent as the time left until it, so the child's own clock can hold
/// it (an `Instant` means nothing in another process).
pub(crate) mod deadline {
    use std::time::{Duration, Instant};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(at: &Instant, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(at.saturating_duration_since(Instant::now()).as_micros() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        Ok(Instant::now() + Duration::from_micros(u64::deserialize(d)?))
    }
}
