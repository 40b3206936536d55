//! `fabric-preflight run`: flags + profile → plan → runner → reports → exit code.

use std::time::{Duration, Instant, SystemTime};

use anyhow::bail;

use crate::auto_profile::{self, Selection};
use crate::cli::RunArgs;
use crate::host::Host;
use crate::model::AnswerSource;
use crate::probe::{Inputs, Probe};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::recording::Answers;
use crate::report::output::Delivery;
use crate::report::{self, HostInfo, RunReport};
use crate::runner::{self, RunInputs};

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
    /// `--node-name`: the name the report gives the host.
    pub node_name: Option<String>,
}

pub struct Executed {
    pub report: RunReport,
    pub recorded: std::collections::BTreeMap<String, serde_json::Value>,
}

pub fn main(args: RunArgs) -> anyhow::Result<u8> {
    let (delivery, plan) = plan_run(&args).map_err(|e| super::usage_error(&args.report, e))?;
    crate::tasks::install_panic_hook();
    crate::interrupt::install();
    let mut executed = execute(Plan {
        progress: Progress::on_terminal(args.quiet),
        node_name: args.node_name.clone(),
        ..plan
    });
    executed.report = executed.report.with_strict(args.report.strict);
    Ok(Delivery {
        quiet: args.quiet,
        ..delivery
    }
    .deliver(&executed.report))
}

/// Everything that can be a usage error, checked before any check runs: the outputs (parsed, and their files
/// writable), then the plan.
fn plan_run(args: &RunArgs) -> anyhow::Result<(Delivery, Plan)> {
    let delivery = super::delivery(&args.report)?;
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
    Ok((delivery, plan))
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
    let (profile, selection) = if profile == auto_profile::AUTO {
        let (name, selection) = auto_profile::choose(&host, &ids, inputs.env("NCCL_IB_HCA"))?;
        (crate::profile::load(&name, &ids)?, Some(selection))
    } else {
        (crate::profile::load(profile, &ids)?, None)
    };
    for id in only.iter().chain(skip) {
        if crate::probes::find(id).is_none() {
            bail!("unknown check id `{id}` (see `fabric-preflight list`)");
        }
    }
    let timeout = super::seconds_flag("--timeout", timeout_secs)?;
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
        node_name: None,
    })
}

pub fn execute(plan: Plan) -> Executed {
    let started = Instant::now();
    let timestamp = report::rfc3339(SystemTime::now());
    let host_info = HostInfo::read(&plan.host, plan.node_name.as_deref());
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

#[cfg(test)]
mod tests {
    use super::*;

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
