//! What a probe is and what it returns. The runner, the profile loader and the reporters depend on this file;
//! nothing here knows about a particular probe.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::answers::Answers;
use crate::dynlib::Library;
use crate::host::{Host, ReadError};
use crate::profile::{CheckSettings, Profile};
use crate::threshold::Limit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    // Declaration order is severity order: `max()` of statuses is the worst.
    Pass,
    Skip,
    Warn,
    Error,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skip => "skip",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Error => "error",
        }
    }

    pub const ALL: [Status; 5] = [
        Status::Pass,
        Status::Warn,
        Status::Fail,
        Status::Skip,
        Status::Error,
    ];
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A number the probe measured or read, with the limits it was judged against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub name: String,
    /// JSON has no NaN/Infinity: serde_json writes them as `null`, which reads back as NaN.
    #[serde(deserialize_with = "nan_from_null")]
    pub value: f64,
    pub unit: String,
    pub warn: Option<f64>,
    pub fail: Option<f64>,
    /// True when the value comes from a recording (`--root` with vendor answers), not from this run.
    #[serde(default)]
    pub replayed: bool,
}

fn nan_from_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl Measurement {
    pub fn new(name: &str, value: f64, unit: &str) -> Self {
        Measurement {
            name: name.into(),
            value,
            unit: unit.into(),
            warn: None,
            fail: None,
            replayed: false,
        }
    }

    pub fn judged_by(mut self, limit: &Limit) -> Self {
        self.warn = limit.warn;
        self.fail = limit.fail;
        self
    }

    pub fn replayed(mut self, replayed: bool) -> Self {
        self.replayed = replayed;
        self
    }
}

/// Where the library answers (NVML, CUDA, cuFile, verbs) behind a result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerSource {
    /// The libraries were called on this run.
    Live,
    /// Replayed from a recording (`vendor-answers.json` under `--root`).
    Recorded,
}

impl AnswerSource {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerSource::Live => "live",
            AnswerSource::Recorded => "recorded",
        }
    }
}

/// One verdict about one subject (a port, a GPU, a PCIe device, or the node when `subject` is empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub id: String,
    pub subject: Option<String>,
    pub status: Status,
    pub summary: String,
    pub measurements: Vec<Measurement>,
    /// What was read: `host path = value` or `library call = answer`.
    pub evidence: Vec<String>,
    pub remediation: Option<String>,
    pub duration_ms: u64,
    /// Set when the result rests on library answers: were they live or recorded. Absent for results read from
    /// files alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_answers: Option<AnswerSource>,
}

impl CheckResult {
    pub fn new(id: &str, status: Status, summary: impl Into<String>) -> Self {
        CheckResult {
            id: id.into(),
            subject: None,
            status,
            summary: summary.into(),
            measurements: Vec::new(),
            evidence: Vec::new(),
            remediation: None,
            duration_ms: 0,
            library_answers: None,
        }
    }

    pub fn pass(id: &str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Pass, summary)
    }
    pub fn warn(id: &str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Warn, summary)
    }
    pub fn fail(id: &str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Fail, summary)
    }
    pub fn skip(id: &str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Skip, summary)
    }
    pub fn error(id: &str, summary: impl Into<String>) -> Self {
        Self::new(id, Status::Error, summary)
    }

    /// An unreadable input: `error` with the path and the reason as evidence.
    pub fn read_error(id: &str, err: &ReadError) -> Self {
        Self::error(id, err.to_string()).evidence(&err.path, err.reason())
    }

    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// `key = value`, where key is a host path or a library call.
    pub fn evidence(mut self, key: &str, value: impl fmt::Display) -> Self {
        self.evidence.push(format!("{key} = {value}"));
        self
    }

    /// A free-form evidence line (a note that belongs with the readings, e.g. "GPUs downshift when idle").
    pub fn note(mut self, line: impl Into<String>) -> Self {
        self.evidence.push(line.into());
        self
    }

    pub fn measure(mut self, m: Measurement) -> Self {
        self.measurements.push(m);
        self
    }

    pub fn fix(mut self, remediation: impl Into<String>) -> Self {
        self.remediation = Some(remediation.into());
        self
    }
}

/// What a probe needs from the node; shown by `list` and `explain`. The probe itself decides what to do when
/// a need is not met (SKIP with the reason, or FAIL when the profile requires the check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Full privileges (config space beyond 64 bytes, `CAP_IPC_LOCK`).
    Root,
    Gpu,
    RdmaDevice,
    NvidiaFs,
    NcclLog,
    /// A writable directory on the filesystem under test.
    ScratchDir,
}

impl Need {
    pub fn as_str(self) -> &'static str {
        match self {
            Need::Root => "root",
            Need::Gpu => "GPU",
            Need::RdmaDevice => "RDMA device",
            Need::NvidiaFs => "nvidia-fs",
            Need::NcclLog => "NCCL log",
            Need::ScratchDir => "scratch dir",
        }
    }
}

/// Text for `explain ID`.
pub struct Explain {
    /// What the check reads (paths, library calls).
    pub reads: &'static str,
    /// Why the condition matters in production.
    pub why: &'static str,
    /// Each failure it can report, and how to fix it.
    pub fixes: &'static [(&'static str, &'static str)],
}

/// How the runner should schedule a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads files; runs concurrently with other static probes, in this process.
    Static,
    /// Judges vendor libraries' facts ([`ProbeMeta::facts`]) and calls no library itself: the runner gathers
    /// each source once per run in a child process of its own (a hung or crashing library is killed at the
    /// deadline there), then runs the probe concurrently, in this process.
    Library,
    /// Moves bulk data to measure bandwidth; runs alone (after the others) in a child process, so two
    /// measurements never share a link. A replay (recorded answers) touches no library and runs in this process.
    Active,
}

/// Everything a probe may look at. Built by the runner; in a child process rebuilt from the job.
pub struct Context<'a> {
    pub host: &'a Host,
    pub profile: &'a Profile,
    pub settings: &'a CheckSettings,
    pub inputs: &'a Inputs,
    pub answers: &'a Answers,
    pub deadline: Instant,
    /// For `Kind::Active` probes: an empty directory the runner created for temporary files and removes after
    /// the probe, even when the probe is killed at its deadline.
    pub scratch: Option<&'a Path>,
}

impl Context<'_> {
    /// Time left before the runner gives up on this probe.
    pub fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// Inputs given on the command line or taken from the environment, captured once so tests can supply their
/// own (probes never call `std::env` themselves).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Inputs {
    /// `run --nccl-log PATH` (paths on this machine, not under the root: logs are the user's files).
    pub nccl_logs: Vec<PathBuf>,
    /// `run --gds-dir DIR`: where the active storage probe may create its test file.
    pub gds_dir: Option<PathBuf>,
    /// The process environment at start-up.
    pub env: BTreeMap<String, String>,
}

impl Inputs {
    pub fn env(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }
}

/// Deadline of a probe whose metadata sets none and whose profile sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a probe is, declared once as a constant in its file: `list`, `explain`, the runner and the profiles
/// read it; nothing here runs.
pub struct ProbeMeta {
    /// Dotted lower-case id (`rdma.link`): stable, it appears in JSON, JUnit and profiles.
    pub id: &'static str,
    /// One line for `list`.
    pub title: &'static str,
    pub needs: &'static [Need],
    pub kind: Kind,
    /// Run-time-loaded libraries it calls. A library that hung earlier in the run is not called again: the
    /// runner reports the check at once instead.
    pub libraries: &'static [Library],
    /// Library facts it judges: gathered once per run and shared by every probe that names them.
    pub facts: &'static [&'static FactSource],
    /// Deadline when the profile sets none.
    pub timeout: Duration,
    pub explain: Explain,
}

/// One vendor library's answers that probes judge (NVML's GPUs, links and peers; the devices libibverbs
/// lists): asked once per run, in one child process of its own, or replayed from a recording under its key.
pub struct FactSource {
    /// Where the answers live in `vendor-answers.json` (and in [`Answers`]).
    pub key: &'static str,
    /// The library it calls.
    pub library: Library,
    /// Asks the library (in the child process) and returns what it said.
    pub collect: fn() -> serde_json::Value,
}

impl ProbeMeta {
    /// The common case a probe's constant starts from (`..ProbeMeta::STATIC`): reads files only, needs nothing,
    /// [`DEFAULT_TIMEOUT`]. Its id, title and explain text are placeholders every probe sets.
    pub const STATIC: ProbeMeta = ProbeMeta {
        id: "",
        title: "",
        needs: &[],
        kind: Kind::Static,
        libraries: &[],
        facts: &[],
        timeout: DEFAULT_TIMEOUT,
        explain: Explain {
            reads: "",
            why: "",
            fixes: &[],
        },
    };
}

pub trait Probe: Send + Sync {
    /// The probe's constant metadata.
    fn meta(&self) -> &'static ProbeMeta;
    /// Never panics on bad input and never returns an error: unreadable input is an `error` result.
    fn run(&self, cx: &Context<'_>) -> Vec<CheckResult>;

    fn id(&self) -> &'static str {
        self.meta().id
    }
    fn title(&self) -> &'static str {
        self.meta().title
    }
    fn needs(&self) -> &'static [Need] {
        self.meta().needs
    }
    fn kind(&self) -> Kind {
        self.meta().kind
    }
    fn libraries(&self) -> &'static [Library] {
        self.meta().libraries
    }
    fn default_timeout(&self) -> Duration {
        self.meta().timeout
    }
    fn explain(&self) -> &'static Explain {
        &self.meta().explain
    }
}
