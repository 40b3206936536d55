//! The recovered-vs-fatal rule: each failure NCCL logged (WARN, return-code chain, completion error, a
//! framework's error name, an abort) is weighed against what the same process did next.
//!
//! - **Recovered**: the init of the communicator(s) the failure happened in completed after it (`… - Init
//!   COMPLETE` from the same host and pid). NCCL prints such chains while it picks a net plugin or probes a
//!   NIC's PCI path, and carries on.
//! - **Fatal**: it ended an init (no `Init COMPLETE` after it), came after init (no further init of that
//!   process completed), or is fatal by nature: a completion error, an `Abort COMPLETE`, a framework's
//!   `ncclSystemError`/`NCCL error in:`, or a failure no process can be named for.
//! - **Unknown**: the logs hold no init line at all and no NCCL version line that proves the build prints
//!   them (2.3 prints no `Init COMPLETE`; NCCL_DEBUG_SUBSYS without INIT hides them): never a pass, never a
//!   fail.
//!
//! Which communicator: from 2.18 NCCL prints `Init START`; a failure while a communicator of its process
//! is started and not complete waits for that one. A failure with none open waits for the next
//! communicator the process starts (2.27+ runs each communicator's net plugin init before its START line),
//! or, in builds without START lines, for the process's next `Init COMPLETE`.

use std::collections::HashMap;

use serde::Serialize;

use super::line::CommStage;

/// Processes followed; failures of others are unknown (the cap bounds memory).
const MAX_PROCESSES: usize = 1 << 16;
/// Failures kept with their text while waiting for an outcome, across all processes.
const MAX_PENDING_STORED: usize = 4096;
/// Open communicators and distinct ranks kept per process.
const MAX_PER_PROCESS: usize = 64;
/// Failures waiting in one process: past this, an init is not being probed, it is failing.
const MAX_PENDING_PER_PROCESS: usize = 256;
/// Failures listed per outcome (the totals count them all).
pub const MAX_LISTED: usize = 200;

/// What kind of failure a log line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// An `NCCL WARN` line.
    Warn,
    /// `Got completion … with error|status=`: an RDMA work request failed (transport setup or data movement).
    #[serde(rename = "completion-error")]
    Completion,
    /// `transport/net_ib.cc:911 -> 2`: an error code returned up the stack (the frames in `message`).
    ReturnCode,
    /// `ncclSystemError`, `ncclRemoteError`, … or PyTorch's `NCCL error in:`, outside NCCL's own lines.
    NcclError,
    /// `comm 0x… rank 3 nranks 16 … - Abort COMPLETE`: the communicator was aborted.
    Abort,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Warn => "warn",
            FailureKind::Completion => "completion-error",
            FailureKind::ReturnCode => "return-code",
            FailureKind::NcclError => "nccl-error",
            FailureKind::Abort => "abort",
        }
    }

    /// Kinds that are failures whenever they come: they are never part of NCCL probing its way through init.
    fn always_fatal(self) -> bool {
        matches!(
            self,
            FailureKind::Completion | FailureKind::NcclError | FailureKind::Abort
        )
    }
}

/// How a failure stands against NCCL's own outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorOutcome {
    /// Ended an init, came after init, or fatal by nature: fails the expectation.
    Fatal,
    /// The same process's init completed after it: shown, does not fail.
    Recovered,
    /// The logs cannot tell: the judgement is undetermined.
    Unknown,
}

/// A line that shows NCCL failing, with what became of it.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub source: String,
    pub line: u64,
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// The rank of the communicator it was weighed against (from its init lines), where known.
    pub rank: Option<u32>,
    pub location: Option<String>,
    pub message: String,
    pub outcome: ErrorOutcome,
    /// Why the outcome is what it is, naming the init line that decided it.
    pub why: String,
    /// Order of appearance across the inputs (the lists are sorted by it).
    #[serde(skip)]
    pub(super) seq: u64,
}

/// How one process (one rank per communicator) came out of NCCL's init, from its init lines and failures.
#[derive(Debug, Clone, Serialize)]
pub struct RankOutcome {
    pub host: String,
    pub pid: u32,
    /// Its ranks in the communicators whose init lines it printed.
    pub ranks: Vec<u32>,
    pub comms_started: u32,
    pub comms_completed: u32,
    pub comms_aborted: u32,
    /// `ok` (no failure), `recovered` (only recovered failures), `fatal`, or `unknown`.
    pub outcome: RankState,
    pub fatal_errors: u64,
    pub recovered_errors: u64,
    pub unknown_errors: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RankState {
    Ok,
    Recovered,
    Fatal,
    Unknown,
}

/// Where a failure being built sits (for the frames of a return-code chain that join it).
#[derive(Debug, Clone, Copy)]
pub(super) enum Slot {
    Listed(ErrorOutcome, usize),
    Pending { process: usize, index: usize },
    Dropped,
}

#[derive(Debug)]
struct Pending {
    failure: Option<Failure>,
    count: u64,
    /// Communicators whose `Init COMPLETE` it waits for; empty: the next one the process starts or completes.
    waiting: Vec<String>,
}

#[derive(Debug, Default)]
struct Process {
    host: String,
    pid: u32,
    open: Vec<String>,
    ranks: Vec<u32>,
    started: u32,
    completed: u32,
    aborted: u32,
    /// `file:line` of the last `Init COMPLETE`.
    last_complete: Option<String>,
    pending: Vec<Pending>,
    fatal: u64,
    recovered: u64,
    unknown: u64,
}

/// Failures by outcome, and the processes they belong to.
#[derive(Debug, Default)]
pub(super) struct Outcomes {
    processes: Vec<Process>,
    /// Processes by pid (a few hosts may share one): no allocation to find one.
    index: HashMap<u32, Vec<usize>>,
    stored_pending: usize,
    seq: u64,
    /// Init lines seen from any process: the build and the subsystem mask print them.
    pub(super) init_lines: u64,
    pub(super) fatal: Vec<Failure>,
    pub(super) fatal_total: u64,
    pub(super) recovered: Vec<Failure>,
    pub(super) recovered_total: u64,
    pub(super) unknown: Vec<Failure>,
    pub(super) unknown_total: u64,
}

impl Outcomes {
    fn process(&mut self, host: &str, pid: u32) -> Option<usize> {
        let same_pid = self.index.entry(pid).or_default();
        if let Some(&i) = same_pid.iter().find(|&&i| self.processes[i].host == host) {
            return Some(i);
        }
        if self.processes.len() >= MAX_PROCESSES {
            return None;
        }
        same_pid.push(self.processes.len());
        self.processes.push(Process {
            host: host.to_string(),
            pid,
            ..Process::default()
        });
        Some(self.processes.len() - 1)
    }

    /// A new failure seen `count` times; returns where it sits.
    pub(super) fn failure(&mut self, mut f: Failure, count: u64) -> Slot {
        f.seq = self.seq;
        self.seq += 1;
        let who = f.host.clone().zip(f.pid);
        if f.kind.always_fatal() {
            let why = match f.kind {
                FailureKind::Completion => "an RDMA work request failed: fatal whenever it comes",
                FailureKind::Abort => "the communicator was aborted",
                _ => "a framework reported a failed NCCL call",
            };
            f.why = why.into();
            let p = who.and_then(|(host, pid)| self.process(&host, pid));
            return self.settle(p, f, count, ErrorOutcome::Fatal);
        }
        let Some((host, pid)) = who else {
            f.why = "no NCCL prefix names its process, so no init can have followed it".into();
            return self.settle(None, f, count, ErrorOutcome::Fatal);
        };
        let Some(p) = self.process(&host, pid) else {
            f.why = format!("more than {MAX_PROCESSES} processes in the logs: not followed");
            return self.settle(None, f, count, ErrorOutcome::Unknown);
        };
        let process = &mut self.processes[p];
        if process.pending.len() >= MAX_PENDING_PER_PROCESS {
            f.why = format!("more than {MAX_PENDING_PER_PROCESS} failures in one init");
            return self.settle(Some(p), f, count, ErrorOutcome::Fatal);
        }
        let waiting = process.open.clone();
        let failure = (self.stored_pending < MAX_PENDING_STORED).then(|| {
            self.stored_pending += 1;
            f
        });
        process.pending.push(Pending {
            failure,
            count,
            waiting,
        });
        Slot::Pending {
            process: p,
            index: process.pending.len() - 1,
        }
    }

    /// The failure a chain's next frame joins.
    pub(super) fn get_mut(&mut self, slot: Slot) -> Option<&mut Failure> {
        match slot {
            Slot::Listed(ErrorOutcome::Fatal, i) => self.fatal.get_mut(i),
            Slot::Listed(ErrorOutcome::Recovered, i) => self.recovered.get_mut(i),
            Slot::Listed(ErrorOutcome::Unknown, i) => self.unknown.get_mut(i),
            Slot::Pending { process, index } => self
                .processes
                .get_mut(process)?
                .pending
                .get_mut(index)?
                .failure
                .as_mut(),
            Slot::Dropped => None,
        }
    }

    /// An init line (`Init START`, `Init COMPLETE`, `Abort COMPLETE`) from `host`/`pid` at `at` (`file:line`).
    pub(super) fn lifecycle(
        &mut self,
        host: &str,
        pid: u32,
        comm: &str,
        rank: u32,
        stage: CommStage,
        at: &str,
    ) {
        self.init_lines += 1;
        let Some(p) = self.process(host, pid) else {
            return;
        };
        let process = &mut self.processes[p];
        if process.ranks.len() < MAX_PER_PROCESS && !process.ranks.contains(&rank) {
            process.ranks.push(rank);
        }
        let pending = std::mem::take(&mut process.pending);
        let mut still = Vec::with_capacity(pending.len());
        let mut settled = Vec::new();
        match stage {
            CommStage::InitStart => {
                process.started += 1;
                if process.open.len() < MAX_PER_PROCESS && !process.open.iter().any(|c| c == comm) {
                    process.open.push(comm.to_string());
                }
                // Failures with no communicator open belong to the one starting now.
                for mut w in pending {
                    if w.waiting.is_empty() {
                        w.waiting.push(comm.to_string());
                    }
                    still.push(w);
                }
            }
            CommStage::InitComplete => {
                process.completed += 1;
                process.last_complete = Some(at.to_string());
                process.open.retain(|c| c != comm);
                for mut w in pending {
                    w.waiting.retain(|c| c != comm);
                    if w.waiting.is_empty() {
                        let why = format!(
                            "recovered: the init of comm {comm} (rank {rank}) in the same process completed after it, at {at}"
                        );
                        settled.push((w, why, ErrorOutcome::Recovered));
                    } else {
                        still.push(w);
                    }
                }
            }
            CommStage::AbortComplete => {
                process.aborted += 1;
                process.open.retain(|c| c != comm);
                for w in pending {
                    if w.waiting.iter().any(|c| c == comm) {
                        let why =
                            format!("its communicator {comm} (rank {rank}) was aborted at {at}");
                        settled.push((w, why, ErrorOutcome::Fatal));
                    } else {
                        still.push(w);
                    }
                }
            }
        }
        self.processes[p].pending = still;
        for (w, why, outcome) in settled {
            self.settle_pending(p, w, why, Some(rank), outcome);
        }
    }

    fn settle_pending(
        &mut self,
        p: usize,
        w: Pending,
        why: String,
        rank: Option<u32>,
        outcome: ErrorOutcome,
    ) {
        match w.failure {
            Some(mut f) => {
                self.stored_pending -= 1;
                f.why = why;
                f.rank = rank.or_else(|| self.processes[p].ranks.first().copied());
                self.settle(Some(p), f, w.count, outcome);
            }
            None => self.count(Some(p), w.count, outcome),
        }
    }

    fn count(&mut self, p: Option<usize>, count: u64, outcome: ErrorOutcome) {
        let process = p.and_then(|p| self.processes.get_mut(p));
        match outcome {
            ErrorOutcome::Fatal => {
                self.fatal_total += count;
                if let Some(p) = process {
                    p.fatal += count;
                }
            }
            ErrorOutcome::Recovered => {
                self.recovered_total += count;
                if let Some(p) = process {
                    p.recovered += count;
                }
            }
            ErrorOutcome::Unknown => {
                self.unknown_total += count;
                if let Some(p) = process {
                    p.unknown += count;
                }
            }
        }
    }

    fn settle(
        &mut self,
        p: Option<usize>,
        mut f: Failure,
        count: u64,
        outcome: ErrorOutcome,
    ) -> Slot {
        self.count(p, count, outcome);
        f.outcome = outcome;
        if f.rank.is_none() {
            f.rank = p.and_then(|p| self.processes[p].ranks.first().copied());
        }
        let list = match outcome {
            ErrorOutcome::Fatal => &mut self.fatal,
            ErrorOutcome::Recovered => &mut self.recovered,
            ErrorOutcome::Unknown => &mut self.unknown,
        };
        if list.len() >= MAX_LISTED {
            return Slot::Dropped;
        }
        list.push(f);
        Slot::Listed(outcome, list.len() - 1)
    }

    /// Settles what is still waiting at the end of the logs; `knowable`: the logs prove that the build and
    /// the subsystem mask print init lines. Returns every process's outcome.
    pub(super) fn finish(&mut self, knowable: bool) -> Vec<RankOutcome> {
        for p in 0..self.processes.len() {
            let pending = std::mem::take(&mut self.processes[p].pending);
            for w in pending {
                let process = &self.processes[p];
                let (why, outcome) = if !knowable {
                    (
                        "no init line (`Init COMPLETE`) in these logs and no NCCL >= 2.4 version line: whether NCCL \
                         recovered cannot be told (NCCL 2.3 prints none; NCCL_DEBUG_SUBSYS without INIT hides them)"
                            .to_string(),
                        ErrorOutcome::Unknown,
                    )
                } else if let Some(comm) = w.waiting.first() {
                    (
                        format!("ended the init of comm {comm}: no Init COMPLETE for it after this line"),
                        ErrorOutcome::Fatal,
                    )
                } else if let Some(at) = &process.last_complete {
                    (
                        format!("after init (the process's last Init COMPLETE is at {at}, and no init completed after this line)"),
                        ErrorOutcome::Fatal,
                    )
                } else {
                    (
                        "ended the process's init: no Init COMPLETE from it after this line"
                            .to_string(),
                        ErrorOutcome::Fatal,
                    )
                };
                self.settle_pending(p, w, why, None, outcome);
            }
        }
        for list in [&mut self.fatal, &mut self.recovered, &mut self.unknown] {
            list.sort_by_key(|f| f.seq);
        }
        let mut ranks: Vec<RankOutcome> = self
            .processes
            .iter()
            .map(|p| RankOutcome {
                host: p.host.clone(),
                pid: p.pid,
                ranks: p.ranks.clone(),
                comms_started: p.started,
                comms_completed: p.completed,
                comms_aborted: p.aborted,
                outcome: if p.fatal > 0 {
                    RankState::Fatal
                } else if p.unknown > 0 {
                    RankState::Unknown
                } else if p.recovered > 0 {
                    RankState::Recovered
                } else {
                    RankState::Ok
                },
                fatal_errors: p.fatal,
                recovered_errors: p.recovered,
                unknown_errors: p.unknown,
            })
            .collect();
        ranks.sort_by(|a, b| (&a.host, a.pid).cmp(&(&b.host, b.pid)));
        ranks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::analyze_text as analyze;

    const V: &str = "h:1:1 [0] NCCL INFO NCCL version 2.14.3+cuda11.8\n";
    const FRAME: &str = "h:1:1 [0] NCCL INFO include/net.h:19 -> 2\n";

    fn complete(comm: &str) -> String {
        format!("h:1:1 [0] NCCL INFO comm {comm} rank 2 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE\n")
    }

    fn outcomes(text: &str) -> Vec<ErrorOutcome> {
        let s = analyze(text);
        let mut all: Vec<&Failure> = s
            .errors
            .iter()
            .chain(&s.recovered_errors)
            .chain(&s.unknown_errors)
            .collect();
        all.sort_by_key(|f| f.line);
        all.iter().map(|f| f.outcome).collect()
    }

    #[test]
    fn without_start_lines_the_next_init_complete_decides() {
        use ErrorOutcome::*;
        // 2.5 – 2.17 print no Init START: a failure waits for the process's next Init COMPLETE.
        let a = complete("0xa");
        let b = complete("0xb");
        assert_eq!(outcomes(&format!("{V}{FRAME}{a}")), [Recovered]);
        assert_eq!(outcomes(&format!("{V}{a}{FRAME}{b}")), [Recovered]);
        assert_eq!(outcomes(&format!("{V}{a}{FRAME}")), [Fatal]);
        assert_eq!(outcomes(&format!("{V}{FRAME}")), [Fatal]);
        // Another process's init completing proves nothing for this one.
        let other =
            "g:9:9 [0] NCCL INFO comm 0xc rank 1 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE\n";
        assert_eq!(outcomes(&format!("{FRAME}{other}")), [Fatal]);
        // No init line and no version that prints them: unknown.
        assert_eq!(outcomes(FRAME), [Unknown]);
        assert_eq!(
            outcomes(&format!("NCCL version 2.3.7+cuda9.2\n{FRAME}")),
            [Unknown]
        );
    }

    #[test]
    fn fatal_kinds_stay_fatal_whatever_follows() {
        use ErrorOutcome::*;
        let a = complete("0xa");
        for line in [
            "h:1:1 [0] net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.9.0.2<4> with status=12 opcode=0 len=0 vendor err 129 hca mlx5_0\n",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed\n",
            ":1:1 [0] NCCL INFO foo.cc:3 -> 2\n",
        ] {
            assert_eq!(outcomes(&format!("{V}{line}{a}")), [Fatal], "{line}");
        }
    }

    #[test]
    fn start_lines_tie_a_failure_to_its_communicator() {
        use ErrorOutcome::*;
        let start = |comm: &str| {
            format!("h:1:1 [0] NCCL INFO ncclCommInitRank comm {comm} rank 2 nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x1 - Init START\n")
        };
        let (sa, sb, ca, cb) = (start("0xa"), start("0xb"), complete("0xa"), complete("0xb"));
        // During A's init, A completes: recovered. During B's (A already complete), B never does: fatal.
        assert_eq!(outcomes(&format!("{sa}{FRAME}{ca}")), [Recovered]);
        assert_eq!(outcomes(&format!("{sa}{ca}{sb}{FRAME}")), [Fatal]);
        // Two open at once: both must complete.
        assert_eq!(outcomes(&format!("{sa}{sb}{FRAME}{ca}")), [Fatal]);
        assert_eq!(outcomes(&format!("{sa}{sb}{FRAME}{ca}{cb}")), [Recovered]);
        // Before B's START (its net plugin init runs first), joined to B.
        assert_eq!(outcomes(&format!("{sa}{ca}{FRAME}{sb}{cb}")), [Recovered]);
        // After init, nothing else starts: fatal.
        assert_eq!(outcomes(&format!("{sa}{ca}{FRAME}")), [Fatal]);
        // Aborted while it waited: fatal, and the abort itself is listed.
        let abort =
            "h:1:1 [0] NCCL INFO comm 0xa rank 2 nranks 8 cudaDev 0 busId 1b000 - Abort COMPLETE\n";
        assert_eq!(outcomes(&format!("{sa}{FRAME}{abort}")), [Fatal, Fatal]);
        let s = analyze(&format!("{sa}{FRAME}{abort}"));
        assert_eq!(s.ranks[0].outcome, RankState::Fatal);
        assert_eq!(s.ranks[0].comms_aborted, 1);
    }

    #[test]
    fn many_recovered_chains_never_hide_a_fatal_one() {
        let mut text = String::from(V);
        for pid in 0..(MAX_LISTED as u32 + 50) {
            text.push_str(&format!("h:{pid}:1 [0] NCCL INFO net.cc:79 -> 3\n"));
            text.push_str(&format!(
                "h:{pid}:1 [0] NCCL INFO comm 0x1 rank {pid} nranks 512 cudaDev 0 busId 1b000 - Init COMPLETE\n"
            ));
        }
        text.push_str("h:9999:1 [0] NCCL INFO init.cc:1 -> 2\n");
        let s = analyze(&text);
        assert_eq!(s.recovered_errors_total, MAX_LISTED as u64 + 50);
        assert_eq!(s.recovered_errors.len(), MAX_LISTED);
        assert_eq!(s.errors_total, 1);
        assert_eq!(s.errors[0].pid, Some(9999));
    }
}
