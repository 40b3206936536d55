//! Schedules probes, enforces deadlines, and turns panics, crashes and timeouts into `error` results.
//! Nothing here knows a particular probe: it sees ids, kinds, deadlines and the library facts they name, which
//! it gathers once per run ([`facts`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::child::fmt_secs;
use crate::child::ChildFailure;
use crate::host::Host;
use crate::interrupt;
use crate::model::{AnswerSource, CheckResult, Library, Status};
use crate::probe::{common, Context, FactSource, Inputs, Kind, Probe};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::recording::Answers;
use crate::tasks::{self, Ended, Task};

pub mod facts;
pub mod probe_child;

use probe_child::{run_in_child, ProbeJob};

/// Extra time the runner waits for a child-process probe past its deadline: the thread that kills the child
/// reports the call it was stuck in, which beats a bare "timed out".
const CHILD_GRACE: Duration = Duration::from_secs(2);

/// What the runner shares with every probe thread.
pub struct RunInputs {
    pub host: Host,
    pub profile: Profile,
    pub inputs: Inputs,
    pub answers: Answers,
}

pub struct RunOutcome {
    /// In the order the probes were given, each probe's results in the order it returned them.
    pub results: Vec<CheckResult>,
    /// Vendor answers collected live (for `snapshot`).
    pub recorded: BTreeMap<String, Value>,
}

/// A library a check was killed in at its deadline: not called again this run.
#[derive(Debug, Clone)]
struct Hung {
    library: Library,
    call: String,
    probe: &'static str,
    after: Duration,
}

/// The libraries that hung so far, shared by every probe thread of the run.
type HungLibraries = Arc<Mutex<Vec<Hung>>>;

/// The library facts being gathered for this run, by source key.
type Gatherings = Arc<BTreeMap<&'static str, Arc<facts::Gathering>>>;

struct Scheduled {
    probe: &'static dyn Probe,
    timeout: Duration,
    /// Why the deadline is what it is, for the timeout message.
    cut_by_run_deadline: bool,
}

/// Runs `probes`: static and library probes concurrently, then active probes one at a time, each named on
/// `progress` as it starts.
pub fn run(
    probes: &[&'static dyn Probe],
    shared: RunInputs,
    run_timeout: Duration,
    progress: &Progress,
) -> RunOutcome {
    let run_deadline = Instant::now() + run_timeout;
    let shared = Arc::new(shared);
    let hung = HungLibraries::default();
    let mut slots: Vec<Option<Vec<CheckResult>>> = vec![None; probes.len()];

    let (concurrent, active): (Vec<usize>, Vec<usize>) =
        (0..probes.len()).partition(|&i| probes[i].kind() != Kind::Active);
    let gatherings = start_gathering(probes, &concurrent, &shared, &hung, run_deadline);
    run_batch(
        probes,
        &concurrent,
        &shared,
        &hung,
        &gatherings,
        run_deadline,
        run_timeout,
        &mut slots,
    );
    for (n, &i) in active.iter().enumerate() {
        progress.active(probes[i].id(), n + 1, active.len());
        run_batch(
            probes,
            &[i],
            &shared,
            &hung,
            &gatherings,
            run_deadline,
            run_timeout,
            &mut slots,
        );
    }
    if !active.is_empty() {
        progress.clear();
    }

    let mut results = Vec::new();
    for (probe, slot) in probes.iter().zip(slots) {
        let settings = shared.profile.settings(probe.id());
        let required = settings.required.unwrap_or(false);
        for mut r in slot.unwrap_or_default() {
            if required && r.status == Status::Skip {
                r.status = Status::Fail;
                r.summary = format!("required by profile but skipped: {}", r.summary);
                // The deciding finding goes first; the skip's own stays, saying what was missing.
                r = r.code(&common::REQUIRED_SKIPPED);
                r.findings.rotate_right(1);
            }
            results.push(r);
        }
    }
    RunOutcome {
        results,
        recorded: shared.answers.take_recorded(),
    }
}

/// Starts gathering, each source in a child process of its own, the facts the library probes of `batch` judge,
/// when the answers are live (a recording holds them already). A source's deadline is the longest of its
/// probes'; a hang there is charged to the first of them, and the library is not called again this run.
fn start_gathering(
    probes: &[&'static dyn Probe],
    batch: &[usize],
    shared: &Arc<RunInputs>,
    hung: &HungLibraries,
    run_deadline: Instant,
) -> Gatherings {
    let left = run_deadline.saturating_duration_since(Instant::now());
    let mut wanted: BTreeMap<&'static str, (&'static FactSource, Duration, &'static str)> =
        BTreeMap::new();
    if shared.answers.source() == AnswerSource::Live && !left.is_zero() {
        for probe in batch.iter().map(|&i| probes[i]) {
            if probe.kind() != Kind::Library {
                continue;
            }
            let timeout = own_timeout(probe, &shared.profile).min(left);
            for &source in probe.meta().facts {
                let (_, longest, _) =
                    wanted
                        .entry(source.key)
                        .or_insert((source, timeout, probe.id()));
                *longest = (*longest).max(timeout);
            }
        }
    }
    let mut gatherings = BTreeMap::new();
    for (key, (source, timeout, first)) in wanted {
        let gathering = Arc::new(facts::Gathering::default());
        gatherings.insert(key, gathering.clone());
        if source
            .only_if
            .is_some_and(|could_be| !could_be(&shared.host))
        {
            shared
                .answers
                .not_asked(key, "its hardware is not on this host");
            gathering.finish(Ok(()));
            continue;
        }
        let (shared, hung, done) = (shared.clone(), hung.clone(), gathering.clone());
        let body = move || {
            let outcome = facts::gather(source, timeout).map(|value| {
                shared
                    .answers
                    .provide(BTreeMap::from([(key.to_string(), value)]))
            });
            if let Err(failure) = &outcome {
                note_hung(&hung, failure, first, timeout);
            }
            done.finish(outcome);
        };
        if let Err(e) = std::thread::Builder::new()
            .name(format!("facts:{key}"))
            .spawn(body)
        {
            gathering.finish(Err(ChildFailure {
                summary: format!("cannot start a thread to gather {key}: {e}"),
                evidence: vec![],
                timed_out: false,
                last_call: None,
                interrupted: false,
            }));
        }
    }
    Arc::new(gatherings)
}

/// The probe's deadline: the profile's, else its own default.
fn own_timeout(probe: &dyn Probe, profile: &Profile) -> Duration {
    profile
        .settings(probe.id())
        .timeout
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or_else(|| probe.default_timeout())
}

#[allow(clippy::too_many_arguments)]
fn run_batch(
    probes: &[&'static dyn Probe],
    batch: &[usize],
    shared: &Arc<RunInputs>,
    hung: &HungLibraries,
    gatherings: &Gatherings,
    run_deadline: Instant,
    run_timeout: Duration,
    slots: &mut [Option<Vec<CheckResult>>],
) {
    let mut tasks = Vec::new();
    let mut scheduled = Vec::new();
    for &i in batch {
        let probe = probes[i];
        let now = Instant::now();
        let own = own_timeout(probe, &shared.profile);
        if let Some(h) = hung_library_needed(probe, hung) {
            slots[i] = Some(vec![not_called_again(probe.id(), &h)]);
            continue;
        }
        let left = run_deadline.saturating_duration_since(now);
        if let Some(signal) = interrupt::requested() {
            slots[i] = Some(vec![interrupted_result(probe, signal, "not started")]);
            continue;
        }
        if left.is_zero() {
            slots[i] = Some(vec![CheckResult::error(
                probe.id(),
                format!(
                    "not started: the run deadline (--timeout {} s) was reached",
                    fmt_secs(run_timeout)
                ),
            )
            .code(&common::TIMED_OUT)]);
            continue;
        }
        let s = Scheduled {
            probe,
            timeout: own.min(left),
            cut_by_run_deadline: left < own,
        };
        let until = now
            + s.timeout
            + if probe.kind() == Kind::Static {
                Duration::ZERO
            } else {
                CHILD_GRACE
            };
        let cut_by = s.cut_by_run_deadline.then_some(run_timeout);
        let (timeout, shared, hung) = (s.timeout, shared.clone(), hung.clone());
        let gatherings = gatherings.clone();
        // Recorded answers touch no library: nothing to contain in a child.
        let replay = shared.answers.source() == AnswerSource::Recorded;
        tasks.push(Task {
            name: probe.id().to_string(),
            until,
            work: Box::new(move || match probe.kind() {
                Kind::Static => run_in_process(probe, timeout, &shared),
                _ if replay => run_in_process(probe, timeout, &shared),
                Kind::Library => {
                    judge_gathered(probe, timeout, cut_by, &shared, &hung, &gatherings)
                }
                Kind::Active => run_isolated(probe, timeout, cut_by, &shared, &hung),
            }),
        });
        scheduled.push((i, s, now));
    }
    for ((i, s, started), ended) in scheduled.into_iter().zip(tasks::supervise(tasks)) {
        let id = s.probe.id();
        slots[i] = Some(match ended {
            Ended::Done(mut results) => {
                let ms = started.elapsed().as_millis() as u64;
                if results.is_empty() {
                    results.push(
                        CheckResult::error(id, "probe returned no result")
                            .code(&common::PROBE_FAILED),
                    );
                }
                for r in &mut results {
                    r.duration_ms = ms;
                }
                results
            }
            Ended::Panicked(message) => vec![panic_result(id, &message)],
            Ended::TimedOut => vec![timeout_result(&s, started, run_timeout)],
            Ended::Interrupted(signal) => vec![interrupted_result(s.probe, signal, "gave up")],
            Ended::Lost(why) => {
                vec![CheckResult::error(id, format!("{id}: {why}")).code(&common::PROBE_FAILED)]
            }
        });
    }
}

fn timeout_result(s: &Scheduled, started: Instant, run_timeout: Duration) -> CheckResult {
    let why = if s.cut_by_run_deadline {
        format!(
            "the run deadline (--timeout {} s) was reached",
            fmt_secs(run_timeout)
        )
    } else {
        format!(
            "timed out after {} s (the probe's deadline)",
            fmt_secs(s.timeout)
        )
    };
    let mut r = CheckResult::error(s.probe.id(), format!("{}: {why}", s.probe.id()))
        .fix("raise `timeout` for this check in the profile if the node is merely slow; a probe stuck in the kernel points at a wedged driver (see dmesg)")
        .code(&common::TIMED_OUT);
    r.duration_ms = started.elapsed().as_millis() as u64;
    r
}

/// The first library `probe` calls that hung earlier in this run.
fn hung_library_needed(probe: &dyn Probe, hung: &HungLibraries) -> Option<Hung> {
    let hung = hung.lock().ok()?;
    hung.iter()
        .find(|h| probe.libraries().contains(&h.library))
        .cloned()
}

/// A check not started because a library it calls hung earlier: reported at once, costing no time.
fn not_called_again(id: &str, h: &Hung) -> CheckResult {
    CheckResult::error(
        id,
        format!(
            "{id}: not run: {} hung in {} earlier in this run ({} was killed after {} s); it is not called again",
            h.library.soname(),
            h.call,
            h.probe,
            fmt_secs(h.after)
        ),
    )
    .evidence("hung library call", &h.call)
    .code(&common::LIBRARY_HUNG)
    .fix("the library call named above hung: check `dmesg` for Xid/driver errors and the driver's health (`nvidia-smi`, `ibv_devinfo`); checks that do not need this library still ran")
}

/// A check the stopping signal cut short (`not started`, or `gave up` waiting for it).
fn interrupted_result(probe: &dyn Probe, signal: &str, what: &str) -> CheckResult {
    CheckResult::error(
        probe.id(),
        format!(
            "{}: {what}: the run was interrupted by {signal}",
            probe.id()
        ),
    )
    .fix(RERUN_AFTER_INTERRUPT)
    .code(&common::INTERRUPTED)
}

const RERUN_AFTER_INTERRUPT: &str =
    "the run was stopped (pod deleted, job cancelled or Ctrl-C) before this check finished: run it again";

/// Runs `probe` on this thread, asking library answers through a view of its own: the results say whether they
/// rest on library answers, and what it collected is kept for `snapshot`.
fn run_in_process(
    probe: &'static dyn Probe,
    timeout: Duration,
    shared: &RunInputs,
) -> Vec<CheckResult> {
    let settings = shared.profile.settings(probe.id());
    let answers = shared.answers.view();
    let cx = Context {
        host: &shared.host,
        profile: &shared.profile,
        settings: &settings,
        inputs: &shared.inputs,
        answers: &answers,
        deadline: Instant::now() + timeout,
        scratch: None,
    };
    let mut results = probe.run(&cx);
    let source = answers.source_if_consulted();
    for r in &mut results {
        r.library_answers = source;
    }
    shared.answers.absorb(answers.take_recorded());
    results
}
/// A library probe: waits for the facts it judges, then judges them in this process. A source whose child gave
/// no answers is this probe's error, worded as its own child's would have been.
fn judge_gathered(
    probe: &'static dyn Probe,
    timeout: Duration,
    cut_by: Option<Duration>,
    shared: &RunInputs,
    hung: &HungLibraries,
    gatherings: &Gatherings,
) -> Vec<CheckResult> {
    for source in probe.meta().facts {
        match gatherings.get(source.key) {
            Some(gathering) => {
                if let Err(failure) = gathering.wait() {
                    return vec![child_failed(probe, failure, cut_by)];
                }
            }
            // Gathered for every library probe of the batch; were one missed, its own child contains it.
            None => return run_isolated(probe, timeout, cut_by, shared, hung),
        }
    }
    run_in_process(probe, timeout, shared)
}

/// Records the library a child was killed in at its deadline, so that it is not called again this run.
fn note_hung(hung: &HungLibraries, failure: &ChildFailure, probe: &'static str, after: Duration) {
    if let Some(call) = failure.last_call.as_deref().filter(|_| failure.timed_out) {
        if let (Some(library), Ok(mut h)) = (Library::owning(call), hung.lock()) {
            h.push(Hung {
                library,
                call: call.to_string(),
                probe,
                after,
            });
        }
    }
}

/// The error for a check whose child (its own, or the one gathering its facts) gave no reply.
fn child_failed(probe: &dyn Probe, failure: ChildFailure, cut_by: Option<Duration>) -> CheckResult {
    let code = if failure.timed_out && cut_by.is_some() && !failure.interrupted {
        &common::TIMED_OUT
    } else {
        failure.code()
    };
    let summary = match cut_by {
        Some(run_timeout) if failure.timed_out => format!(
            "the run deadline (--timeout {} s) was reached{}",
            fmt_secs(run_timeout),
            failure
                .last_call
                .as_deref()
                .map(|c| format!(" in {c}"))
                .unwrap_or_default()
        ),
        _ => failure.summary,
    };
    let mut r = CheckResult::error(probe.id(), format!("{}: {summary}", probe.id()));
    r.evidence = failure.evidence;
    // Only a live call leaves a breadcrumb: the library itself hung or crashed.
    r.library_answers = failure.last_call.is_some().then_some(AnswerSource::Live);
    r.fix(if failure.interrupted {
        RERUN_AFTER_INTERRUPT
    } else {
        "the library call named above hung or crashed: check `dmesg` for Xid/driver errors and the driver's health; the other checks still ran"
    })
    .code(code)
}

fn run_isolated(
    probe: &'static dyn Probe,
    timeout: Duration,
    cut_by: Option<Duration>,
    shared: &RunInputs,
    hung: &HungLibraries,
) -> Vec<CheckResult> {
    // A replay measures nothing, so it gets no scratch directory and writes nothing at all.
    let scratch = if probe.kind() == Kind::Active && shared.answers.source() == AnswerSource::Live {
        make_scratch(&shared.inputs)
    } else {
        Ok(None)
    };
    let scratch = match scratch {
        Ok(s) => s,
        Err(e) => {
            return vec![CheckResult::error(
                probe.id(),
                format!("cannot create a scratch directory: {e}"),
            )
            .fix("pass --gds-dir DIR on a writable filesystem")
            .code(&common::UNREAD)]
        }
    };
    let facts = probe.meta().facts;
    let job = ProbeJob {
        id: probe.id().to_string(),
        root: (!shared.host.is_live()).then(|| shared.host.root().to_path_buf()),
        profile: shared.profile.clone(),
        inputs: shared.inputs.clone(),
        timeout_ms: timeout.as_millis() as u64,
        scratch: scratch.clone(),
        record_reads: shared.host.is_recording(),
        gathered: shared.answers.gathered_for(facts.iter().map(|s| s.key)),
    };
    let results = match run_in_child(&job, timeout) {
        Ok(reply) => {
            // Facts this child asked first are handed to the next probe that judges them.
            shared.answers.provide(
                facts
                    .iter()
                    .filter_map(|s| {
                        reply
                            .recorded
                            .get(s.key)
                            .map(|v| (s.key.to_string(), v.clone()))
                    })
                    .collect(),
            );
            shared.answers.absorb(reply.recorded);
            shared.host.record_all(reply.read_paths);
            reply.results
        }
        Err(failure) => {
            note_hung(hung, &failure, probe.id(), timeout);
            vec![child_failed(probe, failure, cut_by)]
        }
    };
    if let Some(dir) = scratch {
        // Removed here, not in the child: a child killed at its deadline cannot clean up after itself.
        let _ = std::fs::remove_dir_all(dir);
    }
    results
}

/// An empty directory for an active probe's temporary files: under `--gds-dir` when given (the filesystem
/// under test), else the system temp dir. Only this directory is created: never one the user named.
fn make_scratch(inputs: &Inputs) -> std::io::Result<Option<PathBuf>> {
    let base = inputs.gds_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "fabric-preflight-{}-{}",
        std::process::id(),
        unique_suffix()
    ));
    std::fs::create_dir(&dir)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    Ok(Some(dir))
}

fn unique_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn panic_result(id: &str, message: &str) -> CheckResult {
    CheckResult::error(id, format!("{id}: probe panicked: {message}"))
        .fix("this is a bug in fabric-preflight: please report it with the evidence of this run")
        .code(&common::PROBE_FAILED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ProbeMeta;

    /// After a libibverbs hang, every check that calls libibverbs reports at once instead of hanging again.
    #[test]
    fn a_verbs_hang_stops_every_check_that_calls_verbs() {
        let hung: HungLibraries = Arc::new(Mutex::new(vec![Hung {
            library: Library::Verbs,
            call: "ibv_get_device_list".into(),
            probe: "gdr.loopback",
            after: Duration::from_secs(2),
        }]));
        for id in ["rdma.loopback", "gdr.loopback"] {
            let probe = crate::probes::find(id).unwrap();
            assert!(hung_library_needed(probe, &hung).is_some(), "{id}");
        }
    }

    /// A test probe: its metadata and what its run does, so each behaviour below is one constant.
    struct TestProbe {
        meta: &'static ProbeMeta,
        body: fn(&'static str, &Context<'_>) -> Vec<CheckResult>,
    }
    impl Probe for TestProbe {
        fn meta(&self) -> &'static ProbeMeta {
            self.meta
        }
        fn run(&self, cx: &Context<'_>) -> Vec<CheckResult> {
            (self.body)(self.meta.id, cx)
        }
    }
    static SLEEPER: TestProbe = TestProbe {
        meta: &ProbeMeta {
            id: "test.sleeper",
            title: "sleeps",
            timeout: Duration::from_millis(50),
            ..ProbeMeta::STATIC
        },
        body: |id, _| {
            std::thread::sleep(Duration::from_secs(60));
            vec![CheckResult::pass(id, "woke up")]
        },
    };
    static PANICKER: TestProbe = TestProbe {
        meta: &ProbeMeta {
            id: "test.panicker",
            title: "panics",
            ..ProbeMeta::STATIC
        },
        body: |_, _| panic!("boom"),
    };
    static SKIPPER: TestProbe = TestProbe {
        meta: &ProbeMeta {
            id: "test.skipper",
            title: "skips",
            ..ProbeMeta::STATIC
        },
        body: |id, _| vec![CheckResult::skip(id, "no hardware")],
    };

    /// An active probe that says which process it ran in.
    static MEASURER: TestProbe = TestProbe {
        meta: &ProbeMeta {
            id: "test.measurer",
            title: "measures",
            kind: Kind::Active,
            libraries: &[Library::Cuda],
            ..ProbeMeta::STATIC
        },
        body: |id, cx| {
            let recorded = cx.answers.obtain("cuda.test", || 0u32).map(|o| o.value);
            vec![CheckResult::pass(
                id,
                format!("pid {} read {recorded:?}", std::process::id()),
            )]
        },
    };

    /// Recorded answers touch no library: a replay runs library and active probes in this process, on the
    /// recording parsed once (each probe in a child of its own, re-parsing it, before).
    #[test]
    fn a_replay_runs_active_probes_in_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let recording = dir.path().join(crate::recording::ANSWERS_FILE);
        std::fs::write(&recording, r#"{"cuda.test": 7}"#).unwrap();
        let shared = RunInputs {
            answers: Answers::from_file(&recording).unwrap(),
            ..inputs(Profile::default())
        };
        let out = run(
            &[&MEASURER],
            shared,
            Duration::from_secs(60),
            &Progress::OFF,
        );
        let r = &out.results[0];
        assert_eq!(r.status, Status::Pass, "{r:#?}");
        assert_eq!(r.summary, format!("pid {} read Ok(7)", std::process::id()));
        assert_eq!(r.library_answers, Some(AnswerSource::Recorded));
    }

    /// Facts about hardware this host lacks: never gathered (no child, no library call), and a probe asking for
    /// them anyway is told they were not asked.
    static ABSENT_HARDWARE: FactSource = FactSource {
        key: "test.absent",
        library: Library::Fabric,
        collect: || panic!("the library was called on a host without its hardware"),
        only_if: Some(|_| false),
    };
    static ASKS_FOR_ABSENT_HARDWARE: TestProbe = TestProbe {
        meta: &ProbeMeta {
            id: "test.asks_absent",
            title: "asks for facts of absent hardware",
            kind: Kind::Library,
            libraries: &[Library::Fabric],
            facts: &[&ABSENT_HARDWARE],
            ..ProbeMeta::STATIC
        },
        body: |id, cx| match cx.answers.obtain::<u32, _>(ABSENT_HARDWARE.key, || {
            panic!("collected in process on a host without the hardware")
        }) {
            Ok(_) => vec![CheckResult::pass(id, "answered")],
            Err(e) => vec![CheckResult::error(id, e)],
        },
    };

    #[test]
    fn facts_about_absent_hardware_are_not_asked() {
        let out = run(
            &[&ASKS_FOR_ABSENT_HARDWARE],
            inputs(Profile::default()),
            Duration::from_secs(60),
            &Progress::OFF,
        );
        let r = &out.results[0];
        assert_eq!(r.status, Status::Error, "{r:#?}");
        assert!(r.summary.contains("not asked this run"), "{}", r.summary);
    }

    fn inputs(profile: Profile) -> RunInputs {
        RunInputs {
            host: Host::live(),
            profile,
            inputs: Inputs::default(),
            answers: Answers::live(),
        }
    }

    #[test]
    fn hung_probe_becomes_error_and_others_still_report() {
        tasks::install_panic_hook();
        let started = Instant::now();
        let out = run(
            &[&SLEEPER, &PANICKER, &SKIPPER],
            inputs(Profile::default()),
            Duration::from_secs(120),
            &Progress::OFF,
        );
        // At the sleeper's deadline, not when it wakes up; room for a loaded machine.
        assert!(started.elapsed() < Duration::from_secs(10));
        let statuses: Vec<(&str, Status)> = out
            .results
            .iter()
            .map(|r| (r.id.as_str(), r.status))
            .collect();
        assert_eq!(
            statuses,
            vec![
                ("test.sleeper", Status::Error),
                ("test.panicker", Status::Error),
                ("test.skipper", Status::Skip)
            ]
        );
        assert!(
            out.results[0].summary.contains("timed out after 0.1 s")
                || out.results[0].summary.contains("timed out after")
        );
        assert!(out.results[1].summary.contains("boom"));
    }

    #[test]
    fn run_deadline_caps_every_probe() {
        let out = run(
            &[&SLEEPER],
            inputs(Profile::default()),
            Duration::from_millis(20),
            &Progress::OFF,
        );
        assert!(
            out.results[0].summary.contains("run deadline"),
            "{}",
            out.results[0].summary
        );
    }

    #[test]
    fn required_skip_becomes_fail() {
        let mut profile = Profile::default();
        profile.checks.insert(
            "test.skipper".into(),
            crate::profile::CheckSettings {
                required: Some(true),
                ..Default::default()
            },
        );
        let out = run(
            &[&SKIPPER],
            inputs(profile),
            Duration::from_secs(60),
            &Progress::OFF,
        );
        assert_eq!(out.results[0].status, Status::Fail);
        assert!(out.results[0].summary.contains("no hardware"));
    }
}
