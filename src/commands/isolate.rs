//! `fabric-preflight isolate [OPTIONS] -- COMMAND TEMPLATE…`: nodes (flags, hostfile, Slurm) and topology → the
//! planner, round by round, each round's groups run at once through the template → the isolation report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _};

use super::seconds_flag;
use crate::cli::{IsolateArgs, ViewFormat};
use crate::isolate::measure::{self, Measured};
use crate::isolate::plan::Planner;
use crate::isolate::report::{Context, IsolateReport};
use crate::isolate::topology;
use crate::pair::ring::{expand_nodelist, parse_hostfile};

/// At most this much of a hostfile is read.
const MAX_HOSTFILE: u64 = 4 << 20;

/// What `--output` can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Json,
    Junit,
    Html,
    Culprits,
}

fn outputs(specs: &[String]) -> anyhow::Result<Vec<(Kind, PathBuf)>> {
    specs
        .iter()
        .map(|spec| {
            let (kind, path) = spec.split_once('=').with_context(|| {
                format!("--output {spec:?}: write FORMAT=PATH (json, junit, html, culprits)")
            })?;
            let kind = match kind {
                "json" => Kind::Json,
                "junit" => Kind::Junit,
                "html" => Kind::Html,
                "culprits" => Kind::Culprits,
                other => bail!(
                    "--output {spec:?}: unknown format {other:?} (json, junit, html, culprits)"
                ),
            };
            let path = PathBuf::from(path);
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dir.is_dir() {
                bail!(
                    "--output {spec:?}: directory {} does not exist",
                    dir.display()
                );
            }
            Ok((kind, path))
        })
        .collect()
}

/// The nodes and where they came from: `--nodes`, `--hostfile`, else Slurm's allocation.
fn nodes(args: &IsolateArgs) -> anyhow::Result<(Vec<String>, String)> {
    let (nodes, from) = if let Some(list) = &args.nodes {
        (
            expand_nodelist(list).map_err(anyhow::Error::msg)?,
            "--nodes".to_string(),
        )
    } else if let Some(path) = &args.hostfile {
        let text = crate::input::read_text(path, MAX_HOSTFILE)
            .with_context(|| format!("--hostfile {}", path.display()))?;
        (
            parse_hostfile(&text),
            format!("hostfile {}", path.display()),
        )
    } else if let Ok(list) = std::env::var("SLURM_JOB_NODELIST") {
        (
            expand_nodelist(&list).map_err(anyhow::Error::msg)?,
            format!("SLURM_JOB_NODELIST={list}"),
        )
    } else {
        bail!("no nodes: pass --nodes LIST or --hostfile PATH, or run inside a Slurm allocation");
    };
    // Names go into the template's arguments (and shells the template may start): host-name characters only.
    if let Some(bad) = nodes.iter().find(|n| {
        n.is_empty()
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._:".contains(c))
    }) {
        bail!("node name {bad:?} from {from}: only letters, digits, '-', '.', '_' and ':' are accepted");
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = nodes.iter().find(|n| !seen.insert(n.as_str())) {
        bail!("node {dup} is listed twice in {from}");
    }
    if nodes.len() < 2 {
        bail!("isolation needs at least 2 nodes, {from} gives {nodes:?}");
    }
    Ok((nodes, from))
}

pub fn main(args: IsolateArgs) -> anyhow::Result<u8> {
    let (names, nodes_from) = nodes(&args)?;
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut groups: Vec<Option<String>> = vec![None; names.len()];
    let mut topology_groups = Vec::new();
    if let Some(path) = &args.topology {
        let text = crate::input::read_text(path, topology::MAX_BYTES)
            .with_context(|| format!("--topology {}", path.display()))?;
        let parsed = topology::parse(&text)
            .map_err(|e| anyhow::anyhow!("--topology {}: {e}", path.display()))?;
        for (name, members) in parsed {
            // Nodes of the file outside this search are left out.
            let members: Vec<usize> = members
                .iter()
                .filter_map(|m| index.get(m.as_str()).copied())
                .collect();
            for &m in &members {
                groups[m] = Some(name.clone());
            }
            topology_groups.push(members);
        }
    }
    measure::check_template(&args.command).map_err(anyhow::Error::msg)?;
    if let Some(floor) = args.floor {
        if !floor.is_finite() || floor <= 0.0 {
            bail!("--floor {floor}: a bandwidth in GB/s above 0");
        }
    }
    let timeout = seconds_flag("--test-timeout", args.test_timeout)?;
    let outputs = outputs(&args.output)?;
    let work_dir = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => {
            std::env::temp_dir().join(format!("fabric-preflight-isolate.{}", std::process::id()))
        }
    };
    // Absolute: the jobs may start elsewhere.
    let work_dir = std::fs::create_dir_all(&work_dir)
        .and_then(|()| work_dir.canonicalize())
        .with_context(|| format!("--work-dir {}", work_dir.display()))?;
    eprintln!(
        "fabric-preflight: isolating {} nodes ({nodes_from}); each group's report and output in {}",
        names.len(),
        work_dir.display()
    );

    crate::interrupt::install();
    let started = Instant::now();
    let timestamp = crate::report::rfc3339(SystemTime::now());
    let mut planner = Planner::new(names.len(), &topology_groups, usize::from(args.max_rounds));
    let mut measured: Vec<Vec<Measured>> = Vec::new();
    let mut interrupted = None;
    while let Some(round) = planner.next_round() {
        let number = measured.len() + 1;
        let results = run_round(&args, &names, round, number, &work_dir, timeout);
        if let Some(signal) = crate::interrupt::requested() {
            interrupted = Some(signal.to_string());
            break;
        }
        eprintln!(
            "fabric-preflight: round {number}: {} test(s), {} passed",
            results.len(),
            results.iter().filter(|m| m.passed).count()
        );
        planner.record(&results.iter().map(|m| m.passed).collect::<Vec<_>>());
        measured.push(results);
    }
    let report = IsolateReport::build(
        &planner,
        &Context {
            names: &names,
            groups: &groups,
            measured: &measured,
            nodes_from,
            topology_from: args.topology.as_ref().map(|p| p.display().to_string()),
            command: args.command.clone(),
            floor: args.floor,
            interrupted,
            timestamp,
            duration_ms: started.elapsed().as_millis() as u64,
        },
    );
    let mut code = report.exit_code;
    for (kind, path) in &outputs {
        let text = match kind {
            Kind::Json => report.json(),
            Kind::Junit => report.junit(),
            Kind::Html => report.html(),
            Kind::Culprits => report.culprits(),
        };
        if let Err(e) = crate::report::file::replace(path, &text) {
            eprintln!("fabric-preflight: writing {}: {e}", path.display());
            code = crate::exit::output_lost(code);
        }
    }
    let shown = match args.format {
        ViewFormat::Table => report.table(),
        ViewFormat::Json => report.json(),
    };
    Ok(super::emit(&shown, code))
}

/// Every test of one round at once, each on its own thread; results in the round's order.
fn run_round(
    args: &IsolateArgs,
    names: &[String],
    round: &[crate::isolate::plan::Test],
    number: usize,
    work_dir: &Path,
    timeout: Duration,
) -> Vec<Measured> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = round
            .iter()
            .enumerate()
            .map(|(i, test)| {
                let nodes: Vec<&str> = test.members.iter().map(|&m| names[m].as_str()).collect();
                let id = format!("r{number}t{i}");
                scope.spawn(move || {
                    measure::run_one(&args.command, &nodes, &id, work_dir, timeout, args.floor)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Measured {
                    ending: "not run".into(),
                    detail: "the thread running this test panicked".into(),
                    ..Measured::default()
                })
            })
            .collect()
    })
}
