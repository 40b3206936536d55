//! What a check returns: a verdict about one subject with its measurements, evidence and fix.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::finding::{common, Finding, FindingCode};
use super::limit::Limit;
use super::status::{worst, AnswerSource, Status};

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

/// One `key = value` evidence line as data (JSON's `evidence_values`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EvidenceValue<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// One verdict about one subject (a port, a GPU, a PCIe device, or the node when `subject` is empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub id: String,
    pub subject: Option<String>,
    /// What the subject is for on the node, where a check tells apart subjects judged by different
    /// expectations (an RDMA port's `compute` or `storage` role).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
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
    /// The coded findings that decided a result other than pass, worst first where several did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

impl CheckResult {
    pub fn new(id: &str, status: Status, summary: impl Into<String>) -> Self {
        CheckResult {
            id: id.into(),
            subject: None,
            role: None,
            status,
            summary: summary.into(),
            measurements: Vec::new(),
            evidence: Vec::new(),
            remediation: None,
            duration_ms: 0,
            library_answers: None,
            findings: Vec::new(),
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

    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
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
        let remediation = remediation.into();
        for f in self.findings.iter_mut().filter(|f| f.fix.is_none()) {
            f.fix = Some(remediation.clone()).filter(|r| !r.is_empty());
        }
        self.remediation = Some(remediation);
        self
    }

    /// One of several things this result judged, coded with its own status and words (a fix given later joins
    /// it); findings are added worst first.
    pub fn finding(
        mut self,
        code: &FindingCode,
        status: Status,
        message: impl Into<String>,
    ) -> Self {
        let fix = self.remediation.clone();
        self.findings.push(Finding::new(code, status, message, fix));
        self
    }

    /// The code of what decided this result: a finding with its status, summary and fix (a fix given later
    /// joins it too). A pass needs none: on one this does nothing, so a site whose status is computed codes it
    /// once.
    pub fn code(mut self, code: &FindingCode) -> Self {
        if self.status == Status::Pass {
            return self;
        }
        let finding = Finding::new(
            code,
            self.status,
            self.summary.clone(),
            self.remediation.clone(),
        );
        self.findings.push(finding);
        self
    }

    /// The code of the finding that decided the status: the first finding of the result's status.
    pub fn deciding_code(&self) -> Option<&str> {
        self.findings
            .iter()
            .find(|f| f.status == self.status)
            .map(|f| f.code.as_str())
    }

    /// The `key = value` evidence lines as pairs, in order; free-form notes are left out.
    pub fn evidence_values(&self) -> Vec<EvidenceValue<'_>> {
        self.evidence
            .iter()
            .filter_map(|line| line.split_once(" = "))
            .map(|(key, value)| EvidenceValue { key, value })
            .collect()
    }

    /// The status, and that of every finding that had the old one: a result whose verdict is changed after it
    /// was coded (a storage port's failure that only warns) keeps its findings in step.
    pub fn restatus(mut self, status: Status) -> Self {
        for f in self.findings.iter_mut().filter(|f| f.status == self.status) {
            f.status = status;
        }
        self.status = status;
        self
    }
}

/// Problems found while judging one subject; the worst decides the status.
#[derive(Debug, Default)]
pub struct Findings {
    problems: Vec<Problem>,
    fixes: Vec<String>,
}

#[derive(Debug)]
struct Problem {
    status: Status,
    text: String,
    fix: String,
    code: Option<&'static FindingCode>,
}

/// The next problem of a [`Findings`] with its code: `findings.coded(&CODE).fail(problem, fix)`.
pub struct Coded<'a> {
    findings: &'a mut Findings,
    code: &'static FindingCode,
}

impl Coded<'_> {
    pub fn fail(self, problem: impl Into<String>, fix: impl Into<String>) {
        self.add(Status::Fail, problem, fix);
    }

    pub fn warn(self, problem: impl Into<String>, fix: impl Into<String>) {
        self.add(Status::Warn, problem, fix);
    }

    pub fn add(self, status: Status, problem: impl Into<String>, fix: impl Into<String>) {
        self.findings
            .push(status, problem.into(), fix.into(), Some(self.code));
    }
}

impl Findings {
    pub fn fail(&mut self, problem: impl Into<String>, fix: impl Into<String>) {
        self.add(Status::Fail, problem, fix);
    }

    pub fn warn(&mut self, problem: impl Into<String>, fix: impl Into<String>) {
        self.add(Status::Warn, problem, fix);
    }

    pub fn add(&mut self, status: Status, problem: impl Into<String>, fix: impl Into<String>) {
        self.push(status, problem.into(), fix.into(), None);
    }

    /// The next problem's code, which the report carries and `explain CODE` documents.
    pub fn coded(&mut self, code: &'static FindingCode) -> Coded<'_> {
        Coded {
            findings: self,
            code,
        }
    }

    fn push(
        &mut self,
        status: Status,
        text: String,
        fix: String,
        code: Option<&'static FindingCode>,
    ) {
        if status == Status::Pass {
            return;
        }
        if !fix.is_empty() && !self.fixes.contains(&fix) {
            self.fixes.push(fix.clone());
        }
        self.problems.push(Problem {
            status,
            text,
            fix,
            code,
        });
    }

    /// A reading the verdict rests on that could not be taken: an error, so the check never passes without it.
    pub fn unread(&mut self, what: &str, why: impl std::fmt::Display) {
        self.coded(&common::UNREAD)
            .add(Status::Error, format!("{what} not read ({why})"), "");
    }

    /// Problems of status `from` take status `to` instead (a storage port's failures warn), so that a problem
    /// of a status between them (an unread reading's error) decides; whether any was changed.
    pub fn soften(&mut self, from: Status, to: Status) -> bool {
        let mut changed = false;
        for p in self.problems.iter_mut().filter(|p| p.status == from) {
            p.status = to;
            changed = true;
        }
        changed
    }

    /// The worst problem's status; pass when none was found.
    pub fn status(&self) -> Status {
        worst(self.problems.iter().map(|p| p.status))
    }

    /// Every problem in the order found, joined by `; `.
    pub fn listed(&self) -> String {
        let texts: Vec<&str> = self.problems.iter().map(|p| p.text.as_str()).collect();
        texts.join("; ")
    }

    /// The problems of the worst status, in the order found: the ones a summary that names only what decided
    /// the verdict shows, joined by `; `.
    pub fn deciding(&self) -> String {
        let status = self.status();
        let texts: Vec<&str> = self
            .problems
            .iter()
            .filter(|p| p.status == status)
            .map(|p| p.text.as_str())
            .collect();
        texts.join("; ")
    }

    /// `r` with the worst status, every fix (each once) and every coded problem as a finding (worst first),
    /// when something was found; `r` unchanged otherwise.
    pub fn apply(self, mut r: CheckResult) -> CheckResult {
        if self.problems.is_empty() {
            return r;
        }
        r.status = self.status();
        let mut coded: Vec<&Problem> = self.problems.iter().filter(|p| p.code.is_some()).collect();
        coded.sort_by_key(|p| std::cmp::Reverse(p.status));
        for p in coded {
            if let Some(code) = p.code {
                let fix = Some(p.fix.clone());
                r.findings
                    .push(Finding::new(code, p.status, p.text.clone(), fix));
            }
        }
        if self.fixes.is_empty() {
            r
        } else {
            r.fix(self.fixes.join("; "))
        }
    }

    /// `summary` alone when nothing was found, else `summary: problem; problem` with the worst status.
    pub fn result(self, id: &str, summary: impl Into<String>) -> CheckResult {
        let summary = summary.into();
        if self.problems.is_empty() {
            return CheckResult::pass(id, summary);
        }
        let summary = format!("{summary}: {}", self.listed());
        self.apply(CheckResult::pass(id, summary))
    }
}
