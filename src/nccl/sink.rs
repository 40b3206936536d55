//! What consumes one pass over a job's logs: the [`Reader`](super::reader::Reader) frames, decodes and
//! numbers the lines and parses the NCCL records once; each [`Sink`] takes what it needs (ripgrep's `Sink`).

use super::line::{Ids, Record};

/// A consumer of the records (and, when it asks, the lines) of the logs one reader reads.
pub trait Sink {
    /// Lines from now on come from the log named `source`.
    fn begin(&mut self, source: &str);

    /// Which records need their host and pid (a dense block's fast path leaves them out where not asked).
    fn ids(&self) -> Ids;

    /// One NCCL record of line `line_no` (numbered from 1 in its log).
    fn record(&mut self, line_no: u64, record: Record<'_>);

    /// Whether [`Sink::line`] wants every line: then the reader hands over each line's text (decoded from a
    /// container runtime's log, cut at `MAX_LINE_BYTES`, `\r` kept) before its records, at some cost to
    /// speed; otherwise only lines that hold `NCCL` are looked at.
    fn wants_lines(&self) -> bool {
        false
    }

    /// One line's text (see [`Sink::wants_lines`]).
    fn line(&mut self, _line_no: u64, _text: &str) {}
}
