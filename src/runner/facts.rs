//! Library facts gathered once per run. What a vendor library says about the node (NVML's GPUs, links and
//! peers; the devices libibverbs lists) is asked once, in one child process per library (`fabric-preflight
//! __facts`), and every probe that names the source ([`crate::probe::ProbeMeta::facts`]) judges the same
//! answers. A library that hangs or crashes there is killed at the deadline and named, as in a probe's child.
//! The child finds the source by key through the lookup `main.rs` hands it; nothing here lists the sources.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::child::{self, ChildFailure};
use crate::probe::FactSource;

/// Finds a fact source by key (`probes::fact_source`, handed in by `main.rs`).
pub type FindSource = fn(&str) -> Option<&'static FactSource>;

#[derive(Debug, Serialize, Deserialize)]
struct FactJob {
    key: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct FactReply {
    /// What the library said; `None` when the child knows no source of that key.
    value: Option<Value>,
}

impl child::Job for FactJob {
    /// The hidden subcommand the runner re-executes this binary with to gather one source's facts.
    const SUBCOMMAND: &'static str = "__facts";
    type Reply = FactReply;
}

/// Asks `source`'s library in a child process, waiting at most `timeout` (or until SIGTERM/SIGINT).
pub fn gather(source: &FactSource, timeout: Duration) -> Result<Value, ChildFailure> {
    let job = FactJob {
        key: source.key.to_string(),
    };
    let reply = child::run(&job, timeout, |_| {})?;
    reply.value.ok_or_else(|| ChildFailure {
        summary: format!("the child process knows no fact source `{}`", source.key),
        evidence: vec![],
        timed_out: false,
        last_call: None,
        interrupted: false,
    })
}

/// Entry point of `fabric-preflight __facts`: reads the job on stdin, answers on stdout. Returns the exit code.
pub fn child_main(find: FindSource) -> i32 {
    child::serve(|job: FactJob| FactReply {
        value: find(&job.key).map(|source| (source.collect)()),
    })
}

/// One source's gathering, waited on by every probe that judges it.
#[derive(Default)]
pub struct Gathering {
    done: Mutex<Option<Result<(), ChildFailure>>>,
    ready: Condvar,
}

impl Gathering {
    pub fn finish(&self, outcome: Result<(), ChildFailure>) {
        if let Ok(mut done) = self.done.lock() {
            *done = Some(outcome);
            self.ready.notify_all();
        }
    }

    /// Blocks until the gathering finished: `Ok` once its answers are in the run's answers, or why the child
    /// gave none.
    pub fn wait(&self) -> Result<(), ChildFailure> {
        let Ok(mut done) = self.done.lock() else {
            return Err(lost());
        };
        loop {
            if let Some(outcome) = done.as_ref() {
                return outcome.clone();
            }
            done = match self.ready.wait(done) {
                Ok(d) => d,
                Err(_) => return Err(lost()),
            };
        }
    }
}

/// A gathering thread that panicked while holding its lock: no answers, and no library call to name.
fn lost() -> ChildFailure {
    ChildFailure {
        summary: "the facts could not be gathered (internal error)".into(),
        evidence: vec![],
        timed_out: false,
        last_call: None,
        interrupted: false,
    }
}
