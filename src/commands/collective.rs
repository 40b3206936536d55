//! `fabric-preflight collective [OPTIONS] -- COMMAND [ARGS…]`: flags → the NCCL environment → the COMMAND,
//! bounded → its output and NCCL logs read back → results in `run`'s report formats and exit codes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _};

use super::{seconds_flag, usage_error};
use crate::cli::{CollectiveArgs, Workload};
use crate::collective::variant::CollectiveMode;
use crate::collective::variant::{self, Variant};
use crate::collective::{self, judge, launch};
use crate::host::Host;
use crate::model::CheckResult;
use crate::profile::{NcclExpect, Profile};
use crate::report::output::Delivery;
use crate::report::{HostInfo, RunReport};
use crate::rules::topology::PciTree;
use crate::sysfs::kernel::HOSTNAME;

/// Modification times are compared with the start minus this, for filesystems with coarse timestamps.
const MTIME_SLACK: Duration = Duration::from_secs(2);

struct Plan {
    host: Host,
    profile: Profile,
    expect: NcclExpect,
    expect_from: String,
    timeout: Duration,
    argv: Vec<OsString>,
    /// The runs of --mode, made in turn.
    variants: Vec<Variant>,
}

pub fn main(args: CollectiveArgs) -> anyhow::Result<u8> {
    // The log directory first: reports may be asked for inside it (`--output json=DIR/report.json`).
    let log_dir = match &args.log_dir {
        // Absolute: the ranks may start elsewhere (a launcher's working directory on another node).
        Some(dir) => Some(
            std::fs::create_dir_all(dir)
                .and_then(|()| dir.canonicalize())
                .with_context(|| format!("--log-dir {}", dir.display()))
                .map_err(|e| usage_error(&args.report, e))?,
        ),
        None => None,
    };
    let delivery = super::delivery(&args.report).map_err(|e| usage_error(&args.report, e))?;
    let plan = prepare(&args).map_err(|e| usage_error(&args.report, e))?;
    crate::interrupt::install();
    let started = Instant::now();
    let timestamp = crate::report::rfc3339(SystemTime::now());
    // The logs live in --log-dir, or in a temporary directory removed at the end.
    let (log_dir, temporary) = match log_dir {
        Some(dir) => (dir, false),
        None => (temp_dir().context("creating the log directory")?, true),
    };
    let code = run_in(&args, &plan, &delivery, &log_dir, started, timestamp);
    if temporary {
        let _ = std::fs::remove_dir_all(&log_dir);
    }
    code
}

/// A new directory of this process's own under the system's temporary directory.
fn temp_dir() -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..1000 {
        let dir = base.join(format!(
            "fabric-preflight-collective.{}.{n}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists))
}

fn run_in(
    args: &CollectiveArgs,
    plan: &Plan,
    delivery: &Delivery,
    log_dir: &std::path::Path,
    started: Instant,
    timestamp: String,
) -> anyhow::Result<u8> {
    let mut argv = plan.argv.clone();
    if let Some(Workload::Torch) = args.workload {
        let script = log_dir.join(collective::WORKLOAD_TORCH_FILE);
        std::fs::write(&script, collective::WORKLOAD_TORCH)
            .with_context(|| format!("writing the workload to {}", script.display()))?;
        argv.push(script.into_os_string());
        argv.extend(args.workload_arg.iter().map(OsString::from));
    }
    let kernel_hostname = plan
        .host
        .read(HOSTNAME)
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let tree = PciTree::read(&plan.host).ok();
    let job = Job {
        args,
        plan,
        hostname: &kernel_hostname,
        tree: tree.as_ref(),
    };
    // One run after the other: each takes every GPU of the node, so side by side they would measure each other.
    let mut results = Vec::new();
    let mut by_variant = Vec::new();
    let mut read_before = Vec::new();
    for &variant in &plan.variants {
        let mut ran = if crate::interrupt::requested().is_some() {
            vec![CheckResult::error(
                judge::ID_COMMAND,
                "not run: interrupted before it started",
            )]
        } else {
            let dir = match plan.variants.len() {
                1 => log_dir.to_path_buf(),
                _ => log_dir.join(variant.name()),
            };
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let mut argv = argv.clone();
            if args.workload.is_some() {
                argv.extend(variant.workload_args().into_iter().map(OsString::from));
            }
            job.run(variant, argv, &dir, &mut read_before)
        };
        variant.label(&mut ran);
        by_variant.push(ran.clone());
        results.extend(ran);
    }
    if let [network, nvlink] = by_variant.as_slice() {
        results.push(variant::isolation(network, nvlink));
    }
    let node_name = args
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| kernel_hostname.clone());
    let host_info = HostInfo::read(&plan.host, Some(&node_name));
    let mut report = RunReport::new(
        host_info,
        plan.profile.name.clone(),
        started.elapsed().as_millis() as u64,
        results,
    )
    .with_strict(args.report.strict);
    report.timestamp = timestamp;
    report.interrupted = crate::interrupt::requested().map(str::to_string);
    Ok(delivery.deliver(&report))
}

/// What every run of the COMMAND shares.
struct Job<'a> {
    args: &'a CollectiveArgs,
    plan: &'a Plan,
    hostname: &'a str,
    tree: Option<&'a PciTree>,
}

impl Job<'_> {
    /// One run of `argv` as `variant`, its logs in `log_dir`, bounded by --timeout: its results. `read_before`
    /// holds the NCCL files earlier runs read (path and modification time): a user's NCCL_DEBUG_FILE pattern is
    /// the same for every run, and a file of the run before, younger than the time slack, is not this run's.
    fn run(
        &self,
        variant: Variant,
        argv: Vec<OsString>,
        log_dir: &std::path::Path,
        read_before: &mut Vec<(PathBuf, Option<SystemTime>)>,
    ) -> Vec<CheckResult> {
        let (args, plan) = (self.args, self.plan);
        let user_env: BTreeMap<String, String> = std::env::vars().collect();
        let mut env = collective::nccl_env(&user_env, log_dir);
        let (forced, notes) = variant.env(plan.expect, &user_env);
        env.set.extend(forced);
        env.notes.extend(notes);
        let output = log_dir.join(collective::OUTPUT_FILE);
        let command_text = shown(&argv);
        eprintln!(
            "fabric-preflight: running `{command_text}` (its output: {})",
            output.display()
        );
        let since = SystemTime::now() - MTIME_SLACK;
        let ran = launch::run(&launch::Launch {
            argv: &argv,
            env: &env.set,
            output: &output,
            timeout: plan.timeout,
        });
        let modified = |f: &PathBuf| std::fs::metadata(f).and_then(|m| m.modified()).ok();
        let files: Vec<PathBuf> = collective::debug_files(&env.debug_file, since)
            .into_iter()
            .filter(|f| !read_before.contains(&(f.clone(), modified(f))))
            .collect();
        read_before.extend(files.iter().map(|f| (f.clone(), modified(f))));
        let argv_text: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        // The output's own header names the collective first; then --collective, the COMMAND's nccl-tests
        // program, and the built-in workload (an all_reduce).
        let collective_name = args
            .collective
            .clone()
            .or_else(|| {
                argv_text
                    .iter()
                    .find_map(|a| collective::nccl_tests::collective_of_program(a))
            })
            .or_else(|| args.workload.map(|_| "all_reduce".to_string()));
        let mut results = match collective::collect(
            &output,
            &files,
            collective_name.as_deref(),
            Instant::now() + collective::READ_BACK,
        ) {
            Ok(c) => {
                let output_text = output.display().to_string();
                let mut results = judge::judge(&judge::Facts {
                    ran: &ran,
                    command: &command_text,
                    tests: &c.tests,
                    ranks: &c.ranks,
                    summary: &c.summary,
                    expect: plan.expect,
                    expect_from: &plan.expect_from,
                    profile: &plan.profile.name,
                    limits: plan.profile.thresholds.nccl_busbw_gbytes_per_sec.as_ref(),
                    hostname: self.hostname,
                    tree: self.tree,
                    output: &output_text,
                    variant,
                    average: collective::nccl_tests::average_of(&argv_text),
                });
                if let Some(first) = results.first_mut() {
                    first
                        .evidence
                        .extend(c.skipped.iter().map(|s| format!("not read = {s}")));
                }
                results
            }
            Err(e) => vec![CheckResult::error(
                judge::ID_COMMAND,
                format!("the run's logs could not be read back: {e}"),
            )],
        };
        if let Some(first) = results.first_mut() {
            for (key, value) in &env.set {
                if !key.starts_with("NCCL_DEBUG") {
                    first.evidence.push(format!("set = {key}={value}"));
                }
            }
            for note in &env.notes {
                first.evidence.push(format!("environment = {note}"));
            }
            first.evidence.push(format!(
                "NCCL logs = {} per-process file(s) for NCCL_DEBUG_FILE={}",
                files.len(),
                env.debug_file
            ));
        }
        results
    }
}

fn prepare(args: &CollectiveArgs) -> anyhow::Result<Plan> {
    let host = match &args.root {
        Some(dir) => Host::at(dir)?,
        None => Host::live(),
    };
    let ids = crate::probes::ids();
    let name = if args.profile == crate::auto_profile::AUTO {
        let hca = std::env::var("NCCL_IB_HCA").ok();
        crate::auto_profile::choose(&host, &ids, hca.as_deref())?.0
    } else {
        args.profile.clone()
    };
    let profile = crate::profile::load(&name, &ids)?;
    let (expect, expect_from) = match (args.expect, profile.expect.nccl_transport) {
        (Some(e), _) => (e, "--expect".to_string()),
        (None, Some(e)) => (e, format!("profile {}", profile.name)),
        (None, None) => (NcclExpect::Gdrdma, "default".to_string()),
    };
    let timeout = seconds_flag("--timeout", args.timeout)?;
    let mut argv = args.command.clone();
    if argv.is_empty() {
        match args.workload {
            Some(Workload::Torch) => argv.push("python3".into()),
            None => bail!(
                "no COMMAND: give the job after `--` (e.g. `fabric-preflight collective -- all_reduce_perf -g 8`), \
                 or --workload torch"
            ),
        }
    }
    if args.workload.is_none() && !args.workload_arg.is_empty() {
        bail!("--workload-arg needs --workload");
    }
    let rails = match (args.mode, args.rails) {
        (CollectiveMode::PerRail, Some(n)) => n,
        (CollectiveMode::PerRail, None) => {
            let gpus = PciTree::read(&host)
                .map(|t| t.with_role(crate::rules::topology::Role::Gpu).len())
                .unwrap_or(0);
            if gpus == 0 {
                bail!("--mode per-rail needs --rails N (GPUs per node): no GPU on this host's PCI bus to count");
            }
            gpus as u32
        }
        (_, Some(_)) => bail!("--rails needs --mode per-rail"),
        (_, None) => 0,
    };
    Ok(Plan {
        variants: Variant::of_mode(args.mode, rails),
        host,
        profile,
        expect,
        expect_from,
        timeout,
        argv,
    })
}

/// The command line as a shell would read it back (arguments with spaces quoted).
fn shown(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let a = a.to_string_lossy();
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                a.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
