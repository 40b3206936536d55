//! `fabric-preflight run`: flags + profile → plan → runner → reports → exit code.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::answers::Answers;
use crate::cli::{ColorChoice, RunArgs};
use crate::exit;
use crate::host::Host;
use crate::probe::{Inputs, Probe};
use crate::profile::Profile;
use crate::report::{self, termination, Format, HostInfo, RunReport, Style};
use crate::runner::{self, RunInputs};
use crate::sysfs::kernel::{HOSTNAME, OSRELEASE};

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
}

pub struct Executed {
    pub report: RunReport,
    pub recorded: std::collections::BTreeMap<String, serde_json::Value>,
}

pub fn main(args: RunArgs) -> anyhow::Result<u8> {
    let outputs = parse_outputs(&args.output, args.format)?;
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
    runner::install_panic_hook();
    let executed = execute(plan);
    let style = Style {
        color: use_color(args.color),
        width: report::terminal_width(),
    };
    let code = exit::for_run(&executed.report, args.strict);

    for (format, target) in &outputs {
        let text = report::render(
            *format,
            &executed.report,
            if *target == Target::Stdout {
                style
            } else {
                Style::PLAIN
            },
        );
        match target {
            Target::Stdout => {
                // A closed pipe (`| head`) stops the writing; the exit code still reports the verdict.
                let _ = std::io::stdout().write_all(text.as_bytes());
            }
            Target::File(path) => std::fs::write(path, text)
                .with_context(|| format!("writing {format:?} report to {}", path.display()))
                .unwrap_or_else(|e| eprintln!("fabric-preflight: {e:#}")),
        }
    }
    if let Some(path) = &args.termination_log {
        if let Err(e) = std::fs::write(path, termination::render(&executed.report)) {
            eprintln!(
                "fabric-preflight: writing termination log {}: {e}",
                path.display()
            );
        }
    }
    Ok(code)
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
    let profile = crate::profile::load(profile, &ids)?;
    for id in only.iter().chain(skip) {
        if crate::probes::find(id).is_none() {
            bail!("unknown check id `{id}` (see `fabric-preflight list`)");
        }
    }
    if !(timeout_secs.is_finite() && timeout_secs > 0.0) {
        bail!("--timeout must be a positive number of seconds, got {timeout_secs}");
    }
    // gds.read writes only inside a scratch directory it makes in this one: it never creates the path itself.
    if let Some(dir) = &inputs.gds_dir {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!("--gds-dir {}: not a directory", dir.display()),
            Err(e) => bail!(
                "--gds-dir {}: {e} (give an existing directory on the filesystem to test; none is created)",
                dir.display()
            ),
        }
    }
    for log in &inputs.nccl_logs {
        if log.as_os_str() != "-" && !log.is_file() {
            bail!("--nccl-log {}: no such file", log.display());
        }
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
        .collect();
    let answers = Answers::for_host(&host)?;
    Ok(Plan {
        host,
        profile,
        probes,
        inputs,
        answers,
        timeout: Duration::from_secs_f64(timeout_secs),
    })
}

pub fn execute(plan: Plan) -> Executed {
    let started = Instant::now();
    let host_info = HostInfo {
        hostname: plan
            .host
            .read(HOSTNAME)
            .unwrap_or_else(|_| "unknown".into()),
        kernel: plan
            .host
            .read(OSRELEASE)
            .unwrap_or_else(|_| "unknown".into()),
        root: plan.host.root().display().to_string(),
    };
    let profile_name = plan.profile.name.clone();
    let outcome = runner::run(
        &plan.probes,
        RunInputs {
            host: plan.host,
            profile: plan.profile,
            inputs: plan.inputs,
            answers: plan.answers,
        },
        plan.timeout,
    );
    let report = RunReport::new(
        host_info,
        profile_name,
        started.elapsed().as_millis() as u64,
        outcome.results,
    );
    Executed {
        report,
        recorded: outcome.recorded,
    }
}

/// `--output json=PATH`, `--output PATH` (in `--format`). Stdout gets `--format` unless a bare PATH took it.
fn parse_outputs(specs: &[String], format: Format) -> anyhow::Result<Vec<(Format, Target)>> {
    let mut outputs = Vec::new();
    let mut stdout_taken = false;
    for spec in specs {
        match spec.split_once('=') {
            Some((name, path)) if <Format as clap::ValueEnum>::from_str(name, true).is_ok() => {
                let f = <Format as clap::ValueEnum>::from_str(name, true)
                    .map_err(anyhow::Error::msg)?;
                if path.is_empty() {
                    bail!("--output {spec}: missing path after `=`");
                }
                outputs.push((f, Target::File(PathBuf::from(path))));
            }
            _ => {
                outputs.push((format, Target::File(PathBuf::from(spec))));
                stdout_taken = true;
            }
        }
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
