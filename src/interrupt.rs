//! SIGTERM and SIGINT (pod deletion, slurmd's kill, Ctrl-C) stop a run cleanly instead of killing it: the
//! handler only records the signal; the runner stops starting checks, the child-process probes are killed and
//! their scratch directories removed, and the checks cut short are reported as errors, so the partial report is
//! still written and the exit is 3. `pair` does the same: its measuring children are killed, the listener and
//! connector stop waiting, and the port pairs left are errors. A second signal ends the process at once. As PID 1 of a container, the handler is also what makes SIGTERM work at all
//! (the kernel drops signals PID 1 has no handler for).

use std::sync::atomic::{AtomicI32, Ordering};

/// The first stopping signal received, 0 while none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(signal: libc::c_int) {
    // An atomic exchange is async-signal-safe; anything more (allocation, locks, I/O) is not.
    if RECEIVED
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        // A second signal means "now": die of it, as without a handler (probe children follow through
        // PR_SET_PDEATHSIG). SAFETY: signal() and raise() are async-signal-safe.
        unsafe {
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
