//! `fabric-preflight pair`: the flags and the wiring. The engine is `crate::pair`: this node's inventory, one
//! supervised thread per link (one peer, or both ring neighbours), each port pair measured in a child process
//! and judged here, reported in the formats and exit codes of `run`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::cli::PairArgs;
use crate::host::Host;
use crate::interrupt;
use crate::measure::rdma_pair::PairPlan;
use crate::model::{CheckResult, Status};
use crate::pair::judge;
use crate::pair::link::{self, Settings, Side};
use crate::pair::ring::{self, RingArgs};
use crate::pair::summary;
use crate::pair::supervise::{self, LinkWork, RingPlace, Tally};
use crate::report::output::Delivery;
use crate::report::{HostInfo, Ring, RunReport};
use crate::tasks;

use super::{seconds_flag, usage_error};

pub const TOKEN_ENV: &str = "FABRIC_PREFLIGHT_TOKEN";

/// Everything resolved from the flags before anything starts; an error here is a usage error.
struct Ready {
    delivery: Delivery,
    profile: crate::profile::Profile,
    timeout: Duration,
    phase_time: Duration,
    /// `None`: `--summarize`.
    start: Option<Start>,
}

/// Whom to test and how.
struct Start {
    host: Host,
    token: String,
    side: Option<Side>,
    ring: Option<ring::Ring>,
}
pub fn main(args: PairArgs) -> anyhow::Result<u8> {
    // The reason for an exit 2 goes to the termination log, as `run`'s does.
    let ready = prepare(&args).map_err(|e| usage_error(&args.report, e))?;
    let reporter = |host: HostInfo| Reporter {
        strict: args.report.strict,
        delivery: ready.delivery.clone(),
        host,
        profile: ready.profile.name.clone(),
        started: Instant::now(),
    };
    let Some(start) = ready.start else {
        let summary =
            summary::summarize(&args.summarize).map_err(|e| usage_error(&args.report, e))?;
        let host = HostInfo {
            hostname: "(ring summary)".into(),
            node_name: "(ring summary)".into(),
            kernel: "-".into(),
            root: "-".into(),
            environment: None,
        };
        return Ok(reporter(host).deliver(summary, None));
    };
    interrupt::install();
    tasks::install_panic_hook();
    let host = start.host;
    let host_info = HostInfo::read(&host, args.node_name.as_deref());
    // One link, or a ring node's two at once: serving its predecessor, reaching its successor.
    let (me, sides) = match (start.side, &start.ring) {
        (Some(side), _) => (host_info.node_name.clone(), vec![(side, None)]),
        (None, Some(ring)) => {
            let me = ring.me().to_string();
            let port = ring::port_of(&me).unwrap_or(args.port);
            let listen_on = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
            let next = ring::address(ring.next(), args.port);
            let sides = vec![
                (Side::Listen(listen_on), Some(ring.prev())),
                (Side::Connect(next), Some(ring.next())),
            ];
            (me, sides)
        }
        (None, None) => unreachable!("clap requires --listen, --connect or --ring"),
    };
    let ring = start.ring.as_ref().map(|ring| RingPlace {
        members: ring.nodes.clone(),
        rank: ring.rank,
        source: ring.source.clone(),
    });
    let reporter = reporter(host_info);
    let deadline = reporter.started + ready.timeout;
    let inventory = Arc::new(supervise::inventory(
        args.root.clone(),
        args.memory,
        deadline,
    ));
    let settings = Arc::new(Settings {
        plan: PairPlan {
            message_bytes: args.message_size * 1024,
            bw_messages: args.messages,
            queue_depth: 16,
            pings: args.pings,
            phase_time: ready.phase_time,
            ack_timeout: args.ack_timeout,
            deadline,
        },
        pct: ready
            .profile
            .thresholds
            .pair_bandwidth_pct_of_link
            .unwrap_or_default()
            .or(judge::DEFAULT_PCT),
        lat: ready.profile.thresholds.pair_latency_us.unwrap_or_default(),
    });
    let work = sides
        .into_iter()
        .map(|(side, neighbour)| {
            let tally = Arc::new(Tally::default());
            let (t, inventory, settings) = (tally.clone(), inventory.clone(), settings.clone());
            let (me, token) = (me.clone(), start.token.clone());
            let neighbour = neighbour.map(str::to_string);
            LinkWork {
                name: format!("{me} <-> {}", neighbour.as_deref().unwrap_or("?")),
                tally,
                work: Box::new(move || {
                    link::link(
                        &side,
                        &me,
                        neighbour.as_deref(),
                        &token,
                        &inventory,
                        &settings,
                        &t,
                    )
                }),
            }
        })
        .collect();
    let per_link = supervise::links(work, deadline);
    let statuses: Vec<Status> = per_link.iter().map(|r| supervise::worst(r)).collect();
    let mut results: Vec<CheckResult> = per_link.into_iter().flatten().collect();
    let ring = match (&ring, statuses.as_slice()) {
        (Some(place), [before, after]) => {
            let ring = place.report([*before, *after]);
            results.push(place.summary(&ring));
            Some(ring)
        }
        _ => None,
    };
    Ok(reporter.deliver(results, ring))
}

/// Checks every flag (report files writable included) and resolves whom to test.
fn prepare(args: &PairArgs) -> anyhow::Result<Ready> {
    let delivery = super::delivery(&args.report)?;
    let profile = crate::profile::load(&args.profile, &crate::probes::ids())?;
    let timeout = seconds_flag("--timeout", args.timeout)?;
    let phase_time = seconds_flag("--phase-time", args.phase_time)?;
    if args.message_size == 0 || args.message_size > 1 << 20 {
        bail!("--message-size must be 1..=1048576 KiB");
    }
    let ready = |start| Ready {
        delivery,
        profile,
        timeout,
        phase_time,
        start,
    };
    if !args.summarize.is_empty() {
        return Ok(ready(None));
    }
    let host = match &args.root {
        Some(dir) => Host::at(dir)?,
        None => Host::live(),
    };
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let ring = if args.ring {
        let ring_args = RingArgs {
            peers: args.peers.clone(),
            rank: args.rank,
            hostfile: args.hostfile.clone(),
            service: args.service.clone(),
            size: args.size,
        };
        let read = |p: &str| {
            crate::input::read_text(Path::new(p), MAX_HOSTFILE_BYTES)
                .map_err(|e| format!("{p}: {e}"))
        };
        Some(ring::discover(&ring_args, &env, &read).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let token = job_token(args, &env, ring.as_ref())?;
    let side = match (&args.listen, &args.connect) {
        (Some(l), _) => Some(Side::Listen(parse_listen(l)?)),
        (_, Some(c)) => {
            if !c.contains(':') {
                bail!("--connect {c}: expected HOST:PORT");
            }
            Some(Side::Connect(c.clone()))
        }
        _ => None,
    };
    Ok(ready(Some(Start {
        host,
        token,
        side,
        ring,
    })))
}

/// An MPI hostfile lists one host per line: 1 MiB is far beyond any cluster's.
const MAX_HOSTFILE_BYTES: u64 = 1 << 20;
/// A token file holds one line; more is not a token.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The job token, from the first of `--token`, `--token-file`, `FABRIC_PREFLIGHT_TOKEN` and the launcher's
/// job id. The last only keeps jobs apart: stderr says so, since anyone can read a Slurm job id.
fn job_token(
    args: &PairArgs,
    env: &BTreeMap<String, String>,
    ring: Option<&ring::Ring>,
) -> anyhow::Result<String> {
    let given = match (&args.token, &args.token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(path)) => Some(
            crate::input::read_secret(path, MAX_TOKEN_FILE_BYTES)
                .map_err(|e| anyhow::anyhow!("--token-file {}: {e}", path.display()))?
                .trim()
                .to_string(),
        ),
        (None, None) => env.get(TOKEN_ENV).cloned(),
    };
    if let Some(token) = given {
        if token.is_empty() {
            bail!("the job token is empty (--token, --token-file or {TOKEN_ENV})");
        }
        return Ok(token);
    }
    let launcher = ring.and_then(|r| r.token.clone()).with_context(|| {
        format!("no job token: pass --token-file or --token, or set {TOKEN_ENV} (the same on both nodes)")
    })?;
    eprintln!(
        "pair: job token {launcher} (the Slurm job and step id): it keeps other jobs' pairs apart but is no \
         secret, any user can read it with squeue; for one, pass --token-file (deploy/slurm/pair-ring.sbatch does)"
    );
    Ok(launcher)
}

/// `PORT` or `ADDR:PORT` (`[::1]:PORT` for IPv6).
fn parse_listen(spec: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(port) = spec.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    spec.parse()
        .with_context(|| format!("--listen {spec}: expected PORT or ADDR:PORT"))
}

/// What the report of this run needs besides its results.
struct Reporter {
    strict: bool,
    delivery: Delivery,
    host: HostInfo,
    profile: String,
    started: Instant,
}

impl Reporter {
    /// Writes the report of `results` everywhere it goes; the exit code.
    fn deliver(&self, results: Vec<CheckResult>, ring: Option<Ring>) -> u8 {
        let mut report = RunReport::new(
            self.host.clone(),
            self.profile.clone(),
            self.started.elapsed().as_millis() as u64,
            results,
        )
        .with_strict(self.strict);
        report.interrupted = interrupt::requested().map(str::to_string);
        report.ring = ring;
        self.delivery.deliver(&report)
    }
}
