//! `fabric-preflight run`: flags + profile → plan → runner → reports → exit code.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _};

use crate::cli::{ColorChoice, ReportArgs, RunArgs};
use crate::exit;
use crate::host::Host;
use crate::model::AnswerSource;
use crate::probe::{Inputs, Probe};
use crate::profile::{self, Profile};
use crate::progress::Progress;
use crate::recording::Answers;
use crate::report::{self, termination, Format, HostInfo, RunReport, Selection, Style};
use crate::runner::{self, RunInputs};
use crate::sysfs::kernel::{read_release, HOSTNAME};

/// Where a report goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stdout,
    File(PathBuf),
}

/// Everything a run needs, resolved from flags; errors while building it are usage errors.
pub struct Plan {
    pub host: Host,
    pub profile: Profile,
    pub probes: Vec<&'static dyn Probe>,
    pub inputs: Inputs,
    pub answers: Answers,
    pub timeout: Duration,
    /// How `--profile auto` chose; None when a profile was named.
    pub selection: Option<Selection>,
    /// Where the running active check is named (off unless `run` turns it on for a terminal).
    pub progress: Progress,
}

pub struct Executed {
    pub report: RunReport,
    pub recorded: std::collections::BTreeMap<String, serde_json::Value>,
}

pub fn main(args: RunArgs) -> anyhow::Result<u8> {
    let (outputs, plan) = plan_run(&args).map_err(|e| usage_error(&args.report, e))?;
    runner::install_panic_hook();
    crate::interrupt::install();
    let mut executed = execute(Plan {
        progress: Progress::on_terminal(args.quiet),
        ..plan
    });
    executed.report = executed.report.with_strict(args.report.strict);
    // In a pod the kernel's hostname is the pod's: the node's name (downward API) is the host to report.
    if let Some(name) = args.node_name.clone().filter(|n| !n.is_empty()) {
        executed.report.host.hostname = name.clone();
        executed.report.host.node_name = name;
    }
    let code = deliver(
        &executed.report,
        &outputs,
        args.report.color,
        args.quiet,
        args.report.termination_log.as_deref(),
    );
    Ok(code)
}

/// Writes `report` to every target (stdout styled, files plain) and the termination log; returns the report's
/// exit code, or the lost-output code when a report could not be written, as NPD reads it when stdout is `npd`.
/// Shared by `run` and `pair`.
pub fn deliver(
    report: &RunReport,
    outputs: &[(Format, Target)],
    color: ColorChoice,
    quiet: bool,
    termination_log: Option<&std::path::Path>,
) -> u8 {
    let style = Style {
        color: use_color(color),
        width: report::terminal_width(),
        quiet,
    };
    let mut written = true;
    for (format, target) in outputs {
        let style = if *target == Target::Stdout {
            style
        } else {
            Style::PLAIN
        };
        let text = report::render(*format, report, style);
        if let Err(e) = write_report(target, &text) {
            eprintln!("fabric-preflight: writing the {format:?} report to {target}: {e}");
            written = false;
        }
    }
    if let Some(path) = termination_log {
        if let Err(e) = report::file::replace(path, &termination::render(report)) {
            eprintln!(
                "fabric-preflight: writing termination log {}: {e}",
                path.display()
            );
            written = false;
        }
    }
    let code = if written {
        report.exit_code()
    } else {
        exit::output_lost(report.exit_code())
    };
    if outputs.contains(&(Format::Npd, Target::Stdout)) {
        // NPD reads the exit code as the condition: 0 OK, 1 NonOK, 2 Unknown (for `run` and `pair` alike).
        return exit::for_npd(code);
    }
    code
}

/// The reason for exit 2 belongs where `kubectl describe pod` looks, like any other verdict: written to
/// `--termination-log` (when given) and returned.
pub fn usage_error(flags: &ReportArgs, e: anyhow::Error) -> anyhow::Error {
    if let Some(path) = &flags.termination_log {
        let _ = report::file::replace(path, &termination::render_usage_error(&format!("{e:#}")));
    }
    e
}

/// The report targets of `--output` and `--format`, every report file and `--termination-log` found writable
/// now, before anything runs: a typo'd directory is a usage error, not a lost report after the work.
pub fn report_targets(flags: &ReportArgs) -> anyhow::Result<Vec<(Format, Target)>> {
    let outputs = parse_outputs(&flags.output, flags.format)?;
    for (_, target) in &outputs {
        if let Target::File(path) = target {
            check_writable(path).with_context(|| format!("--output {}", path.display()))?;
        }
    }
    if let Some(path) = &flags.termination_log {
        check_writable(path).with_context(|| format!("--termination-log {}", path.display()))?;
    }
    Ok(outputs)
}

/// `--timeout`-like flags: a deadline in seconds, more than 0 and at most a day.
pub fn seconds_flag(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    crate::profile::timeout_duration(secs).map_err(|e| anyhow::anyhow!("{flag} {e}"))
}

/// Everything that can be a usage error, checked before any check runs: the outputs (parsed, and their files
/// writable), then the plan.
fn plan_run(args: &RunArgs) -> anyhow::Result<(Vec<(Format, Target)>, Plan)> {
    let outputs = report_targets(&args.report)?;
    let plan = prepare(
        args.root.as_deref(),
        &args.profile,
        &args.only,
        &args.skip,
        args.timeout,
        Inputs {
            nccl_logs: args.nccl_log.clone(),
            gds_dir: args.gds_dir.clone(),
            env: std::env::vars().collect(),
        },
    )?;
    Ok((outputs, plan))
}

/// Whether `path` can be written, found now rather than after the run (a missing directory, a read-only
/// filesystem, a permission). An existing file is opened for writing without truncation; a FIFO only asked for
/// write permission (opening it would wait for a reader, or hand a waiting reader an empty report). For a new
/// file a scratch file of this process's own (`.NAME.<pid>.<n>.check`) is created beside it and removed, as the
/// report itself will be written beside it and renamed: `access()` alone says yes to root where nothing can be
/// created (`/proc`), and creating the target itself made two processes given one path trip over each other.
fn check_writable(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    static CHECKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(std::io::Error::from_raw_os_error(libc::EISDIR)),
        Ok(meta) if meta.file_type().is_fifo() => may_write(path),
        Ok(_) => std::fs::OpenOptions::new()
            .write(true)
            .truncate(false)
            .open(path)
            .map(drop),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let n = CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let scratch = dir.join(format!(".{name}.{}.{n}.check", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&scratch)
                .and_then(|_| std::fs::remove_file(&scratch))
        }
        Err(e) => Err(e),
    }
}

/// `access(W_OK)`: whether this process may open `path` for writing, without opening it.
fn may_write(path: &std::path::Path) -> std::io::Result<()> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid NUL-terminated path; access() only reads it.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn write_report(target: &Target, text: &str) -> std::io::Result<()> {
    match target {
        Target::Stdout => super::write_stdout(text),
        Target::File(path) => report::file::replace(path, text),
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Stdout => f.write_str("stdout"),
            Target::File(path) => write!(f, "{}", path.display()),
        }
    }
}

pub fn prepare(
    root: Option<&std::path::Path>,
    profile: &str,
    only: &[String],
    skip: &[String],
    timeout_secs: f64,
    inputs: Inputs,
) -> anyhow::Result<Plan> {
    let host = match root {
        Some(dir) => Host::at(dir)?,
        None => Host::live(),
    };
    let ids = crate::probes::ids();
    let (profile, selection) = if profile == profile::auto::AUTO {
        let (name, selection) = profile::auto::choose(&host, &ids)?;
        (crate::profile::load(&name, &ids)?, Some(selection))
    } else {
        (crate::profile::load(profile, &ids)?, None)
    };
    for id in only.iter().chain(skip) {
        if crate::probes::find(id).is_none() {
            bail!("unknown check id `{id}` (see `fabric-preflight list`)");
        }
    }
    let timeout = seconds_flag("--timeout", timeout_secs)?;
    for log in &inputs.nccl_logs {
        crate::nccl::check_log_path(log).map_err(|e| anyhow::anyhow!("--nccl-log {e}"))?;
    }
    let probes = crate::probes::all()
        .iter()
        .copied()
        .filter(|p| {
            let id = p.id().to_string();
            if !only.is_empty() {
                return only.contains(&id);
            }
            profile.settings(p.id()).enabled.unwrap_or(true) && !skip.contains(&id)
        })
        .filter(|p| !skip.contains(&p.id().to_string()))
        .collect::<Vec<_>>();
    if probes.is_empty() {
        bail!(
            "no check left to run: --only, --skip and the profile's `enabled: false` leave out every check"
        );
    }
    let answers = Answers::for_host(&host)?;
    // Live, gds.read writes into a scratch directory it makes inside this one, and creates nothing else. A replay
    // writes nothing and takes the directory as the recorded host's, which need not exist here.
    if let (Some(dir), AnswerSource::Live) = (&inputs.gds_dir, answers.source()) {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!("--gds-dir {}: not a directory", dir.display()),
            Err(e) => bail!(
                "--gds-dir {}: {e} (give an existing directory on the filesystem to test; none is created)",
                dir.display()
            ),
        }
    }
    Ok(Plan {
        host,
        profile,
        probes,
        inputs,
        answers,
        timeout,
        selection,
        progress: Progress::OFF,
    })
}

pub fn execute(plan: Plan) -> Executed {
    let started = Instant::now();
    let timestamp = report::rfc3339(SystemTime::now());
    // An empty hostname file names nobody: reports still need a name to be filed under.
    let hostname = plan
        .host
        .read(HOSTNAME)
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let host_info = HostInfo {
        node_name: hostname.clone(),
        hostname,
        // Through the shared reader: the checks read the release too.
        kernel: read_release(&plan.host).unwrap_or_else(|_| "unknown".into()),
        root: plan.host.root().display().to_string(),
    };
    let profile_name = plan.profile.name.clone();
    let library_answers = plan.answers.source();
    let outcome = runner::run(
        &plan.probes,
        RunInputs {
            host: plan.host,
            profile: plan.profile,
            inputs: plan.inputs,
            answers: plan.answers,
        },
        plan.timeout,
        &plan.progress,
    );
    let mut report = RunReport::new(
        host_info,
        profile_name,
        started.elapsed().as_millis() as u64,
        outcome.results,
    );
    report.timestamp = timestamp;
    report.profile_selection = plan.selection;
    report.library_answers = Some(library_answers);
    report.interrupted = crate::interrupt::requested().map(str::to_string);
    Executed {
        report,
        recorded: outcome.recorded,
    }
}

/// `--output FORMAT=PATH` or `--output PATH` (in `--format`); `-` as PATH is stdout. Stdout gets `--format`
/// unless an output took it (a bare PATH, or `-`). A name before `=` that is not a format is refused rather
/// than taken for part of a file name (`jsn=report.json`); a file whose name has `=` is written `./a=b`.
pub fn parse_outputs(specs: &[String], format: Format) -> anyhow::Result<Vec<(Format, Target)>> {
    let mut outputs: Vec<(Format, Target)> = Vec::new();
    let mut stdout_taken = false;
    for spec in specs {
        let (f, path) = match spec.split_once('=') {
            Some((name, path)) if !name.contains('/') => {
                let f = <Format as clap::ValueEnum>::from_str(name, true).map_err(|_| {
                    anyhow::anyhow!(
                        "--output {spec}: unknown report format `{name}` (formats: table, json, junit, \
                         prometheus, npd; a file whose name has `=` is written ./{spec})"
                    )
                })?;
                (f, path)
            }
            _ => {
                stdout_taken = true;
                (format, spec.as_str())
            }
        };
        let target = match path {
            "" => bail!("--output {spec}: missing path after `=`"),
            "-" => Target::Stdout,
            _ => Target::File(PathBuf::from(path)),
        };
        if outputs.iter().any(|(_, t)| *t == target) {
            bail!("--output {spec}: {target} already receives another report");
        }
        stdout_taken |= target == Target::Stdout;
        outputs.push((f, target));
    }
    if !stdout_taken {
        outputs.insert(0, (format, Target::Stdout));
    }
    Ok(outputs)
}

fn use_color(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ends of a pair started with one --output path check it at once: a check that created and removed a
    /// test file made the other one fail with "No such file or directory" now and then.
    #[test]
    fn checking_one_path_from_many_threads_at_once_never_fails_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        check_writable(&path).unwrap();
                    }
                });
            }
        });
        assert!(!path.exists());
        let missing_dir = dir.path().join("no/such/dir/report.json");
        assert!(check_writable(&missing_dir).is_err());
        assert_eq!(
            check_writable(dir.path()).unwrap_err().raw_os_error(),
            Some(libc::EISDIR)
        );
        // Root may "write" anywhere by permission bits, yet nothing can be created in /proc.
        assert!(check_writable(std::path::Path::new("/proc/fabric-preflight.json")).is_err());
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "scratch files left"
        );
    }

    #[test]
    fn outputs_keep_stdout_unless_a_bare_path_takes_it() {
        let o = parse_outputs(&["json=/tmp/a.json".into()], Format::Table).unwrap();
        assert_eq!(o[0], (Format::Table, Target::Stdout));
        assert_eq!(o[1], (Format::Json, Target::File("/tmp/a.json".into())));
        let o = parse_outputs(&["/tmp/r.txt".into()], Format::Json).unwrap();
        assert_eq!(o, vec![(Format::Json, Target::File("/tmp/r.txt".into()))]);
    }

    #[test]
    fn unknown_only_id_is_a_usage_error() {
        let err = prepare(
            None,
            "generic",
            &["rdma.lnk".into()],
            &[],
            10.0,
            Inputs::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("rdma.lnk"));
    }
}
