//! The records a line holds: what an NCCL message means for the transport analysis, as types.

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

pub(super) fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}
