//! How `pair` supervises its links: each on a supervised thread ([`crate::tasks`], the runner's machinery), with
//! the deadline and a grace, SIGTERM and panics met as the runner meets them. A link records its steps in a
//! [`Tally`] as they finish and names the step in flight, so a link that does not come back is reported with
//! what it found and an error for that step; the report is written either way.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::measure::memory::MemoryChoice;
use crate::model::{common, CheckResult, FindingCode, Status};
use crate::pair::child;
use crate::pair::inventory::Inventory;
use crate::pair::judge::{self, ID_HANDSHAKE, ID_RDMA};
use crate::report::{Ring, RingLink};
use crate::tasks::{self, Ended, Task, INTERRUPT_GRACE};

/// After the deadline, this long for the links' last results before the report is written without them.
pub const GRACE: Duration = Duration::from_secs(5);

/// One link to supervise: its name (`a <-> b`), its tally, and the work that fills the tally.
pub struct LinkWork {
    pub name: String,
    pub tally: Arc<Tally>,
    pub work: Box<dyn FnOnce() + Send>,
}

/// A link's name and tally, kept while its work runs.
type Named = (String, Arc<Tally>);

/// Runs every link at once and returns each one's results, in order: all of them for a link that came back;
/// what it had, and an error for the step in flight, for one that overran the deadline and the grace or a
/// stopping signal; an error saying so after what it had for one that panicked.
pub fn links(links: Vec<LinkWork>, deadline: Instant) -> Vec<Vec<CheckResult>> {
    let until = deadline + GRACE;
    let (named, tasks): (Vec<Named>, Vec<Task<()>>) = links
        .into_iter()
        .map(|l| {
            let task = Task {
                name: format!("pair {}", l.name),
                until,
                work: l.work,
            };
            ((l.name, l.tally), task)
        })
        .unzip();
    let ended = tasks::supervise(tasks);
    if ended.iter().any(|e| matches!(e, Ended::TimedOut)) {
        eprintln!("fabric-preflight pair: the deadline passed {GRACE:?} ago and a call has not returned; writing the report without it");
    }
    named
        .into_iter()
        .zip(ended)
        .map(|((name, tally), ended)| match ended {
            Ended::Done(()) => tally.take(),
            Ended::Panicked(message) => {
                tally.panicked(&name, &message);
                tally.take()
            }
            Ended::TimedOut => tally.so_far(
                &format!(
                    "did not return within the deadline and {} s of grace; the report was written without it",
                    GRACE.as_secs()
                ),
                &common::TIMED_OUT,
            ),
            Ended::Interrupted(signal) => tally.so_far(
                &format!(
                    "interrupted by {signal} and did not return within {} s; the report was written without it",
                    INTERRUPT_GRACE.as_secs()
                ),
                &common::INTERRUPTED,
            ),
            Ended::Lost(why) => tally.so_far(&why, &common::PROBE_FAILED),
        })
        .collect()
}

/// This node's ports and GPUs, listed in a supervised child (`pair::child::list_ports`): a listing whose child
/// is killed but whose output a helper it forked holds open still ends, as an error, in time to tell the peer.
pub fn inventory(root: Option<PathBuf>, memory: MemoryChoice, deadline: Instant) -> Inventory {
    let limit = child::inventory_limit(deadline);
    let task = Task {
        name: "pair inventory".into(),
        until: Instant::now() + limit + child::CHILD_GRACE,
        work: Box::new(move || child::list_ports(root, memory, limit)),
    };
    let (why, code) = match tasks::supervise(vec![task]).pop() {
        Some(Ended::Done(inv)) => return inv,
        Some(Ended::TimedOut) => (
            format!("did not return within {} s", limit.as_secs_f64()),
            &common::TIMED_OUT,
        ),
        Some(Ended::Interrupted(signal)) => {
            (format!("interrupted by {signal}"), &common::INTERRUPTED)
        }
        Some(Ended::Panicked(message)) => (format!("panicked: {message}"), &common::PROBE_FAILED),
        Some(Ended::Lost(why)) => (why, &common::PROBE_FAILED),
        None => ("never started".into(), &common::PROBE_FAILED),
    };
    Inventory::failed(
        format!("listing this node's RDMA ports and GPUs: {why}"),
        code,
    )
}

/// Where this node sits in the ring, for its `pair.ring` result and its report's `ring`.
pub struct RingPlace {
    pub members: Vec<String>,
    pub rank: usize,
    pub source: String,
}

impl RingPlace {
    fn me(&self) -> &str {
        &self.members[self.rank]
    }

    /// The ring as the report carries it: `statuses` of the link with the predecessor, then the successor.
    pub fn report(&self, statuses: [Status; 2]) -> Ring {
        let n = self.members.len();
        let (prev, next) = (
            &self.members[(self.rank + n - 1) % n],
            &self.members[(self.rank + 1) % n],
        );
        let me = self.me();
        let link = |a: &str, b: &str, status| RingLink {
            a: a.to_string(),
            b: b.to_string(),
            status,
        };
        Ring {
            members: self.members.clone(),
            rank: self.rank,
            source: self.source.clone(),
            links: vec![link(prev, me, statuses[0]), link(me, next, statuses[1])],
        }
    }

    /// The ring summary of this node's links.
    pub fn summary(&self, ring: &Ring) -> CheckResult {
        let links: Vec<(String, String, Status)> = ring
            .links
            .iter()
            .map(|l| (l.a.clone(), l.b.clone(), l.status))
            .collect();
        let mut summary = judge::ring_summary(self.me(), &links);
        summary.evidence.insert(
            0,
            format!(
                "ring = {} (rank {} of {}, from {})",
                self.members.join(","),
                self.rank,
                self.members.len(),
                self.source
            ),
        );
        summary
    }
}

/// A link's verdict: its worst result; a link without any is an error.
pub fn worst(results: &[CheckResult]) -> Status {
    results
        .iter()
        .map(|r| r.status)
        .max()
        .unwrap_or(Status::Error)
}
/// A link's results so far, and the error to report for the step in flight if it never returns.
#[derive(Default)]
pub struct Tally {
    steps: Mutex<(Vec<CheckResult>, Option<CheckResult>)>,
}

impl Tally {
    fn lock(&self) -> MutexGuard<'_, (Vec<CheckResult>, Option<CheckResult>)> {
        // A thread that panicked holding the lock left consistent data: every change is one push or one set.
        self.steps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A step starts; `if_stuck` names it, should it never return.
    pub fn begin(&self, if_stuck: CheckResult) {
        self.lock().1 = Some(if_stuck);
    }

    /// A step's result; nothing is in flight any more.
    pub fn record(&self, r: CheckResult) {
        let mut t = self.lock();
        t.0.push(r);
        t.1 = None;
    }

    fn take(&self) -> Vec<CheckResult> {
        std::mem::take(&mut self.lock().0)
    }

    /// The results of a link that did not come back, and the step in flight as an error saying `why`, coded
    /// with how it ended.
    fn so_far(&self, why: &str, code: &FindingCode) -> Vec<CheckResult> {
        let t = self.lock();
        let stuck = t.1.clone().map(|mut r| {
            r.summary.push_str(&format!(": {why}"));
            r.code(code)
        });
        // Between two steps nothing is in flight, yet the link has not finished: its verdict is missing, which is
        // an error, never the pass its earlier steps alone would make.
        let unfinished = stuck.is_none().then(|| {
            CheckResult::error(ID_RDMA, format!("the link had not finished: {why}")).code(code)
        });
        t.0.iter().cloned().chain(stuck).chain(unfinished).collect()
    }

    /// The thread running this link panicked: the step in flight (or the link) ends in an error saying so.
    fn panicked(&self, link: &str, message: &str) {
        let mut t = self.lock();
        let (id, subject) = match t.1.take() {
            Some(stuck) => (stuck.id, stuck.subject.unwrap_or_else(|| link.to_string())),
            None => (ID_HANDSHAKE.to_string(), link.to_string()),
        };
        t.0.push(
            CheckResult::error(
                &id,
                format!("the thread testing {link} panicked: {message}"),
            )
            .subject(subject)
            .fix(
                "this is a bug in fabric-preflight: please report it with the evidence of this run",
            )
            .code(&common::PROBE_FAILED),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link found between two steps (the handshake recorded, the measurement not yet begun) had nothing in
    /// flight: once reported as only the handshake's pass, exit 0 for a link never measured.
    #[test]
    fn a_link_between_two_steps_is_reported_unfinished() {
        let tally = Tally::default();
        tally.record(CheckResult::pass(ID_HANDSHAKE, "handshake done"));
        let results = tally.so_far("did not return", &common::TIMED_OUT);
        assert_eq!(worst(&results), Status::Error, "{results:?}");
        assert_eq!(worst(&tally.take()), Status::Pass);
    }

    /// A ring node's serving thread that panics leaves an error naming the step it was in, after what it had
    /// already found; a link that overruns is reported with the same words the supervisor gives.
    #[test]
    fn a_link_thread_that_panics_or_hangs_leaves_a_result_saying_why() {
        tasks::install_panic_hook();
        let deadline = Instant::now();
        let work = |hang: bool| {
            let tally = Arc::new(Tally::default());
            let t = tally.clone();
            LinkWork {
                name: "a <-> b".into(),
                tally,
                work: Box::new(move || {
                    t.record(CheckResult::pass(ID_HANDSHAKE, "handshake done"));
                    t.begin(
                        CheckResult::error(ID_RDMA, "measurement with b")
                            .subject("a:mlx5_0/1 <-> b:mlx5_0/1"),
                    );
                    if hang {
                        std::thread::sleep(Duration::from_secs(60));
                    }
                    panic!("index out of bounds")
                }),
            }
        };
        let started = Instant::now();
        let mut results = links(vec![work(false), work(true)], deadline);
        // The grace, not the hung thread's 60 s.
        assert!(started.elapsed() < GRACE + Duration::from_secs(10));
        let hung = results.pop().unwrap();
        let panicked = results.pop().unwrap();
        for results in [&panicked, &hung] {
            assert_eq!(results.len(), 2);
            let r = &results[1];
            assert_eq!((r.status, r.id.as_str()), (Status::Error, ID_RDMA));
            assert_eq!(r.subject.as_deref(), Some("a:mlx5_0/1 <-> b:mlx5_0/1"));
        }
        assert_eq!(
            panicked[1].summary,
            "the thread testing a <-> b panicked: index out of bounds"
        );
        assert!(
            hung[1].summary.starts_with(
                "measurement with b: did not return within the deadline and 5 s of grace"
            ),
            "{}",
            hung[1].summary
        );
    }
}
