//! What reading dense blocks remembers from one line to the next: prefixes and transport paths by their
//! exact bytes, in fixed tables.

use super::channel::parse_transport;
use super::framing::{parse_prefix, Level, Prefix};
use super::record::Transport;
use super::text::sub;

/// What reading a dense block's canonical channel lines keeps for the next lines, by exact bytes, in fixed
/// tables (a slot holds the last text hashed to it), so memory stays flat whatever the log: [`parse_prefix`]'s
/// readings of INFO prefixes of up to [`MEMO_KEY_BYTES`] bytes (a process prints every line with one prefix,
/// `host:pid:tid [dev] `, and reading it again was a quarter of a channel line's cost), and the transport
/// paths' ([`PathMemo`]).
#[derive(Default)]
pub struct LineMemo {
    /// Empty until the first lookup (a reader that never needs it allocates nothing).
    slots: Vec<MemoSlot>,
    pub(super) paths: PathMemo,
}

/// [`parse_transport`]'s readings of transport paths of 8 to 16 bytes (`NET/IB/0/GDRDMA`, `P2P/CUMEM/read`),
/// kept by their bytes in [`PATH_SLOTS`] slots: a job's channel lines use a handful of paths, and reading one
/// again cost a sixth of a channel line. The key is the length and the first and last eight bytes, which
/// together fix every byte of such a path.
#[derive(Default)]
pub(super) struct PathMemo {
    slots: Vec<PathSlot>,
}

#[derive(Clone, Copy, Default)]
pub(super) struct PathSlot {
    /// 0: empty.
    len: u8,
    head: u64,
    tail: u64,
    transport: TransportAt,
}

/// Enough that a handful of paths rarely share a slot.
pub(super) const PATH_SLOTS: usize = 256;

/// A [`Transport`] with offsets into its path for its strings.
#[derive(Clone, Copy, Default)]
pub(super) enum TransportAt {
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

/// [`sub`] for a memo's offsets.
#[inline(always)]
pub(super) fn part_at(text: &str, (from, to): (u8, u8)) -> &str {
    sub(text, usize::from(from), usize::from(to))
}

/// A memo's offsets of `part`, which lies in `text` (at most 32 bytes long).
#[inline(always)]
pub(super) fn span(text: &str, part: &str) -> (u8, u8) {
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
    pub(super) fn transport<'a>(&mut self, path: &'a str) -> Transport<'a> {
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
pub(super) const MEMO_SLOTS: usize = 4096;
pub(super) const MEMO_KEY_BYTES: usize = 32;

/// A prefix's length and the first [`MEMO_KEY_BYTES`] bytes of its segment (together they fix the prefix
/// exactly), and what was read from it, as offsets into the segment.
#[derive(Clone, Copy, Default)]
pub(super) struct MemoSlot {
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
    pub(super) fn info_prefix<'a>(&mut self, segment: &'a str, len: usize) -> Prefix<'a> {
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
