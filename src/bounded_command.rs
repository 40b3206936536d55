//! An external command run the way a preflight may run one: read-only tools only, a deadline (killed past it,
//! with its process group), output capped, stdin closed, and the whole answer serialisable, so a recorded tree
//! replays what the tool said (`vendor-answers.json`, like library answers).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What one command answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandAnswer {
    /// The command line as run (`nvidia-imex-ctl -N -j`).
    pub argv: Vec<String>,
    /// The exit status; `None` when it did not exit by itself (killed at the deadline, or never started).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Why there is no exit status, or output was cut: `could not start: …`, `still running after 10 s`.
    pub failure: Option<String>,
    /// stdout or stderr was longer than the cap and cut there.
    pub truncated: bool,
}

impl CommandAnswer {
    /// Exited 0 within its deadline.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.failure.is_none()
    }

    /// `nvidia-imex-ctl -N -j: exit 1: <stderr's first line>` and the like, for an error result.
    pub fn describe(&self) -> String {
        let cmd = self.argv.join(" ");
        if let Some(f) = &self.failure {
            return format!("{cmd}: {f}");
        }
        let said = self
            .stderr
            .lines()
            .chain(self.stdout.lines())
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no output");
        match self.exit_code {
            Some(code) => format!("{cmd}: exit {code}: {said}"),
            None => format!("{cmd}: killed by a signal: {said}"),
        }
    }
}

/// Runs `program args` with no stdin, killing its process group at `timeout`; each stream is read to `cap`
/// bytes (the rest drained and dropped so the tool never blocks on a full pipe).
pub fn run(program: &Path, args: &[&str], timeout: Duration, cap: usize) -> CommandAnswer {
    let mut argv = vec![program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut answer = CommandAnswer {
        argv,
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        failure: None,
        truncated: false,
    };
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a helper it forks dies with it at the deadline.
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            answer.failure = Some(format!("could not start: {e}"));
            return answer;
        }
    };
    let reader = |stream: Option<Box<dyn Read + Send>>| thread::spawn(move || capped(stream, cap));
    let out = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                answer.exit_code = status.code();
                break;
            }
            Ok(None) if started.elapsed() < timeout => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                // SAFETY: signalling the process group this function created; no memory is touched.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                answer.failure = Some(format!(
                    "still running after {} s, killed",
                    timeout.as_secs_f64()
                ));
                break;
            }
            Err(e) => {
                answer.failure = Some(format!("waiting for it failed: {e}"));
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
        }
    }
    for (handle, into) in [(out, &mut answer.stdout), (err, &mut answer.stderr)] {
        // The group is gone, so the pipes close and the readers end.
        let (text, cut) = handle.join().unwrap_or_default();
        *into = text;
        answer.truncated |= cut;
    }
    answer
}

/// The first `cap` bytes as text (invalid UTF-8 replaced), and whether there was more.
fn capped(stream: Option<Box<dyn Read + Send>>, cap: usize) -> (String, bool) {
    let Some(mut stream) = stream else {
        return (String::new(), false);
    };
    let mut kept = Vec::new();
    let _ = (&mut stream).take(cap as u64).read_to_end(&mut kept);
    let rest = std::io::copy(&mut stream, &mut std::io::sink()).unwrap_or(0);
    (String::from_utf8_lossy(&kept).into_owned(), rest > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SH: &str = "/bin/sh";

    #[test]
    fn output_and_exit_status_are_kept() {
        let a = run(
            Path::new(SH),
            &["-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(10),
            1024,
        );
        assert_eq!(a.exit_code, Some(3));
        assert_eq!((a.stdout.as_str(), a.stderr.as_str()), ("out\n", "err\n"));
        assert!(!a.succeeded());
        assert_eq!(
            a.describe(),
            "sh -c echo out; echo err >&2; exit 3: exit 3: err"
        );
    }

    /// A tool that hangs (a daemon that never answers) is killed at the deadline, with what it forked.
    #[test]
    fn a_hung_command_is_killed_at_its_deadline() {
        let started = Instant::now();
        let a = run(
            Path::new(SH),
            &["-c", "sleep 30 & sleep 30"],
            Duration::from_millis(300),
            1024,
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(a.exit_code, None);
        assert!(
            a.describe().contains("still running after 0.3 s"),
            "{}",
            a.describe()
        );
    }

    #[test]
    fn output_past_the_cap_is_cut_and_drained() {
        let a = run(
            Path::new(SH),
            &["-c", "yes | head -c 1000000"],
            Duration::from_secs(10),
            100,
        );
        assert_eq!(a.stdout.len(), 100);
        assert!(a.truncated);
        assert_eq!(a.exit_code, Some(0));
    }

    #[test]
    fn a_missing_program_is_a_failure_not_a_panic() {
        let a = run(
            Path::new("/nonexistent/nvidia-imex-ctl"),
            &["-N"],
            Duration::from_secs(1),
            100,
        );
        assert!(
            a.describe()
                .starts_with("nvidia-imex-ctl -N: could not start"),
            "{}",
            a.describe()
        );
    }
}
