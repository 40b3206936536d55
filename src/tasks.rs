//! Supervised tasks: each on a thread of its own, waited for until its own deadline, and given up on when it
//! panics, overruns or a stopping signal comes. The runner's probes and `pair`'s links are supervised here, so
//! both meet deadlines, panics and SIGTERM the same way; what a task that did not come back means is theirs to
//! say.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::interrupt;

/// Names of supervised threads start with this: their panics become results, not messages on stderr.
pub const THREAD_PREFIX: &str = "task:";
/// How often a waiting supervisor looks for a stopping signal ([`interrupt`]).
const SIGNAL_POLL: Duration = Duration::from_millis(20);
/// After a stopping signal, how long tasks get to come back: child processes are killed at once and their
/// callers return within milliseconds; a task stuck in a read is given up on.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// One unit of work and the moment it is given up on.
pub struct Task<T> {
    /// Names the thread (after [`THREAD_PREFIX`]).
    pub name: String,
    pub until: Instant,
    pub work: Box<dyn FnOnce() -> T + Send>,
}

/// How a task ended, in the order the tasks were given.
#[derive(Debug)]
pub enum Ended<T> {
    Done(T),
    /// It panicked: the panic's message.
    Panicked(String),
    /// Not back by its `until`; its thread is left behind.
    TimedOut,
    /// A stopping signal came and it was not back within [`INTERRUPT_GRACE`].
    Interrupted(&'static str),
    /// Its thread could not start, or ended without a word.
    Lost(String),
}

/// Runs every task at once and waits for each until its deadline, a stopping signal (and the grace after it),
/// whichever comes first.
pub fn supervise<T: Send + 'static>(tasks: Vec<Task<T>>) -> Vec<Ended<T>> {
    let (tx, rx) = mpsc::channel::<(usize, Ended<T>)>();
    let mut ended: Vec<Option<Ended<T>>> = Vec::new();
    let mut pending: Vec<(usize, Instant)> = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        ended.push(None);
        let tx = tx.clone();
        let work = task.work;
        let body = move || {
            let outcome = match catch_unwind(AssertUnwindSafe(work)) {
                Ok(value) => Ended::Done(value),
                Err(payload) => Ended::Panicked(panic_message(payload.as_ref())),
            };
            // The supervisor may have given up on us (deadline passed); nothing to do then.
            let _ = tx.send((i, outcome));
        };
        match std::thread::Builder::new()
            .name(format!("{THREAD_PREFIX}{}", task.name))
            .spawn(body)
        {
            Ok(_) => pending.push((i, task.until)),
            Err(e) => ended[i] = Some(Ended::Lost(format!("cannot start a thread: {e}"))),
        }
    }
    drop(tx);
    let mut interrupted_at: Option<Instant> = None;
    while !pending.is_empty() {
        let next = pending
            .iter()
            .map(|(_, until)| *until)
            .min()
            .unwrap_or_else(Instant::now);
        let wait = next.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait.min(SIGNAL_POLL)) {
            Ok((i, outcome)) => {
                if let Some(k) = pending.iter().position(|(p, _)| *p == i) {
                    pending.remove(k);
                    ended[i] = Some(outcome);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                if let Some(signal) = interrupt::requested() {
                    if now >= *interrupted_at.get_or_insert(now) + INTERRUPT_GRACE {
                        for (i, _) in std::mem::take(&mut pending) {
                            ended[i] = Some(Ended::Interrupted(signal));
                        }
                    }
                }
                pending.retain(|(i, until)| {
                    let expired = *until <= now;
                    if expired {
                        ended[*i] = Some(Ended::TimedOut);
                    }
                    !expired
                });
            }
            // Every sender is gone yet some are pending: cannot happen with catch_unwind in place, but never
            // wait forever on it.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                for (i, _) in std::mem::take(&mut pending) {
                    ended[i] = Some(Ended::Lost("its thread ended without a result".into()));
                }
            }
        }
    }
    ended
        .into_iter()
        .map(|e| e.unwrap_or_else(|| Ended::Lost("never started".into())))
        .collect()
}

/// What a panic said, from its payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Silences the default panic message for supervised threads (the panic becomes a result instead).
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let supervised = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with(THREAD_PREFIX));
        if !supervised {
            default(info);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task<T>(until: Duration, work: impl FnOnce() -> T + Send + 'static) -> Task<T> {
        Task {
            name: "test".into(),
            until: Instant::now() + until,
            work: Box::new(work),
        }
    }

    #[test]
    fn each_task_ends_its_own_way_in_order() {
        install_panic_hook();
        let started = Instant::now();
        let ended = supervise(vec![
            task(Duration::from_millis(50), || {
                std::thread::sleep(Duration::from_secs(60));
                1
            }),
            task(Duration::from_secs(60), || panic!("boom")),
            task(Duration::from_secs(60), || 3),
        ]);
        // At the first task's deadline, not when its work would end; room for a loaded machine.
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(matches!(ended[0], Ended::TimedOut), "{ended:?}");
        assert!(
            matches!(&ended[1], Ended::Panicked(m) if m == "boom"),
            "{ended:?}"
        );
        assert!(matches!(ended[2], Ended::Done(3)), "{ended:?}");
    }
}
