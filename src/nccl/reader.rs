//! Streaming reader: NCCL log bytes in, numbered lines that may hold NCCL records out, fed to an [`Analyzer`].
//!
//! Input is read in fixed-size blocks; only lines that contain `NCCL` are decoded and parsed, the rest are
//! counted (line numbers) and skipped. Memory stays flat whatever the input size: the block buffer is fixed
//! and a line longer than [`MAX_LINE_BYTES`] is cut.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use memchr::memmem;
use std::sync::LazyLock;

use super::line;
use super::summary::{Analyzer, Summary};

/// Longest line looked at; the rest of a longer line is skipped. NCCL formats each message into 1024 bytes
/// and launchers add a few dozen, so only torn or binary lines reach this.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Bytes read per block.
const BLOCK_BYTES: usize = 1 << 20;

/// Where an error name (`ncclSystemError`) may start in a line without `NCCL`.
static ERROR_NAME: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"nccl"));

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

/// Refuses, before anything is read, a log path that cannot be one: missing, or a directory. Pipes, FIFOs,
/// `/dev/fd/N` (process substitution) and `-` (standard input) are read like files.
pub fn check_log_path(path: &Path) -> Result<(), String> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(format!("{}: no such file", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok(m) if m.is_dir() => Err(format!("{}: is a directory", path.display())),
        Ok(_) => Ok(()),
    }
}

/// Analyses `paths` as the logs of one job (`-` is standard input). These are the user's files, read
/// directly (not through a host root).
pub fn analyze_paths(paths: &[PathBuf], deadline: Option<Instant>) -> Result<Summary, LogError> {
    let mut analyzer = Analyzer::new();
    for path in paths {
        read_one(&mut analyzer, path, deadline)?;
    }
    Ok(analyzer.finish())
}

fn read_one(
    analyzer: &mut Analyzer,
    path: &Path,
    deadline: Option<Instant>,
) -> Result<(), LogError> {
    let name = path.display().to_string();
    let fail = |stop| LogError {
        path: name.clone(),
        stop,
    };
    if path.as_os_str() == "-" {
        return analyzer
            .read("<stdin>", std::io::stdin().lock(), deadline)
            .map_err(fail);
    }
    let file = std::fs::File::open(path).map_err(|error| fail(ReadStop::Io { error, line: 0 }))?;
    analyzer.read(&name, file, deadline).map_err(fail)
}

impl Analyzer {
    /// Reads `reader` to its end as the log named `source`.
    pub fn read(
        &mut self,
        source: &str,
        mut reader: impl Read,
        deadline: Option<Instant>,
    ) -> Result<(), ReadStop> {
        self.start_source(source);
        let finder = memmem::Finder::new(b"NCCL");
        let mut buf = vec![0u8; BLOCK_BYTES];
        let mut len = 0;
        let mut line_no = 0u64;
        // Inside a line longer than MAX_LINE_BYTES whose start was already handled: skip to its newline.
        let mut skipping = false;
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
                        self.line(&finder, line_no, &buf[..len]);
                    }
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
                    line_no = self.block(&finder, &buf[start..end], line_no);
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
                self.line(&finder, line_no, &buf[..MAX_LINE_BYTES]);
                skipping = true;
                len = 0;
            }
        }
        self.input.lines += line_no;
        Ok(())
    }

    /// Complete lines (`block` ends with `\n`). Returns the last line number in it.
    fn block(&mut self, finder: &memmem::Finder<'_>, block: &[u8], mut line_no: u64) -> u64 {
        let mut counted = 0;
        while let Some(hit) = finder.find(&block[counted..]).map(|h| h + counted) {
            let line_start =
                memchr::memrchr(b'\n', &block[counted..hit]).map_or(counted, |p| counted + p + 1);
            let line_end = memchr::memchr(b'\n', &block[hit..]).map_or(block.len(), |p| hit + p);
            self.lines_without_token(&block[counted..line_start], line_no);
            line_no += count_newlines(&block[counted..line_start]) + 1;
            let line = &block[line_start..line_end];
            if line.len() > MAX_LINE_BYTES {
                self.input.long_lines_cut += 1;
                self.line(finder, line_no, &line[..MAX_LINE_BYTES]);
            } else {
                self.nccl_line(line_no, line, hit - line_start);
            }
            counted = (line_end + 1).min(block.len());
        }
        self.lines_without_token(&block[counted..], line_no);
        line_no + count_newlines(&block[counted..])
    }

    /// Lines without `NCCL` (after line `line_no`): only an error name (`ncclSystemError: …`, printed by
    /// frameworks) matters there. One search over lines the reader skips anyway: none when every line is NCCL's.
    fn lines_without_token(&mut self, lines: &[u8], line_no: u64) {
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

    /// Any line: parsed only when it contains `NCCL`.
    fn line(&mut self, finder: &memmem::Finder<'_>, line_no: u64, bytes: &[u8]) {
        match finder.find(bytes) {
            Some(hit) => self.nccl_line(line_no, bytes, hit),
            None => self.lines_without_token(bytes, line_no - 1),
        }
    }

    /// A line that may hold NCCL records: the caller found the first `NCCL` in it at `first_nccl`.
    fn nccl_line(&mut self, line_no: u64, bytes: &[u8], first_nccl: usize) {
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

fn count_newlines(s: &[u8]) -> u64 {
    // Plain loop: the compiler vectorises it; faster than iterating memchr hits on dense newlines.
    s.iter().filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::{analyze_text as analyze, judge, Verdict};
    use crate::profile::NcclExpect;

    const IB_GDR: &str =
        "gpu-a01:1:2 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA\n";

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
        let s = {
            let mut a = Analyzer::new();
            a.read("fuzz", log.as_slice(), None).unwrap();
            a.finish()
        };
        assert_eq!(s.input.lines, 10_000);
        for e in [NcclExpect::Gdrdma, NcclExpect::Ib, NcclExpect::Any] {
            let _ = judge(&s, e);
        }
    }
}
