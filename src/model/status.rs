//! The five verdicts and where library answers came from: the words every layer returns.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::result::CheckResult;

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

/// The worst of several statuses (fail > error > warn > skip > pass, the declaration order of [`Status`]).
pub fn worst(statuses: impl IntoIterator<Item = Status>) -> Status {
    statuses.into_iter().max().unwrap_or(Status::Pass)
}

/// fail > error > warn > pass; a skip is not a problem on its own.
pub fn overall(checks: &[CheckResult]) -> Status {
    let s = worst(checks.iter().map(|c| {
        if c.status == Status::Skip {
            Status::Pass
        } else {
            c.status
        }
    }));
    match s {
        Status::Skip => Status::Pass,
        other => other,
    }
}
