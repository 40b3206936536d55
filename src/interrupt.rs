//! SIGTERM and SIGINT (pod deletion, slurmd's kill, Ctrl-C) stop a run cleanly instead of killing it: the
//! handler only records the signal; the runner stops starting checks, the child-process probes are killed and
//! their scratch directories removed, and the checks cut short are reported as errors, so the partial report is
//! still written and the exit is 3. `pair` does the same: its measuring children are killed, the listener and
//! connector stop waiting, and the port pairs left are errors. A second signal ends the process at once. As PID 1
//! of a container, the handler is also what makes SIGTERM work at all (the kernel drops signals PID 1 has no
//! handler for). A report's temporary file being written then is removed first, so no hidden `.NAME.<pid>.tmp`
//! is left beside the report.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

/// The first stopping signal received, 0 while none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The temporary report file being written (a NUL-terminated path), null while none.
static TEMP_FILE: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn record(signal: libc::c_int) {
    // An atomic exchange is async-signal-safe; anything more (allocation, locks, I/O) is not.
    if RECEIVED
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        // A second signal means "now": die of it, as without a handler (probe children follow through
        // PR_SET_PDEATHSIG), removing the report file half written. SAFETY: unlink(), signal() and raise() are
        // async-signal-safe; the path is never freed (see `remove_if_killed`).
        unsafe {
            let temp = TEMP_FILE.load(Ordering::SeqCst);
            if !temp.is_null() {
                libc::unlink(temp);
            }
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
}

/// Installs the handler for SIGTERM and SIGINT. Child processes get the default action back at exec.
pub fn install() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction with a handler that only stores an atomic; SA_RESTART keeps reads and
        // waits in other threads from failing with EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Marks `path` (a temporary file about to be written) for removal should a second signal end the process
/// before the returned guard is dropped. One file at a time: reports are written one after another.
pub fn remove_if_killed(path: &Path) -> RemoveIfKilled {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_or(std::ptr::null_mut(), CString::into_raw);
    TEMP_FILE.store(c_path, Ordering::SeqCst);
    RemoveIfKilled
}

/// Unmarks the file when dropped. The path is leaked, a few bytes per report: the handler may be reading it
/// on another thread at that moment.
pub struct RemoveIfKilled;

impl Drop for RemoveIfKilled {
    fn drop(&mut self) {
        TEMP_FILE.store(std::ptr::null_mut(), Ordering::SeqCst);
    }
}

/// The signal that asked the run to stop (`SIGTERM`, `SIGINT`), if one came.
pub fn requested() -> Option<&'static str> {
    stopping_signal(RECEIVED.load(Ordering::SeqCst))
}

/// The name of `signal` when it is one that stops a run. A probe child that died of one was stopped from
/// outside (Ctrl-C and slurmd signal the whole process group), never by the runner, which kills with SIGKILL.
pub fn stopping_signal(signal: libc::c_int) -> Option<&'static str> {
    match signal {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Reproduced: a second signal while a report's temporary file was written left `.NAME.<pid>.tmp` behind.
    /// A forked child stands in for the run: it installs the handler, marks a file and gets two signals.
    #[test]
    fn a_second_signal_removes_the_temporary_report_file() {
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join(".report.json.1.tmp");
        std::fs::write(&temp, "half").unwrap();
        // SAFETY: the child marks the file in its own memory (glibc's malloc is usable after fork), installs the
        // handler and signals itself; it never returns into the test harness.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let _marked = remove_if_killed(&temp);
            install();
            unsafe {
                libc::raise(libc::SIGTERM);
                libc::raise(libc::SIGTERM);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let status = std::process::ExitStatus::from_raw(status);
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
        assert!(!temp.exists(), "{} left behind", temp.display());
    }
}
