//! The one reader of a job's logs: bytes in, numbered lines and the NCCL records they hold out, fed to a
//! [`Sink`] (the [`Analyzer`], or `collective`'s consumers of the same pass). ripgrep's `Searcher` is the model:
//! the [`Reader`] owns the framing (blocks, Docker/CRI decoding, line numbers, cuts), the block index, the
//! line memo and the input statistics; a sink only consumes.
//!
//! Input is read in fixed-size blocks; unless a sink [wants every line](Sink::wants_lines), only lines that
//! contain `NCCL` are decoded and parsed, the rest are counted (line numbers) and skipped. Memory stays flat
//! whatever the input size: the block buffer is fixed and a line longer than [`MAX_LINE_BYTES`] is cut.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use memchr::memmem;
use std::sync::LazyLock;

use super::line::{self, Record, MAX_LINE_BYTES};
use super::positions::{BlockIndex, BlockText};
use super::sink::Sink;
use super::summary::{Analyzer, InputStats, Summary};
use crate::input::{self, Accept};

/// Bytes read per block: well inside a core's L2 cache, which the block stays in through the passes over it
/// (1 MiB, the whole L2 of the cores measured on, read the bench log 3% slower).
const BLOCK_BYTES: usize = 256 << 10;

/// Where an error name (`ncclSystemError`) may start in a line without `NCCL`.
static ERROR_NAME: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"nccl"));

/// What reading dense blocks keeps from one block (and file) to the next: the index's buffers and the line
/// memo.
#[derive(Default)]
struct DenseState {
    index: BlockIndex,
    memo: line::LineMemo,
}

/// Reads the logs of one job, each once, into sinks. Its state (the dense-block index and memo, the input
/// statistics, the files already read) carries over from file to file: a job read as a thousand per-rank
/// files allocates it once.
#[derive(Default)]
pub struct Reader {
    dense: DenseState,
    input: InputStats,
    /// Files read, by device and inode: a file named twice is read once.
    read: HashSet<(u64, u64)>,
}

impl fmt::Debug for Reader {
    // Thousands of memo slots: not worth printing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("input", &self.input)
            .finish_non_exhaustive()
    }
}

/// One read of one log: the reader's statistics and the sink it feeds.
struct Pass<'a, S> {
    sink: &'a mut S,
    input: &'a mut InputStats,
    /// The sink wants every line's text, not only the records.
    lines: bool,
}

/// A line of a clean block (UTF-8 without escapes or carriage returns), and the blocks' line memo.
struct Plain<'t, 'm> {
    text: &'t str,
    memo: &'m mut line::LineMemo,
}

/// A log could not be read to the end.
#[derive(Debug)]
pub enum ReadStop {
    /// Opening failed, or reading failed after `line` whole lines.
    Io { error: io::Error, line: u64 },
    /// The deadline passed; the analysis stopped at this line.
    Deadline { line: u64 },
}

impl fmt::Display for ReadStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadStop::Io { error, line: 0 } => write!(f, "{error}"),
            ReadStop::Io { error, line } => write!(f, "read failed after line {line}: {error}"),
            ReadStop::Deadline { line } => write!(f, "deadline reached at line {line}"),
        }
    }
}

impl std::error::Error for ReadStop {}

/// A log that could not be read to its end.
#[derive(Debug)]
pub struct LogError {
    pub path: String,
    pub stop: ReadStop,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read NCCL log {}: {}", self.path, self.stop)
    }
}

impl std::error::Error for LogError {}

/// Refuses, before anything is read, a log path that cannot be one: missing, a directory, a device (`/dev/zero`
/// would be read forever). Pipes, FIFOs, `/dev/fd/N` (process substitution) and `-` (standard input) are read
/// like files.
pub fn check_log_path(path: &Path) -> Result<(), String> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(format!("{}: no such file", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok(m) if m.file_type().is_fifo() => Ok(()),
        Ok(m) => match input::kind_of(m.file_type()) {
            Some(kind) => Err(format!("{}: is {kind}, not a log", path.display())),
            None => Ok(()),
        },
    }
}

/// Analyses `paths` as the logs of one job (`-` is standard input). These are the user's files, read
/// directly (not through a host root), each file once however many paths name it (the same device and inode).
pub fn analyze_paths(
    paths: &[PathBuf],
    accept: Accept,
    deadline: Option<Instant>,
) -> Result<Summary, LogError> {
    let mut reader = Reader::new();
    let mut analyzer = Analyzer::new();
    for path in paths {
        reader.read_path(&mut analyzer, path, accept, deadline)?;
    }
    Ok(analyzer.finish(reader.into_input()))
}

impl Reader {
    pub fn new() -> Self {
        Self::default()
    }

    /// What was read so far: bytes, lines, files, records.
    pub fn into_input(self) -> InputStats {
        self.input
    }

    /// Reads the log at `path` (`-` is standard input) into `sink`, unless this reader has read that file.
    pub fn read_path(
        &mut self,
        sink: &mut impl Sink,
        path: &Path,
        accept: Accept,
        deadline: Option<Instant>,
    ) -> Result<(), LogError> {
        let name = path.display().to_string();
        let fail = |stop| LogError {
            path: name.clone(),
            stop,
        };
        if path.as_os_str() == "-" {
            return self
                .read(sink, "<stdin>", std::io::stdin().lock(), deadline)
                .map_err(fail);
        }
        let file = input::open(path, accept).map_err(|e| {
            fail(ReadStop::Io {
                error: io::Error::other(e.to_string()),
                line: 0,
            })
        })?;
        self.read_file(sink, &name, file, deadline).map_err(fail)
    }

    /// Reads the open `file` named `name` into `sink`, unless this reader has read that file (under any
    /// name): then it is only listed as repeated.
    pub fn read_file(
        &mut self,
        sink: &mut impl Sink,
        name: &str,
        file: std::fs::File,
        deadline: Option<Instant>,
    ) -> Result<(), ReadStop> {
        let meta = file
            .metadata()
            .map_err(|error| ReadStop::Io { error, line: 0 })?;
        if !self.read.insert((meta.dev(), meta.ino())) {
            self.input.repeated.push(name.to_string());
            return Ok(());
        }
        self.read(sink, name, file, deadline)
    }

    /// Reads `reader` to its end as the log named `source`, into `sink`.
    pub fn read(
        &mut self,
        sink: &mut impl Sink,
        source: &str,
        reader: impl Read,
        deadline: Option<Instant>,
    ) -> Result<(), ReadStop> {
        self.input.add_file(source);
        sink.begin(source);
        let mut pass = Pass {
            lines: sink.wants_lines(),
            sink,
            input: &mut self.input,
        };
        pass.read(&mut self.dense, reader, deadline)
    }
}

impl<S: Sink> Pass<'_, S> {
    fn read(
        &mut self,
        kept: &mut DenseState,
        mut reader: impl Read,
        deadline: Option<Instant>,
    ) -> Result<(), ReadStop> {
        let finder = memmem::Finder::new(b"NCCL");
        let mut buf = vec![0u8; BLOCK_BYTES];
        let mut len = 0;
        let mut line_no = 0u64;
        // Inside a line longer than MAX_LINE_BYTES whose start was already handled: skip to its newline.
        let mut skipping = false;
        // A container runtime's stored log (decided on the first line), with the line it is joining.
        let mut shipped: Option<Option<Shipped>> = None;
        let mut dense = false;
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(ReadStop::Deadline { line: line_no });
            }
            let n = match reader.read(&mut buf[len..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(ReadStop::Io {
                        error,
                        line: line_no,
                    })
                }
            };
            self.input.bytes += n as u64;
            if n == 0 {
                // Last line without a newline.
                if len > 0 {
                    line_no += 1;
                    if !skipping {
                        let shipped = shipped.get_or_insert_with(|| Shipped::sniff(&buf[..len]));
                        self.stored_line(&finder, shipped.as_mut(), line_no, &buf[..len]);
                    }
                }
                if let Some(Some(s)) = &mut shipped {
                    self.flush(&finder, s);
                }
                break;
            }
            len += n;
            let mut start = 0;
            if skipping {
                match memchr::memchr(b'\n', &buf[..len]) {
                    Some(nl) => {
                        skipping = false;
                        start = nl + 1;
                    }
                    None => {
                        len = 0;
                        continue;
                    }
                }
            }
            match memchr::memrchr(b'\n', &buf[start..len]) {
                Some(last) => {
                    let end = start + last + 1;
                    let block = &buf[start..end];
                    let shipped = shipped.get_or_insert_with(|| Shipped::sniff(block));
                    // A runtime's log is searched like a plain one where its block decodes line for line.
                    let decoded =
                        !self.lines && shipped.as_mut().is_some_and(|s| s.decode_block(block));
                    let searched = match shipped {
                        _ if self.lines => None,
                        None => Some(block),
                        Some(s) if decoded => Some(s.decoded.as_slice()),
                        Some(_) => None,
                    };
                    line_no = match searched {
                        Some(text) => {
                            let (last, hits) = self.block(&finder, kept, text, line_no, dense);
                            // Dense: more than one line in four holds `NCCL`.
                            dense = hits as u64 * 4 > last - line_no;
                            last
                        }
                        None => self.every_line(&finder, shipped.as_mut(), block, line_no),
                    };
                    buf.copy_within(end..len, 0);
                    len -= end;
                }
                None => {
                    buf.copy_within(start..len, 0);
                    len -= start;
                }
            }
            if len >= MAX_LINE_BYTES {
                // A line with no newline in sight: look at its start, drop the rest.
                line_no += 1;
                self.input.long_lines_cut += 1;
                let cut = &buf[..MAX_LINE_BYTES];
                let shipped = shipped.get_or_insert_with(|| Shipped::sniff(cut));
                self.stored_line(&finder, shipped.as_mut(), line_no, cut);
                skipping = true;
                len = 0;
            }
        }
        self.input.lines += line_no;
        Ok(())
    }

    /// Complete lines (`block` ends with `\n`). Returns the last line number in it and how many lines held
    /// `NCCL`. `dense`: the block is expected to be mostly NCCL lines (the previous one was).
    fn block(
        &mut self,
        finder: &memmem::Finder<'_>,
        kept: &mut DenseState,
        block: &[u8],
        mut line_no: u64,
        dense: bool,
    ) -> (u64, usize) {
        // Dense blocks: one pass over the block finds its newlines and `N`s and checks it is UTF-8 without
        // escapes or carriage returns, instead of checks on each line (on sparse ones that would read the noise
        // the finder skips).
        if dense {
            let clean = match kept.index.build(block) {
                // SAFETY: ASCII is UTF-8.
                BlockText::Ascii => Some(unsafe { std::str::from_utf8_unchecked(block) }),
                BlockText::NonAscii => std::str::from_utf8(block).ok(),
                BlockText::Escapes => None,
            };
            if let Some(text) = clean {
                return self.clean_block(finder, kept, text, line_no);
            }
        }
        let mut hits = 0;
        let mut counted = 0;
        while let Some(hit) = finder.find(&block[counted..]).map(|h| h + counted) {
            let line_start =
                memchr::memrchr(b'\n', &block[counted..hit]).map_or(counted, |p| counted + p + 1);
            let line_end = memchr::memchr(b'\n', &block[hit..]).map_or(block.len(), |p| hit + p);
            self.lines_without_token(&block[counted..line_start], line_no);
            line_no += count_newlines(&block[counted..line_start]) + 1;
            hits += 1;
            self.token_line(
                finder,
                line_no,
                &block[line_start..line_end],
                None,
                hit - line_start,
            );
            counted = (line_end + 1).min(block.len());
        }
        self.lines_without_token(&block[counted..], line_no);
        (line_no + count_newlines(&block[counted..]), hits)
    }

    /// A dense block known to be UTF-8 without escapes or carriage returns, line by line: there, one pass over
    /// the newlines numbers the lines for free, where searching back from each hit and counting the newlines
    /// between hits cost a fifth of the reading. The newlines and the `N`s (where a line's first `NCCL` can
    /// start) come from the block's index (`kept.index`, built by the caller): a `memchr` call for each on
    /// every short line cost a quarter of the instructions of a dense log's reading.
    fn clean_block(
        &mut self,
        finder: &memmem::Finder<'_>,
        kept: &mut DenseState,
        text: &str,
        mut line_no: u64,
    ) -> (u64, usize) {
        let bytes = text.as_bytes();
        let mut hits = 0;
        let mut start = 0;
        while let Some(end) = kept.index.newline_from(start) {
            line_no += 1;
            let line = &bytes[start..end];
            let mut first_nccl = None;
            let mut from = start;
            while let Some(at) = kept.index.capital_n_from(from).filter(|&at| at < end) {
                if bytes[at..end].starts_with(b"NCCL") {
                    first_nccl = Some(at - start);
                    break;
                }
                from = at + 1;
            }
            match first_nccl {
                Some(hit) => {
                    hits += 1;
                    // Lines end at `\n` bytes, which are char boundaries.
                    let plain = Plain {
                        text: &text[start..end],
                        memo: &mut kept.memo,
                    };
                    self.token_line(finder, line_no, line, Some(plain), hit);
                }
                None => self.lines_without_token(line, line_no - 1),
            }
            start = end + 1;
        }
        (line_no, hits)
    }

    /// A line with `NCCL` at `first_nccl`; `plain` is the same line when the caller scanned it in a clean block.
    #[inline(always)]
    fn token_line(
        &mut self,
        finder: &memmem::Finder<'_>,
        line_no: u64,
        line: &[u8],
        plain: Option<Plain<'_, '_>>,
        first_nccl: usize,
    ) {
        if line.len() > MAX_LINE_BYTES {
            self.input.long_lines_cut += 1;
            self.line(finder, line_no, &line[..MAX_LINE_BYTES]);
        } else if let Some(plain) = plain.filter(|_| line.first() != Some(&b'{')) {
            let ids = self.sink.ids();
            line::parse_plain_line_from(plain.text, first_nccl, ids, plain.memo, |record| {
                self.record(line_no, record)
            });
        } else {
            self.nccl_line(line_no, line, first_nccl);
        }
    }

    /// Complete lines one by one: a container runtime's log (`shipped`: each line decoded, split lines
    /// joined), or any log whose every line the sink wants. Returns the last line number.
    fn every_line(
        &mut self,
        finder: &memmem::Finder<'_>,
        mut shipped: Option<&mut Shipped>,
        block: &[u8],
        mut line_no: u64,
    ) -> u64 {
        // Lines found by `memchr`: a byte-by-byte split cost five instructions a byte.
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', block) {
            let line = &block[start..end];
            start = end + 1;
            line_no += 1;
            if line.len() > MAX_LINE_BYTES {
                self.input.long_lines_cut += 1;
            }
            let line = &line[..line.len().min(MAX_LINE_BYTES)];
            self.stored_line(finder, shipped.as_deref_mut(), line_no, line);
        }
        line_no
    }

    /// One line as stored: decoded and joined when the log is a runtime's, otherwise read as it is.
    fn stored_line(
        &mut self,
        finder: &memmem::Finder<'_>,
        shipped: Option<&mut Shipped>,
        line_no: u64,
        raw: &[u8],
    ) {
        let Some(s) = shipped else {
            return self.line(finder, line_no, raw);
        };
        let (text, split) = s.format.decode(raw);
        if !split && s.joined.is_empty() {
            return self.line(finder, line_no, &text);
        }
        if s.joined.is_empty() {
            s.first_line = line_no;
        }
        let room = MAX_LINE_BYTES.saturating_sub(s.joined.len());
        s.joined.extend_from_slice(&text[..text.len().min(room)]);
        if !split {
            self.flush(finder, s);
        }
    }

    /// Reads the line being joined (also a split line the log ends with).
    fn flush(&mut self, finder: &memmem::Finder<'_>, s: &mut Shipped) {
        if !s.joined.is_empty() {
            let joined = std::mem::take(&mut s.joined);
            self.line(finder, s.first_line, &joined);
            s.joined = joined;
            s.joined.clear();
        }
    }

    /// Lines without `NCCL` (after line `line_no`): only an error name (`ncclSystemError: …`, printed by
    /// frameworks) matters there. One search over lines the reader skips anyway: none when every line is NCCL's.
    fn lines_without_token(&mut self, lines: &[u8], line_no: u64) {
        if lines.is_empty() {
            return;
        }
        let mut from = 0;
        while let Some(hit) = ERROR_NAME.find(&lines[from..]).map(|h| h + from) {
            let start = memchr::memrchr(b'\n', &lines[from..hit]).map_or(from, |p| from + p + 1);
            let end = memchr::memchr(b'\n', &lines[hit..]).map_or(lines.len(), |p| hit + p);
            let text = String::from_utf8_lossy(&lines[start..end.min(start + MAX_LINE_BYTES)]);
            if let Some(message) = line::nccl_error(&text) {
                let record = line::Record {
                    host: None,
                    pid: None,
                    repeat: 1,
                    event: line::Event::NcclError(message),
                };
                self.record(line_no + count_newlines(&lines[..start]) + 1, record);
            }
            from = (end + 1).min(lines.len());
        }
    }

    /// Any line: given to a sink that wants every line, parsed only when it contains `NCCL`.
    fn line(&mut self, finder: &memmem::Finder<'_>, line_no: u64, bytes: &[u8]) {
        if self.lines {
            self.sink.line(line_no, &String::from_utf8_lossy(bytes));
        }
        match finder.find(bytes) {
            Some(hit) => self.nccl_line(line_no, bytes, hit),
            None => self.lines_without_token(bytes, line_no - 1),
        }
    }

    /// A record found on line `line_no`, counted.
    #[inline(always)]
    fn record(&mut self, line_no: u64, record: Record<'_>) {
        self.input.nccl_records += 1;
        self.sink.record(line_no, record);
    }

    /// A line that may hold NCCL records: the caller found the first `NCCL` in it at `first_nccl`.
    fn nccl_line(&mut self, line_no: u64, bytes: &[u8], first_nccl: usize) {
        // A Docker JSON line among plain ones (logs concatenated): decoded, though not joined.
        if bytes.first() == Some(&b'{') {
            if let Some((text, _)) = docker_log(bytes) {
                let text = String::from_utf8_lossy(&text);
                return line::parse_line(&text, |record| self.record(line_no, record));
            }
        }
        // Valid UTF-8 (the usual case) is checked fast and borrowed; anything else is repaired.
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => Cow::Borrowed(t),
            Err(_) => String::from_utf8_lossy(bytes),
        };
        // Repairing invalid UTF-8 may move bytes: then the position found no longer holds.
        let first_nccl = if matches!(text, Cow::Borrowed(_)) {
            first_nccl
        } else {
            0
        };
        line::parse_line_from(&text, first_nccl, |record| self.record(line_no, record));
    }
}

/// A log as a container runtime stores it. `kubectl logs` prints the decoded text; the files under
/// `/var/log/pods` (CRI) and `/var/lib/docker/containers` (json-file) hold this.
struct Shipped {
    format: ShippedFormat,
    /// The pieces of a line the runtime split (CRI `P`, a JSON `log` without `\n`), capped at MAX_LINE_BYTES.
    joined: Vec<u8>,
    first_line: u64,
    /// A block's lines decoded, one for one ([`Shipped::decoded_block`]).
    decoded: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShippedFormat {
    /// `{"log":"…\n","stream":"stderr","time":"…"}`, one per line (Docker's json-file driver).
    DockerJson,
    /// `2026-11-29T10:15:02.123456789Z stderr F <text>` (containerd, CRI-O; `P`: split, more follows).
    Cri,
}

impl Shipped {
    /// The format, from the log's first line; `None` for a plain log.
    fn sniff(block: &[u8]) -> Option<Shipped> {
        let first = block
            .split(|&b| b == b'\n')
            .find(|l| !l.is_empty() && l != b"\r")
            .unwrap_or_default();
        let format = if docker_log(first).is_some() {
            ShippedFormat::DockerJson
        } else if cri_line(first).is_some() {
            ShippedFormat::Cri
        } else {
            return None;
        };
        Some(Shipped {
            format,
            joined: Vec::new(),
            first_line: 0,
            decoded: Vec::new(),
        })
    }

    /// Decodes the complete lines of `block` into `decoded`, one text of as many lines, for the block search a
    /// plain log gets (reading them one by one cost the stored worst case its last tenth). False where a line
    /// must be read on its own: one being joined or split (the runtime cut it), one whose text holds a newline, or one longer
    /// than a line may be (each would shift or cut the numbering).
    fn decode_block(&mut self, block: &[u8]) -> bool {
        if !self.joined.is_empty() {
            return false;
        }
        self.decoded.clear();
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', block) {
            let raw = &block[start..end];
            start = end + 1;
            if raw.len() > MAX_LINE_BYTES {
                return false;
            }
            let (text, split) = self.format.decode(raw);
            if split || memchr::memchr(b'\n', &text).is_some() {
                return false;
            }
            self.decoded.extend_from_slice(&text);
            self.decoded.push(b'\n');
        }
        true
    }
}

impl ShippedFormat {
    /// The text of one stored line, and whether the runtime split the original line there (more follows). A
    /// line not in the format (a torn write, a concatenated plain log) is read as it is.
    fn decode(self, raw: &[u8]) -> (Cow<'_, [u8]>, bool) {
        let decoded = match self {
            ShippedFormat::DockerJson => docker_log(raw),
            ShippedFormat::Cri => cri_line(raw).map(|(text, split)| (Cow::Borrowed(text), split)),
        };
        decoded.unwrap_or((Cow::Borrowed(raw), false))
    }
}

/// Docker's json-file line: its `log` string (escapes decoded) without the final newline, and whether that
/// newline was missing (a line split at 16 KiB).
fn docker_log(raw: &[u8]) -> Option<(Cow<'_, [u8]>, bool)> {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        log: Cow<'a, str>,
    }
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if raw.first() != Some(&b'{') {
        return None;
    }
    let log = serde_json::from_slice::<Line<'_>>(raw).ok()?.log;
    let split = !log.ends_with('\n');
    let text = match log {
        Cow::Borrowed(t) => Cow::Borrowed(t.trim_end_matches(['\n', '\r']).as_bytes()),
        Cow::Owned(t) => Cow::Owned(t.trim_end_matches(['\n', '\r']).as_bytes().to_vec()),
    };
    Some((text, split))
}

/// A CRI log line `<RFC 3339 time> <stdout|stderr> <tags> <text>`: the text, and whether the tags hold `P`
/// (partial: the runtime split the line, the next stored line continues it).
fn cri_line(raw: &[u8]) -> Option<(&[u8], bool)> {
    // `<time> <stream> <tags> <text>`: the first space found by `memchr`, the stream's six bytes and the few
    // of the tags compared in place (splitting the line at every space cost more than the rest of its reading).
    let space = memchr::memchr(b' ', raw)?;
    let (time, rest) = (&raw[..space], &raw[space + 1..]);
    let stream = rest.get(..6)?;
    let rest = rest.get(6..)?.strip_prefix(b" ")?;
    let tags_end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    let (tags, text) = (
        &rest[..tags_end],
        rest.get(tags_end + 1..).unwrap_or_default(),
    );
    cri_fields(time, stream, tags, text)
}

/// [`cri_line`]'s fields judged: a time, a stream, tags `F` or `P` (`:`-separated); the text, and whether `P`.
fn cri_fields<'a>(
    time: &[u8],
    stream: &[u8],
    tags: &[u8],
    text: &'a [u8],
) -> Option<(&'a [u8], bool)> {
    let is_time = time.len() >= 20
        && time[..4].iter().all(u8::is_ascii_digit)
        && time[4] == b'-'
        && time[10] == b'T';
    if !is_time || !matches!(stream, b"stdout" | b"stderr") {
        return None;
    }
    let tags = tags.strip_suffix(b"\r").unwrap_or(tags);
    let mut split = false;
    for tag in tags.split(|&b| b == b':') {
        match tag {
            b"P" => split = true,
            b"F" => {}
            _ => return None,
        }
    }
    Some((text, split))
}

fn count_newlines(s: &[u8]) -> u64 {
    // Byte counters over runs of at most 255 bytes: the compiler vectorises that sixteen bytes to a compare
    // and an add, where a `usize` count per byte vectorised four bytes at a time (most of a sparse log's
    // reading).
    s.chunks(255)
        .map(|run| u64::from(run.iter().fold(0u8, |n, &b| n + u8::from(b == b'\n'))))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::test_lines::*;
    use crate::nccl::{analyze_text as analyze, judge, Verdict};
    use crate::profile::NcclExpect;

    /// A sink that keeps every line.
    #[derive(Default)]
    struct Lines(Vec<(u64, String)>);

    impl Sink for Lines {
        fn begin(&mut self, _: &str) {}
        fn ids(&self) -> line::Ids {
            line::Ids::Always
        }
        fn record(&mut self, _: u64, _: Record<'_>) {}
        fn wants_lines(&self) -> bool {
            true
        }
        fn line(&mut self, line_no: u64, text: &str) {
            self.0.push((line_no, text.to_string()));
        }
    }

    fn lines_of(log: &[u8]) -> Vec<(u64, String)> {
        let mut sink = Lines::default();
        Reader::new().read(&mut sink, "t.log", log, None).unwrap();
        sink.0
    }

    #[test]
    fn a_sink_of_every_line_gets_each_once_numbered_and_cut() {
        let seen = lines_of(b"a\n\nbc");
        assert_eq!(seen, [(1, "a".into()), (2, "".into()), (3, "bc".into())]);
        assert!(lines_of(b"").is_empty());
        // Inside one block, across a block's end, and longer than a block.
        for len in [5, MAX_LINE_BYTES, MAX_LINE_BYTES + 7, 3 * BLOCK_BYTES] {
            let mut log = vec![b'x'; len];
            log.extend_from_slice(b"\nend\n");
            let seen = lines_of(&log);
            assert_eq!(seen.len(), 2, "{len}");
            assert_eq!(seen[0].1.len(), len.min(MAX_LINE_BYTES), "{len}");
            assert_eq!(seen[1], (2, "end".into()), "{len}");
        }
    }

    #[test]
    fn an_endless_line_stops_at_the_deadline_in_bounded_memory() {
        let deadline = Instant::now() + std::time::Duration::from_millis(200);
        let mut sink = Lines::default();
        let stop = Reader::new().read(&mut sink, "zeros", io::repeat(0), Some(deadline));
        assert!(
            matches!(stop, Err(ReadStop::Deadline { line: 1 })),
            "{stop:?}"
        );
        assert_eq!(sink.0.len(), 1);
        assert_eq!(sink.0[0].1.len(), MAX_LINE_BYTES);
    }

    #[test]
    fn line_numbers_count_noise_and_last_line_without_newline() {
        let text = format!("noise\nmore noise\n{IB_GDR}x\n\ngpu-a01:1:2 [0] x.cc:1 NCCL WARN boom");
        let s = analyze(&text);
        assert_eq!(s.input.lines, 6);
        assert_eq!(s.transports[0].first_seen, "t.log:3");
        assert_eq!(s.warnings[0].line, 6);
        assert_eq!(s.warnings[0].location.as_deref(), Some("x.cc:1"));
    }

    #[test]
    fn huge_line_is_cut_and_following_lines_still_count() {
        let mut text = String::from("NCCL ");
        text.push_str(&"x".repeat(3 * BLOCK_BYTES));
        text.push('\n');
        text.push_str(IB_GDR);
        let s = analyze(&text);
        assert_eq!(s.input.long_lines_cut, 1);
        assert_eq!(s.input.lines, 2);
        assert_eq!(s.verdict, Verdict::IbGdrdma);
        assert_eq!(s.transports[0].first_seen, "t.log:2");
    }

    /// `cri_line`'s field cutting against the plain split it replaced (at the first three spaces), and
    /// `count_newlines` against a byte count, on CRI lines cut and edited at every byte.
    #[test]
    fn cri_fields_and_newline_counts_read_as_plain_loops() {
        fn by_split(raw: &[u8]) -> Option<(&[u8], bool)> {
            let mut fields = raw.splitn(4, |&b| b == b' ');
            let (time, stream, tags) = (fields.next()?, fields.next()?, fields.next()?);
            cri_fields(time, stream, tags, fields.next().unwrap_or_default())
        }
        let seeds: [&[u8]; 4] = [
            b"2026-11-29T10:15:02.123456789Z stderr F gpu-a01:1:2 [0] NCCL INFO x\n",
            b"2026-11-29T10:15:02.1Z stdout P:F a  b",
            b"2026-11-29T10:15:02.1Z stdoutX F a",
            b"2026-11-29T10:15:02.1Z stderr F\r",
        ];
        for seed in seeds {
            for cut in 0..=seed.len() {
                for edit in [None, Some(b' '), Some(b'x'), Some(b'\n')] {
                    let mut raw = seed[..cut].to_vec();
                    if let Some(b) = edit {
                        let at = cut / 2;
                        raw.insert(at.min(raw.len()), b);
                    }
                    assert_eq!(
                        cri_line(&raw),
                        by_split(&raw),
                        "{:?}",
                        String::from_utf8_lossy(&raw)
                    );
                    let newlines = raw.iter().filter(|&&b| b == b'\n').count() as u64;
                    assert_eq!(
                        count_newlines(&raw.repeat(cut + 1)),
                        newlines * (cut as u64 + 1)
                    );
                }
            }
        }
    }

    #[test]
    fn shipped_lines_decode_and_split_lines_join() {
        assert_eq!(
            cri_line(b"2026-11-29T10:15:02.1Z stderr P a b"),
            Some((&b"a b"[..], true))
        );
        assert_eq!(
            cri_line(b"2026-11-29T10:15:02.1Z stdout F"),
            Some((&b""[..], false))
        );
        assert_eq!(cri_line(b"2026-11-29 10:15:02 stdout F x"), None);
        let (text, split) = docker_log(br#"{"log":"a -\u003e b\n","stream":"stderr"}"#).unwrap();
        assert_eq!((&*text, split), (&b"a -> b"[..], false));
        assert!(docker_log(br#"{"log":"a","stream":"stderr"}"#).unwrap().1);
        assert!(docker_log(b"{not json").is_none());
        // A Docker line in a plain log is decoded (not joined); the CRI file's split pieces are joined and
        // numbered by their first line.
        let plain = format!(
            "noise\n{}\n",
            r#"{"log":"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -\u003e 8[0] [send] via NET/IB/0/GDRDMA\n"}"#
        );
        assert_eq!(analyze(&plain).verdict, Verdict::IbGdrdma);
        let cri = "2026-11-29T10:15:02.1Z stdout F x\n\
                   2026-11-29T10:15:02.2Z stdout P h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0\n\
                   2026-11-29T10:15:02.3Z stdout F /GDRDMA\n\
                   2026-11-29T10:15:02.4Z stdout P h:1:2 [0] NCCL WARN cut at the end";
        let s = analyze(cri);
        assert_eq!(s.verdict, Verdict::IbGdrdma);
        assert_eq!(s.transports[0].first_seen, "t.log:2");
        assert_eq!(s.warnings[0].line, 4);
        assert_eq!(s.input.lines, 4);
    }

    /// Blocks dense with NCCL lines take the whole-block path; the records must be those of parsing each line
    /// alone, including blocks that hold escapes, carriage returns, invalid UTF-8 or Docker lines.
    #[test]
    fn dense_blocks_give_the_same_summary_as_line_by_line() {
        let lines: [&[u8]; 7] = [
            b"gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA",
            b"gpu-a02:3:4 [1] NCCL INFO Channel 01/0 : 7[7] -> 8[0] [send] via NET/Socket/1",
            b"gpu-a03:5:6 [2] x.cc:1 NCCL WARN boom",
            b"h:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1",
            // Init outcomes are kept per process: the prefix is read for them (no chain is open here).
            b"h:3:4 [1] NCCL INFO ncclCommInitRank comm 0x55d1 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x9c65 - Init COMPLETE",
            br#"{"log":"h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -\u003e 2[0] [send] via NET/IB/1\n"}"#,
            b"h:1:2 [0] NCCL INFO transport/net_ib.cc:911 -> 2",
        ];
        let mut log = Vec::new();
        let mut i = 0;
        while log.len() < 3 * BLOCK_BYTES {
            log.extend_from_slice(lines[i % lines.len()]);
            // In the first blocks, lines that must leave the fast path: colour, a carriage return, invalid
            // UTF-8; the last block is clean, and takes it.
            match i % 20_000 {
                1000 => log.extend_from_slice(b" \x1b[0m"),
                2000 => log.extend_from_slice(b"\r"),
                3000 => log.extend_from_slice(b" \xff"),
                _ => {}
            }
            log.push(b'\n');
            i += 1;
        }
        let fast = read_all(&[&log]);
        let slow = line_by_line(&log);
        let json = |s: Summary| {
            let mut v = serde_json::to_value(s).unwrap();
            v.as_object_mut().unwrap().remove("input");
            v
        };
        assert_eq!(json(fast), json(slow));
    }

    /// A runtime's stored log gives the summary of the text it stores: CRI and Docker files of a dense log over
    /// several blocks (escapes, a carriage return, a Docker line among the text), read block by block where the
    /// lines decode one for one, and line by line in a block holding a split line (joined with the next).
    #[test]
    fn stored_logs_give_the_summary_of_their_text() {
        let lines: [&str; 6] = [
            "gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA",
            "gpu-a02:3:4 [1] NCCL INFO Channel 01/0 : 7[7] -> 8[0] [send] via NET/Socket/1",
            "gpu-a03:5:6 [2] x.cc:1 NCCL WARN boom",
            "training step 10 loss 0.5 ncclSystemError: unhandled system error",
            r#"{"log":"h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -\u003e 2[0] [send] via NET/IB/1\n"}"#,
            "h:1:2 [0] NCCL INFO transport/net_ib.cc:911 -> 2",
        ];
        let mut text = String::new();
        let (mut cri, mut cri_split, mut docker) = (String::new(), String::new(), String::new());
        let mut i = 0;
        while cri.len() < 4 * BLOCK_BYTES {
            let mut line = lines[i % lines.len()].to_string();
            match i % 20_000 {
                1000 => line.push_str(" \x1b[0m"),
                2000 => line.push('\r'),
                _ => {}
            }
            text.push_str(&line);
            text.push('\n');
            let time = "2026-11-29T10:15:02.123456789Z";
            cri.push_str(&format!("{time} stderr F {line}\n"));
            // In the second block, one line the runtime split in three.
            if i == 40_000 {
                let (a, rest) = line.split_at(10);
                let (b, c) = rest.split_at(10);
                cri_split.push_str(&format!(
                    "{time} stderr P {a}\n{time} stderr P {b}\n{time} stderr F {c}\n"
                ));
            } else {
                cri_split.push_str(&format!("{time} stderr F {line}\n"));
            }
            let log = serde_json::to_string(&format!("{line}\n")).unwrap();
            docker.push_str(&format!(
                "{{\"log\":{log},\"stream\":\"stderr\",\"time\":\"{time}\"}}\n"
            ));
            i += 1;
        }
        let json = |s: Summary| {
            let mut v = serde_json::to_value(s).unwrap();
            v.as_object_mut().unwrap().remove("input");
            v
        };
        let plain = json(read_all(&[text.as_bytes()]));
        assert_eq!(json(read_all(&[docker.as_bytes()])), plain);
        assert_eq!(json(read_all(&[cri.as_bytes()])), plain);
        // The split line is numbered by its first piece: the lines after it in the file are two further on.
        let mut split = json(read_all(&[cri_split.as_bytes()]));
        let mut plain = plain;
        for v in [&mut split, &mut plain] {
            strip_line_numbers(v);
        }
        assert_eq!(split, plain);
    }

    /// Removes every line reference (`line`, `first_seen`, `last_seen`, …) from a summary's JSON.
    fn strip_line_numbers(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.retain(|k, _| !k.contains("line") && !k.contains("seen"));
                map.values_mut().for_each(strip_line_numbers);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip_line_numbers),
            _ => {}
        }
    }

    /// The dense-block state an analyzer keeps from file to file (index buffers, prefix and path memo) gives
    /// each file's lines what reading every line alone gives: two dense logs whose processes share prefixes,
    /// one path changed between them, read one after the other by one analyzer.
    #[test]
    fn dense_state_kept_across_files_reads_each_as_alone() {
        let log = |path: &str| {
            let mut text = String::new();
            let mut i = 0u32;
            while text.len() < 3 * BLOCK_BYTES {
                text.push_str(&format!(
                    "gpu-a{:02}:100:100 [{}] NCCL INFO Channel {:02}/0 : {i}[0] -> {}[0] [send] via {path}\n",
                    i % 7,
                    i % 8,
                    i % 32,
                    i + 1
                ));
                i += 1;
            }
            text
        };
        let (first, second) = (log("NET/IB/0/GDRDMA"), log("NET/Socket/1"));
        let fast = read_all(&[first.as_bytes(), second.as_bytes()]);
        let slow = line_by_line(format!("{first}{second}").as_bytes());
        let transports = |s: Summary| {
            let mut v = serde_json::to_value(s.transports).unwrap();
            for t in v.as_array_mut().unwrap() {
                // The second file numbers its lines from 1 again.
                t.as_object_mut().unwrap().remove("first_seen");
            }
            v
        };
        let (fast, slow) = (transports(fast), transports(slow));
        assert_eq!(fast.as_array().unwrap().len(), 2);
        assert_eq!(fast, slow);
    }

    /// The summary of `logs`, read one after the other by one reader, each as `t.log`.
    fn read_all(logs: &[&[u8]]) -> Summary {
        let (mut reader, mut a) = (Reader::new(), Analyzer::new());
        for log in logs {
            reader.read(&mut a, "t.log", *log, None).unwrap();
        }
        a.finish(reader.into_input())
    }

    /// The reference the block reader is compared with: each line of `log` decoded (Docker's JSON) and parsed
    /// alone, every prefix read (no input statistics).
    fn line_by_line(log: &[u8]) -> Summary {
        let mut slow = Analyzer::new();
        slow.begin("t.log");
        for (n, raw) in log.split(|&b| b == b'\n').enumerate() {
            let decoded = docker_log(raw).map_or(Cow::Borrowed(raw), |(t, _)| t);
            let text = String::from_utf8_lossy(&decoded);
            line::parse_line(&text, |r| slow.record(n as u64 + 1, r));
        }
        slow.finish(InputStats::default())
    }

    /// Dense blocks read topology and device lines without their prefix, except while an error chain is
    /// open: a line of the chain's process ends the chain whatever it says, so two frames with a `Trees` or
    /// `NET/IB : Using` line of the same process between them are two chains, as line by line.
    #[test]
    fn lines_between_error_frames_end_the_chain_as_line_by_line() {
        let cycles: [&[&str]; 4] = [
            &[
                "h:7:8 [0] NCCL INFO transport/net_ib.cc:911 -> 2",
                "h:7:8 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1",
                "h:7:8 [0] NCCL INFO transport/net.cc:79 -> 2",
            ],
            &[
                "h:7:8 [0] NCCL INFO include/net.h:24 -> 2",
                "h:7:8 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>",
                "h:7:8 [0] NCCL INFO misc/socket.cc:50 -> 3",
            ],
            // Another process's topology line between the frames does not end the chain.
            &[
                "h:7:8 [0] NCCL INFO proxy.cc:1 -> 2",
                "h:9:9 [1] NCCL INFO Ring 00 : 0 1",
                "h:7:8 [0] NCCL INFO proxy.cc:2 -> 2",
            ],
            // A frame and a topology line of its process glued on one line (ranks writing to one stream): the
            // chain opened by the first record ends at the second, as when they stand on lines of their own.
            &[
                "h:7:8 [0] NCCL INFO transport/net_ib.cc:911 -> 2 h:7:8 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1",
                "h:7:8 [0] NCCL INFO transport/net.cc:79 -> 2",
            ],
        ];
        for cycle in cycles {
            let mut log = String::new();
            let mut i = 0;
            while log.len() < 3 * BLOCK_BYTES {
                log.push_str(cycle[i % cycle.len()]);
                log.push('\n');
                // Channel lines between the cycles keep the blocks dense and close each chain.
                if i % cycle.len() == cycle.len() - 1 {
                    log.push_str("h:7:8 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n");
                }
                i += 1;
            }
            let (fast, slow) = (read_all(&[log.as_bytes()]), line_by_line(log.as_bytes()));
            assert_eq!(fast.errors_total, slow.errors_total, "{cycle:?}");
            assert_eq!(
                serde_json::to_value(&fast.errors).unwrap(),
                serde_json::to_value(&slow.errors).unwrap(),
                "{cycle:?}"
            );
        }
    }

    /// A reader that hands out pieces of varying size, so lines split across reads at every offset.
    struct Pieces<'a> {
        data: &'a [u8],
        sizes: std::iter::Cycle<std::slice::Iter<'a, usize>>,
    }

    impl Read for Pieces<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = (*self.sizes.next().unwrap())
                .min(out.len())
                .min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// Dense logs (the line-by-line path over clean blocks) give one summary however the reads split them:
    /// lines cut across reads, CRLF lines, invalid UTF-8, noise with an error name, an overlong line, a last
    /// line without a newline; and the line numbers of what they report stay those of the file.
    #[test]
    fn dense_logs_give_one_summary_however_reads_split_them() {
        let lines: [&[u8]; 7] = [
            b"gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA",
            b"gpu-a02:3:4 [1] NCCL INFO Channel 01/0 : 7[7] -> 8[0] [send] via NET/Socket/1",
            b"gpu-a03:5:6 [2] NCCL INFO Trees [0] 1/-1/-1->0->-1",
            b"[rank3]: step 10 | loss 0.2",
            b"gpu-a04:7:8 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/IPC\r",
            b"gpu-a05:9:9 [4] NCCL INFO Channel 03/0 : 5[5] -> 6[6] via P2P/CUMEM \xff",
            b"[rank4]: ncclSystemError: System call (e.g. socket, malloc) failed",
        ];
        let mut log = Vec::new();
        let mut n = 0;
        while log.len() < 3 * BLOCK_BYTES {
            // Mostly the clean lines; now and then the CR and invalid-UTF-8 ones.
            let pick = match n % 997 {
                0 => 4,
                1 => 5,
                2 => 6,
                _ => n % 4,
            };
            log.extend_from_slice(lines[pick]);
            if n == 5000 {
                // One overlong line inside the dense part: cut at MAX_LINE_BYTES, whatever the reads.
                log.extend_from_slice(&[b'y'; MAX_LINE_BYTES + 1000]);
            }
            log.push(b'\n');
            n += 1;
        }
        log.extend_from_slice(b"gpu-a06:1:1 [5] x.cc:9 NCCL WARN last line, no newline");
        let summary = |log: &mut dyn Read| {
            let (mut reader, mut a) = (Reader::new(), Analyzer::new());
            reader.read(&mut a, "t.log", log, None).unwrap();
            serde_json::to_value(a.finish(reader.into_input())).unwrap()
        };
        let whole = summary(&mut log.as_slice());
        for sizes in [
            &[1usize, 7, 64, 4093][..],
            &[BLOCK_BYTES - 3, 70_001, 13],
            &[100_003],
        ] {
            let mut pieces = Pieces {
                data: &log,
                sizes: sizes.iter().cycle(),
            };
            assert_eq!(summary(&mut pieces), whole, "{sizes:?}");
        }
        assert_eq!(whole["input"]["lines"], n + 1);
        assert_eq!(whole["warnings"][0]["line"], n + 1);
        assert_eq!(whole["verdict"], "mixed-socket");
        // The error name in the noise is reported at its own line (the first is line 3).
        assert_eq!(whole["errors"][0]["line"], 3);
        assert_eq!(whole["input"]["long_lines_cut"], 1);
    }

    #[test]
    fn lines_across_block_boundaries_are_whole() {
        // Put a channel line across the first 1 MiB boundary.
        let filler = "a".repeat(99) + "\n";
        let mut text = filler.repeat(BLOCK_BYTES / 100);
        text.truncate(BLOCK_BYTES - 20);
        text.push('\n');
        text.push_str(IB_GDR);
        let s = analyze(&text);
        assert_eq!(s.verdict, Verdict::IbGdrdma);
        assert_eq!(s.transports[0].channels, 1);
    }

    /// Mutated real lines and random bytes through the parser and the analyzer: nothing panics (debug builds
    /// also check arithmetic overflow). The cargo-fuzz target in fuzz/ does the same with coverage guidance.
    #[test]
    fn mutated_and_random_lines_never_panic() {
        const SEEDS: [&[u8]; 8] = [
            b"gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/1(3)/GDRDMA(PCI)/Shared",
            b"[1,4]<stdout>:gpu-c12:8812:8875 [0] NCCL INFO Ring 01 : 4[1b000] -> 3[b2000] [receive] via NET/IB/1/GDRDMA",
            b"[2026-11-29 10:15:02] gpu-a01:1:2 [0] int f(x_t*):12 NCCL WARN NET/OFI Only EFA provider is supported",
            b"\x1b[36m(RayWorkerWrapper pid=1, ip=10.0.0.1)\x1b[0m h:5:6 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA [repeated 7x across cluster]",
            b"NCCL version 2.18.6+cuda12.2",
            b"h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.9.0.11<0>",
            b"h:1:2 [0] NCCL INFO comm 0x55d1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
            b"h:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
        ];
        const TOKENS: [&[u8]; 10] = [
            b"NCCL INFO ",
            b"NCCL WARN ",
            b" via ",
            b"NET/",
            b"/GDRDMA",
            b"(",
            b"[",
            b"]",
            b" -> ",
            b"\r",
        ];
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut log = Vec::new();
        for i in 0..10_000 {
            let mut line: Vec<u8> = if i % 10 == 9 {
                (0..next() % 300).map(|_| next() as u8).collect()
            } else {
                SEEDS[(next() % SEEDS.len() as u64) as usize].to_vec()
            };
            for _ in 0..(next() % 6) {
                let at = (next() as usize) % (line.len() + 1);
                match next() % 4 {
                    0 => line.insert(at, next() as u8),
                    1 if at < line.len() => {
                        line.remove(at);
                    }
                    2 => line.truncate(at),
                    _ => {
                        let t = TOKENS[(next() % TOKENS.len() as u64) as usize];
                        line.splice(at..at, t.iter().copied());
                    }
                }
            }
            line.iter_mut()
                .filter(|b| **b == b'\n')
                .for_each(|b| *b = b' ');
            line::parse_line(&String::from_utf8_lossy(&line), |_| {});
            log.extend_from_slice(&line);
            log.push(b'\n');
        }
        let s = read_all(&[&log]);
        assert_eq!(s.input.lines, 10_000);
        for e in [NcclExpect::Gdrdma, NcclExpect::Ib, NcclExpect::Any] {
            let _ = judge(&s, e);
        }
        // The same lines read as a CRI or a Docker log (the first line decides): decoded, joined, no panic.
        for first in [
            &b"2026-11-29T10:15:02.1Z stderr P "[..],
            br#"{"log":"x","stream":"stderr"}"#,
        ] {
            let shipped = [first, b"\n", &log].concat();
            assert_eq!(read_all(&[&shipped]).input.lines, 10_001);
        }
    }
}
