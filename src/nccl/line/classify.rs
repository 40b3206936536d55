//! Classification: the text after `NCCL INFO` / `NCCL WARN` → an [`Event`]. Channel lines go to the
//! [`channel`](super::channel) grammar.

use std::sync::LazyLock;

use memchr::memmem::Finder;

use super::channel::parse_channel;
use super::framing::version_token;
use super::record::{CommStage, Event};
use super::text::{leading_number, spaced_colon, split_byte, trim, trim_end, trim_spaced, Words};

/// Searchers built once: building one per call cost more than the search on short lines.
pub(super) static VIA: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b" via "));
static GDR_DISABLED: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"GPU Direct RDMA Disabled"));
static COMM: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b" comm 0x"));
static GDR_ENABLED: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"GPU Direct RDMA Enabled"));
static GDR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"GPU Direct RDMA "));

pub(super) fn has(finder: &Finder<'_>, s: &str) -> bool {
    finder.find(s.as_bytes()).is_some()
}

/// Classifies the text after `NCCL INFO `.
pub fn classify(msg: &str) -> Event<'_> {
    classify_at(msg, VIA.find(msg.as_bytes()))
}

/// [`classify`] given where the first ` via ` in `msg` is.
pub(super) fn classify_at(msg: &str, via: Option<usize>) -> Event<'_> {
    if let Some(via) = via {
        // A ` via ` line that is not a well-formed connection is not topology either.
        return parse_channel(msg, via).map_or(Event::Other, Event::Channel);
    }
    // The prefixed forms are told apart by their first byte: a message is compared only with those that
    // could match (this runs for every INFO line; most are channel or topology lines matching none).
    match msg.as_bytes().first() {
        Some(b'N') => {
            if let Some(rest) = msg.strip_prefix("NCCL version ") {
                return version_token(rest).map_or(Event::Other, Event::Version);
            }
            if msg.starts_with("NET/Plugin") {
                if let Some(at) = msg.find("Loaded net plugin ") {
                    let rest = &msg[at + "Loaded net plugin ".len()..];
                    // `AWS Libfabric (v6)`: the version in parentheses is not part of the name.
                    let name = rest.rfind(" (").map_or(rest, |p| &rest[..p]);
                    return net_name(name).map_or(Event::Other, Event::NetPluginLoaded);
                }
                return Event::Other;
            }
            if let Some(rest) = msg.strip_prefix("NET/OFI ") {
                return classify_ofi(rest);
            }
            if let Some(rest) = msg.strip_prefix("NET/") {
                return classify_net_line(msg, rest);
            }
        }
        Some(b'U') => {
            if let Some(name) = msg
                .strip_prefix("Using network ")
                .or_else(|| msg.strip_prefix("Using internal Network "))
                .or_else(|| msg.strip_prefix("Using external Network "))
            {
                return net_name(name).map_or(Event::Other, Event::NetSelected);
            }
        }
        Some(b'A') => {
            if let Some(rest) = msg.strip_prefix("Assigned NET plugin ") {
                let name = rest.strip_suffix(" to comm").unwrap_or(rest);
                return net_name(name).map_or(Event::Other, Event::NetSelected);
            }
        }
        Some(b'I') => {
            if let Some(name) = msg.strip_prefix("Initialized NET plugin ") {
                return net_name(name).map_or(Event::Other, Event::NetPluginInitialized);
            }
        }
        Some(b'F') => {
            if let Some(name) = msg.strip_prefix("Failed to initialize NET plugin ") {
                return net_name(name).map_or(Event::Other, Event::NetPluginFailed);
            }
        }
        _ => {}
    }
    // Topology dumps are most of what is left, and no other message starts like them: decided before any
    // search through the message.
    if is_graph(msg) {
        return Event::Graph;
    }
    // Both GDR messages start alike: one scan rules them out on most lines.
    if has(&GDR, msg) {
        if has(&GDR_DISABLED, msg) {
            return Event::GdrDisabled(msg);
        }
        if has(&GDR_ENABLED, msg) {
            return Event::GdrEnabled;
        }
    }
    match msg.as_bytes().first() {
        Some(b'B') => {
            if let Some(rest) = msg
                .strip_prefix("Bootstrap : Using ")
                .or_else(|| msg.strip_prefix("Bootstrap: Using "))
            {
                return Event::Bootstrap(rest.trim());
            }
        }
        Some(b'C') => {
            if let Some(rest) = msg.strip_prefix("Connected all rings, use ring PXN ") {
                return parse_pxn_gdr(rest).unwrap_or(Event::Other);
            }
        }
        _ => {}
    }
    if let Some(event) = parse_error_return(msg) {
        return event;
    }
    if msg.starts_with("comm 0x") || has(&COMM, msg) {
        if let Some(lifecycle) = parse_comm_lifecycle(msg) {
            return lifecycle;
        }
        if let Some(topology) = parse_comm_topology(msg) {
            return topology;
        }
    }
    Event::Other
}

pub(super) fn net_name(name: &str) -> Option<&str> {
    let name = name.trim().trim_end_matches('.');
    (!name.is_empty()).then_some(name)
}

/// `NET/<name> : …` lines other than the plugin loader's.
pub(super) fn classify_net_line<'a>(msg: &'a str, rest: &'a str) -> Event<'a> {
    let Some(colon) = memchr::memchr(b':', rest.as_bytes()) else {
        return Event::Other;
    };
    let net = trim_spaced(&rest[..colon]);
    if net.is_empty() || net.contains('/') || net.contains(' ') {
        return Event::Other;
    }
    let text = trim_spaced(&rest[colon + 1..]);
    if text.starts_with("No device found") {
        return Event::NoDevice(net);
    }
    if text.starts_with("Got completion") {
        return Event::CompletionError(msg);
    }
    if let Some(list) = text.strip_prefix("Using") {
        // `[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:…<0>`: keep the device list only.
        let mut list = trim_spaced(split_byte(list, b';').map_or(list, |(l, _)| l));
        while let Some(l) = list.strip_suffix("[RO]") {
            list = l;
        }
        let list = trim_spaced(list);
        return Event::NetDevices { net, devices: list };
    }
    if text.starts_with('[') {
        // 2.3: `NET/IB: [0] mlx5_0:1/IB `.
        return Event::NetDevices { net, devices: text };
    }
    if has(&GDR_DISABLED, text) {
        return Event::GdrDisabled(msg);
    }
    if has(&GDR_ENABLED, text) {
        return Event::GdrEnabled;
    }
    Event::Other
}

/// The text after `NET/OFI ` (INFO, or a WARN's message).
pub fn classify_ofi(rest: &str) -> Event<'_> {
    let rest = rest.trim();
    for lead in ["Selected provider is ", "Selected Provider is "] {
        if let Some(p) = rest.strip_prefix(lead) {
            let provider = p.split([',', ' ']).next().unwrap_or("");
            return if provider.is_empty() {
                Event::Other
            } else {
                Event::OfiProvider(provider)
            };
        }
    }
    if let Some(value) = rest.strip_prefix("Support for DMA-BUF registrations: ") {
        return match value.trim() {
            "true" => Event::OfiDmabuf(true),
            "false" => Event::OfiDmabuf(false),
            _ => Event::Other,
        };
    }
    if let Some(instance) = rest.strip_prefix("GDR disabled on GDR-supported instance type ") {
        let instance = instance.split_whitespace().next();
        return Event::OfiGdrOff {
            reason: rest,
            instance,
        };
    }
    if rest.starts_with("Could not disable CUDA API usage for HMEM, disabling GDR") {
        return Event::OfiGdrOff {
            reason: rest,
            instance: None,
        };
    }
    if rest.starts_with("OFI fi_getinfo() call failed") {
        return Event::OfiGetinfoFailed(rest);
    }
    if let Some(platform) = rest.strip_prefix("Running on ") {
        if let Some((instance, _)) = platform.split_once(" platform") {
            if !instance.is_empty() && !instance.contains(' ') {
                return Event::OfiPlatform(instance);
            }
        }
    }
    if is_ofi_refusal(rest) {
        return Event::OfiRefused(rest);
    }
    Event::Other
}

/// aws-ofi-nccl messages saying it will not carry the traffic (INFO or WARN).
pub fn is_ofi_refusal(msg: &str) -> bool {
    const REFUSALS: [&str; 4] = [
        "No eligible providers",
        "Couldn't find any optimal provider",
        "Only EFA provider is supported",
        "Unable to find a protocol",
    ];
    REFUSALS.iter().any(|r| msg.contains(r))
}

/// `<file>:<line> -> <code>[ [Async thread]]`, NCCLCHECK's trace of an error returned through a frame. The
/// first word must end in `:<digits>`, which no topology line's does (`Ring 00 : 7 -> 0 -> 1`).
pub(super) fn parse_error_return(msg: &str) -> Option<Event<'_>> {
    let space = memchr::memchr(b' ', msg.as_bytes())?;
    let (location, rest) = (&msg[..space], &msg[space..]);
    let (file, line) = location.rsplit_once(':')?;
    if file.is_empty() || line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let code = rest.strip_prefix(" -> ")?;
    let code = leading_number(code.as_bytes()).1?;
    Some(Event::ErrorReturn { location, code })
}

/// NCCL's name for an `ncclResult_t` code.
pub fn result_name(code: u32) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => "unknown ncclResult_t",
    }
}

/// Error names as frameworks print them (`ncclSystemError: System call … failed`).
pub(super) const ERROR_NAMES: [&str; 6] = [
    "ncclUnhandledCudaError",
    "ncclSystemError",
    "ncclInternalError",
    "ncclInvalidArgument",
    "ncclInvalidUsage",
    "ncclRemoteError",
];

/// The text of a failed NCCL call reported outside NCCL's own lines, from the error's name on: an error name,
/// or PyTorch's `NCCL error in: <file>:<line>, <text>`.
pub fn nccl_error(text: &str) -> Option<&str> {
    let at = ERROR_NAMES
        .iter()
        .filter_map(|n| text.find(n))
        .chain(text.find("NCCL error in:"))
        .min()?;
    Some(trim(&text[at..]))
}

pub(super) fn parse_pxn_gdr(rest: &str) -> Option<Event<'static>> {
    // `0 GDR 1`
    let mut words = rest.split_whitespace();
    let pxn = words.next()?.parse::<u32>().ok()?;
    if words.next()? != "GDR" {
        return None;
    }
    let gdr = words.next()?.parse::<u32>().ok()?;
    Some(Event::RingPxnGdr {
        pxn: pxn != 0,
        gdr: gdr != 0,
    })
}

/// `… comm 0x7f3a rank 3 nranks 16 … - Init COMPLETE`; 2.28's split form glues the dash to the key
/// (`key 0- Init START`), and newer builds lead with `[Rank 3] ncclCommInitRank`.
pub(super) fn parse_comm_lifecycle(msg: &str) -> Option<Event<'_>> {
    let head = trim_end(msg);
    let (head, stage) = [
        ("Init COMPLETE", CommStage::InitComplete),
        ("Init START", CommStage::InitStart),
        ("Abort COMPLETE", CommStage::AbortComplete),
    ]
    .into_iter()
    .find_map(|(tail, stage)| head.strip_suffix(tail).map(|h| (h, stage)))?;
    if !trim_end(head).ends_with('-') {
        return None;
    }
    let mut comm = None;
    let mut rank = None;
    let mut nranks = None;
    let mut words = Words { s: head, at: 0 };
    // The first of each key counts: the words after all three (device, bus id, …) are not read.
    while comm.is_none() || rank.is_none() || nranks.is_none() {
        let Some(w) = words.next() else { break };
        match w {
            "comm" if comm.is_none() => comm = words.next(),
            "rank" if rank.is_none() => rank = words.next().and_then(|n| n.parse().ok()),
            "nranks" if nranks.is_none() => nranks = words.next().and_then(|n| n.parse().ok()),
            _ => {}
        }
    }
    Some(Event::CommLifecycle {
        comm: comm?,
        rank: rank?,
        nranks: nranks?,
        stage,
    })
}

pub(super) fn parse_comm_topology(msg: &str) -> Option<Event<'static>> {
    let mut nranks = None;
    let mut nnodes = None;
    let mut words = msg.split_whitespace();
    while let Some(w) = words.next() {
        match w {
            "nRanks" => nranks = words.next().and_then(|n| n.parse().ok()),
            "nNodes" => nnodes = words.next().and_then(|n| n.parse().ok()),
            _ => {}
        }
    }
    Some(Event::CommTopology {
        nranks: nranks?,
        nnodes: nnodes?,
    })
}

/// Topology and search dumps: shaped like connections but with no ` via ` (trap 5).
pub(super) fn is_graph(msg: &str) -> bool {
    const LEADS: [&str; 8] = [
        "Ring ", "Channel ", "Tree ", "Trees ", "CollNet ", "Coll ", "NVLS ", "Pattern ",
    ];
    if LEADS.iter().any(|l| msg.starts_with(l)) {
        return true;
    }
    // Search dump ` 0 : NET/0 GPU/0 …` / ` 0 : GPU/0-60`: a number, a colon, node ids.
    // The first ` : ` by its colons (a substring searcher's setup cost more than the rest of an init line).
    let Some(at) = spaced_colon(msg) else {
        return false;
    };
    let (n, rest) = (&msg[..at], &msg[at + 3..]);
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && (rest.starts_with("NET/") || rest.starts_with("GPU/"))
}
