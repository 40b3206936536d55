//! What a probe is and what it returns. The runner, the profile loader and the reporters depend on this file;
//! nothing here knows about a particular probe.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::host::{Host, ReadError};
pub use crate::model::finding::common;
pub use crate::model::{
    AnswerSource, CheckResult, Environment, FindingCode, Findings, Library, Measurement, Remedy,
    Status,
};
use crate::profile::{CheckSettings, Profile};
use crate::recording::Answers;

impl CheckResult {
    /// An unreadable input: `error` with the path and the reason as evidence.
    pub fn read_error(id: &str, err: &ReadError) -> Self {
        Self::error(id, err.to_string())
            .evidence(&err.path, err.reason())
            .code(&common::UNREAD)
    }

    /// A probe's results, or the read error of the first input it could not read: lets a probe read its inputs
    /// with `?`.
    pub fn or_read_error(
        id: &str,
        results: Result<Vec<CheckResult>, ReadError>,
    ) -> Vec<CheckResult> {
        results.unwrap_or_else(|e| vec![Self::read_error(id, &e)])
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
    /// Every finding it can report besides the [`common`] ones: the codes its results carry.
    pub findings: &'static [&'static FindingCode],
    /// Where its verdict means something. Shown by `list` and `explain`; verdicts do not change on it.
    pub meaningful: &'static [Environment],
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
    /// Where set, the library is asked only on hosts where this says its hardware could be (a tree it cannot
    /// read counts as could be): elsewhere nothing is called, and a probe asking anyway is told so.
    pub only_if: Option<fn(&Host) -> bool>,
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
        findings: &[],
        meaningful: &Environment::ALL,
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
