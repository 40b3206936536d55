//! The probe child (`fabric-preflight __probe`): a library or active probe run in a child process of this binary
//! on the machinery of [`crate::child`], so that a vendor library that hangs or crashes costs that one check.
//! The child gets the probe by id from the lookup `main.rs` hands it; nothing here lists the probes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::child::{self, ChildFailure};
use crate::host::{Access, Host};
use crate::model::CheckResult;
use crate::probe::{common, Context, Inputs, Probe};
use crate::profile::Profile;
use crate::recording::Answers;

/// Finds a probe by id (`probes::find`, handed in by `main.rs`).
pub type FindProbe = fn(&str) -> Option<&'static dyn Probe>;

#[derive(Debug, Serialize, Deserialize)]
pub struct ProbeJob {
    pub id: String,
    /// `None` = the live host.
    pub root: Option<PathBuf>,
    pub profile: Profile,
    pub inputs: Inputs,
    pub timeout_ms: u64,
    pub scratch: Option<PathBuf>,
    /// `snapshot`: report every host path the probe asked for.
    #[serde(default)]
    pub record_reads: bool,
    /// Library facts the run gathered already, by key: the child judges these instead of asking again.
    #[serde(default)]
    pub gathered: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ProbeReply {
    pub results: Vec<CheckResult>,
    /// Vendor answers the child collected live, for `snapshot`.
    pub recorded: BTreeMap<String, Value>,
    /// Host paths the probe asked for, when the job said `record_reads`.
    #[serde(default)]
    pub read_paths: Vec<(String, Access)>,
}

impl child::Job for ProbeJob {
    const SUBCOMMAND: &'static str = "__probe";
    type Reply = ProbeReply;
}

/// Runs `job` in a child process and waits at most `timeout` for it.
pub fn run_in_child(job: &ProbeJob, timeout: Duration) -> Result<ProbeReply, ChildFailure> {
    child::run(job, timeout, |_| {})
}

/// Entry point of `fabric-preflight __probe`: reads the job on stdin, answers on stdout. Returns the exit code.
pub fn child_main(find: FindProbe) -> i32 {
    child::serve(|job: ProbeJob| run_job(&job, find))
}

fn run_job(job: &ProbeJob, find: FindProbe) -> ProbeReply {
    let Some(probe) = find(&job.id) else {
        return error_reply(&job.id, format!("unknown probe id {}", job.id));
    };
    let host = match &job.root {
        Some(root) => match Host::at(root) {
            Ok(h) => h,
            Err(e) => return error_reply(&job.id, format!("{e:#}")),
        },
        None => Host::live(),
    };
    let host = if job.record_reads {
        host.recording()
    } else {
        host
    };
    let answers = match Answers::for_host(&host) {
        Ok(a) => a.with_gathered(job.gathered.clone()),
        Err(e) => return error_reply(&job.id, format!("{e:#}")),
    };
    let settings = job.profile.settings(&job.id);
    let cx = Context {
        host: &host,
        profile: &job.profile,
        settings: &settings,
        inputs: &job.inputs,
        answers: &answers,
        deadline: Instant::now() + Duration::from_millis(job.timeout_ms),
        scratch: job.scratch.as_deref(),
    };
    let mut results = probe.run(&cx);
    let source = answers.source_if_consulted();
    for r in &mut results {
        r.library_answers = source;
    }
    ProbeReply {
        results,
        recorded: answers.take_recorded(),
        read_paths: host.recorded(),
    }
}

fn error_reply(id: &str, summary: String) -> ProbeReply {
    ProbeReply {
        results: vec![CheckResult::error(id, summary).code(&common::PROBE_FAILED)],
        ..Default::default()
    }
}
