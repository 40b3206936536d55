//! `fabric-preflight pair`: handshake with one peer (or both ring neighbours), measure every port pair, report
//! in the formats and exit codes of `run`.
//!
//! Every library call runs in a child process of this binary (`__pair`, on the machinery of `isolate`): one
//! lists this node's ports, and one per port pair measures it over the control socket it inherits. A verbs
//! call that hangs or crashes is killed at the deadline and reported naming the call and the peer; the parent
//! keeps the TCP handshake, the report, and a watchdog for whatever still does not return.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use crate::answers::Answers;
use crate::cli::{PairArgs, ReportArgs};
use crate::dynlib::{LibError, Library};
use crate::exit::Exit;
use crate::host::Host;
use crate::interrupt;
use crate::isolate;
use crate::measure::memory::{self, MemoryChoice, TestMemory};
use crate::measure::rc::{self, PortTarget};
use crate::measure::rdma_pair::{self, PairPlan, Role};
use crate::pair::judge::{self, LegRun, PairLegs, ID_HANDSHAKE, ID_RDMA, ID_RING};
use crate::pair::ring::{self, RingArgs};
use crate::pair::session::{self, Handoff, Local, Peer};
use crate::pair::wire::{self, NoPorts, PortInfo, PortMemory, VERSION};
use crate::presence::{Stack, Survey};
use crate::probe::{CheckResult, Status};
use crate::profile::PcieDistance;
use crate::report::{Format, HostInfo, RunReport};
use crate::sysfs::infiniband;
use crate::sysfs::kernel::{HOSTNAME, OSRELEASE};
use crate::threshold::Limit;
use crate::topology::{nearest, PciTree};

use super::run::{deliver, report_targets, seconds_flag, usage_error, Target};

pub const TOKEN_ENV: &str = "FABRIC_PREFLIGHT_TOKEN";
/// Hidden subcommand of the child processes.
const CHILD_SUBCOMMAND: &str = "__pair";
/// After the deadline, this long for the last results to be written before the watchdog ends the process.
const WATCHDOG_GRACE: Duration = Duration::from_secs(5);
/// A measuring child is killed this long after the deadline: its phases end at the deadline and it still has to
/// send its reply. Shorter than the watchdog's grace, so the report names the call that did not return.
const CHILD_GRACE: Duration = Duration::from_secs(1);
/// Listing the ports and GPUs takes at most this long, and at most half the deadline: a hung library must leave
/// time to tell the peer. Generous, because `cuInit` on eight GPUs without persistence mode takes seconds.
const INVENTORY_LIMIT: Duration = Duration::from_secs(20);

/// This node's testable ports, or why there are none.
#[derive(Debug, Serialize, Deserialize)]
struct Inventory {
    /// Each port announces the memory it brings to the GPU leg (`PortInfo::memory`).
    ports: Vec<(PortInfo, PortTarget)>,
    /// What this node brings to GPU legs, decided once (`--memory`).
    gpus: GpuSource,
    /// No port: the reason, and whether that is an absence (skip) or a fault (fail).
    none: Option<(Status, String)>,
}

/// What this node brings to the GPU legs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum GpuSource {
    /// Host memory only, and why.
    None(String),
    /// The GPUs CUDA lists (sysfs bus ids, CUDA order) whose memory GPU legs use.
    Gpus(Vec<String>),
    /// GPU memory due but unusable: the presence rule's status and words.
    Unusable(Status, String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    plan: PairPlan,
    pct: Limit,
    lat: Limit,
}

/// What a `__pair` child process does.
#[derive(Debug, Serialize, Deserialize)]
enum Job {
    /// List the ports of this node and the GPUs whose memory they move (`root`: a recorded tree; none: the
    /// live host).
    Inventory {
        root: Option<PathBuf>,
        memory: MemoryChoice,
    },
    /// Measure one port pair over the inherited control socket.
    Measure(Box<MeasureJob>),
}

#[derive(Debug, Serialize, Deserialize)]
struct MeasureJob {
    peer: Handoff,
    role: Role,
    mine: PortInfo,
    target: PortTarget,
    theirs: PortInfo,
    settings: Settings,
}

enum Side {
    Listen(SocketAddr),
    Connect(String),
}

/// Everything resolved from the flags before anything starts; an error here is a usage error.
struct Ready {
    outputs: Vec<(Format, Target)>,
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
        flags: args.report.clone(),
        outputs: ready.outputs.clone(),
        host,
        profile: ready.profile.name.clone(),
        started: Instant::now(),
    };
    let Some(start) = ready.start else {
        let summary = summarize(&args.summarize).map_err(|e| usage_error(&args.report, e))?;
        let host = HostInfo {
            hostname: "(ring summary)".into(),
            node_name: "(ring summary)".into(),
            kernel: "-".into(),
            root: "-".into(),
        };
        return Ok(reporter(host).deliver(summary));
    };
    interrupt::install();
    let host = start.host;
    let hostname = host.read(HOSTNAME).unwrap_or_else(|_| "unknown".into());
    // One link, or a ring node's two at once: serving its predecessor, reaching its successor.
    let (me, sides) = match (start.side, &start.ring) {
        (Some(side), _) => (hostname.clone(), vec![(side, None)]),
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
        me: me.clone(),
        prev: ring.prev().to_string(),
        next: ring.next().to_string(),
        described: format!(
            "ring = {} (rank {} of {}, from {})",
            ring.nodes.join(","),
            ring.rank,
            ring.nodes.len(),
            ring.source
        ),
    });
    let run = Arc::new(Run {
        reporter: reporter(HostInfo {
            node_name: hostname.clone(),
            hostname: hostname.clone(),
            kernel: host.read(OSRELEASE).unwrap_or_else(|_| "unknown".into()),
            root: host.root().display().to_string(),
        }),
        links: [Tally::default(), Tally::default()],
        ring,
        claimed: AtomicBool::new(false),
    });
    // A single pair uses one link: the other has nothing to report, and the watchdog must not wait for it.
    for unused in &run.links[sides.len()..] {
        unused.finished.store(true, Ordering::SeqCst);
    }
    let deadline = run.reporter.started + ready.timeout;
    watchdog(Arc::clone(&run), deadline);
    let inventory = list_ports(args.root.as_deref(), args.memory, deadline, &run.links[0]);
    let settings = Settings {
        plan: PairPlan {
            message_bytes: args.message_size * 1024,
            bw_messages: args.messages,
            queue_depth: 16,
            pings: args.pings,
            phase_time: ready.phase_time,
            deadline,
        },
        pct: ready
            .profile
            .thresholds
            .pair_bandwidth_pct_of_link
            .unwrap_or_default()
            .or(judge::DEFAULT_PCT),
        lat: ready.profile.thresholds.pair_latency_us.unwrap_or_default(),
    };
    let token = start.token.as_str();
    std::thread::scope(|s| {
        let running: Vec<_> = sides
            .iter()
            .zip(&run.links)
            .map(|((side, neighbour), tally)| {
                let me = me.as_str();
                let (inventory, settings) = (&inventory, &settings);
                let thread = s.spawn(move || {
                    link(side, me, *neighbour, token, inventory, settings, tally);
                    tally.finished.store(true, Ordering::SeqCst);
                });
                (neighbour, tally, thread)
            })
            .collect();
        for (neighbour, tally, thread) in running {
            // A link that panicked still leaves a result saying so.
            if let Err(payload) = thread.join() {
                let link = format!("{me} <-> {}", neighbour.unwrap_or("?"));
                tally.panicked(&link, payload.as_ref());
            }
        }
    });
    // Claimed before the tallies are taken: a watchdog firing in between would report them empty, a pass.
    if run.claimed.swap(true, Ordering::SeqCst) {
        // The watchdog is writing the report: it ends the process.
        loop {
            std::thread::park();
        }
    }
    let mut results: Vec<CheckResult> = Vec::new();
    let mut statuses = [Status::Error; 2];
    for (tally, status) in run.links[..sides.len()].iter().zip(&mut statuses) {
        let link = tally.take();
        *status = worst(&link);
        results.extend(link);
    }
    if let Some(place) = &run.ring {
        results.push(place.summary(statuses));
    }
    Ok(run.reporter.deliver(results))
}

/// Checks every flag (report files writable included) and resolves whom to test.
fn prepare(args: &PairArgs) -> anyhow::Result<Ready> {
    let outputs = report_targets(&args.report)?;
    let profile = crate::profile::load(&args.profile, &crate::probes::ids())?;
    let timeout = seconds_flag("--timeout", args.timeout)?;
    let phase_time = seconds_flag("--phase-time", args.phase_time)?;
    if args.message_size == 0 || args.message_size > 1 << 20 {
        bail!("--message-size must be 1..=1048576 KiB");
    }
    let ready = |start| Ready {
        outputs,
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
    Ok(ready(Some(Start {
        host,
        token,
        side,
        ring,
    })))
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
    flags: ReportArgs,
    outputs: Vec<(Format, Target)>,
    host: HostInfo,
    profile: String,
    started: Instant,
}

impl Reporter {
    /// Writes the report of `results` everywhere it goes; the exit code.
    fn deliver(&self, results: Vec<CheckResult>) -> u8 {
        let mut report = RunReport::new(
            self.host.clone(),
            self.profile.clone(),
            self.started.elapsed().as_millis() as u64,
            results,
        )
        .with_strict(self.flags.strict);
        report.interrupted = interrupt::requested().map(str::to_string);
        deliver(
            &report,
            &self.outputs,
            self.flags.color,
            false,
            self.flags.termination_log.as_deref(),
        )
    }
}

/// One run: its links' results as they come, shared with the watchdog.
struct Run {
    reporter: Reporter,
    /// One link, or a ring node's two (serving its predecessor, reaching its successor). The first also holds
    /// the listing of this node's ports while it runs.
    links: [Tally; 2],
    /// A ring node's place: its report ends with the `pair.ring` result, the watchdog's too.
    ring: Option<RingPlace>,
    /// The report is being written (by the run or by the watchdog): only one writes it.
    claimed: AtomicBool,
}

/// Where this node sits in the ring, for its `pair.ring` result.
struct RingPlace {
    me: String,
    prev: String,
    next: String,
    /// `ring = a,b,c (rank 1 of 3, from …)`.
    described: String,
}

impl RingPlace {
    /// The ring summary of this node's links: `statuses` of the one with its predecessor, then its successor.
    fn summary(&self, statuses: [Status; 2]) -> CheckResult {
        let links = [
            (self.prev.clone(), self.me.clone(), statuses[0]),
            (self.me.clone(), self.next.clone(), statuses[1]),
        ];
        let mut summary = judge::ring_summary(&self.me, &links);
        summary.evidence.insert(0, self.described.clone());
        summary
    }
}

/// A link's verdict: its worst result; a link without any is an error.
fn worst(results: &[CheckResult]) -> Status {
    results
        .iter()
        .map(|r| r.status)
        .max()
        .unwrap_or(Status::Error)
}

/// A link's results so far, and the error to report for the step in flight if it never returns.
#[derive(Default)]
struct Tally {
    steps: Mutex<(Vec<CheckResult>, Option<CheckResult>)>,
    /// The link's thread returned: its results are all there.
    finished: AtomicBool,
}

impl Tally {
    fn lock(&self) -> MutexGuard<'_, (Vec<CheckResult>, Option<CheckResult>)> {
        // A thread that panicked holding the lock left consistent data: every change is one push or one set.
        self.steps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The link's verdict for the watchdog: a link not finished is an error, whatever passed so far.
    fn verdict_so_far(&self) -> Status {
        if self.finished.load(Ordering::SeqCst) {
            worst(&self.lock().0)
        } else {
            Status::Error
        }
    }

    /// A step starts; `if_stuck` names it for the watchdog, should it never return.
    fn begin(&self, if_stuck: CheckResult) {
        self.lock().1 = Some(if_stuck);
    }

    /// A step's result; nothing is in flight any more.
    fn record(&self, r: CheckResult) {
        let mut t = self.lock();
        t.0.push(r);
        t.1 = None;
    }

    fn take(&self) -> Vec<CheckResult> {
        std::mem::take(&mut self.lock().0)
    }

    /// The results so far and the step in flight as an error, for the watchdog.
    fn so_far(&self) -> Vec<CheckResult> {
        let t = self.lock();
        let stuck = t.1.clone().map(|mut r| {
            r.summary.push_str(&format!(
                ": did not return within the deadline and {} s of grace; the watchdog wrote this report and ended the run",
                WATCHDOG_GRACE.as_secs()
            ));
            r
        });
        // Between two steps nothing is in flight, yet the link has not finished: its verdict is missing, which is
        // an error, never the pass its earlier steps alone would make.
        let unfinished = (stuck.is_none() && !self.finished.load(Ordering::SeqCst)).then(|| {
            CheckResult::error(
                ID_RDMA,
                "the link had not finished when the watchdog ended the run",
            )
        });
        t.0.iter().cloned().chain(stuck).chain(unfinished).collect()
    }

    /// The thread running this link panicked: the step in flight (or the link) ends in an error saying so.
    fn panicked(&self, link: &str, payload: &(dyn std::any::Any + Send)) {
        let message = crate::runner::panic_message(payload);
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
            ),
        );
    }
}

/// A wedged call must not hold the node: past the deadline (plus a grace for the last results), the report is
/// written with what finished and an error for what is still in flight, and the process ends.
fn watchdog(run: Arc<Run>, deadline: Instant) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + WATCHDOG_GRACE);
        eprintln!("fabric-preflight pair: the deadline passed {WATCHDOG_GRACE:?} ago and a call has not returned; writing the report without it");
        if run.claimed.swap(true, Ordering::SeqCst) {
            // The run is writing its report: give it one more grace, no more.
            std::thread::sleep(WATCHDOG_GRACE);
            std::process::exit(Exit::COULD_NOT_RUN.into());
        }
        let mut results: Vec<CheckResult> = run.links.iter().flat_map(Tally::so_far).collect();
        if let Some(place) = &run.ring {
            results.push(place.summary(run.links.each_ref().map(Tally::verdict_so_far)));
        }
        std::process::exit(run.reporter.deliver(results).into());
    });
}

/// This node's ports and GPUs, listed in a child process: the presence survey, libibverbs' device list and
/// CUDA's are library calls that may hang.
fn list_ports(
    root: Option<&Path>,
    memory: MemoryChoice,
    deadline: Instant,
    tally: &Tally,
) -> Inventory {
    let limit = INVENTORY_LIMIT.min(deadline.saturating_duration_since(Instant::now()) / 2);
    tally.begin(CheckResult::error(
        ID_RDMA,
        "listing this node's RDMA ports and GPUs",
    ));
    let job = Job::Inventory {
        root: root.map(Path::to_path_buf),
        memory,
    };
    let listed = isolate::run_child(CHILD_SUBCOMMAND, &job, limit, |_| {});
    tally.lock().1 = None;
    listed.unwrap_or_else(|f| {
        let why = format!("listing this node's RDMA ports and GPUs: {}", f.summary);
        Inventory {
            ports: Vec::new(),
            gpus: GpuSource::None(why.clone()),
            none: Some((Status::Error, why)),
        }
    })
}

/// Entry point of `fabric-preflight __pair`.
pub fn child_main() -> i32 {
    isolate::serve_child(|job: Job| {
        match job {
            Job::Inventory { root, memory } => {
                let host = match root {
                    Some(dir) => Host::at(&dir),
                    None => Ok(Host::live()),
                };
                let inv = host
                    .and_then(|h| Ok((Answers::for_host(&h)?, h)))
                    .map(|(answers, host)| {
                        let gpus = gpu_source(&host, memory, &memory::cuda_gpus);
                        inventory(&host, &answers, gpus)
                    })
                    .unwrap_or_else(|e| Inventory {
                        ports: Vec::new(),
                        gpus: GpuSource::None(format!("{e:#}")),
                        none: Some((Status::Error, format!("{e:#}"))),
                    });
                serde_json::to_value(inv)
            }
            Job::Measure(job) => {
                // SAFETY: the parent cleared close-on-exec on this descriptor for this child alone; nothing else
                // here owns it.
                let mut peer = unsafe { Peer::adopt(job.peer) };
                let r = measure_pair(
                    &mut peer,
                    job.role,
                    &job.mine,
                    &job.target,
                    &job.theirs,
                    &job.settings,
                );
                serde_json::to_value(r)
            }
        }
        .unwrap_or_default()
    })
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
    // EFA refuses RC queue pairs: a node whose RDMA devices are all EFAs has no port to test here.
    let efa = match crate::sysfs::efa::split_efa(host, &rdma.driver_devices) {
        Ok((_, efa)) => efa,
        Err(e) => return none(Status::Error, e.to_string()),
    };
    if !efa.is_empty() && efa.len() == rdma.driver_devices.len() {
        return none(Status::Skip, crate::sysfs::efa::NO_RC.to_string());
    }
    let devices: Vec<String> = match rdma.verbs_devices(answers, ID_RDMA, false) {
        Ok(d) => d.into_iter().filter(|d| !efa.contains(d)).collect(),
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

/// One peer: handshake, then every port pair, each measured in a child process.
/// `expected` names the peer for the report when no handshake happened (the ring knows its neighbours).
fn link(
    side: &Side,
    me: &str,
    expected: Option<&str>,
    token: &str,
    inv: &Inventory,
    settings: &Settings,
    tally: &Tally,
) {
    let local = Local {
        node: me.to_string(),
        ports: inv.ports.iter().map(|(p, _)| p.clone()).collect(),
        no_ports: inv.none.as_ref().map(|(status, why)| NoPorts {
            status: *status,
            why: why.clone(),
        }),
        accept_only: match side {
            Side::Listen(_) => expected.map(str::to_string),
            Side::Connect(_) => None,
        },
    };
    let deadline = settings.plan.deadline;
    let (role, what) = match side {
        Side::Listen(addr) => (Role::Responder, format!("listening on {addr}")),
        Side::Connect(target) => (Role::Initiator, format!("connecting to {target}")),
    };
    let unnamed = format!("{me} <-> {}", expected.unwrap_or("?"));
    tally.begin(
        CheckResult::error(ID_HANDSHAKE, format!("{what}: the handshake")).subject(unnamed.clone()),
    );
    let peer = match side {
        Side::Listen(addr) => session::listen(*addr, token, &local, deadline, &mut |line| {
            eprintln!("fabric-preflight pair: refused {line}")
        }),
        Side::Connect(target) => session::connect(target, token, &local, deadline),
    };
    let mut peer = match peer {
        Ok(p) => p,
        Err(e) => {
            return tally.record(CheckResult::error(ID_HANDSHAKE, format!("{what}: {e}"))
                .subject(unnamed)
                .fix("start the other end with the same --token within the deadline; check that the TCP port is open between the nodes"))
        }
    };
    let peer_node = peer.node.clone();
    let subject = |l: &str, r: &str| format!("{me}:{l} <-> {peer_node}:{r}");
    tally.record(
        CheckResult::pass(
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
                peer.no_ports
                    .as_ref()
                    .map(|n| format!("none: {} ({})", n.why, n.status))
                    .unwrap_or_else(|| "none".into())
            } else {
                peer.ports
                    .iter()
                    .map(PortInfo::name)
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        ),
    );
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
        return tally.record(
            CheckResult::new(ID_RDMA, status, summary)
                .subject(format!("{me} <-> {peer_node}"))
                .evidence("GPU memory here", gpu_text(&inv.gpus)),
        );
    }
    if peer.ports.is_empty() {
        // The peer's own report judges its node; here the pair is untested. Only a peer without RDMA hardware
        // makes that a skip: hardware there but unusable leaves this link unproven, an error.
        let none = peer.no_ports.clone().unwrap_or(NoPorts {
            status: Status::Error,
            why: "announced no port and no reason".into(),
        });
        let result = if none.status == Status::Skip {
            CheckResult::skip(ID_RDMA, format!("peer {}: {}", peer.node, none.why))
        } else {
            CheckResult::error(
                ID_RDMA,
                format!(
                    "not tested: peer {} cannot test its side ({}: {})",
                    peer.node, none.status, none.why
                ),
            )
            .fix(format!(
                "see fabric-preflight's report on {}: its RDMA hardware is there but unusable",
                peer.node
            ))
        };
        return tally.record(result.subject(format!("{me} <-> {peer_node}")));
    }
    let pairs = inv.ports.len().max(peer.ports.len());
    let pair_subject = |i: usize| {
        let name = |p: Option<&PortInfo>| p.map(PortInfo::name).unwrap_or_else(|| "-".into());
        subject(
            &name(inv.ports.get(i).map(|(p, _)| p)),
            &name(peer.ports.get(i)),
        )
    };
    for i in 0..pairs {
        if let Some(signal) = interrupt::requested() {
            return not_run(
                tally,
                i..pairs,
                &pair_subject,
                &format!("interrupted by {signal}"),
            );
        }
        peer.port_pair = i as u32;
        let result = match (inv.ports.get(i), peer.ports.get(i).cloned()) {
            (Some((mine, target)), Some(theirs)) => {
                tally.begin(
                    CheckResult::error(ID_RDMA, format!("measurement with {}", peer.name()))
                        .subject(pair_subject(i)),
                );
                match measure_in_child(&peer, role, mine, target, &theirs, settings) {
                    Ok(r) => r.subject(pair_subject(i)),
                    Err(stopped) => {
                        // The control channel may be mid-frame: nothing more can be said with this peer.
                        tally.record((*stopped).subject(pair_subject(i)));
                        let why = format!(
                            "the measurement of port pair {i} stopped mid-protocol, so the control channel with {} cannot be trusted",
                            peer.name()
                        );
                        return not_run(tally, i + 1..pairs, &pair_subject, &why);
                    }
                }
            }
            (Some(_), None) => CheckResult::warn(
                ID_RDMA,
                format!(
                    "no counterpart: {} has {} active port(s)",
                    peer.node,
                    peer.ports.len()
                ),
            )
            .subject(pair_subject(i)),
            (None, Some(_)) => CheckResult::warn(
                ID_RDMA,
                format!(
                    "no counterpart: this node has {} active port(s)",
                    inv.ports.len()
                ),
            )
            .subject(pair_subject(i)),
            (None, None) => unreachable!(),
        };
        tally.record(result);
    }
}

/// The port pairs `range` were not measured, and why.
fn not_run(
    tally: &Tally,
    range: std::ops::Range<usize>,
    subject: &dyn Fn(usize) -> String,
    why: &str,
) {
    for i in range {
        tally.record(CheckResult::error(ID_RDMA, format!("not run: {why}")).subject(subject(i)));
    }
}

/// Runs [`measure_pair`] in a child process that inherits the control socket, killed a moment after the
/// deadline. `Err`: the child was killed or crashed (the result says so, naming the call and the peer).
fn measure_in_child(
    peer: &Peer,
    role: Role,
    mine: &PortInfo,
    target: &PortTarget,
    theirs: &PortInfo,
    settings: &Settings,
) -> Result<CheckResult, Box<CheckResult>> {
    let stopped = |summary: String| {
        Box::new(CheckResult::error(
            ID_RDMA,
            format!("measurement with {}: {summary}", peer.name()),
        ))
    };
    let (handoff, socket) = peer.handoff().map_err(|e| {
        stopped(format!(
            "cannot hand the control socket to a child process: {e}"
        ))
    })?;
    let fd = socket.as_raw_fd();
    let job = Job::Measure(Box::new(MeasureJob {
        peer: handoff,
        role,
        mine: mine.clone(),
        target: target.clone(),
        theirs: theirs.clone(),
        settings: settings.clone(),
    }));
    let timeout = settings
        .plan
        .deadline
        .saturating_duration_since(Instant::now())
        + CHILD_GRACE;
    let measured = isolate::run_child(CHILD_SUBCOMMAND, &job, timeout, |cmd| {
        // SAFETY: between fork and exec only fcntl, which is async-signal-safe, on a descriptor this process
        // owns: the duplicate stays open in this child alone.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    });
    drop(socket);
    measured.map_err(|f| {
        let mut r = stopped(f.summary);
        r.evidence.extend(f.evidence);
        if f.interrupted {
            return r;
        }
        Box::new(r.fix(if f.timed_out {
            "a verbs call that does not return is a wedged driver, firmware or device: look at this node's kernel log (dmesg) for the HCA, then reset it or drain the node"
        } else {
            "the verbs library or its provider failed inside the call: check that rdma-core and its provider match the kernel driver, and this node's kernel log"
        }))
    })
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
    r.evidence.insert(0, port_line(mine));
    r.evidence
        .insert(1, format!("{}:{}", peer.node, port_line(theirs)));
    r
}

/// `mlx5_0/1: link layer InfiniBand, rate 400 Gb/s, host memory (why)`: a port of the pair, for the evidence.
fn port_line(p: &PortInfo) -> String {
    format!(
        "{}: link layer {}, rate {}, {} ({})",
        p.name(),
        p.link_layer,
        rate_text(p.rate_gbps),
        p.memory.describe(),
        p.memory.why()
    )
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

/// `--summarize`: every node's ring links together, and the node common to the failing ones; then an error for
/// each report that could not be read (a node killed before writing one), naming what it leaves unknown. Only
/// no readable report at all, or none from a ring, is a usage error.
fn summarize(paths: &[PathBuf]) -> anyhow::Result<Vec<CheckResult>> {
    let mut reports = Vec::new();
    let mut unreadable = Vec::new();
    for path in paths {
        let report = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|text| {
                serde_json::from_str::<RunReport>(&text).map_err(|e| {
                    format!(
                        "{}: not a fabric-preflight JSON report: {e}",
                        path.display()
                    )
                })
            });
        match report {
            Ok(r) => reports.push(r),
            Err(why) => unreadable.push((path, why)),
        }
    }
    if reports.is_empty() {
        let whys: Vec<&str> = unreadable.iter().map(|(_, why)| why.as_str()).collect();
        bail!("no report could be read: {}", whys.join("; "));
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
    let mut results = vec![summary];
    if unreadable.is_empty() {
        return Ok(results);
    }
    let unknown = unknown_parts(&reports);
    for (path, why) in unreadable {
        let mut r = CheckResult::error(
            ID_RING,
            format!("{why}: the ring nodes and links it would have covered are unknown"),
        )
        .subject(path.display().to_string())
        .fix("pass the report that node wrote; a node killed before writing one has none: run `pair --ring` there again");
        r.evidence = unknown.clone();
        results.push(r);
    }
    Ok(results)
}

/// What the readable reports leave unknown, from the ring their `pair.ring` results describe (`ring = a,b,c
/// (rank 1 of 3, …)`): the nodes none of them speaks for, and the links neither of whose ends reported.
fn unknown_parts(reports: &[RunReport]) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    let mut reported = std::collections::BTreeSet::new();
    for line in reports
        .iter()
        .flat_map(|r| &r.checks)
        .filter(|c| c.id == ID_RING)
        .flat_map(|c| &c.evidence)
        .filter_map(|e| e.strip_prefix("ring = "))
    {
        let Some((list, rest)) = line.split_once(" (rank ") else {
            continue;
        };
        let list: Vec<String> = list.split(',').map(str::to_string).collect();
        let rank = rest
            .split_once(" of ")
            .and_then(|(r, _)| r.parse::<usize>().ok());
        if let Some(me) = rank.and_then(|r| list.get(r)) {
            reported.insert(me.clone());
            if nodes.is_empty() {
                nodes = list;
            }
        }
    }
    if nodes.is_empty() {
        return vec!["ring nodes = unknown: no readable report describes the ring".into()];
    }
    let silent: Vec<&str> = nodes
        .iter()
        .filter(|n| !reported.contains(*n))
        .map(String::as_str)
        .collect();
    let mut unseen = std::collections::BTreeSet::new();
    for (i, a) in nodes.iter().enumerate() {
        let b = &nodes[(i + 1) % nodes.len()];
        if a != b && !reported.contains(a) && !reported.contains(b) {
            unseen.insert(if a <= b { (a, b) } else { (b, a) });
        }
    }
    let none = |v: Vec<String>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    vec![
        format!(
            "ring nodes without a readable report = {}",
            none(silent.iter().map(|n| n.to_string()).collect())
        ),
        format!(
            "links no readable report saw (unknown) = {}",
            none(unseen.iter().map(|(a, b)| format!("{a} <-> {b}")).collect())
        ),
    ]
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

    /// An EFA node has no RC port to offer: a skip saying why, before libibverbs is asked (failed before: its
    /// EFA ports were offered, and the efa driver refuses their RC queue pairs).
    #[test]
    fn an_efa_node_has_no_rc_port_to_offer() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/hosts/aws-p5en");
        let host = Host::at(&root).unwrap();
        let inventory = inventory(
            &host,
            &Answers::for_host(&host).unwrap(),
            GpuSource::None("--memory host".into()),
        );
        assert!(inventory.ports.is_empty());
        let (status, why) = inventory.none.unwrap();
        assert_eq!(status, Status::Skip);
        assert!(why.starts_with("EFA has no RC queue pairs"), "{why}");
    }

    /// The watchdog firing between two steps (the handshake recorded, the measurement not yet begun) found
    /// nothing in flight and wrote only the handshake's pass: exit 0 for a link never measured.
    #[test]
    fn the_watchdog_between_two_steps_reports_the_link_unfinished() {
        let tally = Tally::default();
        tally.record(CheckResult::pass(ID_HANDSHAKE, "handshake done"));
        let results = tally.so_far();
        assert_eq!(worst(&results), Status::Error, "{results:?}");
        tally.finished.store(true, Ordering::SeqCst);
        assert_eq!(worst(&tally.so_far()), Status::Pass);
    }

    /// A ring node's serving thread that panics leaves an error naming the step it was in, after what it had
    /// already found.
    #[test]
    fn a_link_thread_that_panics_leaves_a_result_saying_why() {
        let tally = Tally::default();
        tally.record(CheckResult::pass(ID_HANDSHAKE, "handshake done"));
        tally.begin(
            CheckResult::error(ID_RDMA, "measurement with b").subject("a:mlx5_0/1 <-> b:mlx5_0/1"),
        );
        let payload = std::thread::spawn(|| panic!("index out of bounds"))
            .join()
            .unwrap_err();
        tally.panicked("a <-> b", payload.as_ref());
        let results = tally.take();
        assert_eq!(results.len(), 2);
        let r = &results[1];
        assert_eq!((r.status, r.id.as_str()), (Status::Error, ID_RDMA));
        assert_eq!(
            r.summary,
            "the thread testing a <-> b panicked: index out of bounds"
        );
        assert_eq!(r.subject.as_deref(), Some("a:mlx5_0/1 <-> b:mlx5_0/1"));
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
