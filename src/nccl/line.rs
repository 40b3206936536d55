//! One line of `NCCL_DEBUG=INFO` output → the NCCL records it holds. Pure: no I/O, no state, no allocation
//! except when the line carries ANSI colour codes.
//!
//! The NCCL prefix (`host:pid:tid [dev] NCCL INFO`) is found by scanning *backwards* from the `NCCL INFO` /
//! `NCCL WARN` token, so whatever a launcher put in front of it (mpirun `[1,0]<stdout>:`, torchrun `[rank0]:`,
//! Ray `(RayWorkerWrapper pid=…, ip=…)`, Slurm `3: `, timestamps, markdown `> `) is skipped without knowing
//! the launcher. Several records glued on one line (ranks writing to one stream) are split at each token.
//! Grammar: `shared/reference/nccl-log-formats.md`.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// Longest line looked at; the rest of a longer line is skipped. NCCL formats each message into 1024 bytes
/// and launchers add a few dozen, so only torn or binary lines reach this.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Searchers built once: building one per call cost more than the search on short lines.
static NCCL_SP: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"NCCL "));
static VIA: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b" via "));
static VERSION: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"NCCL version "));
static GDR_DISABLED: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"GPU Direct RDMA Disabled"));
static COMM: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b" comm 0x"));
static GDR_ENABLED: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"GPU Direct RDMA Enabled"));
static GDR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"GPU Direct RDMA "));

fn has(finder: &Finder<'_>, s: &str) -> bool {
    finder.find(s.as_bytes()).is_some()
}

/// One NCCL message, with what its prefix says about where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Hostname cut at the first `.` (may be empty: NCCL prints `:pid:tid` when it has none).
    pub host: Option<&'a str>,
    pub pid: Option<u32>,
    /// Lines Ray folded into this one (`[repeated 7x across cluster]`), otherwise 1.
    pub repeat: u32,
    pub event: Event<'a>,
}

/// What a message means for the transport analysis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// `NCCL version 2.28.9+cuda13.0` (bare on stdout, or as an INFO line from 2.22).
    Version(&'a str),
    /// What NCCL chose: `Using network IB`, 2.3's `Using internal Network Socket`, 2.27+'s
    /// `Assigned NET plugin IB to comm`.
    NetSelected(&'a str),
    /// `NET/Plugin: Loaded net plugin AWS Libfabric (v6)`: loaded, it may still fail later.
    NetPluginLoaded(&'a str),
    /// `Initialized NET plugin Socket` (2.27+).
    NetPluginInitialized(&'a str),
    /// `Failed to initialize NET plugin IB` (2.28).
    NetPluginFailed(&'a str),
    /// `NET/IB : No device found.`
    NoDevice(&'a str),
    /// `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB …`, `NET/Socket : Using [0]ib0:…`: the devices a
    /// NET transport initialised with (empty for 2.24+'s `NET/IB : Using [RO]; OOB …` after no device).
    NetDevices {
        net: &'a str,
        devices: &'a str,
    },
    /// `Bootstrap : Using eth0:…`: the out-of-band channel, never the data path.
    Bootstrap(&'a str),
    /// `GPU Direct RDMA Disabled for …` (the whole message: it is the reason).
    GdrDisabled(&'a str),
    GdrEnabled,
    /// A data-path line (it has ` via `).
    Channel(Channel<'a>),
    /// Ring/tree/graph topology (`Ring 00 : 0 -> 1 -> 0`, `Trees [0] …`, ` 0 : NET/0 GPU/0`): no transport.
    Graph,
    /// `<file>:<line> NCCL WARN <message>`; the location may hold spaces (plugins pass C++ signatures).
    Warn {
        location: Option<&'a str>,
        message: &'a str,
    },
    /// `Connected all rings, use ring PXN 0 GDR 1` (2.24+); `GDR 0` = some ring connection without GDR.
    RingPxnGdr {
        pxn: bool,
        gdr: bool,
    },
    /// `NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)`.
    OfiProvider(&'a str),
    /// `NET/OFI Support for DMA-BUF registrations: true|false`: whether the plugin registers GPU memory
    /// through DMA-BUF (false: the legacy peer-memory path, if any).
    OfiDmabuf(bool),
    /// aws-ofi-nccl turned GPUDirect RDMA off: `GDR disabled on GDR-supported instance type p5.48xlarge`
    /// (WARN, the endpoint is refused), `Could not disable CUDA API usage for HMEM, disabling GDR` (INFO).
    OfiGdrOff {
        reason: &'a str,
        instance: Option<&'a str>,
    },
    /// `OFI fi_getinfo() call failed: <libfabric error>`: no usable libfabric provider.
    OfiGetinfoFailed(&'a str),
    /// `Running on p5en.48xlarge platform, …`: the instance type the plugin read.
    OfiPlatform(&'a str),
    /// aws-ofi-nccl refused its provider (`No eligible providers were found`, `Couldn't find any optimal
    /// provider`, `Only EFA provider is supported`); NCCL falls back to another network.
    OfiRefused(&'a str),
    /// `transport/net_ib.cc:911 -> 2`: a call returned an error code up the stack (one line per frame).
    ErrorReturn {
        location: &'a str,
        code: u32,
    },
    /// `NET/IB : Got completion from peer … with status=12 …`: an RDMA work request failed.
    CompletionError(&'a str),
    /// `ncclSystemError: …`, PyTorch's `NCCL error in: …`: a NCCL call failed (outside the NCCL prefix).
    NcclError(&'a str),
    /// `[ncclCommInitRank ]comm 0x… rank 3 nranks 16 … - Init START|Init COMPLETE|Abort COMPLETE` (Init
    /// COMPLETE from 2.4, Init START from 2.18, Abort from 2.12): where a communicator's init began, ended or
    /// was aborted in this process.
    CommLifecycle {
        /// The communicator's address as printed (`%p`): unique within one process.
        comm: &'a str,
        rank: u32,
        nranks: u32,
        stage: CommStage,
    },
    /// `comm 0x… rank 0 nRanks 16 nNodes 2 localRanks 8 …` (2.20+).
    CommTopology {
        nranks: u32,
        nnodes: u32,
    },
    Other,
}

impl Event<'_> {
    /// Whether what a caller makes of this event depends on the process that printed it (host, pid): data
    /// paths are tallied per host, init outcomes and failures per process.
    pub fn names_its_process(&self) -> bool {
        matches!(
            self,
            Event::Channel(_)
                | Event::CommLifecycle { .. }
                | Event::ErrorReturn { .. }
                | Event::CompletionError(_)
                | Event::NcclError(_)
                | Event::Warn { .. }
        )
    }
}

/// What an init line says happened to a communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommStage {
    InitStart,
    InitComplete,
    AbortComplete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// `Ring 00 :` (≤ 2.6).
    Ring,
    /// `Channel 00 :` / `Channel 00/0 :` (2.7+).
    Channel,
    /// `Coll 00 :` (2.6 – 2.8) and `CollNet 00 :` (2.9+).
    CollNet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Send,
    Receive,
}

/// `15[7]`: a rank and the bracket after it, whose meaning changed across releases (CUDA device, bus id in
/// hex, NVML index): kept as text, never interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    pub rank: u32,
    pub bracket: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel<'a> {
    pub kind: ChannelKind,
    pub index: u32,
    pub from: Option<Endpoint<'a>>,
    pub to: Option<Endpoint<'a>>,
    pub direction: Option<Direction>,
    pub transport: Transport<'a>,
}

impl Channel<'_> {
    /// The rank whose process printed the line: the left one on `[send]` and on P2P/SHM lines, the right one
    /// on `[receive]` and on 2.3's direction-less NET lines (printed by the receiver only).
    pub fn local_rank(&self) -> Option<u32> {
        let receiver_side = match self.direction {
            Some(Direction::Receive) => true,
            Some(Direction::Send) => false,
            None => matches!(self.transport, Transport::Net { .. }) && self.to.is_some(),
        };
        if receiver_side {
            self.to.or(self.from).map(|e| e.rank)
        } else {
            self.from.or(self.to).map(|e| e.rank)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport<'a> {
    /// `NET/<plugin>/<dev>[(<proxy>)][/GDRDMA[(PCI)]][/Shared]`, or the same after `COLLNET/`.
    Net {
        collnet: bool,
        plugin: &'a str,
        dev: u32,
        /// PXN: another local rank's proxy sends for this one.
        proxy: Option<u32>,
        gdrdma: bool,
        shared: bool,
    },
    /// `P2P/IPC`, `P2P/CUMEM`, `P2P/direct pointer`, `P2P/indirect`, `P2P/MNNVL`: the word after `P2P/`.
    P2p(&'a str),
    /// `SHM/direct/direct`, `direct shared memory`.
    Shm,
    /// Anything else after ` via ` (kept for the report).
    Other(&'a str),
}

/// The family of a NET plugin, by its name. Only names known to be InfiniBand/RoCE verbs are IB: any other
/// plugin is `Plugin`, named in the verdict, never taken for IB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetFamily {
    /// NCCL's internal `IB`, nccl-rdma-sharp-plugins' `IBext*`, `UCX*` and `SHARP` (CollNet): verbs.
    Ib,
    /// aws-ofi-nccl and other libfabric plugins (`AWS Libfabric`, `Libfabric`, `OFI`).
    Ofi,
    /// TCP: NCCL's internal `Socket` (whatever interface it runs over, `ib0` included), `FastSocket` and other
    /// socket/TCP plugins.
    Socket,
    /// Any other plugin (GPUDirect-TCPX/TCPXO, vendors' own): its name is all the log says about it.
    Plugin,
}

impl NetFamily {
    pub fn of(plugin: &str) -> NetFamily {
        let p = plugin.trim();
        let has = |needle: &str| contains_ignore_case(p, needle);
        let starts = |prefix: &str| {
            p.get(..prefix.len())
                .is_some_and(|h| h.eq_ignore_ascii_case(prefix))
        };
        // GPUDirect over TCP moves GPU memory itself: not the socket transport, though it runs over TCP.
        if has("gpudirect") || has("tcpx") || has("fastrak") {
            NetFamily::Plugin
        } else if has("socket") || has("tcp") {
            NetFamily::Socket
        } else if has("libfabric") || has("ofi") {
            NetFamily::Ofi
        } else if starts("IB") || starts("UCX") || p.eq_ignore_ascii_case("SHARP") {
            NetFamily::Ib
        } else {
            NetFamily::Plugin
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NetFamily::Ib => "ib",
            NetFamily::Ofi => "ofi",
            NetFamily::Socket => "socket",
            NetFamily::Plugin => "plugin",
        }
    }
}

fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// `NCCL INFO` / `NCCL WARN`: where a record's message starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Info,
    Warn,
}

struct Token {
    /// Offset of `NCCL`.
    pos: usize,
    level: Level,
    /// Whether an `NCCL ` that is not a token came before it (from where the search started).
    skipped: bool,
}

const TOKEN_LEN: usize = "NCCL INFO".len();
const RAY_REPEAT: &str = " [repeated ";
const RAY_REPEAT_END: &str = "x across cluster]";

/// Calls `emit` for each NCCL record on `line` (usually zero or one). `line` may end with `\n` or `\r\n`.
pub fn parse_line(line: &str, emit: impl FnMut(Record<'_>)) {
    parse_line_from(line, 0, emit)
}

/// [`parse_line`] for a caller that already searched the line: it holds no `NCCL` before byte `first_nccl`
/// (the reader finds the first one to pick out the line; searching again cost a tenth of the time).
pub fn parse_line_from(line: &str, first_nccl: usize, mut emit: impl FnMut(Record<'_>)) {
    // `trim_end_matches(['\n', '\r'])` by bytes: the char-pattern version showed in profiles.
    let kept = line
        .as_bytes()
        .iter()
        .rposition(|&b| b != b'\n' && b != b'\r');
    let line = &line[..kept.map_or(0, |i| i + 1)];
    // One scan for both escapes and carriage returns: most lines have neither.
    if memchr::memchr2(0x1b, b'\r', line.as_bytes()).is_none() {
        if let Some(record) = canonical_record(line, first_nccl, None) {
            return emit(record);
        }
        return parse_segment(line, first_nccl, Ids::Always, &mut emit);
    }
    if memchr::memchr(0x1b, line.as_bytes()).is_some() {
        parse_clean(&strip_ansi(line), &mut emit);
    } else {
        parse_clean(line, &mut emit);
    }
}

/// [`parse_line_from`] for a line the caller knows holds no escape, carriage return or newline (it scanned
/// the whole block at once), with `memo` kept across its lines. With [`Ids::WhereUsed`], records whose event does not
/// [name its process](Event::names_its_process) carry no host or pid.
pub fn parse_plain_line_from(
    line: &str,
    first_nccl: usize,
    ids: Ids,
    memo: &mut LineMemo,
    mut emit: impl FnMut(Record<'_>),
) {
    if let Some(record) = canonical_record(line, first_nccl, Some(memo)) {
        return emit(record);
    }
    parse_segment(line, first_nccl, ids, &mut emit)
}

/// Which records get the host and pid of their prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ids {
    Always,
    /// Only records whose event [names its process](Event::names_its_process): reading the prefix was a
    /// third of the time on topology and device lines, which a caller tallies without it.
    WhereUsed,
}

/// A line without ANSI codes: its records borrow from it.
fn parse_clean<'a>(line: &'a str, emit: &mut impl FnMut(Record<'a>)) {
    if memchr::memchr(b'\r', line.as_bytes()).is_none() {
        return parse_segment(line, 0, Ids::Always, emit);
    }
    for segment in line.split('\r') {
        parse_segment(segment, 0, Ids::Always, emit);
    }
}

/// Removes `ESC [ … <letter>` (CSI) sequences and lone escapes.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// One CR-delimited piece of a line (progress bars rewrite a line with `\r`; each piece stands alone).
/// `segment` holds no `NCCL` before byte `first_nccl`. The general reader: callers try [`canonical_record`]
/// first on the lines that usually take it.
fn parse_segment<'a>(
    segment: &'a str,
    first_nccl: usize,
    ids: Ids,
    emit: &mut impl FnMut(Record<'a>),
) {
    let (segment, repeat) = strip_ray_repeat(segment);
    // Usually the token sits right where the caller found `NCCL`: check there before searching.
    let first = match token_at(segment.as_bytes(), first_nccl) {
        Some(level) => Some(Token {
            pos: first_nccl,
            level,
            skipped: false,
        }),
        None => find_token(segment, first_nccl),
    };
    let head_end = first.as_ref().map_or(segment.len(), |t| t.pos);
    // A bare version line holds an `NCCL ` before the first token: without one, no need to look.
    let may_hold_version = first.as_ref().is_none_or(|t| t.skipped);
    let version = if may_hold_version {
        bare_version(&segment[..head_end])
    } else {
        None
    };
    if let Some(version) = version {
        emit(Record {
            host: None,
            pid: None,
            repeat,
            event: Event::Version(version),
        });
    }
    // PyTorch's `NCCL error in: …` also holds an `NCCL ` that is not a token.
    if let Some(text) = may_hold_version
        .then(|| nccl_error(&segment[..head_end]))
        .flatten()
    {
        emit(Record {
            host: None,
            pid: None,
            repeat,
            event: Event::NcclError(text),
        });
    }
    let mut region_start = 0;
    let mut current = first;
    while let Some(token) = current {
        let body_start = (token.pos + TOKEN_LEN).min(segment.len());
        let (next, via) = scan_body(segment.as_bytes(), body_start);
        let before = &segment[region_start..token.pos];
        // WARN's location is in its prefix: read here, the INFO prefix below where wanted.
        let warn_prefix = (token.level == Level::Warn).then(|| parse_prefix(before, Level::Warn));
        let body_end = match &next {
            Some(n) => {
                let start = parse_prefix(&segment[body_start..n.pos], n.level).start;
                body_start + start
            }
            None => segment.len(),
        };
        let message = trim_spaced(&segment[body_start..body_end]);
        let event = match token.level {
            // A record glued to the next one: the next record's prefix may have eaten the end of a channel
            // line (`via NET/IB/0/GDRDMAgpu-a01:1:3 [1]`), and channel parsing ignores trailing text anyway.
            Level::Info if next.is_some() => match classify(trim(
                &segment[body_start..next.as_ref().map_or(segment.len(), |n| n.pos)],
            )) {
                channel @ Event::Channel(_) => channel,
                _ => classify(message),
            },
            Level::Info => {
                // Where the scan's ` via ` falls in the trimmed message; one at its edges (cut by the trim) may
                // hide a later one: search again then.
                let msg_start = message.as_ptr() as usize - segment.as_ptr() as usize;
                match via {
                    Some(at) if at >= msg_start && at + VIA_LEN <= msg_start + message.len() => {
                        classify_at(message, Some(at - msg_start))
                    }
                    Some(_) => classify(message),
                    None => classify_at(message, None),
                }
            }
            Level::Warn => Event::Warn {
                location: warn_prefix.as_ref().and_then(|p| p.location),
                message,
            },
        };
        // Records glued on one line all get their ids: the caller chose `ids` for the line, and an earlier
        // record of it may change what the caller needs (an error frame opens a chain).
        let single = region_start == 0 && next.is_none();
        let prefix = match warn_prefix {
            Some(prefix) => prefix,
            None if ids == Ids::Always || !single || event.names_its_process() => {
                parse_prefix(before, Level::Info)
            }
            None => Prefix::default(),
        };
        emit(Record {
            host: prefix.host,
            pid: prefix.pid,
            repeat,
            event,
        });
        region_start = body_end;
        current = next;
    }
}

/// `str::trim` (same Unicode whitespace) that tests ASCII bytes directly, falling back to `str::trim` only
/// when an end is non-ASCII: the generic version decodes every char, and it runs several times per line.
/// Most texts it gets have nothing to trim: told from their two end bytes, inline (a call cost more).
#[inline(always)]
fn trim(s: &str) -> &str {
    let kept = |b: Option<&u8>| b.is_some_and(|&b| b > b' ' && b.is_ascii());
    if kept(s.as_bytes().first()) && kept(s.as_bytes().last()) {
        return s;
    }
    trimmed(s)
}

/// [`trim`] for a text that usually has one space at an end (a message after its token, a field before
/// ` : `): that space is dropped first, so that the inline test usually suffices.
#[inline(always)]
fn trim_spaced(s: &str) -> &str {
    let s = s.strip_prefix(' ').unwrap_or(s);
    trim(s.strip_suffix(' ').unwrap_or(s))
}

#[inline(never)]
fn trimmed(s: &str) -> &str {
    trim_start(trim_end(s))
}

fn trim_end(s: &str) -> &str {
    let b = s.as_bytes();
    let mut end = b.len();
    while end > 0 && is_ascii_space(b[end - 1]) {
        end -= 1;
    }
    if end > 0 && !b[end - 1].is_ascii() {
        return s[..end].trim_end();
    }
    &s[..end]
}

fn trim_start(s: &str) -> &str {
    let b = s.as_bytes();
    let mut start = 0;
    while start < b.len() && is_ascii_space(b[start]) {
        start += 1;
    }
    if start < b.len() && !b[start].is_ascii() {
        return s[start..].trim_start();
    }
    &s[start..]
}

/// `char::is_whitespace` on ASCII: U+0009..=U+000D and the space.
#[inline]
fn is_ascii_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t'..=b'\r')
}

/// Ray's dedup suffix: `… [repeated 7x across cluster]` → (line without it, 7).
#[inline(always)]
fn strip_ray_repeat(segment: &str) -> (&str, u32) {
    // Told from the last byte on most lines: an ASCII one that neither is space nor closes the suffix.
    let last = segment.as_bytes().last().copied().unwrap_or(b']');
    if last != b']' && last.is_ascii() && !is_ascii_space(last) {
        return (segment, 1);
    }
    ray_repeat_suffix(segment)
}

#[inline(never)]
fn ray_repeat_suffix(segment: &str) -> (&str, u32) {
    let trimmed = trim_end(segment);
    if let Some(body) = trimmed.strip_suffix(RAY_REPEAT_END) {
        if let Some(at) = body.rfind(RAY_REPEAT) {
            if let Ok(n) = body[at + RAY_REPEAT.len()..].parse::<u32>() {
                return (&body[..at], n.max(1));
            }
        }
    }
    (segment, 1)
}

fn find_token(s: &str, from: usize) -> Option<Token> {
    let bytes = s.as_bytes();
    let mut at = from;
    while at < bytes.len() {
        let found = at + NCCL_SP.find(&bytes[at..])?;
        if let Some(level) = token_at(bytes, found) {
            return Some(Token {
                pos: found,
                level,
                skipped: at > from,
            });
        }
        at = found + 5;
    }
    None
}

/// The token's level when `NCCL INFO` / `NCCL WARN` starts at `pos` and ends the word (followed by space or
/// end of line).
#[inline]
fn token_at(bytes: &[u8], pos: usize) -> Option<Level> {
    // Compared as one 8-byte word and a byte: the slice patterns compiled to byte-by-byte compares that
    // showed in profiles (this runs at every `N` of every NCCL line).
    const INF: u64 = u64::from_le_bytes(*b"NCCL INF");
    const WAR: u64 = u64::from_le_bytes(*b"NCCL WAR");
    let word = bytes.get(pos..pos + TOKEN_LEN)?;
    let head = u64::from_le_bytes(word[..8].try_into().ok()?);
    let level = match (head, word[8]) {
        (INF, b'O') => Level::Info,
        (WAR, b'N') => Level::Warn,
        _ => return None,
    };
    let ends_word = bytes
        .get(pos + TOKEN_LEN)
        .is_none_or(|b| b.is_ascii_whitespace());
    ends_word.then_some(level)
}

const VIA_LEN: usize = " via ".len();

/// The next token from `from` and, before it, the first ` via `: one pass over a record's body, where a
/// search for each cost twice the time. Scans for `N` and `v`, which few message bytes are.
fn scan_body(bytes: &[u8], from: usize) -> (Option<Token>, Option<usize>) {
    let mut via = None;
    let mut skipped = false;
    for i in memchr::memchr2_iter(b'N', b'v', bytes.get(from..).unwrap_or_default()) {
        let i = from + i;
        if bytes[i] == b'N' {
            if let Some(level) = token_at(bytes, i) {
                let token = Token {
                    pos: i,
                    level,
                    skipped,
                };
                return (Some(token), via);
            }
            skipped |= bytes[i..].starts_with(b"NCCL ");
        } else if via.is_none() && i > 0 && bytes[i - 1..].starts_with(b" via ") {
            via = Some(i - 1);
        }
    }
    (None, via)
}

/// `NCCL version 2.18.6+cuda12.2` printed bare on stdout (≤ 2.21, or at NCCL_DEBUG=VERSION). PyTorch error
/// messages also say `NCCL version 2.x.y` but without `+cuda`: those are not the init line.
fn bare_version(head: &str) -> Option<&str> {
    let at = VERSION.find(head.as_bytes())?;
    let version = version_token(&head[at + "NCCL version ".len()..])?;
    version.contains("+cuda").then_some(version)
}

fn version_token(rest: &str) -> Option<&str> {
    let token = rest.split_whitespace().next()?;
    let token = token.trim_end_matches([',', ';', ')']);
    (token.starts_with(|c: char| c.is_ascii_digit()) && token.contains('.')).then_some(token)
}

/// What precedes the token: `host:pid:tid [dev] ` and, for WARN, `<location> `.
#[derive(Debug, Default)]
struct Prefix<'a> {
    /// Where `host` starts in the text given (its length when no prefix was recognised).
    start: usize,
    host: Option<&'a str>,
    pid: Option<u32>,
    location: Option<&'a str>,
}

fn parse_prefix(before: &str, level: Level) -> Prefix<'_> {
    let bytes = before.as_bytes();
    let end = trim_end(before).len();
    let none = Prefix {
        start: before.len(),
        ..Prefix::default()
    };
    match level {
        Level::Info => {
            if end == 0 || bytes[end - 1] != b']' {
                return none;
            }
            if let Some((host, pid)) = ids_from_start(&before[..end]) {
                return Prefix {
                    start: 0,
                    host: Some(host),
                    pid: Some(pid),
                    location: None,
                };
            }
            match parse_ids(before, end - 1) {
                Some((start, host, pid)) => Prefix {
                    start,
                    host: Some(host),
                    pid: Some(pid),
                    location: None,
                },
                None => none,
            }
        }
        Level::Warn => {
            // `[dev] <location>`: the location may contain spaces and brackets of its own, so try each `] `
            // from the right until one closes a `host:pid:tid [dev]`.
            let mut search_end = end;
            while let Some(close) = memchr::memrchr(b']', &bytes[..search_end]) {
                if bytes.get(close + 1) == Some(&b' ') {
                    if let Some((start, host, pid)) = parse_ids(before, close) {
                        let location = before[close + 1..end].trim();
                        return Prefix {
                            start,
                            host: Some(host),
                            pid: Some(pid),
                            location: (!location.is_empty()).then_some(location),
                        };
                    }
                }
                search_end = close;
            }
            none
        }
    }
}

/// What reading a dense block's canonical channel lines keeps for the next lines, by exact bytes, in fixed
/// tables (a slot holds the last text hashed to it), so memory stays flat whatever the log: [`parse_prefix`]'s
/// readings of INFO prefixes of up to [`MEMO_KEY_BYTES`] bytes (a process prints every line with one prefix,
/// `host:pid:tid [dev] `, and reading it again was a quarter of a channel line's cost), and the transport
/// paths' ([`PathMemo`]).
#[derive(Default)]
pub struct LineMemo {
    /// Empty until the first lookup (a reader that never needs it allocates nothing).
    slots: Vec<MemoSlot>,
    paths: PathMemo,
}

/// [`parse_transport`]'s readings of transport paths of 8 to 16 bytes (`NET/IB/0/GDRDMA`, `P2P/CUMEM/read`),
/// kept by their bytes in [`PATH_SLOTS`] slots: a job's channel lines use a handful of paths, and reading one
/// again cost a sixth of a channel line. The key is the length and the first and last eight bytes, which
/// together fix every byte of such a path.
#[derive(Default)]
struct PathMemo {
    slots: Vec<PathSlot>,
}

#[derive(Clone, Copy, Default)]
struct PathSlot {
    /// 0: empty.
    len: u8,
    head: u64,
    tail: u64,
    transport: TransportAt,
}

/// Enough that a handful of paths rarely share a slot.
const PATH_SLOTS: usize = 256;

/// A [`Transport`] with offsets into its path for its strings.
#[derive(Clone, Copy, Default)]
enum TransportAt {
    Net {
        collnet: bool,
        plugin: (u8, u8),
        dev: u32,
        proxy: Option<u32>,
        gdrdma: bool,
        shared: bool,
    },
    P2p((u8, u8)),
    Shm,
    #[default]
    Other,
}

/// `text[from..to]`, by `split_at`, which inlines where a range index did not (a call on every channel line).
#[inline(always)]
fn sub(text: &str, from: usize, to: usize) -> &str {
    text.split_at(from).1.split_at(to - from).0
}

/// [`sub`] for a memo's offsets.
#[inline(always)]
fn part_at(text: &str, (from, to): (u8, u8)) -> &str {
    sub(text, usize::from(from), usize::from(to))
}

/// A memo's offsets of `part`, which lies in `text` (at most 32 bytes long).
#[inline(always)]
fn span(text: &str, part: &str) -> (u8, u8) {
    let from = (part.as_ptr() as usize - text.as_ptr() as usize) as u8;
    (from, from + part.len() as u8)
}

impl TransportAt {
    /// `transport`, read from `path`, with offsets into it.
    fn of(transport: &Transport<'_>, path: &str) -> Self {
        match *transport {
            Transport::Net {
                collnet,
                plugin,
                dev,
                proxy,
                gdrdma,
                shared,
            } => TransportAt::Net {
                collnet,
                plugin: span(path, plugin),
                dev,
                proxy,
                gdrdma,
                shared,
            },
            Transport::P2p(kind) => TransportAt::P2p(span(path, kind)),
            Transport::Shm => TransportAt::Shm,
            Transport::Other(_) => TransportAt::Other,
        }
    }

    /// The transport again, its strings in `path` (the same bytes it was read from).
    #[inline(always)]
    fn within(self, path: &str) -> Transport<'_> {
        match self {
            TransportAt::Net {
                collnet,
                plugin,
                dev,
                proxy,
                gdrdma,
                shared,
            } => Transport::Net {
                collnet,
                plugin: part_at(path, plugin),
                dev,
                proxy,
                gdrdma,
                shared,
            },
            TransportAt::P2p(kind) => Transport::P2p(part_at(path, kind)),
            TransportAt::Shm => Transport::Shm,
            TransportAt::Other => Transport::Other(path),
        }
    }
}

impl PathMemo {
    /// `parse_transport(path)`, from the table when this path was read before.
    #[inline(always)]
    fn transport<'a>(&mut self, path: &'a str) -> Transport<'a> {
        let b = path.as_bytes();
        let (Some(head), Some(tail)) = (b.first_chunk::<8>(), b.last_chunk::<8>()) else {
            return parse_transport(path);
        };
        if b.len() > 16 {
            return parse_transport(path);
        }
        let (head, tail) = (u64::from_le_bytes(*head), u64::from_le_bytes(*tail));
        let hash =
            (head ^ tail.rotate_left(29) ^ b.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if self.slots.is_empty() {
            self.slots = vec![PathSlot::default(); PATH_SLOTS];
        }
        let slot = &mut self.slots[(hash >> 32) as usize % PATH_SLOTS];
        if usize::from(slot.len) == b.len() && slot.head == head && slot.tail == tail {
            return slot.transport.within(path);
        }
        let transport = parse_transport(path);
        *slot = PathSlot {
            len: b.len() as u8,
            head,
            tail,
            transport: TransportAt::of(&transport, path),
        };
        transport
    }
}

/// Enough that a log of a thousand ranks (two thousand prefixes: the main and the proxy thread) mostly hits;
/// 192 KiB once allocated.
const MEMO_SLOTS: usize = 4096;
const MEMO_KEY_BYTES: usize = 32;

/// A prefix's length and the first [`MEMO_KEY_BYTES`] bytes of its segment (together they fix the prefix
/// exactly), and what was read from it, as offsets into the segment.
#[derive(Clone, Copy, Default)]
struct MemoSlot {
    /// 0: empty (an empty prefix is never kept: reading it costs nothing).
    len: u8,
    start: u8,
    host: Option<(u8, u8)>,
    pid: Option<u32>,
    key: [u64; MEMO_KEY_BYTES / 8],
}

impl LineMemo {
    /// `parse_prefix(&segment[..len], Level::Info)`, from the table when this prefix was read before.
    #[inline(always)]
    fn info_prefix<'a>(&mut self, segment: &'a str, len: usize) -> Prefix<'a> {
        let head = segment.as_bytes().first_chunk::<MEMO_KEY_BYTES>();
        let (Some(head), 1..=MEMO_KEY_BYTES) = (head, len) else {
            return parse_prefix(&segment[..len], Level::Info);
        };
        let key: [u64; MEMO_KEY_BYTES / 8] = std::array::from_fn(|i| {
            u64::from_le_bytes(head[8 * i..8 * i + 8].try_into().unwrap_or_default())
        });
        let hash = key.iter().fold(len as u64, |h, &w| {
            (h.rotate_left(23) ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        });
        if self.slots.is_empty() {
            self.slots = vec![MemoSlot::default(); MEMO_SLOTS];
        }
        let slot = &mut self.slots[(hash >> 32) as usize % MEMO_SLOTS];
        if usize::from(slot.len) == len && slot.key == key {
            return Prefix {
                start: usize::from(slot.start),
                host: slot.host.map(|at| part_at(segment, at)),
                pid: slot.pid,
                location: None,
            };
        }
        let prefix = parse_prefix(&segment[..len], Level::Info);
        *slot = MemoSlot {
            len: len as u8,
            start: prefix.start as u8,
            host: prefix.host.map(|h| span(segment, h)),
            pid: prefix.pid,
            key,
        };
        prefix
    }
}

/// Parses backwards `host:pid:tid [dev]` whose `]` is at `close`. Returns (start of host, host, pid).
#[inline]
fn parse_ids(s: &str, close: usize) -> Option<(usize, &str, u32)> {
    let b = s.as_bytes();
    let digits_back = |end: usize| end - digits_before(b, end);
    let dev_start = digits_back(close);
    // `<tid> [<dev>`
    if dev_start == close || dev_start < 2 || b[dev_start - 1] != b'[' || b[dev_start - 2] != b' ' {
        return None;
    }
    let tid_end = dev_start - 2;
    let tid_start = digits_back(tid_end);
    if tid_start == tid_end || tid_start == 0 || b[tid_start - 1] != b':' {
        return None;
    }
    let pid_end = tid_start - 1;
    let pid_start = digits_back(pid_end);
    if pid_start == pid_end || pid_start == 0 || b[pid_start - 1] != b':' {
        return None;
    }
    let host_end = pid_start - 1;
    let host_start = skip_back(b, host_end, is_host_byte);
    let pid = digits_u32(&b[pid_start..pid_end])?;
    Some((host_start, &s[host_start..host_end], pid))
}

/// Bytes a host name is made of (what [`parse_ids`] takes as the host): ASCII letters, digits, `-` and `_`.
/// A table, where the range tests cost a dozen instructions a byte on every channel line's host.
static HOST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
        c += 1;
    }
    table
};

#[inline(always)]
fn is_host_byte(c: u8) -> bool {
    HOST_BYTES[usize::from(c)]
}

/// `s` is exactly `host:pid:tid [dev]`, the prefix as NCCL prints it at the start of a line: read forwards
/// in one pass, where [`parse_ids`] (which also finds it behind a launcher's own prefix) walks back over
/// each field twice. Same result as `parse_ids` wherever this gives one (`prefixes_read_forwards_as_backwards`).
#[inline(always)]
fn ids_from_start(s: &str) -> Option<(&str, u32)> {
    let b = s.as_bytes();
    let host_end = b.iter().position(|&c| !is_host_byte(c))?;
    // `:pid`, `:tid`, ` [dev`, then `]`: each separator followed by at least a digit; the pid's value as
    // `parse_ids` reads it (`None` above u32::MAX).
    let (at, pid) = number_after(b, host_end, b":")?;
    let (at, _) = number_after(b, at, b":")?;
    let (at, _) = number_after(b, at, b" [")?;
    (at + 1 == b.len() && b[at] == b']').then_some((&s[..host_end], pid?))
}

/// `sep` at `at`, then a run of digits: where the run ends, and its value.
#[inline(always)]
fn number_after(b: &[u8], at: usize, sep: &[u8]) -> Option<(usize, Option<u32>)> {
    let rest = b.get(at..)?.strip_prefix(sep)?;
    let (digits, value) = leading_number(rest);
    (digits > 0).then_some((at + sep.len() + digits, value))
}

#[inline(always)]
fn skip_back(b: &[u8], end: usize, keep: impl Fn(u8) -> bool) -> usize {
    let mut i = end;
    while i > 0 && keep(b[i - 1]) {
        i -= 1;
    }
    i
}

/// Classifies the text after `NCCL INFO `.
pub fn classify(msg: &str) -> Event<'_> {
    classify_at(msg, VIA.find(msg.as_bytes()))
}

/// [`classify`] given where the first ` via ` in `msg` is.
fn classify_at(msg: &str, via: Option<usize>) -> Event<'_> {
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

fn net_name(name: &str) -> Option<&str> {
    let name = name.trim().trim_end_matches('.');
    (!name.is_empty()).then_some(name)
}

/// `NET/<name> : …` lines other than the plugin loader's.
fn classify_net_line<'a>(msg: &'a str, rest: &'a str) -> Event<'a> {
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
fn parse_error_return(msg: &str) -> Option<Event<'_>> {
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
const ERROR_NAMES: [&str; 6] = [
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

fn parse_pxn_gdr(rest: &str) -> Option<Event<'static>> {
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
fn parse_comm_lifecycle(msg: &str) -> Option<Event<'_>> {
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

fn parse_comm_topology(msg: &str) -> Option<Event<'static>> {
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
fn is_graph(msg: &str) -> bool {
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

/// `Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA` and every older shape.
fn parse_channel(msg: &str, via: usize) -> Option<Channel<'_>> {
    // The canonical reading finds the first ` via ` itself: the text it reads before it holds none.
    match canonical_channel(msg, None) {
        Some((channel, path)) => {
            debug_assert_eq!(path - VIA_LEN, via);
            Some(channel)
        }
        None => any_channel(msg, via),
    }
}

/// [`parse_channel`] for every shape: words in any order, older kinds (`Ring`, `Coll`, `CollNet`).
fn any_channel(msg: &str, via: usize) -> Option<Channel<'_>> {
    let head = &msg[..via];
    let path = trim(&msg[via + " via ".len()..]);
    let (kind, rest) = if let Some(r) = head.strip_prefix("Channel ") {
        (ChannelKind::Channel, r)
    } else if let Some(r) = head.strip_prefix("Ring ") {
        (ChannelKind::Ring, r)
    } else if let Some(r) = head.strip_prefix("CollNet ") {
        (ChannelKind::CollNet, r)
    } else if let Some(r) = head.strip_prefix("Coll ") {
        (ChannelKind::CollNet, r)
    } else {
        return None;
    };
    let colon = spaced_colon(rest)?;
    let (number, endpoints) = (&rest[..colon], &rest[colon + 3..]);
    let index = trim(split_byte(number, b'/').map_or(number, |(n, _)| n))
        .parse()
        .ok()?;
    let mut from = None;
    let mut to = None;
    let mut direction = None;
    let mut arrow = false;
    for word in (Words {
        s: endpoints,
        at: 0,
    }) {
        match word {
            "->" => arrow = true,
            "[send]" => direction = Some(Direction::Send),
            "[receive]" => direction = Some(Direction::Receive),
            w => {
                let endpoint = parse_endpoint(w)?;
                if arrow {
                    to = Some(endpoint);
                } else {
                    from = Some(endpoint);
                }
            }
        }
    }
    from?;
    Some(Channel {
        kind,
        index,
        from,
        to,
        direction,
        transport: parse_transport(path),
    })
}

/// The shape NCCL 2.7+ prints, `Channel 17/0 : 105[5] -> 113[5] [send] via <path>`, read in one pass (most
/// of a dense log's lines), with where its path starts. `None` for anything else, which the general reader
/// decides: this accepts a subset of what it does, with the same result
/// (`canonical_lines_read_as_the_general_reader_does`). The text before ` via ` holds no other ` via `.
// Not inlined: inside its caller it cost more instructions (registers spilled around it).
#[inline(never)]
fn canonical_channel<'a>(
    msg: &'a str,
    paths: Option<&mut PathMemo>,
) -> Option<(Channel<'a>, usize)> {
    let mut c = Cursor::new(msg);
    if !c.eat(b"Channel ") {
        return None;
    }
    let index = c.number()?;
    if c.eat(b"/") {
        c.number()?;
    }
    if !c.eat(b" : ") {
        return None;
    }
    let from = c.endpoint()?;
    if !c.eat(b" -> ") {
        return None;
    }
    let to = c.endpoint()?;
    let direction = if c.eat(b" [send]") {
        Some(Direction::Send)
    } else if c.eat(b" [receive]") {
        Some(Direction::Receive)
    } else {
        None
    };
    if !c.eat(b" via ") {
        return None;
    }
    let channel = Channel {
        kind: ChannelKind::Channel,
        index,
        from: Some(from),
        to: Some(to),
        direction,
        transport: match paths {
            Some(paths) => paths.transport(trim(&msg[c.at..])),
            None => parse_transport(trim(&msg[c.at..])),
        },
    };
    Some((channel, c.at))
}

/// A segment that is one canonical channel record (`host:pid:tid [dev] NCCL INFO Channel …`, the token at
/// `first_nccl`), read without the general reader's searches; `None` for any other segment, including one
/// where another token or Ray's repeat suffix follows the path. Its prefix and path are read through `memo` where
/// the caller keeps one.
#[inline(always)]
fn canonical_record<'a>(
    segment: &'a str,
    first_nccl: usize,
    mut memo: Option<&mut LineMemo>,
) -> Option<Record<'a>> {
    let bytes = segment.as_bytes();
    if token_at(bytes, first_nccl)? != Level::Info {
        return None;
    }
    let msg = segment.get(first_nccl + TOKEN_LEN + 1..)?;
    let (channel, path) = canonical_channel(msg, memo.as_mut().map(|m| &mut m.paths))?;
    // The general reader trims the message first: a path of spaces leaves no ` via ` there.
    let end = trim_end(msg).len();
    if end <= path || holds_nccl(&msg.as_bytes()[path..]) || msg.as_bytes()[end - 1] == b']' {
        return None;
    }
    let prefix = match memo {
        Some(memo) => memo.info_prefix(segment, first_nccl),
        None => parse_prefix(&segment[..first_nccl], Level::Info),
    };
    Some(Record {
        host: prefix.host,
        pid: prefix.pid,
        repeat: 1,
        event: Event::Channel(channel),
    })
}

/// Whether `NCCL` is in `b` (a path and what follows it): the bytes after the first are tested for an `N`
/// eight at a time, and compared only where one is (a window compare at every byte was 3% of a dense log's
/// instructions).
#[inline(always)]
fn holds_nccl(b: &[u8]) -> bool {
    const SPREAD_N: u64 = 0x0101_0101_0101_0101 * b'N' as u64;
    let has_n = |word: u64| {
        let x = word ^ SPREAD_N;
        x.wrapping_sub(0x0101_0101_0101_0101) & !x & HIGH_BITS != 0
    };
    if b.starts_with(b"NCCL") {
        return true;
    }
    let rest = b.get(1..).unwrap_or_default();
    let word_at = |at: usize| {
        rest[at..]
            .first_chunk::<8>()
            .map_or(0, |w| u64::from_le_bytes(*w))
    };
    let any_n = if rest.len() < 8 {
        rest.contains(&b'N')
    } else {
        // Words from the start, the last one ending at the end (overlapping the one before it).
        let last = rest.len() - 8;
        let mut at = 0;
        while at < last && !has_n(word_at(at)) {
            at += 8;
        }
        has_n(word_at(at.min(last)))
    };
    any_n && b.windows(4).any(|w| w == b"NCCL")
}

/// A forward reader over ASCII fields of a message.
struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Self {
        Cursor { s, at: 0 }
    }

    #[inline(always)]
    fn rest(&self) -> &'a [u8] {
        &self.s.as_bytes()[self.at..]
    }

    /// Steps over `lit` when it comes next.
    #[inline(always)]
    fn eat(&mut self, lit: &[u8]) -> bool {
        let found = self.rest().starts_with(lit);
        if found {
            self.at += lit.len();
        }
        found
    }

    /// Bytes while `keep` holds.
    #[inline(always)]
    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a str {
        let n = self.rest().iter().take_while(|&&b| keep(b)).count();
        let taken = sub(self.s, self.at, self.at + n);
        self.at += n;
        taken
    }

    /// Decimal digits (at least one) as a `u32`; `None` when absent or too large.
    #[inline(always)]
    fn number(&mut self) -> Option<u32> {
        let (digits, value) = leading_number(self.rest());
        self.at += digits;
        value
    }

    /// `105[5]` or `105`; the bracket holds letters and digits only (any other text: not this shape).
    #[inline(always)]
    fn endpoint(&mut self) -> Option<Endpoint<'a>> {
        let rank = self.number()?;
        let bracket = if self.eat(b"[") {
            let inside = self.take_while(|b| b.is_ascii_alphanumeric());
            if !self.eat(b"]") {
                return None;
            }
            Some(inside)
        } else {
            None
        };
        Some(Endpoint { rank, bracket })
    }
}

const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that is an ASCII digit, all eight at once (no carry crosses a byte):
/// the prefix's digit runs (device, tid, pid), read backwards, are counted a word at a time (a byte loop there
/// cost more instructions; forwards, where the runs are shorter, it costs fewer: [`leading_number`]).
#[inline(always)]
fn digit_bits(word: u64) -> u64 {
    // High bit set iff the low seven bits are >= '0', and iff they are > '9'.
    let at_least_0 = (word | HIGH_BITS).wrapping_sub(0x3030_3030_3030_3030);
    let above_9 = (word & !HIGH_BITS).wrapping_add(0x4646_4646_4646_4646);
    !word & at_least_0 & !above_9 & HIGH_BITS
}

/// The ASCII digits `b` starts with: how many, and their value (`None` when there are none or it exceeds a
/// `u32`). One loop that counts and converts: the numbers read forwards (channel, ranks, device, code) are
/// one to three digits, where counting eight bytes at a time and converting after cost three times as many
/// instructions.
#[inline(always)]
fn leading_number(b: &[u8]) -> (usize, Option<u32>) {
    let mut digits = 0;
    let mut value = 0u64;
    while let Some(&c) = b.get(digits) {
        if !c.is_ascii_digit() {
            break;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
        digits += 1;
    }
    (digits, digit_run_value(&b[..digits], value))
}

/// The value of the digit run `d` as a `u32`, given `wrapped`, the same digits accumulated in a `u64` without
/// overflow checks: exact up to 19 digits (no wrap possible), checked beyond (leading zeros may precede a
/// small number). Saturating at every digit instead cost two instructions a digit.
#[inline(always)]
fn digit_run_value(d: &[u8], wrapped: u64) -> Option<u32> {
    match d.len() {
        0 => None,
        1..=19 => u32::try_from(wrapped).ok(),
        _ => digits_u32(d),
    }
}

/// How many ASCII digits end `b[..end]`.
#[inline(always)]
fn digits_before(b: &[u8], end: usize) -> usize {
    let mut n = 0;
    while end - n >= 8 {
        let chunk = &b[end - n - 8..end - n];
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let non_digits = !digit_bits(word) & HIGH_BITS;
        if non_digits != 0 {
            return n + (non_digits.leading_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + b[..end - n]
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .count()
}

/// `str::parse::<u32>` for bytes the caller knows to be ASCII digits only (none: `None`), without the
/// general parser's sign and radix handling.
#[inline(always)]
fn digits_u32(d: &[u8]) -> Option<u32> {
    // Nine digits cannot overflow: no checked multiply (its latency chain showed in profiles).
    if !d.is_empty() && d.len() <= 9 {
        return Some(d.iter().fold(0, |n, &c| n * 10 + u32::from(c - b'0')));
    }
    d.iter()
        .try_fold(0u32, |n, &c| {
            n.checked_mul(10)?.checked_add(u32::from(c - b'0'))
        })
        .filter(|_| !d.is_empty())
}

/// Where the first ` : ` starts: a colon search, as a substring searcher's setup cost more than the search
/// on these few bytes.
fn spaced_colon(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    memchr::memchr_iter(b':', b)
        .find(|&i| i > 0 && b[i - 1] == b' ' && b.get(i + 1) == Some(&b' '))
        .map(|i| i - 1)
}

/// `str::split_once` for an ASCII byte, without the char searcher's setup: one `memchr` (a byte-by-byte
/// search showed in profiles on device lists of a few dozen bytes).
fn split_byte(s: &str, byte: u8) -> Option<(&str, &str)> {
    let at = memchr::memchr(byte, s.as_bytes())?;
    Some((&s[..at], &s[at + 1..]))
}

/// `str::split_whitespace` (same Unicode whitespace), testing ASCII bytes directly and decoding only
/// non-ASCII chars: the generic version decodes every char and costed a tenth of the time on channel lines.
struct Words<'a> {
    s: &'a str,
    at: usize,
}

impl Words<'_> {
    /// Whether the char at byte `i` (a char boundary) is whitespace, and its length.
    #[inline(always)]
    fn char_at(&self, i: usize) -> (bool, usize) {
        let b = self.s.as_bytes()[i];
        if b.is_ascii() {
            return (is_ascii_space(b), 1);
        }
        self.non_ascii_at(i)
    }

    /// Kept out of line so that the ASCII path above inlines into the loops (it did not with this inside).
    #[cold]
    #[inline(never)]
    fn non_ascii_at(&self, i: usize) -> (bool, usize) {
        let c = self.s[i..].chars().next().unwrap_or(' ');
        (c.is_whitespace(), c.len_utf8())
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let len = self.s.len();
        while self.at < len {
            let (space, n) = self.char_at(self.at);
            if !space {
                break;
            }
            self.at += n;
        }
        if self.at >= len {
            return None;
        }
        let start = self.at;
        while self.at < len {
            let (space, n) = self.char_at(self.at);
            if space {
                break;
            }
            self.at += n;
        }
        Some(&self.s[start..self.at])
    }
}

/// `15`, `15[7]`, `7[b7000]`.
fn parse_endpoint(word: &str) -> Option<Endpoint<'_>> {
    let (rank, bracket) = match split_byte(word, b'[') {
        Some((r, b)) => (r, Some(b.strip_suffix(']')?)),
        None => (word, None),
    };
    Some(Endpoint {
        rank: rank.parse().ok()?,
        bracket,
    })
}

fn parse_transport(path: &str) -> Transport<'_> {
    if let Some(rest) = path.strip_prefix("NET/") {
        return parse_net(rest, false).unwrap_or(Transport::Other(path));
    }
    if let Some(rest) = path.strip_prefix("COLLNET/") {
        return parse_net(rest, true).unwrap_or(Transport::Other(path));
    }
    if let Some(rest) = path.strip_prefix("P2P/") {
        // Known kinds by prefix (a torn line may glue text to the kind), else the word before `/` or `[`.
        const KINDS: [&str; 6] = [
            "IPC",
            "CUMEM",
            "MNNVL",
            "direct pointer",
            "indirect",
            "common device",
        ];
        if let Some(kind) = KINDS.iter().find(|k| rest.starts_with(*k)) {
            return Transport::P2p(&rest[..kind.len()]);
        }
        let kind = rest.split(['/', '[']).next().unwrap_or("").trim();
        return if kind.is_empty() {
            Transport::Other(path)
        } else {
            Transport::P2p(kind)
        };
    }
    if path.starts_with("SHM/") || path.starts_with("direct shared memory") {
        return Transport::Shm;
    }
    Transport::Other(path)
}

/// `<plugin>/<dev>[(<proxy>)][/GDRDMA[(PCI)]][/Shared]` (also `/GDCopy` in 2.3), then nothing or a space.
fn parse_net(rest: &str, collnet: bool) -> Option<Transport<'_>> {
    // The name is a few bytes: a byte loop, where memchr's setup cost more than the search.
    let slash = rest.bytes().position(|b| b == b'/')?;
    let plugin = trim(&rest[..slash]);
    if plugin.is_empty() {
        return None;
    }
    let tail = &rest[slash + 1..];
    let (digits, dev) = leading_number(tail.as_bytes());
    let dev = dev?;
    let mut tail = &tail[digits..];
    let mut proxy = None;
    let mut gdrdma = false;
    let mut shared = false;
    loop {
        if let Some(t) = tail.strip_prefix('(') {
            let (n, value) = leading_number(t.as_bytes());
            if n > 0 && t[n..].starts_with(')') {
                proxy = value;
                tail = &t[n + 1..];
                continue;
            }
        }
        if let Some(t) = tail.strip_prefix("/GDRDMA") {
            gdrdma = true;
            tail = t.strip_prefix("(PCI)").unwrap_or(t);
        } else if let Some(t) = tail.strip_prefix("/Shared") {
            shared = true;
            tail = t;
        } else if let Some(t) = tail.strip_prefix("/GDCopy") {
            tail = t;
        } else {
            break;
        }
    }
    // The path ends at the first space: RCCL goes on with ` comm 0x2035d540 nRanks 02`, a terminal copy pads
    // with spaces before the next record. Anything else left is a line cut or glued mid-path (`NET/IB/0/GD`,
    // `NET/IB/0/GDRDMAgpu-a01:…`): what it said about GDRDMA is lost, so it proves nothing.
    if tail.bytes().next().is_some_and(|b| !is_ascii_space(b)) {
        return None;
    }
    Some(Transport::Net {
        collnet,
        plugin,
        dev,
        proxy,
        gdrdma,
        shared,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of a line without ANSI codes (those borrow from the line; the line is leaked to outlive the test
    /// helper).
    fn records(line: &str) -> Vec<Record<'static>> {
        let line: &'static str = Box::leak(
            line.trim_end_matches(['\n', '\r'])
                .to_string()
                .into_boxed_str(),
        );
        let mut out = Vec::new();
        parse_clean(line, &mut |r| out.push(r));
        out
    }

    fn one(line: &str) -> Record<'static> {
        let mut r = records(line);
        assert_eq!(r.len(), 1, "{line}: {r:?}");
        r.remove(0)
    }

    fn channel(line: &str) -> Channel<'static> {
        match one(line).event {
            Event::Channel(c) => c,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn net<'a>(c: &Channel<'a>) -> (&'a str, u32, Option<u32>, bool, bool) {
        match &c.transport {
            Transport::Net {
                plugin,
                dev,
                proxy,
                gdrdma,
                collnet,
                ..
            } => (plugin, *dev, *proxy, *gdrdma, *collnet),
            t => panic!("not NET: {t:?}"),
        }
    }

    #[test]
    fn channel_v2_3_receive_only_bare_ranks_parses() {
        let c = channel("gpu-a01:1:2 [0] NCCL INFO Ring 00 : 3 -> 0 via NET/IB/0/GDRDMA");
        assert_eq!(c.kind, ChannelKind::Ring);
        assert_eq!(net(&c), ("IB", 0, None, true, false));
        assert_eq!(c.direction, None);
        assert_eq!(c.local_rank(), Some(0));
    }

    #[test]
    fn channel_v2_4_send_bare_ranks_parses() {
        let c = channel("h:1:2 [0] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/Socket/0");
        assert_eq!(net(&c), ("Socket", 0, None, false, false));
        assert_eq!(c.direction, Some(Direction::Send));
        assert_eq!(c.local_rank(), Some(7));
    }

    #[test]
    fn channel_v2_5_bus_id_brackets_parse() {
        let c =
            channel("h:1:2 [0] NCCL INFO Ring 00 : 15[41000] -> 0[1b000] [receive] via NET/IB/0");
        assert_eq!(c.from.unwrap().bracket, Some("41000"));
        assert_eq!(c.local_rank(), Some(0));
        assert!(!net(&c).3);
    }

    #[test]
    fn channel_v2_12_pxn_proxy_is_not_the_device() {
        let c = channel(
            "h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 9[1] [send] via NET/IB/1(3)/GDRDMA",
        );
        assert_eq!(net(&c), ("IB", 1, Some(3), true, false));
    }

    #[test]
    fn channel_v2_26_gdr_pci_and_shared_parse() {
        let c = channel(
            "h:1:2 [0] NCCL INFO Channel 02/1 : 0[0] -> 8[0] [send] via NET/IBext_v8/2/GDRDMA(PCI)/Shared",
        );
        assert_eq!(net(&c), ("IBext_v8", 2, None, true, false));
    }

    #[test]
    fn channel_plugin_name_with_spaces_parses() {
        let c = channel(
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA",
        );
        assert_eq!(net(&c).0, "AWS Libfabric");
        for (name, family) in [
            ("AWS Libfabric", NetFamily::Ofi),
            ("Libfabric", NetFamily::Ofi),
            ("IB", NetFamily::Ib),
            ("IBext_v8", NetFamily::Ib),
            ("UCX", NetFamily::Ib),
            ("SHARP", NetFamily::Ib),
            ("Socket", NetFamily::Socket),
            ("FastSocket", NetFamily::Socket),
            ("TCP", NetFamily::Socket),
            ("GPUDirectTCPX", NetFamily::Plugin),
            ("GPUDirectTCPXO_v7", NetFamily::Plugin),
            ("FasTrak", NetFamily::Plugin),
            ("NCCL RDMA Plugin v6", NetFamily::Plugin),
            ("bnxt_re", NetFamily::Plugin),
        ] {
            assert_eq!(NetFamily::of(name), family, "{name}");
        }
    }

    #[test]
    fn channel_collnet_forms_parse() {
        for line in [
            "h:1:2 [0] NCCL INFO Coll 00 : 0 [send] via COLLNET/SHARP/0/GDRDMA",
            "h:1:2 [0] NCCL INFO CollNet 00 : 0 [receive] via COLLNET/SHARP/0/GDRDMA",
            "h:1:2 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA(PCI)",
        ] {
            let c = channel(line);
            assert_eq!(c.kind, ChannelKind::CollNet);
            assert_eq!(net(&c), ("SHARP", 0, None, true, true));
            assert_eq!(c.local_rank(), Some(0));
        }
    }

    #[test]
    fn channel_intra_node_transports_parse() {
        let cases = [
            ("Ring 00 : 0[0] -> 1[1] via P2P/IPC", Transport::P2p("IPC")),
            (
                "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
                Transport::P2p("CUMEM"),
            ),
            (
                "Ring 00 : 0[0] -> 1[1] via P2P/direct pointer",
                Transport::P2p("direct pointer"),
            ),
            (
                "Channel 00 : 0[1b000] -> 1[1c000] via P2P/indirect/4[b1000]",
                Transport::P2p("indirect"),
            ),
            (
                "Channel 00 : 1[1] -> 2[2] via SHM/direct/direct",
                Transport::Shm,
            ),
            (
                "Ring 00 : 0[0] -> 1[1] via direct shared memory",
                Transport::Shm,
            ),
        ];
        for (msg, want) in cases {
            let c = channel(&format!("h:1:2 [0] NCCL INFO {msg}"));
            assert_eq!(c.transport, want, "{msg}");
            // P2P/SHM lines are printed by the sender (left).
            assert_eq!(c.local_rank(), c.from.map(|e| e.rank), "{msg}");
        }
    }

    #[test]
    fn graph_lines_are_not_channels() {
        for msg in [
            "Ring 00 : 7 -> 0 -> 1",
            "Channel 00/64 : 0 1 2 3",
            "Tree 0 : -1 -> 0 -> 1/-1/-1",
            "Trees [0] -1/-1/-1->0->1 [1] -1/-1/-1->0->",
            " 0 : NET/0 GPU/0 GPU/1 NET/0",
            " 0 : NET/0-0 GPU/0-60 NET/0-0",
            "CollNet Channel 1 rank 0 up 2 down 3",
        ] {
            let r = one(&format!("h:1:2 [0] NCCL INFO {msg}"));
            assert_eq!(r.event, Event::Graph, "{msg}");
        }
        let r = one("h:1:2 [0] NCCL INFO NET/0-0 :GPU/0-60 (3/1.2/PHB) CPU/0-ff (2/1.2/PHB)");
        assert_eq!(r.event, Event::Other);
    }

    #[test]
    fn prefix_host_and_pid_are_read_behind_wrappers() {
        for (line, host) in [
            (
                "[1,4]<stdout>:gpu-c12:8812:8875 [0] NCCL INFO Using network IB",
                "gpu-c12",
            ),
            ("[rank0]:gpu-a01:8812:8875 [0] NCCL INFO Using network IB", "gpu-a01"),
            (
                "(RayWorkerWrapper pid=48213, ip=10.1.2.3) gpu-a01:8812:8875 [0] NCCL INFO Using network IB",
                "gpu-a01",
            ),
            (":8812:8875 [0] NCCL INFO Using network IB", ""),
            ("> gpu-a01:8812:8875 [0] NCCL INFO Using network IB\r", "gpu-a01"),
            (
                "2026-11-29T10:15:02.123456789Z stdout F gpu-a01:8812:8875 [0] NCCL INFO Using network IB",
                "gpu-a01",
            ),
        ] {
            let r = one(line);
            assert_eq!(r.host, Some(host), "{line}");
            assert_eq!(r.pid, Some(8812), "{line}");
            assert_eq!(r.event, Event::NetSelected("IB"), "{line}");
        }
    }

    #[test]
    fn ansi_codes_are_stripped() {
        let line = "\x1b[36m(RayWorkerWrapper pid=1, ip=10.0.0.1)\x1b[0m gpu-a01:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA";
        let mut seen = Vec::new();
        parse_line(line, |r| {
            seen.push((
                r.host.map(str::to_string),
                matches!(r.event, Event::Channel(_)),
            ))
        });
        assert_eq!(seen, vec![(Some("gpu-a01".to_string()), true)]);
    }

    #[test]
    fn ray_repeat_suffix_gives_multiplicity() {
        let r = one("(RayWorkerWrapper pid=1, ip=10.0.0.1) h:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA [repeated 7x across cluster]");
        assert_eq!(r.repeat, 7);
        assert!(matches!(r.event, Event::Channel(_)));
    }

    #[test]
    fn warn_keeps_location_with_spaces() {
        let r = one("gpu-a01:1:2 [3] int ofi_init(ncclDebugLogger_t):1324 NCCL WARN NET/OFI Only EFA provider is supported");
        assert_eq!(
            r.event,
            Event::Warn {
                location: Some("int ofi_init(ncclDebugLogger_t):1324"),
                message: "NET/OFI Only EFA provider is supported"
            }
        );
        let r = one("[2026-11-29 10:15:02] gpu-a01:1:2 [0] transport/net_ib.cc:1345 NCCL WARN NET/IB : Got completion from peer 10.9.0.12<51011> with status=12 opcode=0 len=0 vendor err 129 hca mlx5_0");
        assert_eq!(r.host, Some("gpu-a01"));
        match r.event {
            Event::Warn { location, .. } => assert_eq!(location, Some("transport/net_ib.cc:1345")),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn glued_records_split_at_each_token() {
        let r = records("h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPCh:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA");
        assert_eq!(r.len(), 2);
        assert!(matches!(&r[0].event, Event::Channel(c) if c.transport == Transport::P2p("IPC")));
        assert!(
            matches!(&r[1].event, Event::Channel(c) if matches!(c.transport, Transport::Net { gdrdma: true, .. }))
        );
        // A record after application output on the same line (a hostname glued to letters or digits cannot be
        // told apart from them; after any other character it can).
        let r = records("loss=0.31 step=200|gpu-a02:7:8 [2] NCCL INFO Using network Socket");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].host, Some("gpu-a02"));
    }

    #[test]
    fn version_bare_and_info_forms_parse_pytorch_error_does_not() {
        assert_eq!(
            one("NCCL version 2.18.6+cuda12.2").event,
            Event::Version("2.18.6+cuda12.2")
        );
        assert_eq!(
            one("[1,0]<stdout>:NCCL version 2.4.8+cuda10.1").event,
            Event::Version("2.4.8+cuda10.1")
        );
        assert_eq!(
            one("vm:506:506 [0] NCCL INFO NCCL version 2.28.9+cuda13.0").event,
            Event::Version("2.28.9+cuda13.0")
        );
        let line = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version 2.21.5";
        assert_eq!(one(line).event, Event::NcclError(&line[14..]));
    }

    #[test]
    fn selection_lines_parse_in_every_release_shape() {
        for (msg, want) in [
            ("Using network IB", Event::NetSelected("IB")),
            (
                "Using network AWS Libfabric",
                Event::NetSelected("AWS Libfabric"),
            ),
            (
                "Using internal Network Socket",
                Event::NetSelected("Socket"),
            ),
            (
                "Assigned NET plugin Socket to comm",
                Event::NetSelected("Socket"),
            ),
            (
                "Initialized NET plugin Socket",
                Event::NetPluginInitialized("Socket"),
            ),
            (
                "Failed to initialize NET plugin IB",
                Event::NetPluginFailed("IB"),
            ),
            (
                "NET/Plugin: Loaded net plugin AWS Libfabric (v6)",
                Event::NetPluginLoaded("AWS Libfabric"),
            ),
            ("NET/IB : No device found.", Event::NoDevice("IB")),
            (
                "NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>",
                Event::NetDevices {
                    net: "IB",
                    devices: "",
                },
            ),
            (
                "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB ib0:10.9.0.11<0>",
                Event::NetDevices {
                    net: "IB",
                    devices: "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE",
                },
            ),
            (
                "NET/Socket : Using [0]ib0:10.9.0.11<0>",
                Event::NetDevices {
                    net: "Socket",
                    devices: "[0]ib0:10.9.0.11<0>",
                },
            ),
            (
                "NET/IB: [0] mlx5_0:1/IB ",
                Event::NetDevices {
                    net: "IB",
                    devices: "[0] mlx5_0:1/IB",
                },
            ),
            (
                "Bootstrap : Using eth0:10.1.2.3<0>",
                Event::Bootstrap("eth0:10.1.2.3<0>"),
            ),
            (
                "Bootstrap: Using eth0:10.1.2.3<0>",
                Event::Bootstrap("eth0:10.1.2.3<0>"),
            ),
            (
                "Connected all rings, use ring PXN 0 GDR 1",
                Event::RingPxnGdr {
                    pxn: false,
                    gdr: true,
                },
            ),
            (
                "NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)",
                Event::OfiProvider("efa"),
            ),
            (
                "NET/OFI No eligible providers were found",
                Event::OfiRefused("No eligible providers were found"),
            ),
            (
                "NET/OFI Support for DMA-BUF registrations: true",
                Event::OfiDmabuf(true),
            ),
            (
                "NET/OFI Support for DMA-BUF registrations: false",
                Event::OfiDmabuf(false),
            ),
            (
                "NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR",
                Event::OfiGdrOff {
                    reason: "Could not disable CUDA API usage for HMEM, disabling GDR",
                    instance: None,
                },
            ),
            (
                "NET/OFI Running on p5en.48xlarge platform, topology file /opt/amazon/ofi-nccl/share/aws-ofi-nccl/xml/p5en.48xl-topo.xml",
                Event::OfiPlatform("p5en.48xlarge"),
            ),
            (
                "NET/OFI Running on p4d.24xlarge platform, NCCL_TOPO_FILE environment variable is already set to /etc/topo.xml",
                Event::OfiPlatform("p4d.24xlarge"),
            ),
            (
                "comm 0x55d1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
                Event::CommTopology {
                    nranks: 16,
                    nnodes: 2,
                },
            ),
            ("NET/Plugin: Could not find: libnccl-net.so", Event::Other),
        ] {
            assert_eq!(
                one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
                want,
                "{msg}"
            );
        }
    }

    #[test]
    fn comm_lifecycle_lines_parse_in_every_release_shape() {
        for (msg, comm, rank, nranks, stage) in [
            (
                "comm 0x7f3a10 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE",
                "0x7f3a10",
                0,
                2,
                CommStage::InitComplete,
            ),
            (
                "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d000 - Init COMPLETE",
                "0x5501",
                3,
                16,
                CommStage::InitComplete,
            ),
            (
                "ncclCommInitRank comm 0x5501 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 3d000 commId 0xa1 - Init START",
                "0x5501",
                3,
                16,
                CommStage::InitStart,
            ),
            (
                "ncclCommSplit comm 0x5502 rank 1 nranks 8 cudaDev 1 nvmlDev 1 busId 1c000 parent 0x5501 splitCount 1 color 0 key 1- Init START",
                "0x5502",
                1,
                8,
                CommStage::InitStart,
            ),
            (
                "[Rank 3] ncclCommInitRankConfig comm 0x5503 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 3d000 commId 0xa3 - Init START",
                "0x5503",
                3,
                16,
                CommStage::InitStart,
            ),
            (
                "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d000 - Abort COMPLETE",
                "0x5501",
                3,
                16,
                CommStage::AbortComplete,
            ),
        ] {
            assert_eq!(
                one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
                Event::CommLifecycle {
                    comm,
                    rank,
                    nranks,
                    stage
                },
                "{msg}"
            );
        }
        // Destroy is a normal end; a line cut before the stage is nothing.
        for msg in [
            "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d000 - Destroy COMPLETE",
            "comm 0x5501 rank 3 nranks 16 cudaDev 3 busId 3d0",
        ] {
            assert_eq!(
                one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
                Event::Other,
                "{msg}"
            );
        }
    }

    #[test]
    fn error_returns_and_completion_errors_parse_graph_lines_do_not() {
        for (msg, want) in [
            (
                "transport/net_ib.cc:911 -> 2",
                Event::ErrorReturn {
                    location: "transport/net_ib.cc:911",
                    code: 2,
                },
            ),
            (
                "init.cc:1312 -> 6 [Async thread]",
                Event::ErrorReturn {
                    location: "init.cc:1312",
                    code: 6,
                },
            ),
            (
                "NET/IB : Got completion from peer 10.9.0.12<51011> with error 12, opcode 0, len 0, vendor err 129",
                Event::CompletionError("NET/IB : Got completion from peer 10.9.0.12<51011> with error 12, opcode 0, len 0, vendor err 129"),
            ),
            ("Ring 00 : 7 -> 0 -> 1", Event::Graph),
            ("Tree 0 : -1 -> 0 -> 1/-1/-1", Event::Graph),
            ("a:b -> 2", Event::Other),
        ] {
            assert_eq!(one(&format!("h:1:2 [0] NCCL INFO {msg}")).event, want, "{msg}");
        }
        assert_eq!(
            nccl_error("[rank8]: ncclRemoteError: A call failed"),
            Some("ncclRemoteError: A call failed")
        );
        assert_eq!(nccl_error("export TORCH_NCCL_ASYNC_ERROR_HANDLING=1"), None);
    }

    #[test]
    fn torn_net_transports_are_rejected_not_counted_without_gdrdma() {
        for path in [
            "NET/IB/0/GD",
            "NET/IB/0/GDRDMAgpu-a01:1:3",
            "NET/IB/0x",
            "NET/IB/",
            "NET/IB",
        ] {
            let c = channel(&format!(
                "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via {path}"
            ));
            assert_eq!(c.transport, Transport::Other(path), "{path}");
        }
    }

    #[test]
    fn net_path_ends_at_the_first_space() {
        for (tail, plugin, gdrdma) in [
            // RCCL.
            ("NET/IB/0 comm 0x2035d540 nRanks 02", "IB", false),
            ("NET/IB/1/GDRDMA comm 0x2035d540 nRanks 16", "IB", true),
            // A terminal copy padded with spaces or a tab; a plugin name with a space is not cut.
            ("NET/IB/0/GDRDMA        ", "IB", true),
            ("NET/IB/0/GDRDMA\t x", "IB", true),
            (
                "NET/AWS Libfabric/3/GDRDMA comm 0x1 nRanks 4",
                "AWS Libfabric",
                true,
            ),
        ] {
            let c = channel(&format!(
                "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via {tail}"
            ));
            match c.transport {
                Transport::Net {
                    plugin: p,
                    gdrdma: g,
                    ..
                } => assert_eq!((p, g), (plugin, gdrdma), "{tail}"),
                t => panic!("{tail}: {t:?}"),
            }
        }
        // Glued records padded by a terminal: each one whole.
        let r = records("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA     h:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/IB/1/GDRDMA   ");
        assert_eq!(r.len(), 2);
        for rec in r {
            assert!(
                matches!(
                    rec.event,
                    Event::Channel(Channel {
                        transport: Transport::Net { gdrdma: true, .. },
                        ..
                    })
                ),
                "{rec:?}"
            );
        }
    }

    #[test]
    fn gdr_disabled_lines_keep_the_reason() {
        for msg in [
            "NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx5_0 (no module)",
            "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
            "GPU Direct RDMA Disabled for GPU 1c000 / HCA 0 (distance 7 > 4)",
            "NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
        ] {
            assert_eq!(
                one(&format!("h:1:2 [0] NCCL INFO {msg}")).event,
                Event::GdrDisabled(msg)
            );
        }
    }

    #[test]
    fn fast_trims_match_std() {
        for s in [
            "",
            " ",
            "\t\x0b\x0c\r\n",
            "a",
            " a b ",
            "\u{a0}x\u{a0}",
            " \u{2003} y \u{85}",
            "é ",
            " ü",
            "  two  ",
            " \u{a0}",
            "IB ",
            " Using [0]mlx5_0:1/IB ",
        ] {
            assert_eq!(trim(s), s.trim(), "{s:?}");
            assert_eq!(trim_spaced(s), s.trim(), "{s:?}");
            assert_eq!(trim_end(s), s.trim_end(), "{s:?}");
        }
    }

    /// The one-pass readers (`canonical_channel`, `canonical_record`, the SWAR digit counts) against the
    /// general ones, on canonical lines and on mutations of them that sit at every edge of the shape: where
    /// the fast reading accepts a line, it gives exactly the general reading's records.
    #[test]
    fn canonical_lines_read_as_the_general_reader_does() {
        const SEEDS: [&str; 8] = [
            "gpu-a013:30105:30196 [5] NCCL INFO Channel 17/0 : 105[5] -> 113[5] [send] via NET/IB/2/GDRDMA",
            "gpu-a013:30105:30195 [5] NCCL INFO Channel 07/0 : 105[5] -> 106[6] via P2P/CUMEM/read",
            "h:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/1(3)/GDRDMA(PCI)/Shared",
            "[1,4]<stdout>:node-7:8812:8875 [0] NCCL INFO Channel 01 : 4[1b000] -> 3[b2000] via SHM/direct/direct",
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0 comm 0x2035d540 nRanks 02",
            "h:1:2 [0] NCCL INFO Channel 123456789/1 : 4294967295[0] -> 12345678901[0] via NET/Socket/0",
            "x:99999999:12 [12] NCCL INFO Channel 02/1 : 7 -> 8 [send] via COLLNET/SHARP/0/GDRDMA",
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read [repeated 3x across cluster]",
        ];
        const PIECES: [&str; 16] = [
            " ",
            "  ",
            "\t",
            "\u{a0}",
            "[",
            "]",
            "/",
            ":",
            "0",
            "99999",
            "+",
            "->",
            " via ",
            "NCCL INFO ",
            "é",
            "x",
        ];
        fn general_channel(msg: &str) -> Option<Channel<'_>> {
            VIA.find(msg.as_bytes()).and_then(|v| any_channel(msg, v))
        }
        let mut mutator = Mutator(0x9E37_79B9_7F4A_7C15);
        let mut fast_lines = 0;
        for i in 0..40_000 {
            let mut line = SEEDS[i % SEEDS.len()].to_string();
            for _ in 0..(i / SEEDS.len()) % 4 {
                mutator.mutate(&mut line, &PIECES);
            }
            let Some(hit) = line.find("NCCL") else {
                continue;
            };
            // From byte 0 the one-pass reader never applies (no token there): the general reading.
            let mut general = Vec::new();
            parse_line_from(&line, 0, |r| general.push(format!("{r:?}")));
            let mut fast = Vec::new();
            parse_line_from(&line, hit, |r| fast.push(format!("{r:?}")));
            assert_eq!(fast, general, "{line:?}");
            if canonical_record(&line, hit, None).is_some() {
                fast_lines += 1;
            }
            let msg = line.get(hit + TOKEN_LEN + 1..).unwrap_or_default();
            let msg = trim(msg.split(" [repeated ").next().unwrap_or_default());
            if let Some((c, path)) = canonical_channel(msg, None) {
                assert_eq!(Some(&c), general_channel(msg).as_ref(), "{msg:?}");
                assert_eq!(VIA.find(msg.as_bytes()), Some(path - VIA_LEN), "{msg:?}");
            }
        }
        // The fast reading is not vacuous: unmutated and lightly mutated lines take it.
        assert!(fast_lines > 8_000, "{fast_lines}");
        for s in [
            "",
            "0",
            "12345678",
            "123456789",
            "1234567890",
            "4294967295",
            "4294967296",
            "0004294967295",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551617",
            "0000000000000000000042",
            "99999999999999999999999999",
            "12ab",
            "007x",
            "x1",
        ] {
            let digits = &s[..s.bytes().take_while(u8::is_ascii_digit).count()];
            assert_eq!(
                leading_number(s.as_bytes()),
                (digits.len(), digits.parse().ok()),
                "{s}"
            );
            assert_eq!(digits_u32(digits.as_bytes()), digits.parse().ok(), "{s}");
            let back = digits_before(s.as_bytes(), s.len());
            assert_eq!(
                back,
                s.bytes().rev().take_while(u8::is_ascii_digit).count(),
                "{s}"
            );
        }
        for b in 0..=255u8 {
            let word = u64::from_le_bytes([b, b'5', 0xff, b'0', b'9', b'/', b':', 0x80]);
            let bits = digit_bits(word);
            assert_eq!(bits & 0x80 != 0, b.is_ascii_digit(), "{b:#x}");
            assert_eq!(bits >> 8, 0x0000_0080_8000_8000 >> 8, "{b:#x}");
        }
    }

    /// [`ids_from_start`] against the backward reader, on prefixes and mutations of them at every edge of the
    /// shape (digits, separators, host bytes, overflowing pids, text around it).
    #[test]
    fn prefixes_read_forwards_as_backwards() {
        const SEEDS: [&str; 6] = [
            "gpu-a013:30105:30196 [5]",
            "h:1:2 [0]",
            "node_7-b:4294967295:1 [12]",
            ":1:2 [3]",
            "x:99999999999:12 [1]",
            "h:00000000000000000000007:1 [0]",
        ];
        const PIECES: [&str; 10] = [" ", "[", "]", ":", "0", "9", "-", "é", "x", "\t"];
        let mut mutator = Mutator(0x2545_F491_4F6C_DD1D);
        let mut forward = 0;
        for i in 0..20_000 {
            let mut prefix = SEEDS[i % SEEDS.len()].to_string();
            for _ in 0..(i / SEEDS.len()) % 3 {
                mutator.mutate(&mut prefix, &PIECES);
            }
            let Some((host, pid)) = ids_from_start(&prefix) else {
                continue;
            };
            forward += 1;
            let back = prefix
                .ends_with(']')
                .then(|| parse_ids(&prefix, prefix.len() - 1))
                .flatten();
            assert_eq!(back, Some((0, host, pid)), "{prefix:?}");
        }
        assert!(forward > 5_000, "{forward}");
    }

    /// The prefix memo gives what `parse_prefix` reads, on first sight and on every later one: mutated prefixes
    /// of lengths around the key's size, the same first bytes with another prefix length, and more distinct
    /// prefixes than the table has slots (each slot replaced many times over).
    #[test]
    fn memoized_prefixes_read_as_parse_prefix() {
        const SEEDS: [&str; 5] = [
            "gpu-a013:30105:30196 [5] ",
            "[1,4]<stdout>:gpu-c12:8812:8875 [0] ",
            "h:1:2 [0] ",
            "node-0123456789abcdef:123:456 [7] ",
            "x ",
        ];
        const PIECES: [&str; 8] = [" ", "[", "]", ":", "7", "-", "é", "NCCL INFO "];
        fn fields<'a>(p: &Prefix<'a>) -> (usize, Option<&'a str>, Option<u32>, Option<&'a str>) {
            (p.start, p.host, p.pid, p.location)
        }
        let mut memo = LineMemo::default();
        let mut mutator = Mutator(0x9E37_79B9_7F4A_7C15);
        let mut kept = 0;
        for i in 0..4 * MEMO_SLOTS {
            let mut prefix = SEEDS[i % SEEDS.len()].to_string();
            for _ in 0..(i / SEEDS.len()) % 3 {
                mutator.mutate(&mut prefix, &PIECES);
            }
            // Distinct hosts beyond the slot count, then the token and a message (the key's other bytes).
            prefix.insert_str(0, &format!("{:x}", i % (2 * MEMO_SLOTS)));
            let segment = format!("{prefix}NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC");
            for len in [prefix.len(), prefix.len().saturating_sub(1)] {
                if !segment.is_char_boundary(len) {
                    continue;
                }
                let want = parse_prefix(&segment[..len], Level::Info);
                for _ in 0..2 {
                    let got = memo.info_prefix(&segment, len);
                    assert_eq!(fields(&got), fields(&want), "{segment:?} {len}");
                }
                kept += usize::from(len <= MEMO_KEY_BYTES);
            }
        }
        assert!(kept > MEMO_SLOTS, "{kept}");
    }

    /// The path memo gives what `parse_transport` reads, on first sight and later: mutated paths of every
    /// length around the key's limits, more of them than the table has slots.
    #[test]
    fn memoized_paths_read_as_parse_transport() {
        const PATHS: [&str; 7] = [
            "NET/IB/0/GDRDMA",
            "NET/IB/12",
            "NET/Socket/1",
            "COLLNET/SHARP/0",
            "P2P/CUMEM/read",
            "P2P/IPC",
            "SHM/direct/direct",
        ];
        const PIECES: [&str; 8] = [" ", "/", "(", ")", "7", "é", "GDRDMA", "x"];
        let mut memo = PathMemo::default();
        let mut mutator = Mutator(0x2545_F491_4F6C_DD1D);
        let mut kept = 0;
        for i in 0..5_000 {
            let mut path = PATHS[i % PATHS.len()].to_string();
            for _ in 0..(i / PATHS.len()) % 3 {
                mutator.mutate(&mut path, &PIECES);
            }
            let want = parse_transport(&path);
            for _ in 0..2 {
                assert_eq!(memo.transport(&path), want, "{path:?}");
            }
            kept += usize::from((8..=16).contains(&path.len()));
        }
        assert!(kept > 1_000, "{kept}");
    }

    #[test]
    fn holds_nccl_is_a_window_search() {
        let text = b"NET/IB/0/GDRDMA NCCL NCC N NNCCL xNCCLx";
        for start in 0..text.len() {
            for end in start..=text.len() {
                let b = &text[start..end];
                assert_eq!(holds_nccl(b), b.windows(4).any(|w| w == b"NCCL"), "{b:?}");
            }
        }
    }

    /// Reproducible random edits for the equivalence tests: at a random char boundary, insert one of the
    /// pieces, delete one to three chars, or cut the text there.
    struct Mutator(u64);

    impl Mutator {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn mutate(&mut self, text: &mut String, pieces: &[&str]) {
            let mut at = self.below(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            match self.below(3) {
                0 => text.insert_str(at, pieces[self.below(pieces.len())]),
                1 => {
                    let mut end = (at + 1 + self.below(3)).min(text.len());
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    text.replace_range(at..end, "");
                }
                _ => text.truncate(at),
            }
        }
    }

    /// The reader's shortcuts (the first `NCCL` already found, ` via ` found while looking for the next
    /// token) give the same records as searching from scratch, on lines where the two could differ.
    #[test]
    fn shortcuts_give_the_same_records() {
        for line in [
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
            "NCCL x NCCL version 2.18.6+cuda12.2 h:1:2 [0] NCCL INFO Using network IB",
            "h:1:2 [0] NCCL INFO  via NET/IB/0 Channel 00 : 0 -> 1 via P2P/IPC",
            "h:1:2 [0] NCCL INFO Channel 00 : 0 -> 1 via ",
            "h:1:2 [0] NCCL INFO Channel 00 : 0 -> 1 via\u{a0}",
            "h:1:2 [0] NCCL INFO\u{a0} via P2P/IPC",
            "h:1:2 [0] NCCL INFOvia h:1:2 [0] NCCL WARN via x",
            "h:1:2 [0] NCCL INFO Ring 00 : 0 -> 1 via P2P/IPC [repeated 3x across cluster]",
            "x NCCL INFO",
        ] {
            let mut from_start = Vec::new();
            parse_line_from(line, 0, |r| from_start.push(format!("{r:?}")));
            let mut from_hit = Vec::new();
            parse_line_from(line, line.find("NCCL").unwrap(), |r| {
                from_hit.push(format!("{r:?}"))
            });
            assert_eq!(from_hit, from_start, "{line}");
            // A lone INFO record: classified as by a full search of its message.
            let (first, rest) = line.split_once("NCCL INFO").unwrap();
            if !first.contains("NCCL") && !rest.contains("NCCL") {
                let message = rest.split(" [repeated ").next().unwrap();
                let events: Vec<_> = records(line).into_iter().map(|r| r.event).collect();
                let want: Vec<_> = from_start.iter().map(|_| classify(trim(message))).collect();
                assert_eq!(events, want, "{line}");
            }
        }
    }

    #[test]
    fn noise_and_garbage_give_nothing_or_other() {
        assert!(records("epoch 1 loss 0.2").is_empty());
        assert!(records("").is_empty());
        assert_eq!(one("NCCL INFO").event, Event::Other);
        assert_eq!(
            one("x NCCL WARN").event,
            Event::Warn {
                location: None,
                message: ""
            }
        );
        assert_eq!(
            one("h:1:2 [0] NCCL INFO Channel 00 : x -> y via NET/IB/0").event,
            Event::Other
        );
        assert_eq!(
            one("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/x").event,
            Event::Channel(Channel {
                kind: ChannelKind::Channel,
                index: 0,
                from: Some(Endpoint {
                    rank: 0,
                    bracket: Some("0")
                }),
                to: Some(Endpoint {
                    rank: 1,
                    bracket: Some("0")
                }),
                direction: Some(Direction::Send),
                transport: Transport::Other("NET/IB/x")
            })
        );
    }
}
