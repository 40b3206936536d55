//! Accumulator: NCCL records in, a [`Verdict`] and a serialisable [`Summary`] out. Every collection here has
//! a cap, so memory stays flat whatever the input size.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use serde::Serialize;

use super::line::{self, Channel, CommStage, Event, NetFamily, Record, Transport, MAX_LINE_BYTES};
pub use super::outcome::{ErrorOutcome, Failure, FailureKind, RankOutcome, RankState};
use super::outcome::{Outcomes, Slot, MAX_LISTED};
use super::sink::Sink;

/// Ranks and NET device indices kept per transport (bitsets: 32 KiB and 128 bytes at most).
const MAX_RANK: u32 = 1 << 18;
const MAX_DEVICE: u32 = 1024;
const MAX_HOSTS: usize = 4096;
const MAX_TRANSPORTS: usize = 256;
const MAX_WARNINGS: usize = MAX_LISTED;
const MAX_DISTINCT: usize = 64;
/// Longest plugin/transport name kept (names come from the log).
const MAX_NAME_CHARS: usize = 96;

/// What carried the data, decided by the channel (` via `) lines only. The JSON contract (`verdict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every NET channel through an IB-family plugin with GPUDirect RDMA.
    IbGdrdma,
    /// IB family, no channel with GPUDirect RDMA (staged through host memory).
    Ib,
    /// IB, OFI or plugin family, some channels with GPUDirect RDMA and some without.
    PartialGdrdma,
    OfiGdrdma,
    Ofi,
    /// Every NET channel through a plugin that is neither IB/RoCE verbs, libfabric nor sockets (named in
    /// `plugins`), with GPUDirect RDMA.
    PluginGdrdma,
    /// The same, no channel with GPUDirect RDMA.
    Plugin,
    /// Every NET channel over TCP sockets.
    Socket,
    /// Some NET channels over sockets, others over IB/OFI/plugin: usually one bad node.
    MixedSocket,
    /// Channel lines, none through NET (single node, P2P/SHM only).
    IntraNodeOnly,
    /// No channel lines at all: the log does not show the data path.
    Undetermined,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::IbGdrdma => "ib-gdrdma",
            Verdict::Ib => "ib",
            Verdict::PartialGdrdma => "partial-gdrdma",
            Verdict::OfiGdrdma => "ofi-gdrdma",
            Verdict::Ofi => "ofi",
            Verdict::PluginGdrdma => "plugin-gdrdma",
            Verdict::Plugin => "plugin",
            Verdict::Socket => "socket",
            Verdict::MixedSocket => "mixed-socket",
            Verdict::IntraNodeOnly => "intra-node-only",
            Verdict::Undetermined => "undetermined",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Transport families in the per-transport counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Ib,
    Ofi,
    Socket,
    Plugin,
    P2p,
    Shm,
    Other,
}

impl From<NetFamily> for Family {
    fn from(f: NetFamily) -> Self {
        match f {
            NetFamily::Ib => Family::Ib,
            NetFamily::Ofi => Family::Ofi,
            NetFamily::Socket => Family::Socket,
            NetFamily::Plugin => Family::Plugin,
        }
    }
}

/// Channel lines of one transport (`NET/IB/GDRDMA`, `NET/Socket`, `P2P/CUMEM`, `SHM`, …).
#[derive(Debug, Clone, Serialize)]
pub struct TransportTally {
    pub transport: String,
    pub family: Family,
    /// Goes through a NET (or COLLNET) plugin, i.e. a NIC.
    pub net: bool,
    pub gdrdma: bool,
    pub channels: u64,
    /// Ranks whose process printed these lines (the local side of each connection).
    pub ranks: BTreeSet<u32>,
    pub hosts: BTreeSet<String>,
    /// NET device indices (`NET/IB/<dev>`): indexes into the plugin's device list, not PCI addresses.
    pub devices: BTreeSet<u32>,
    /// `file:line` of the first such line.
    pub first_seen: String,
}

/// What a channel line went through, as the tally key: class, plugin or P2P kind, GDRDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Net,
    CollNet,
    P2p,
    Shm,
    Other,
}

/// A tally while reading: bitsets and a hash set, so a channel line costs no allocation and no tree walk.
#[derive(Debug)]
struct Tally {
    class: Class,
    name: String,
    gdrdma: bool,
    family: Family,
    channels: u64,
    ranks: Bits,
    hosts: HashSet<String, BuildHasherDefault<Fx>>,
    devices: Bits,
    first_seen: String,
}

/// A multiply-rotate hash (FxHash's) for the per-channel-line host lookup, eight bytes at a time: host names
/// are a few bytes, where SipHash's setup, and FNV's byte-at-a-time chain, cost more than the lookup. Not
/// DoS-resistant, which the cap on hosts per tally (MAX_HOSTS) bounds.
#[derive(Default)]
struct Fx(u64);

impl Fx {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for Fx {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in chunks.by_ref() {
            self.add(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut word = [0u8; 8];
            word[..tail.len()].copy_from_slice(tail);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Tally {
    fn key(&self) -> String {
        let mut key = match self.class {
            Class::Net => format!("NET/{}", self.name),
            Class::CollNet => format!("COLLNET/{}", self.name),
            Class::P2p => format!("P2P/{}", self.name),
            Class::Shm => "SHM".to_string(),
            Class::Other => "other".to_string(),
        };
        if self.gdrdma {
            key.push_str("/GDRDMA");
        }
        key
    }

    fn into_public(self) -> TransportTally {
        TransportTally {
            transport: self.key(),
            family: self.family,
            net: matches!(self.class, Class::Net | Class::CollNet),
            gdrdma: self.gdrdma,
            channels: self.channels,
            ranks: self.ranks.iter().collect(),
            hosts: self.hosts.into_iter().collect(),
            devices: self.devices.iter().collect(),
            first_seen: self.first_seen,
        }
    }
}

/// A set of small integers below a fixed limit.
#[derive(Debug, Default)]
struct Bits(Vec<u64>);

impl Bits {
    /// Values at or above `limit` are not kept (they come from damaged lines; the limit bounds memory).
    fn insert(&mut self, value: u32, limit: u32) {
        if value >= limit {
            return;
        }
        let word = (value / 64) as usize;
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (value % 64);
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(w, bits)| {
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| (w * 64 + b) as u32)
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Warning {
    pub source: String,
    pub line: u64,
    pub host: Option<String>,
    /// `transport/net_ib.cc:1345` as compiled (plugins may put a function signature here).
    pub location: Option<String>,
    pub message: String,
}

/// A distinct message and how often it appeared.
#[derive(Debug, Clone, Serialize)]
pub struct Reason {
    pub text: String,
    pub count: u64,
    pub first_seen: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct NetChannels {
    pub total: u64,
    pub gdrdma: u64,
    pub without_gdrdma: u64,
    pub ib: u64,
    pub ofi: u64,
    pub socket: u64,
    pub plugin: u64,
}

impl NetChannels {
    /// The family the verdict names: any unknown plugin first (never call IB what may not be), then OFI
    /// when no IB-family channel, else IB.
    pub fn family(&self) -> NetFamily {
        if self.plugin > 0 {
            NetFamily::Plugin
        } else if self.ofi > 0 && self.ib == 0 {
            NetFamily::Ofi
        } else {
            NetFamily::Ib
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct InputStats {
    pub files: Vec<String>,
    pub bytes: u64,
    pub lines: u64,
    /// NCCL records parsed (INFO and WARN messages, version lines).
    pub nccl_records: u64,
    /// Lines longer than the per-line limit, of which only the start was read.
    pub long_lines_cut: u64,
    /// Paths naming a file already read under another name (`nccl LOG ./LOG`): not read twice.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repeated: Vec<String>,
}

impl InputStats {
    /// A log read (the first 64 names listed).
    pub(super) fn add_file(&mut self, name: &str) {
        push_distinct(&mut self.files, name);
    }
}

/// The analysis of one job's logs. Field names are the JSON contract of `fabric-preflight nccl --format json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub verdict: Verdict,
    /// NET plugins of no known family (GPUDirect-TCPX, vendors' own) that carried channels: `plugin` and
    /// `plugin-gdrdma` name them.
    pub plugins: Vec<String>,
    /// The first NCCL version seen (`2.28.9+cuda13.0`).
    pub nccl_version: Option<String>,
    /// Every distinct version: several builds can share a job (PyTorch bundles its own libnccl).
    pub nccl_versions: Vec<String>,
    /// What NCCL chose (`Using network …`, `Assigned NET plugin … to comm`), distinct, in order seen.
    pub network_selected: Vec<String>,
    pub net_plugins_loaded: Vec<String>,
    pub net_plugins_failed: Vec<String>,
    /// NET transports that reported `No device found`.
    pub no_device: Vec<String>,
    /// `IB: [0]mlx5_0:1/IB …`, `Socket: [0]ib0:…`: devices each NET transport initialised with.
    pub net_devices: Vec<String>,
    /// Out-of-band bootstrap interfaces (never the data path).
    pub bootstrap: Vec<String>,
    pub ofi_providers: Vec<String>,
    pub ofi_refused: Vec<String>,
    /// Instance types aws-ofi-nccl named (`Running on p5.48xlarge platform`, `GDR disabled on GDR-supported
    /// instance type …`).
    pub ofi_platforms: Vec<String>,
    /// `Support for DMA-BUF registrations: true|false`, the distinct answers (false: the peer-memory path).
    pub ofi_dmabuf: Vec<bool>,
    /// aws-ofi-nccl turning GPUDirect RDMA off, with counts: no channel can then carry `/GDRDMA`.
    pub ofi_gdr_disabled: Vec<Reason>,
    /// `OFI fi_getinfo() call failed: …`: libfabric offered no usable provider.
    pub ofi_getinfo_failed: Vec<Reason>,
    /// Largest `nNodes` of any communicator (2.20+).
    pub nnodes: Option<u32>,
    pub transports: Vec<TransportTally>,
    pub net_channels: NetChannels,
    pub ranks_without_gdrdma: Vec<u32>,
    pub hosts_without_gdrdma: Vec<String>,
    pub devices_without_gdrdma: Vec<u32>,
    pub ranks_on_socket: Vec<u32>,
    pub hosts_on_socket: Vec<String>,
    /// `Connected all rings, use ring PXN … GDR 0` lines.
    pub rings_without_gdr: u64,
    pub gdr_disabled: Vec<Reason>,
    /// The fatal failures (WARN, error return codes, completion errors, error names, aborts) by the
    /// recovered-vs-fatal rule (`outcome.rs`, README): any one makes `--expect` not met. A chain of
    /// return-code lines from one process counts once. Up to 200 listed, `errors_total` counts all.
    pub errors: Vec<Failure>,
    pub errors_total: u64,
    /// Failures the same process's init completed after: NCCL carried on. Shown; they do not fail.
    pub recovered_errors: Vec<Failure>,
    pub recovered_errors_total: u64,
    /// Failures whose outcome the logs cannot show (no init line anywhere): the judgement is undetermined.
    pub unknown_errors: Vec<Failure>,
    pub unknown_errors_total: u64,
    /// Every process that printed an init line or a failure: its ranks, communicators and outcome.
    pub ranks: Vec<RankOutcome>,
    /// The first NCCL WARN lines (see `warnings_total`).
    pub warnings: Vec<Warning>,
    pub warnings_total: u64,
    /// Why the verdict is what it is, and what the log cannot show.
    pub notes: Vec<String>,
    pub input: InputStats,
}

impl Summary {
    /// The verdict with the plugins it stands for: `plugin-gdrdma (GPUDirectTCPX)`.
    pub fn verdict_named(&self) -> String {
        match self.verdict {
            Verdict::Plugin | Verdict::PluginGdrdma if !self.plugins.is_empty() => {
                format!("{} ({})", self.verdict, self.plugins.join(", "))
            }
            v => v.to_string(),
        }
    }
}

/// The NCCL log summary: a [`Sink`] of the reader's records; [`Analyzer::finish`] gives the summary.
#[derive(Debug, Default)]
pub struct Analyzer {
    source: String,
    versions: Vec<String>,
    selected: Vec<String>,
    loaded: Vec<String>,
    failed: Vec<String>,
    no_device: Vec<String>,
    net_devices: Vec<String>,
    bootstrap: Vec<String>,
    ofi_providers: Vec<String>,
    ofi_refused: Vec<String>,
    ofi_platforms: Vec<String>,
    ofi_dmabuf: Vec<bool>,
    ofi_gdr_disabled: Vec<Reason>,
    ofi_getinfo_failed: Vec<Reason>,
    nnodes: Option<u32>,
    transports: Vec<Tally>,
    channels_not_tallied: u64,
    gdr_disabled: Vec<Reason>,
    warnings: Vec<Warning>,
    warnings_total: u64,
    outcomes: Outcomes,
    /// The return-code chain being traced (pid, code, where its failure sits): its next frames join it.
    open_chain: Option<(Option<u32>, u32, Slot)>,
    rings_without_gdr: u64,
    ray_repeats: bool,
}

impl Analyzer {
    pub fn new() -> Self {
        Self::default()
    }

    /// One parsed record (public for the fuzz target and for callers that split lines themselves).
    pub fn record(&mut self, line_no: u64, r: Record<'_>) {
        // A chain's frames follow one another: any other line of its process ends it.
        if let Some((pid, ..)) = self.open_chain {
            if pid == r.pid && !matches!(r.event, Event::ErrorReturn { .. }) {
                self.open_chain = None;
            }
        }
        if r.repeat > 1 {
            self.ray_repeats = true;
        }
        // Channel and topology records (most of a log's) here; the rest out of line, whose frame cost every
        // channel record when it was one function.
        match r.event {
            Event::Channel(c) => self.channel(line_no, r.host, r.repeat, &c),
            Event::Graph => {}
            _ => self.other_record(line_no, r),
        }
    }

    #[inline(never)]
    fn other_record(&mut self, line_no: u64, r: Record<'_>) {
        match r.event {
            Event::Version(v) => push_distinct(&mut self.versions, v),
            Event::NetSelected(n) => push_distinct(&mut self.selected, n),
            Event::NetPluginLoaded(n) => push_distinct(&mut self.loaded, n),
            Event::NetPluginFailed(n) => push_distinct(&mut self.failed, n),
            Event::NoDevice(n) => push_distinct(&mut self.no_device, n),
            Event::NetDevices { net, devices } => {
                // Printed once per process: compare before formatting (no allocation for repeats).
                let devices = if devices.is_empty() {
                    "<none>"
                } else {
                    devices
                };
                let seen = self.net_devices.iter().any(|d| {
                    d.strip_prefix(net)
                        .and_then(|r| r.strip_prefix(": "))
                        .is_some_and(|r| r == devices)
                });
                if !seen {
                    push_distinct(&mut self.net_devices, &format!("{net}: {devices}"));
                }
            }
            Event::Bootstrap(b) => push_distinct(&mut self.bootstrap, b),
            Event::OfiProvider(p) => push_distinct(&mut self.ofi_providers, p),
            Event::OfiRefused(m) => push_distinct(&mut self.ofi_refused, m),
            e @ (Event::OfiDmabuf(_)
            | Event::OfiGdrOff { .. }
            | Event::OfiGetinfoFailed(_)
            | Event::OfiPlatform(_)) => self.ofi_fact(line_no, r.repeat, &e),
            Event::GdrDisabled(text) => {
                let at = self.at(line_no);
                tally_reason(&mut self.gdr_disabled, text, r.repeat, at);
            }
            Event::RingPxnGdr { gdr, .. } => {
                if !gdr {
                    self.rings_without_gdr += u64::from(r.repeat);
                }
            }
            Event::CommLifecycle {
                comm,
                rank,
                nranks,
                stage,
            } => {
                self.open_chain = None;
                let at = self.at(line_no);
                if let (Some(host), Some(pid)) = (r.host, r.pid) {
                    self.outcomes.lifecycle(host, pid, comm, rank, stage, &at);
                } else {
                    self.outcomes.init_lines += 1;
                }
                if stage == CommStage::AbortComplete {
                    let message =
                        format!("comm {comm} rank {rank} nranks {nranks} - Abort COMPLETE");
                    self.failure(line_no, &r, FailureKind::Abort, None, &message);
                }
            }
            Event::CommTopology { nnodes, .. } => {
                self.nnodes = Some(self.nnodes.map_or(nnodes, |n| n.max(nnodes)));
            }
            Event::ErrorReturn { location, code } => self.error_return(line_no, &r, location, code),
            Event::CompletionError(message) => {
                self.failure(line_no, &r, FailureKind::Completion, None, message);
            }
            Event::NcclError(message) => {
                self.failure(line_no, &r, FailureKind::NcclError, None, message);
            }
            Event::Warn { location, message } => {
                let kind = if message.contains("Got completion") {
                    FailureKind::Completion
                } else {
                    FailureKind::Warn
                };
                self.failure(line_no, &r, kind, location, message);
                self.warnings_total += u64::from(r.repeat);
                if let Some(rest) = message.strip_prefix("NET/OFI ") {
                    self.ofi_fact(line_no, r.repeat, &line::classify_ofi(rest));
                }
                if line::is_ofi_refusal(message) {
                    push_distinct(
                        &mut self.ofi_refused,
                        message.trim_start_matches("NET/OFI "),
                    );
                }
                if self.warnings.len() < MAX_WARNINGS {
                    self.warnings.push(Warning {
                        source: self.source.clone(),
                        line: line_no,
                        host: r.host.map(str::to_string),
                        location: location.map(str::to_string),
                        message: message.to_string(),
                    });
                }
            }
            // `record` takes channel and topology records before this; tallied the same if they came here.
            Event::Channel(c) => self.channel(line_no, r.host, r.repeat, &c),
            Event::NetPluginInitialized(_) | Event::GdrEnabled | Event::Graph | Event::Other => {}
        }
    }

    /// What aws-ofi-nccl says about GDR and the platform (INFO or WARN); other events are ignored.
    fn ofi_fact(&mut self, line_no: u64, repeat: u32, event: &Event<'_>) {
        match *event {
            Event::OfiDmabuf(supported) if !self.ofi_dmabuf.contains(&supported) => {
                self.ofi_dmabuf.push(supported);
            }
            Event::OfiGdrOff { reason, instance } => {
                if let Some(i) = instance {
                    push_distinct(&mut self.ofi_platforms, i);
                }
                let at = self.at(line_no);
                tally_reason(&mut self.ofi_gdr_disabled, reason, repeat, at);
            }
            Event::OfiGetinfoFailed(reason) => {
                let at = self.at(line_no);
                tally_reason(&mut self.ofi_getinfo_failed, reason, repeat, at);
            }
            Event::OfiPlatform(instance) => push_distinct(&mut self.ofi_platforms, instance),
            _ => {}
        }
    }

    fn failure(
        &mut self,
        line_no: u64,
        r: &Record<'_>,
        kind: FailureKind,
        location: Option<&str>,
        message: &str,
    ) -> Slot {
        self.open_chain = None;
        let failure = Failure {
            kind,
            source: self.source.clone(),
            line: line_no,
            host: r.host.map(str::to_string),
            pid: r.pid,
            rank: None,
            location: location.map(|l| truncate_chars(l, MAX_NAME_CHARS * 4).to_string()),
            message: truncate_chars(message, MAX_NAME_CHARS * 4).to_string(),
            outcome: ErrorOutcome::Fatal,
            why: String::new(),
            seq: 0,
        };
        self.outcomes.failure(failure, u64::from(r.repeat))
    }

    /// One frame of a return-code chain: the first frame (where the error arose) is a failure, the frames
    /// after it from the same process with the same code are appended to it.
    fn error_return(&mut self, line_no: u64, r: &Record<'_>, location: &str, code: u32) {
        if let Some((pid, open_code, slot)) = self.open_chain {
            if pid == r.pid && open_code == code {
                if let Some(f) = self.outcomes.get_mut(slot) {
                    if f.message.len() < MAX_NAME_CHARS * 4 {
                        f.message.push_str(" <- ");
                        f.message.push_str(truncate_chars(location, MAX_NAME_CHARS));
                    }
                }
                return;
            }
        }
        let message = format!("returned {code} ({})", line::result_name(code));
        let slot = self.failure(
            line_no,
            r,
            FailureKind::ReturnCode,
            Some(location),
            &message,
        );
        self.open_chain = Some((r.pid, code, slot));
    }

    fn at(&self, line_no: u64) -> String {
        format!("{}:{line_no}", self.source)
    }

    fn channel(&mut self, line_no: u64, host: Option<&str>, repeat: u32, c: &Channel<'_>) {
        let (class, name, gdrdma) = match &c.transport {
            Transport::Net {
                collnet,
                plugin,
                gdrdma,
                ..
            } => {
                let class = if *collnet { Class::CollNet } else { Class::Net };
                (class, truncate_chars(plugin, MAX_NAME_CHARS), *gdrdma)
            }
            Transport::P2p(kind) => (Class::P2p, truncate_chars(kind, MAX_NAME_CHARS), false),
            Transport::Shm => (Class::Shm, "", false),
            Transport::Other(_) => (Class::Other, "", false),
        };
        let found = self
            .transports
            .iter()
            .position(|t| t.class == class && t.gdrdma == gdrdma && same_name(&t.name, name));
        let index = match found {
            Some(i) => i,
            None if self.transports.len() >= MAX_TRANSPORTS => {
                self.channels_not_tallied += u64::from(repeat);
                return;
            }
            None => {
                // The family follows from the name (part of the key): worked out once per tally, not per line.
                let family = match class {
                    Class::Net | Class::CollNet => Family::from(NetFamily::of(name)),
                    Class::P2p => Family::P2p,
                    Class::Shm => Family::Shm,
                    Class::Other => Family::Other,
                };
                let first_seen = self.at(line_no);
                self.transports.push(Tally {
                    class,
                    name: name.to_string(),
                    gdrdma,
                    family,
                    channels: 0,
                    ranks: Bits::default(),
                    hosts: HashSet::default(),
                    devices: Bits::default(),
                    first_seen,
                });
                self.transports.len() - 1
            }
        };
        let tally = &mut self.transports[index];
        tally.channels += u64::from(repeat);
        if let Some(rank) = c.local_rank() {
            tally.ranks.insert(rank, MAX_RANK);
        }
        if let Some(h) = host.filter(|h| !h.is_empty()) {
            if tally.hosts.len() < MAX_HOSTS && !tally.hosts.contains(h) {
                tally
                    .hosts
                    .insert(truncate_chars(h, MAX_NAME_CHARS).to_string());
            }
        }
        if let Transport::Net { dev, .. } = c.transport {
            tally.devices.insert(dev, MAX_DEVICE);
        }
    }

    /// The summary of the records taken in, with `input`, what the reader read.
    pub fn finish(mut self, input: InputStats) -> Summary {
        let mut tallies: Vec<TransportTally> = std::mem::take(&mut self.transports)
            .into_iter()
            .map(Tally::into_public)
            .collect();
        tallies.sort_by(|a, b| a.transport.cmp(&b.transport));
        let net_tallies = || tallies.iter().filter(|t| t.net);
        let mut counts = NetChannels::default();
        for t in net_tallies() {
            counts.total += t.channels;
            match t.family {
                Family::Socket => counts.socket += t.channels,
                Family::Ofi => counts.ofi += t.channels,
                Family::Plugin => counts.plugin += t.channels,
                _ => counts.ib += t.channels,
            }
            if t.family != Family::Socket {
                if t.gdrdma {
                    counts.gdrdma += t.channels;
                } else {
                    counts.without_gdrdma += t.channels;
                }
            }
        }
        let family = counts.family();
        let rejected: u64 = tallies
            .iter()
            .filter(|t| t.family == Family::Other)
            .map(|t| t.channels)
            .sum();
        // Lines whose transport was rejected prove nothing: with no other channel line, nothing was shown.
        let verdict = if tallies.iter().all(|t| t.family == Family::Other) {
            Verdict::Undetermined
        } else if counts.total == 0 {
            Verdict::IntraNodeOnly
        } else if counts.socket == counts.total {
            Verdict::Socket
        } else if counts.socket > 0 {
            Verdict::MixedSocket
        } else if counts.without_gdrdma == 0 {
            match family {
                NetFamily::Ofi => Verdict::OfiGdrdma,
                NetFamily::Plugin => Verdict::PluginGdrdma,
                _ => Verdict::IbGdrdma,
            }
        } else if counts.gdrdma == 0 {
            match family {
                NetFamily::Ofi => Verdict::Ofi,
                NetFamily::Plugin => Verdict::Plugin,
                _ => Verdict::Ib,
            }
        } else {
            Verdict::PartialGdrdma
        };
        let plugins = net_tallies().filter(|t| t.family == Family::Plugin).fold(
            Vec::new(),
            |mut names, t| {
                let name = t
                    .transport
                    .trim_start_matches("NET/")
                    .trim_start_matches("COLLNET/");
                push_distinct(&mut names, name.trim_end_matches("/GDRDMA"));
                names
            },
        );

        let without_gdr = || net_tallies().filter(|t| t.family != Family::Socket && !t.gdrdma);
        let on_socket = || net_tallies().filter(|t| t.family == Family::Socket);
        let ranks_without_gdrdma = union(without_gdr().map(|t| &t.ranks));
        let hosts_without_gdrdma = union(without_gdr().map(|t| &t.hosts));
        let devices_without_gdrdma = union(without_gdr().map(|t| &t.devices));
        let ranks_on_socket = union(on_socket().map(|t| &t.ranks));
        let hosts_on_socket = union(on_socket().map(|t| &t.hosts));

        let ranks = self.outcomes.finish(self.init_lines_printed());
        let notes = self.notes(verdict, &counts, rejected, &input);
        Summary {
            verdict,
            plugins,
            nccl_version: self.versions.first().cloned(),
            nccl_versions: self.versions,
            network_selected: self.selected,
            net_plugins_loaded: self.loaded,
            net_plugins_failed: self.failed,
            no_device: self.no_device,
            net_devices: self.net_devices,
            bootstrap: self.bootstrap,
            ofi_providers: self.ofi_providers,
            ofi_refused: self.ofi_refused,
            ofi_platforms: self.ofi_platforms,
            ofi_dmabuf: self.ofi_dmabuf,
            ofi_gdr_disabled: self.ofi_gdr_disabled,
            ofi_getinfo_failed: self.ofi_getinfo_failed,
            nnodes: self.nnodes,
            transports: tallies,
            net_channels: counts,
            ranks_without_gdrdma,
            hosts_without_gdrdma,
            devices_without_gdrdma,
            ranks_on_socket,
            hosts_on_socket,
            rings_without_gdr: self.rings_without_gdr,
            gdr_disabled: self.gdr_disabled,
            errors: std::mem::take(&mut self.outcomes.fatal),
            errors_total: self.outcomes.fatal_total,
            recovered_errors: std::mem::take(&mut self.outcomes.recovered),
            recovered_errors_total: self.outcomes.recovered_total,
            unknown_errors: std::mem::take(&mut self.outcomes.unknown),
            unknown_errors_total: self.outcomes.unknown_total,
            ranks,
            warnings: self.warnings,
            warnings_total: self.warnings_total,
            notes,
            input,
        }
    }

    /// Whether these logs prove that their NCCL prints init lines: one was seen, or every version named is
    /// 2.4 or later (the first to print `Init COMPLETE`).
    fn init_lines_printed(&self) -> bool {
        let prints = |v: &String| {
            let mut parts = v.split(['.', '+']).map(|p| p.parse::<u32>().ok());
            matches!((parts.next(), parts.next()), (Some(Some(major)), Some(Some(minor))) if (major, minor) >= (2, 4))
        };
        self.outcomes.init_lines > 0
            || (!self.versions.is_empty() && self.versions.iter().all(prints))
    }

    fn notes(
        &self,
        verdict: Verdict,
        counts: &NetChannels,
        rejected: u64,
        input: &InputStats,
    ) -> Vec<String> {
        let mut notes = Vec::new();
        if rejected > 0 {
            notes.push(format!(
                "{rejected} channel line(s) with a transport cut or glued mid-path (torn lines), or of an unknown \
                 shape: rejected, not counted as any transport (listed as `other`)"
            ));
        }
        let selected = if self.selected.is_empty() {
            "no selection line".to_string()
        } else {
            self.selected.join(", ")
        };
        match verdict {
            Verdict::Undetermined => notes.push(format!(
                "no channel (` via `) line{}: the log shows what NCCL selected ({selected}), not what carried data; \
                 capture a run that completes a collective across nodes (NCCL 2.22+ connects lazily, at the first collective)",
                if rejected > 0 { " whose transport could be read" } else { "" }
            )),
            Verdict::IntraNodeOnly => notes.push(format!(
                "channel lines use P2P/SHM only: no network traffic to judge (selected: {selected})"
            )),
            _ => {}
        }
        if counts.total > 0 && self.nnodes == Some(1) {
            notes.push(
                "NET channels within one node (nNodes 1): P2P/SHM disabled or unavailable; judged like inter-node traffic"
                    .into(),
            );
        }
        let families: Vec<&str> = [
            (counts.ib, "IB"),
            (counts.ofi, "OFI"),
            (counts.plugin, "plugin"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(_, name)| *name)
        .collect();
        if families.len() > 1 {
            notes.push(format!(
                "NET channels through several families ({}): the verdict names the {} family",
                families.join(", "),
                counts.family().as_str()
            ));
        }
        if self.no_device.iter().any(|n| n == "IB") && counts.ib == 0 {
            notes.push("NET/IB found no device: no usable RDMA port (none present, all down, filtered by NCCL_IB_HCA, or /dev/infiniband missing in the container)".into());
        }
        if !self.ofi_refused.is_empty() {
            notes.push(format!(
                "the OFI plugin refused its provider ({}); NCCL fell back (selected: {selected})",
                self.ofi_refused.join("; ")
            ));
        }
        if !self.ofi_gdr_disabled.is_empty() {
            let reasons: Vec<&str> = self
                .ofi_gdr_disabled
                .iter()
                .map(|r| r.text.as_str())
                .collect();
            notes.push(format!(
                "aws-ofi-nccl turned GPUDirect RDMA off ({}): its channels cannot carry /GDRDMA",
                reasons.join("; ")
            ));
        }
        if !self.ofi_getinfo_failed.is_empty() {
            notes.push(format!(
                "aws-ofi-nccl found no usable libfabric provider ({}): check the efa provider (`fi_info -p efa`)",
                self.ofi_getinfo_failed[0].text
            ));
        }
        if self.ofi_dmabuf == [false] && counts.ofi > 0 {
            notes.push("aws-ofi-nccl registers GPU memory without DMA-BUF (`Support for DMA-BUF registrations: false`): GDR needs the peer-memory path there (efa_nv_peermem or the amzn driver's)".into());
        }
        if self.rings_without_gdr > 0 {
            notes.push(format!(
                "{} `Connected all rings … GDR 0` line(s): at least one ring connection without GPUDirect RDMA",
                self.rings_without_gdr
            ));
        }
        if self.ray_repeats {
            notes.push("Ray folded repeated lines ([repeated Nx across cluster]): channel counts include the repeats, ranks per transport may be incomplete (RAY_DEDUP_LOGS=0 disables folding)".into());
        }
        if self.versions.len() > 1 {
            notes.push(format!(
                "several NCCL builds in these logs: {} (PyTorch wheels bundle their own libnccl)",
                self.versions.join(", ")
            ));
        }
        if self.channels_not_tallied > 0 {
            notes.push(format!(
                "more than {MAX_TRANSPORTS} distinct transports: {} channel line(s) not tallied",
                self.channels_not_tallied
            ));
        }
        if input.long_lines_cut > 0 {
            notes.push(format!(
                "{} line(s) longer than {MAX_LINE_BYTES} bytes: only their start was read",
                input.long_lines_cut
            ));
        }
        if !input.repeated.is_empty() {
            notes.push(format!(
                "{} name(s) a file already read under another name: read once",
                input.repeated.join(", ")
            ));
        }
        notes
    }
}

impl Sink for Analyzer {
    fn begin(&mut self, source: &str) {
        self.source = source.to_string();
    }

    /// All while an error chain is open (any other line of its process closes it), otherwise only those
    /// whose event is tallied per process.
    fn ids(&self) -> line::Ids {
        if self.open_chain.is_some() {
            line::Ids::Always
        } else {
            line::Ids::WhereUsed
        }
    }

    #[inline(always)]
    fn record(&mut self, line_no: u64, record: Record<'_>) {
        Analyzer::record(self, line_no, record);
    }
}

/// `a == b` for a transport's name (`IB`, `CUMEM`): compared byte by byte when short, where the general
/// comparison called `bcmp` for a few bytes on every channel line.
#[inline]
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && if a.len() <= 8 {
            a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
        } else {
            a == b
        }
}

fn push_distinct(list: &mut Vec<String>, item: &str) {
    let item = truncate_chars(item, MAX_NAME_CHARS * 4);
    if list.len() < MAX_DISTINCT && !list.iter().any(|i| i == item) {
        list.push(item.to_string());
    }
}

fn tally_reason(list: &mut Vec<Reason>, text: &str, repeat: u32, at: String) {
    let text = truncate_chars(text, MAX_NAME_CHARS * 4);
    if let Some(r) = list.iter_mut().find(|r| r.text == text) {
        r.count += u64::from(repeat);
    } else if list.len() < MAX_DISTINCT {
        list.push(Reason {
            text: text.to_string(),
            count: u64::from(repeat),
            first_seen: at,
        });
    }
}

#[inline]
fn truncate_chars(s: &str, max: usize) -> &str {
    // No more bytes than `max`: no more chars either (the usual case, without walking the chars).
    if s.len() <= max {
        return s;
    }
    match s.char_indices().nth(max) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

fn union<'a, T: Ord + Clone + 'a>(sets: impl Iterator<Item = &'a BTreeSet<T>>) -> Vec<T> {
    let mut all = BTreeSet::new();
    for s in sets {
        all.extend(s.iter().cloned());
    }
    all.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::analyze_text as analyze;
    use crate::nccl::test_lines::*;

    #[test]
    fn verdict_follows_channel_lines() {
        assert_eq!(analyze(IB_GDR).verdict, Verdict::IbGdrdma);
        assert_eq!(analyze(IB_NO_GDR).verdict, Verdict::Ib);
        assert_eq!(
            analyze(&format!("{IB_GDR}{IB_NO_GDR}")).verdict,
            Verdict::PartialGdrdma
        );
        assert_eq!(analyze(SOCKET).verdict, Verdict::Socket);
        assert_eq!(
            analyze(&format!("{IB_GDR}{SOCKET}")).verdict,
            Verdict::MixedSocket
        );
        assert_eq!(analyze(P2P).verdict, Verdict::IntraNodeOnly);
        assert_eq!(analyze("hello\n").verdict, Verdict::Undetermined);
    }

    #[test]
    fn partial_names_ranks_hosts_and_devices_without_gdr() {
        let s = analyze(&format!("{IB_GDR}{IB_NO_GDR}"));
        assert_eq!(s.ranks_without_gdrdma, vec![8]);
        assert_eq!(s.hosts_without_gdrdma, vec!["gpu-a02".to_string()]);
        assert_eq!(s.devices_without_gdrdma, vec![1]);
    }

    #[test]
    fn caps_keep_memory_flat() {
        let mut text = String::new();
        for i in 0..(MAX_TRANSPORTS + 10) {
            text.push_str(&format!(
                "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/plugin{i}/0\n"
            ));
        }
        for i in 0..(MAX_WARNINGS + 10) {
            text.push_str(&format!("h:1:2 [0] f.cc:{i} NCCL WARN w{i}\n"));
        }
        let s = analyze(&text);
        assert_eq!(s.transports.len(), MAX_TRANSPORTS);
        assert_eq!(s.warnings.len(), MAX_WARNINGS);
        assert_eq!(s.warnings_total, (MAX_WARNINGS + 10) as u64);
        assert!(s.notes.iter().any(|n| n.contains("not tallied")));
    }
}
