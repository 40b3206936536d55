//! `fabric-preflight pair`: handshake with one peer (or both ring neighbours), measure every port pair, report
//! in the formats and exit codes of `run`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::answers::Answers;
use crate::cli::PairArgs;
use crate::dynlib::{LibError, Library};
use crate::exit::Exit;
use crate::host::Host;
use crate::measure::memory::{self, MemoryChoice, TestMemory};
use crate::measure::rc::{self, PortTarget};
use crate::measure::rdma_pair::{self, PairPlan, Role};
use crate::pair::judge::{self, LegRun, PairLegs, ID_HANDSHAKE, ID_RDMA};
use crate::pair::ring::{self, RingArgs};
use crate::pair::session::{self, Local, Peer};
use crate::pair::wire::{self, PortInfo, PortMemory, VERSION};
use crate::presence::{Stack, Survey};
use crate::probe::{CheckResult, Status};
use crate::profile::PcieDistance;
use crate::report::{HostInfo, RunReport};
use crate::sysfs::infiniband;
use crate::sysfs::kernel::{HOSTNAME, OSRELEASE};
use crate::threshold::Limit;
use crate::topology::{nearest, PciTree};

use super::run::{deliver, parse_outputs};

pub const TOKEN_ENV: &str = "FABRIC_PREFLIGHT_TOKEN";
/// After the deadline, this long for the last results to be written before the watchdog ends the process.
const WATCHDOG_GRACE: Duration = Duration::from_secs(5);

/// This node's testable ports, or why there are none.
struct Inventory {
    /// Each port announces the memory it brings to the GPU leg (`PortInfo::memory`).
    ports: Vec<(PortInfo, PortTarget)>,
    /// What this node brings to GPU legs, decided once (`--memory`).
    gpus: GpuSource,
    /// No port: the reason, and whether that is an absence (skip) or a fault (fail).
    none: Option<(Status, String)>,
}

/// What this node brings to the GPU legs.
#[derive(Debug, Clone, PartialEq)]
enum GpuSource {
    /// Host memory only, and why.
    None(String),
    /// The GPUs CUDA lists (sysfs bus ids, CUDA order) whose memory GPU legs use.
    Gpus(Vec<String>),
    /// GPU memory due but unusable: the presence rule's status and words.
    Unusable(Status, String),
}

struct Settings {
    plan: PairPlan,
    pct: Limit,
    lat: Limit,
}

enum Side {
    Listen(SocketAddr),
    Connect(String),
}

pub fn main(args: PairArgs) -> anyhow::Result<u8> {
    let outputs = parse_outputs(&args.output, args.format)?;
    let profile = crate::profile::load(&args.profile, &crate::probes::ids())?;
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!(
            "--timeout must be a positive number of seconds, got {}",
            args.timeout
        );
    }
    if !(args.phase_time.is_finite() && args.phase_time > 0.0) {
        bail!(
            "--phase-time must be a positive number of seconds, got {}",
            args.phase_time
        );
    }
    if args.message_size == 0 || args.message_size > 1 << 20 {
        bail!("--message-size must be 1..=1048576 KiB");
    }
    if !args.summarize.is_empty() {
        return summarize(&args, &outputs, &profile.name);
    }
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let ring = if args.ring {
        let ring_args = RingArgs {
            peers: args.peers.clone(),
            rank: args.rank,
            hostfile: args.hostfile.clone(),
            service: args.service.clone(),
            size: args.size,
        };
        let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
        Some(ring::discover(&ring_args, &env, &read).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let token = args
        .token
        .clone()
        .or_else(|| env.get(TOKEN_ENV).cloned())
        .or_else(|| ring.as_ref().and_then(|r| r.token.clone()))
        .filter(|t| !t.is_empty())
        .with_context(|| {
            format!("no job token: pass --token or set {TOKEN_ENV} (the same on both nodes)")
        })?;
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

    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.timeout);
    watchdog(deadline);
    let host = Host::live();
    let hostname = host.read(HOSTNAME).unwrap_or_else(|_| "unknown".into());
    let gpus = gpu_source(&host, args.memory, &memory::cuda_gpus);
    let inventory = inventory(&host, &Answers::live(), gpus);
    let settings = Settings {
        plan: PairPlan {
            message_bytes: args.message_size * 1024,
            bw_messages: args.messages,
            queue_depth: 16,
            pings: args.pings,
            phase_time: Duration::from_secs_f64(args.phase_time),
            deadline,
        },
        pct: profile
            .thresholds
            .pair_bandwidth_pct_of_link
            .unwrap_or_default()
            .or(judge::DEFAULT_PCT),
        lat: profile.thresholds.pair_latency_us.unwrap_or_default(),
    };
    let results = match (side, ring) {
        (Some(side), _) => link(&side, &hostname, None, &token, &inventory, &settings),
        (None, Some(ring)) => {
            let me = ring.me().to_string();
            let port = ring::port_of(&me).unwrap_or(args.port);
            let listen_on = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
            let next = ring::address(ring.next(), args.port);
            let (prev_results, next_results) = std::thread::scope(|s| {
                let serve = s.spawn(|| {
                    link(
                        &Side::Listen(listen_on),
                        &me,
                        Some(ring.prev()),
                        &token,
                        &inventory,
                        &settings,
                    )
                });
                let reach = link(
                    &Side::Connect(next),
                    &me,
                    Some(ring.next()),
                    &token,
                    &inventory,
                    &settings,
                );
                (serve.join().unwrap_or_default(), reach)
            });
            let status =
                |rs: &[CheckResult]| rs.iter().map(|r| r.status).max().unwrap_or(Status::Error);
            let links = vec![
                (ring.prev().to_string(), me.clone(), status(&prev_results)),
                (me.clone(), ring.next().to_string(), status(&next_results)),
            ];
            let mut summary = judge::ring_summary(&me, &links);
            summary.evidence.insert(
                0,
                format!(
                    "ring = {} (rank {} of {}, from {})",
                    ring.nodes.join(","),
                    ring.rank,
                    ring.nodes.len(),
                    ring.source
                ),
            );
            let mut all = prev_results;
            all.extend(next_results);
            all.push(summary);
            all
        }
        (None, None) => unreachable!("clap requires --listen, --connect or --ring"),
    };
    let report = RunReport::new(
        HostInfo {
            node_name: hostname.clone(),
            hostname,
            kernel: host.read(OSRELEASE).unwrap_or_else(|_| "unknown".into()),
            root: "/".into(),
        },
        profile.name.clone(),
        started.elapsed().as_millis() as u64,
        results,
    );
    let report = report.with_strict(args.strict);
    let code = report.exit_code;
    Ok(deliver(
        &report,
        &outputs,
        args.color,
        false,
        args.termination_log.as_deref(),
        code,
    ))
}

/// `PORT` or `ADDR:PORT` (`[::1]:PORT` for IPv6).
fn parse_listen(spec: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(port) = spec.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    spec.parse()
        .with_context(|| format!("--listen {spec}: expected PORT or ADDR:PORT"))
}

/// A wedged verbs call or peer must not hold the node: past the deadline (plus a grace to write the report),
/// the process ends with the could-not-run code.
fn watchdog(deadline: Instant) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + WATCHDOG_GRACE);
        eprintln!("fabric-preflight pair: the deadline passed {WATCHDOG_GRACE:?} ago and a call has not returned; giving up");
        std::process::exit(Exit::COULD_NOT_RUN.into());
    });
}

/// This node's ports. Whether RDMA is there at all is the shared presence rule's call (`presence::Survey`), so a
/// NIC on the bus whose driver or libibverbs is missing or broken fails or errors here as in every probe; only
/// a node with no RDMA hardware skips.
fn inventory(host: &Host, answers: &Answers, gpus: GpuSource) -> Inventory {
    let none = |status, why: String| Inventory {
        ports: Vec::new(),
        gpus: gpus.clone(),
        none: Some((status, why)),
    };
    let tree = PciTree::read(host).ok();
    let rdma = Survey::read(host, Stack::Rdma);
    if let Some(r) = rdma.gate_if_unusable(ID_RDMA, false) {
        return none(r.status, r.summary);
    }
    let devices = match rdma.verbs_devices(answers, ID_RDMA, false) {
        Ok(d) => d,
        Err(r) => return none(r.status, r.summary),
    };
    let mut ports = Vec::new();
    let all_ports = match infiniband::read_all_ports(host) {
        Ok(p) => p,
        Err(e) => return none(Status::Error, e.to_string()),
    };
    for (dev, attrs) in all_ports {
        if !devices.contains(&dev) {
            continue;
        }
        // A device without a PCI function (soft-RoCE, siw) reports a placeholder rate.
        let nic = infiniband::read_device_bdf(host, &dev);
        let real = nic.is_some();
        for p in attrs.into_iter().filter(|p| p.is_active()) {
            // A RoCE port without a RoCE v2 GID cannot be addressed; it is left out like an inactive one.
            let target = match PortTarget::of(host, &p) {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => return none(Status::Error, e.to_string()),
            };
            ports.push((
                PortInfo {
                    device: p.device.clone(),
                    port: p.port as u8,
                    link_layer: p.link_layer.clone().unwrap_or_default(),
                    rate_gbps: p.parsed_rate().filter(|_| real).map(|r| r.gbps),
                    memory: port_memory(&gpus, tree.as_ref(), nic.as_deref()),
                },
                target,
            ));
        }
    }
    if ports.is_empty() {
        return none(
            Status::Fail,
            format!(
                "RDMA devices {} present but no port is ACTIVE",
                devices.join(" ")
            ),
        );
    }
    Inventory {
        ports,
        gpus,
        none: None,
    }
}

/// What this node brings to GPU legs. `auto`: GPU memory where the NVIDIA driver lists GPUs, judged by the
/// shared presence rule (GPUs on the bus without their driver, or a CUDA that cannot load or lists none, make
/// the GPU leg fail or error, never a silent host-only pass). `gpu`: the GPUs CUDA lists, required. `cuda`
/// lists the GPUs (`memory::cuda_gpus`; a parameter so tests need no GPU).
fn gpu_source(
    host: &Host,
    choice: MemoryChoice,
    cuda: &dyn Fn() -> Result<Vec<String>, LibError>,
) -> GpuSource {
    let unusable = |r: CheckResult| GpuSource::Unusable(r.status, r.summary);
    match choice {
        MemoryChoice::Host => GpuSource::None("host memory only (--memory host)".into()),
        MemoryChoice::Auto => {
            let survey = Survey::read(host, Stack::Gpu);
            match survey.gate_if_unusable(ID_RDMA, false) {
                Some(r) if r.status == Status::Skip => GpuSource::None(r.summary),
                Some(r) => unusable(r),
                None => match cuda() {
                    Ok(gpus) if !gpus.is_empty() => GpuSource::Gpus(gpus),
                    Ok(_) => unusable(survey.library_lists_none(
                        ID_RDMA,
                        Library::Cuda,
                        "cuDeviceGetCount",
                        false,
                    )),
                    Err(e) => unusable(survey.library_failed(ID_RDMA, &e, false)),
                },
            }
        }
        MemoryChoice::Gpu => match cuda() {
            Ok(gpus) if !gpus.is_empty() => GpuSource::Gpus(gpus),
            Ok(_) => GpuSource::Unusable(
                Status::Fail,
                "--memory gpu: CUDA lists no device (cuDeviceGetCount = 0)".into(),
            ),
            Err(e) => {
                let survey = Survey::read(host, Stack::Gpu);
                if survey.hardware_absent() {
                    GpuSource::Unusable(
                        Status::Fail,
                        format!("--memory gpu, but no GPU here: none on the PCI bus, and {e}"),
                    )
                } else {
                    let r = survey.library_failed(ID_RDMA, &e, true);
                    GpuSource::Unusable(r.status, format!("--memory gpu: {}", r.summary))
                }
            }
        },
    }
}

/// The memory a port brings to its GPU leg: the GPU nearest the port in the PCI tree where sysfs places both
/// (`topology::nearest`, as `gdr.loopback` pairs them), else CUDA's first GPU.
fn port_memory(gpus: &GpuSource, tree: Option<&PciTree>, nic: Option<&str>) -> PortMemory {
    let list = match gpus {
        GpuSource::None(why) => return PortMemory::Host { why: why.clone() },
        GpuSource::Unusable(status, why) => {
            return PortMemory::Unusable {
                status: *status,
                why: why.clone(),
            }
        }
        GpuSource::Gpus(list) => list,
    };
    let placed: Vec<(usize, PcieDistance)> = list
        .iter()
        .enumerate()
        .filter_map(|(i, gpu)| Some((i, tree?.distance_between(gpu, nic?)?)))
        .collect();
    let distances: Vec<PcieDistance> = placed.iter().map(|(_, d)| *d).collect();
    match nearest(&distances) {
        Some(k) => PortMemory::Gpu {
            bus_id: list[placed[k].0].clone(),
            why: format!(
                "the GPU nearest this port in the PCI tree ({:?})",
                placed[k].1
            ),
        },
        None => PortMemory::Gpu {
            bus_id: list[0].clone(),
            why: "CUDA device 0: sysfs does not place this port and a GPU in one PCI tree".into(),
        },
    }
}

/// One peer: handshake, then every port pair.
/// `expected` names the peer for the report when no handshake happened (the ring knows its neighbours).
fn link(
    side: &Side,
    me: &str,
    expected: Option<&str>,
    token: &str,
    inv: &Inventory,
    settings: &Settings,
) -> Vec<CheckResult> {
    let local = Local {
        node: me.to_string(),
        ports: inv.ports.iter().map(|(p, _)| p.clone()).collect(),
        no_ports: inv.none.as_ref().map(|(_, why)| why.clone()),
        accept_only: match side {
            Side::Listen(_) => expected.map(str::to_string),
            Side::Connect(_) => None,
        },
    };
    let deadline = settings.plan.deadline;
    let (peer, role, what) = match side {
        Side::Listen(addr) => (
            session::listen(*addr, token, &local, deadline, &mut |line| {
                eprintln!("fabric-preflight pair: refused {line}")
            }),
            Role::Responder,
            format!("listening on {addr}"),
        ),
        Side::Connect(target) => (
            session::connect(target, token, &local, deadline),
            Role::Initiator,
            format!("connecting to {target}"),
        ),
    };
    let mut peer = match peer {
        Ok(p) => p,
        Err(e) => {
            return vec![CheckResult::error(ID_HANDSHAKE, format!("{what}: {e}"))
                .subject(format!("{me} <-> {}", expected.unwrap_or("?")))
                .fix("start the other end with the same --token within the deadline; check that the TCP port is open between the nodes")]
        }
    };
    let peer_node = peer.node.clone();
    let subject = |l: &str, r: &str| format!("{me}:{l} <-> {peer_node}:{r}");
    let mut results = vec![CheckResult::pass(
        ID_HANDSHAKE,
        format!("{what}: handshake with {} done", peer.name()),
    )
    .subject(format!("{me} <-> {}", peer.node))
    .evidence("protocol version", VERSION)
    .evidence("GPU memory here", gpu_text(&inv.gpus))
    .evidence("peer address", peer.addr)
    .evidence(
        "peer ports",
        if peer.ports.is_empty() {
            peer.no_ports.clone().unwrap_or_else(|| "none".into())
        } else {
            peer.ports
                .iter()
                .map(PortInfo::name)
                .collect::<Vec<_>>()
                .join(" ")
        },
    )];
    if let Some((status, why)) = &inv.none {
        // No port pair to move GPU memory through; a GPU leg that was due and unusable still counts.
        let (status, summary) = match &inv.gpus {
            GpuSource::Unusable(s, gpu_why) => (
                (*status).max(*s),
                format!("this node: {why}; GPU memory unusable: {gpu_why}"),
            ),
            GpuSource::Gpus(list) => (
                *status,
                format!(
                    "this node: {why}; GPU memory ({}) not tested: no port to move it through",
                    list.join(", ")
                ),
            ),
            GpuSource::None(_) => (*status, format!("this node: {why}")),
        };
        results.push(
            CheckResult::new(ID_RDMA, status, summary)
                .subject(format!("{me} <-> {peer_node}"))
                .evidence("GPU memory here", gpu_text(&inv.gpus)),
        );
        return results;
    }
    if peer.ports.is_empty() {
        let why = peer.no_ports.clone().unwrap_or_else(|| "no port".into());
        results.push(
            CheckResult::skip(ID_RDMA, format!("peer {}: {why}", peer.node))
                .subject(format!("{me} <-> {peer_node}")),
        );
        return results;
    }
    let pairs = inv.ports.len().max(peer.ports.len());
    for i in 0..pairs {
        peer.port_pair = i as u32;
        let result = match (inv.ports.get(i), peer.ports.get(i).cloned()) {
            (Some((mine, target)), Some(theirs)) => {
                let s = subject(&mine.name(), &theirs.name());
                measure_pair(&mut peer, role, mine, target, &theirs, settings).subject(s)
            }
            (Some((mine, _)), None) => CheckResult::warn(
                ID_RDMA,
                format!(
                    "no counterpart: {} has {} active port(s)",
                    peer.node,
                    peer.ports.len()
                ),
            )
            .subject(subject(&mine.name(), "-")),
            (None, Some(theirs)) => CheckResult::warn(
                ID_RDMA,
                format!(
                    "no counterpart: this node has {} active port(s)",
                    inv.ports.len()
                ),
            )
            .subject(subject("-", &theirs.name())),
            (None, None) => unreachable!(),
        };
        results.push(result);
    }
    results
}

fn measure_pair(
    peer: &mut Peer,
    role: Role,
    mine: &PortInfo,
    target: &PortTarget,
    theirs: &PortInfo,
    settings: &Settings,
) -> CheckResult {
    if mine.link_layer != theirs.link_layer {
        // Both ends see the same two announcements, so both skip the transfer without a word.
        return CheckResult::fail(
            ID_RDMA,
            format!(
                "link layers differ: {} here, {} on {}",
                mine.link_layer, theirs.link_layer, peer.node
            ),
        )
        .fix("pair ports of the same fabric (InfiniBand with InfiniBand, RoCE with RoCE)");
    }
    // The host leg always (the control); the GPU leg when either end brings GPU memory. Both ends decide from
    // the same two announcements, so they run the same legs in the same order.
    // A failed host leg ends the pair: both ends saw it fail (a failure is sent to the peer), so both skip the
    // GPU leg, and a failure mid-leg can leave the control channel out of step for another leg.
    let host = leg(peer, role, target, settings, None);
    let gpu = wire::gpu_leg(&mine.memory, &theirs.memory).then(|| match &host {
        LegRun::Done(_) if !peer.is_gone() => leg(peer, role, target, settings, mine.memory.gpu()),
        LegRun::Done(_) => LegRun::NotRun("the peer went away after the host-memory leg".into()),
        _ => LegRun::NotRun("the host-memory leg failed first".into()),
    });
    let legs = PairLegs {
        peer_name: peer.name(),
        peer_node: peer.node.clone(),
        mine: mine.memory.clone(),
        theirs: theirs.memory.clone(),
        host,
        gpu,
    };
    let mut r = judge::judge(
        &legs,
        judge::comparable_rate(mine.rate_gbps, theirs.rate_gbps),
        &settings.pct,
        &settings.lat,
    );
    r.evidence.insert(
        0,
        format!(
            "{}: link layer {}, rate {}, {} ({})",
            mine.name(),
            mine.link_layer,
            rate_text(mine.rate_gbps),
            mine.memory.describe(),
            mine.memory.why()
        ),
    );
    r.evidence.insert(
        1,
        format!(
            "{}:{}: link layer {}, rate {}, {} ({})",
            peer.node,
            theirs.name(),
            theirs.link_layer,
            rate_text(theirs.rate_gbps),
            theirs.memory.describe(),
            theirs.memory.why()
        ),
    );
    r
}

/// One leg through this end's memory: the GPU at `gpu`, or host memory.
fn leg(
    peer: &mut Peer,
    role: Role,
    target: &PortTarget,
    settings: &Settings,
    gpu: Option<&str>,
) -> LegRun {
    let len = settings.plan.region_bytes();
    let memory = match gpu {
        Some(bus_id) => TestMemory::gpu(bus_id, len),
        None => Ok(TestMemory::host(len)),
    };
    let result = match memory {
        Ok(mut memory) => rdma_pair::run(role, target, settings.plan, &mut memory, peer),
        Err(f) => {
            rdma_pair::stop_before_endpoint(peer, &f);
            Err(f)
        }
    };
    match result {
        Ok(outcome) => LegRun::Done(outcome),
        Err(failure) => leg_failed(peer, failure),
    }
}

/// A leg that stopped at `failure`. A failure the peer reported is its verdict on the path, even when its
/// process has ended by now (a ring node ends as soon as both its links are done): the peer did not go away.
fn leg_failed(peer: &mut Peer, failure: rc::Failure) -> LegRun {
    LegRun::Failed {
        peer_gone: !rdma_pair::is_relayed(&failure) && peer.is_gone(),
        failure,
    }
}

/// The handshake's line on this node's GPU memory.
fn gpu_text(gpus: &GpuSource) -> String {
    match gpus {
        GpuSource::None(why) => format!("none: {why}"),
        GpuSource::Gpus(list) => format!("{} (CUDA order)", list.join(", ")),
        GpuSource::Unusable(status, why) => format!("unusable ({status}): {why}"),
    }
}

fn rate_text(rate: Option<f64>) -> String {
    rate.map(|r| format!("{r} Gb/s"))
        .unwrap_or_else(|| "not meaningful (software device) or unreadable".into())
}

/// `--summarize`: every node's ring links together, and the node common to the failing ones.
fn summarize(
    args: &PairArgs,
    outputs: &[(crate::report::Format, super::run::Target)],
    profile: &str,
) -> anyhow::Result<u8> {
    let mut reports = Vec::new();
    for path in &args.summarize {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let report: RunReport = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a fabric-preflight JSON report", path.display()))?;
        reports.push(report);
    }
    let links = judge::links_from_reports(&reports);
    if links.is_empty() {
        bail!("no pair.ring results in the given reports (they come from `pair --ring --format json`)");
    }
    let mut summary = judge::ring_summary(&format!("{} reports", reports.len()), &links);
    summary.evidence.insert(
        0,
        format!(
            "reports from {}",
            reports
                .iter()
                .map(|r| r.host.hostname.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let report = RunReport::new(
        HostInfo {
            hostname: "(ring summary)".into(),
            node_name: "(ring summary)".into(),
            kernel: "-".into(),
            root: "-".into(),
        },
        profile.to_string(),
        0,
        vec![summary],
    );
    let report = report.with_strict(args.strict);
    let code = report.exit_code;
    Ok(deliver(
        &report,
        outputs,
        args.color,
        false,
        args.termination_log.as_deref(),
        code,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hgx-healthy has ConnectX functions bound to mlx5 and eight mlx5 devices; `device_list` is what
    /// libibverbs answers.
    fn inventory_with(device_list: &str) -> Inventory {
        let dir = tempfile::tempdir().unwrap();
        let answers = dir.path().join("vendor-answers.json");
        std::fs::write(
            &answers,
            format!(r#"{{"verbs.device_list": {device_list}}}"#),
        )
        .unwrap();
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts/hgx-healthy");
        inventory(
            &Host::at(&root).unwrap(),
            &Answers::from_file(&answers).unwrap(),
            GpuSource::None("--memory host".into()),
        )
    }

    /// In the three-VM ring, vm-c reported its retry-exceeded completion and ended before vm-a judged the link:
    /// vm-a called that an error ("went away mid-transfer") instead of the fabric failure it was.
    #[test]
    fn a_completion_failure_the_peer_reported_fails_after_it_left() {
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut here, there) = session::connected_peers(deadline);
        drop(there);
        let theirs = rc::fail(
            "RDMA WRITE completion",
            "work completion status 12 (transport retry counter exceeded: no ACK from the peer)",
        );
        let LegRun::Failed { peer_gone, .. } = leg_failed(&mut here, rdma_pair::relayed(&theirs))
        else {
            panic!("not failed")
        };
        assert!(!peer_gone);
        // The peer that vanished without a word is still gone.
        let LegRun::Failed { peer_gone, .. } = leg_failed(
            &mut here,
            rc::fail("peer: RDMA WRITE", "closed the connection"),
        ) else {
            panic!("not failed")
        };
        assert!(peer_gone);
    }

    fn scenario(name: &str) -> Host {
        Host::at(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/hosts")
                .join(name),
        )
        .unwrap()
    }

    fn not_loaded() -> Result<Vec<String>, LibError> {
        Err(LibError::not_loaded(
            Library::Cuda,
            "libcuda.so.1: cannot open shared object file: No such file or directory",
        ))
    }

    #[test]
    fn auto_uses_the_gpus_the_driver_lists_and_never_falls_back_silently() {
        let hgx = scenario("hgx-healthy");
        let two = || Ok(vec!["0000:29:00.0".to_string(), "0000:18:00.0".to_string()]);
        assert_eq!(
            gpu_source(&hgx, MemoryChoice::Auto, &two),
            GpuSource::Gpus(vec!["0000:29:00.0".into(), "0000:18:00.0".into()])
        );
        // GPUs bound to nvidia but libcuda missing: an error naming the library, not a host-only pass.
        let GpuSource::Unusable(status, why) = gpu_source(&hgx, MemoryChoice::Auto, &not_loaded)
        else {
            panic!("not unusable")
        };
        assert_eq!(status, Status::Error, "{why}");
        assert!(why.contains("libcuda.so.1"), "{why}");
        // CUDA loads and lists nothing next to the driver's eight.
        let none = || Ok(vec![]);
        assert!(matches!(
            gpu_source(&hgx, MemoryChoice::Auto, &none),
            GpuSource::Unusable(Status::Fail, _)
        ));
        // No GPU at all: host memory, saying why; CUDA is not asked.
        let GpuSource::None(why) =
            gpu_source(&scenario("rxe-vm"), MemoryChoice::Auto, &|| unreachable!())
        else {
            panic!("not host-only")
        };
        assert!(why.contains("no NVIDIA GPU"), "{why}");
        assert!(matches!(
            gpu_source(&hgx, MemoryChoice::Host, &two),
            GpuSource::None(_)
        ));
    }

    #[test]
    fn gpus_on_the_bus_without_their_driver_fail_the_gpu_leg() {
        let dir = crate::probes::testing::copy_scenario("hgx-healthy");
        let gpus = dir.path().join("proc/driver/nvidia/gpus");
        std::fs::remove_dir_all(&gpus).unwrap();
        std::fs::create_dir(&gpus).unwrap();
        let GpuSource::Unusable(status, why) = gpu_source(
            &Host::at(dir.path()).unwrap(),
            MemoryChoice::Auto,
            &|| unreachable!(),
        ) else {
            panic!("not unusable")
        };
        assert_eq!(status, Status::Fail, "{why}");
        assert!(why.contains("without"), "{why}");
    }

    #[test]
    fn gpu_mode_requires_a_cuda_device() {
        let vm = scenario("rxe-vm");
        let standin = || Ok(vec!["0000:5e:00.0".to_string()]);
        assert_eq!(
            gpu_source(&vm, MemoryChoice::Gpu, &standin),
            GpuSource::Gpus(vec!["0000:5e:00.0".into()])
        );
        for cuda in [&not_loaded as &dyn Fn() -> _, &|| Ok(vec![])] {
            let GpuSource::Unusable(status, why) = gpu_source(&vm, MemoryChoice::Gpu, cuda) else {
                panic!("not unusable")
            };
            assert_eq!(status, Status::Fail, "{why}");
            assert!(why.starts_with("--memory gpu"), "{why}");
        }
    }

    #[test]
    fn each_port_gets_the_nearest_gpu_else_cuda_device_0() {
        let hgx = scenario("hgx-healthy");
        let tree = PciTree::read(&hgx).unwrap();
        let gpus = GpuSource::Gpus(vec!["0000:ba:00.0".into(), "0000:18:00.0".into()]);
        // mlx5_0 (0000:19:00.0) shares a PCIe switch with 0000:18:00.0.
        let m = port_memory(&gpus, Some(&tree), Some("0000:19:00.0"));
        assert_eq!(m.gpu(), Some("0000:18:00.0"), "{m:?}");
        assert!(m.why().contains("nearest"), "{m:?}");
        // A port sysfs cannot place (soft-RoCE) or a stand-in GPU it does not know: CUDA's first.
        for (gpus, nic) in [
            (gpus.clone(), None),
            (
                GpuSource::Gpus(vec!["0000:5e:00.0".into()]),
                Some("0000:19:00.0"),
            ),
        ] {
            let m = port_memory(&gpus, Some(&tree), nic);
            assert!(m.why().starts_with("CUDA device 0"), "{m:?}");
        }
        let unusable = GpuSource::Unusable(Status::Error, "x".into());
        assert!(matches!(
            port_memory(&unusable, Some(&tree), None),
            PortMemory::Unusable {
                status: Status::Error,
                ..
            }
        ));
    }

    #[test]
    fn rdma_nic_on_the_bus_is_never_a_skip() {
        // libibverbs cannot be loaded while the NICs and mlx5_ib are there: an error, not "no RDMA device".
        let (status, why) = inventory_with(r#"{"Failed": {"errno": 95, "message": "not loaded"}}"#)
            .none
            .unwrap();
        assert_eq!(status, Status::Error, "{why}");
        // libibverbs loads but lists nothing (no provider): a failure.
        let (status, why) = inventory_with(r#"{"Devices": []}"#).none.unwrap();
        assert_eq!(status, Status::Fail, "{why}");
    }
}
