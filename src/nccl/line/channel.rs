//! The channel grammar: `Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA`. The general reader
//! ([`any_channel`], every shape since NCCL 2.3) and the fast path ([`canonical_channel`], the shape 2.7+
//! prints, and [`canonical_record`], a whole canonical line) side by side: the fast path accepts a subset
//! of what the general one does, with the same result (`canonical_lines_read_as_the_general_reader_does`).

use super::framing::{parse_prefix, token_at, Level, TOKEN_LEN, VIA_LEN};
use super::memo::{LineMemo, PathMemo};
use super::record::{Channel, ChannelKind, Direction, Endpoint, Event, Record, Transport};
use super::text::{
    is_ascii_space, leading_number, spaced_colon, split_byte, trim, trim_end, Cursor, Words,
    HIGH_BITS,
};

/// `Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA` and every older shape.
pub(super) fn parse_channel(msg: &str, via: usize) -> Option<Channel<'_>> {
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
pub(super) fn any_channel(msg: &str, via: usize) -> Option<Channel<'_>> {
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
pub(super) fn canonical_channel<'a>(
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
pub(super) fn canonical_record<'a>(
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
pub(super) fn holds_nccl(b: &[u8]) -> bool {
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

/// `15`, `15[7]`, `7[b7000]`.
pub(super) fn parse_endpoint(word: &str) -> Option<Endpoint<'_>> {
    let (rank, bracket) = match split_byte(word, b'[') {
        Some((r, b)) => (r, Some(b.strip_suffix(']')?)),
        None => (word, None),
    };
    Some(Endpoint {
        rank: rank.parse().ok()?,
        bracket,
    })
}

pub(super) fn parse_transport(path: &str) -> Transport<'_> {
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
pub(super) fn parse_net(rest: &str, collnet: bool) -> Option<Transport<'_>> {
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
