//! Framing: where the NCCL records on a line start and end (the `NCCL INFO` / `NCCL WARN` tokens, found
//! whatever a launcher put before them), what their prefix says (`host:pid:tid [dev]`), Ray's repeat suffix,
//! ANSI codes and carriage returns. Each record's message goes to [`classify`](super::classify).

use std::sync::LazyLock;

use memchr::memmem::Finder;

use super::channel::canonical_record;
use super::classify::{classify, classify_at, nccl_error};
use super::memo::LineMemo;
use super::record::{Event, Record};
use super::text::{
    digits_before, digits_u32, is_ascii_space, leading_number, trim, trim_end, trim_spaced,
};

/// Searchers built once: building one per call cost more than the search on short lines.
static NCCL_SP: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"NCCL "));
static VERSION: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"NCCL version "));

/// `NCCL INFO` / `NCCL WARN`: where a record's message starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Info,
    Warn,
}

pub(super) struct Token {
    /// Offset of `NCCL`.
    pos: usize,
    level: Level,
    /// Whether an `NCCL ` that is not a token came before it (from where the search started).
    skipped: bool,
}

pub(super) const TOKEN_LEN: usize = "NCCL INFO".len();
pub(super) const RAY_REPEAT: &str = " [repeated ";
pub(super) const RAY_REPEAT_END: &str = "x across cluster]";

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
pub(super) fn parse_clean<'a>(line: &'a str, emit: &mut impl FnMut(Record<'a>)) {
    if memchr::memchr(b'\r', line.as_bytes()).is_none() {
        return parse_segment(line, 0, Ids::Always, emit);
    }
    for segment in line.split('\r') {
        parse_segment(segment, 0, Ids::Always, emit);
    }
}

/// Removes `ESC [ … <letter>` (CSI) sequences and lone escapes.
pub(super) fn strip_ansi(line: &str) -> String {
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
pub(super) fn parse_segment<'a>(
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

/// Ray's dedup suffix: `… [repeated 7x across cluster]` → (line without it, 7).
#[inline(always)]
pub(super) fn strip_ray_repeat(segment: &str) -> (&str, u32) {
    // Told from the last byte on most lines: an ASCII one that neither is space nor closes the suffix.
    let last = segment.as_bytes().last().copied().unwrap_or(b']');
    if last != b']' && last.is_ascii() && !is_ascii_space(last) {
        return (segment, 1);
    }
    ray_repeat_suffix(segment)
}

#[inline(never)]
pub(super) fn ray_repeat_suffix(segment: &str) -> (&str, u32) {
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

pub(super) fn find_token(s: &str, from: usize) -> Option<Token> {
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
pub(super) fn token_at(bytes: &[u8], pos: usize) -> Option<Level> {
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

pub(super) const VIA_LEN: usize = " via ".len();

/// The next token from `from` and, before it, the first ` via `: one pass over a record's body, where a
/// search for each cost twice the time. Scans for `N` and `v`, which few message bytes are.
pub(super) fn scan_body(bytes: &[u8], from: usize) -> (Option<Token>, Option<usize>) {
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
pub(super) fn bare_version(head: &str) -> Option<&str> {
    let at = VERSION.find(head.as_bytes())?;
    let version = version_token(&head[at + "NCCL version ".len()..])?;
    version.contains("+cuda").then_some(version)
}

pub(super) fn version_token(rest: &str) -> Option<&str> {
    let token = rest.split_whitespace().next()?;
    let token = token.trim_end_matches([',', ';', ')']);
    (token.starts_with(|c: char| c.is_ascii_digit()) && token.contains('.')).then_some(token)
}

/// What precedes the token: `host:pid:tid [dev] ` and, for WARN, `<location> `.
#[derive(Debug, Default)]
pub(super) struct Prefix<'a> {
    /// Where `host` starts in the text given (its length when no prefix was recognised).
    pub(super) start: usize,
    pub(super) host: Option<&'a str>,
    pub(super) pid: Option<u32>,
    pub(super) location: Option<&'a str>,
}

pub(super) fn parse_prefix(before: &str, level: Level) -> Prefix<'_> {
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

/// Parses backwards `host:pid:tid [dev]` whose `]` is at `close`. Returns (start of host, host, pid).
#[inline]
pub(super) fn parse_ids(s: &str, close: usize) -> Option<(usize, &str, u32)> {
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
pub(super) static HOST_BYTES: [bool; 256] = {
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
pub(super) fn is_host_byte(c: u8) -> bool {
    HOST_BYTES[usize::from(c)]
}

/// `s` is exactly `host:pid:tid [dev]`, the prefix as NCCL prints it at the start of a line: read forwards
/// in one pass, where [`parse_ids`] (which also finds it behind a launcher's own prefix) walks back over
/// each field twice. Same result as `parse_ids` wherever this gives one (`prefixes_read_forwards_as_backwards`).
#[inline(always)]
pub(super) fn ids_from_start(s: &str) -> Option<(&str, u32)> {
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
pub(super) fn number_after(b: &[u8], at: usize, sep: &[u8]) -> Option<(usize, Option<u32>)> {
    let rest = b.get(at..)?.strip_prefix(sep)?;
    let (digits, value) = leading_number(rest);
    (digits > 0).then_some((at + sep.len() + digits, value))
}

#[inline(always)]
pub(super) fn skip_back(b: &[u8], end: usize, keep: impl Fn(u8) -> bool) -> usize {
    let mut i = end;
    while i > 0 && keep(b[i - 1]) {
        i -= 1;
    }
    i
}
