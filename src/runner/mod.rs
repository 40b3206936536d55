//! Schedules probes, enforces deadlines, and turns panics, crashes and timeouts into `error` results.
//! Nothing here knows a particular probe: it sees ids, kinds and deadlines.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::child::fmt_secs;
use crate::host::Host;
use crate::interrupt;
use crate::model::{AnswerSource, CheckResult, Library, Status};
use crate::probe::{Context, Inputs, Kind, Probe};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::recording::Answers;
use crate::tasks::{self, Ended, Task};

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
    run_batch(
        probes,
        &concurrent,
        &shared,
        &hung,
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
            }
            results.push(r);
        }
    }
    RunOutcome {
        results,
        recorded: shared.answers.take_recorded(),
    }
}

fn run_batch(
    probes: &[&'static dyn Probe],
    batch: &[usize],
    shared: &Arc<RunInputs>,
    hung: &HungLibraries,
    run_deadline: Instant,
    run_timeout: Duration,
    slots: &mut [Option<Vec<CheckResult>>],
) {
    let mut tasks = Vec::new();
    let mut scheduled = Vec::new();
    for &i in batch {
        let probe = probes[i];
        let now = Instant::now();
        let own = shared
            .profile
            .settings(probe.id())
            .timeout
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or_else(|| probe.default_timeout());
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
            )]);
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
        tasks.push(Task {
            name: probe.id().to_string(),
            until,
            work: Box::new(move || match probe.kind() {
                Kind::Static => run_in_thread(probe, timeout, &shared),
                Kind::Library | Kind::Active => {
                    run_isolated(probe, timeout, cut_by, &shared, &hung)
                }
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
                    results.push(CheckResult::error(id, "probe returned no result"));
                }
                for r in &mut results {
                    r.duration_ms = ms;
                }
                results
            }
            Ended::Panicked(message) => vec![panic_result(id, &message)],
            Ended::TimedOut => vec![timeout_result(&s, started, run_timeout)],
            Ended::Interrupted(signal) => vec![interrupted_result(s.probe, signal, "gave up")],
            Ended::Lost(why) => vec![CheckResult::error(id, format!("{id}: {why}"))],
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
        .fix("raise `timeout` for this check in the profile if the node is merely slow; a probe stuck in the kernel points at a wedged driver (see dmesg)");
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
}

const RERUN_AFTER_INTERRUPT: &str =
    "the run was stopped (pod deleted, job cancelled or Ctrl-C) before this check finished: run it again";

fn run_in_thread(
    probe: &'static dyn Probe,
    timeout: Duration,
    shared: &RunInputs,
) -> Vec<CheckResult> {
    let settings = shared.profile.settings(probe.id());
    let cx = Context {
        host: &shared.host,
        profile: &shared.profile,
        settings: &settings,
        inputs: &shared.inputs,
        answers: &shared.answers,
        deadline: Instant::now() + timeout,
        scratch: None,
    };
    probe.run(&cx)
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
            .fix("pass --gds-dir DIR on a writable filesystem")]
        }
    };
    let job = ProbeJob {
        id: probe.id().to_string(),
        root: (!shared.host.is_live()).then(|| shared.host.root().to_path_buf()),
        profile: shared.profile.clone(),
        inputs: shared.inputs.clone(),
        timeout_ms: timeout.as_millis() as u64,
        scratch: scratch.clone(),
        record_reads: shared.host.is_recording(),
    };
    let results = match run_in_child(&job, timeout) {
        Ok(reply) => {
            shared.answers.absorb(reply.recorded);
            shared.host.record_all(reply.read_paths);
            reply.results
        }
        Err(failure) => {
            if let Some(call) = failure.last_call.as_deref().filter(|_| failure.timed_out) {
                if let (Some(library), Ok(mut h)) = (Library::owning(call), hung.lock()) {
                    h.push(Hung {
                        library,
                        call: call.to_string(),
                        probe: probe.id(),
                        after: timeout,
                    });
                }
            }
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
            vec![r.fix(if failure.interrupted {
                RERUN_AFTER_INTERRUPT
            } else {
                "the library call named above hung or crashed: check `dmesg` for Xid/driver errors and the driver's health; the other checks still ran"
            })]
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

    struct Sleeper;
    impl Probe for Sleeper {
        fn meta(&self) -> &'static ProbeMeta {
            const META: ProbeMeta = ProbeMeta {
                id: "test.sleeper",
                title: "sleeps",
                timeout: Duration::from_millis(50),
                ..ProbeMeta::STATIC
            };
            &META
        }
        fn run(&self, _: &Context<'_>) -> Vec<CheckResult> {
            std::thread::sleep(Duration::from_secs(5));
            vec![CheckResult::pass(self.id(), "woke up")]
        }
    }

    struct Panicker;
    impl Probe for Panicker {
        fn meta(&self) -> &'static ProbeMeta {
            const META: ProbeMeta = ProbeMeta {
                id: "test.panicker",
                title: "panics",
                ..ProbeMeta::STATIC
            };
            &META
        }
        fn run(&self, _: &Context<'_>) -> Vec<CheckResult> {
            panic!("boom")
        }
    }

    struct Skipper;
    impl Probe for Skipper {
        fn meta(&self) -> &'static ProbeMeta {
            const META: ProbeMeta = ProbeMeta {
                id: "test.skipper",
                title: "skips",
                ..ProbeMeta::STATIC
            };
            &META
        }
        fn run(&self, _: &Context<'_>) -> Vec<CheckResult> {
            vec![CheckResult::skip(self.id(), "no hardware")]
        }
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
            &[&Sleeper, &Panicker, &Skipper],
            inputs(Profile::default()),
            Duration::from_secs(30),
            &Progress::OFF,
        );
        assert!(started.elapsed() < Duration::from_secs(2));
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
            &[&Sleeper],
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
            &[&Skipper],
            inputs(profile),
            Duration::from_secs(5),
            &Progress::OFF,
        );
        assert_eq!(out.results[0].status, Status::Fail);
        assert!(out.results[0].summary.contains("no hardware"));
    }
}
